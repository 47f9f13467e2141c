//! The NAT node: source NAT / masquerade of Forward flows to a public address with
//! port (and ICMP echo id) allocation, destination NAT (port forwarding) of Reverse
//! new flows, reverse translation of replies and of ICMP errors, incremental checksum
//! updates (full and partial) through [`nfx_packet::rewrite`].
//!
//! A mapping links three endpoints: inside (private), public, remote. It is stored
//! as two entries of one bounded [`FlowTable`], one per direction, each holding the
//! rewrite to apply and the slot of its twin, so both directions are found with one
//! lookup and removed together. Mappings are released on FIN both ways or RST (after
//! `tcp_close`), on idle timeout, or by eviction of unanswered mappings when full.

pub mod config;
mod state;

pub use config::NatConfig;

use crate::table::{FlowTable, Insert, TableValue};
use crate::{Node, NodeCtx, StateError};
use nfx_packet::parse::{icmp_is_echo, icmp_is_error, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::rewrite::{set_addr, set_inner, set_port, End};
use nfx_packet::{Direction, DropReason, FlowKey, Packet};

/// Entry flag: this entry translates Forward packets (rewrites the source).
const FWD: u8 = 1;
/// Mapping created by a Reverse packet (port forward).
const DNAT: u8 = 2;
/// The side that did not open the mapping has sent a packet.
const REPLIED: u8 = 4;
/// FIN seen on Forward packets.
const FIN_FWD: u8 = 8;
/// FIN seen on Reverse packets.
const FIN_REV: u8 = 16;
/// FIN both ways or RST: released after `tcp_close`.
const CLOSING: u8 = 32;
/// First entry of a pair being inserted: must not be evicted by its twin.
const PENDING: u8 = 64;
/// Flags both entries of a mapping share.
const SHARED: u8 = DNAT | REPLIED | FIN_FWD | FIN_REV | CLOSING;
/// Most candidate ports tried for one new mapping (bounds per-packet work).
const MAX_PORT_TRIES: u32 = 1024;

/// Source NAT settings.
#[derive(Debug, Clone, Copy)]
pub struct Snat {
    /// Public address.
    pub public_ip: u32,
    /// Lowest public port.
    pub lo: u16,
    /// Highest public port.
    pub hi: u16,
}

/// One port forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dnat {
    /// TCP or UDP.
    pub proto: u8,
    /// Public address.
    pub public_ip: u32,
    /// Public port.
    pub public_port: u16,
    /// Inside address.
    pub to_ip: u32,
    /// Inside port.
    pub to_port: u16,
}

/// Mapping timeouts in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP answered.
    pub tcp: u64,
    /// TCP unanswered.
    pub tcp_syn: u64,
    /// TCP closing.
    pub tcp_close: u64,
    /// UDP unanswered.
    pub udp: u64,
    /// UDP answered.
    pub udp_stream: u64,
    /// ICMP echo.
    pub icmp: u64,
    /// Other protocols.
    pub generic: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        config::NatTimeoutConfig::default().as_timeouts()
    }
}

impl Timeouts {
    fn of(&self, proto: u8, flags: u8) -> u64 {
        let replied = flags & REPLIED != 0;
        match proto {
            _ if flags & CLOSING != 0 => self.tcp_close,
            IPPROTO_TCP if replied => self.tcp,
            IPPROTO_TCP => self.tcp_syn,
            IPPROTO_UDP if replied => self.udp_stream,
            IPPROTO_UDP => self.udp,
            IPPROTO_ICMP => self.icmp,
            _ => self.generic,
        }
    }
}

/// One direction of a mapping: the address and port to write, flags, twin slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatVal {
    /// Address written (source for Forward entries, destination for Reverse).
    pub addr: u32,
    /// Port / ICMP id written.
    pub port: u16,
    /// `FWD`, `DNAT`, `REPLIED`, FIN and closing bits.
    pub flags: u8,
    /// Slot of the other direction's entry.
    pub twin: u32,
}

