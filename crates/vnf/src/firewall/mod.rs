//! The stateful firewall node: an ordered ACL consulted for packets that create
//! state, and connection tracking after Linux `nf_conntrack` (TCP state machine with
//! window tracking, UDP / ICMP echo pseudo-state, per-state timeouts, assured flows,
//! early drop of unassured flows when full, per-source quotas) in a bounded
//! [`FlowTable`]. docs/vnf-firewall-nat.md states the packet semantics exactly.
//!
//! Entries are keyed by the canonical form of the flow key (lower endpoint first), so
//! both directions of a flow find the same entry with one lookup; the entry remembers
//! which endpoint opened the flow and from which side. Forward-direction packets create
//! state (after the ACL allows them); Reverse-direction packets pass only when they
//! belong to tracked state, unless `reverse_new: acl`.

pub mod acl;
pub mod config;
mod icmp;
mod state;
pub mod tcp;
pub mod track;
pub mod window;

pub use config::FirewallConfig;
/// Bytes per exported firewall flow (the table tier writes and reads this format).
pub use state::mark_windows_behind;
pub use state::RECORD_LEN as STATE_RECORD_LEN;

use crate::table::counts::CountTable;
use crate::table::{Entry, FlowTable, Insert, TableValue};
use crate::{ImportReport, Node, NodeCtx, StateError};
use acl::Acl;
use nfx_packet::parse::{icmp_is_echo, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::{Direction, DropReason, FlowKey, Packet};
use tcp::TcpState;
use track::Verdict;
use window::Windows;

/// Pseudo-state of a UDP / ICMP echo / other flow not answered yet.
pub const STATE_NEW: u8 = 9;
/// Pseudo-state of a UDP / ICMP echo / other flow that saw a reply.
pub const STATE_REPLIED: u8 = 10;
/// Number of state codes (TCP states 0..=8, then the two pseudo-states).
pub const NSTATES: usize = 11;

/// Entry flag: the canonical key is the reverse of the originator's key.
const SWAPPED: u8 = 0x80;
/// Entry flag: opened by a Reverse-direction packet (`reverse_new: acl`).
const REV_OPEN: u8 = 0x40;
/// Entry flag: the responder has sent a valid packet.
const SEEN_REPLY: u8 = 0x08;
/// Entry flag: assured (a completed handshake, or traffic both ways): never evicted
/// to make room, as Linux's `IPS_ASSURED`.
const ASSURED: u8 = 0x04;
/// Entry flags holding the TCP FIN bits.
const FINS: u8 = tcp::FIN_ORIG | tcp::FIN_REPLY;
/// Every entry flag.
const ALL_FLAGS: u8 = SWAPPED | REV_OPEN | SEEN_REPLY | ASSURED | FINS;

/// Whether a flow may leave its later packets to the fast path: an assured,
/// window-tracked established TCP connection (its SYN, FIN and RST still come back to
/// the firewall) or a UDP flow the ACL let in. Everything else keeps every packet here.
pub fn settled(proto: u8, v: &FwVal) -> bool {
    match proto {
        IPPROTO_TCP => {
            v.state == TcpState::Established as u8
                && v.flags & ASSURED != 0
                && !v.win.is_picked_up(0)
                && !v.win.is_picked_up(1)
        }
        IPPROTO_UDP => true,
        _ => false,
    }
}

/// Name of a state code for stats.
pub fn state_name(code: u8) -> &'static str {
    match code {
        STATE_NEW => "new",
        STATE_REPLIED => "replied",
        c => TcpState::from_u8(c).map_or("unknown", TcpState::as_str),
    }
}

/// Why the firewall dropped a packet: finer than the packet's [`DropReason`], each
/// counted in the node's stats (`drops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FwDrop {
    /// The ACL denies the new flow.
    AclDeny,
    /// Not valid for the tracked state (or no state and not allowed to create it).
    InvalidState,
    /// TCP data or ACK outside the tracked window.
    OutOfWindow,
    /// A RST outside the window or before the peer's last ACK (a blind reset).
    InvalidRst,
    /// An ICMP error about a tracked flow whose addresses, direction or quoted
    /// sequence number do not fit that flow.
    IcmpMismatch,
    /// The table is full of assured flows.
    TableFull,
    /// The source already holds `max_flows_per_source` flows.
    SourceLimit,
}

