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

/// Why [`Node::import_report`] left a record of a state blob out. Every reason is
/// counted; the rest of the blob is imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SkipReason {
    /// The record does not decode (unknown state code, flag bits, field values).
    Malformed,
    /// The flow is already tracked (or the blob holds it twice).
    Duplicate,
    /// Its remaining lifetime is zero.
    Expired,
    /// This instance's ACL does not allow the flow.
    AclDeny,
    /// Opened from the outside, which this instance does not allow (`reverse_new`).
    ReverseNew,
    /// A NAT mapping whose public address or port is not this instance's pool.
    OutsidePool,
    /// A NAT mapping whose inside host is not in this instance's inside networks.
    NotInside,
    /// A port-forward mapping that matches no configured forward.
    NotConfigured,
    /// Its source already holds as many flows as this instance allows one source.
    SourceLimit,
}

impl SkipReason {
    /// Every reason, in discriminant order.
    pub const ALL: [SkipReason; 9] = [
        SkipReason::Malformed,
        SkipReason::Duplicate,
        SkipReason::Expired,
        SkipReason::AclDeny,
        SkipReason::ReverseNew,
        SkipReason::OutsidePool,
        SkipReason::NotInside,
        SkipReason::NotConfigured,
        SkipReason::SourceLimit,
    ];

    /// snake_case name for reports and stats.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Malformed => "malformed",
            SkipReason::Duplicate => "duplicate",
            SkipReason::Expired => "expired",
            SkipReason::AclDeny => "acl_deny",
            SkipReason::ReverseNew => "reverse_new",
            SkipReason::OutsidePool => "outside_pool",
            SkipReason::NotInside => "not_inside",
            SkipReason::NotConfigured => "not_configured",
            SkipReason::SourceLimit => "source_limit",
        }
    }
}

/// What an import did: how many flows it added and how many records it left out, by
/// reason. Also kept as running totals in the stateful nodes' stats (`import`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Flows added.
    pub imported: usize,
    /// Records left out, indexed by `SkipReason as usize`.
    pub skipped: [usize; SkipReason::ALL.len()],
}

impl ImportReport {
    /// Counts one record left out.
    pub fn skip(&mut self, why: SkipReason) {
        self.skipped[why as usize] += 1;
    }

    /// Records left out for `why`.
    pub fn skipped(&self, why: SkipReason) -> usize {
        self.skipped[why as usize]
    }

    /// Records left out for any reason.
    pub fn skipped_total(&self) -> usize {
        self.skipped.iter().sum()
    }

    /// Adds another report's counts to this one.
    pub fn add(&mut self, other: &ImportReport) {
        self.imported += other.imported;
        for (a, b) in self.skipped.iter_mut().zip(other.skipped) {
            *a += b;
        }
    }

    /// `{"imported": n, "skipped": {reason: count, ...}}` with the non-zero reasons.
    pub fn to_json(&self) -> serde_json::Value {
        let skipped: serde_json::Map<String, serde_json::Value> = SkipReason::ALL
            .iter()
            .filter(|r| self.skipped(**r) > 0)
            .map(|r| (r.as_str().to_string(), self.skipped(*r).into()))
            .collect();
        serde_json::json!({ "imported": self.imported, "skipped": skipped })
    }
}

/// `{name: count, ...}` for a node's counters per reason (`names[i]` counts
/// `counts[i]`), as the stateful nodes report their drops.
pub fn counters_json<'a>(
    names: impl IntoIterator<Item = &'a str>,
    counts: &[u64],
) -> serde_json::Value {
    names
        .into_iter()
        .zip(counts)
        .map(|(n, c)| (n.to_string(), (*c).into()))
        .collect::<serde_json::Map<_, _>>()
        .into()
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

    /// Loads flow state written by [`Node::export_state`] of the same kind of node and
    /// returns how many flows it added (see [`Node::import_report`]).
    fn import_state(&mut self, data: &[u8]) -> Result<usize, StateError> {
        self.import_report(data).map(|r| r.imported)
    }

    /// Loads flow state written by [`Node::export_state`] of the same kind of node. A
    /// blob comes from another host, so every record is checked against this node's
    /// own configuration; records that fail are left out and counted by reason, the
    /// rest are imported. A blob that cannot be read at all (header, size) or does not
    /// fit the table is refused whole: on error nothing changes.
    fn import_report(&mut self, data: &[u8]) -> Result<ImportReport, StateError> {
        if data.is_empty() {
            Ok(ImportReport::default())
        } else {
            Err(StateError::Unsupported(self.name().to_string()))
        }
    }
}
