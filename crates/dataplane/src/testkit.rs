//! Test-only nodes, frames and an in-memory port for exercising the graph and the
//! worker without a network.

use crate::config::RunConfig;
pub use crate::mem_port::{mem_ports, MemPort, Wire, WireEnd};
use crate::runtime::Dataplane;
use nfx_packet::{DropReason, Packet};
use nfx_vnf::{Event, Node, NodeCtx};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Offset of the sequence number in frames made by [`udp_frame`].
pub const SEQ_AT: usize = 42;
/// Offset of the trace (count byte, then node ids) in frames made by [`udp_frame`].
pub const TRACE_AT: usize = 46;

/// A UDP frame 10.0.0.1:1000 → 10.0.1.1:2000, TTL 64, carrying `seq` and an empty trace.
pub fn udp_frame(seq: u32) -> Vec<u8> {
    udp_frame_between([10, 0, 0, 1], [10, 0, 1, 1], 1000, 2000, seq)
}

/// A UDP frame `src:sport → dst:dport` (IPv4, TTL 64) carrying `seq` and an empty
/// trace, like [`udp_frame`].
pub fn udp_frame_between(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, seq: u32) -> Vec<u8> {
    let mut payload = vec![0u8; 24];
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb])
        .ipv4(src, dst, 64)
        .udp(sport, dport);
    let mut f = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut f, &payload).unwrap();
    f
}

/// The sequence number of a frame made by [`udp_frame`].
pub fn seq_of(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[SEQ_AT..SEQ_AT + 4].try_into().unwrap())
}

/// The ids of the nodes that tagged a frame, in visiting order.
pub fn trace_of(frame: &[u8]) -> Vec<u8> {
    let n = usize::from(frame[TRACE_AT]);
    frame[TRACE_AT + 1..TRACE_AT + 1 + n].to_vec()
}

/// Appends its id to each packet's trace; drops packets whose sequence number is a
/// multiple of `drop_every` (if set) with `reason`; raises an event every `event_every`.
pub struct TagNode {
    /// Node name.
    pub name: String,
    /// Id written into the trace.
    pub id: u8,
    /// Drop packets with `seq % drop_every == 0`.
    pub drop_every: Option<u32>,
    /// Reason used for those drops.
    pub reason: DropReason,
    /// Raise an `elephant` event for packets with `seq % event_every == 0`.
    pub event_every: Option<u32>,
    /// Stand-in for flow state: packets tagged so far (exported and imported).
    pub tagged: u64,
}

impl TagNode {
    /// A node that only tags.
    pub fn new(name: &str, id: u8) -> Self {
        Self {
            name: name.into(),
            id,
            drop_every: None,
            reason: DropReason::AclDeny,
            event_every: None,
            tagged: 0,
        }
    }
}

impl Node for TagNode {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) {
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            let seq = seq_of(p.buf.frame());
            if self.drop_every.is_some_and(|n| seq.is_multiple_of(n)) {
                p.drop = Some(self.reason);
                continue;
            }
            let f = p.buf.frame_mut();
            let n = usize::from(f[TRACE_AT]);
            f[TRACE_AT + 1 + n] = self.id;
            f[TRACE_AT] += 1;
            self.tagged += 1;
            if self.event_every.is_some_and(|n| seq.is_multiple_of(n)) {
                ctx.events.push(Event {
                    ts_ns: ctx.now_ns,
                    node: self.name.clone(),
                    kind: "elephant",
                    flow: p.meta.key,
                    detail: serde_json::json!({ "seq": seq }),
                });
            }
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "id": self.id, "tagged": self.tagged })
    }

    fn export_state(&self, out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(&self.tagged.to_be_bytes());
        1
    }

    fn import_state(&mut self, data: &[u8]) -> Result<usize, nfx_vnf::StateError> {
        let b: [u8; 8] = data
            .try_into()
            .map_err(|_| nfx_vnf::StateError::Malformed(format!("{} bytes", data.len())))?;
        self.tagged = u64::from_be_bytes(b);
        Ok(1)
    }
}

/// Builds a [`TagNode`] named as told from a spec `{"tag": {"id": N, "drop_every": M}}`.
pub fn tag_builder() -> crate::NodeBuilder {
    Arc::new(|name: &str, spec: &serde_json::Value| {
        let err = |field: &str, problem: &str| crate::ConfigError {
            file: String::new(),
            field: field.into(),
            problem: problem.into(),
        };
        let t = spec
            .get("tag")
            .ok_or_else(|| err("", "unknown node kind"))?;
        let id = t
            .get("id")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| err("tag.id", "missing"))?;
        let mut n = TagNode::new(name, id as u8);
        n.drop_every = t
            .get("drop_every")
            .and_then(|v| v.as_u64())
            .map(|v| v as u32);
        Ok(Box::new(n) as Box<dyn Node>)
    })
}

/// Starts one worker of `cfg` (built by [`tag_builder`]) between two in-memory ports
/// (MACs 02:00:00:00:00:10 inside, …:20 outside); returns it and the ports' ends.
pub fn start_on_mem_ports(cfg: &RunConfig) -> (Dataplane, WireEnd, WireEnd) {
    let (open, inside, outside) = mem_ports();
    let dp = Dataplane::start_with_ports(cfg, tag_builder(), open).unwrap();
    (dp, inside, outside)
}

/// The frames `wire` transmitted, once there are `n` (or after 10 s).
pub fn wait_tx(wire: &Mutex<Wire>, n: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while wire.lock().unwrap().tx.len() < n && Instant::now() < deadline {
        std::thread::yield_now();
    }
    wire.lock().unwrap().tx.clone()
}

/// Streams frames `frame(0)` … `frame(n - 1)` into a port from a thread, 100 at a time.
pub fn feed(end: WireEnd, n: u32, frame: fn(u32) -> Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
            MemPort::inject(&end.0, &end.1, chunk.iter().map(|&s| frame(s)));
            std::thread::yield_now();
        }
    })
}
