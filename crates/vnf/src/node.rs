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

/// Why a flow-state blob could not be imported. On any of these errors the node's
/// state is exactly what it was before the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The node keeps no flow state, so it cannot take any.
    #[error("node `{0}` has no flow state to import")]
    Unsupported(String),
    /// The blob was written by another kind of node.
    #[error("state blob is of node kind {found}, expected kind {expected}")]
    WrongKind {
        /// Kind this node reads.
        expected: u8,
        /// Kind found in the blob.
        found: u8,
    },
    /// Header or record contents are invalid.
    #[error("malformed state blob: {0}")]
    Malformed(String),
    /// The table could not take every record; nothing was imported.
    #[error("state does not fit: table full after {0} of the records")]
    TableFull(usize),
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

    /// Whether this node's decisions for a flow's later packets may be cached in the
    /// fast path (the table tier): true only for nodes whose per-packet work is a
    /// function of the flow's state and headers, which keep [`Packet::fast`] clear for
    /// packets whose flow is not yet settled, and which account for
    /// [`Packet::replay`]. A node that must see every byte (DPI) says false, and so
    /// does every node that does not say otherwise.
    fn offloadable(&self) -> bool {
        false
    }

    /// The shortest idle time (ns) after which this node forgets a flow the fast path
    /// may carry; the fast path gives a flow back well before (see
    /// `nfx_dataplane::fastpath`), so it never applies a verdict the node has forgotten.
    /// `None`: the node forgets nothing a forwarding verdict depends on.
    fn flow_timeout_ns(&self) -> Option<u64> {
        None
    }

    /// Expires idle state; called by the runtime about every 100 ms.
    fn expire(&mut self, _now_ns: u64) {}

    /// Node-specific gauges (table occupancy, memory, ...) for `nfx stats`.
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Tells the node it runs as worker `index` of `count` (flows spread over workers by
    /// PACKET_FANOUT; see `nfx_io::fanout::flow_program`). Returns `Ok(true)` when frames
    /// arriving on the outside port must be steered by destination port residue
    /// (`port % count == index`) because the node picks the ports replies are addressed
    /// to (source NAT), `Ok(false)` when a symmetric flow hash keeps its state together,
    /// and an error when the node cannot run on more than one worker.
    fn shard(&mut self, _index: usize, _count: usize) -> Result<bool, String> {
        Ok(false)
    }

    /// Appends the node's flow state to `out` (live migration) in a compact binary
    /// format and returns how many flows it wrote. Stateless nodes write nothing.
    fn export_state(&self, _out: &mut Vec<u8>) -> usize {
        0
    }

    /// Loads flow state written by [`Node::export_state`] of the same kind of node
    /// and returns how many flows it added. All or nothing: on error nothing changes.
    fn import_state(&mut self, data: &[u8]) -> Result<usize, StateError> {
        if data.is_empty() {
            Ok(0)
        } else {
            Err(StateError::Unsupported(self.name().to_string()))
        }
    }
}
