//! The stats document (`{"cmd":"stats"}`, `nfx stats --json`, final output of `nfx run`).
//! The same structs serialize on the worker side and deserialize in clients
//! ([`crate::Client::stats`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Counters of the fast path, in the stats document (`fast_path`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FastPathStats {
    /// Table size (flows, one direction each).
    pub capacity: u64,
    /// Kernel memory the table takes.
    pub memory_bytes: u64,
    /// Entries installed now (pending or armed).
    pub entries: u64,
    /// Entries armed now.
    pub active: u64,
    /// Entries installed since start.
    pub installed: u64,
    /// Entries armed since start.
    pub armed: u64,
    /// Removed on SYN/FIN/RST.
    pub removed_closed: u64,
    /// Removed after `IDLE` (10 s) (or half the chain's shortest flow timeout) without traffic.
    pub removed_idle: u64,
    /// Removed because the chain dropped the replay (its verdict changed).
    pub removed_revoked: u64,
    /// Removed before a reconfiguration, state export or drain.
    pub removed_flushed: u64,
    /// Flows not installed because the table was full.
    pub full: u64,
    /// Installs the kernel refused.
    pub errors: u64,
    /// Packets the fast path forwarded (GSO segments counted one by one), as synced.
    pub packets: u64,
    /// IP bytes the fast path forwarded, as synced.
    pub bytes: u64,
}

impl FastPathStats {
    /// Adds another worker's counters.
    pub fn add(&mut self, o: &FastPathStats) {
        self.capacity += o.capacity;
        self.memory_bytes += o.memory_bytes;
        self.entries += o.entries;
        self.active += o.active;
        self.installed += o.installed;
        self.armed += o.armed;
        self.removed_closed += o.removed_closed;
        self.removed_idle += o.removed_idle;
        self.removed_revoked += o.removed_revoked;
        self.removed_flushed += o.removed_flushed;
        self.full += o.full;
        self.errors += o.errors;
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// Every counter of one running dataplane instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Instance name.
    pub name: String,
    /// Seconds since the worker started.
    pub uptime_s: f64,
    /// `vector` or `scalar`.
    pub mode: String,
    /// `busy`, `interrupt` or `adaptive`.
    pub poll: String,
    /// True while the worker holds (runs nothing: a fanout standby, or drained).
    #[serde(default)]
    pub held: bool,
    /// Per worker thread.
    pub workers: Vec<WorkerStats>,
    /// Per port (`inside`, `outside`).
    pub ports: Vec<PortStats>,
    /// Per graph node: `parse`, `classify` (with services), the VNF instances, `output`.
    pub nodes: Vec<NodeStats>,
    /// Per service, in classification order (absent for the `chain:` form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceStats>,
    /// Events raised so far, by kind.
    pub events: BTreeMap<String, u64>,
    /// The table tier's counters, when the instance runs a fast path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPathStats>,
    /// Control-socket connections refused because the peer is neither this user, root,
    /// nor in the configured `control_group`.
    #[serde(default)]
    pub control_rejected: u64,
}

/// One worker thread.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerStats {
    /// Worker index.
    pub id: usize,
    /// CPU utilisation (user + system, from the kernel) over the last ~1 s, in % of a core.
    pub cpu_pct: f64,
    /// CPU seconds (user + system) used since start, for utilisation over any interval.
    pub cpu_s: f64,
    /// Frames received on both ports.
    pub rx_packets: u64,
    /// Bytes received on both ports.
    pub rx_bytes: u64,
    /// Frames transmitted on both ports.
    pub tx_packets: u64,
    /// Bytes transmitted on both ports.
    pub tx_bytes: u64,
    /// Non-empty vectors processed.
    pub vectors: u64,
    /// Mean packets per non-empty vector.
    pub mean_vector: f64,
    /// Kernel thread id of the worker (for CPU accounting, affinity and cgroups).
    #[serde(default)]
    pub tid: u32,
    /// The worker's poll mode (`busy`, `interrupt`, `adaptive`); it can change live.
    #[serde(default)]
    pub poll: String,
    /// Each packet's measured time in the worker over the last one to two seconds;
    /// absent when the ports carry no kernel receive time (`io: mmsg`), nothing was
    /// received yet, or the run config turned it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyStats>,
}