// SAFETY: only integer fields, valid when zero.
unsafe impl TableValue for NatVal {
    /// Unanswered or closing mappings may be evicted; answered ones may not.
    fn evictable(&self) -> bool {
        self.flags & PENDING == 0 && (self.flags & REPLIED == 0 || self.flags & CLOSING != 0)
    }
}

/// The three endpoints of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// IP protocol.
    pub proto: u8,
    /// Inside address and port (ICMP: echo id).
    pub inside: (u32, u16),
    /// Public address and port (ICMP: translated id).
    pub public: (u32, u16),
    /// Remote address and port (ICMP: the inside id).
    pub remote: (u32, u16),
}

impl Mapping {
    /// Key of the Forward packets (inside → remote).
    pub fn fwd_key(&self) -> FlowKey {
        FlowKey {
            src: self.inside.0,
            sport: self.inside.1,
            dst: self.remote.0,
            dport: self.remote.1,
            proto: self.proto,
        }
    }

    /// Key of the Reverse packets (remote → public); for ICMP echo replies both
    /// "ports" are the translated id.
    pub fn rev_key(&self) -> FlowKey {
        let sport = if self.proto == IPPROTO_ICMP {
            self.public.1
        } else {
            self.remote.1
        };
        FlowKey {
            src: self.remote.0,
            sport,
            dst: self.public.0,
            dport: self.public.1,
            proto: self.proto,
        }
    }
}

/// The NAT node.
pub struct Nat {
    name: String,
    snat: Option<Snat>,
    dnat: Vec<Dnat>,
    table: FlowTable<NatVal>,
    timeouts: Timeouts,
    cursor: [u16; 3],
    snat_created: u64,
    dnat_created: u64,
    expired: u64,
    evicted: u64,
    now_ns: u64,
    clock_seen: bool,
    rebase_pending: bool,
    /// This node's worker index and the worker count: it hands out only public ports
    /// (and ICMP ids) `p` with `p % count == index` (see [`Node::shard`]).
    shard: (u16, u16),
}

fn proto_index(proto: u8) -> usize {
    match proto {
        IPPROTO_TCP => 0,
        IPPROTO_UDP => 1,
        _ => 2,
    }
}

fn has_ports(proto: u8) -> bool {
    matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP)
}

impl Nat {
    /// A NAT node with validated settings; `max_flows` counts mappings.
    pub fn new(
        name: &str,
        snat: Option<Snat>,
        dnat: Vec<Dnat>,
        max_flows: usize,
        timeouts: Timeouts,
    ) -> Self {
        let lo = snat.map_or(1024, |s| s.lo);
        Self {
            name: name.to_string(),
            snat,
            dnat,
            table: FlowTable::new(max_flows.saturating_mul(2)),
            timeouts,
            cursor: [lo; 3],
            snat_created: 0,
            dnat_created: 0,
            expired: 0,
            evicted: 0,
            now_ns: 0,
            clock_seen: false,
            rebase_pending: false,
            shard: (0, 1),
        }
    }

    /// Number of live mappings.
    pub fn mappings(&self) -> usize {
        self.table.len() / 2
    }

    /// The mapping a Forward packet with key `k` would use.
    pub fn mapping_of(&self, k: &FlowKey) -> Option<Mapping> {
        let slot = self.table.find(k)?;
        let e = self.table.get(slot);
        (e.val.flags & FWD != 0).then(|| self.mapping_at(slot))
    }

    /// Rebuilds the mapping from its Forward entry in `slot`.
    fn mapping_at(&self, slot: usize) -> Mapping {
        let e = self.table.get(slot);
        Mapping {
            proto: e.key.proto,
            inside: (e.key.src, e.key.sport),
            public: (e.val.addr, e.val.port),
            remote: (e.key.dst, e.key.dport),
        }
    }

    fn tick(&mut self, now_ns: u64) {
        if self.rebase_pending {
            self.table
                .for_each_mut(|e| e.expires_ns = e.expires_ns.saturating_add(now_ns));
            self.rebase_pending = false;
        }
        self.now_ns = now_ns;
        self.clock_seen = true;
    }

