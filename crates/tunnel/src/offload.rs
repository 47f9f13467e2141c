//! TUN offloads, send side: the `virtio_net_hdr` the kernel puts in front of every
//! packet read from an `IFF_VNET_HDR` TUN, and the split of a GSO super-packet (TSO4,
//! TSO6, USO) into wire-size segments written straight into ESP payload buffers, each
//! with its own IP length/id, TCP sequence number and full checksums — the job a NIC
//! does for the kernel (and wireguard-go's `tun/offload_linux.go` does in Go).

use crate::csum;

pub use nfx_packet::VnetHdr;

const TCP: u8 = 6;
const UDP: u8 = 17;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// The vnet header in front of a packet read from the TUN; `None` if `b` is shorter.
pub fn read_vnet(b: &[u8]) -> Option<VnetHdr> {
    Some(VnetHdr::from_bytes(b.get(..VnetHdr::LEN)?.try_into().ok()?))
}

/// Why a packet read from the TUN cannot be segmented (counted as `bad_vnet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegError {
    /// Unknown GSO type, zero segment size, or headers that contradict the vnet header.
    BadVnet,
    /// A segment would not fit the tunnel MTU / buffer.
    TooBig,
}

/// How to cut one packet read from the TUN into wire packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    kind: Kind,
    /// IP + L4 header bytes repeated in front of every segment.
    hdr_len: usize,
    /// Payload bytes per segment (all but the last).
    seg: usize,
    /// Number of segments.
    pub count: usize,
    total: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Copy as is.
    Plain,
    /// Copy and complete the partial checksum at this offset (csum_start, field).
    Complete(usize, usize),
    Tcp {
        v4: bool,
        l4: usize,
    },
    Udp {
        v4: bool,
        l4: usize,
    },
}

impl Plan {
    /// Validates the vnet header against packet `pkt` (IP packet without the vnet
    /// header) and plans segments of at most `max` bytes each.
    pub fn new(h: &VnetHdr, pkt: &[u8], max: usize) -> Result<Plan, SegError> {
        Plan::from_headers(h, pkt, pkt.len(), max)
    }

    /// [`Plan::new`] for a packet of `total` bytes of which only the first ones, `hdrs`,
    /// are at hand (the payload was read straight into the segments' buffers); the
    /// headers the plan needs must lie in `hdrs`.
    pub fn from_headers(
        h: &VnetHdr,
        hdrs: &[u8],
        total: usize,
        max: usize,
    ) -> Result<Plan, SegError> {
        let pkt = hdrs;
        let gso = h.gso_type & !VnetHdr::GSO_ECN;
        let cs = h.csum_start as usize;
        if gso == VnetHdr::GSO_NONE {
            let kind = if h.flags & VnetHdr::F_NEEDS_CSUM != 0 {
                let field = cs + h.csum_offset as usize;
                if field + 2 > total {
                    return Err(SegError::BadVnet);
                }
                Kind::Complete(cs, field)
            } else {
                Kind::Plain
            };
            if total > max {
                return Err(SegError::TooBig);
            }
            return Ok(Plan {
                kind,
                hdr_len: 0,
                seg: total,
                count: 1,
                total,
            });
        }
        let v4 = match pkt.first().map(|b| b >> 4) {
            Some(4) => true,
            Some(6) => false,
            _ => return Err(SegError::BadVnet),
        };
        let (proto, ip_hl) = if v4 {
            let ihl = (pkt[0] & 0x0f) as usize * 4;
            if ihl < 20 || pkt.len() < ihl || pkt[6] & 0x3f != 0 || pkt[7] != 0 {
                return Err(SegError::BadVnet);
            }
            (pkt[9], ihl)
        } else {
            if pkt.len() < 40 {
                return Err(SegError::BadVnet);
            }
            (pkt[6], 40)
        };
        // csum_start must be the L4 header right after the IP header (no IPv6
        // extension headers in GSO packets here).
        if cs != ip_hl || h.flags & VnetHdr::F_NEEDS_CSUM == 0 {
            return Err(SegError::BadVnet);
        }
        let (kind, l4_len) = match gso {
            VnetHdr::GSO_TCPV4 | VnetHdr::GSO_TCPV6 => {
                if (gso == VnetHdr::GSO_TCPV4) != v4 || proto != TCP {
                    return Err(SegError::BadVnet);
                }
                let doff = pkt.get(cs + 12).ok_or(SegError::BadVnet)? >> 4;
                let l = doff as usize * 4;
                if l < 20 || h.csum_offset != 16 {
                    return Err(SegError::BadVnet);
                }
                (Kind::Tcp { v4, l4: cs }, l)
            }
            VnetHdr::GSO_UDP_L4 => {
                if proto != UDP || h.csum_offset != 6 {
                    return Err(SegError::BadVnet);
                }
                (Kind::Udp { v4, l4: cs }, 8)
            }
            _ => return Err(SegError::BadVnet),
        };
        let hdr_len = cs + l4_len;
        let seg = h.gso_size as usize;
        if seg == 0 || hdr_len > pkt.len() || hdr_len > total {
            return Err(SegError::BadVnet);
        }
        if hdr_len + seg > max {
            return Err(SegError::TooBig);
        }
        let payload = total - hdr_len;
        Ok(Plan {
            kind,
            hdr_len,
            seg,
            count: payload.div_ceil(seg).max(1),
            total,
        })
    }

