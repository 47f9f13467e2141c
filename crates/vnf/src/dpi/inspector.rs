//! The DPI node: scans each packet's TCP/UDP payload once against every pattern,
//! plus (TCP) the boundary with the flow's previous segment; raises one `dpi_match`
//! event per (flow, pattern) and drops packets matching a `drop` pattern.

use super::config::DpiConfig;
use super::engine::{clear_set, BuildError, Engine};
use super::patterns::{self, Action, PatternSpec};
use super::stream::StreamTails;
use super::DpiError;
use crate::elephant::FlowTable;
use crate::{Event, Node, NodeCtx};
use nfx_io::FileScope;
use nfx_packet::{DropReason, FlowKey, Packet};
use regex_automata::{PatternID, PatternSet};
use std::path::Path;

const NS_PER_MS: u64 = 1_000_000;
const TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;

/// What the node keeps of each pattern after the engine is built.
#[derive(Debug)]
struct PatternInfo {
    id: String,
    action: Action,
    hits: u64,
}

/// Counters reported by `stats()`.
#[derive(Debug, Default)]
struct Counters {
    packets_scanned: u64,
    bytes_scanned: u64,
    alert_matches: u64,
    drop_matches: u64,
    stream_matches: u64,
    dropped: u64,
    events: u64,
    events_suppressed: u64,
    packets_past_depth: u64,
}

/// Turns matches into counters and (at most one per flow and pattern) events.
#[derive(Debug)]
struct Reporter {
    name: String,
    patterns: Vec<PatternInfo>,
    reported: FlowTable<(FlowKey, u32), ()>,
    n: Counters,
}

/// The DPI node. All state is allocated when it is built: the engine with its
/// lazy-DFA cache, three pattern sets, the stream tails and the event table.
#[derive(Debug)]
pub struct Dpi {
    engine: Engine,
    found: PatternSet,
    cross: PatternSet,
    in_tail: PatternSet,
    stream: Option<StreamTails>,
    depth: u64,
    inspected: FlowTable<FlowKey, u64>,
    idle_ns: u64,
    out: Reporter,
}

/// A TCP segment's first payload byte's sequence number, and its flags.
fn tcp_seq(p: &Packet) -> Option<(u32, u8)> {
    let seq = nfx_packet::tcp::payload_seq(p.buf.frame(), &p.meta)?;
    Some((seq, p.meta.tcp_flags))
}

impl Dpi {
    /// Builds the node from its config; the pattern file is read within `files` (the
    /// config file's directory and the allow-listed ones).
    pub fn new(name: &str, cfg: &DpiConfig, files: &FileScope) -> Result<Self, DpiError> {
        cfg.validate()?;
        let specs = patterns::load(files, &cfg.patterns)?;
        Self::from_specs(name, cfg, &specs, &cfg.patterns)
    }

    /// Builds the node from already parsed patterns (`path` is named in errors).
    pub fn from_specs(
        name: &str,
        cfg: &DpiConfig,
        specs: &[PatternSpec],
        path: &Path,
    ) -> Result<Self, DpiError> {
        cfg.validate()?;
        let engine =
            Engine::build(specs, cfg.engine).map_err(|BuildError { pattern, problem }| {
                match pattern {
                    Some(i) => DpiError::Line {
                        path: path.to_path_buf(),
                        line: specs[i].line,
                        problem,
                    },
                    None => DpiError::File {
                        path: path.to_path_buf(),
                        problem,
                    },
                }
            })?;
        Self::with_engine(name, cfg, specs, engine)
    }

