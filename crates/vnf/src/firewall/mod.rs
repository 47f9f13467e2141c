//! The stateful firewall node: an ordered ACL consulted for packets that create
//! state, and connection tracking (TCP state machine, UDP / ICMP echo pseudo-state,
//! per-state timeouts) in a bounded [`FlowTable`].
//!
//! Entries are keyed by the canonical form of the flow key (lower endpoint first), so
//! both directions of a flow find the same entry with one lookup; the entry remembers
//! which endpoint opened the flow. Forward-direction packets create state (after the
//! ACL allows them); Reverse-direction packets pass only when they belong to tracked
//! state, unless `reverse_new: acl`.

pub mod acl;
pub mod config;
mod state;
pub mod tcp;

pub use config::FirewallConfig;

use crate::table::{FlowTable, Insert, TableValue};
use crate::{Node, NodeCtx, StateError};
use acl::Acl;
use nfx_packet::parse::{icmp_is_echo, icmp_is_error, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::{Direction, DropReason, FlowKey, Meta, Packet};
use tcp::{Step, TcpState};

/// Pseudo-state of a UDP / ICMP echo / other flow not answered yet.
pub const STATE_NEW: u8 = 9;
/// Pseudo-state of a UDP / ICMP echo / other flow that saw a reply.
pub const STATE_REPLIED: u8 = 10;

/// Whether a flow in `state` may leave its later packets to the fast path: an
/// established TCP connection (its SYN, FIN and RST still come back to the firewall) or
/// a UDP flow the ACL let in. Everything else keeps every packet here.
pub fn settled(proto: u8, state: u8) -> bool {
    match proto {
        IPPROTO_TCP => state == TcpState::Established as u8,
        IPPROTO_UDP => true,
        _ => false,
    }
}
/// Number of state codes (TCP states 0..=8, then the two pseudo-states).
pub const NSTATES: usize = 11;
/// Entry flag: the canonical key is the reverse of the originator's key.
const SWAPPED: u8 = 0x80;
/// Entry flags holding the TCP FIN bits.
const FINS: u8 = tcp::FIN_ORIG | tcp::FIN_REPLY;

/// Name of a state code for stats.
pub fn state_name(code: u8) -> &'static str {
    match code {
        STATE_NEW => "new",
        STATE_REPLIED => "replied",
        c => TcpState::from_u8(c).map_or("unknown", TcpState::as_str),
    }
}

/// What the firewall keeps per flow: 2 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FwVal {
    /// State code (TCP state, [`STATE_NEW`] or [`STATE_REPLIED`]).
    pub state: u8,
    /// [`SWAPPED`] and FIN bits.
    pub flags: u8,
}

// SAFETY: only integer fields, valid when zero.
unsafe impl TableValue for FwVal {
    /// Established TCP connections and answered flows are never evicted.
    fn evictable(&self) -> bool {
        self.state != TcpState::Established as u8 && self.state != STATE_REPLIED
    }
}

/// Per-state timeouts in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    tcp: [u64; 9],
    udp: u64,
    udp_stream: u64,
    icmp: u64,
    generic: u64,
}

impl Timeouts {
    /// From [syn_sent, syn_recv, established, fin_wait, close_wait, last_ack,
    /// time_wait, close, udp, udp_stream, icmp, generic] in nanoseconds.
    pub fn from_array(a: [u64; 12]) -> Self {
        let mut tcp = [a[0]; 9];
        tcp[1..9].copy_from_slice(&a[0..8]);
        Self {
            tcp,
            udp: a[8],
            udp_stream: a[9],
            icmp: a[10],
            generic: a[11],
        }
    }

