//! The worker's side of the table tier (`fast_path:` in the run config): it fills the
//! kernel fast path ([`nfx_fastpath`]) with the flows its chain has settled, arms them
//! when no frame of theirs is left behind in userspace, replays what the fast path
//! forwarded through the chain so that every VNF's state and counters stay exact, and
//! takes flows back when the chain's verdict may change.
//!
//! Life of an entry:
//! 1. *learn* — a frame leaves the chain alive with [`Packet::fast`] still set (every
//!    VNF is offloadable and none cleared it: an established TCP connection or a UDP
//!    flow the ACL admitted), plain IPv4 (no options, no fragment) over TCP/UDP without
//!    SYN/FIN/RST: the worker installs a pending entry keyed by the arrival interface and
//!    the frame's arrival 5-tuple, carrying the rewrite the chain applied (MACs,
//!    addresses, ports) and the output interface.
//! 2. *arm* — when a receive on a side with pending entries finds the socket empty, the
//!    worker reads their control words, then checks that every frame the program
//!    handed up on that side has arrived at the socket and been taken from it (the
//!    program and the socket's filter count them, the port counts what it took:
//!    [`nfx_fastpath::FastPath::delivered`]) and that the kernel has finished with the
//!    frames sent on the other side; then a compare-and-swap arms each entry unless a
//!    frame was counted since its word was read (then it tries at the next empty
//!    receive). An empty socket alone proves nothing: a frame counted by the program
//!    can still be on its way into the ring, whose slots another CPU may fill out of
//!    order.
//! 3. *sync* — every tick (100 ms) each entry whose counters moved is replayed: a
//!    header-only copy of the flow's frame, as it arrived, carrying the packet and byte
//!    deltas ([`Packet::replay`]) runs through the chain; nodes refresh timeouts and
//!    count. If the chain now drops it (a rule changed, state expired), the entry is
//!    removed.
//! 4. *remove* — on a SYN, FIN or RST of the flow in either direction (the fast path
//!    already hands those up and disarms), after [`IDLE`] without traffic, on a full
//!    replay drop, and for all entries before any reconfiguration, state export or
//!    drain ([`FastPathWorker::flush`]). Removal only sends frames back to userspace.

