//! Traffic selectors and the first-match classifier that picks a frame's service.
//!
//! A [`Selector`] matches a flow's 5-tuple (in the direction inside → outside) by
//! optional source and destination prefixes (IPv4 or IPv6), IP protocol and source and
//! destination port ranges; an absent field matches everything. A [`Classifier`] holds
//! the selectors of a worker's services in the order they were given and answers the
//! first that matches. Matching is generic over the address family ([`Address`]): the
//! dataplane classifies IPv4 frames (its parser carries IPv4 only), and a selector of
//! the other family never matches.

use nfx_packet::parse::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::FlowKey;
use std::net::IpAddr;

/// An address prefix of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cidr {
    /// IPv4 network and mask (host order).
    V4 {
        /// Network address, host bits zero.
        net: u32,
        /// Prefix mask.
        mask: u32,
    },
    /// IPv6 network and mask.
    V6 {
        /// Network address, host bits zero.
        net: u128,
        /// Prefix mask.
        mask: u128,
    },
}

impl Cidr {
    /// Parses `a.b.c.d/n`, `x:y::/n` or a bare address (a host prefix). A prefix with
    /// host bits set is refused: it most likely says something other than meant.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 or IPv6 address or prefix"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u32 = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("`{s}`: prefix length must be 0..={max}"))?,
        };
        let c = match ip {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                Cidr::V4 {
                    net: u32::from(a),
                    mask,
                }
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                Cidr::V6 {
                    net: u128::from(a),
                    mask,
                }
            }
        };
        let host_bits = match c {
            Cidr::V4 { net, mask } => net & !mask != 0,
            Cidr::V6 { net, mask } => net & !mask != 0,
        };
        if host_bits {
            return Err(format!(
                "`{s}` has host bits set (the network of a /{len} ends in zeros)"
            ));
        }
        Ok(c)
    }

    /// True for an IPv4 prefix.
    pub fn is_v4(&self) -> bool {
        matches!(self, Cidr::V4 { .. })
    }
}

/// An address the classifier can match against a [`Cidr`]: `u32` for IPv4, `u128` for
/// IPv6 (host order, as `From<Ipv6Addr>` gives).
pub trait Address: Copy {
    /// True when the address lies in `c` (never for a prefix of the other family).
    fn within(self, c: &Cidr) -> bool;
}

impl Address for u32 {
    #[inline]
    fn within(self, c: &Cidr) -> bool {
        matches!(*c, Cidr::V4 { net, mask } if self & mask == net)
    }
}

impl Address for u128 {
    #[inline]
    fn within(self, c: &Cidr) -> bool {
        matches!(*c, Cidr::V6 { net, mask } if self & mask == net)
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Parses `80` or `1024-65535`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| format!("`{s}` is not a port (0..=65535) or a range `lo-hi`"))
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if lo > hi {
            return Err(format!("`{s}`: the range is empty ({lo} > {hi})"));
        }
        Ok(Self { lo, hi })
    }

    #[inline]
    fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

/// A flow's 5-tuple in the direction inside → outside, over addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple<A> {
    /// Source address.
    pub src: A,
    /// Destination address.
    pub dst: A,
    /// IP protocol number (IPv6: the upper-layer protocol).
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl From<&FlowKey> for Tuple<u32> {
    #[inline]
    fn from(k: &FlowKey) -> Self {
        Self {
            src: k.src,
            dst: k.dst,
            proto: k.proto,
            sport: k.sport,
            dport: k.dport,
        }
    }
}

/// One service's traffic selector; `None` fields match everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Selector {
    /// Source prefix.
    pub src: Option<Cidr>,
    /// Destination prefix.
    pub dst: Option<Cidr>,
    /// IP protocol number.
    pub proto: Option<u8>,
    /// Source ports (TCP and UDP only).
    pub sport: Option<PortRange>,
    /// Destination ports (TCP and UDP only).
    pub dport: Option<PortRange>,
}