impl FwDrop {
    /// Every reason, in discriminant order.
    pub const ALL: [FwDrop; 7] = [
        FwDrop::AclDeny,
        FwDrop::InvalidState,
        FwDrop::OutOfWindow,
        FwDrop::InvalidRst,
        FwDrop::IcmpMismatch,
        FwDrop::TableFull,
        FwDrop::SourceLimit,
    ];

    /// snake_case name for stats.
    pub fn as_str(self) -> &'static str {
        match self {
            FwDrop::AclDeny => "acl_deny",
            FwDrop::InvalidState => "invalid_state",
            FwDrop::OutOfWindow => "out_of_window",
            FwDrop::InvalidRst => "invalid_rst",
            FwDrop::IcmpMismatch => "icmp_mismatch",
            FwDrop::TableFull => "table_full",
            FwDrop::SourceLimit => "source_limit",
        }
    }

    /// The packet's drop reason (the runtime's per-node counters).
    pub fn reason(self) -> DropReason {
        match self {
            FwDrop::AclDeny => DropReason::AclDeny,
            FwDrop::InvalidState
            | FwDrop::OutOfWindow
            | FwDrop::InvalidRst
            | FwDrop::IcmpMismatch => DropReason::InvalidState,
            FwDrop::TableFull | FwDrop::SourceLimit => DropReason::TableFull,
        }
    }
}

/// What the firewall keeps per flow: 40 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FwVal {
    /// State code (TCP state, [`STATE_NEW`] or [`STATE_REPLIED`]).
    pub state: u8,
    /// `SWAPPED`, `REV_OPEN`, `SEEN_REPLY`, `ASSURED` and FIN bits.
    pub flags: u8,
    /// TCP windows (zero for other protocols).
    pub win: Windows,
}

impl FwVal {
    /// True when the connection is closing (FIN or RST seen): early drop may take it
    /// even when assured (Linux's `tcp_can_early_drop`).
    fn closing(&self) -> bool {
        (TcpState::FinWait as u8..=TcpState::Close as u8).contains(&self.state)
    }
}

// SAFETY: only integer fields, valid when zero.
unsafe impl TableValue for FwVal {
    /// Unassured flows and closing connections may be evicted; assured ones may not.
    fn evictable(&self) -> bool {
        self.flags & ASSURED == 0 || self.closing()
    }
}

/// Per-state timeouts in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    tcp: [u64; 9],
    unacknowledged: u64,
    udp: u64,
    udp_stream: u64,
    icmp: u64,
    generic: u64,
}

impl Timeouts {
    /// From [syn_sent, syn_recv, established, fin_wait, close_wait, last_ack,
    /// time_wait, close, unacknowledged, udp, udp_stream, icmp, generic] in ns.
    pub fn from_array(a: [u64; 13]) -> Self {
        let mut tcp = [a[0]; 9];
        tcp[1..9].copy_from_slice(&a[0..8]);
        Self {
            tcp,
            unacknowledged: a[8],
            udp: a[9],
            udp_stream: a[10],
            icmp: a[11],
            generic: a[12],
        }
    }

