//! Receive-side coalescing (GRO in userspace, like wireguard-go's `tcpGRO`): consecutive
//! in-order TCP/IPv4 segments of one flow that left the peer as one TSO burst are
//! joined back into one super-packet, written to the TUN with a `VnetHdr::GSO_TCPV4` vnet
//! header, so the kernel sees one packet instead of ~40. Anything else passes through.
//!
//! The payloads are not copied: a super-packet is its first segment's headers (patched)
//! plus a list of [`Piece`]s of the decrypted packets, which the caller writes with one
//! vectored write while the batch's buffers are still alive.

use crate::csum;
use crate::offload::VnetHdr;

/// Flows held open at once (one pending super-packet each).
const MAX_FLOWS: usize = 8;
/// Largest IPv4 packet.
const MAX_IP: usize = 65535;
/// Most segments joined into one super-packet (the kernel's own GRO limit); it also
/// keeps the vectored write far below `UIO_MAXIOV`.
pub const MAX_SEGS: usize = 64;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;

/// A slice of a coalesced frame's payload: bytes `start..end` of the packet the caller
/// offered under `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The caller's id of the packet.
    pub id: usize,
    /// First payload byte, as an offset into that packet.
    pub start: usize,
    /// End of the payload in that packet.
    pub end: usize,
}

/// A coalesced frame is written: `(vnet header + IP/TCP headers, payload pieces, inner
/// packets, inner bytes)`; the frame is the header followed by the pieces in order.
pub type Emit<'a> = dyn FnMut(&[u8], &[Piece], u64, u64) + 'a;

/// A super-packet being built.
struct Pending {
    /// Vnet header and the first segment's IP and TCP headers.
    head: Vec<u8>,
    pieces: Vec<Piece>,
    /// IP length of the super-packet so far.
    len: usize,
    tcp_hl: usize,
    mss: usize,
    next_seq: u32,
    bytes: u64,
    closed: bool,
}

/// The coalescer: feed decrypted packets in order with [`Gro::push`], then
/// [`Gro::flush`] at the end of each batch, before the packets' buffers are reused.
#[derive(Default)]
pub struct Gro {
    flows: Vec<Pending>,
    spare: Vec<Pending>,
    /// Super-packets written with more than one segment.
    pub coalesced: u64,
}

/// The fields of a TCP/IPv4 segment that can be coalesced.
struct Seg {
    tcp_hl: usize,
    seq: u32,
    payload: usize,
    psh: bool,
}

/// Whether `p` is a plain TCP/IPv4 data segment (no IP options, no fragment, only
/// ACK/PSH flags, a valid IP header checksum), so it may be joined to others.
///
/// The TCP checksum is not summed again: the packet was authenticated by the ESP ICV
/// over every byte of it, exactly as the peer's endpoint sent it, which detects any
/// corruption on the way far better than the 16-bit sum. Linux's WireGuard marks
/// decrypted packets `CHECKSUM_UNNECESSARY` for the same reason. The joined frame gets
/// a partial checksum, which the kernel completes.
fn candidate(p: &[u8]) -> Option<Seg> {
    if p.len() < 40 || p[0] != 0x45 || p[9] != 6 || p[6] & 0x3f != 0 || p[7] != 0 {
        return None;
    }
    if u16::from_be_bytes([p[2], p[3]]) as usize != p.len() {
        return None;
    }
    let tcp_hl = (p[32] >> 4) as usize * 4;
    let flags = p[33];
    if tcp_hl < 20 || 20 + tcp_hl >= p.len() || flags & !(TCP_ACK | TCP_PSH) != 0 {
        return None;
    }
    if flags & TCP_ACK == 0 || csum::checksum(&p[..20]) != 0 {
        return None;
    }
    Some(Seg {
        tcp_hl,
        seq: u32::from_be_bytes([p[24], p[25], p[26], p[27]]),
        payload: p.len() - 20 - tcp_hl,
        psh: flags & TCP_PSH != 0,
    })
}

/// Same flow: addresses and ports.
fn same_flow(a: &[u8], b: &[u8]) -> bool {
    a[12..24] == b[12..24]
}

