//! The traffic an SA may carry: the CHILD_SA's negotiated traffic selectors, checked on
//! every inner packet (RFC 4301 §5.1 for outbound, §5.2 for inbound). A peer holding the
//! SA's keys can seal any inner packet; without this check it could inject packets from
//! addresses outside what was agreed (spoofing hosts behind the tunnel), and a local
//! process could send traffic the peer never agreed to take through this SA.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nfx_ike::ts::TrafficSelector;
use nfx_packet::ip_tuple;

/// One SA's selectors, local and remote side.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    local: Vec<TrafficSelector>,
    remote: Vec<TrafficSelector>,
    /// Every IPv4 (`[0]`) or IPv6 (`[1]`) packet fits (a statically keyed SA, or
    /// selectors covering the whole family on both sides): the per-packet check is
    /// skipped for that family.
    open: [bool; 2],
}

/// Whether `ts` lets through every IP packet of its family.
fn everything(ts: &TrafficSelector) -> bool {
    let (zero, ones): (IpAddr, IpAddr) = match ts.start {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::BROADCAST.into()),
        IpAddr::V6(_) => (
            Ipv6Addr::UNSPECIFIED.into(),
            Ipv6Addr::from(u128::MAX).into(),
        ),
    };
    ts.proto == 0
        && ts.start_port == 0
        && ts.end_port == u16::MAX
        && ts.start == zero
        && ts.end == ones
}

/// Whether `v` covers the whole of IPv4 (`four`) or IPv6.
fn whole_family(v: &[TrafficSelector], four: bool) -> bool {
    v.iter().any(|t| t.start.is_ipv4() == four && everything(t))
}

impl Selectors {
    /// Every IP packet fits: an SA keyed by hand carries whatever the operator routes
    /// into it.
    pub fn any() -> Self {
        Selectors {
            local: Vec::new(),
            remote: Vec::new(),
            open: [true, true],
        }
    }

    /// The selectors a CHILD_SA was negotiated with.
    pub fn negotiated(local: Vec<TrafficSelector>, remote: Vec<TrafficSelector>) -> Self {
        let open =
            [true, false].map(|four| whole_family(&local, four) && whole_family(&remote, four));
        Selectors {
            local,
            remote,
            open,
        }
    }

    /// Whether inner packet `ip`, read from the TUN, may leave through the SA: its
    /// source is on our side, its destination on the peer's.
    pub fn allows_out(&self, ip: &[u8]) -> bool {
        self.allows(ip, &self.local, &self.remote)
    }

    /// Whether inner packet `ip`, decrypted from the SA, may be delivered: its source is
    /// on the peer's side, its destination on ours.
    pub fn allows_in(&self, ip: &[u8]) -> bool {
        self.allows(ip, &self.remote, &self.local)
    }

    fn allows(&self, ip: &[u8], from: &[TrafficSelector], to: &[TrafficSelector]) -> bool {
        match ip.first().map(|b| b >> 4) {
            Some(4) if self.open[0] => return true,
            Some(6) if self.open[1] => return true,
            _ => {}
        }
        let Some(t) = ip_tuple(ip) else {
            return false;
        };
        let (sport, dport) = (t.ports.map(|p| p.0), t.ports.map(|p| p.1));
        from.iter().any(|s| s.covers(t.src, t.proto, sport))
            && to.iter().any(|s| s.covers(t.dst, t.proto, dport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    fn cidr(s: &str) -> TrafficSelector {
        TrafficSelector::cidr(s).unwrap()
    }

    #[test]
    fn packets_must_match_both_sides_in_their_direction() {
        let s = Selectors::negotiated(vec![cidr("10.1.0.0/24")], vec![cidr("10.2.0.7/32")]);
        let out = udp4([10, 1, 0, 5], [10, 2, 0, 7], 4000, 53);
        let back = udp4([10, 2, 0, 7], [10, 1, 0, 5], 53, 4000);
        assert!(s.allows_out(&out) && s.allows_in(&back));
        // The reverse direction of each is refused.
        assert!(!s.allows_in(&out) && !s.allows_out(&back));
        // A spoofed source from the peer, a destination outside our side.
        assert!(!s.allows_in(&udp4([10, 2, 0, 8], [10, 1, 0, 5], 53, 4000)));
        assert!(!s.allows_in(&udp4([10, 2, 0, 7], [10, 9, 0, 5], 53, 4000)));
        // Not IP at all.
        assert!(!s.allows_in(&[0u8; 28]) && !s.allows_out(&[]));
    }

    #[test]
    fn ports_and_protocol_narrowed_by_the_peer_hold() {
        let mut dns = cidr("10.2.0.0/16");
        (dns.proto, dns.start_port, dns.end_port) = (17, 53, 53);
        let s = Selectors::negotiated(vec![cidr("10.1.0.0/16")], vec![dns]);
        assert!(s.allows_out(&udp4([10, 1, 0, 1], [10, 2, 0, 1], 999, 53)));
        assert!(!s.allows_out(&udp4([10, 1, 0, 1], [10, 2, 0, 1], 999, 54)));
        let mut tcp = udp4([10, 1, 0, 1], [10, 2, 0, 1], 999, 53);
        tcp[9] = 6;
        assert!(!s.allows_out(&tcp));
    }

    #[test]
    fn open_selectors_and_static_keys_let_everything_through() {
        let all = Selectors::negotiated(
            vec![cidr("0.0.0.0/0"), cidr("::/0")],
            vec![cidr("0.0.0.0/0"), cidr("::/0")],
        );
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        for s in [all, Selectors::any()] {
            assert!(s.allows_in(&v6) && s.allows_out(&udp4([1; 4], [2; 4], 1, 2)));
        }
        // IPv4 only: an IPv6 packet is checked (and refused); IPv4 is not parsed.
        let v4 = Selectors::negotiated(vec![cidr("0.0.0.0/0")], vec![cidr("0.0.0.0/0")]);
        assert!(v4.allows_out(&udp4([1; 4], [2; 4], 1, 2)));
        assert!(!v4.allows_out(&v6));
    }
}
