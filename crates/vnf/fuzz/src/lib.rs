//! Shared set-up of the VNF fuzz targets: the nodes they drive, built from the same
//! YAML an operator writes, with a small DPI pattern set of every kind (`patterns.txt`).

use nfx_vnf::{build, Node, NodeSpec};
use std::path::Path;

/// The chain the targets drive, in order: firewall, NAT, DPI, elephant detection.
/// Small tables, so that the fuzzer reaches "table full" paths too.
const CHAIN: [&str; 4] = [
    "firewall: { default: deny, rules: [ {action: allow, proto: tcp, dport: 5201}, {action: allow, proto: udp}, {action: allow, proto: icmp} ], max_flows: 64 }",
    "nat: { snat: { public_ip: 10.200.2.100, port_range: [40000, 40063] }, max_flows: 64 }",
    "dpi: { patterns: patterns.txt, stream_flows: 16, event_table: 64, depth: 4096, depth_flows: 16 }",
    "elephant: { min_bytes: 3000, min_rate_bps: 1000, max_flows: 16 }",
];

/// Builds node `i` of [`CHAIN`] (0 firewall, 1 NAT, 2 DPI, 3 elephant).
pub fn node(i: usize) -> Box<dyn Node> {
    // As the dataplane reads a chain entry: YAML → JSON value → spec.
    let v: serde_json::Value = serde_yaml_ng::from_str(CHAIN[i]).expect("fuzz chain spec is YAML");
    let spec: NodeSpec = serde_json::from_value(v).expect("fuzz chain spec parses");
    build(&spec, spec.kind(), Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("fuzz chain spec builds")
}

/// The whole chain, in order.
pub fn chain() -> Vec<Box<dyn Node>> {
    (0..CHAIN.len()).map(node).collect()
}

/// The node's exported flow state.
pub fn exported(n: &dyn Node) -> (usize, Vec<u8>) {
    let mut out = Vec::new();
    let count = n.export_state(&mut out);
    (count, out)
}
