//! The node graph of one worker: `parse` → `classify` (with services) → the frame's
//! service's chain (in Forward or Reverse order) → `output`, with per-node counters
//! (packets, bytes, drops by reason, TSC cycles), per-service counters and the event
//! stream. Dropped packets are moved behind the live ones after each node (live ones
//! keep their order), so each node sees only live packets and every drop is counted
//! against the node that decided it.
//!
//! With services, the classifier sets each packet's service; the vector is then grouped
//! by service (a stable counting sort: one pass when the whole vector is one service's)
//! and each service's chain runs on its own sub-vector, so a packet only ever enters the
//! instances of its service, in that service's order. Survivors are collected to the
//! front service by service (services in classification order, each in arrival order):
//! packets of one flow keep their order, packets of different services may not.
//! The `chain:` form runs its one implicit service on every packet, with no classifier.

use crate::builtin::{OutputNode, ParseNode};
use crate::classify::Selector;
use crate::config::ClassifierConfig;
use crate::stats::{drops_map, NodeStats, ServiceStats, ServiceTraffic};
use crate::steer::Steering;
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

impl NodeCounters {
    /// The stats of a node called `name` with these counters and its `gauges`.
    pub fn stats(&self, name: &str, gauges: serde_json::Value) -> NodeStats {
        NodeStats {
            name: name.to_string(),
            packets: self.packets,
            bytes: self.bytes,
            cycles_per_packet: if self.packets == 0 {
                0.0
            } else {
                self.cycles as f64 / self.packets as f64
            },
            drops: drops_map(&self.drops),
            stats: gauges,
        }
    }
}

/// Moves the live packets of `pkts` to the front in their order (dropped ones behind),
/// counts each drop by reason into `drops` and returns how many live.
pub(crate) fn compact(pkts: &mut [Packet], drops: &mut [u64; DropReason::COUNT]) -> usize {
    let mut live = 0;
    for i in 0..pkts.len() {
        match pkts[i].drop {
            None => {
                if i != live {
                    pkts.swap(i, live);
                }
                live += 1;
            }
            Some(r) => drops[r as usize] += 1,
        }
    }
    live
}

fn bytes_of(pkts: &[Packet]) -> u64 {
    pkts.iter().map(|p| p.buf.len() as u64).sum()
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
        c.bytes += bytes_of(pkts);
        let t0 = cycles();
        self.node.process(pkts, ctx);
        c.cycles += cycles().wrapping_sub(t0);
        compact(pkts, &mut c.drops)
    }

    fn stats(&self) -> NodeStats {
        self.counters.stats(self.node.name(), self.node.stats())
    }
}

/// One service as the graph runs it: its chain (instance indices) and its counters.
struct ServiceRun {
    id: String,
    chain: Vec<usize>,
    /// Every instance of the chain is [`Node::offloadable`].
    offloadable: bool,
    /// Index 0: Forward, 1: Reverse.
    traffic: [ServiceTraffic; 2],
    drops: [u64; DropReason::COUNT],
}

impl ServiceRun {
    fn new(id: String, chain: Vec<usize>, instances: &[Stage]) -> Self {
        Self {
            offloadable: chain.iter().all(|&i| instances[i].node.offloadable()),
            id,
            chain,
            traffic: Default::default(),
            drops: [0; DropReason::COUNT],
        }
    }
}

/// What a graph runs, handed to [`Graph::replace`].
pub struct GraphPlan {
    /// Every instance, by id: a new node (named by the id), or `None` to keep the
    /// running instance of that id as it is (same object, state and counters).
    pub instances: Vec<(String, Option<Box<dyn Node>>)>,
    /// Services in classification order: id and chain (indices into `instances`, in
    /// Forward order).
    pub services: Vec<(String, Vec<usize>)>,
    /// The services' selectors, in the same order; `None` for the `chain:` form (one
    /// service that takes every frame, no classifier).
    pub selectors: Option<Vec<Selector>>,
}