use crate::graph::Graph;
use nfx_fastpath::{Action, FastPath, FlowKey4, InstallError, SlotCounters};
use nfx_io::sys::ifindex;
use nfx_packet::checksum::checksum;
use nfx_packet::parse::{IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::rewrite::{set_addr, set_port, End};
use nfx_packet::{Direction, FlowKey, Packet, PacketBuf, Replay};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::Duration;

/// An entry with no traffic for this long is removed; the flow's next frame is judged
/// by the chain again and re-installs it. Shorter with short flow timeouts: half the
/// chain's shortest [`Graph::flow_timeout_ns`], so that an entry is always gone before
/// the state behind its verdict can expire (replays refresh that state every tick while
/// the flow carries traffic).
pub const IDLE: Duration = Duration::from_secs(10);

/// Most entries replayed per tick, so that a huge table cannot stall the worker.
pub const SYNC_BUDGET: usize = 8192;

const TCP_SYN_FIN_RST: u8 = 0x07;
const TCP_ACK: u8 = 0x10;

pub use nfx_proto::FastPathStats;

struct Entry {
    slot: u32,
    side: usize,
    /// The frame's headers as they left the chain (replays are built from them).
    template: Vec<u8>,
    /// The flow key the frames arrive with.
    in_key: FlowKey,
    /// The entry of the other direction (it may not exist).
    reverse: FlowKey4,
    synced: SlotCounters,
    installed_ns: u64,
    armed: bool,
}

/// Why entries leave the table.
#[derive(Clone, Copy)]
enum Removal {
    Closed,
    Idle,
    Revoked,
    Flushed,
}

/// One worker's fast path: the kernel table and what the worker knows of each entry.
pub struct FastPathWorker {
    fp: FastPath,
    ifindex: [u32; 2],
    ifaces: [String; 2],
    entries: HashMap<FlowKey4, Entry>,
    /// Keys of entries not yet armed, by arrival side.
    pending: [Vec<FlowKey4>; 2],
    stats: FastPathStats,
    sync_keys: Vec<FlowKey4>,
}

impl FastPathWorker {
    /// Loads the fast path with `capacity` entries and registers the inside and outside
    /// interfaces (in the calling thread's namespace) as its ports 0 and 1. Open the
    /// ports' sockets with [`Self::socket_filter`], then [`Self::attach`].
    pub fn load(capacity: u32, ifaces: [&str; 2]) -> std::io::Result<Self> {
        let mut fp = FastPath::load(capacity)?;
        for (side, i) in ifaces.iter().enumerate() {
            let port = fp.register(i)?;
            debug_assert_eq!(port, side);
        }
        Ok(Self {
            stats: FastPathStats {
                capacity: u64::from(fp.capacity()),
                memory_bytes: fp.memory_bytes() as u64,
                ..FastPathStats::default()
            },
            fp,
            ifindex: [ifindex(ifaces[0])?, ifindex(ifaces[1])?],
            ifaces: ifaces.map(str::to_string),
            entries: HashMap::new(),
            pending: [Vec::new(), Vec::new()],
            sync_keys: Vec::new(),
        })
    }

    /// The socket filter each port's packet socket must carry from before it binds.
    pub fn socket_filter(&self) -> std::io::Result<RawFd> {
        self.fp.socket_filter()
    }

    /// Attaches the program to both interfaces: from here on it takes flows.
    pub fn attach(&mut self) -> std::io::Result<()> {
        for i in &self.ifaces {
            self.fp.attach(i)?;
        }
        Ok(())
    }

    /// True while entries of frames arriving on `side` wait to be armed.
    pub fn has_pending(&self, side: usize) -> bool {
        !self.pending[side].is_empty()
    }

    /// Call when a receive on `side` found the socket empty and everything received was
    /// sent: `taken` is what that port's socket has given up since it opened (frames
    /// received plus socket drops), `out_idle` whether the kernel has finished with every
    /// frame sent on the other port. Arms the pending entries of `side` when none of the
    /// frames they counted is still on its way through userspace.
    pub fn receive_was_empty(&mut self, side: usize, taken: u64, out_idle: bool) {
        if !out_idle || self.pending[side].is_empty() {
            return;
        }
        let (fp, entries, stats) = (&self.fp, &mut self.entries, &mut self.stats);
        let seen: Vec<Option<u64>> = self.pending[side]
            .iter()
            .map(|k| entries.get(k).map(|e| fp.ctl(e.slot)))
            .collect();
        if !fp.delivered(side, taken) {
            return;
        }
        let mut seen = seen.into_iter();
        self.pending[side].retain(|k| {
            let Some(seen) = seen.next().flatten() else {
                return false;
            };
            let Some(e) = entries.get_mut(k) else {
                return false;
            };
            if fp.arm(e.slot, seen) {
                e.armed = true;
                stats.armed += 1;
                false
            } else {
                true
            }
        });
    }

    /// Call after a vector from `side` was sent (its first `sent` packets went out):
    /// retires the entries of flows that open or close (after replaying what they
    /// forwarded), installs settled flows.
    pub fn learn(
        &mut self,
        graph: &mut Graph,
        pkts: &[Packet],
        side: usize,
        sent: usize,
        now_ns: u64,
    ) {
        for (i, p) in pkts.iter().enumerate() {
            let tcp_flags = if p.in_key.proto == IPPROTO_TCP {
                p.meta.tcp_flags
            } else {
                0
            };
            let key = self.key(side, &p.in_key);
            if tcp_flags & TCP_SYN_FIN_RST != 0 {
                if let Some(e) = self.entries.get(&key) {
                    let reverse = e.reverse;
                    self.retire(graph, &key, Removal::Closed, now_ns);
                    self.retire(graph, &reverse, Removal::Closed, now_ns);
                } else if p.alive() {
                    let out = self.key(1 - side, &p.meta.key.reversed());
                    self.retire(graph, &out, Removal::Closed, now_ns);
                }
                continue;
            }
            if i < sent && p.alive() && p.fast && eligible(p) && !self.entries.contains_key(&key) {
                self.install(key, p, side, now_ns);
            }
        }
    }

    fn key(&self, side: usize, k: &FlowKey) -> FlowKey4 {
        FlowKey4 {
            ifindex: self.ifindex[side],
            proto: k.proto,
            src: k.src,
            dst: k.dst,
            sport: k.sport,
            dport: k.dport,
        }
    }

    fn install(&mut self, key: FlowKey4, p: &Packet, side: usize, now_ns: u64) {
        let f = p.buf.frame();
        let out = p.meta.key;
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&f[..12]);
        let action = Action {
            out_ifindex: self.ifindex[1 - side],
            macs,
            src: out.src,
            dst: out.dst,
            sport: out.sport,
            dport: out.dport,
        };
        match self.fp.install(&key, &action) {
            Ok(slot) => {
                self.stats.installed += 1;
                self.pending[side].push(key);
                let reverse = self.key(1 - side, &out.reversed());
                self.entries.insert(
                    key,
                    Entry {
                        slot,
                        side,
                        template: f[..p.meta.payload].to_vec(),
                        in_key: p.in_key,
                        reverse,
                        synced: SlotCounters::default(),
                        installed_ns: now_ns,
                        armed: false,
                    },
                );
            }
            Err(InstallError::Full) => self.stats.full += 1,
            Err(InstallError::Map(e)) => {
                if self.stats.errors == 0 {
                    log::warn!("fast path: {e}");
                }
                self.stats.errors += 1;
            }
        }
    }

    fn remove(&mut self, key: &FlowKey4, why: Removal) {
        let Some(e) = self.entries.remove(key) else {
            return;
        };
        self.fp.remove(key, e.slot);
        self.pending[e.side].retain(|k| k != key);
        let c = match why {
            Removal::Closed => &mut self.stats.removed_closed,
            Removal::Idle => &mut self.stats.removed_idle,
            Removal::Revoked => &mut self.stats.removed_revoked,
            Removal::Flushed => &mut self.stats.removed_flushed,
        };
        *c += 1;
    }

    /// Replays what the entry of `key` forwarded since its last sync through `graph`;
    /// removes the entry (revoked) and returns false if the chain no longer passes it.
    fn settle(&mut self, graph: &mut Graph, key: &FlowKey4, now_ns: u64) -> bool {
        let Some(e) = self.entries.get_mut(key) else {
            return false;
        };
        let c = self.fp.counters(e.slot);
        if c.packets <= e.synced.packets {
            return true;
        }
        let r = Replay {
            packets: c.packets - e.synced.packets,
            bytes: c.bytes.saturating_sub(e.synced.bytes),
        };
        e.synced = c;
        self.stats.packets += r.packets;
        self.stats.bytes += r.bytes;
        let mut p = replay_packet(e, r);
        if graph.replay(&mut p, now_ns) {
            return true;
        }
        self.remove(key, Removal::Revoked);
        false
    }

    /// Settles, then removes the entry of `key` (if any).
    fn retire(&mut self, graph: &mut Graph, key: &FlowKey4, why: Removal, now_ns: u64) {
        if self.settle(graph, key, now_ns) {
            self.remove(key, why);
        }
    }

    /// Replays what the fast path forwarded since the last sync through `graph` (at
    /// most [`SYNC_BUDGET`] entries), removes entries the chain no longer passes and
    /// entries idle for [`IDLE`].
    pub fn sync(&mut self, graph: &mut Graph, now_ns: u64) {
        let mut keys = std::mem::take(&mut self.sync_keys);
        keys.clear();
        keys.extend(self.entries.keys().copied());
        let mut replays = 0;
        let idle_ns = graph.flow_timeout_ns().map_or(IDLE.as_nanos() as u64, |t| {
            (t / 2).min(IDLE.as_nanos() as u64)
        });
        for key in &keys {
            let Some((slot, synced, installed_ns)) = self
                .entries
                .get(key)
                .map(|e| (e.slot, e.synced, e.installed_ns))
            else {
                continue;
            };
            let c = self.fp.counters(slot);
            if c.packets > synced.packets {
                if replays == SYNC_BUDGET {
                    continue;
                }
                replays += 1;
                if !self.settle(graph, key, now_ns) {
                    continue;
                }
            }
            if now_ns.saturating_sub(c.last_ns.max(installed_ns)) > idle_ns {
                self.remove(key, Removal::Idle);
            }
        }
        self.sync_keys = keys;
    }

    /// Settles and removes every entry: the chain sees every frame again (before a
    /// reconfiguration, a state export or a drain).
    pub fn flush(&mut self, graph: &mut Graph, now_ns: u64) {
        let keys: Vec<FlowKey4> = self.entries.keys().copied().collect();
        for k in keys {
            self.retire(graph, &k, Removal::Flushed, now_ns);
        }
    }

    /// The counters for the stats document.
    pub fn stats(&self) -> FastPathStats {
        FastPathStats {
            entries: self.entries.len() as u64,
            active: self
                .entries
                .values()
                .filter(|e| e.armed && self.fp.is_active(e.slot))
                .count() as u64,
            ..self.stats.clone()
        }
    }
}