    /// How long a flow in `v` lives without traffic. An established connection that
    /// is not assured, was picked up mid-stream or has data outstanding gets at most
    /// `unacknowledged` (5 days only for a fully established, window-tracked one).
    pub fn of(&self, proto: u8, v: &FwVal) -> u64 {
        match (proto, v.state) {
            (IPPROTO_TCP, s) => {
                let t = self.tcp[usize::from(s).min(8)];
                if v.flags & ASSURED == 0 || v.win.doubtful() {
                    t.min(self.unacknowledged)
                } else {
                    t
                }
            }
            (IPPROTO_UDP, STATE_NEW) => self.udp,
            (IPPROTO_UDP, _) => self.udp_stream,
            (IPPROTO_ICMP, _) => self.icmp,
            _ => self.generic,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        config::TimeoutConfig::default().as_timeouts()
    }
}

/// The key both directions of a flow share (lower endpoint first) and whether `k`
/// had to be reversed to get it.
#[inline]
pub fn canonical(k: &FlowKey) -> (FlowKey, bool) {
    if (k.src, k.sport) > (k.dst, k.dport) {
        (k.reversed(), true)
    } else {
        (*k, false)
    }
}

/// The address that opened the flow stored under canonical `key` with entry `flags`
/// (per-source quotas count it), as a count-table key.
fn opener(key: &FlowKey, flags: u8) -> u64 {
    u64::from(if flags & SWAPPED != 0 {
        key.dst
    } else {
        key.src
    })
}

/// The stateful firewall node.
pub struct Firewall {
    name: String,
    acl: Acl,
    table: FlowTable<FwVal>,
    timeouts: Timeouts,
    loose: bool,
    reverse_acl: bool,
    per_source: u32,
    sources: Option<CountTable>,
    by_state: [u64; NSTATES],
    drops: [u64; FwDrop::ALL.len()],
    created: u64,
    expired: u64,
    imports: ImportReport,
    now_ns: u64,
    clock_seen: bool,
    rebase_pending: bool,
}

impl Firewall {
    /// A firewall with a validated ACL, table size and timeouts.
    pub fn new(
        name: &str,
        acl: Acl,
        max_flows: usize,
        timeouts: Timeouts,
        loose: bool,
        reverse_acl: bool,
    ) -> Self {
        Self {
            name: name.to_string(),
            acl,
            table: FlowTable::new(max_flows),
            timeouts,
            loose,
            reverse_acl,
            per_source: 0,
            sources: None,
            by_state: [0; NSTATES],
            drops: [0; FwDrop::ALL.len()],
            created: 0,
            expired: 0,
            imports: ImportReport::default(),
            now_ns: 0,
            clock_seen: false,
            rebase_pending: false,
        }
    }

    /// The same firewall, holding at most `n` flows per originating address (0: no
    /// limit). Call before any flow is tracked.
    pub fn with_source_limit(mut self, n: u32) -> Self {
        self.per_source = n;
        self.sources = (n > 0).then(|| CountTable::new(self.table.capacity()));
        self
    }

    /// Number of tracked flows.
    pub fn flows(&self) -> usize {
        self.table.len()
    }

    /// The tracked state of the flow `k` belongs to (either direction).
    pub fn state_of(&self, k: &FlowKey) -> Option<u8> {
        self.entry_of(k).map(|v| v.state)
    }

    /// The tracked entry of the flow `k` belongs to (either direction).
    pub fn entry_of(&self, k: &FlowKey) -> Option<FwVal> {
        self.table
            .find(&canonical(k).0)
            .map(|s| self.table.get(s).val)
    }

    /// Flows originated by `addr` (with a source limit; else 0).
    pub fn flows_of_source(&self, addr: u32) -> u32 {
        self.sources
            .as_ref()
            .map_or(0, |t| t.count(u64::from(addr)))
    }

    /// Drops counted for `why`.
    pub fn dropped(&self, why: FwDrop) -> u64 {
        self.drops[why as usize]
    }

    /// Remembers the clock; entries imported before any clock was seen carry
    /// relative expiry times and are rebased on the first tick.
    fn tick(&mut self, now_ns: u64) {
        if self.rebase_pending {
            self.table
                .for_each_mut(|e| e.expires_ns = e.expires_ns.saturating_add(now_ns));
            self.rebase_pending = false;
        }
        self.now_ns = now_ns;
        self.clock_seen = true;
    }

    fn remove(&mut self, slot: usize) {
        let e = self.table.remove(slot);
        self.forget(&e);
    }