impl Selector {
    /// Checks that the fields can match together: both prefixes of one family, ports
    /// only with TCP, UDP or no protocol. Returns the offending field and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let (Some(s), Some(d)) = (&self.src, &self.dst) {
            if s.is_v4() != d.is_v4() {
                return Err((
                    "dst",
                    "`src` and `dst` are of different address families: nothing would match".into(),
                ));
            }
        }
        let ported = self.sport.is_some() || self.dport.is_some();
        if let Some(p) = self
            .proto
            .filter(|p| ported && *p != IPPROTO_TCP && *p != IPPROTO_UDP)
        {
            return Err((
                "proto",
                format!("ports select TCP or UDP only, not protocol {p}"),
            ));
        }
        Ok(())
    }

    /// True when the tuple matches every given field. Port ranges match TCP and UDP
    /// flows only (an ICMP echo's identifier is no port).
    #[inline]
    pub fn matches<A: Address>(&self, t: &Tuple<A>) -> bool {
        if self.proto.is_some_and(|p| p != t.proto) {
            return false;
        }
        if self.sport.is_some() || self.dport.is_some() {
            if t.proto != IPPROTO_TCP && t.proto != IPPROTO_UDP {
                return false;
            }
            if self.sport.is_some_and(|r| !r.contains(t.sport))
                || self.dport.is_some_and(|r| !r.contains(t.dport))
            {
                return false;
            }
        }
        self.src.is_none_or(|c| t.src.within(&c)) && self.dst.is_none_or(|c| t.dst.within(&c))
    }
}

/// Parses a protocol name (`tcp`, `udp`, `icmp`) or number.
pub fn parse_proto(s: &str) -> Result<u8, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "tcp" => Ok(IPPROTO_TCP),
        "udp" => Ok(IPPROTO_UDP),
        "icmp" => Ok(IPPROTO_ICMP),
        other => other
            .parse()
            .map_err(|_| format!("`{s}` is not tcp, udp, icmp or a protocol number 0..=255")),
    }
}

/// A selector compiled for IPv4 tuples: masks and ranges that an absent field makes
/// match everything, checked without branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct V4Rule {
    src_net: u32,
    src_mask: u32,
    dst_net: u32,
    dst_mask: u32,
    proto: u8,
    any_proto: bool,
    ported: bool,
    sport: (u16, u16),
    dport: (u16, u16),
    /// A prefix of the other family: matches no IPv4 tuple.
    never: bool,
}

impl V4Rule {
    fn new(s: &Selector) -> Self {
        let prefix = |c: Option<Cidr>| match c {
            None => (0, 0, false),
            Some(Cidr::V4 { net, mask }) => (net, mask, false),
            Some(Cidr::V6 { .. }) => (0, 0, true),
        };
        let (src_net, src_mask, v6_src) = prefix(s.src);
        let (dst_net, dst_mask, v6_dst) = prefix(s.dst);
        let range = |r: Option<PortRange>| r.map_or((0, u16::MAX), |r| (r.lo, r.hi));
        Self {
            src_net,
            src_mask,
            dst_net,
            dst_mask,
            proto: s.proto.unwrap_or(0),
            any_proto: s.proto.is_none(),
            ported: s.sport.is_some() || s.dport.is_some(),
            sport: range(s.sport),
            dport: range(s.dport),
            never: v6_src || v6_dst,
        }
    }

    #[inline]
    fn matches(&self, t: &Tuple<u32>) -> bool {
        let has_ports = (t.proto == IPPROTO_TCP) | (t.proto == IPPROTO_UDP);
        let ports = has_ports
            & (self.sport.0 <= t.sport)
            & (t.sport <= self.sport.1)
            & (self.dport.0 <= t.dport)
            & (t.dport <= self.dport.1);
        !self.never
            & (t.src & self.src_mask == self.src_net)
            & (t.dst & self.dst_mask == self.dst_net)
            & (self.any_proto | (t.proto == self.proto))
            & (!self.ported | ports)
    }
}