impl GraphPlan {
    /// The `chain:` form with `nodes`, in order, each its own instance.
    pub fn chain(nodes: Vec<Box<dyn Node>>) -> Self {
        let n = nodes.len();
        Self {
            instances: nodes
                .into_iter()
                .map(|node| (node.name().to_string(), Some(node)))
                .collect(),
            services: vec![("chain".into(), (0..n).collect())],
            selectors: None,
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
    /// The classifier (services form); `None` for the `chain:` form.
    steering: Option<Steering>,
    classifier: ClassifierConfig,
    instances: Vec<Stage>,
    services: Vec<ServiceRun>,
    output: Stage,
    sink: EventSink,
    event_counts: BTreeMap<&'static str, u64>,
    events_out: Option<Box<dyn Write + Send>>,
    event_write_errors: u64,
    /// Grouping by service: each packet's place in the grouped vector.
    dest: Vec<u16>,
    /// Grouping by service: per service, its packets in the vector, then its end.
    group: Vec<u32>,
}

impl Graph {
    /// Builds `parse` → `chain` → `output` (the `chain:` form); events go to
    /// `events_out` as JSON lines.
    pub fn new(
        chain: Vec<Box<dyn Node>>,
        output: OutputNode,
        events_out: Option<Box<dyn Write + Send>>,
    ) -> Self {
        let instances: Vec<Stage> = chain.into_iter().map(Stage::new).collect();
        let all = (0..instances.len()).collect();
        let services = vec![ServiceRun::new("chain".into(), all, &instances)];
        Self {
            parse: Stage::new(Box::new(ParseNode)),
            steering: None,
            classifier: ClassifierConfig::default(),
            instances,
            services,
            output: Stage::new(Box::new(output)),
            sink: EventSink::default(),
            event_counts: EVENT_KINDS.iter().map(|k| (*k, 0)).collect(),
            events_out,
            event_write_errors: 0,
            dest: vec![0; nfx_packet::MAX_VECTOR],
            group: vec![0; 1],
        }
    }

    /// Sets the flow table the classifier gets when services are installed.
    pub fn with_classifier(mut self, cfg: ClassifierConfig) -> Self {
        self.classifier = cfg;
        self
    }

    /// Runs one vector through the graph in direction `dir`. On return the first `n`
    /// packets (the returned count) are ready to transmit; the others are dropped and
    /// counted. Packets of one service keep their arrival order.
    pub fn run(&mut self, pkts: &mut [Packet], dir: Direction, now_ns: u64) -> usize {
        let mut ctx = NodeCtx {
            now_ns,
            events: &mut self.sink,
        };
        let mut live = self.parse.run(pkts, &mut ctx);
        match self.steering.as_mut() {
            None => {
                let svc = &self.services[0];
                // A vector's packets all start with the same mark (set per receive).
                if !svc.offloadable && pkts.first().is_some_and(|p| p.fast) {
                    for p in pkts[..live].iter_mut() {
                        p.fast = false;
                    }
                }
                live = run_chain(
                    &mut self.instances,
                    &svc.chain,
                    &mut pkts[..live],
                    dir,
                    &mut ctx,
                );
            }
            Some(steering) => {
                live = steering.classify(&mut pkts[..live], dir, now_ns);
                let mut groups = Groups {
                    instances: &mut self.instances,
                    services: &mut self.services,
                    dest: &mut self.dest,
                    group: &mut self.group,
                };
                live = groups.run(&mut pkts[..live], dir, &mut ctx);
                if dir == Direction::Forward {
                    steering.record(&pkts[..live], now_ns);
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
    /// sent: nodes refresh and account the flow, and every node and service it reaches
    /// counts the replayed packets and bytes instead of one header-only packet.
    /// Returns whether the chain still passes the flow.
    pub fn replay(&mut self, p: &mut Packet, now_ns: u64) -> bool {
        let r = p.replay.unwrap_or_default();
        let len = p.buf.len() as u64;
        let d = dir_index(p.dir);
        let before: Vec<u64> = self.counters_mut().map(|c| c.packets).collect();
        let svc_before: Vec<ServiceTraffic> = self.services.iter().map(|s| s.traffic[d]).collect();
        let dir = p.dir;
        let live = self.run(std::slice::from_mut(p), dir, now_ns) == 1;
        let extra = r.packets.saturating_sub(1);
        let scale = |bytes: u64| bytes.saturating_sub(len) + r.bytes;
        for (c, b) in self.counters_mut().zip(before) {
            if c.packets > b {
                c.packets += extra;
                c.bytes = scale(c.bytes);
            }
        }
        for (s, b) in self.services.iter_mut().zip(svc_before) {
            let t = &mut s.traffic[d];
            if t.rx_packets > b.rx_packets {
                t.rx_packets += extra;
                t.rx_bytes = scale(t.rx_bytes);
            }
            if t.tx_packets > b.tx_packets {
                t.tx_packets += extra;
                t.tx_bytes = scale(t.tx_bytes);
            }
        }
        live
    }

    /// The counters of every stage: `parse`, `classify`, the instances, `output`.
    fn counters_mut(&mut self) -> impl Iterator<Item = &mut NodeCounters> {
        std::iter::once(&mut self.parse.counters)
            .chain(self.steering.as_mut().map(Steering::counters_mut))
            .chain(self.instances.iter_mut().map(|s| &mut s.counters))
            .chain(std::iter::once(&mut self.output.counters))
    }

    /// The shortest [`Node::flow_timeout_ns`] of the instances and the classifier's.
    pub fn flow_timeout_ns(&self) -> Option<u64> {
        self.instances
            .iter()
            .filter_map(|s| s.node.flow_timeout_ns())
            .chain(self.steering.as_ref().map(Steering::timeout_ns))
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

    /// Lets every VNF and the classifier expire idle state and pushes buffered events
    /// to the file.
    pub fn housekeeping(&mut self, now_ns: u64) {
        for s in &mut self.instances {
            s.node.expire(now_ns);
        }
        if let Some(s) = self.steering.as_mut() {
            s.expire(now_ns);
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

    /// Replaces the instances and services between two vectors. An instance kept
    /// (`None` in the plan) stays as it is. A new node with the id of a running one
    /// takes its counters (stats stay continuous) and its flow state (exported from the
    /// old node, imported into the new one, so established flows survive a rule
    /// change). Services keep their counters by id; the classifier keeps the flows of
    /// services that remain. Returns the nodes no longer run (to be dropped off the
    /// packet path) and how many flows were carried over; refuses, changing nothing, a
    /// plan that keeps an instance that is not running or is inconsistent.
    pub fn replace(&mut self, plan: GraphPlan) -> Result<(Vec<Box<dyn Node>>, usize), String> {
        self.check(&plan)?;
        let mut old: Vec<Option<Stage>> = std::mem::take(&mut self.instances)
            .into_iter()
            .map(Some)
            .collect();
        let mut retired = Vec::new();
        let mut carried = 0;
        let mut blob = Vec::new();
        for (id, node) in plan.instances {
            let prev = old
                .iter_mut()
                .find(|s| s.as_ref().is_some_and(|s| s.node.name() == id))
                .and_then(Option::take);
            let stage = match (node, prev) {
                (None, Some(kept)) => kept,
                (Some(node), None) => Stage::new(node),
                (Some(mut node), Some(prev)) => {
                    blob.clear();
                    prev.node.export_state(&mut blob);
                    match node.import_state(&blob) {
                        Ok(n) => carried += n,
                        Err(e) => log::warn!("reconfigure: {id} starts with empty state: {e}"),
                    }
                    retired.push(prev.node);
                    Stage {
                        node,
                        counters: prev.counters,
                    }
                }
                // Ruled out by `check`.
                (None, None) => continue,
            };
            self.instances.push(stage);
        }
        retired.extend(old.into_iter().flatten().map(|s| s.node));
        let old_services = std::mem::take(&mut self.services);
        for (id, chain) in plan.services {
            let mut run = ServiceRun::new(id, chain, &self.instances);
            if let Some(prev) = old_services.iter().find(|s| s.id == run.id) {
                run.traffic = prev.traffic;
                run.drops = prev.drops;
            }
            self.services.push(run);
        }
        self.group.resize(self.services.len().max(1), 0);
        self.steering = match (plan.selectors, self.steering.take()) {
            (None, _) => None,
            (Some(sel), None) => Some(Steering::new(sel, &self.classifier)),
            (Some(sel), Some(mut st)) => {
                let map: Vec<Option<u16>> = old_services
                    .iter()
                    .map(|o| {
                        self.services
                            .iter()
                            .position(|n| n.id == o.id)
                            .map(|i| i as u16)
                    })
                    .collect();
                st.retarget(sel, &map);
                Some(st)
            }
        };
        Ok((retired, carried))
    }

    /// Refuses a plan [`Graph::replace`] cannot install as a whole.
    fn check(&self, plan: &GraphPlan) -> Result<(), String> {
        for (id, node) in &plan.instances {
            if node.is_none() && !self.instances.iter().any(|s| s.node.name() == id) {
                return Err(format!("instance `{id}` is to be kept but does not run"));
            }
        }
        let n = plan.instances.len();
        if let Some((id, _)) = plan
            .services
            .iter()
            .find(|(_, chain)| chain.iter().any(|&i| i >= n))
        {
            return Err(format!("service `{id}` names an instance out of range"));
        }
        match &plan.selectors {
            None if plan.services.len() != 1 => {
                Err("a graph without classifier runs exactly one service".into())
            }
            Some(sel) if sel.len() != plan.services.len() => {
                Err("one selector per service is needed".into())
            }
            Some(_) if plan.services.len() > usize::from(u16::MAX) => {
                Err("too many services".into())
            }
            _ => Ok(()),
        }
    }

    /// The instance called `name`, for state export/import.
    pub fn vnf_mut(&mut self, name: &str) -> Option<&mut (dyn Node + 'static)> {
        self.instances
            .iter_mut()
            .find(|s| s.node.name() == name)
            .map(|s| s.node.as_mut())
    }

    /// Instance ids, in order (the `chain:` form: Forward order).
    pub fn vnf_names(&self) -> Vec<String> {
        self.instances
            .iter()
            .map(|s| s.node.name().to_string())
            .collect()
    }

    /// Stats of every node: `parse`, `classify` (with services), the instances,
    /// `output`.
    pub fn node_stats(&self) -> Vec<NodeStats> {
        std::iter::once(self.parse.stats())
            .chain(self.steering.as_ref().map(Steering::stats))
            .chain(self.instances.iter().map(Stage::stats))
            .chain(std::iter::once(self.output.stats()))
            .collect()
    }

    /// Stats of the instances named in `ids`, in instance order.
    pub fn instance_stats(&self, ids: &[String]) -> Vec<NodeStats> {
        self.instances
            .iter()
            .filter(|s| ids.iter().any(|id| id == s.node.name()))
            .map(Stage::stats)
            .collect()
    }

    /// Stats of every service, in classification order (none for the `chain:` form).
    pub fn service_stats(&self) -> Vec<ServiceStats> {
        if self.steering.is_none() {
            return Vec::new();
        }
        self.services
            .iter()
            .map(|s| ServiceStats {
                id: s.id.clone(),
                chain: s
                    .chain
                    .iter()
                    .map(|&i| self.instances[i].node.name().to_string())
                    .collect(),
                forward: s.traffic[0],
                reverse: s.traffic[1],
                drops: drops_map(&s.drops),
            })
            .collect()
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

fn dir_index(dir: Direction) -> usize {
    match dir {
        Direction::Forward => 0,
        Direction::Reverse => 1,
    }
}

/// Runs the instances `chain` (indices into `instances`) on `pkts`, in order for
/// Forward and backwards for Reverse; returns the survivors, compacted to the front.
fn run_chain(
    instances: &mut [Stage],
    chain: &[usize],
    pkts: &mut [Packet],
    dir: Direction,
    ctx: &mut NodeCtx<'_>,
) -> usize {
    let mut live = pkts.len();
    match dir {
        Direction::Forward => {
            for &i in chain {
                live = instances[i].run(&mut pkts[..live], ctx);
            }
        }
        Direction::Reverse => {
            for &i in chain.iter().rev() {
                live = instances[i].run(&mut pkts[..live], ctx);
            }
        }
    }
    live
}

/// The parts of a graph that run a classified vector service by service.
struct Groups<'a> {
    instances: &'a mut [Stage],
    services: &'a mut [ServiceRun],
    dest: &'a mut Vec<u16>,
    group: &'a mut Vec<u32>,
}

impl Groups<'_> {
    /// Runs every packet of `pkts` (classified) through its service's chain; returns
    /// the survivors, compacted to the front service by service.
    fn run(&mut self, pkts: &mut [Packet], dir: Direction, ctx: &mut NodeCtx<'_>) -> usize {
        let Some(first) = pkts.first().map(|p| usize::from(p.service)) else {
            return 0;
        };
        if pkts.iter().all(|p| usize::from(p.service) == first) {
            return self.run_service(first, pkts, dir, ctx);
        }
        self.group_by_service(pkts);
        let mut out = 0;
        let mut start = 0;
        for s in 0..self.services.len() {
            let end = self.group[s] as usize;
            if end == start {
                continue;
            }
            let live = self.run_service(s, &mut pkts[start..end], dir, ctx);
            // Survivors move down over dropped packets, in order.
            if out != start {
                for k in 0..live {
                    pkts.swap(out + k, start + k);
                }
            }
            out += live;
            start = end;
        }
        out
    }

    /// Reorders `pkts` so that each service's packets are together, services in index
    /// order, each in arrival order (a stable counting sort, applied in place by
    /// following the permutation's cycles). Afterwards `group[s]` is where service `s`'s
    /// packets end.
    fn group_by_service(&mut self, pkts: &mut [Packet]) {
        let (dest, group) = (&mut *self.dest, &mut *self.group);
        group.fill(0);
        for p in pkts.iter() {
            group[usize::from(p.service)] += 1;
        }
        let mut at = 0;
        for g in group.iter_mut() {
            let n = *g;
            *g = at;
            at += n;
        }
        if dest.len() < pkts.len() {
            dest.resize(pkts.len(), 0);
        }
        for (i, p) in pkts.iter().enumerate() {
            let g = &mut group[usize::from(p.service)];
            dest[i] = *g as u16;
            *g += 1;
        }
        for i in 0..pkts.len() {
            while usize::from(dest[i]) != i {
                let j = usize::from(dest[i]);
                pkts.swap(i, j);
                dest.swap(i, j);
            }
        }
    }

    /// Runs service `s`'s chain on `pkts` (all its), counting its traffic and drops.
    fn run_service(
        &mut self,
        s: usize,
        pkts: &mut [Packet],
        dir: Direction,
        ctx: &mut NodeCtx<'_>,
    ) -> usize {
        let svc = &mut self.services[s];
        let t = &mut svc.traffic[dir_index(dir)];
        t.rx_packets += pkts.len() as u64;
        t.rx_bytes += bytes_of(pkts);
        if !svc.offloadable && pkts.first().is_some_and(|p| p.fast) {
            for p in pkts.iter_mut() {
                p.fast = false;
            }
        }
        let live = run_chain(self.instances, &svc.chain, pkts, dir, ctx);
        t.tx_packets += live as u64;
        t.tx_bytes += bytes_of(&pkts[..live]);
        for p in &pkts[live..] {
            if let Some(r) = p.drop {
                svc.drops[r as usize] += 1;
            }
        }
        live
    }
}