/// Packets' measured time in a worker: from the kernel's receive stamp (taken when the
/// frame arrived, so time waiting in the ring while the worker was throttled or asleep
/// counts) to the end of the send of the vector that carried them (dropped frames: to
/// the end of their vector's processing). Quantiles come from a log-bucket histogram:
/// at least the true value and within 12.5 % of it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyStats {
    /// Seconds the figures cover (the current period and the whole one before it).
    pub window_s: f64,
    /// Packets measured in the window.
    pub packets: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Longest, µs.
    pub max_us: f64,
    /// Frames since start whose receive stamp was missing or not on the worker's clock
    /// (not measured).
    #[serde(default)]
    pub unstamped: u64,
}

impl LatencyStats {
    /// The figures of several workers of one instance or device: packets and
    /// unstamped summed, the worst p50, p99 and maximum (quantiles of separate
    /// histograms do not combine exactly; the worst is what an SLA must hold for).
    /// `None` when no part has figures.
    pub fn worst<'a>(parts: impl IntoIterator<Item = &'a LatencyStats>) -> Option<Self> {
        parts.into_iter().fold(None, |acc: Option<Self>, l| {
            Some(match acc {
                None => *l,
                Some(a) => Self {
                    window_s: a.window_s.max(l.window_s),
                    packets: a.packets + l.packets,
                    p50_us: a.p50_us.max(l.p50_us),
                    p99_us: a.p99_us.max(l.p99_us),
                    max_us: a.max_us.max(l.max_us),
                    unstamped: a.unstamped + l.unstamped,
                },
            })
        })
    }
}

/// One port.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PortStats {
    /// `inside` or `outside`.
    pub name: String,
    /// Interface name.
    pub iface: String,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Sends repeated because the kernel queue was full.
    pub tx_retries: u64,
    /// Frames the kernel dropped because the socket's receive buffer was full.
    #[serde(default)]
    pub socket_drops: u64,
    /// Frames taken off the port while the worker holds, waiting for its release.
    #[serde(default)]
    pub held_frames: u64,
    /// Drops by the port itself, by reason name (every reason listed).
    pub drops: BTreeMap<String, u64>,
}

/// One graph node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeStats {
    /// Node name (`parse`, `firewall`, `nat-2`, `output`, ...).
    pub name: String,
    /// Packets that entered the node.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// TSC cycles spent in the node per packet.
    pub cycles_per_packet: f64,
    /// Drops decided by this node, by reason name (every reason listed).
    pub drops: BTreeMap<String, u64>,
    /// Node-specific gauges.
    pub stats: serde_json::Value,
}

/// One service of a worker that runs services.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ServiceStats {
    /// Service id.
    pub id: String,
    /// Its chain: instance ids in Forward order.
    pub chain: Vec<String>,
    /// Frames from the inside port.
    pub forward: ServiceTraffic,
    /// Frames from the outside port (the chain in reverse).
    pub reverse: ServiceTraffic,
    /// Drops by the service's instances, by reason name (every reason listed). Drops
    /// before the service is known (`parse`, `classify`) and after (`output`) are the
    /// nodes' only.
    pub drops: BTreeMap<String, u64>,
}

/// A service's traffic in one direction.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServiceTraffic {
    /// Packets that entered the service's chain.
    pub rx_packets: u64,
    /// Bytes of those packets.
    pub rx_bytes: u64,
    /// Packets that left the chain alive (towards `output`).
    pub tx_packets: u64,
    /// Bytes of those packets.
    pub tx_bytes: u64,
}

impl ServiceTraffic {
    /// Adds another worker's counters.
    pub fn add(&mut self, o: &ServiceTraffic) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
    }
}

impl Stats {
    /// Total drops of node `name` (all reasons), 0 if there is no such node.
    pub fn node_drops(&self, name: &str) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.name == name)
            .flat_map(|n| n.drops.values())
            .sum()
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeStats> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The service called `id`.
    pub fn service(&self, id: &str) -> Option<&ServiceStats> {
        self.services.iter().find(|s| s.id == id)
    }

    /// The port called `name` (`inside`, `outside`).
    pub fn port(&self, name: &str) -> Option<&PortStats> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// Drops for `reason` at node `node` (0 if there is no such node).
    pub fn node_drop(&self, node: &str, reason: &str) -> u64 {
        self.node(node)
            .and_then(|n| n.drops.get(reason).copied())
            .unwrap_or(0)
    }

    /// Drops for `reason` summed over every node.
    pub fn total_drop(&self, reason: &str) -> u64 {
        self.nodes.iter().filter_map(|n| n.drops.get(reason)).sum()
    }

    /// Events of kind `kind` raised so far (`dpi_match`, `elephant`).
    pub fn event(&self, kind: &str) -> u64 {
        self.events.get(kind).copied().unwrap_or(0)
    }

    /// CPU seconds and received frames summed over every worker.
    pub fn worker_totals(&self) -> (f64, u64) {
        (
            self.workers.iter().map(|w| w.cpu_s).sum(),
            self.workers.iter().map(|w| w.rx_packets).sum(),
        )
    }
}