    /// Takes a flow that left the table out of the counts.
    fn forget(&mut self, e: &Entry<FwVal>) {
        self.by_state[usize::from(e.val.state)] -= 1;
        if let Some(t) = &mut self.sources {
            t.decrement(opener(&e.key, e.val.flags));
        }
    }

    /// Stores a new flow: in a free slot, else in place of an unassured or closing
    /// flow near its key (early drop), unless its source is at its limit.
    fn admit(&mut self, key: FlowKey, expires: u64, val: FwVal, now: u64) -> Result<(), FwDrop> {
        let src = opener(&key, val.flags);
        if self
            .sources
            .as_ref()
            .is_some_and(|t| t.count(src) >= self.per_source)
        {
            return Err(FwDrop::SourceLimit);
        }
        match self.table.insert(key, expires, val, now) {
            Insert::New(_) => {}
            Insert::Evicted { old, .. } => self.forget(&old),
            Insert::Full => return Err(FwDrop::TableFull),
        }
        if let Some(t) = &mut self.sources {
            t.increment(src, 0);
        }
        self.by_state[usize::from(val.state)] += 1;
        Ok(())
    }

    /// Passes or drops one packet; `Ok(true)` when its flow is settled (see
    /// [`settled`]), so the fast path may take the flow's later packets.
    fn handle(&mut self, p: &Packet, now: u64) -> Result<bool, FwDrop> {
        let m = &p.meta;
        if m.key.proto == IPPROTO_ICMP && !icmp_is_echo(m.icmp_type) {
            return icmp::other(self, p, now).map(|()| false);
        }
        let (ck, swapped) = canonical(&m.key);
        if let Some(slot) = self.table.find(&ck) {
            if self.table.get(slot).expires_ns > now {
                return self.update(slot, p, swapped, now);
            }
            self.remove(slot);
            self.expired += 1;
        }
        self.create(p, ck, swapped, now)
    }

    fn update(&mut self, slot: usize, p: &Packet, swapped: bool, now: u64) -> Result<bool, FwDrop> {
        let e = *self.table.get(slot);
        let proto = e.key.proto;
        let from_orig = swapped == (e.val.flags & SWAPPED != 0);
        let mut v = e.val;
        let refresh = if proto == IPPROTO_TCP && p.replay.is_some() {
            // Traffic the table tier forwarded: the firewall did not see its sequence
            // numbers, so the sender's window is learnt again from its next segment.
            v.win.resync(usize::from(!from_orig));
            true
        } else if proto == IPPROTO_TCP {
            let seg =
                nfx_packet::tcp::segment(p.buf.frame(), &p.meta).ok_or(FwDrop::InvalidState)?;
            match track::segment(&mut v, &seg, from_orig) {
                Verdict::Pass { refresh } => refresh,
                Verdict::Kill => {
                    self.remove(slot);
                    return Ok(false);
                }
                Verdict::Reject(why) => return Err(why),
            }
        } else {
            if !from_orig {
                v.state = STATE_REPLIED;
                v.flags |= SEEN_REPLY;
                if proto != IPPROTO_ICMP {
                    v.flags |= ASSURED;
                }
            }
            true
        };
        let settled = settled(proto, &v);
        if proto == IPPROTO_TCP && p.fast && settled {
            // The runtime may hand the flow to the fast path after this packet.
            v.win.offload();
        }
        self.by_state[usize::from(e.val.state)] -= 1;
        self.by_state[usize::from(v.state)] += 1;
        let ent = self.table.get_mut(slot);
        ent.val = v;
        if refresh {
            ent.expires_ns = now + self.timeouts.of(proto, &v);
        }
        Ok(settled)
    }