    /// Builds the node around `engine`, already built over `specs` with `cfg.engine`
    /// (a clone of one built once: the compiled automata are shared).
    pub fn with_engine(
        name: &str,
        cfg: &DpiConfig,
        specs: &[PatternSpec],
        engine: Engine,
    ) -> Result<Self, DpiError> {
        cfg.validate()?;
        if engine.pattern_len() != specs.len() {
            return Err(DpiError::Config {
                field: "patterns",
                problem: format!(
                    "the engine holds {} patterns, the list {}",
                    engine.pattern_len(),
                    specs.len()
                ),
            });
        }
        let n = specs.len();
        Ok(Self {
            engine,
            found: PatternSet::new(n),
            cross: PatternSet::new(n),
            in_tail: PatternSet::new(n),
            stream: (cfg.stream_window > 0)
                .then(|| StreamTails::new(cfg.stream_flows, cfg.stream_window)),
            depth: cfg.depth,
            inspected: FlowTable::with_capacity(if cfg.depth > 0 { cfg.depth_flows } else { 1 }),
            idle_ns: cfg.idle_timeout_ms.saturating_mul(NS_PER_MS),
            out: Reporter {
                name: name.to_string(),
                patterns: specs
                    .iter()
                    .map(|s| PatternInfo {
                        id: s.id.clone(),
                        action: s.action,
                        hits: 0,
                    })
                    .collect(),
                reported: FlowTable::with_capacity(cfg.event_table),
                n: Counters::default(),
            },
        })
    }

    /// Number of patterns loaded.
    pub fn pattern_len(&self) -> usize {
        self.out.patterns.len()
    }

    /// Engine in use (`hybrid`, `regex` or `aho_corasick`).
    pub fn engine_name(&self) -> &'static str {
        self.engine.name()
    }

    /// Counts `len` payload bytes against the flow's inspection depth; true when the
    /// flow was already inspected to its depth (an evicted flow starts over, so
    /// eviction can only cause more inspection, never less).
    fn past_depth(&mut self, key: &FlowKey, len: usize, now_ns: u64) -> bool {
        if self.depth == 0 || len == 0 {
            return false;
        }
        let e = self.inspected.get_or_insert(*key, now_ns, |_| false);
        let seen = &mut self.inspected.slot_mut(e.index).val;
        if *seen >= self.depth {
            return true;
        }
        *seen += len as u64;
        false
    }

    /// Scans one live packet; returns true if it must be dropped.
    fn inspect(&mut self, p: &Packet, ctx: &mut NodeCtx<'_>) -> bool {
        let m = p.meta;
        let Some(payload) = p.buf.frame().get(m.payload..m.ip_end) else {
            return false;
        };
        if self.past_depth(&m.key, payload.len(), ctx.now_ns) {
            self.out.n.packets_past_depth += 1;
            return false;
        }
        clear_set(&mut self.found);
        clear_set(&mut self.cross);
        if !payload.is_empty() {
            self.out.n.packets_scanned += 1;
            self.out.n.bytes_scanned += payload.len() as u64;
            self.engine.scan(payload, 0..payload.len(), &mut self.found);
        }
        let tcp = if m.key.proto == TCP { tcp_seq(p) } else { None };
        if let (Some((seq, _)), Some(stream)) = (tcp, self.stream.as_mut()) {
            if let Some(w) = stream.window(&m.key, seq, payload) {
                self.engine.scan(w.hay, 1..w.span_end, &mut self.cross);
                if !self.cross.is_empty() {
                    clear_set(&mut self.in_tail);
                    self.engine.scan(w.hay, 1..w.tail_len, &mut self.in_tail);
                }
            }
        }
        let mut drop = false;
        // Walking a set visits every pattern slot; most packets match nothing.
        for pid in self.found.iter().take(self.found.len()) {
            drop |= self.out.on_match(pid, p, false, ctx);
        }
        for pid in self.cross.iter().take(self.cross.len()) {
            if !self.found.contains(pid) && !self.in_tail.contains(pid) {
                self.out.n.stream_matches += 1;
                drop |= self.out.on_match(pid, p, true, ctx);
            }
        }
        if let (Some((seq, flags)), Some(stream), false) = (tcp, self.stream.as_mut(), drop) {
            let closing = flags & (TCP_FIN | TCP_RST) != 0;
            stream.update(&m.key, seq, payload, closing, ctx.now_ns);
        }
        drop
    }
}