    /// Length of segment `i`.
    pub fn seg_len(&self, i: usize) -> usize {
        if self.hdr_len == 0 {
            return self.total;
        }
        let start = self.hdr_len + i * self.seg;
        self.hdr_len + (self.total - start).min(self.seg)
    }

    /// Writes segment `i` of `pkt` into `dst` (at least `seg_len(i)` bytes) with every
    /// header field and checksum it needs on the wire; returns its length.
    pub fn write(&self, pkt: &[u8], i: usize, dst: &mut [u8]) -> usize {
        let n = self.seg_len(i);
        match self.kind {
            Kind::Plain => dst[..n].copy_from_slice(pkt),
            Kind::Complete(start, field) => {
                dst[..n].copy_from_slice(pkt);
                let c = !csum::fold(csum::add(0, &dst[start..n]));
                dst[field..field + 2].copy_from_slice(&c.to_be_bytes());
            }
            Kind::Tcp { .. } | Kind::Udp { .. } => {
                let h = self.hdr_len;
                let off = h + i * self.seg;
                dst[h..n].copy_from_slice(&pkt[off..off + n - h]);
                self.write_headers(pkt, i, dst);
            }
        }
        n
    }

    /// Header length and payload bytes per segment of a segmented (GSO) packet: the
    /// shape the next super-packet of the same flow will have.
    pub fn shape(&self) -> Option<(usize, usize)> {
        matches!(self.kind, Kind::Tcp { .. } | Kind::Udp { .. }).then_some((self.hdr_len, self.seg))
    }

    /// Completes segment `i` in `dst` whose payload is already in place behind the
    /// header (`dst[hdr_len..seg_len(i)]`, as a scattered read left it): writes the
    /// headers from `hdrs` with every field and checksum the segment needs; returns its
    /// length. Only for a plan with a [`Plan::shape`].
    pub fn write_headers(&self, hdrs: &[u8], i: usize, dst: &mut [u8]) -> usize {
        let n = self.seg_len(i);
        if let Kind::Tcp { v4, l4 } | Kind::Udp { v4, l4 } = self.kind {
            dst[..self.hdr_len].copy_from_slice(&hdrs[..self.hdr_len]);
            self.fix_headers(dst, n, i, v4, l4);
        }
        n
    }

    fn fix_headers(&self, d: &mut [u8], n: usize, i: usize, v4: bool, l4: usize) {
        if v4 {
            d[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            let id = u16::from_be_bytes([d[4], d[5]]).wrapping_add(i as u16);
            d[4..6].copy_from_slice(&id.to_be_bytes());
            csum::set_ipv4(&mut d[..l4]);
        } else {
            d[4..6].copy_from_slice(&((n - 40) as u16).to_be_bytes());
        }
        let l4_len = n - l4;
        let (proto, field) = if let Kind::Tcp { .. } = self.kind {
            let seq = u32::from_be_bytes([d[l4 + 4], d[l4 + 5], d[l4 + 6], d[l4 + 7]])
                .wrapping_add((i * self.seg) as u32);
            d[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            if i + 1 < self.count {
                d[l4 + 13] &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                d[l4 + 13] &= !TCP_CWR;
            }
            (TCP, l4 + 16)
        } else {
            d[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            (UDP, l4 + 6)
        };
        d[field] = 0;
        d[field + 1] = 0;
        let sum = csum::add(csum::pseudo(d, proto, l4_len), &d[l4..n]);
        let mut c = !csum::fold(sum);
        if proto == UDP && c == 0 {
            c = 0xffff;
        }
        d[field..field + 2].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetHeaders, PacketHeaders, TransportHeader};

    fn ipv4(proto: u8, opts: &[u8], l4: &[u8], payload: &[u8]) -> Vec<u8> {
        let ihl = 20 + opts.len();
        let total = ihl + l4.len() + payload.len();
        let mut p = vec![0u8; ihl];
        p[0] = 0x40 | (ihl / 4) as u8;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0xfff0u16.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 1, 0, 1]);
        p[16..20].copy_from_slice(&[10, 1, 0, 2]);
        p[20..].copy_from_slice(opts);
        p.extend_from_slice(l4);
        p.extend_from_slice(payload);
        p
    }

    fn ipv6(proto: u8, l4: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((l4.len() + payload.len()) as u16).to_be_bytes());
        p[6] = proto;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
        p.extend_from_slice(l4);
        p.extend_from_slice(payload);
        p
    }

