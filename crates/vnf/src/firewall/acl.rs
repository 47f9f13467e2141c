//! The ordered access-control list: first matching rule wins, else the default.

use nfx_packet::FlowKey;

/// An IPv4 prefix (`10.0.0.0/8`); `/0` matches everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address (host order), already masked.
    pub addr: u32,
    /// Netmask (host order).
    pub mask: u32,
}

impl Prefix {
    /// Matches every address.
    pub const ANY: Prefix = Prefix { addr: 0, mask: 0 };

    /// Parses `a.b.c.d/len` or a bare address (`/32`). Errors do not quote the text
    /// (it may come from a rules file; the caller names the field).
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "any" {
            return Ok(Self::ANY);
        }
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => {
                let len: u32 = l.parse().map_err(|_| "bad prefix length".to_string())?;
                if len > 32 {
                    return Err("prefix length above 32".into());
                }
                (a, len)
            }
            None => (s, 32),
        };
        let addr: std::net::Ipv4Addr = a
            .parse()
            .map_err(|_| "not an IPv4 address or CIDR prefix (a.b.c.d/len)".to_string())?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Ok(Self {
            addr: u32::from(addr) & mask,
            mask,
        })
    }

    /// True when `ip` is inside the prefix.
    #[inline]
    pub fn contains(&self, ip: u32) -> bool {
        ip & self.mask == self.addr
    }
}

/// An inclusive port range; `0-65535` is "any".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange {
        lo: 0,
        hi: u16::MAX,
    };

    /// Parses `80`, `1000-2000` or `any`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "any" {
            return Ok(Self::ANY);
        }
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| "not a port (0-65535), a range `lo-hi` or `any`".to_string())
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if lo > hi {
            return Err("empty port range (start above end)".into());
        }
        Ok(Self { lo, hi })
    }

    /// True when `p` is inside the range.
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

/// One ACL rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// IP protocol, `None` for any.
    pub proto: Option<u8>,
    /// Source prefix.
    pub src: Prefix,
    /// Destination prefix.
    pub dst: Prefix,
    /// Source ports (TCP/UDP rules only).
    pub sport: PortRange,
    /// Destination ports (TCP/UDP rules only).
    pub dport: PortRange,
}

impl Rule {
    /// True when the rule applies to a flow.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        self.proto.is_none_or(|p| p == k.proto)
            && self.src.contains(k.src)
            && self.dst.contains(k.dst)
            && self.sport.contains(k.sport)
            && self.dport.contains(k.dport)
    }
}

/// The ordered rule list and the default action. Consulted once per new flow, so
/// a linear first-match scan over a few hundred rules costs little.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    rules: Vec<Rule>,
    default_allow: bool,
}

impl Acl {
    /// An ACL with the rules in order and the action when none matches.
    pub fn new(rules: Vec<Rule>, default_allow: bool) -> Self {
        Self {
            rules,
            default_allow,
        }
    }

    /// Index of the first rule matching `k` (None: default applies).
    pub fn first_match(&self, k: &FlowKey) -> Option<usize> {
        self.rules.iter().position(|r| r.matches(k))
    }

    /// The verdict for a new flow: first match wins.
    pub fn allows(&self, k: &FlowKey) -> bool {
        self.first_match(k)
            .map_or(self.default_allow, |i| self.rules[i].allow)
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there are no rules (only the default applies).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(src: &str, dst: &str, sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: src.parse::<std::net::Ipv4Addr>().unwrap().into(),
            dst: dst.parse::<std::net::Ipv4Addr>().unwrap().into(),
            sport,
            dport,
            proto,
        }
    }

    #[test]
    fn prefixes() {
        let p = Prefix::parse("10.1.2.3/8").unwrap();
        assert_eq!(
            p,
            Prefix {
                addr: 0x0a00_0000,
                mask: 0xff00_0000
            }
        );
        assert!(p.contains(0x0aff_ffff) && !p.contains(0x0b00_0000));
        assert!(Prefix::parse("0.0.0.0/0").unwrap().contains(12345));
        assert_eq!(Prefix::parse("1.2.3.4").unwrap().mask, u32::MAX);
        assert!(Prefix::parse("1.2.3/8").is_err());
        assert!(Prefix::parse("1.2.3.4/33").is_err());
        assert!(Prefix::parse("1.2.3.4/x").is_err());
    }

    #[test]
    fn port_ranges() {
        assert_eq!(
            PortRange::parse("80").unwrap(),
            PortRange { lo: 80, hi: 80 }
        );
        assert_eq!(
            PortRange::parse("1000-2000").unwrap(),
            PortRange { lo: 1000, hi: 2000 }
        );
        assert_eq!(PortRange::parse("any").unwrap(), PortRange::ANY);
        assert!(PortRange::parse("2000-1000").is_err());
        assert!(PortRange::parse("70000").is_err());
        assert!(PortRange::parse("http").is_err());
    }

    #[test]
    fn first_match_wins_then_default() {
        let deny_one = Rule {
            allow: false,
            proto: Some(6),
            src: Prefix::parse("10.0.0.5/32").unwrap(),
            dst: Prefix::ANY,
            sport: PortRange::ANY,
            dport: PortRange::parse("5201").unwrap(),
        };
        let allow_net = Rule {
            allow: true,
            proto: Some(6),
            src: Prefix::parse("10.0.0.0/24").unwrap(),
            dst: Prefix::ANY,
            sport: PortRange::ANY,
            dport: PortRange::parse("5000-6000").unwrap(),
        };
        let acl = Acl::new(vec![deny_one, allow_net], false);
        assert!(
            !acl.allows(&k("10.0.0.5", "1.1.1.1", 999, 5201, 6)),
            "deny rule first"
        );
        assert!(acl.allows(&k("10.0.0.6", "1.1.1.1", 999, 5201, 6)));
        assert!(acl.allows(&k("10.0.0.5", "1.1.1.1", 999, 5202, 6)));
        assert!(
            !acl.allows(&k("10.0.0.6", "1.1.1.1", 999, 5201, 17)),
            "proto mismatch → default"
        );
        assert!(
            !acl.allows(&k("10.0.1.6", "1.1.1.1", 999, 5201, 6)),
            "prefix mismatch → default"
        );
        let swapped = Acl::new(vec![allow_net, deny_one], false);
        assert!(
            swapped.allows(&k("10.0.0.5", "1.1.1.1", 999, 5201, 6)),
            "order matters"
        );
        assert_eq!(
            swapped.first_match(&k("10.0.0.5", "1.1.1.1", 9, 5201, 6)),
            Some(0)
        );
    }

    #[test]
    fn many_rules() {
        let rules: Vec<Rule> = (0..200u16)
            .map(|i| Rule {
                allow: i == 150,
                proto: Some(17),
                src: Prefix::ANY,
                dst: Prefix::ANY,
                sport: PortRange::ANY,
                dport: PortRange {
                    lo: 1000 + i,
                    hi: 1000 + i,
                },
            })
            .collect();
        let acl = Acl::new(rules, false);
        assert_eq!(acl.len(), 200);
        assert!(acl.allows(&k("1.1.1.1", "2.2.2.2", 1, 1150, 17)));
        assert!(!acl.allows(&k("1.1.1.1", "2.2.2.2", 1, 1149, 17)));
        assert_eq!(
            acl.first_match(&k("1.1.1.1", "2.2.2.2", 1, 1199, 17)),
            Some(199)
        );
    }
}
