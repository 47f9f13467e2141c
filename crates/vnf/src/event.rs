//! Structured events (DPI match, elephant flow, ...) emitted by nodes as JSON lines.

use nfx_packet::FlowKey;

/// One event raised by a node. Serialized as one JSON line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Event {
    /// Monotonic time in nanoseconds when the event was raised.
    pub ts_ns: u64,
    /// Name of the node instance that raised it.
    pub node: String,
    /// Event kind, e.g. `dpi_match`, `elephant`.
    pub kind: &'static str,
    /// The flow concerned.
    pub flow: FlowKey,
    /// Kind-specific details (pattern id, bytes, rate, action, ...).
    pub detail: serde_json::Value,
}

/// Where nodes put events during a vector; the runtime drains it after each vector,
/// counts the events per kind and writes them out.
#[derive(Debug, Default)]
pub struct EventSink {
    events: Vec<Event>,
}

impl EventSink {
    /// Queues an event.
    pub fn push(&mut self, ev: Event) {
        self.events.push(ev);
    }

    /// Takes every queued event.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// Number of queued events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is queued.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}