impl Pending {
    /// The first segment's IP and TCP headers.
    fn headers(&self) -> &[u8] {
        &self.head[VnetHdr::LEN..]
    }

    /// Whether segment `s` (packet `p`) continues this super-packet.
    fn fits(&self, p: &[u8], s: &Seg) -> bool {
        let h = self.headers();
        !self.closed
            && self.pieces.len() < MAX_SEGS
            && s.seq == self.next_seq
            && s.tcp_hl == self.tcp_hl
            && s.payload <= self.mss
            && self.len + s.payload <= MAX_IP
            && h[1] == p[1]
            && h[6] == p[6]
            && h[8] == p[8]
            && h[28..32] == p[28..32]
            && h[34..36] == p[34..36]
            && h[40..20 + self.tcp_hl] == p[40..20 + self.tcp_hl]
    }

    /// Starts a super-packet with segment `s` (packet `p`, the caller's `id`).
    fn start(&mut self, id: usize, p: &[u8], s: &Seg) {
        let hl = 20 + s.tcp_hl;
        self.head.clear();
        self.head.resize(VnetHdr::LEN, 0);
        self.head.extend_from_slice(&p[..hl]);
        self.pieces.clear();
        self.pieces.push(Piece {
            id,
            start: hl,
            end: p.len(),
        });
        self.len = p.len();
        self.tcp_hl = s.tcp_hl;
        self.mss = s.payload;
        self.next_seq = s.seq.wrapping_add(s.payload as u32);
        self.bytes = p.len() as u64;
        self.closed = s.psh;
    }

    fn append(&mut self, id: usize, p: &[u8], s: &Seg) {
        self.pieces.push(Piece {
            id,
            start: 20 + s.tcp_hl,
            end: p.len(),
        });
        self.len += s.payload;
        self.next_seq = s.seq.wrapping_add(s.payload as u32);
        self.bytes += p.len() as u64;
        if s.payload < self.mss || s.psh {
            self.closed = true;
            if s.psh {
                self.head[VnetHdr::LEN + 33] |= TCP_PSH;
            }
        }
    }

    /// Writes the vnet header (and, for a real super-packet, the headers a GSO packet
    /// carries: total length, IP checksum, partial TCP checksum).
    fn finish(&mut self) {
        let n = self.len;
        let mut h = VnetHdr::default();
        if self.pieces.len() > 1 {
            let p = &mut self.head[VnetHdr::LEN..];
            p[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            csum::set_ipv4(&mut p[..20]);
            let partial = csum::fold(csum::pseudo(p, 6, n - 20));
            p[36..38].copy_from_slice(&partial.to_be_bytes());
            h = VnetHdr {
                flags: VnetHdr::F_NEEDS_CSUM,
                gso_type: VnetHdr::GSO_TCPV4,
                hdr_len: (20 + self.tcp_hl) as u16,
                gso_size: self.mss as u16,
                csum_start: 20,
                csum_offset: 16,
            };
        } else {
            h.gso_type = VnetHdr::GSO_NONE;
        }
        self.head[..VnetHdr::LEN].copy_from_slice(&h.to_bytes());
    }
}

impl Gro {
    /// Offers decrypted packet `p`, which the caller calls `id`. Returns `false` if the
    /// caller must write it itself (as a plain packet); any held packet of the same
    /// flow was emitted before, so order within a flow is kept.
    pub fn push(&mut self, id: usize, p: &[u8], emit: &mut Emit<'_>) -> bool {
        let Some(s) = candidate(p) else {
            // Anything held between the same two hosts goes out first (this packet may
            // belong to it, e.g. a FIN, or carry IP options that hide its ports).
            if p.len() >= 20 && p[0] >> 4 == 4 {
                while let Some(i) = self
                    .flows
                    .iter()
                    .position(|f| f.headers()[12..20] == p[12..20])
                {
                    self.emit(i, emit);
                }
            }
            return false;
        };
        if let Some(i) = self.flows.iter().position(|f| same_flow(f.headers(), p)) {
            if self.flows[i].fits(p, &s) {
                self.flows[i].append(id, p, &s);
                return true;
            }
            self.emit(i, emit);
        }
        if self.flows.len() == MAX_FLOWS {
            self.emit(0, emit);
        }
        let mut f = self.spare.pop().unwrap_or_else(|| Pending {
            head: Vec::with_capacity(VnetHdr::LEN + 120),
            pieces: Vec::with_capacity(MAX_SEGS),
            len: 0,
            tcp_hl: 0,
            mss: 0,
            next_seq: 0,
            bytes: 0,
            closed: false,
        });
        f.start(id, p, &s);
        self.flows.push(f);
        true
    }