    fn tcp_hdr(seq: u32, flags: u8, opts: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&5001u16.to_be_bytes());
        t[2..4].copy_from_slice(&443u16.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&7u32.to_be_bytes());
        t[12] = (((20 + opts.len()) / 4) << 4) as u8;
        t[13] = flags;
        t[14..16].copy_from_slice(&512u16.to_be_bytes());
        t.extend_from_slice(opts);
        t
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 13 + 1) as u8).collect()
    }

    /// Puts the partial (pseudo-header) sum into the L4 checksum field, as the kernel does.
    fn partial(p: &mut [u8], l4: usize, field: usize, proto: u8) {
        let s = csum::fold(csum::pseudo(p, proto, p.len() - l4));
        p[field..field + 2].copy_from_slice(&s.to_be_bytes());
    }

    fn split(h: &VnetHdr, pkt: &[u8], max: usize) -> Vec<Vec<u8>> {
        let plan = Plan::new(h, pkt, max).unwrap();
        (0..plan.count)
            .map(|i| {
                let mut d = vec![0u8; max];
                let n = plan.write(pkt, i, &mut d);
                assert_eq!(n, plan.seg_len(i));
                d.truncate(n);
                d
            })
            .collect()
    }

    /// Every checksum verified by etherparse; returns (seq or 0, payload, flags).
    fn check(seg: &[u8]) -> (u32, Vec<u8>, u8) {
        let p = PacketHeaders::from_ip_slice(seg).expect("etherparse parses the segment");
        let pl = p.payload.slice().to_vec();
        match (p.net.unwrap(), p.transport.unwrap()) {
            (NetHeaders::Ipv4(ip, _), TransportHeader::Tcp(t)) => {
                assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 csum");
                assert_eq!(ip.total_len as usize, seg.len());
                assert_eq!(t.checksum, t.calc_checksum_ipv4(&ip, &pl).unwrap());
                (t.sequence_number, pl, seg[ip.header_len() + 13])
            }
            (NetHeaders::Ipv6(ip, _), TransportHeader::Tcp(t)) => {
                assert_eq!(t.checksum, t.calc_checksum_ipv6(&ip, &pl).unwrap());
                (t.sequence_number, pl, seg[53])
            }
            (NetHeaders::Ipv4(ip, _), TransportHeader::Udp(u)) => {
                assert_eq!(ip.header_checksum, ip.calc_header_checksum());
                assert_eq!(u.checksum, u.calc_checksum_ipv4(&ip, &pl).unwrap());
                assert_eq!(u.length as usize, 8 + pl.len());
                (0, pl, 0)
            }
            (NetHeaders::Ipv6(ip, _), TransportHeader::Udp(u)) => {
                assert_eq!(u.checksum, u.calc_checksum_ipv6(&ip, &pl).unwrap());
                (0, pl, 0)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn tso4(mss: u16, hdr: &[u8]) -> VnetHdr {
        VnetHdr {
            flags: VnetHdr::F_NEEDS_CSUM,
            gso_type: VnetHdr::GSO_TCPV4,
            hdr_len: hdr.len() as u16,
            gso_size: mss,
            csum_start: (hdr[0] & 0x0f) as u16 * 4,
            csum_offset: 16,
        }
    }

    #[test]
    fn vnet_header_round_trips() {
        let h = VnetHdr {
            flags: 1,
            gso_type: 1,
            hdr_len: 52,
            gso_size: 1380,
            csum_start: 20,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(read_vnet(&b), Some(h));
        assert_eq!(read_vnet(&b[..9]), None);
    }

    #[test]
    fn tcpv4_tso_segments_have_seq_ids_lengths_and_checksums() {
        for (mss, len, opts) in [
            (1380usize, 10_000usize, &[][..]),
            (1379, 64_000, &[1u8, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2][..]),
            (7, 50, &[][..]),
            (1000, 1000, &[][..]),
            (1000, 1001, &[][..]),
        ] {
            let data = payload(len);
            let tcp = tcp_hdr(u32::MAX - 3000, 0x18 | TCP_FIN | TCP_CWR, opts);
            let mut pkt = ipv4(TCP, &[], &tcp, &data);
            partial(&mut pkt, 20, 36, TCP);
            let segs = split(&tso4(mss as u16, &pkt), &pkt, 20 + tcp.len() + mss);
            assert_eq!(segs.len(), len.div_ceil(mss));
            let mut joined = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                let (seq, pl, flags) = check(s);
                assert_eq!(seq, (u32::MAX - 3000).wrapping_add((i * mss) as u32));
                let last = i + 1 == segs.len();
                assert_eq!(pl.len(), if last { len - i * mss } else { mss });
                assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, last, "seg {i}");
                assert_eq!(flags & TCP_CWR != 0, i == 0);
                assert_eq!(
                    u16::from_be_bytes([s[4], s[5]]),
                    0xfff0u16.wrapping_add(i as u16)
                );
                assert_eq!(&s[40..40 + opts.len()], opts);
                joined.extend(pl);
            }
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn ipv4_options_are_copied_into_every_segment() {
        let opts = [0x94, 4, 0, 0]; // Router Alert
        let tcp = tcp_hdr(1, 0x10, &[]);
        let mut pkt = ipv4(TCP, &opts, &tcp, &payload(3000));
        partial(&mut pkt, 24, 40, TCP);
        let segs = split(&tso4(1200, &pkt), &pkt, 1500);
        assert_eq!(segs.len(), 3);
        for s in &segs {
            check(s);
            assert_eq!(&s[20..24], &opts);
        }
    }

    #[test]
    fn tcpv6_and_uso_segments_verify() {
        let tcp = tcp_hdr(99, 0x10, &[]);
        let mut pkt = ipv6(TCP, &tcp, &payload(5000));
        partial(&mut pkt, 40, 56, TCP);
        let h = VnetHdr {
            flags: VnetHdr::F_NEEDS_CSUM,
            gso_type: VnetHdr::GSO_TCPV6,
            hdr_len: 60,
            gso_size: 1400,
            csum_start: 40,
            csum_offset: 16,
        };
        let segs = split(&h, &pkt, 1500);
        assert_eq!(segs.len(), 4);
        for (i, s) in segs.iter().enumerate() {
            assert_eq!(check(s).0, 99 + 1400 * i as u32);
        }
        let mut udp = vec![0u8; 8];
        udp[0..2].copy_from_slice(&1234u16.to_be_bytes());
        udp[2..4].copy_from_slice(&53u16.to_be_bytes());
        for v4 in [true, false] {
            let mut pkt = if v4 {
                ipv4(UDP, &[], &udp, &payload(4001))
            } else {
                ipv6(UDP, &udp, &payload(4001))
            };
            let l4 = if v4 { 20 } else { 40 };
            partial(&mut pkt, l4, l4 + 6, UDP);
            let h = VnetHdr {
                flags: VnetHdr::F_NEEDS_CSUM,
                gso_type: VnetHdr::GSO_UDP_L4,
                hdr_len: l4 as u16 + 8,
                gso_size: 1000,
                csum_start: l4 as u16,
                csum_offset: 6,
            };
            let segs = split(&h, &pkt, 1500);
            let lens: Vec<usize> = segs.iter().map(|s| check(s).1.len()).collect();
            assert_eq!(lens, vec![1000, 1000, 1000, 1000, 1]);
        }
    }

    #[test]
    fn plain_and_partial_checksum_packets_pass_through() {
        let pkt = ipv4(1, &[], &[8, 0, 0, 0, 0, 1, 0, 1], &payload(56));
        let segs = split(&VnetHdr::default(), &pkt, 1500);
        assert_eq!(segs, vec![pkt]);
        let tcp = tcp_hdr(5, 0x18, &[]);
        let mut pkt = ipv4(TCP, &[], &tcp, &payload(333));
        csum::set_ipv4(&mut pkt[..20]);
        partial(&mut pkt, 20, 36, TCP);
        let h = VnetHdr {
            flags: VnetHdr::F_NEEDS_CSUM,
            csum_start: 20,
            csum_offset: 16,
            ..VnetHdr::default()
        };
        let segs = split(&h, &pkt, 1500);
        assert_eq!(check(&segs[0]).1.len(), 333);
    }

    #[test]
    fn malformed_vnet_headers_are_refused() {
        let tcp = tcp_hdr(5, 0x10, &[]);
        let pkt = ipv4(TCP, &[], &tcp, &payload(3000));
        let good = tso4(1000, &pkt);
        assert!(Plan::new(&good, &pkt, 1500).is_ok());
        let bad = [
            VnetHdr {
                gso_size: 0,
                ..good
            },
            VnetHdr {
                gso_type: 9,
                ..good
            },
            VnetHdr {
                gso_type: VnetHdr::GSO_TCPV6,
                ..good
            },
            VnetHdr {
                gso_type: VnetHdr::GSO_UDP_L4,
                ..good
            },
            VnetHdr {
                csum_start: 4,
                ..good
            },
            VnetHdr {
                csum_start: 3000,
                ..good
            },
            VnetHdr {
                csum_offset: 3,
                ..good
            },
            VnetHdr { flags: 0, ..good },
            VnetHdr {
                gso_type: VnetHdr::GSO_NONE,
                csum_start: 3030,
                ..good
            },
        ];
        for h in bad {
            assert_eq!(Plan::new(&h, &pkt, 1500), Err(SegError::BadVnet), "{h:?}");
        }
        assert_eq!(Plan::new(&good, &pkt[..30], 1500), Err(SegError::BadVnet));
        assert_eq!(Plan::new(&good, &[], 1500), Err(SegError::BadVnet));
        assert_eq!(Plan::new(&good, &[0x45], 1500), Err(SegError::BadVnet));
        assert_eq!(Plan::new(&good, &pkt, 1000), Err(SegError::TooBig));
        let mut frag = pkt.clone();
        frag[6] = 0x20;
        assert_eq!(Plan::new(&good, &frag, 1500), Err(SegError::BadVnet));
    }

    #[test]
    fn headers_alone_plan_and_complete_segments_like_the_whole_packet() {
        let tcp = tcp_hdr(77, 0x18, &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        let pkt = ipv4(TCP, &[], &tcp, &payload(4000));
        let h = tso4(1300, &pkt);
        let whole = Plan::new(&h, &pkt, 1500).unwrap();
        let (hl, seg) = whole.shape().unwrap();
        assert_eq!((hl, seg), (20 + tcp.len(), 1300));
        let part = Plan::from_headers(&h, &pkt[..hl], pkt.len(), 1500).unwrap();
        assert_eq!(part, whole);
        for i in 0..whole.count {
            let mut a = vec![0u8; 1500];
            let n = whole.write(&pkt, i, &mut a);
            let mut b = vec![0u8; 1500];
            let off = hl + i * seg;
            b[hl..n].copy_from_slice(&pkt[off..off + n - hl]);
            assert_eq!(part.write_headers(&pkt[..hl], i, &mut b), n);
            assert_eq!(a[..n], b[..n], "segment {i}");
        }
        assert_eq!(
            Plan::from_headers(&h, &pkt[..hl - 1], pkt.len(), 1500),
            Err(SegError::BadVnet)
        );
        assert_eq!(
            Plan::from_headers(&h, &pkt[..10], pkt.len(), 1500),
            Err(SegError::BadVnet)
        );
        let plain = VnetHdr::default();
        assert_eq!(Plan::new(&plain, &pkt[..100], 1500).unwrap().shape(), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_truncated_headers(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
                                             cut in 0usize..120,
                                             hb in proptest::collection::vec(proptest::prelude::any::<u8>(), 10)) {
            let h = read_vnet(&hb).unwrap();
            let hdrs = &bytes[..cut.min(bytes.len())];
            if let Ok(plan) = Plan::from_headers(&h, hdrs, bytes.len(), 1500) {
                let mut d = vec![0u8; 1500];
                if plan.shape().is_some() {
                    for i in 0..plan.count {
                        plan.write_headers(hdrs, i, &mut d);
                    }
                }
            }
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                                   hb in proptest::collection::vec(proptest::prelude::any::<u8>(), 10)) {
            let h = read_vnet(&hb).unwrap();
            if let Ok(plan) = Plan::new(&h, &bytes, 1500) {
                let mut d = vec![0u8; 1500];
                for i in 0..plan.count {
                    plan.write(&bytes, i, &mut d);
                }
            }
        }
    }
}
