//! The ACL used by both sides of every comparison: rendered as nfx firewall rules (the
//! chain's `firewall:` node) and as the kernel's nftables ruleset, so nfx and the kernel
//! filter with the same ≈100 rules.

use serde_json::{json, Value};
use std::net::Ipv4Addr;

/// TCP port of iperf3 servers (a range of 10 from here is allowed).
pub const IPERF_PORT: u16 = 5201;
/// TCP port of sockperf servers (a range of 10 from here is allowed).
pub const SOCKPERF_PORT: u16 = 11111;
/// UDP port of the nfx generator's sink (a range of 10 from here is allowed).
pub const UDPGEN_PORT: u16 = 9000;
/// A TCP port the ACL denies explicitly (telnet).
pub const DENIED_PORT: u16 = 23;

/// Protocol of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Any protocol.
    Any,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP.
    Icmp,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Any => "any",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
        }
    }
}

/// One rule: first match wins; omitted fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// Protocol.
    pub proto: Proto,
    /// Source prefix, CIDR.
    pub src: Option<String>,
    /// Destination prefix, CIDR.
    pub dst: Option<String>,
    /// Destination port range (inclusive), TCP/UDP only.
    pub dport: Option<(u16, u16)>,
}

/// The standard ACL for a testbed whose inside network address is `inside`
/// (10.b.1.0, a /24):
/// one explicit telnet deny, 94 realistic rules that never match testbed traffic
/// (foreign prefixes, management ports), and allows for iperf3, sockperf, the UDP
/// generator and ICMP from inside. 100 rules; the default is deny.
pub fn standard(inside: Ipv4Addr) -> Vec<Rule> {
    let inside = format!("{inside}/24");
    let mut v = vec![Rule {
        allow: false,
        proto: Proto::Tcp,
        src: None,
        dst: None,
        dport: Some((DENIED_PORT, DENIED_PORT)),
    }];
    const MGMT: [u16; 10] = [22, 3389, 445, 135, 1433, 3306, 5432, 6379, 11211, 27017];
    for i in 0..40u16 {
        let p = MGMT[usize::from(i % 10)];
        v.push(Rule {
            allow: false,
            proto: Proto::Tcp,
            src: Some(format!("172.{}.{}.0/24", 16 + i % 16, (i * 7) % 256)),
            dst: None,
            dport: Some((p, p)),
        });
    }
    const SVC: [(u16, u16); 6] = [
        (53, 53),
        (123, 123),
        (161, 162),
        (500, 500),
        (4500, 4500),
        (1194, 1194),
    ];
    for i in 0..30u16 {
        v.push(Rule {
            allow: true,
            proto: Proto::Udp,
            src: None,
            dst: Some(format!("192.168.{i}.0/24")),
            dport: Some(SVC[usize::from(i % 6)]),
        });
    }
    for i in 0..24u16 {
        let net = if i < 12 { "198.51.100" } else { "203.0.113" };
        v.push(Rule {
            allow: false,
            proto: Proto::Any,
            src: Some(format!("{net}.{}/29", (i % 12) * 8)),
            dst: None,
            dport: None,
        });
    }
    let allow = |proto, dport: Option<(u16, u16)>| Rule {
        allow: true,
        proto,
        src: Some(inside.clone()),
        dst: None,
        dport,
    };
    v.push(allow(Proto::Tcp, Some((IPERF_PORT, IPERF_PORT + 9))));
    v.push(allow(Proto::Udp, Some((IPERF_PORT, IPERF_PORT + 9))));
    v.push(allow(Proto::Tcp, Some((SOCKPERF_PORT, SOCKPERF_PORT + 9))));
    v.push(allow(Proto::Udp, Some((UDPGEN_PORT, UDPGEN_PORT + 9))));
    v.push(allow(Proto::Icmp, None));
    v
}

/// The rules as the nfx firewall's YAML `rules:` list.
pub fn to_nfx(rules: &[Rule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| {
                let mut o = json!({
                    "action": if r.allow { "allow" } else { "deny" },
                    "proto": r.proto.name(),
                });
                if let Some(s) = &r.src {
                    o["src"] = json!(s);
                }
                if let Some(d) = &r.dst {
                    o["dst"] = json!(d);
                }
                if let Some((lo, hi)) = r.dport {
                    o["dport"] = if lo == hi {
                        json!(lo)
                    } else {
                        json!(format!("{lo}-{hi}"))
                    };
                }
                o
            })
            .collect(),
    )
}

/// One rule as an nftables statement.
pub fn to_nft(r: &Rule) -> String {
    let mut parts = Vec::new();
    if let Some(s) = &r.src {
        parts.push(format!("ip saddr {s}"));
    }
    if let Some(d) = &r.dst {
        parts.push(format!("ip daddr {d}"));
    }
    match (r.proto, r.dport) {
        (Proto::Tcp | Proto::Udp, Some((lo, hi))) => {
            let range = if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            };
            parts.push(format!("{} dport {range}", r.proto.name()));
        }
        (Proto::Any, _) => {}
        (p, _) => parts.push(format!("meta l4proto {}", p.name())),
    }
    parts.push(if r.allow { "accept" } else { "drop" }.into());
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_acl_has_100_rules_and_the_telnet_deny_first() {
        let v = standard(Ipv4Addr::new(10, 9, 1, 0));
        assert_eq!(v.len(), 100);
        assert!(!v[0].allow && v[0].dport == Some((23, 23)));
        assert!(v.iter().any(|r| r.allow && r.dport == Some((5201, 5210))));
    }

    #[test]
    fn nfx_rendering() {
        let v = to_nfx(&standard(Ipv4Addr::new(10, 9, 1, 0)));
        assert_eq!(v[0], json!({"action": "deny", "proto": "tcp", "dport": 23}));
        assert_eq!(v[95]["src"], json!("10.9.1.0/24"));
        assert_eq!(v[95]["dport"], json!("5201-5210"));
    }

    #[test]
    fn nft_rendering() {
        let v = standard(Ipv4Addr::new(10, 9, 1, 0));
        assert_eq!(to_nft(&v[0]), "tcp dport 23 drop");
        assert_eq!(to_nft(&v[1]), "ip saddr 172.16.0.0/24 tcp dport 22 drop");
        assert_eq!(
            to_nft(&v[99]),
            "ip saddr 10.9.1.0/24 meta l4proto icmp accept"
        );
        assert_eq!(to_nft(&v[75]), "ip saddr 198.51.100.32/29 drop");
    }
}