impl Stats {
    /// One document for an instance that runs several workers: `workers` lists every
    /// worker, ports, nodes (matched by name) and events are summed, cycles per packet
    /// is the packet-weighted mean, and node gauges are summed field by field (numbers)
    /// or taken from the first worker (anything else); services are summed by id.
    /// `held` is true if any worker holds.
    pub fn merge(parts: Vec<Stats>) -> Stats {
        let mut it = parts.into_iter();
        let Some(mut all) = it.next() else {
            return Stats::default();
        };
        for s in it {
            all.uptime_s = all.uptime_s.max(s.uptime_s);
            all.held |= s.held;
            all.workers.extend(s.workers);
            for p in s.ports {
                match all.ports.iter_mut().find(|q| q.name == p.name) {
                    Some(q) => {
                        q.rx_packets += p.rx_packets;
                        q.rx_bytes += p.rx_bytes;
                        q.tx_packets += p.tx_packets;
                        q.tx_bytes += p.tx_bytes;
                        q.tx_retries += p.tx_retries;
                        q.socket_drops += p.socket_drops;
                        q.held_frames += p.held_frames;
                        add_map(&mut q.drops, &p.drops);
                    }
                    None => all.ports.push(p),
                }
            }
            merge_nodes(&mut all.nodes, s.nodes);
            for v in s.services {
                match all.services.iter_mut().find(|w| w.id == v.id) {
                    Some(w) => {
                        w.forward.add(&v.forward);
                        w.reverse.add(&v.reverse);
                        add_map(&mut w.drops, &v.drops);
                    }
                    None => all.services.push(v),
                }
            }
            add_map(&mut all.events, &s.events);
            match (&mut all.fast_path, &s.fast_path) {
                (Some(a), Some(b)) => a.add(b),
                (None, Some(b)) => all.fast_path = Some(b.clone()),
                _ => {}
            }
        }
        all
    }
}

/// Adds the node counters of another worker of the same instance to `all`, matched by
/// name (see [`Stats::merge`]); nodes `all` does not have are appended.
pub fn merge_nodes(all: &mut Vec<NodeStats>, more: Vec<NodeStats>) {
    for n in more {
        match all.iter_mut().find(|m| m.name == n.name) {
            Some(m) => {
                let total = m.packets + n.packets;
                if total > 0 {
                    m.cycles_per_packet = (m.cycles_per_packet * m.packets as f64
                        + n.cycles_per_packet * n.packets as f64)
                        / total as f64;
                }
                m.packets = total;
                m.bytes += n.bytes;
                add_map(&mut m.drops, &n.drops);
                add_json(&mut m.stats, &n.stats);
            }
            None => all.push(n),
        }
    }
}

fn add_map(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// Adds the numbers of `from` into `into`, field by field; other values stay as they are.
fn add_json(into: &mut serde_json::Value, from: &serde_json::Value) {
    use serde_json::Value;
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(x) => add_json(x, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            *a = match (a.as_u64(), b.as_u64()) {
                (Some(x), Some(y)) => x.saturating_add(y).into(),
                _ => match serde_json::Number::from_f64(
                    a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0),
                ) {
                    Some(n) => n,
                    None => return,
                },
            };
        }
        _ => {}
    }
}

fn gbps(bytes_now: u64, bytes_before: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    format!(
        "{:.3}",
        bytes_now.saturating_sub(bytes_before) as f64 * 8.0 / secs / 1e9
    )
}

fn nonzero_drops(drops: &BTreeMap<String, u64>) -> String {
    let d: Vec<String> = drops
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if d.is_empty() {
        "-".into()
    } else {
        d.join(" ")
    }
}