impl Reporter {
    /// Counts a match and raises its event unless this flow already raised it.
    /// Returns true when the pattern's action is drop.
    fn on_match(
        &mut self,
        pid: PatternID,
        p: &Packet,
        across: bool,
        ctx: &mut NodeCtx<'_>,
    ) -> bool {
        let Some(pat) = self.patterns.get_mut(pid.as_usize()) else {
            return false;
        };
        pat.hits += 1;
        match pat.action {
            Action::Alert => self.n.alert_matches += 1,
            Action::Drop => self.n.drop_matches += 1,
        }
        // Pattern indices are < MAX_PATTERNS, far below u32::MAX.
        let pair = (p.meta.key, pid.as_u32());
        if self
            .reported
            .get_or_insert(pair, ctx.now_ns, |_| false)
            .inserted
        {
            self.n.events += 1;
            ctx.events.push(Event {
                ts_ns: ctx.now_ns,
                node: self.name.clone(),
                kind: "dpi_match",
                flow: p.meta.key,
                detail: serde_json::json!({
                    "pattern_id": pat.id,
                    "action": pat.action.as_str(),
                    "dir": p.dir,
                    "payload_len": p.meta.ip_end.saturating_sub(p.meta.payload),
                    "across_segments": across,
                }),
            });
        } else {
            self.n.events_suppressed += 1;
        }
        pat.action == Action::Drop
    }
}

impl Node for Dpi {
    fn name(&self) -> &str {
        &self.out.name
    }

    fn process(&mut self, pkts: &mut [Packet], ctx: &mut NodeCtx<'_>) {
        for p in pkts.iter_mut().filter(|p| p.alive()) {
            if self.inspect(p, ctx) {
                p.drop = Some(DropReason::DpiDrop);
                self.out.n.dropped += 1;
            }
        }
    }

    fn expire(&mut self, now_ns: u64) {
        if let Some(s) = self.stream.as_mut() {
            s.expire(now_ns, self.idle_ns);
        }
        self.out.reported.expire(now_ns, self.idle_ns);
        self.inspected.expire(now_ns, self.idle_ns);
    }

    fn stats(&self) -> serde_json::Value {
        let out = &self.out;
        let by_action = |a: Action| out.patterns.iter().filter(|p| p.action == a).count();
        let mut top: Vec<&PatternInfo> = out.patterns.iter().filter(|p| p.hits > 0).collect();
        top.sort_by(|a, b| b.hits.cmp(&a.hits).then_with(|| a.id.cmp(&b.id)));
        let top: serde_json::Map<String, serde_json::Value> = top
            .iter()
            .take(10)
            .map(|p| (p.id.clone(), p.hits.into()))
            .collect();
        let stream_mem = self.stream.as_ref().map_or(0, StreamTails::memory_bytes);
        serde_json::json!({
            "engine": self.engine.name(),
            "patterns": out.patterns.len(),
            "patterns_alert": by_action(Action::Alert),
            "patterns_drop": by_action(Action::Drop),
            "patterns_unaccelerated": self.engine.unaccelerated(),
            "packets_scanned": out.n.packets_scanned,
            "bytes_scanned": out.n.bytes_scanned,
            "matches_alert": out.n.alert_matches,
            "matches_drop": out.n.drop_matches,
            "matches_across_segments": out.n.stream_matches,
            "dropped": out.n.dropped,
            "events": out.n.events,
            "events_suppressed": out.n.events_suppressed,
            "depth": self.depth,
            "packets_past_depth": out.n.packets_past_depth,
            "depth_flows": self.inspected.len(),
            "stream_flows": self.stream.as_ref().map_or(0, StreamTails::len),
            "stream_capacity": self.stream.as_ref().map_or(0, StreamTails::capacity),
            "event_pairs": out.reported.len(),
            "event_capacity": out.reported.capacity(),
            "memory_bytes": stream_mem + out.reported.memory_bytes() + self.inspected.memory_bytes(),
            "top_patterns": top,
        })
    }
}
