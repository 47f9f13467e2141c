//! Traffic selectors (RFC 7296 §3.13): address ranges, protocol and port ranges;
//! narrowing by a responder (§2.9) and the initiator's check that the answer is within
//! what it proposed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::{ParseError, Reader};

const TS_IPV4: u8 = 7;
const TS_IPV6: u8 = 8;
/// Most selectors per payload nfx reads.
const MAX_TS: usize = 32;

/// One traffic selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficSelector {
    /// IP protocol (0: any).
    pub proto: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
    /// First address.
    pub start: IpAddr,
    /// Last address (same family as `start`).
    pub end: IpAddr,
}

fn ip_num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

impl TrafficSelector {
    /// All addresses of a CIDR block (`10.0.0.0/8`, `fd00::/8`, or a bare address),
    /// any protocol and port.
    pub fn cidr(s: &str) -> Result<TrafficSelector, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an address or CIDR block"))?;
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        let len: u32 = match len {
            Some(l) => l
                .trim()
                .parse()
                .ok()
                .filter(|&l| l <= bits)
                .ok_or_else(|| format!("`{s}`: bad prefix length"))?,
            None => bits,
        };
        let host = match bits - len {
            128 => u128::MAX,
            h => (1u128 << h) - 1,
        };
        let n = ip_num(ip) & !host;
        let (start, end) = match ip {
            IpAddr::V4(_) => (
                IpAddr::V4(Ipv4Addr::from(n as u32)),
                IpAddr::V4(Ipv4Addr::from((n | host) as u32)),
            ),
            IpAddr::V6(_) => (
                IpAddr::V6(Ipv6Addr::from(n)),
                IpAddr::V6(Ipv6Addr::from(n | host)),
            ),
        };
        Ok(TrafficSelector {
            proto: 0,
            start_port: 0,
            end_port: 65535,
            start,
            end,
        })
    }

    /// The selector both `self` and `o` cover, if any.
    pub fn intersect(&self, o: &TrafficSelector) -> Option<TrafficSelector> {
        if !same_family(self.start, o.start) {
            return None;
        }
        let proto = match (self.proto, o.proto) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let sp = self.start_port.max(o.start_port);
        let ep = self.end_port.min(o.end_port);
        let s = if ip_num(self.start) >= ip_num(o.start) {
            self.start
        } else {
            o.start
        };
        let e = if ip_num(self.end) <= ip_num(o.end) {
            self.end
        } else {
            o.end
        };
        (sp <= ep && ip_num(s) <= ip_num(e)).then_some(TrafficSelector {
            proto,
            start_port: sp,
            end_port: ep,
            start: s,
            end: e,
        })
    }

    /// Whether `self` lies entirely inside `o`.
    pub fn within(&self, o: &TrafficSelector) -> bool {
        self.intersect(o).as_ref() == Some(self)
    }

    /// Whether the selector covers address `addr`.
    pub fn contains(&self, addr: IpAddr) -> bool {
        same_family(addr, self.start)
            && ip_num(self.start) <= ip_num(addr)
            && ip_num(addr) <= ip_num(self.end)
    }

    /// Whether the selector covers one end of a packet: its address `addr`, the packet's
    /// protocol `proto` and that end's `port` (`None` when the packet does not show it:
    /// then only a selector open to every port covers it, RFC 4301 §4.4.1.1 OPAQUE).
    pub fn covers(&self, addr: IpAddr, proto: u8, port: Option<u16>) -> bool {
        let all_ports = self.start_port == 0 && self.end_port == u16::MAX;
        self.contains(addr)
            && (self.proto == 0 || self.proto == proto)
            && (all_ports || port.is_some_and(|p| (self.start_port..=self.end_port).contains(&p)))
    }
}

impl std::fmt::Display for TrafficSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.start, self.end)?;
        if self.proto != 0 {
            write!(f, " proto {}", self.proto)?;
        }
        if (self.start_port, self.end_port) != (0, 65535) {
            write!(f, " ports {}-{}", self.start_port, self.end_port)?;
        }
        Ok(())
    }
}

