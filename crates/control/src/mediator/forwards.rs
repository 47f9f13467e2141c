//! Port forwards named by a service's selector. A NAT translates a connection opened
//! from outside to one of its port forwards (`dnat`: `public_ip:public_port` →
//! `to_ip:to_port`) on its way in, and the replies of the target back to the public
//! endpoint on their way out. A service for such connections runs its forward
//! direction from the target towards the outside hosts, and its selector may name the
//! public endpoint as its source (`src: <public_ip>/32, sport: <public_port>`): that is
//! how its frames look after the NAT, but inside it — the chain's stages before the
//! NAT, and the NAT's own stage as frames enter it — they carry the target.
//! [`inside_selector`] gives the selector as the frames carry it there, which every
//! host of the path matches the source side by (after the NAT, the destination side
//! alone is matched, as after a source NAT); what one match cannot express is refused
//! when the service is planned. A selector naming the target itself is kept as it is,
//! and marked as a forward's all the same: a software NAT's own worker then classifies
//! by the destination side, where both ends of the forward meet.

use nfx_model::{Cidr, PortRange, Proto, Selector};
use nfx_vnf::NodeSpec;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// One port forward of a NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Forward {
    proto: Proto,
    public: (IpAddr, u16),
    to: (IpAddr, u16),
}

fn addr(field: &str, s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("nat: {field}: {s:?} is not an IP address"))
}

fn port(field: &str, p: u64) -> Result<u16, String> {
    u16::try_from(p).map_err(|_| format!("nat: {field}: {p} is not a port"))
}

/// The source-NAT address and the port forwards of NAT configuration `config`.
fn forwards_of(config: &serde_json::Value) -> Result<(Option<IpAddr>, Vec<Forward>), String> {
    let Ok(NodeSpec::Nat(nat)) = NodeSpec::from_function("nat", config) else {
        return Err("nat: not a valid nat configuration".into());
    };
    let snat = match &nat.snat {
        Some(s) => Some(addr("snat.public_ip", &s.public_ip)?),
        None => None,
    };
    let mut out = Vec::with_capacity(nat.dnat.len());
    for (i, d) in nat.dnat.iter().enumerate() {
        let at = |f: &str| format!("dnat[{i}].{f}");
        let proto = match d.proto {
            nfx_vnf::spec::Proto::Tcp => Proto::Tcp,
            nfx_vnf::spec::Proto::Udp => Proto::Udp,
            _ => {
                return Err(format!(
                    "nat: {}: only tcp and udp are forwarded",
                    at("proto")
                ))
            }
        };
        let public_ip = match (&d.public_ip, snat) {
            (Some(ip), _) => addr(&at("public_ip"), ip)?,
            (None, Some(ip)) => ip,
            (None, None) => return Err(format!("nat: {}: missing", at("public_ip"))),
        };
        let public_port = port(&at("public_port"), d.public_port)?;
        out.push(Forward {
            proto,
            public: (public_ip, public_port),
            to: (
                addr(&at("to_ip"), &d.to_ip)?,
                port(&at("to_port"), d.to_port.unwrap_or(d.public_port))?,
            ),
        });
    }
    Ok((snat, out))
}

