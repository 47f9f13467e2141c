//! The graph-node interface that every VNF implements.

use crate::EventSink;
use nfx_packet::Packet;

/// Per-vector context the runtime hands to each node.
pub struct NodeCtx<'a> {
    /// Monotonic time in nanoseconds, read once per vector.
    pub now_ns: u64,
    /// Sink for events raised while processing this vector.
    pub events: &'a mut EventSink,
}

/// A function step of the dataplane graph. `process` sees the packets of one vector,
/// already parsed (`Packet::meta` valid); it skips packets whose `drop` is set and
/// marks the ones it drops with a reason. A node that rewrites headers keeps
/// `meta` (the flow key) in step with the bytes. Nodes never panic on packet contents.
pub trait Node: Send {
    /// Instance name, used in counters and events.
    fn name(&self) -> &str;

    /// Processes one vector of packets.
    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>);

    /// Expires idle state; called by the runtime about every 100 ms.
    fn expire(&mut self, _now_ns: u64) {}

    /// Node-specific gauges (table occupancy, memory, ...) for `nfx stats`.
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}