    fn emit(&mut self, i: usize, emit: &mut Emit<'_>) {
        let mut f = self.flows.remove(i);
        if f.pieces.len() > 1 {
            self.coalesced += 1;
        }
        f.finish();
        emit(&f.head, &f.pieces, f.pieces.len() as u64, f.bytes);
        self.spare.push(f);
    }

    /// Emits every held super-packet (end of a batch).
    pub fn flush(&mut self, emit: &mut Emit<'_>) {
        while !self.flows.is_empty() {
            self.emit(0, emit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::{read_vnet, Plan};
    use etherparse::{NetHeaders, PacketHeaders, TransportHeader};

    fn seg(sport: u16, seq: u32, flags: u8, len: usize) -> Vec<u8> {
        let total = 40 + len;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        csum::set_ipv4(&mut p[..20]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&9u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = flags;
        p[34..36].copy_from_slice(&1000u16.to_be_bytes());
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (seq as usize + i) as u8;
        }
        let c = !csum::fold(csum::add(csum::pseudo(&p, 6, total - 20), &p[20..]));
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// Runs `pkts` through the coalescer and returns each written frame (header and
    /// pieces joined, as the vectored write puts them) with its segment count.
    fn run(pkts: &[Vec<u8>]) -> Vec<(Vec<u8>, u64)> {
        let mut g = Gro::default();
        let mut out = Vec::new();
        {
            let plain = [0u8; VnetHdr::LEN];
            let mut emit = |head: &[u8], pieces: &[Piece], n: u64, bytes: u64| {
                let mut f = head.to_vec();
                for p in pieces {
                    f.extend_from_slice(&pkts[p.id][p.start..p.end]);
                }
                let inner: usize = pieces.iter().map(|p| pkts[p.id].len()).sum();
                assert_eq!(inner as u64, bytes);
                out.push((f, n));
            };
            for (id, p) in pkts.iter().enumerate() {
                if !g.push(id, p, &mut emit) {
                    let whole = Piece {
                        id,
                        start: 0,
                        end: p.len(),
                    };
                    emit(&plain, &[whole], 1, p.len() as u64);
                }
            }
            g.flush(&mut emit);
        }
        out
    }

    /// Re-segments a coalesced frame the way the kernel would and checks each piece.
    fn resegment(frame: &[u8]) -> Vec<Vec<u8>> {
        let h = read_vnet(frame).unwrap();
        let pkt = &frame[VnetHdr::LEN..];
        let plan = Plan::new(&h, pkt, 1500).unwrap();
        (0..plan.count)
            .map(|i| {
                let mut d = vec![0u8; 1500];
                let n = plan.write(pkt, i, &mut d);
                d.truncate(n);
                d
            })
            .collect()
    }

    #[test]
    fn in_order_segments_coalesce_and_resegment_to_the_originals() {
        let mss = 1000;
        let mut pkts: Vec<Vec<u8>> = (0..5)
            .map(|i| seg(1, 100 + i * mss as u32, TCP_ACK, mss))
            .collect();
        pkts.push(seg(1, 5100, TCP_ACK | TCP_PSH, 333));
        let out = run(&pkts);
        assert_eq!(out.len(), 1);
        let (frame, n) = &out[0];
        assert_eq!(*n, 6);
        let h = read_vnet(frame).unwrap();
        assert_eq!(
            (h.gso_type, h.gso_size, h.csum_start),
            (VnetHdr::GSO_TCPV4, 1000, 20)
        );
        let back = resegment(frame);
        assert_eq!(back.len(), 6);
        for (b, p) in back.iter().zip(&pkts) {
            let ph = PacketHeaders::from_ip_slice(b).unwrap();
            let (Some(NetHeaders::Ipv4(ip, _)), Some(TransportHeader::Tcp(t))) =
                (ph.net, ph.transport)
            else {
                panic!("not tcp/ipv4");
            };
            let pl = ph.payload.slice();
            assert_eq!(t.checksum, t.calc_checksum_ipv4(&ip, pl).unwrap());
            assert_eq!(&b[20..], &p[20..], "TCP header and payload as sent");
        }
    }

    #[test]
    fn gaps_flags_and_other_flows_break_or_separate_runs() {
        let pkts = vec![
            seg(1, 0, TCP_ACK, 500),
            seg(2, 0, TCP_ACK, 500),
            seg(1, 500, TCP_ACK, 500),
            seg(1, 2000, TCP_ACK, 500),       // gap: new run
            seg(2, 500, TCP_ACK | 0x01, 500), // FIN: passes through after the held runs
            seg(1, 2500, TCP_ACK, 600),       // larger than mss: new run
        ];
        let out = run(&pkts);
        let summary: Vec<(u16, u64)> = out
            .iter()
            .map(|(f, n)| {
                (
                    u16::from_be_bytes([f[VnetHdr::LEN + 20], f[VnetHdr::LEN + 21]]),
                    *n,
                )
            })
            .collect();
        // The FIN of flow 2 first flushes everything held between the two hosts.
        assert_eq!(summary, vec![(1, 2), (2, 1), (1, 1), (2, 1), (1, 1)]);
        let singles = out.iter().filter(|(_, n)| *n == 1);
        for (f, _) in singles {
            assert_eq!(read_vnet(f).unwrap(), VnetHdr::default());
        }
    }

    #[test]
    fn authenticated_segments_join_without_summing_their_payload() {
        // A payload the peer's sum does not cover still joins (the ICV vouched for
        // it), and the frame carries the partial checksum the kernel completes.
        let mut a = seg(1, 0, TCP_ACK, 100);
        a[60] ^= 1;
        let out = run(&[a, seg(1, 100, TCP_ACK, 100)]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1, 2);
        let f = &out[0].0;
        let p = &f[VnetHdr::LEN..];
        let partial = csum::fold(csum::pseudo(p, 6, p.len() - 20));
        assert_eq!(p[36..38], partial.to_be_bytes());
        assert_eq!(read_vnet(f).unwrap().flags, VnetHdr::F_NEEDS_CSUM);
    }

    #[test]
    fn bad_ip_checksums_non_tcp_and_garbage_pass_through() {
        let mut bad = seg(1, 0, TCP_ACK, 100);
        bad[8] ^= 1;
        let udp = {
            let mut p = seg(1, 0, TCP_ACK, 100);
            p[9] = 17;
            p
        };
        for p in [bad, udp, vec![0x45; 10], vec![], vec![0x60; 80]] {
            let mut g = Gro::default();
            let mut n = 0;
            assert!(!g.push(0, &p, &mut |_, _, _, _| n += 1));
            g.flush(&mut |_, _, _, _| n += 1);
            assert_eq!(n, 0);
        }
    }

    #[test]
    fn never_exceeds_the_ip_limit() {
        let pkts: Vec<Vec<u8>> = (0..100).map(|i| seg(1, i * 1400, TCP_ACK, 1400)).collect();
        let out = run(&pkts);
        assert!(out.iter().all(|(f, _)| f.len() - VnetHdr::LEN <= MAX_IP));
        assert_eq!(out.iter().map(|(_, n)| n).sum::<u64>(), 100);
        assert_eq!(out[0].1, 46);
    }

    #[test]
    fn never_joins_more_than_max_segs() {
        let pkts: Vec<Vec<u8>> = (0..150).map(|i| seg(1, i * 100, TCP_ACK, 100)).collect();
        let out = run(&pkts);
        let counts: Vec<u64> = out.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            counts,
            vec![MAX_SEGS as u64, MAX_SEGS as u64, 150 - 2 * MAX_SEGS as u64]
        );
        let back: Vec<Vec<u8>> = out.iter().flat_map(|(f, _)| resegment(f)).collect();
        assert_eq!(back.len(), 150);
        for (b, p) in back.iter().zip(&pkts) {
            assert_eq!(&b[20..], &p[20..]);
        }
    }
}
