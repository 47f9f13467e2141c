//! Shared set-up of the VNF fuzz targets: the nodes they drive, built from the same
//! YAML an operator writes, with a small DPI pattern set of every kind (`patterns.txt`),
//! a scratch config directory for the config target, and the invariants the targets
//! check after every run.

use nfx_packet::{parse, Direction, Packet, PacketBuf};
use nfx_vnf::dpi::config::DpiConfig;
use nfx_vnf::dpi::engine::Engine;
use nfx_vnf::dpi::inspector::Dpi;
use nfx_vnf::dpi::patterns::{self, PatternSpec};
use nfx_vnf::{build, EventSink, FileScope, ImportReport, Node, NodeCtx, NodeSpec, SkipReason};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The chain the `chain` target drives, in order: firewall, NAT, DPI, elephant
/// detection. Small tables, so that the fuzzer reaches "table full" paths too.
const CHAIN: [&str; 4] = [
    "firewall: { default: deny, rules: [ {action: allow, proto: tcp, dport: 5201}, {action: allow, proto: udp}, {action: allow, proto: icmp} ], max_flows: 64 }",
    "nat: { snat: { public_ip: 10.200.2.100, port_range: [40000, 40063] }, max_flows: 64 }",
    "dpi: { patterns: patterns.txt, stream_flows: 16, event_table: 64, depth: 4096, depth_flows: 16 }",
    "elephant: { min_bytes: 3000, min_rate_bps: 1000, max_flows: 16 }",
];

/// Firewall and NAT of the `fw_nat` and `state_import` targets, by variant bits:
/// bit 0 `loose`, bit 1 `reverse_new: acl`, bit 2 per-source limits.
fn fw_nat_yaml(variant: u8) -> [String; 2] {
    let loose = variant & 1 != 0;
    let reverse = if variant & 2 != 0 { "acl" } else { "drop" };
    let per_source = if variant & 4 != 0 { 8 } else { 0 };
    [
        format!(
            "firewall: {{ default: deny, rules: [ {{action: deny, proto: tcp, src: 10.0.0.66}}, {{action: allow, proto: tcp, dport: 5201}}, {{action: allow, proto: tcp, src: 10.0.0.0/8, dport: 1-1024}}, {{action: allow, proto: udp}}, {{action: allow, proto: icmp}} ], max_flows: 64, max_flows_per_source: {per_source}, loose: {loose}, reverse_new: {reverse} }}"
        ),
        format!(
            "nat: {{ snat: {{ public_ip: 10.200.2.100, port_range: [40000, 40063] }}, dnat: [ {{proto: tcp, public_port: 40010, to_ip: 10.0.0.9, to_port: 22}}, {{proto: udp, public_port: 53, to_ip: 10.0.0.53}} ], inside_networks: [10.0.0.0/8], max_flows: 64, max_flows_per_source: {per_source} }}"
        ),
    ]
}

/// A chain entry as the dataplane reads it: YAML → JSON value → spec.
pub fn spec(yaml: &str) -> NodeSpec {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("fuzz spec is YAML");
    serde_json::from_value(v).expect("fuzz spec parses")
}

fn built(s: &NodeSpec) -> Box<dyn Node> {
    let files = FileScope::new(env!("CARGO_MANIFEST_DIR"));
    build(s, s.kind(), &files).expect("fuzz spec builds")
}

/// Builds node `i` of [`CHAIN`] (0 firewall, 1 NAT, 2 DPI, 3 elephant).
pub fn node(i: usize) -> Box<dyn Node> {
    static SPECS: OnceLock<Vec<NodeSpec>> = OnceLock::new();
    if i == 2 {
        return dpi();
    }
    built(&SPECS.get_or_init(|| CHAIN.iter().map(|y| spec(y)).collect())[i])
}

/// The DPI node of [`CHAIN`], as `build` makes it, but its engine is compiled once per
/// process and cloned for each node (a clone shares the automata and starts with
/// scratch state of its own): a node costs its tables, not a regex compilation.
fn dpi() -> Box<dyn Node> {
    static PROTO: OnceLock<(DpiConfig, Vec<PatternSpec>, Engine)> = OnceLock::new();
    let (cfg, specs, engine) = PROTO.get_or_init(|| {
        let NodeSpec::Dpi(cfg) = spec(CHAIN[2]) else {
            panic!("CHAIN[2] is the DPI node")
        };
        let files = FileScope::new(env!("CARGO_MANIFEST_DIR"));
        let specs = patterns::load(&files, &cfg.patterns).expect("fuzz patterns");
        let engine = Engine::build(&specs, cfg.engine).expect("fuzz engine");
        (cfg, specs, engine)
    });
    Box::new(Dpi::with_engine("dpi", cfg, specs, engine.clone()).expect("fuzz DPI node"))
}

/// The whole [`CHAIN`], in order.
pub fn chain() -> Vec<Box<dyn Node>> {
    (0..CHAIN.len()).map(node).collect()
}

/// Firewall (`i` = 0) or NAT (`i` = 1) of the given variant (see [`fw_nat_yaml`]).
pub fn fw_nat(variant: u8, i: usize) -> Box<dyn Node> {
    static SPECS: OnceLock<Vec<[NodeSpec; 2]>> = OnceLock::new();
    let specs = SPECS.get_or_init(|| (0..8).map(|v| fw_nat_yaml(v).map(|y| spec(&y))).collect());
    built(&specs[usize::from(variant & 7)][i])
}