    fn of(&self, proto: u8, state: u8) -> u64 {
        match (proto, state) {
            (IPPROTO_TCP, s) => self.tcp[usize::from(s).min(8)],
            (17, STATE_NEW) => self.udp,
            (17, _) => self.udp_stream,
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

/// The stateful firewall node.
pub struct Firewall {
    name: String,
    acl: Acl,
    table: FlowTable<FwVal>,
    timeouts: Timeouts,
    loose: bool,
    reverse_acl: bool,
    by_state: [u64; NSTATES],
    created: u64,
    expired: u64,
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
            by_state: [0; NSTATES],
            created: 0,
            expired: 0,
            now_ns: 0,
            clock_seen: false,
            rebase_pending: false,
        }
    }

    /// Number of tracked flows.
    pub fn flows(&self) -> usize {
        self.table.len()
    }

    /// The tracked state of the flow `k` belongs to (either direction).
    pub fn state_of(&self, k: &FlowKey) -> Option<u8> {
        self.table
            .find(&canonical(k).0)
            .map(|s| self.table.get(s).val.state)
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
        self.by_state[usize::from(e.val.state)] -= 1;
    }

    /// Passes or drops one packet; `Ok(true)` when its flow is settled (see
    /// [`settled`]), so the fast path may take the flow's later packets.
    fn handle(&mut self, m: &Meta, dir: Direction, now: u64) -> Result<bool, DropReason> {
        let k = m.key;
        if k.proto == IPPROTO_ICMP && !icmp_is_echo(m.icmp_type) {
            return self.icmp_other(m, dir, now).map(|()| false);
        }
        let (ck, swapped) = canonical(&k);
        if let Some(slot) = self.table.find(&ck) {
            if self.table.get(slot).expires_ns > now {
                return self.update(slot, m, swapped, now);
            }
            self.remove(slot);
            self.expired += 1;
        }
        self.create(m, dir, ck, swapped, now)
    }

    fn update(
        &mut self,
        slot: usize,
        m: &Meta,
        swapped: bool,
        now: u64,
    ) -> Result<bool, DropReason> {
        let e = *self.table.get(slot);
        let from_orig = swapped == (e.val.flags & SWAPPED != 0);
        let (state, fins) = if m.key.proto == IPPROTO_TCP {
            let cur = TcpState::from_u8(e.val.state).ok_or(DropReason::InvalidState)?;
            match tcp::step(cur, e.val.flags & FINS, m.tcp_flags, from_orig) {
                Step::Go(s, f) => (s as u8, f),
                Step::Ignore => return Ok(settled(m.key.proto, e.val.state)),
                Step::Invalid => return Err(DropReason::InvalidState),
            }
        } else if from_orig {
            (e.val.state, 0)
        } else {
            (STATE_REPLIED, 0)
        };
        self.by_state[usize::from(e.val.state)] -= 1;
        self.by_state[usize::from(state)] += 1;
        let ent = self.table.get_mut(slot);
        ent.val.state = state;
        ent.val.flags = (e.val.flags & SWAPPED) | fins;
        ent.expires_ns = now + self.timeouts.of(m.key.proto, state);
        Ok(settled(m.key.proto, state))
    }

    fn create(
        &mut self,
        m: &Meta,
        dir: Direction,
        ck: FlowKey,
        swapped: bool,
        now: u64,
    ) -> Result<bool, DropReason> {
        if dir == Direction::Reverse && !self.reverse_acl {
            return Err(DropReason::InvalidState);
        }
        let state = match m.key.proto {
            IPPROTO_TCP if tcp::is_initial_syn(m.tcp_flags) => TcpState::SynSent as u8,
            IPPROTO_TCP
                if self.loose
                    && m.tcp_flags & tcp::ACK != 0
                    && m.tcp_flags & (tcp::SYN | tcp::RST) == 0 =>
            {
                TcpState::Established as u8
            }
            IPPROTO_TCP => return Err(DropReason::InvalidState),
            IPPROTO_ICMP if m.icmp_type != 8 => return Err(DropReason::InvalidState),
            _ => STATE_NEW,
        };
        if !self.acl.allows(&m.key) {
            return Err(DropReason::AclDeny);
        }
        let val = FwVal {
            state,
            flags: if swapped { SWAPPED } else { 0 },
        };
        let expires = now + self.timeouts.of(m.key.proto, state);
        match self.table.insert(ck, expires, val, now) {
            Insert::New(_) => {}
            Insert::Evicted { old, .. } => self.by_state[usize::from(old.val.state)] -= 1,
            Insert::Full => return Err(DropReason::TableFull),
        }
        self.by_state[usize::from(state)] += 1;
        self.created += 1;
        Ok(settled(m.key.proto, state))
    }

    /// ICMP other than echo: errors about a tracked flow are related and pass; the
    /// rest is stateless, filtered by the ACL when it may create state.
    fn icmp_other(&self, m: &Meta, dir: Direction, now: u64) -> Result<(), DropReason> {
        if icmp_is_error(m.icmp_type) && m.has_inner() {
            let related = self
                .table
                .find(&canonical(&m.inner_key).0)
                .is_some_and(|s| self.table.get(s).expires_ns > now);
            if related {
                return Ok(());
            }
        }
        if dir == Direction::Reverse && !self.reverse_acl {
            Err(DropReason::InvalidState)
        } else if self.acl.allows(&m.key) {
            Ok(())
        } else {
            Err(DropReason::AclDeny)
        }
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
            match self.handle(&p.meta, p.dir, now) {
                Ok(settled) => p.fast &= settled,
                Err(r) => p.drop = Some(r),
            }
        }
    }

    fn offloadable(&self) -> bool {
        true
    }

    fn flow_timeout_ns(&self) -> Option<u64> {
        let t = &self.timeouts;
        Some(
            t.of(IPPROTO_TCP, TcpState::Established as u8)
                .min(t.of(IPPROTO_UDP, STATE_NEW))
                .min(t.of(IPPROTO_UDP, STATE_REPLIED)),
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
        serde_json::json!({
            "flows": self.table.len(),
            "capacity": self.table.capacity(),
            "memory_bytes": self.table.memory_bytes(),
            "bytes_per_flow": self.table.memory_bytes() / self.table.capacity(),
            "evictions": self.table.evictions(),
            "created": self.created,
            "expired": self.expired,
            "rules": self.acl.len(),
            "by_state": by_state,
        })
    }

    fn export_state(&self, out: &mut Vec<u8>) -> usize {
        state::export(self, out)
    }

    fn import_state(&mut self, data: &[u8]) -> Result<usize, StateError> {
        state::import(self, data)
    }
}

#[cfg(test)]
mod tests;
