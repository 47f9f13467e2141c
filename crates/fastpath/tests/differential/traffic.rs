//! Generated traffic for the differential tests: conversations between inside hosts
//! and remote hosts (TCP with random and valid flag sequences, UDP, ICMP echo), replies
//! to the addresses the software NAT chose, port forwards, ICMP errors quoting earlier
//! packets, GSO super-frames, time steps, sweeps — and malformed frames made from valid
//! ones (truncation, flipped bytes, bad IHL / version / length / checksum, IP options,
//! fragments, TTL 0, VLAN tags, other EtherTypes, bad TCP offsets and UDP lengths), with
//! the IP checksum repaired half of the time so that the mutations reach the deeper
//! checks.
//!
//! TCP sequence and acknowledgement numbers are consistent: each side sends from where
//! its last passed segment ended and acknowledges everything the other side got
//! through, and a RST carries the sequence number the other side last acknowledged (an
//! exact reset). The software firewall tracks TCP windows and the table tier does not
//! (docs/dataplane.md, "Table tier: differences"), so only in-window TCP keeps the
//! comparison exact; tests/differential/main.rs checks the out-of-window difference
//! separately. Mutated frames still carry any flags.

use etherparse::{icmpv4, Icmpv4Type, PacketBuilder};
use nfx_packet::Direction;

/// A small deterministic generator (xorshift64*), so that a failure names its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

pub const INSIDE: [[u8; 4]; 2] = [[10, 0, 0, 1], [10, 0, 0, 2]];
pub const REMOTE: [[u8; 4]; 2] = [[198, 51, 100, 7], [198, 51, 100, 8]];
pub const PUBLIC: [u8; 4] = [192, 0, 2, 1];
const INSIDE_PORTS: [u16; 5] = [1000, 1005, 2500, 40000, 40001];
const REMOTE_PORTS: [u16; 4] = [53, 80, 443, 5201];

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// One endpoint pair of traffic; `public` is where replies go (learned from the
/// software NAT's output, or the inside endpoint when no NAT translates).
#[derive(Debug, Clone, Copy)]
pub struct Conv {
    pub proto: u8,
    pub inside: ([u8; 4], u16),
    pub remote: ([u8; 4], u16),
    pub public: Option<([u8; 4], u16)>,
    /// TCP: the next sequence number of the inside (0) and remote (1) side.
    pub next: [u32; 2],
    /// TCP: the highest ack each side sent in a segment that got through.
    pub acked: [Option<u32>; 2],
    /// TCP: the right edge each side may send up to (the other side's ack plus
    /// window), when a window tracker knows it.
    pub limit: [Option<u32>; 2],
    /// TCP: which sides a window tracker knows (`None`: it tracks no such flow).
    pub tracked: Option<[bool; 2]>,
}

/// What a window tracker knows of one side of a TCP conversation (see
/// [`Traffic::sync_tcp`]).
#[derive(Debug, Clone, Copy)]
pub struct SideView {
    /// End of what it sent.
    pub end: u32,
    /// The right edge it may send up to.
    pub maxend: u32,
    /// The last ack it sent, if any.
    pub ack: Option<u32>,
}

impl Conv {
    /// The sequence and acknowledgement numbers side `d` sends a segment with `flags`
    /// with: a RST carries the ack the other side last sent (an exact reset), other
    /// segments go on from where the side stopped; the ack is all the other side sent.
    pub fn numbers(&self, d: usize, flags: u8) -> (u32, u32) {
        let seq = if flags & RST != 0 {
            self.acked[1 - d].unwrap_or(self.send_seq(d))
        } else {
            self.send_seq(d)
        };
        (seq, self.next[1 - d])
    }

    /// The sequence number side `d` sends from: where it stopped, but not beyond the
    /// right edge the other side allows (as a sender holds back what does not fit).
    pub fn send_seq(&self, d: usize) -> u32 {
        match self.limit[d] {
            Some(l) if (self.next[d].wrapping_sub(l) as i32) > 0 => l,
            _ => self.next[d],
        }
    }
}