/// The prefix length of one address of `a`'s family.
fn host_len(a: IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

/// `sel` as its frames carry it inside the chain's NAT (configuration `nat`), when it
/// names a port forward: by its public endpoint, the source becomes the selected
/// forwards' target (`to_ip`, the range of their `to_port`s); by its target, `sel`
/// as it is. `None`: the selector's source is no address of the NAT's forwards (its
/// frames carry it inside as well, and no connection is opened from outside). A refusal says why the
/// selected forwards are not one match (several target addresses, target ports that
/// are no range, tcp and udp without `proto`), or why the selector names traffic
/// whose inside source is unknown (the NAT's address with no forward selected, or
/// the source-NAT address with ports that are not all forwarded).
pub(crate) fn inside_selector(
    sel: &Selector,
    nat: Option<&serde_json::Value>,
) -> Result<Option<Selector>, String> {
    let (Some(nat), Some(src)) = (nat, sel.src) else {
        return Ok(None);
    };
    if src.len != host_len(src.addr) {
        return Ok(None);
    }
    let (snat, forwards) = forwards_of(nat)?;
    let is_snat = snat == Some(src.addr);
    let selects = |f: &Forward, (ip, port): (IpAddr, u16)| {
        ip == src.addr
            && sel.proto.is_none_or(|p| p == f.proto)
            && sel.sport.is_none_or(|r| (r.lo..=r.hi).contains(&port))
    };
    if forwards.iter().any(|f| selects(f, f.to)) {
        // The target itself: the frames carry it inside as the selector names it.
        return Ok(Some(sel.clone()));
    }
    let on_addr: Vec<Forward> = forwards
        .into_iter()
        .filter(|f| f.public.0 == src.addr)
        .collect();
    if on_addr.is_empty() && !is_snat {
        return Ok(None);
    }
    let who = format!("selector.src {}", src.addr);
    let named: Vec<Forward> = on_addr
        .into_iter()
        .filter(|f| selects(f, f.public))
        .collect();
    if named.is_empty() {
        return Err(format!(
            "{who} is the NAT's public address but selects none of its port forwards \
             (`dnat`, by selector.proto and selector.sport): frames carry that address only \
             after the NAT; select the inside hosts' addresses, or a forwarded port"
        ));
    }
    let public_ports: BTreeSet<u16> = named.iter().map(|f| f.public.1).collect();
    let all_forwarded = sel
        .sport
        .is_some_and(|r| usize::from(r.hi - r.lo) + 1 == public_ports.len());
    if is_snat && !all_forwarded {
        return Err(format!(
            "{who} is also the NAT's source-NAT address: inside hosts' flows leave with it \
             too, from addresses the selector does not name; selector.sport must name \
             forwarded ports only"
        ));
    }
    let protos: BTreeSet<u8> = named.iter().map(|f| proto_number(f.proto)).collect();
    if protos.len() > 1 {
        return Err(format!(
            "{who}: the selected port forwards are tcp and udp: name selector.proto"
        ));
    }
    let to_ips: BTreeSet<IpAddr> = named.iter().map(|f| f.to.0).collect();
    if to_ips.len() > 1 {
        let list: Vec<String> = to_ips.iter().map(IpAddr::to_string).collect();
        return Err(format!(
            "{who}: the selected port forwards go to several addresses ({}): inside the NAT a \
             service's frames are matched by one source; narrow selector.sport or split the \
             service",
            list.join(", ")
        ));
    }
    let to_ports: BTreeSet<u16> = named.iter().map(|f| f.to.1).collect();
    let (lo, hi) = (to_ports.first().copied(), to_ports.last().copied());
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Ok(None);
    };
    if usize::from(hi - lo) + 1 != to_ports.len() {
        let list: Vec<String> = to_ports.iter().map(u16::to_string).collect();
        return Err(format!(
            "{who}: the selected port forwards' target ports ({}) are not one range: inside \
             the NAT a service's frames are matched by one port range; narrow selector.sport \
             or split the service",
            list.join(", ")
        ));
    }
    let to_ip = named[0].to.0;
    let inside = Selector {
        src: Some(Cidr {
            addr: to_ip,
            len: host_len(to_ip),
        }),
        proto: Some(named[0].proto),
        sport: Some(PortRange { lo, hi }),
        ..sel.clone()
    };
    inside
        .validate()
        .map_err(|e| format!("{who}: inside the NAT, from {to_ip}: {e}"))?;
    Ok(Some(inside))
}