    /// Removes the entry in `slot` and its twin.
    fn remove_pair(&mut self, slot: usize) {
        let e = self.table.remove(slot);
        self.drop_twin(slot, &e.val);
    }

    /// Removes the twin of an entry already taken out of `slot`.
    fn drop_twin(&mut self, slot: usize, val: &NatVal) {
        let twin = val.twin as usize;
        if self.table.occupied(twin) && self.table.get(twin).val.twin as usize == slot {
            self.table.remove(twin);
        }
    }

    /// Finds a live entry for `k`, removing it (and its twin) if it has expired.
    fn lookup(&mut self, k: &FlowKey, now: u64) -> Option<usize> {
        let slot = self.table.find(k)?;
        if self.table.get(slot).expires_ns > now {
            return Some(slot);
        }
        self.remove_pair(slot);
        self.expired += 1;
        None
    }

    /// Inserts both entries of `m`; `dnat` marks a mapping opened from outside.
    fn insert_mapping(&mut self, m: &Mapping, dnat: bool, now: u64) -> Result<usize, DropReason> {
        let shared = if dnat { DNAT } else { 0 };
        let expires = now + self.timeouts.of(m.proto, shared);
        let fwd = NatVal {
            addr: m.public.0,
            port: m.public.1,
            flags: FWD | shared | PENDING,
            twin: 0,
        };
        let a = self.insert_one(m.fwd_key(), expires, fwd, now)?;
        let rev = NatVal {
            addr: m.inside.0,
            port: m.inside.1,
            flags: shared,
            twin: a as u32,
        };
        let b = match self.insert_one(m.rev_key(), expires, rev, now) {
            Ok(b) => b,
            Err(r) => {
                self.table.remove(a);
                return Err(r);
            }
        };
        let fe = self.table.get_mut(a);
        fe.val.twin = b as u32;
        fe.val.flags &= !PENDING;
        Ok(a)
    }

    fn insert_one(
        &mut self,
        k: FlowKey,
        expires: u64,
        v: NatVal,
        now: u64,
    ) -> Result<usize, DropReason> {
        match self.table.insert(k, expires, v, now) {
            Insert::New(s) => Ok(s),
            Insert::Evicted { slot: s, from, old } => {
                self.drop_twin(from, &old.val);
                self.evicted += 1;
                Ok(s)
            }
            Insert::Full => Err(DropReason::TableFull),
        }
    }

    /// True when `port` is reserved by a port forward of `proto` on `ip`.
    fn reserved(&self, proto: u8, ip: u32, port: u16) -> bool {
        self.dnat
            .iter()
            .any(|d| d.proto == proto && d.public_ip == ip && d.public_port == port)
    }

    /// Picks a public port for a Forward flow `k`: the original port when it is in
    /// range and free towards this remote endpoint, else the next free one.
    fn allocate(&mut self, s: Snat, k: &FlowKey) -> Result<u16, DropReason> {
        let mut m = Mapping {
            proto: k.proto,
            inside: (k.src, k.sport),
            public: (s.public_ip, 0),
            remote: (k.dst, k.dport),
        };
        let free = |nat: &Self, m: &Mapping| {
            !nat.reserved(m.proto, m.public.0, m.public.1) && nat.table.find(&m.rev_key()).is_none()
        };
        if !has_ports(k.proto) {
            return if free(self, &m) {
                Ok(0)
            } else {
                Err(DropReason::NatNoPort)
            };
        }
        let (index, count) = self.shard;
        let mine = |p: u16| p % count == index;
        if (s.lo..=s.hi).contains(&k.sport) && mine(k.sport) {
            m.public.1 = k.sport;
            if free(self, &m) {
                return Ok(k.sport);
            }
        }
        let span = u32::from(s.hi - s.lo) + 1;
        let ci = proto_index(k.proto);
        let mut p = self.cursor[ci].clamp(s.lo, s.hi);
        for _ in 0..span.min(MAX_PORT_TRIES * u32::from(count)) {
            m.public.1 = p;
            let next = if p == s.hi { s.lo } else { p + 1 };
            if !mine(p) {
                p = next;
                continue;
            }
            if free(self, &m) {
                self.cursor[ci] = next;
                return Ok(p);
            }
            p = next;
        }
        self.cursor[ci] = p;
        Err(DropReason::NatNoPort)
    }

