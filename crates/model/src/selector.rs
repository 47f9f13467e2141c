//! A service's traffic selector: which packets belong to it (addresses, protocol,
//! ports), so that hosts forward a service's traffic — and only it — along its path.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Packets of a service in its forward direction (from ingress to egress). Absent fields
/// match everything; ports need `proto` tcp or udp.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Source network of the forward direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<Cidr>,
    /// Destination network of the forward direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Cidr>,
    /// Transport protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<Proto>,
    /// Source port or range of the forward direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<PortRange>,
    /// Destination port or range of the forward direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<PortRange>,
}

impl Selector {
    /// Checks the combination: ports only with tcp/udp, both networks of one family.
    pub fn validate(&self) -> Result<(), String> {
        let ports = self.sport.is_some() || self.dport.is_some();
        if ports && !matches!(self.proto, Some(Proto::Tcp | Proto::Udp)) {
            return Err("sport/dport need proto tcp or udp".into());
        }
        if let (Some(s), Some(d)) = (&self.src, &self.dst) {
            if s.addr.is_ipv4() != d.addr.is_ipv4() {
                return Err(format!("src {s} and dst {d} are of different IP families"));
            }
        }
        Ok(())
    }
}

/// An IP network `addr/len` (host bits must be zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        let host_bits = match addr {
            IpAddr::V4(v) => u128::from(u32::from(v)) & (u128::from(u32::MAX) >> len.min(32)),
            IpAddr::V6(v) => u128::from(v) & u128::MAX.checked_shr(u32::from(len)).unwrap_or(0),
        };
        if host_bits != 0 {
            return Err(format!(
                "{s:?}: host bits are set (the network is not {addr}/{len})"
            ));
        }
        Ok(Cidr { addr, len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP (1, or 58 for IPv6).
    Icmp,
    /// Any other IP protocol number.
    Number(u8),
}

impl FromStr for Proto {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            "icmp" => Proto::Icmp,
            n => match n.parse::<u8>() {
                Ok(6) => Proto::Tcp,
                Ok(17) => Proto::Udp,
                Ok(1) => Proto::Icmp,
                Ok(n) => Proto::Number(n),
                Err(_) => return Err(format!("{s:?}: expected tcp, udp, icmp or 0..=255")),
            },
        })
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Proto::Tcp => f.write_str("tcp"),
            Proto::Udp => f.write_str("udp"),
            Proto::Icmp => f.write_str("icmp"),
            Proto::Number(n) => write!(f, "{n}"),
        }
    }
}

/// A port or an inclusive range `lo-hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port (≥ `lo`).
    pub hi: u16,
}

impl FromStr for PortRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected a port 0..=65535 or a range lo-hi");
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            ),
            None => {
                let p = s.trim().parse().map_err(|_| bad())?;
                (p, p)
            }
        };
        if lo > hi {
            return Err(format!("{s:?}: range starts after it ends"));
        }
        Ok(PortRange { lo, hi })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// Serde as a string (numbers accepted too, for ports and protocol numbers in YAML).
macro_rules! string_serde {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$t, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$t, E> {
                        v.to_string().parse().map_err(E::custom)
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$t, E> {
                        v.to_string().parse().map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

string_serde!(Cidr, "an IP network like 10.0.1.0/24");
string_serde!(Proto, "tcp, udp, icmp or a protocol number");
string_serde!(PortRange, "a port or a range like 1024-65535");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let s: Selector = serde_yaml_ng::from_str(
            "{src: 10.1.0.0/16, dst: 10.2.3.4, proto: tcp, sport: 1024-65535, dport: 80}",
        )
        .unwrap();
        assert_eq!(s.src.unwrap().to_string(), "10.1.0.0/16");
        assert_eq!(s.dst.unwrap().to_string(), "10.2.3.4/32");
        assert_eq!(s.dport.unwrap(), PortRange { lo: 80, hi: 80 });
        s.validate().unwrap();
        let back: Selector = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let p: Selector = serde_yaml_ng::from_str("{proto: 47}").unwrap();
        assert_eq!(p.proto, Some(Proto::Number(47)));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert_eq!(v6.len, 8);
    }

    #[test]
    fn bad_selectors_say_why() {
        for (text, want) in [
            ("{src: 10.1.0.1/16}", "host bits"),
            ("{src: 10.1.0.0/33}", "prefix length"),
            ("{dst: moon}", "not an IP"),
            ("{proto: sctp}", "expected tcp"),
            ("{proto: tcp, dport: 70000}", "expected a port"),
            ("{proto: tcp, dport: 90-80}", "starts after"),
            ("{colour: red}", "unknown field"),
        ] {
            let e = serde_yaml_ng::from_str::<Selector>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let s: Selector = serde_yaml_ng::from_str("{dport: 80}").unwrap();
        assert!(s.validate().unwrap_err().contains("proto"));
        let s: Selector = serde_yaml_ng::from_str("{src: 10.0.0.0/8, dst: 'fd00::/8'}").unwrap();
        assert!(s.validate().unwrap_err().contains("families"));
    }
}
