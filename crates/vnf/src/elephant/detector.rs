//! The elephant-flow detection node: per-flow byte/packet/rate accounting in a bounded
//! table, one `elephant` event when a flow crosses the thresholds.

use super::config::{ElephantConfig, ElephantConfigError};
use super::flow_table::FlowTable;
use crate::{Event, Node, NodeCtx};
use nfx_packet::{FlowKey, Packet, VnetHdr};

const NS_PER_MS: u64 = 1_000_000;

/// Per-flow accounting kept in the table.
#[derive(Debug, Clone, Default)]
struct FlowStat {
    bytes: u64,
    packets: u64,
    window_start_ns: u64,
    window_bytes: u64,
    elephant: bool,
}

/// Detects elephant flows. Memory is fixed at creation: `max_flows` (rounded up)
/// slots of [`ElephantDetector::slot_bytes`] bytes each; see `memory_bytes` in stats.
#[derive(Debug)]
pub struct ElephantDetector {
    name: String,
    cfg: ElephantConfig,
    window_ns: u64,
    idle_ns: u64,
    table: FlowTable<FlowKey, FlowStat>,
    elephants: u64,
    packets: u64,
    bytes: u64,
    expired: u64,
}

/// IP-layer bytes and packets a packet stands for on the wire. A GSO super-packet
/// counts as the segments it will become: each carries its own IP+L4 headers.
pub fn wire_size(p: &Packet) -> (u64, u64) {
    let m = &p.meta;
    let ip_bytes = m.ip_end.saturating_sub(m.l3) as u64;
    let v = &p.buf.vnet;
    let gso_size = u64::from(v.gso_size);
    if v.gso_type & !VnetHdr::GSO_ECN == VnetHdr::GSO_NONE || gso_size == 0 {
        return (ip_bytes, 1);
    }
    let headers = m.payload.saturating_sub(m.l3) as u64;
    let payload = ip_bytes.saturating_sub(headers);
    let segs = payload.div_ceil(gso_size).max(1);
    (payload + segs * headers, segs)
}

impl ElephantDetector {
    /// Builds the detector after checking the config.
    pub fn new(name: &str, cfg: &ElephantConfig) -> Result<Self, ElephantConfigError> {
        cfg.validate()?;
        Ok(Self {
            name: name.to_string(),
            cfg: cfg.clone(),
            window_ns: cfg.window_ms * NS_PER_MS,
            idle_ns: cfg.idle_timeout_ms.saturating_mul(NS_PER_MS),
            table: FlowTable::with_capacity(cfg.max_flows),
            elephants: 0,
            packets: 0,
            bytes: 0,
            expired: 0,
        })
    }

    /// Bytes of one table slot (key, timestamps, counters).
    pub fn slot_bytes() -> usize {
        std::mem::size_of::<super::flow_table::Slot<FlowKey, FlowStat>>()
    }

    /// Flows tracked now.
    pub fn flows(&self) -> usize {
        self.table.len()
    }

    /// Elephant events raised so far.
    pub fn elephants(&self) -> u64 {
        self.elephants
    }

    fn crossed(&self, s: &FlowStat) -> bool {
        let bytes_ok = s.bytes >= self.cfg.min_bytes;
        let bits = u128::from(s.window_bytes) * 8 * 1000;
        let rate_ok = bits >= u128::from(self.cfg.min_rate_bps) * u128::from(self.cfg.window_ms);
        bytes_ok && rate_ok
    }

    fn account(&mut self, key: FlowKey, bytes: u64, segs: u64, now_ns: u64) -> Option<Event> {
        let e = self
            .table
            .get_or_insert(key, now_ns, |s: &FlowStat| s.elephant);
        let window_ns = self.window_ns;
        let s = &mut self.table.slot_mut(e.index).val;
        if e.inserted || now_ns.saturating_sub(s.window_start_ns) >= window_ns {
            s.window_start_ns = now_ns;
            s.window_bytes = 0;
        }
        s.bytes += bytes;
        s.packets += segs;
        s.window_bytes += bytes;
        if s.elephant {
            return None;
        }
        let s = self.table.slot(e.index).val.clone();
        if !self.crossed(&s) {
            return None;
        }
        self.table.slot_mut(e.index).val.elephant = true;
        self.elephants += 1;
        let elapsed = now_ns.saturating_sub(s.window_start_ns).max(NS_PER_MS);
        let rate_bps =
            (u128::from(s.window_bytes) * 8 * 1_000_000_000 / u128::from(elapsed)) as u64;
        Some(Event {
            ts_ns: now_ns,
            node: self.name.clone(),
            kind: "elephant",
            flow: key,
            detail: serde_json::json!({
                "bytes": s.bytes,
                "packets": s.packets,
                "rate_bps": rate_bps,
                "window_ms": self.cfg.window_ms,
                "min_bytes": self.cfg.min_bytes,
                "min_rate_bps": self.cfg.min_rate_bps,
            }),
        })
    }
}

impl Node for ElephantDetector {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) {
        for p in pkts.iter().filter(|p| p.alive()) {
            let (bytes, segs) = match p.replay {
                Some(r) => (r.bytes, r.packets),
                None => wire_size(p),
            };
            self.packets += segs;
            self.bytes += bytes;
            if let Some(ev) = self.account(p.meta.key, bytes, segs, ctx.now_ns) {
                ctx.events.push(ev);
            }
        }
    }

    /// Byte and rate accounting needs only the counts, which replayed packets carry.
    fn offloadable(&self) -> bool {
        true
    }

    fn expire(&mut self, now_ns: u64) {
        self.expired += self.table.expire(now_ns, self.idle_ns) as u64;
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "flows_tracked": self.table.len(),
            "flow_capacity": self.table.capacity(),
            "memory_bytes": self.table.memory_bytes(),
            "elephants": self.elephants,
            "evictions": self.table.evictions(),
            "expired": self.expired,
            "packets": self.packets,
            "bytes": self.bytes,
        })
    }
}
