//! The node graph of one worker: `parse` → VNF chain (in Forward or Reverse order) →
//! `output`, with per-node counters (packets, bytes, drops by reason, TSC cycles) and the
//! event stream. Dropped packets are moved behind the live ones after each node (live
//! ones keep their order), so each node sees only live packets and every drop is counted
//! against the node that decided it.

use crate::builtin::{OutputNode, ParseNode};
use crate::stats::{drops_map, NodeStats};
use nfx_packet::{Direction, DropReason, Packet};
use nfx_vnf::{EventSink, Node, NodeCtx};
use std::collections::BTreeMap;
use std::io::Write;

/// Counters of one node, updated once per vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCounters {
    /// Packets that entered the node.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// TSC cycles spent inside `process`.
    pub cycles: u64,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::COUNT],
}

impl Default for NodeCounters {
    fn default() -> Self {
        Self {
            packets: 0,
            bytes: 0,
            cycles: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

struct Stage {
    node: Box<dyn Node>,
    counters: NodeCounters,
}

impl Stage {
    fn new(node: Box<dyn Node>) -> Self {
        Self {
            node,
            counters: NodeCounters::default(),
        }
    }

    /// Runs the node on the live packets `pkts`, counts, and compacts the survivors to the
    /// front in their original order. Returns how many survive.
    fn run(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let c = &mut self.counters;
        c.packets += pkts.len() as u64;
        c.bytes += pkts.iter().map(|p| p.buf.len() as u64).sum::<u64>();
        let t0 = cycles();
        self.node.process(pkts, ctx);
        c.cycles += cycles().wrapping_sub(t0);
        let mut live = 0;
        for i in 0..pkts.len() {
            match pkts[i].drop {
                None => {
                    if i != live {
                        pkts.swap(i, live);
                    }
                    live += 1;
                }
                Some(r) => c.drops[r as usize] += 1,
            }
        }
        live
    }

    fn stats(&self) -> NodeStats {
        let c = &self.counters;
        NodeStats {
            name: self.node.name().to_string(),
            packets: c.packets,
            bytes: c.bytes,
            cycles_per_packet: if c.packets == 0 {
                0.0
            } else {
                c.cycles as f64 / c.packets as f64
            },
            drops: drops_map(&c.drops),
            stats: self.node.stats(),
        }
    }
}

/// The CPU's time-stamp counter (cycles); nanoseconds on targets without one.
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<std::time::Instant> = OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// Event kinds always present in the stats, even before the first one is raised.
pub const EVENT_KINDS: [&str; 2] = ["dpi_match", "elephant"];

/// One worker's graph.
pub struct Graph {
    parse: Stage,
    chain: Vec<Stage>,
    output: Stage,
    sink: EventSink,
    event_counts: BTreeMap<&'static str, u64>,
    events_out: Option<Box<dyn Write + Send>>,
    event_write_errors: u64,
    /// Every VNF of the chain is [`Node::offloadable`] (kept with the chain).
    offloadable: bool,
}

impl Graph {
    /// Builds `parse` → `chain` → `output`; events go to `events_out` as JSON lines.
    pub fn new(
        chain: Vec<Box<dyn Node>>,
        output: OutputNode,
        events_out: Option<Box<dyn Write + Send>>,
    ) -> Self {
        Self {
            parse: Stage::new(Box::new(ParseNode)),
            chain: chain.into_iter().map(Stage::new).collect(),
            output: Stage::new(Box::new(output)),
            sink: EventSink::default(),
            event_counts: EVENT_KINDS.iter().map(|k| (*k, 0)).collect(),
            events_out,
            event_write_errors: 0,
            offloadable: false,
        }
        .with_offloadable()
    }

    fn with_offloadable(mut self) -> Self {
        self.offloadable = self.chain.iter().all(|s| s.node.offloadable());
        self
    }

    /// Runs one vector through the graph in direction `dir`. On return the first `n`
    /// packets (the returned count) are ready to transmit, in arrival order; the others
    /// are dropped and counted.
    pub fn run(&mut self, pkts: &mut [Packet], dir: Direction, now_ns: u64) -> usize {
        let mut ctx = NodeCtx {
            now_ns,
            events: &mut self.sink,
        };
        let mut live = self.parse.run(pkts, &mut ctx);
        // A vector's packets all start with the same mark (set per receive).
        if !self.offloadable && pkts.first().is_some_and(|p| p.fast) {
            for p in pkts[..live].iter_mut() {
                p.fast = false;
            }
        }
        match dir {
            Direction::Forward => {
                for s in self.chain.iter_mut() {
                    live = s.run(&mut pkts[..live], &mut ctx);
                }
            }
            Direction::Reverse => {
                for s in self.chain.iter_mut().rev() {
                    live = s.run(&mut pkts[..live], &mut ctx);
                }
            }
        }
        live = self.output.run(&mut pkts[..live], &mut ctx);
        if !self.sink.is_empty() {
            self.drain_events();
        }
        live
    }

    /// Runs a fast-path replay packet ([`Packet::replay`]) through the graph, not to be
    /// sent: nodes refresh and account the flow, and every node it reaches counts the
    /// replayed packets and bytes instead of one header-only packet. Returns whether
    /// the chain still passes the flow.
    pub fn replay(&mut self, p: &mut Packet, now_ns: u64) -> bool {
        let r = p.replay.unwrap_or_default();
        let len = p.buf.len() as u64;
        let before: Vec<u64> = self.stages().map(|s| s.counters.packets).collect();
        let dir = p.dir;
        let live = self.run(std::slice::from_mut(p), dir, now_ns) == 1;
        for (s, b) in self.stages_mut().zip(before) {
            if s.counters.packets > b {
                s.counters.packets += r.packets.saturating_sub(1);
                s.counters.bytes = s.counters.bytes - len + r.bytes;
            }
        }
        live
    }

    fn stages(&self) -> impl Iterator<Item = &Stage> {
        std::iter::once(&self.parse)
            .chain(&self.chain)
            .chain(std::iter::once(&self.output))
    }

    fn stages_mut(&mut self) -> impl Iterator<Item = &mut Stage> {
        std::iter::once(&mut self.parse)
            .chain(&mut self.chain)
            .chain(std::iter::once(&mut self.output))
    }

    /// The shortest [`Node::flow_timeout_ns`] of the chain.
    pub fn flow_timeout_ns(&self) -> Option<u64> {
        self.chain
            .iter()
            .filter_map(|s| s.node.flow_timeout_ns())
            .min()
    }

    /// Counts, against `output`, the packets the port could not transmit.
    pub fn count_tx_drops(&mut self, sent: &[Packet]) {
        for p in sent {
            if let Some(r) = p.drop {
                self.output.counters.drops[r as usize] += 1;
            }
        }
    }

    fn drain_events(&mut self) {
        for ev in self.sink.drain() {
            *self.event_counts.entry(ev.kind).or_insert(0) += 1;
            if let Some(w) = self.events_out.as_mut() {
                let ok = serde_json::to_writer(&mut *w, &ev).is_ok() && w.write_all(b"\n").is_ok();
                if !ok {
                    self.event_write_errors += 1;
                }
            }
        }
    }

    /// Lets every VNF expire idle state and pushes buffered events to the file.
    pub fn housekeeping(&mut self, now_ns: u64) {
        for s in &mut self.chain {
            s.node.expire(now_ns);
        }
        self.flush_events();
    }

    /// Writes buffered events out.
    pub fn flush_events(&mut self) {
        if let Some(w) = self.events_out.as_mut() {
            if w.flush().is_err() {
                self.event_write_errors += 1;
            }
        }
    }

    /// Replaces the VNF chain between two vectors. A new node named like an old one keeps
    /// the old one's counters (stats stay continuous) and its flow state (exported from
    /// the old node, imported into the new one, so established flows survive a rule
    /// change). Returns the old nodes and how many flows were carried over.
    pub fn replace_chain(&mut self, nodes: Vec<Box<dyn Node>>) -> (Vec<Box<dyn Node>>, usize) {
        self.replace_chain_after(0, nodes)
    }

    /// Keeps the first `keep` VNFs untouched (same objects, state and counters) and
    /// replaces the rest by `nodes` as [`Graph::replace_chain`] does.
    pub fn replace_chain_after(
        &mut self,
        keep: usize,
        nodes: Vec<Box<dyn Node>>,
    ) -> (Vec<Box<dyn Node>>, usize) {
        let keep = keep.min(self.chain.len());
        let mut old: Vec<Stage> = self.chain.split_off(keep);
        let mut carried = 0;
        let mut blob = Vec::new();
        let added: Vec<Stage> = nodes
            .into_iter()
            .map(|mut node| {
                let Some(i) = old.iter().position(|s| s.node.name() == node.name()) else {
                    return Stage::new(node);
                };
                blob.clear();
                old[i].node.export_state(&mut blob);
                match node.import_state(&blob) {
                    Ok(n) => carried += n,
                    Err(e) => {
                        log::warn!("reconfigure: {} starts with empty state: {e}", node.name())
                    }
                }
                Stage {
                    node,
                    counters: std::mem::take(&mut old[i].counters),
                }
            })
            .collect();
        self.chain.extend(added);
        self.offloadable = self.chain.iter().all(|s| s.node.offloadable());
        (old.into_iter().map(|s| s.node).collect(), carried)
    }

    /// The VNF called `name`, for state export/import.
    pub fn vnf_mut(&mut self, name: &str) -> Option<&mut (dyn Node + 'static)> {
        self.chain
            .iter_mut()
            .find(|s| s.node.name() == name)
            .map(|s| s.node.as_mut())
    }

    /// Names of the VNFs in Forward order.
    pub fn vnf_names(&self) -> Vec<String> {
        self.chain
            .iter()
            .map(|s| s.node.name().to_string())
            .collect()
    }

    /// Stats of every node in Forward order: `parse`, VNFs, `output`.
    pub fn node_stats(&self) -> Vec<NodeStats> {
        self.stages().map(Stage::stats).collect()
    }

    /// Events raised so far, by kind; failed event-file writes appear as `write_error`.
    pub fn event_counts(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = self
            .event_counts
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        if self.event_write_errors > 0 {
            m.insert("write_error".into(), self.event_write_errors);
        }
        m
    }
}