/// The node's exported flow state.
pub fn exported(n: &dyn Node) -> (usize, Vec<u8>) {
    let mut out = Vec::new();
    let count = n.export_state(&mut out);
    (count, out)
}

/// The record count a blob's header announces (`None` when it has no header).
pub fn announced(blob: &[u8]) -> Option<usize> {
    let c = blob.get(8..12)?;
    Some(u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
}

/// Checks what `stats()` says of a stateful node's tables: within capacity, and the
/// firewall's per-state counts add up to its flows (a count that drifted once stays
/// wrong, so checking after the run catches it; `stats()` is too slow for every
/// vector).
pub fn check_bounds(n: &dyn Node) {
    let s = n.stats();
    if let Some(flows) = s["flows"].as_u64() {
        assert!(flows <= s["capacity"].as_u64().unwrap(), "{s}");
        let by_state: u64 = s["by_state"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(by_state, flows, "{s}");
        assert!(s["sources"].as_u64().unwrap() <= flows, "{s}");
    }
    if let Some(m) = s["mappings"].as_u64() {
        assert!(m <= s["capacity"].as_u64().unwrap(), "{s}");
        assert!(s["remotes"].as_u64().unwrap() <= m, "{s}");
    }
}

/// Checks that `n`'s exported state imports into `fresh` (same configuration) whole:
/// every record but those whose last millisecond was running out.
pub fn check_reimport(n: &dyn Node, fresh: &mut dyn Node) {
    let (count, blob) = exported(n);
    let r: ImportReport = fresh.import_report(&blob).expect("an export imports");
    assert_eq!(
        r.imported + r.skipped(SkipReason::Expired),
        count,
        "{} re-imports its export: {:?}",
        n.name(),
        r
    );
    assert_eq!(r.skipped_total(), r.skipped(SkipReason::Expired), "{r:?}");
}

/// Feeds `data` as frames through `nodes`: per frame a control byte (bit 0 reverse
/// direction, bits 1..7 time step in 10 ms) and a length byte, then the frame. As in
/// the dataplane, a vector holds frames of one direction (up to `vector` of them) and
/// runs through the nodes in order (Forward) or in reverse order (Reverse).
pub fn drive(nodes: &mut [Box<dyn Node>], data: &[u8], vector: usize) {
    let mut sink = EventSink::default();
    let mut now_ns = 1_000_000_000u64;
    let mut rest = data;
    let mut pkts: Vec<Packet> = Vec::new();
    let mut run = |nodes: &mut [Box<dyn Node>], pkts: &mut Vec<Packet>, now_ns: u64| {
        let reverse = pkts.first().is_some_and(|p| p.dir == Direction::Reverse);
        let mut step = |n: &mut Box<dyn Node>| {
            let mut ctx = NodeCtx {
                now_ns,
                events: &mut sink,
            };
            n.process(pkts, &mut ctx);
            n.expire(now_ns);
        };
        if reverse {
            nodes.iter_mut().rev().for_each(&mut step);
        } else {
            nodes.iter_mut().for_each(&mut step);
        }
        sink.drain();
        pkts.clear();
    };
    while let [ctl, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (frame, next) = tail.split_at(len);
        rest = next;
        now_ns += u64::from(ctl >> 1) * 10_000_000;
        let dir = if ctl & 1 == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        if pkts.first().is_some_and(|p| p.dir != dir) {
            run(nodes, &mut pkts, now_ns);
        }
        if let Ok(meta) = parse(frame) {
            let mut p = Packet::new(PacketBuf::from_frame(frame), dir);
            p.meta = meta;
            pkts.push(p);
        }
        if !pkts.is_empty() && (pkts.len() == vector || rest.len() < 2) {
            run(nodes, &mut pkts, now_ns);
        }
    }
}

/// A marker placed in every file of the config target's scratch directory: no error
/// may ever show it.
pub const CANARY: &str = "NFXCANARY";

/// The config target's scratch directory: `conf/` (the config directory) holds a
/// valid `rules.yaml` and `patterns.txt`, files holding the canary (`canary.yaml`, a
/// rule list with a bad rule; `canary.txt`, a pattern file with a bad line;
/// `passwd`, neither) and `out.yaml`, a symlink to `../outside.yaml` (canary too).
pub fn scratch_scope() -> &'static FileScope {
    static SCOPE: OnceLock<FileScope> = OnceLock::new();
    SCOPE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("nfx-vnf-fuzz-{}", std::process::id()));
        let conf = root.join("conf");
        std::fs::create_dir_all(&conf).expect("scratch directory");
        let write = |p: PathBuf, text: String| std::fs::write(p, text).expect("scratch file");
        write(
            conf.join("rules.yaml"),
            "- {action: allow, proto: tcp, dport: 80}\n- {action: deny, proto: udp}\n".into(),
        );
        let pats =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("patterns.txt"))
                .expect("fuzz patterns");
        write(conf.join("patterns.txt"), pats);
        write(
            conf.join("canary.yaml"),
            format!("- {{action: allow, proto: tcp, dst: '{CANARY}'}}\n- {{action: {CANARY}}}\n"),
        );
        write(
            conf.join("canary.txt"),
            format!("{CANARY}\talert\tregex\t({CANARY}\n"),
        );
        write(
            conf.join("passwd"),
            format!("root:x:0:0:{CANARY}:/root:/bin/sh\n"),
        );
        write(
            root.join("outside.yaml"),
            format!("- {{action: {CANARY}}}\n"),
        );
        let _ = std::os::unix::fs::symlink(root.join("outside.yaml"), conf.join("out.yaml"));
        FileScope::new(conf)
    })
}