/// Decodes a TSi/TSr body.
pub fn decode(body: &[u8]) -> Result<Vec<TrafficSelector>, ParseError> {
    let mut r = Reader::new(body, "TS payload");
    let n = r.u8()? as usize;
    r.take(3)?;
    if n == 0 || n > MAX_TS {
        return Err(ParseError::Invalid("number of traffic selectors"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let ty = r.u8()?;
        let proto = r.u8()?;
        let len = r.u16()? as usize;
        let alen = match (ty, len) {
            (TS_IPV4, 16) => 4,
            (TS_IPV6, 40) => 16,
            _ => return Err(ParseError::Invalid("traffic selector type or length")),
        };
        let start_port = r.u16()?;
        let end_port = r.u16()?;
        let a = r.take(alen)?;
        let b = r.take(alen)?;
        let (start, end) = if alen == 4 {
            let f = |x: &[u8]| IpAddr::V4(Ipv4Addr::new(x[0], x[1], x[2], x[3]));
            (f(a), f(b))
        } else {
            let f = |x: &[u8]| {
                let mut o = [0u8; 16];
                o.copy_from_slice(x);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            (f(a), f(b))
        };
        out.push(TrafficSelector {
            proto,
            start_port,
            end_port,
            start,
            end,
        });
    }
    if r.left() != 0 {
        return Err(ParseError::BadLength("TS payload"));
    }
    Ok(out)
}

/// Appends a TSi/TSr body.
pub fn encode(ts: &[TrafficSelector], out: &mut Vec<u8>) {
    out.extend_from_slice(&[ts.len() as u8, 0, 0, 0]);
    for t in ts {
        let (ty, len) = if t.start.is_ipv4() {
            (TS_IPV4, 16u16)
        } else {
            (TS_IPV6, 40)
        };
        out.push(ty);
        out.push(t.proto);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&t.start_port.to_be_bytes());
        out.extend_from_slice(&t.end_port.to_be_bytes());
        for a in [t.start, t.end] {
            match a {
                IpAddr::V4(v) => out.extend_from_slice(&v.octets()),
                IpAddr::V6(v) => out.extend_from_slice(&v.octets()),
            }
        }
    }
}

/// Narrows `proposed` to what `allowed` covers (every non-empty intersection).
pub fn narrow(proposed: &[TrafficSelector], allowed: &[TrafficSelector]) -> Vec<TrafficSelector> {
    let mut out = Vec::new();
    for p in proposed {
        for a in allowed {
            if let Some(i) = p.intersect(a) {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        }
    }
    out
}

/// Whether every selector of `answer` lies inside one of `proposed`.
pub fn answer_within(answer: &[TrafficSelector], proposed: &[TrafficSelector]) -> bool {
    !answer.is_empty() && answer.iter().all(|a| proposed.iter().any(|p| a.within(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_and_round_trip() {
        let a = TrafficSelector::cidr("192.168.77.0/24").unwrap();
        assert_eq!(a.start.to_string(), "192.168.77.0");
        assert_eq!(a.end.to_string(), "192.168.77.255");
        let b = TrafficSelector::cidr("fd00::1").unwrap();
        assert_eq!(a.end, TrafficSelector::cidr("192.168.77.255").unwrap().end);
        let mut v = Vec::new();
        encode(&[a, b], &mut v);
        assert_eq!(decode(&v).unwrap(), vec![a, b]);
        for cut in 0..v.len() {
            assert!(decode(&v[..cut]).is_err());
        }
        assert!(TrafficSelector::cidr("10.0.0.0/33").is_err());
        assert!(TrafficSelector::cidr("x").is_err());
        assert_eq!(
            TrafficSelector::cidr("0.0.0.0/0").unwrap().end.to_string(),
            "255.255.255.255"
        );
        let all6 = TrafficSelector::cidr("::/0").unwrap();
        assert_eq!(
            all6.end.to_string(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
    }

    #[test]
    fn narrowing() {
        let any = TrafficSelector::cidr("0.0.0.0/0").unwrap();
        let host = TrafficSelector::cidr("192.168.1.2/32").unwrap();
        let net6 = TrafficSelector::cidr("fd00::/8").unwrap();
        assert_eq!(narrow(&[any], &[host]), vec![host]);
        assert!(narrow(&[host], &[net6]).is_empty());
        assert!(answer_within(&[host], &[any]));
        assert!(!answer_within(&[any], &[host]));
        assert!(!answer_within(&[], &[host]));
        let mut tcp = host;
        tcp.proto = 6;
        assert_eq!(host.intersect(&tcp), Some(tcp));
        let mut udp = host;
        udp.proto = 17;
        assert_eq!(tcp.intersect(&udp), None);
        assert!(host.contains("192.168.1.2".parse().unwrap()));
        assert!(!host.contains("192.168.1.3".parse().unwrap()));
    }

    #[test]
    fn covers_checks_protocol_and_ports() {
        let a: IpAddr = "192.168.1.2".parse().unwrap();
        let host = TrafficSelector::cidr("192.168.1.2/32").unwrap();
        assert!(host.covers(a, 6, Some(80)) && host.covers(a, 47, None));
        assert!(!host.covers("192.168.1.3".parse().unwrap(), 6, Some(80)));
        assert!(!host.covers("fd00::1".parse().unwrap(), 6, Some(80)));
        let mut web = host;
        (web.proto, web.start_port, web.end_port) = (6, 80, 443);
        assert!(web.covers(a, 6, Some(80)) && web.covers(a, 6, Some(443)));
        assert!(!web.covers(a, 6, Some(8080)));
        assert!(!web.covers(a, 17, Some(80)));
        // A packet that hides its ports (a later fragment) only fits an all-ports selector.
        assert!(!web.covers(a, 6, None));
    }
}