fn proto_number(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
        Proto::Icmp => 1,
        Proto::Number(n) => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(json: serde_json::Value) -> Selector {
        serde_json::from_value(json).unwrap()
    }

    fn nat(dnat: Vec<serde_json::Value>) -> serde_json::Value {
        serde_json::json!({"snat": {"public_ip": "198.51.100.1"}, "dnat": dnat})
    }

    /// A forward of 198.51.100.8:`port`.
    fn fwd(proto: &str, port: u16, to_ip: &str, to_port: u16) -> serde_json::Value {
        serde_json::json!({"proto": proto, "public_ip": "198.51.100.8", "public_port": port,
                           "to_ip": to_ip, "to_port": to_port})
    }

    #[test]
    fn a_forwards_public_endpoint_is_its_target_inside_the_nat() {
        let n = nat(vec![
            fwd("tcp", 8080, "10.0.1.2", 5301),
            fwd("tcp", 8081, "10.0.1.2", 5302),
        ]);
        let s = sel(serde_json::json!(
            {"src": "198.51.100.8/32", "dst": "10.0.2.0/24", "proto": "tcp", "sport": 8080}));
        let inside = inside_selector(&s, Some(&n)).unwrap().unwrap();
        assert_eq!(inside.src.unwrap().to_string(), "10.0.1.2/32");
        assert_eq!(inside.sport.unwrap().to_string(), "5301");
        assert_eq!(
            (inside.dst, inside.dport),
            (s.dst, s.dport),
            "destination side kept"
        );
        // Both forwards (no sport): their targets' ports as one range.
        let both = Selector {
            sport: None,
            ..s.clone()
        };
        let inside = inside_selector(&both, Some(&n)).unwrap().unwrap();
        assert_eq!(inside.sport.unwrap().to_string(), "5301-5302");
        // The target named itself: as it is, still a forward's selector.
        let target = sel(serde_json::json!({"src": "10.0.1.2/32", "proto": "tcp"}));
        assert_eq!(inside_selector(&target, Some(&n)).unwrap(), Some(target));
        // Not the NAT's address, or no NAT in the chain: none.
        let other = sel(serde_json::json!({"src": "10.0.1.9/32", "proto": "tcp"}));
        assert_eq!(inside_selector(&other, Some(&n)).unwrap(), None);
        assert_eq!(inside_selector(&s, None).unwrap(), None);
        let net = sel(serde_json::json!({"src": "198.51.100.0/24", "proto": "tcp"}));
        assert_eq!(inside_selector(&net, Some(&n)).unwrap(), None);
    }

    #[test]
    fn what_one_match_cannot_express_is_refused_with_the_reason() {
        let n = nat(vec![
            fwd("tcp", 8080, "10.0.1.2", 80),
            fwd("tcp", 8081, "10.0.1.3", 81),
            fwd("tcp", 8082, "10.0.1.2", 90),
            fwd("udp", 8080, "10.0.1.2", 81),
            serde_json::json!({"proto": "tcp", "public_port": 9000, "to_ip": "10.0.1.2"}),
        ]);
        let refused = |json: serde_json::Value| inside_selector(&sel(json), Some(&n)).unwrap_err();
        let e = refused(serde_json::json!(
            {"src": "198.51.100.8/32", "proto": "tcp", "sport": "8080-8081"}));
        assert!(e.contains("several addresses (10.0.1.2, 10.0.1.3)"), "{e}");
        let e = refused(serde_json::json!(
            {"src": "198.51.100.8/32", "proto": "tcp", "sport": "8080-8082"}));
        assert!(e.contains("several addresses"), "{e}");
        let e = refused(serde_json::json!({"src": "198.51.100.8/32"}));
        assert!(e.contains("tcp and udp"), "{e}");
        let mut gap = n.clone();
        gap["dnat"].as_array_mut().unwrap().remove(1);
        let e = inside_selector(
            &sel(serde_json::json!(
                {"src": "198.51.100.8/32", "proto": "tcp", "sport": "8080-8082"})),
            Some(&gap),
        )
        .unwrap_err();
        assert!(e.contains("(80, 90) are not one range"), "{e}");
        let e = refused(serde_json::json!(
            {"src": "198.51.100.8/32", "proto": "tcp", "sport": "7000-7001"}));
        assert!(e.contains("selects none of its port forwards"), "{e}");
        // The source-NAT address: only with forwarded ports alone.
        let e = refused(serde_json::json!({"src": "198.51.100.1/32", "proto": "tcp"}));
        assert!(e.contains("source-NAT address"), "{e}");
        let ok = sel(serde_json::json!(
            {"src": "198.51.100.1/32", "proto": "tcp", "sport": 9000}));
        let inside = inside_selector(&ok, Some(&n)).unwrap().unwrap();
        assert_eq!(
            inside.sport.unwrap().to_string(),
            "9000",
            "to_port defaults"
        );
    }
}