    /// Refreshes the mapping of an entry hit by a packet in direction `fwd`.
    fn touch(&mut self, slot: usize, fwd: bool, tcp_flags: u8, now: u64) {
        let e = *self.table.get(slot);
        let mut f = e.val.flags & SHARED;
        let opened_fwd = f & DNAT == 0;
        if fwd != opened_fwd {
            f |= REPLIED;
        }
        if e.key.proto == IPPROTO_TCP {
            if tcp_flags & 0x01 != 0 {
                f |= if fwd { FIN_FWD } else { FIN_REV };
            }
            if tcp_flags & 0x04 != 0 || f & (FIN_FWD | FIN_REV) == FIN_FWD | FIN_REV {
                f |= CLOSING;
            }
        }
        let expires = now + self.timeouts.of(e.key.proto, f);
        for s in [slot, e.val.twin as usize] {
            let ent = self.table.get_mut(s);
            ent.val.flags = (ent.val.flags & !SHARED) | f;
            ent.expires_ns = expires;
        }
    }

    fn forward(&mut self, p: &mut Packet, now: u64) -> Result<(), DropReason> {
        let k = p.meta.key;
        let slot = match self.lookup(&k, now) {
            Some(s) if self.table.get(s).val.flags & FWD != 0 => s,
            Some(_) => return Err(DropReason::NatNoMapping),
            None => {
                let Some(s) = self.snat else { return Ok(()) };
                let port = self.allocate(s, &k)?;
                let m = Mapping {
                    proto: k.proto,
                    inside: (k.src, k.sport),
                    public: (s.public_ip, port),
                    remote: (k.dst, k.dport),
                };
                let slot = self.insert_mapping(&m, false, now)?;
                self.snat_created += 1;
                slot
            }
        };
        self.touch(slot, true, p.meta.tcp_flags, now);
        let v = self.table.get(slot).val;
        set_addr(p, End::Src, v.addr);
        set_port(p, End::Src, v.port);
        Ok(())
    }

    fn reverse(&mut self, p: &mut Packet, now: u64) -> Result<(), DropReason> {
        let k = p.meta.key;
        let slot = match self.lookup(&k, now) {
            Some(s) if self.table.get(s).val.flags & FWD == 0 => s,
            Some(_) => return Err(DropReason::NatNoMapping),
            None => {
                let rule = self.dnat.iter().find(|d| {
                    d.proto == k.proto && d.public_ip == k.dst && d.public_port == k.dport
                });
                let Some(d) = rule.copied() else {
                    return if self.is_public(k.dst) {
                        Err(DropReason::NatNoMapping)
                    } else {
                        Ok(())
                    };
                };
                let m = Mapping {
                    proto: k.proto,
                    inside: (d.to_ip, d.to_port),
                    public: (d.public_ip, d.public_port),
                    remote: (k.src, k.sport),
                };
                if self.table.find(&m.fwd_key()).is_some() {
                    return Err(DropReason::NatNoPort);
                }
                let fslot = self.insert_mapping(&m, true, now)?;
                self.dnat_created += 1;
                self.table.get(fslot).val.twin as usize
            }
        };
        self.touch(slot, false, p.meta.tcp_flags, now);
        let v = self.table.get(slot).val;
        set_addr(p, End::Dst, v.addr);
        set_port(p, End::Dst, v.port);
        Ok(())
    }

    fn is_public(&self, ip: u32) -> bool {
        self.snat.is_some_and(|s| s.public_ip == ip) || self.dnat.iter().any(|d| d.public_ip == ip)
    }

