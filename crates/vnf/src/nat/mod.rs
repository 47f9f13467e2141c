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
//! Public ports come from a [`PortPool`] whose cost stays bounded when it runs out; an
//! address may hold at most `max_flows_per_source` mappings.

pub mod config;
pub mod ports;
mod state;

pub use config::NatConfig;

use crate::firewall::acl::Prefix;
use crate::table::counts::CountTable;
use crate::table::{Entry, FlowTable, Insert, TableValue};
use crate::{ImportReport, Node, NodeCtx, StateError};
use nfx_packet::parse::{icmp_is_echo, icmp_is_error, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use nfx_packet::rewrite::{set_addr, set_inner, set_port, End};
use nfx_packet::{Direction, DropReason, FlowKey, Packet};
use ports::{has_ports, remote_key, PortPool, MAX_PROBES};

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

/// Why the NAT dropped a packet: finer than the packet's [`DropReason`], each counted
/// in the node's stats (`drops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NatDrop {
    /// Every public port towards the remote endpoint is in use (refused at once).
    PoolExhausted,
    /// No free port among the [`MAX_PROBES`] tried for this packet.
    NoPortFound,
    /// A reply (or packet to a public address) without a mapping.
    NoMapping,
    /// An ICMP error about a mapping whose outer destination is not the quoted source.
    IcmpMismatch,
    /// A source-NAT candidate from outside the configured inside networks.
    NotInside,
    /// The table is full of answered mappings.
    TableFull,
    /// The address already holds `max_flows_per_source` mappings.
    SourceLimit,
}

impl NatDrop {
    /// Every reason, in discriminant order.
    pub const ALL: [NatDrop; 7] = [
        NatDrop::PoolExhausted,
        NatDrop::NoPortFound,
        NatDrop::NoMapping,
        NatDrop::IcmpMismatch,
        NatDrop::NotInside,
        NatDrop::TableFull,
        NatDrop::SourceLimit,
    ];