/// The selectors of a worker's services, in classification order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classifier {
    rules: Vec<Selector>,
    v4: Vec<V4Rule>,
}

impl Classifier {
    /// A classifier trying `rules` in the order given.
    pub fn new(rules: Vec<Selector>) -> Self {
        let v4 = rules.iter().map(V4Rule::new).collect();
        Self { rules, v4 }
    }

    /// Index of the first selector that matches `t` (any family).
    #[inline]
    pub fn first_match<A: Address>(&self, t: &Tuple<A>) -> Option<usize> {
        self.rules.iter().position(|s| s.matches(t))
    }

    /// [`Classifier::first_match`] for an IPv4 tuple, on the compiled selectors (the
    /// dataplane's path).
    #[inline]
    pub fn first_match_v4(&self, t: &Tuple<u32>) -> Option<usize> {
        self.v4.iter().position(|r| r.matches(t))
    }

    /// Number of selectors.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there is no selector (nothing matches).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn v6(s: &str) -> u128 {
        u128::from(s.parse::<Ipv6Addr>().unwrap())
    }

    fn t4(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> Tuple<u32> {
        Tuple {
            src: v4(src),
            dst: v4(dst),
            proto,
            sport,
            dport,
        }
    }

    fn sel(src: Option<&str>, dst: Option<&str>) -> Selector {
        Selector {
            src: src.map(|s| Cidr::parse(s).unwrap()),
            dst: dst.map(|s| Cidr::parse(s).unwrap()),
            ..Selector::default()
        }
    }

    #[test]
    fn prefixes_parse_and_refuse_what_they_should() {
        assert_eq!(
            Cidr::parse("10.153.1.0/24").unwrap(),
            Cidr::V4 {
                net: v4("10.153.1.0"),
                mask: 0xffff_ff00
            }
        );
        assert_eq!(
            Cidr::parse("10.1.2.3").unwrap(),
            Cidr::V4 {
                net: v4("10.1.2.3"),
                mask: u32::MAX
            }
        );
        assert_eq!(
            Cidr::parse("0.0.0.0/0").unwrap(),
            Cidr::V4 { net: 0, mask: 0 }
        );
        assert_eq!(Cidr::parse("::/0").unwrap(), Cidr::V6 { net: 0, mask: 0 });
        assert!(!Cidr::parse("2001:db8::/32").unwrap().is_v4());
        for (bad, needle) in [
            ("10.0.0.1/24", "host bits"),
            ("10.0.0.0/33", "0..=32"),
            ("2001:db8::/129", "0..=128"),
            ("10.0.0/8", "not an IPv4 or IPv6"),
            ("10.0.0.0/x", "prefix length"),
            ("", "not an IPv4"),
        ] {
            let e = Cidr::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn ports_and_protocols_parse() {
        assert_eq!(
            PortRange::parse("1024-65535").unwrap(),
            PortRange {
                lo: 1024,
                hi: 65535
            }
        );
        assert_eq!(
            PortRange::parse("80").unwrap(),
            PortRange { lo: 80, hi: 80 }
        );
        assert!(PortRange::parse("90-80").unwrap_err().contains("empty"));
        assert!(PortRange::parse("65536").is_err());
        assert!(PortRange::parse("a-b").is_err());
        assert_eq!(parse_proto("TCP"), Ok(6));
        assert_eq!(parse_proto("udp"), Ok(17));
        assert_eq!(parse_proto("icmp"), Ok(1));
        assert_eq!(parse_proto("47"), Ok(47));
        assert!(parse_proto("256").is_err());
        assert!(parse_proto("sctp").is_err());
    }

    #[test]
    fn ipv4_prefixes_protocols_and_port_ranges_match() {
        let s = Selector {
            proto: Some(IPPROTO_TCP),
            dport: Some(PortRange::parse("5200-5210").unwrap()),
            ..sel(Some("10.153.1.0/24"), Some("10.153.2.0/24"))
        };
        assert!(s.check().is_ok());
        assert!(s.matches(&t4("10.153.1.9", "10.153.2.2", 6, 40000, 5201)));
        assert!(s.matches(&t4("10.153.1.255", "10.153.2.0", 6, 1, 5210)));
        assert!(
            !s.matches(&t4("10.153.3.9", "10.153.2.2", 6, 40000, 5201)),
            "src"
        );
        assert!(
            !s.matches(&t4("10.153.1.9", "10.153.4.2", 6, 40000, 5201)),
            "dst"
        );
        assert!(
            !s.matches(&t4("10.153.1.9", "10.153.2.2", 17, 40000, 5201)),
            "proto"
        );
        assert!(
            !s.matches(&t4("10.153.1.9", "10.153.2.2", 6, 40000, 5211)),
            "dport"
        );
        let any = Selector::default();
        assert!(any.matches(&t4("1.2.3.4", "5.6.7.8", 1, 0, 0)));
        assert!(any.matches(&Tuple::<u128> {
            src: 1,
            dst: 2,
            proto: 58,
            sport: 0,
            dport: 0
        }));
    }

    #[test]
    fn ports_select_only_tcp_and_udp() {
        let s = Selector {
            sport: Some(PortRange::parse("7").unwrap()),
            ..Selector::default()
        };
        assert!(s.matches(&t4("1.1.1.1", "2.2.2.2", 6, 7, 1)));
        assert!(s.matches(&t4("1.1.1.1", "2.2.2.2", 17, 7, 1)));
        assert!(
            !s.matches(&t4("1.1.1.1", "2.2.2.2", 1, 7, 7)),
            "an ICMP echo id is no port"
        );
        let bad = Selector {
            proto: Some(IPPROTO_ICMP),
            ..s
        };
        assert_eq!(bad.check().unwrap_err().0, "proto");
        let mixed = sel(Some("10.0.0.0/8"), Some("2001:db8::/32"));
        assert_eq!(mixed.check().unwrap_err().0, "dst");
    }

    #[test]
    fn ipv6_prefixes_match_ipv6_only() {
        let s = sel(Some("2001:db8:1::/48"), None);
        let t = |src: &str| Tuple::<u128> {
            src: v6(src),
            dst: v6("2001:db8:2::1"),
            proto: 6,
            sport: 1,
            dport: 2,
        };
        assert!(s.matches(&t("2001:db8:1::5")));
        assert!(s.matches(&t("2001:db8:1:ffff::5")));
        assert!(!s.matches(&t("2001:db8:2::5")));
        assert!(!s.matches(&t4("10.0.0.1", "10.0.0.2", 6, 1, 2)), "family");
        let v6_dst = sel(None, Some("::/0"));
        let c = Classifier::new(vec![s, v6_dst, Selector::default()]);
        assert_eq!(
            c.first_match_v4(&t4("10.0.0.1", "10.0.0.2", 6, 1, 2)),
            Some(2)
        );
        assert_eq!(c.first_match(&t("2001:db8:1::5")), Some(0));
        let s4 = sel(Some("0.0.0.0/0"), None);
        assert!(!s4.matches(&t("2001:db8:1::5")), "an IPv4 /0 is not IPv6");
    }

    #[test]
    fn the_first_matching_selector_wins_in_the_order_given() {
        let c = Classifier::new(vec![
            sel(Some("10.0.0.0/8"), None),
            sel(Some("10.1.0.0/16"), None),
            Selector::default(),
        ]);
        assert_eq!(c.first_match(&t4("10.1.2.3", "1.1.1.1", 6, 1, 2)), Some(0));
        assert_eq!(c.first_match(&t4("11.1.2.3", "1.1.1.1", 6, 1, 2)), Some(2));
        let c = Classifier::new(vec![sel(Some("10.1.0.0/16"), None)]);
        assert_eq!(c.first_match(&t4("10.2.0.1", "1.1.1.1", 6, 1, 2)), None);
        assert_eq!(
            Classifier::default().first_match(&t4("1.1.1.1", "1.1.1.1", 6, 1, 2)),
            None
        );
    }

    /// An address of a small universe (10.0.0.0 – 10.0.0.255), so that random
    /// selectors and tuples often match.
    fn arb_addr() -> impl Strategy<Value = u32> {
        (0u32..256).prop_map(|a| 0x0a00_0000 | a)
    }

    /// A selector from random parts (prefixes of the small universe, ports 0..16).
    fn arb_selector() -> impl Strategy<Value = Selector> {
        let prefix = || {
            (
                arb_addr(),
                prop::sample::select(vec![0u32, 8, 24, 28, 30, 32]),
            )
        };
        let ports = (0u16..16, 0u16..16);
        (
            prop::option::of(prefix()),
            prop::option::of(prefix()),
            prop::option::of(prop::sample::select(vec![1u8, 6, 17])),
            prop::option::of(ports.clone()),
            prop::option::of(ports),
        )
            .prop_map(|(src, dst, proto, sport, dport)| {
                let cidr = |(a, l): (u32, u32)| {
                    let mask = u32::MAX.checked_shl(32 - l).unwrap_or(0);
                    Cidr::V4 {
                        net: a & mask,
                        mask,
                    }
                };
                let range = |(a, b): (u16, u16)| PortRange {
                    lo: a.min(b),
                    hi: a.max(b),
                };
                let ported = sport.is_some() || dport.is_some();
                Selector {
                    src: src.map(cidr),
                    dst: dst.map(cidr),
                    proto: proto.filter(|p| !ported || *p != 1),
                    sport: sport.map(range),
                    dport: dport.map(range),
                }
            })
    }

    /// What a selector means, written out field by field on text forms.
    fn reference(s: &Selector, t: &Tuple<u32>) -> bool {
        let in_cidr = |c: &Option<Cidr>, a: u32| match c {
            None => true,
            Some(Cidr::V4 { net, mask }) => {
                let len = mask.count_ones();
                let net = Ipv4Addr::from(*net).octets();
                let a = Ipv4Addr::from(a).octets();
                (0..len as usize).all(|bit| {
                    let m = 0x80u8 >> (bit % 8);
                    net[bit / 8] & m == a[bit / 8] & m
                })
            }
            Some(Cidr::V6 { .. }) => false,
        };
        let in_range = |r: &Option<PortRange>, p: u16| r.is_none_or(|r| (r.lo..=r.hi).contains(&p));
        let has_ports = t.proto == 6 || t.proto == 17;
        let ports_ok = if s.sport.is_some() || s.dport.is_some() {
            has_ports && in_range(&s.sport, t.sport) && in_range(&s.dport, t.dport)
        } else {
            true
        };
        in_cidr(&s.src, t.src)
            && in_cidr(&s.dst, t.dst)
            && s.proto.is_none_or(|p| p == t.proto)
            && ports_ok
    }

    proptest! {
        #[test]
        fn matching_agrees_with_the_field_by_field_reference(
            mut rules in prop::collection::vec(arb_selector(), 0..6),
            v6_at in prop::option::of(0usize..6),
            src in arb_addr(), dst in arb_addr(),
            proto in prop::sample::select(vec![1u8, 6, 17, 47]),
            sport in 0u16..16, dport in 0u16..16,
        ) {
            let t = Tuple { src, dst, proto, sport, dport };
            if let Some(at) = v6_at {
                let v6 = Selector { dst: Some(Cidr::V6 { net: 0, mask: 0 }), ..Selector::default() };
                rules.insert(at.min(rules.len()), v6);
            }
            for s in &rules {
                prop_assert!(s.check().is_ok());
                prop_assert_eq!(s.matches(&t), reference(s, &t), "{:?}", s);
            }
            let want = rules.iter().position(|s| reference(s, &t));
            let c = Classifier::new(rules);
            prop_assert_eq!(c.first_match(&t), want);
            prop_assert_eq!(c.first_match_v4(&t), want, "compiled");
        }
    }
}