/// Renders the readable table of `nfx stats` (and the demo's live view). With `prev`
/// (an earlier sample of the same instance) rates are shown over the interval between.
pub fn render_table(cur: &Stats, prev: Option<&Stats>) -> String {
    use std::fmt::Write;
    let secs = prev.map_or(0.0, |p| cur.uptime_s - p.uptime_s);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}  mode {}  poll {}  up {:.1} s",
        cur.name, cur.mode, cur.poll, cur.uptime_s
    );
    let _ = writeln!(
        o,
        "{:<8} {:>7} {:>14} {:>14} {:>10}",
        "worker", "cpu%", "rx_pkts", "tx_pkts", "mean_vec"
    );
    for w in &cur.workers {
        let _ = writeln!(
            o,
            "{:<8} {:>7.1} {:>14} {:>14} {:>10.1}",
            w.id, w.cpu_pct, w.rx_packets, w.tx_packets, w.mean_vector
        );
    }
    let _ = writeln!(
        o,
        "{:<8} {:<10} {:>14} {:>10} {:>14} {:>10}  drops",
        "port", "iface", "rx_pkts", "rx_Gbit/s", "tx_pkts", "tx_Gbit/s"
    );
    for p in &cur.ports {
        let before = prev.and_then(|s| s.ports.iter().find(|q| q.name == p.name));
        let _ = writeln!(
            o,
            "{:<8} {:<10} {:>14} {:>10} {:>14} {:>10}  {}",
            p.name,
            p.iface,
            p.rx_packets,
            before.map_or("-".into(), |b| gbps(p.rx_bytes, b.rx_bytes, secs)),
            p.tx_packets,
            before.map_or("-".into(), |b| gbps(p.tx_bytes, b.tx_bytes, secs)),
            nonzero_drops(&p.drops)
        );
    }
    let _ = writeln!(
        o,
        "{:<12} {:>14} {:>10} {:>10}  drops",
        "node", "packets", "Gbit/s", "cyc/pkt"
    );
    for n in &cur.nodes {
        let before = prev.and_then(|s| s.node(&n.name));
        let _ = writeln!(
            o,
            "{:<12} {:>14} {:>10} {:>10.0}  {}",
            n.name,
            n.packets,
            before.map_or("-".into(), |b| gbps(n.bytes, b.bytes, secs)),
            n.cycles_per_packet,
            nonzero_drops(&n.drops)
        );
    }
    if !cur.services.is_empty() {
        let _ = writeln!(
            o,
            "{:<12} {:>14} {:>14} {:>14} {:>14}  drops",
            "service", "fwd_in", "fwd_out", "rev_in", "rev_out"
        );
    }
    for s in &cur.services {
        let _ = writeln!(
            o,
            "{:<12} {:>14} {:>14} {:>14} {:>14}  {}",
            s.id,
            s.forward.rx_packets,
            s.forward.tx_packets,
            s.reverse.rx_packets,
            s.reverse.tx_packets,
            nonzero_drops(&s.drops)
        );
    }
    let ev: Vec<String> = cur.events.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        o,
        "events: {}",
        if ev.is_empty() {
            "-".into()
        } else {
            ev.join(" ")
        }
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A by-name drop map with every listed reason.
    fn drops(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
        list.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn table_shows_rates_and_nonzero_drops() {
        let node = |packets, bytes, drops: BTreeMap<String, u64>| NodeStats {
            name: "firewall".into(),
            packets,
            bytes,
            cycles_per_packet: 120.0,
            drops,
            stats: serde_json::Value::Null,
        };
        let before = Stats {
            name: "edge".into(),
            uptime_s: 1.0,
            nodes: vec![node(10, 0, drops(&[("acl_deny", 0), ("tx_error", 0)]))],
            ..Stats::default()
        };
        let mut now = before.clone();
        now.uptime_s = 2.0;
        now.nodes = vec![node(
            20,
            125_000_000,
            drops(&[("acl_deny", 4), ("tx_error", 0)]),
        )];
        now.workers = vec![WorkerStats {
            cpu_pct: 42.0,
            ..WorkerStats::default()
        }];
        let t = render_table(&now, Some(&before));
        let row = t.lines().find(|l| l.starts_with("firewall")).unwrap();
        assert!(row.contains("1.000"), "{row}");
        assert!(row.contains("acl_deny=4"), "{row}");
        assert!(!row.contains("tx_error"), "{row}");
        assert!(t.contains("42.0"), "{t}");
        let once = render_table(&now, None);
        assert!(once
            .lines()
            .find(|l| l.starts_with("firewall"))
            .unwrap()
            .contains(" - "));
    }

    #[test]
    fn merge_sums_counters_and_lists_every_worker() {
        let part = |id: usize, pkts: u64, cycles: f64| {
            let drops = drops(&[("acl_deny", id as u64 + 1), ("tx_error", 0)]);
            Stats {
                name: "edge".into(),
                uptime_s: 1.0 + id as f64,
                workers: vec![WorkerStats {
                    id,
                    rx_packets: pkts,
                    ..WorkerStats::default()
                }],
                ports: vec![PortStats {
                    name: "inside".into(),
                    rx_packets: pkts,
                    held_frames: pkts / 100,
                    drops: drops.clone(),
                    ..PortStats::default()
                }],
                nodes: vec![NodeStats {
                    name: "nat".into(),
                    packets: pkts,
                    cycles_per_packet: cycles,
                    drops: drops.clone(),
                    stats: serde_json::json!({"mappings": pkts, "note": "x"}),
                    ..NodeStats::default()
                }],
                events: [("elephant".to_string(), 1)].into(),
                ..Stats::default()
            }
        };
        let m = Stats::merge(vec![part(0, 100, 10.0), part(1, 300, 30.0)]);
        assert_eq!(m.workers.iter().map(|w| w.id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(m.uptime_s, 2.0);
        assert_eq!(m.ports.len(), 1);
        assert_eq!(m.ports[0].rx_packets, 400);
        assert_eq!(m.ports[0].held_frames, 4);
        assert_eq!(m.ports[0].drops["acl_deny"], 3);
        let nat = m.node("nat").unwrap();
        assert_eq!(nat.packets, 400);
        assert_eq!(nat.cycles_per_packet, 25.0);
        assert_eq!(nat.stats["mappings"], 400);
        assert_eq!(nat.stats["note"], "x");
        assert_eq!(m.node_drops("nat"), 3);
        assert_eq!(m.events["elephant"], 2);
        assert_eq!(Stats::merge(vec![]), Stats::default());
    }

    #[test]
    fn worst_latency_sums_packets_and_keeps_the_worst_quantiles() {
        let a = LatencyStats {
            window_s: 1.0,
            packets: 10,
            p50_us: 5.0,
            p99_us: 50.0,
            max_us: 60.0,
            unstamped: 1,
        };
        let b = LatencyStats {
            window_s: 1.5,
            packets: 0,
            p50_us: 7.0,
            p99_us: 9.0,
            max_us: 90.0,
            unstamped: 0,
        };
        let w = LatencyStats::worst([&a, &b]).unwrap();
        assert_eq!((w.packets, w.unstamped, w.window_s), (10, 1, 1.5));
        assert_eq!((w.p50_us, w.p99_us, w.max_us), (7.0, 50.0, 90.0));
        assert_eq!(LatencyStats::worst([]), None);
    }

    #[test]
    fn agreed_json_shape_round_trips() {
        let text = r#"{"name":"edge","uptime_s":1.2,"mode":"vector","poll":"adaptive",
 "workers":[{"id":0,"cpu_pct":37.5,"cpu_s":0.4,"rx_packets":0,"rx_bytes":0,"tx_packets":0,"tx_bytes":0,"vectors":0,"mean_vector":0.0}],
 "ports":[{"name":"inside","iface":"to-src","rx_packets":0,"rx_bytes":0,"tx_packets":0,"tx_bytes":0,"tx_retries":0,"drops":{"tx_error":0}}],
 "nodes":[{"name":"firewall","packets":0,"bytes":0,"cycles_per_packet":0.0,"drops":{"acl_deny":2},"stats":{}}],
 "events":{"dpi_match":0,"elephant":0}}"#;
        let s: Stats = serde_json::from_str(text).unwrap();
        assert_eq!(s.workers[0].cpu_pct, 37.5);
        assert_eq!(s.node_drops("firewall"), 2);
        assert_eq!(s.node("firewall").unwrap().drops["acl_deny"], 2);
        assert_eq!(s.node_drop("firewall", "acl_deny"), 2);
        assert_eq!(s.node_drop("nat", "acl_deny"), 0);
        assert_eq!(s.total_drop("acl_deny"), 2);
        assert_eq!(s.port("inside").unwrap().iface, "to-src");
        assert!(s.port("outside").is_none());
        assert_eq!(s.event("dpi_match"), 0);
        assert_eq!(s.event("nothing"), 0);
        assert_eq!(s.worker_totals(), (0.4, 0));
        let again: Stats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }
}
