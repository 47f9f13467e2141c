//! The addresses, protocol and ports of a bare IP packet (no link header), as a tunnel
//! reads them from its TUN or from a decrypted ESP payload: what flow steering hashes and
//! what an SA's traffic selectors (RFC 4301 §4.4.1) are matched against.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol numbers whose first four bytes are a source and a destination port.
const fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132 | 136)
}

/// ICMP for IPv4 and IPv6: selectors see type and code as the "port" (RFC 4301 §4.4.1.1,
/// RFC 7296 §3.13.1: type in the high byte, code in the low byte).
const fn is_icmp(proto: u8) -> bool {
    matches!(proto, 1 | 58)
}

/// What a selector or a flow hash needs from one IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (IPv6: the next header of the fixed header).
    pub proto: u8,
    /// Source and destination ports (ICMP: type and code as one 16-bit value, on both
    /// ends); `None` when the packet does not show them: a non-first IPv4 fragment, an
    /// IPv6 packet with extension headers, a protocol without ports, or a transport
    /// header cut short.
    pub ports: Option<(u16, u16)>,
}

/// Reads the tuple of the IPv4 or IPv6 packet `ip`; `None` if it is neither or its fixed
/// header is cut short.
pub fn ip_tuple(ip: &[u8]) -> Option<IpTuple> {
    let (src, dst, proto, l4, first_fragment): (IpAddr, IpAddr, u8, usize, bool) =
        match ip.first()? >> 4 {
            4 if ip.len() >= 20 => {
                let ihl = (ip[0] & 0x0f) as usize * 4;
                if ihl < 20 {
                    return None;
                }
                let offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
                let src: [u8; 4] = ip[12..16].try_into().ok()?;
                let dst: [u8; 4] = ip[16..20].try_into().ok()?;
                (
                    Ipv4Addr::from(src).into(),
                    Ipv4Addr::from(dst).into(),
                    ip[9],
                    ihl,
                    offset == 0,
                )
            }
            6 if ip.len() >= 40 => {
                let src: [u8; 16] = ip[8..24].try_into().ok()?;
                let dst: [u8; 16] = ip[24..40].try_into().ok()?;
                (
                    Ipv6Addr::from(src).into(),
                    Ipv6Addr::from(dst).into(),
                    ip[6],
                    40,
                    true,
                )
            }
            _ => return None,
        };
    let ports = if !first_fragment {
        None
    } else if has_ports(proto) {
        ip.get(l4..l4 + 4).map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            )
        })
    } else if is_icmp(proto) {
        ip.get(l4..l4 + 2)
            .map(|p| u16::from_be_bytes([p[0], p[1]]))
            .map(|tc| (tc, tc))
    } else {
        None
    };
    Some(IpTuple {
        src,
        dst,
        proto,
        ports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p.extend_from_slice(l4);
        p
    }

    #[test]
    fn reads_ipv4_ports_and_icmp_type_code() {
        let t = ip_tuple(&v4(6, 0, &[0x30, 0x39, 0, 80])).unwrap();
        assert_eq!(t.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(t.dst, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((t.proto, t.ports), (6, Some((12345, 80))));
        let icmp = ip_tuple(&v4(1, 0, &[8, 0, 0, 0])).unwrap();
        assert_eq!(icmp.ports, Some((0x0800, 0x0800)));
    }

    #[test]
    fn hides_ports_it_cannot_see() {
        // A non-first fragment (offset 185), a cut TCP header, GRE, a bad IHL.
        assert_eq!(ip_tuple(&v4(17, 185, &[0, 53, 0, 53])).unwrap().ports, None);
        assert_eq!(ip_tuple(&v4(6, 0, &[0, 80])).unwrap().ports, None);
        assert_eq!(ip_tuple(&v4(47, 0, &[0, 0, 0, 0])).unwrap().ports, None);
        // More-fragments set on the first fragment still shows the ports.
        assert!(ip_tuple(&v4(17, 0x2000, &[0, 53, 0, 53]))
            .unwrap()
            .ports
            .is_some());
        let mut bad = v4(6, 0, &[0; 4]);
        bad[0] = 0x44;
        assert_eq!(ip_tuple(&bad), None);
        assert_eq!(ip_tuple(&[0x45; 19]), None);
        assert_eq!(ip_tuple(&[]), None);
        assert_eq!(ip_tuple(&[0x20; 60]), None);
    }

    #[test]
    fn reads_ipv6() {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[6] = 17;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
        p.extend_from_slice(&[0, 53, 0x13, 0x88]);
        let t = ip_tuple(&p).unwrap();
        assert_eq!(t.src, "fd00::1".parse::<IpAddr>().unwrap());
        assert_eq!(t.dst, "fd00::2".parse::<IpAddr>().unwrap());
        assert_eq!(t.ports, Some((53, 5000)));
        p[6] = 0; // hop-by-hop options first: the transport header is not where we look
        assert_eq!(ip_tuple(&p).unwrap().ports, None);
    }
}