/// What the harness does next.
pub enum Step {
    /// A frame arrives in `dir`; `gso` > 0 makes it a GSO frame of that segment size;
    /// `conv` is the conversation it belongs to (for learning the NAT's choice).
    Frame {
        dir: Direction,
        frame: Vec<u8>,
        gso: u16,
        conv: Option<usize>,
        /// The conversation a frame was made from, mutated or not (for following its
        /// TCP sequence spaces).
        from: Option<usize>,
    },
    /// Time passes (ns).
    Advance(u64),
    /// Both sides sweep expired and idle state.
    Sweep,
    /// Both sides' exported state is compared.
    Checkpoint,
}

/// Which kinds of traffic a configuration sees.
#[derive(Clone, Copy)]
pub struct Mix {
    /// A NAT translates: replies go to the learned public endpoint.
    pub nat: bool,
    /// The NAT has a port forward of tcp 8080 to 10.0.0.1:80.
    pub dnat: bool,
}

pub struct Traffic {
    pub rng: Rng,
    pub convs: Vec<Conv>,
    mix: Mix,
    /// Recent frames as they left (for ICMP errors quoting them), by direction, with
    /// the conversation they belong to.
    recent: [Vec<(Vec<u8>, usize)>; 2],
}

fn eth(
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(src, dst, ttl)
}

/// A TCP segment with sequence number `seq` acknowledging `ack` (when it has ACK).
pub fn tcp(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    flags: u8,
    (seq, ack): (u32, u32),
    payload: &[u8],
) -> Vec<u8> {
    let mut b = eth(src.0, dst.0, 64).tcp(src.1, dst.1, seq, 64000);
    if flags & SYN != 0 {
        b = b.syn();
    }
    if flags & ACK != 0 {
        b = b.ack(ack);
    }
    if flags & FIN != 0 {
        b = b.fin();
    }
    if flags & RST != 0 {
        b = b.rst();
    }
    if flags & 0x08 != 0 {
        b = b.psh();
    }
    if flags & 0x20 != 0 {
        b = b.urg(0);
    }
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

pub fn udp(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    eth(src.0, dst.0, 64)
        .udp(src.1, dst.1)
        .write(&mut v, payload)
        .unwrap();
    v
}

pub fn echo(src: [u8; 4], dst: [u8; 4], id: u16, reply: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let b = eth(src, dst, 64);
    if reply {
        b.icmpv4_echo_reply(id, 7).write(&mut v, b"ping").unwrap();
    } else {
        b.icmpv4_echo_request(id, 7).write(&mut v, b"ping").unwrap();
    }
    v
}

/// An ICMP error from `from` to `to` quoting the IP packet of `inner` (a frame).
pub fn icmp_error(from: [u8; 4], to: [u8; 4], inner: &[u8], kind: u8) -> Vec<u8> {
    let quote_len = (inner.len() - 14).min(if kind == 0 { 28 } else { 64 });
    let t =
        match kind {
            0 => Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Port),
            1 => Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::TtlExceededInTransit),
            _ => Icmpv4Type::DestinationUnreachable(
                icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
            ),
        };
    let mut v = Vec::new();
    eth(from, to, 64)
        .icmpv4(t)
        .write(&mut v, &inner[14..14 + quote_len])
        .unwrap();
    v
}