    /// Translates an ICMP error about a mapped flow: the embedded packet is the
    /// reverse of the flow it reports on.
    fn icmp_error(&mut self, p: &mut Packet, now: u64) -> Result<(), DropReason> {
        let fwd = p.dir == Direction::Forward;
        let slot = if p.meta.has_inner() {
            self.lookup(&p.meta.inner_key.reversed(), now)
        } else {
            None
        };
        let Some(slot) = slot.filter(|&s| (self.table.get(s).val.flags & FWD != 0) == fwd) else {
            return if !fwd && self.is_public(p.meta.key.dst) {
                Err(DropReason::NatNoMapping)
            } else {
                Ok(())
            };
        };
        let v = self.table.get(slot).val;
        if fwd {
            set_addr(p, End::Src, v.addr);
            set_inner(p, End::Dst, v.addr, v.port);
        } else {
            set_addr(p, End::Dst, v.addr);
            set_inner(p, End::Src, v.addr, v.port);
        }
        Ok(())
    }

    fn handle(&mut self, p: &mut Packet, now: u64) -> Result<(), DropReason> {
        let m = p.meta;
        if m.key.proto == IPPROTO_ICMP && !icmp_is_echo(m.icmp_type) {
            return if icmp_is_error(m.icmp_type) {
                self.icmp_error(p, now)
            } else {
                Ok(())
            };
        }
        match p.dir {
            Direction::Forward => self.forward(p, now),
            Direction::Reverse => self.reverse(p, now),
        }
    }
}

impl Node for Nat {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) {
        self.tick(ctx.now_ns);
        let now = ctx.now_ns;
        // Overlap the table's cache misses across the vector: tags, entries, then
        // the other direction's entry that `touch` refreshes.
        for p in pkts.iter().filter(|p| p.alive()) {
            self.table.prefetch_buckets(&p.meta.key);
        }
        for p in pkts.iter().filter(|p| p.alive()) {
            self.table.prefetch_entry(&p.meta.key);
        }
        for p in pkts.iter().filter(|p| p.alive()) {
            if let Some(slot) = self.table.find(&p.meta.key) {
                self.table
                    .prefetch_slot(self.table.get(slot).val.twin as usize);
            }
        }
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            if let Err(r) = self.handle(p, now) {
                p.drop = Some(r);
            }
        }
    }

    /// A TCP/UDP packet's translation is a function of its flow's mapping, which a
    /// replayed packet refreshes; SYN/FIN/RST (mapping changes) never take the fast path.
    fn offloadable(&self) -> bool {
        true
    }

    fn flow_timeout_ns(&self) -> Option<u64> {
        let t = &self.timeouts;
        Some(t.tcp.min(t.udp).min(t.udp_stream))
    }

    fn expire(&mut self, now_ns: u64) {
        self.tick(now_ns);
        let mut budget = self.table.sweep_budget();
        while let Some(slot) = self.table.next_expired(now_ns, &mut budget) {
            self.remove_pair(slot);
            self.expired += 1;
        }
    }

    fn stats(&self) -> serde_json::Value {
        let cap = (self.table.capacity() / 2).max(1);
        serde_json::json!({
            "mappings": self.mappings(),
            "capacity": cap,
            "memory_bytes": self.table.memory_bytes(),
            "bytes_per_flow": self.table.memory_bytes() / cap,
            "snat_created": self.snat_created,
            "dnat_created": self.dnat_created,
            "expired": self.expired,
            "evicted": self.evicted,
        })
    }

    fn shard(&mut self, index: usize, count: usize) -> Result<bool, String> {
        if count > 1 && !self.dnat.is_empty() {
            return Err(format!(
                "{}: port forwards (dnat) need a single worker: their replies cannot be steered to the worker holding the mapping",
                self.name
            ));
        }
        let span = self
            .snat
            .map_or(usize::MAX, |s| usize::from(s.hi - s.lo) + 1);
        let (Ok(i), Ok(c)) = (u16::try_from(index), u16::try_from(count)) else {
            return Err(format!(
                "{}: worker {index} of {count} out of range",
                self.name
            ));
        };
        if c == 0 || i >= c || span < count {
            return Err(format!(
                "{}: worker {index} of {count}: the port range has {span} ports, fewer than the workers",
                self.name
            ));
        }
        self.shard = (i, c);
        Ok(self.snat.is_some())
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