/// Whether the fast path can apply the chain's verdict to this frame's flow: plain
/// Ethernet + IPv4 without options or fragmentation, TCP or UDP.
fn eligible(p: &Packet) -> bool {
    let m = &p.meta;
    let f = p.buf.frame();
    m.l3 == 14
        && m.l4 == 34
        && (m.key.proto == IPPROTO_TCP || m.key.proto == IPPROTO_UDP)
        && f.len() >= m.payload
        && u16::from_be_bytes([f[20], f[21]]) & 0x3fff == 0
}

/// The header-only packet that stands for an entry's forwarded traffic: the template
/// with the arrival addresses and ports put back (checksums kept valid), TCP flags
/// reduced to ACK, and the counts attached.
fn replay_packet(e: &Entry, r: Replay) -> Packet {
    let dir = if e.side == 0 {
        Direction::Forward
    } else {
        Direction::Reverse
    };
    let mut p = Packet::new(PacketBuf::from_frame(&e.template), dir);
    {
        let f = p.buf.frame_mut();
        let ip_len = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[22] = 64;
        if e.in_key.proto == IPPROTO_TCP && f.len() >= 34 + 14 {
            f[34 + 13] = TCP_ACK;
        }
        if e.in_key.proto == IPPROTO_UDP && f.len() >= 34 + 8 {
            f[38..40].copy_from_slice(&8u16.to_be_bytes());
        }
        f[24..26].copy_from_slice(&[0, 0]);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
    match nfx_packet::parse(p.buf.frame()) {
        Ok(meta) => p.meta = meta,
        Err(reason) => {
            p.drop = Some(reason);
            return p;
        }
    }
    let k = e.in_key;
    set_addr(&mut p, End::Src, k.src);
    set_addr(&mut p, End::Dst, k.dst);
    set_port(&mut p, End::Src, k.sport);
    set_port(&mut p, End::Dst, k.dport);
    p.in_key = k;
    p.replay = Some(r);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_packet::parse;

    fn tcp_frame(payload: &[u8], flags_ack_only: bool) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 1, 5], [10, 0, 2, 9], 64)
            .tcp(40000, 5201, 1000, 65535);
        let b = if flags_ack_only { b.ack(7) } else { b.syn() };
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    fn packet(frame: &[u8]) -> Packet {
        let mut p = Packet::new(PacketBuf::from_frame(frame), Direction::Forward);
        p.meta = parse(frame).unwrap();
        p.in_key = p.meta.key;
        p
    }

    #[test]
    fn only_plain_ipv4_tcp_and_udp_frames_are_eligible() {
        assert!(eligible(&packet(&tcp_frame(b"data", true))));
        let mut frag = tcp_frame(b"data", true);
        frag[20] |= 0x20;
        let mut p = packet(&tcp_frame(b"data", true));
        p.buf = PacketBuf::from_frame(&frag);
        assert!(!eligible(&p), "a fragment");
        let mut icmp = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
            .icmpv4_echo_request(1, 1)
            .write(&mut icmp, b"x")
            .unwrap();
        assert!(!eligible(&packet(&icmp)));
    }

    #[test]
    fn a_replay_is_the_arrival_header_with_ack_and_the_counts() {
        let frame = tcp_frame(&[7u8; 1000], true);
        let mut p = packet(&frame);
        let arrival = p.meta.key;
        // What a source NAT and the output node make of it.
        set_addr(&mut p, End::Src, 0x0a00_0264);
        set_port(&mut p, End::Src, 61000);
        let out = p.buf.frame().to_vec();
        let e = Entry {
            slot: 0,
            side: 0,
            template: out[..p.meta.payload].to_vec(),
            in_key: arrival,
            reverse: FlowKey4 {
                ifindex: 2,
                proto: 6,
                src: 0,
                dst: 0,
                sport: 0,
                dport: 0,
            },
            synced: SlotCounters::default(),
            installed_ns: 0,
            armed: true,
        };
        let r = Replay {
            packets: 40,
            bytes: 40 * 1040,
        };
        let rp = replay_packet(&e, r);
        assert_eq!(rp.drop, None);
        assert_eq!(rp.meta.key, arrival);
        assert_eq!(rp.in_key, arrival);
        assert_eq!(rp.meta.tcp_flags, TCP_ACK);
        assert_eq!(rp.replay, Some(r));
        assert_eq!(rp.dir, Direction::Forward);
        let f = rp.buf.frame();
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
        assert_eq!(usize::from(ip.total_len()), f.len() - 14, "header only");
        assert_eq!(
            ip.header_checksum(),
            ip.to_header().calc_header_checksum(),
            "IP checksum"
        );
    }
}