    /// snake_case name for stats.
    pub fn as_str(self) -> &'static str {
        match self {
            NatDrop::PoolExhausted => "pool_exhausted",
            NatDrop::NoPortFound => "no_port_found",
            NatDrop::NoMapping => "no_mapping",
            NatDrop::IcmpMismatch => "icmp_mismatch",
            NatDrop::NotInside => "not_inside",
            NatDrop::TableFull => "table_full",
            NatDrop::SourceLimit => "source_limit",
        }
    }

    /// The packet's drop reason (the runtime's per-node counters).
    pub fn reason(self) -> DropReason {
        match self {
            NatDrop::PoolExhausted | NatDrop::NoPortFound => DropReason::NatNoPort,
            NatDrop::NoMapping | NatDrop::IcmpMismatch | NatDrop::NotInside => {
                DropReason::NatNoMapping
            }
            NatDrop::TableFull | NatDrop::SourceLimit => DropReason::TableFull,
        }
    }
}

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
    /// How long a mapping with shared `flags` lives without traffic.
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
    /// The mapping an entry (of either direction) belongs to.
    fn of_entry(e: &Entry<NatVal>) -> Self {
        let (k, v) = (e.key, e.val);
        if v.flags & FWD != 0 {
            Mapping {
                proto: k.proto,
                inside: (k.src, k.sport),
                public: (v.addr, v.port),
                remote: (k.dst, k.dport),
            }
        } else {
            // ICMP replies carry the public id as both "ports"; the remote's is the
            // inside id.
            let rport = if k.proto == IPPROTO_ICMP {
                v.port
            } else {
                k.sport
            };
            Mapping {
                proto: k.proto,
                inside: (v.addr, v.port),
                public: (k.dst, k.dport),
                remote: (k.src, rport),
            }
        }
    }

    /// The address that opened the mapping (per-source quotas count it): the inside
    /// host of a source-NAT mapping, the remote of a port forward.
    fn opener(&self, dnat: bool) -> u64 {
        u64::from(if dnat { self.remote.0 } else { self.inside.0 })
    }

    /// The remote endpoint's key in the port pool.
    fn remote_key(&self) -> u64 {
        remote_key(self.proto, self.remote.0, self.remote.1)
    }

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
    pool: Option<PortPool>,
    inside: Vec<Prefix>,
    per_source: u32,
    sources: Option<CountTable>,
    snat_created: u64,
    dnat_created: u64,
    expired: u64,
    evicted: u64,
    drops: [u64; NatDrop::ALL.len()],
    imports: ImportReport,
    now_ns: u64,
    clock_seen: bool,
    rebase_pending: bool,
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
        let pool = snat.map(|s| PortPool::new(s.lo, s.hi, s.public_ip, &dnat, max_flows));
        Self {
            name: name.to_string(),
            snat,
            dnat,
            table: FlowTable::new(max_flows.saturating_mul(2)),
            timeouts,
            pool,
            inside: Vec::new(),
            per_source: 0,
            sources: None,
            snat_created: 0,
            dnat_created: 0,
            expired: 0,
            evicted: 0,
            drops: [0; NatDrop::ALL.len()],
            imports: ImportReport::default(),
            now_ns: 0,
            clock_seen: false,
            rebase_pending: false,
        }
    }

    /// The same NAT, translating only sources inside `nets` (empty: any source) and
    /// holding at most `per_source` mappings per opening address (0: no limit). Call
    /// before any mapping exists.
    pub fn with_limits(mut self, nets: Vec<Prefix>, per_source: u32) -> Self {
        self.inside = nets;
        self.per_source = per_source;
        self.sources = (per_source > 0).then(|| CountTable::new(self.table.capacity() / 2));
        self
    }

    /// Number of live mappings.
    pub fn mappings(&self) -> usize {
        self.table.len() / 2
    }

    /// The mapping a Forward packet with key `k` would use.
    pub fn mapping_of(&self, k: &FlowKey) -> Option<Mapping> {
        let slot = self.table.find(k)?;
        let e = self.table.get(slot);
        (e.val.flags & FWD != 0).then(|| Mapping::of_entry(e))
    }

    /// Lookups made choosing public ports since creation (each a table lookup).
    pub fn port_probes(&self) -> u64 {
        self.pool.as_ref().map_or(0, PortPool::probes)
    }

    /// Drops counted for `why`.
    pub fn dropped(&self, why: NatDrop) -> u64 {
        self.drops[why as usize]
    }

    /// Mappings opened by `addr` (with a source limit; else 0).
    pub fn mappings_of_source(&self, addr: u32) -> u32 {
        self.sources
            .as_ref()
            .map_or(0, |t| t.count(u64::from(addr)))
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

    /// True when `addr` may be source-translated: inside the inside networks (any
    /// address when none are configured) and not a public address of this NAT.
    fn is_inside(&self, addr: u32) -> bool {
        (self.inside.is_empty() || self.inside.iter().any(|p| p.contains(addr)))
            && !self.is_public(addr)
    }

    /// True when `addr` already holds its most mappings.
    fn at_source_limit(&self, addr: u64) -> bool {
        self.sources
            .as_ref()
            .is_some_and(|t| t.count(addr) >= self.per_source)
    }

    /// Counts a mapping just inserted: its source and, for source NAT, its remote's
    /// pool use (the remote's port cursor becomes `cursor`).
    fn count(&mut self, m: &Mapping, dnat: bool, cursor: u32) {
        if let Some(t) = &mut self.sources {
            t.increment(m.opener(dnat), 0);
        }
        if let (false, Some(pool)) = (dnat, &mut self.pool) {
            pool.add(m.remote_key(), cursor);
        }
    }

    /// Takes a mapping that left the table (`e`: one of its entries) out of the counts.
    fn forget(&mut self, e: &Entry<NatVal>) {
        let m = Mapping::of_entry(e);
        let dnat = e.val.flags & DNAT != 0;
        if let Some(t) = &mut self.sources {
            t.decrement(m.opener(dnat));
        }
        if let (false, Some(pool)) = (dnat, &mut self.pool) {
            pool.remove(m.remote_key());
        }
    }

    /// Removes the entry in `slot` and its twin.
    fn remove_pair(&mut self, slot: usize) {
        let e = self.table.remove(slot);
        self.forget(&e);
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

    /// Inserts both entries of `m` with shared flags `shared` (`DNAT` for a mapping
    /// opened from outside), expiring at `expires`. `evict`: may replace unanswered
    /// mappings when full (not for imports). Returns the Forward entry's slot. The
    /// caller counts the mapping ([`Self::count`]) once it is in.
    fn insert_mapping(
        &mut self,
        m: &Mapping,
        shared: u8,
        expires: u64,
        evict: bool,
    ) -> Result<usize, NatDrop> {
        let fwd = NatVal {
            addr: m.public.0,
            port: m.public.1,
            flags: FWD | shared | PENDING,
            twin: 0,
        };
        let a = self.insert_one(m.fwd_key(), expires, fwd, evict)?;
        let rev = NatVal {
            addr: m.inside.0,
            port: m.inside.1,
            flags: shared,
            twin: a as u32,
        };
        let b = match self.insert_one(m.rev_key(), expires, rev, evict) {
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
        evict: bool,
    ) -> Result<usize, NatDrop> {
        if !evict {
            return self
                .table
                .insert_free(k, expires, v)
                .ok_or(NatDrop::TableFull);
        }
        match self.table.insert(k, expires, v, self.now_ns) {
            Insert::New(s) => Ok(s),
            Insert::Evicted { slot: s, from, old } => {
                self.forget(&old);
                self.drop_twin(from, &old.val);
                self.evicted += 1;
                Ok(s)
            }
            Insert::Full => Err(NatDrop::TableFull),
        }
    }

    /// Picks a public port for a Forward flow `k` (see [`ports`]): `(port, cursor)`.
    fn allocate(&mut self, s: Snat, k: &FlowKey) -> Result<(u16, u32), NatDrop> {
        let mut m = Mapping {
            proto: k.proto,
            inside: (k.src, k.sport),
            public: (s.public_ip, 0),
            remote: (k.dst, k.dport),
        };
        let Some(pool) = &mut self.pool else {
            return Err(NatDrop::PoolExhausted);
        };
        if !has_ports(k.proto) {
            pool.probed();
            return if self.table.find(&m.rev_key()).is_none() {
                Ok((0, 0))
            } else {
                Err(NatDrop::PoolExhausted)
            };
        }
        let rk = m.remote_key();
        let (used, cursor) = pool.usage(rk);
        if used >= pool.capacity(k.proto) {
            return Err(NatDrop::PoolExhausted);
        }
        if pool.contains(k.sport) && !pool.reserved(k.proto, k.sport) {
            m.public.1 = k.sport;
            pool.probed();
            if self.table.find(&m.rev_key()).is_none() {
                return Ok((k.sport, cursor));
            }
        }
        for i in cursor..cursor.wrapping_add(MAX_PROBES) {
            let port = pool.candidate(rk, i);
            if pool.reserved(k.proto, port) {
                continue;
            }
            m.public.1 = port;
            pool.probed();
            if self.table.find(&m.rev_key()).is_none() {
                return Ok((port, i.wrapping_add(1)));
            }
        }
        pool.set_cursor(rk, cursor.wrapping_add(MAX_PROBES));
        Err(NatDrop::NoPortFound)
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

    /// A new source-NAT mapping for Forward packet key `k`.
    fn open_snat(&mut self, s: Snat, k: &FlowKey, now: u64) -> Result<usize, NatDrop> {
        if !self.is_inside(k.src) {
            return Err(NatDrop::NotInside);
        }
        if self.at_source_limit(u64::from(k.src)) {
            return Err(NatDrop::SourceLimit);
        }
        let (port, cursor) = self.allocate(s, k)?;
        let m = Mapping {
            proto: k.proto,
            inside: (k.src, k.sport),
            public: (s.public_ip, port),
            remote: (k.dst, k.dport),
        };
        let expires = now + self.timeouts.of(m.proto, 0);
        let slot = self.insert_mapping(&m, 0, expires, true)?;
        self.count(&m, false, cursor);
        self.snat_created += 1;
        Ok(slot)
    }

    fn forward(&mut self, p: &mut Packet, now: u64) -> Result<(), NatDrop> {
        let k = p.meta.key;
        let slot = match self.lookup(&k, now) {
            Some(s) if self.table.get(s).val.flags & FWD != 0 => s,
            Some(_) => return Err(NatDrop::NoMapping),
            None => {
                let Some(s) = self.snat else { return Ok(()) };
                self.open_snat(s, &k, now)?
            }
        };
        self.touch(slot, true, p.meta.tcp_flags, now);
        let v = self.table.get(slot).val;
        set_addr(p, End::Src, v.addr);
        set_port(p, End::Src, v.port);
        Ok(())
    }

    /// A new port-forward mapping for Reverse packet key `k` matching forward `d`;
    /// returns the slot of its Reverse entry.
    fn open_dnat(&mut self, d: Dnat, k: &FlowKey, now: u64) -> Result<usize, NatDrop> {
        let m = Mapping {
            proto: k.proto,
            inside: (d.to_ip, d.to_port),
            public: (d.public_ip, d.public_port),
            remote: (k.src, k.sport),
        };
        if self.table.find(&m.fwd_key()).is_some() {
            return Err(NatDrop::PoolExhausted);
        }
        if self.at_source_limit(u64::from(k.src)) {
            return Err(NatDrop::SourceLimit);
        }
        let expires = now + self.timeouts.of(m.proto, DNAT);
        let fslot = self.insert_mapping(&m, DNAT, expires, true)?;
        self.count(&m, true, 0);
        self.dnat_created += 1;
        Ok(self.table.get(fslot).val.twin as usize)
    }

    fn reverse(&mut self, p: &mut Packet, now: u64) -> Result<(), NatDrop> {
        let k = p.meta.key;
        let slot = match self.lookup(&k, now) {
            Some(s) if self.table.get(s).val.flags & FWD == 0 => s,
            Some(_) => return Err(NatDrop::NoMapping),
            None => {
                let rule = self.dnat.iter().find(|d| {
                    d.proto == k.proto && d.public_ip == k.dst && d.public_port == k.dport
                });
                match rule.copied() {
                    Some(d) => self.open_dnat(d, &k, now)?,
                    None if self.is_public(k.dst) => return Err(NatDrop::NoMapping),
                    None => return Ok(()),
                }
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
    /// reverse of the flow it reports on, and the error must go back to that packet's
    /// source (outer destination = quoted source), or it is dropped.
    fn icmp_error(&mut self, p: &mut Packet, now: u64) -> Result<(), NatDrop> {
        let fwd = p.dir == Direction::Forward;
        let slot = if p.meta.has_inner() {
            self.lookup(&p.meta.inner_key.reversed(), now)
        } else {
            None
        };
        let Some(slot) = slot.filter(|&s| (self.table.get(s).val.flags & FWD != 0) == fwd) else {
            return if !fwd && self.is_public(p.meta.key.dst) {
                Err(NatDrop::NoMapping)
            } else {
                Ok(())
            };
        };
        if p.meta.key.dst != p.meta.inner_key.src {
            return Err(NatDrop::IcmpMismatch);
        }
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

    fn handle(&mut self, p: &mut Packet, now: u64) -> Result<(), NatDrop> {
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
            if let Err(why) = self.handle(p, now) {
                self.drops[why as usize] += 1;
                p.drop = Some(why.reason());
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
        let memory = self.table.memory_bytes()
            + self.pool.as_ref().map_or(0, PortPool::memory_bytes)
            + self.sources.as_ref().map_or(0, CountTable::memory_bytes);
        serde_json::json!({
            "mappings": self.mappings(),
            "capacity": cap,
            "memory_bytes": memory,
            "bytes_per_flow": memory / cap,
            "snat_created": self.snat_created,
            "dnat_created": self.dnat_created,
            "expired": self.expired,
            "evicted": self.evicted,
            "remotes": self.pool.as_ref().map_or(0, PortPool::remotes),
            "port_probes": self.port_probes(),
            "max_flows_per_source": self.per_source,
            "drops": crate::node::counters_json(NatDrop::ALL.map(NatDrop::as_str), &self.drops),
            "import": self.imports.to_json(),
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
        if let Some(pool) = &mut self.pool {
            pool.set_shard(i, c);
        }
        Ok(self.snat.is_some())
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
