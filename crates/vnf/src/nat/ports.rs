//! The source-NAT port pool: which public ports (and ICMP echo ids) a new mapping may
//! get, at a bounded cost whatever the pool's state.
//!
//! Ports are endpoint-dependent, as Linux masquerade: a public port is free towards a
//! remote endpoint when no mapping uses it towards that endpoint, so each remote
//! endpoint has the whole pool. The pool keeps, per remote endpoint with mappings, how
//! many it has and a cursor ([`CountTable`], bounded by the mapping count). A new
//! mapping towards a remote whose count has reached the pool's size is refused at once,
//! with no lookup. Otherwise the inside port is kept when it is in the pool and free;
//! else ports are tried from the remote's own starting point (a keyed hash of the
//! remote, so the sequence is not predictable from outside) and cursor, as RFC 6056's
//! algorithm 4 (double-hash port selection), at most [`MAX_PROBES`] lookups per
//! packet; the cursor keeps its place, so a retransmission goes on where the last try
//! stopped.

use super::Dnat;
use crate::table::counts::CountTable;
use crate::table::hash::FlowHasher;
use nfx_packet::parse::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};

/// Most candidate ports looked up for one new mapping.
pub const MAX_PROBES: u32 = 16;

/// Index of a protocol's port space (TCP, UDP, ICMP ids).
fn space(proto: u8) -> usize {
    match proto {
        IPPROTO_TCP => 0,
        IPPROTO_UDP => 1,
        _ => 2,
    }
}

/// True for protocols whose mappings carry a port (or ICMP echo id).
pub fn has_ports(proto: u8) -> bool {
    matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP)
}

/// The key of a remote endpoint: the replies of an ICMP echo mapping carry only the
/// public id, so for ICMP the remote is its address alone.
pub fn remote_key(proto: u8, addr: u32, port: u16) -> u64 {
    let port = if proto == IPPROTO_ICMP { 0 } else { port };
    u64::from(proto) << 48 | u64::from(port) << 32 | u64::from(addr)
}

/// The port pool of one public address.
pub struct PortPool {
    lo: u16,
    hi: u16,
    /// This worker's index and the worker count: it hands out only ports
    /// `p % count == index` (see `Node::shard`).
    shard: (u16, u16),
    /// First port of this worker's class in the range, and how many there are.
    first: u16,
    span: u32,
    /// Ports of this worker's class reserved by port forwards, per port space.
    reserved: [u32; 3],
    forwards: Vec<(u8, u16)>,
    offsets: FlowHasher,
    remotes: CountTable,
    probes: u64,
}

impl PortPool {
    /// The pool `lo..=hi` of `public_ip`, without the ports `dnat` forwards there, for
    /// up to `max_mappings` mappings.
    pub fn new(lo: u16, hi: u16, public_ip: u32, dnat: &[Dnat], max_mappings: usize) -> Self {
        let forwards = dnat
            .iter()
            .filter(|d| d.public_ip == public_ip && (lo..=hi).contains(&d.public_port))
            .map(|d| (d.proto, d.public_port))
            .collect();
        let mut p = Self {
            lo,
            hi,
            shard: (0, 1),
            first: lo,
            span: 0,
            reserved: [0; 3],
            forwards,
            offsets: FlowHasher::random(),
            remotes: CountTable::new(max_mappings),
            probes: 0,
        };
        p.set_shard(0, 1);
        p
    }

    /// Restricts the pool to the ports `p % count == index`.
    pub fn set_shard(&mut self, index: u16, count: u16) {
        self.shard = (index, count);
        let (lo, c) = (u32::from(self.lo), u32::from(count));
        let first = lo + (u32::from(index) + c - lo % c) % c;
        self.span = if first > u32::from(self.hi) {
            0
        } else {
            (u32::from(self.hi) - first) / c + 1
        };
        self.first = u16::try_from(first).unwrap_or(self.hi);
        self.reserved = [0; 3];
        for &(proto, port) in &self.forwards {
            if port % count == index {
                self.reserved[space(proto)] += 1;
            }
        }
    }

    /// Ports of this worker's class in the pool (before port forwards).
    pub fn span(&self) -> u32 {
        self.span
    }

    /// True when `port` belongs to this worker's class of the pool.
    pub fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port) && port % self.shard.1 == self.shard.0
    }

    /// True when a port forward of `proto` holds `port`.
    pub fn reserved(&self, proto: u8, port: u16) -> bool {
        self.forwards.contains(&(proto, port))
    }

    /// How many mappings of `proto` one remote endpoint can have.
    pub fn capacity(&self, proto: u8) -> u32 {
        self.span - self.reserved[space(proto)]
    }

    /// Mappings towards remote `rk` and its cursor.
    pub fn usage(&self, rk: u64) -> (u32, u32) {
        self.remotes.get(rk).map_or((0, 0), |c| (c.count, c.aux))
    }

    /// The `i`-th candidate port towards remote `rk` (its offset plus `i`, wrapping).
    pub fn candidate(&self, rk: u64, i: u32) -> u16 {
        if self.span == 0 {
            return self.first;
        }
        let offset = (self.offsets.hash_u64(rk) % u64::from(self.span)) as u32;
        let n = (offset + i % self.span) % self.span;
        self.first + (n * u32::from(self.shard.1)) as u16
    }

    /// Counts one lookup made choosing a port.
    pub fn probed(&mut self) {
        self.probes += 1;
    }

    /// Lookups made choosing ports since creation.
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// Moves remote `rk`'s cursor (when it has mappings).
    pub fn set_cursor(&mut self, rk: u64, cursor: u32) {
        if let Some(c) = self.remotes.get_mut(rk) {
            c.aux = cursor;
        }
    }

    /// Records a new mapping towards `rk`; its cursor becomes `cursor`.
    pub fn add(&mut self, rk: u64, cursor: u32) {
        if let Some(c) = self.remotes.increment(rk, cursor) {
            c.aux = cursor;
        }
    }

    /// Forgets a mapping towards `rk`.
    pub fn remove(&mut self, rk: u64) {
        self.remotes.decrement(rk);
    }

    /// Remote endpoints with mappings.
    pub fn remotes(&self) -> usize {
        self.remotes.len()
    }

    /// Bytes the per-remote counts hold.
    pub fn memory_bytes(&self) -> usize {
        self.remotes.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_spans_and_reservations() {
        let fwd = Dnat {
            proto: IPPROTO_TCP,
            public_ip: 9,
            public_port: 5003,
            to_ip: 1,
            to_port: 80,
        };
        let mut p = PortPool::new(5000, 5009, 9, &[fwd], 100);
        assert_eq!(
            (p.span(), p.capacity(IPPROTO_TCP), p.capacity(IPPROTO_UDP)),
            (10, 9, 10)
        );
        p.set_shard(1, 3);
        assert_eq!(p.span(), 3, "5002, 5005, 5008");
        assert!(p.contains(5005) && !p.contains(5004) && !p.contains(5011));
        assert_eq!(p.capacity(IPPROTO_TCP), 3, "5003 is not in this class");
        p.set_shard(2, 3);
        assert_eq!(
            (p.span(), p.capacity(IPPROTO_TCP)),
            (4, 3),
            "5000, 5003, 5006, 5009"
        );
        let rk = remote_key(IPPROTO_UDP, 7, 53);
        let all: std::collections::BTreeSet<u16> = (0..4).map(|i| p.candidate(rk, i)).collect();
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            [5000, 5003, 5006, 5009]
        );
        assert_eq!(
            remote_key(IPPROTO_ICMP, 7, 1),
            remote_key(IPPROTO_ICMP, 7, 2)
        );
    }
}