/// Recomputes the IPv4 header checksum of `f` when its header is readable.
pub fn repair_ip_checksum(f: &mut [u8]) {
    let Some(l3) = l3_of(f) else { return };
    if f.len() < l3 + 20 {
        return;
    }
    let ihl = usize::from(f[l3] & 15) * 4;
    if ihl < 20 || f.len() < l3 + ihl {
        return;
    }
    f[l3 + 10] = 0;
    f[l3 + 11] = 0;
    let c = nfx_packet::checksum::checksum(&f[l3..l3 + ihl]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Offset of the IP header after up to two VLAN tags.
pub fn l3_of(f: &[u8]) -> Option<usize> {
    let mut off = 14;
    let mut et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    for _ in 0..2 {
        if et != 0x8100 && et != 0x88a8 {
            break;
        }
        et = u16::from_be_bytes([*f.get(off + 2)?, *f.get(off + 3)?]);
        off += 4;
    }
    Some(off)
}

/// The EtherType after up to two VLAN tags.
pub fn ethertype(f: &[u8]) -> Option<u16> {
    let l3 = l3_of(f)?;
    (l3 >= 14).then(|| u16::from_be_bytes([f[l3 - 2], f[l3 - 1]]))
}

impl Traffic {
    pub fn new(seed: u64, mix: Mix) -> Self {
        Self {
            rng: Rng::new(seed),
            convs: Vec::new(),
            mix,
            recent: [Vec::new(), Vec::new()],
        }
    }

    fn flags(&mut self) -> u8 {
        match self.rng.below(20) {
            0..=3 => SYN,
            4..=5 => SYN | ACK,
            6..=12 => ACK,
            13..=14 => FIN | ACK,
            15 => RST,
            16 => RST | ACK,
            _ => self.rng.next() as u8,
        }
    }

    fn new_conv(&mut self) -> usize {
        let proto = self.rng.pick(&[6u8, 6, 17, 17, 1, 47]);
        let mut inside = (self.rng.pick(&INSIDE), self.rng.pick(&INSIDE_PORTS));
        let remote = (self.rng.pick(&REMOTE), self.rng.pick(&REMOTE_PORTS));
        if proto == 47 {
            inside.1 = 0;
        }
        let remote = if proto == 1 {
            (remote.0, inside.1)
        } else if proto == 47 {
            (remote.0, 0)
        } else {
            remote
        };
        if let Some(j) = self.same(proto, inside, remote) {
            return j;
        }
        let public = (!self.mix.nat).then_some(inside);
        let next = [self.rng.next() as u32, self.rng.next() as u32];
        self.convs.push(Conv {
            proto,
            inside,
            remote,
            public,
            next,
            acked: [None; 2],
            limit: [None; 2],
            tracked: None,
        });
        self.convs.len() - 1
    }

    /// The conversation between these endpoints, if there is one already: one flow,
    /// one sequence space.
    fn same(&self, proto: u8, inside: ([u8; 4], u16), remote: ([u8; 4], u16)) -> Option<usize> {
        self.convs
            .iter()
            .position(|c| c.proto == proto && c.inside == inside && c.remote == remote)
    }

    /// A port-forward conversation: opened from outside to 192.0.2.1:8080.
    fn new_dnat_conv(&mut self) -> usize {
        let remote = (self.rng.pick(&REMOTE), 30000 + self.rng.below(3) as u16);
        if let Some(j) = self.same(6, (INSIDE[0], 80), remote) {
            return j;
        }
        let next = [self.rng.next() as u32, self.rng.next() as u32];
        self.convs.push(Conv {
            proto: 6,
            inside: (INSIDE[0], 80),
            remote,
            public: Some((PUBLIC, 8080)),
            next,
            acked: [None; 2],
            limit: [None; 2],
            tracked: None,
        });
        self.convs.len() - 1
    }

    fn payload(&mut self) -> Vec<u8> {
        let n = self.rng.below(300) as usize;
        (0..n).map(|i| (i as u8).wrapping_mul(31)).collect()
    }

    fn conv_frame(&mut self, i: usize, dir: Direction) -> Vec<u8> {
        let c = self.convs[i];
        let payload = self.payload();
        let (src, dst) = match dir {
            Direction::Forward => (c.inside, c.remote),
            Direction::Reverse => {
                let to = c
                    .public
                    // Never the pool's port 1000, so that an unknown mapping is not
                    // hit by chance.
                    .unwrap_or_else(|| (PUBLIC, 1001 + self.rng.below(19) as u16));
                (c.remote, to)
            }
        };
        match c.proto {
            6 => {
                let mut f = self.flags();
                let d = usize::from(dir == Direction::Reverse);
                if c.tracked.is_some_and(|t| t[d] && !t[1 - d]) {
                    // The peer has not spoken yet: there is nothing to acknowledge.
                    f &= !ACK;
                }
                tcp(src, dst, f, c.numbers(d, f), &payload)
            }
            17 => udp(src, dst, &payload),
            1 => {
                let reply = self.rng.pct(20) != (dir == Direction::Reverse);
                echo(
                    src.0,
                    dst.0,
                    if dir == Direction::Forward {
                        src.1
                    } else {
                        dst.1
                    },
                    reply,
                )
            }
            _ => {
                let mut v = Vec::new();
                eth(src.0, dst.0, 64)
                    .write(&mut v, etherparse::IpNumber(47), &payload)
                    .unwrap();
                v
            }
        }
    }

    /// Records which conversation owns the NAT mapping a Forward frame (`input`, which
    /// the software passed as `out`) used: the one whose inside endpoint sent it. A
    /// mapping is exclusive per public and remote endpoint, so any other conversation
    /// that held it has lost it (its mapping expired and the port went to this one).
    pub fn learn_mapping(&mut self, input: &[u8], out: &[u8]) {
        if !self.mix.nat {
            return;
        }
        let (Ok(i), Ok(o)) = (nfx_packet::parse(input), nfx_packet::parse(out)) else {
            return;
        };
        let (ik, ok) = (i.key, o.key);
        let public = (ok.src.to_be_bytes(), ok.sport);
        let sender = (ik.src.to_be_bytes(), ik.sport);
        let remote = (ok.dst.to_be_bytes(), ok.dport);
        for c in &mut self.convs {
            let same_remote = c.remote == remote || (ok.proto == 1 && c.remote.0 == remote.0);
            if c.proto != ok.proto || !same_remote {
                continue;
            }
            if c.inside == sender {
                c.public = Some(public);
            } else if c.public == Some(public) {
                c.public = None;
            }
        }
    }

    /// Records how far a TCP segment that got through moved its side's sequence space.
    pub fn learn(&mut self, conv: usize, dir: Direction, out: &[u8]) {
        if let Ok(m) = nfx_packet::parse(out) {
            if let Some(seg) = nfx_packet::tcp::segment(out, &m) {
                let d = usize::from(dir == Direction::Reverse);
                let c = &mut self.convs[conv];
                let end = seg.end();
                if (end.wrapping_sub(c.next[d]) as i32) > 0 {
                    c.next[d] = end;
                }
                if seg.flags & ACK != 0 {
                    c.acked[d] = Some(seg.ack);
                }
            }
        }
        let slot = &mut self.recent[usize::from(dir == Direction::Reverse)];
        if slot.len() > 16 {
            slot.remove(0);
        }
        slot.push((out.to_vec(), conv));
    }

    /// Takes a TCP conversation's sequence spaces from a window tracker (the software
    /// firewall's view after a segment got through), per side (inside, remote) when
    /// that side is known. A segment the tracker ignored (a SYN on an established
    /// connection, ...) moves nothing there, so the generator does not move either.
    /// `None`: the tracker has no such flow.
    pub fn sync_tcp(&mut self, conv: usize, sides: Option<[Option<SideView>; 2]>) {
        let c = &mut self.convs[conv];
        c.tracked = sides.map(|s| s.map(|v| v.is_some()));
        for (d, v) in sides.into_iter().flat_map(|s| s.into_iter().enumerate()) {
            if let Some(v) = v {
                c.next[d] = v.end;
            }
            c.limit[d] = v.map(|v| v.maxend);
            c.acked[d] = v.and_then(|v| v.ack);
        }
    }

    fn mutate(&mut self, f: &mut Vec<u8>) {
        let l3 = l3_of(f).unwrap_or(14);
        match self.rng.below(13) {
            0 => {
                let n = 14 + self.rng.below((f.len() - 14).max(1) as u64) as usize;
                f.truncate(n);
            }
            1 => {
                let at = self.rng.below(f.len().min(80) as u64) as usize;
                f[at] ^= 1 << self.rng.below(8);
            }
            2 => f[l3] = (f[l3] & 0xf0) | self.rng.below(16) as u8,
            3 => f[l3] = (self.rng.below(16) as u8) << 4 | (f[l3] & 15),
            4 => {
                let t = self.rng.below(f.len() as u64 + 40) as u16;
                f[l3 + 2..l3 + 4].copy_from_slice(&t.to_be_bytes());
            }
            5 => self.insert_options(f, l3),
            6 => {
                let frag: u16 = self.rng.pick(&[0x2000, 0x2001, 0x0001, 0x4000, 0x3fff]);
                f[l3 + 6..l3 + 8].copy_from_slice(&frag.to_be_bytes());
            }
            7 => f[l3 + 8] = self.rng.pick(&[0u8, 1, 2]),
            8 => {
                let tags = 1 + self.rng.below(3) as usize;
                for _ in 0..tags {
                    let tpid: u16 = self.rng.pick(&[0x8100, 0x88a8]);
                    let mut tag = tpid.to_be_bytes().to_vec();
                    tag.extend_from_slice(&[0, 5]);
                    f.splice(12..12, tag);
                }
            }
            9 => {
                let et: u16 = self.rng.pick(&[0x0806, 0x86dd, 0x88cc, 0x0800]);
                f[12..14].copy_from_slice(&et.to_be_bytes());
            }
            10 => {
                let ihl = usize::from(f[l3] & 15) * 4;
                if f[l3 + 9] == 6 && f.len() > l3 + ihl + 12 {
                    f[l3 + ihl + 12] = (self.rng.below(16) as u8) << 4;
                }
            }
            11 => {
                let ihl = usize::from(f[l3] & 15) * 4;
                if f[l3 + 9] == 17 && f.len() > l3 + ihl + 6 {
                    let l = self.rng.below(f.len() as u64) as u16;
                    f[l3 + ihl + 4..l3 + ihl + 6].copy_from_slice(&l.to_be_bytes());
                }
            }
            _ => {
                let at = l3 + self.rng.below(40) as usize;
                if at < f.len() {
                    f[at] = self.rng.next() as u8;
                }
            }
        }
        if self.rng.pct(60) {
            repair_ip_checksum(f);
        }
    }

    /// Named relaxation: a mutation that leaves a TCP header where the parsers look for
    /// it gets the conversation's sequence and acknowledgement numbers for its (possibly
    /// mutated) flags back, since out-of-window segments are a documented difference
    /// between the tiers (the software firewall tracks windows, the table tier does
    /// not; tests/differential/main.rs checks that difference on its own).
    fn keep_in_window(&self, f: &mut [u8], conv: usize, dir: Direction) {
        let Some(l3) = l3_of(f) else { return };
        if f.len() < l3 + 20 || f[l3 + 9] != 6 || ethertype(f) != Some(0x0800) {
            return;
        }
        let th = l3 + usize::from(f[l3] & 15) * 4;
        let Some(h) = f.get_mut(th..th + 14) else {
            return;
        };
        let (seq, ack) = self.convs[conv].numbers(usize::from(dir == Direction::Reverse), h[13]);
        h[4..8].copy_from_slice(&seq.to_be_bytes());
        h[8..12].copy_from_slice(&ack.to_be_bytes());
    }

    fn insert_options(&mut self, f: &mut Vec<u8>, l3: usize) {
        let opts: Vec<u8> = match self.rng.below(5) {
            0 => vec![1, 1, 1, 0],
            1 => vec![7, 4, 0, 0],
            2 => vec![1, 0, 0, 0],
            3 => vec![7, 1, 0, 0],
            _ => vec![68, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        if f.len() < l3 + 20 {
            return;
        }
        let ihl = usize::from(f[l3] & 15) * 4;
        if ihl != 20 {
            return;
        }
        f.splice(l3 + 20..l3 + 20, opts.iter().copied());
        f[l3] = 0x40 | ((20 + opts.len()) / 4) as u8;
        let total = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) + opts.len() as u16;
        f[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
        repair_ip_checksum(f);
    }

    /// The next step.
    pub fn step(&mut self) -> Step {
        let roll = self.rng.below(100);
        match roll {
            0..=4 => {
                let d = if self.rng.pct(85) {
                    1_000_000 + self.rng.below(800_000_000)
                } else {
                    1_000_000_000 + self.rng.below(12_000_000_000)
                };
                Step::Advance(d)
            }
            5..=7 => Step::Sweep,
            8..=9 => Step::Checkpoint,
            10..=14 => self.icmp_error_step(),
            15..=17 if self.mix.dnat => {
                let i = self.new_dnat_conv();
                let frame = self.conv_frame(i, Direction::Reverse);
                Step::Frame {
                    dir: Direction::Reverse,
                    frame,
                    gso: 0,
                    conv: Some(i),
                    from: Some(i),
                }
            }
            18..=21 => {
                let i = self.any_conv();
                let c = self.convs[i];
                // A test run takes at most about 3.5 KB (one page less head and tail room).
                let big: Vec<u8> = vec![0x5a; 1500 + self.rng.below(1800) as usize];
                let frame = if c.proto == 6 {
                    tcp(c.inside, c.remote, ACK, (c.send_seq(0), c.next[1]), &big)
                } else {
                    udp(c.inside, c.remote, &big)
                };
                Step::Frame {
                    dir: Direction::Forward,
                    frame,
                    gso: if c.proto == 6 { 1448 } else { 0 },
                    conv: Some(i),
                    from: Some(i),
                }
            }
            22..=31 => {
                let dir = if self.rng.pct(50) {
                    Direction::Forward
                } else {
                    Direction::Reverse
                };
                let i = self.any_conv();
                let mut frame = self.conv_frame(i, dir);
                self.mutate(&mut frame);
                self.keep_in_window(&mut frame, i, dir);
                Step::Frame {
                    dir,
                    frame,
                    gso: 0,
                    conv: None,
                    from: Some(i),
                }
            }
            _ => {
                let dir = if self.rng.pct(55) || self.convs.is_empty() {
                    Direction::Forward
                } else {
                    Direction::Reverse
                };
                let i = if dir == Direction::Forward && (self.convs.len() < 3 || self.rng.pct(15)) {
                    self.new_conv()
                } else {
                    self.any_conv()
                };
                let frame = self.conv_frame(i, dir);
                Step::Frame {
                    dir,
                    frame,
                    gso: 0,
                    conv: Some(i),
                    from: Some(i),
                }
            }
        }
    }

    fn any_conv(&mut self) -> usize {
        if self.convs.is_empty() {
            return self.new_conv();
        }
        // Recent conversations more often, so that flows go through their states.
        let n = self.convs.len() as u64;
        let back = self.rng.below(n.min(8));
        (n - 1 - back) as usize
    }

    fn icmp_error_step(&mut self) -> Step {
        let dir = if self.rng.pct(50) {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        // A frame that went the other way, quoted by an error travelling back.
        let other = usize::from(dir == Direction::Forward);
        let kind = self.rng.below(3) as u8;
        let Some((mut quoted, conv)) = (!self.recent[other].is_empty()).then(|| {
            let i = self.rng.below(self.recent[other].len() as u64) as usize;
            self.recent[other][i].clone()
        }) else {
            return Step::Advance(1_000_000);
        };
        // A TCP segment is quoted with a sequence number its sender may still have in
        // flight (the end of what it sent), as the software firewall requires (RFC 5927
        // §4.1); older quotes are the software's to refuse (docs/dataplane.md).
        let l3 = l3_of(&quoted).unwrap_or(14);
        if quoted.get(l3 + 9) == Some(&6) {
            let at = l3 + usize::from(quoted[l3] & 15) * 4 + 4;
            // A forward frame after NAT names its mapping, which may belong to another
            // conversation by now (the port went to it).
            let owner = match nfx_packet::parse(&quoted) {
                Ok(m) if other == 0 && self.mix.nat => {
                    let (public, remote) = (
                        (m.key.src.to_be_bytes(), m.key.sport),
                        (m.key.dst.to_be_bytes(), m.key.dport),
                    );
                    self.convs
                        .iter()
                        .position(|c| {
                            c.proto == 6 && c.public == Some(public) && c.remote == remote
                        })
                        .unwrap_or(conv)
                }
                _ => conv,
            };
            let seq = self.convs[owner].next[other];
            if let Some(b) = quoted.get_mut(at..at + 4) {
                b.copy_from_slice(&seq.to_be_bytes());
            }
        }
        let Ok(m) = nfx_packet::parse(&quoted) else {
            return Step::Advance(1_000_000);
        };
        let (orig_src, orig_dst) = (m.key.src.to_be_bytes(), m.key.dst.to_be_bytes());
        // The quoted packet's destination reports back to its source.
        let frame = icmp_error(orig_dst, orig_src, &quoted, kind);
        Step::Frame {
            dir,
            frame,
            gso: 0,
            conv: None,
            from: None,
        }
    }
}