    fn create(&mut self, p: &Packet, ck: FlowKey, swapped: bool, now: u64) -> Result<bool, FwDrop> {
        let m = &p.meta;
        if p.dir == Direction::Reverse && !self.reverse_acl {
            return Err(FwDrop::InvalidState);
        }
        let mut val = FwVal {
            state: STATE_NEW,
            flags: if swapped { SWAPPED } else { 0 },
            win: Windows::default(),
        };
        if p.dir == Direction::Reverse {
            val.flags |= REV_OPEN;
        }
        match m.key.proto {
            IPPROTO_TCP => {
                let seg = nfx_packet::tcp::segment(p.buf.frame(), m).ok_or(FwDrop::InvalidState)?;
                if tcp::is_initial_syn(seg.flags) {
                    val.state = TcpState::SynSent as u8;
                    val.win = Windows::from_syn(&seg);
                } else if self.loose && tcp::is_bare_ack(seg.flags) {
                    // Mid-stream pickup: established but unassured and liberal until
                    // the other side answers; never the 5-day timeout.
                    val.state = TcpState::Established as u8;
                    val.win = Windows::picked_up(&seg);
                } else {
                    return Err(FwDrop::InvalidState);
                }
            }
            IPPROTO_ICMP if m.icmp_type != 8 => return Err(FwDrop::InvalidState),
            _ => {}
        }
        if !self.acl.allows(&m.key) {
            return Err(FwDrop::AclDeny);
        }
        let expires = now + self.timeouts.of(m.key.proto, &val);
        self.admit(ck, expires, val, now)?;
        self.created += 1;
        Ok(settled(m.key.proto, &val))
    }
}

impl Node for Firewall {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) {
        self.tick(ctx.now_ns);
        let now = ctx.now_ns;
        // Overlap the table's cache misses across the vector: tags, then entries.
        for p in pkts.iter().filter(|p| p.alive()) {
            self.table.prefetch_buckets(&canonical(&p.meta.key).0);
        }
        for p in pkts.iter().filter(|p| p.alive()) {
            self.table.prefetch_entry(&canonical(&p.meta.key).0);
        }
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            match self.handle(p, now) {
                Ok(settled) => p.fast &= settled,
                Err(why) => {
                    self.drops[why as usize] += 1;
                    p.drop = Some(why.reason());
                }
            }
        }
    }

    fn offloadable(&self) -> bool {
        true
    }

    fn flow_timeout_ns(&self) -> Option<u64> {
        let t = &self.timeouts;
        Some(
            t.tcp[TcpState::Established as usize]
                .min(t.unacknowledged)
                .min(t.udp)
                .min(t.udp_stream),
        )
    }

    fn expire(&mut self, now_ns: u64) {
        self.tick(now_ns);
        let mut budget = self.table.sweep_budget();
        while let Some(slot) = self.table.next_expired(now_ns, &mut budget) {
            self.remove(slot);
            self.expired += 1;
        }
    }

    fn stats(&self) -> serde_json::Value {
        let by_state: serde_json::Map<String, serde_json::Value> = (0..NSTATES as u8)
            .filter(|&s| s != 0)
            .map(|s| {
                (
                    state_name(s).to_string(),
                    self.by_state[usize::from(s)].into(),
                )
            })
            .collect();
        let extra = self.sources.as_ref().map_or(0, CountTable::memory_bytes);
        let memory = self.table.memory_bytes() + extra;
        serde_json::json!({
            "flows": self.table.len(),
            "capacity": self.table.capacity(),
            "memory_bytes": memory,
            "bytes_per_flow": memory / self.table.capacity(),
            "evictions": self.table.evictions(),
            "created": self.created,
            "expired": self.expired,
            "rules": self.acl.len(),
            "max_flows_per_source": self.per_source,
            "sources": self.sources.as_ref().map_or(0, CountTable::len),
            "by_state": by_state,
            "drops": crate::node::counters_json(FwDrop::ALL.map(FwDrop::as_str), &self.drops),
            "import": self.imports.to_json(),
        })
    }

    fn export_state(&self, out: &mut Vec<u8>) -> usize {
        state::export(self, out)
    }

    fn import_report(&mut self, data: &[u8]) -> Result<ImportReport, StateError> {
        let r = state::import(self, data)?;
        self.imports.add(&r);
        Ok(r)
    }
}

#[cfg(test)]
mod attack_tests;
#[cfg(test)]
mod tests;
