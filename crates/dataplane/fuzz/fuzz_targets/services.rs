//! Fuzz target: the services form of the run config and of `reconfigure` comes from
//! operators and from any process that reaches a worker's control socket. Whatever the
//! bytes, parsing gives a service set or an error naming the file or the field, never a
//! panic; a set that is accepted (from either form) is installed in a graph and
//! classifies any frames without a panic: every frame either runs through one service or
//! is a counted `no_service` drop, and a frame that leaves carries the egress MACs of its
//! direction.
//!
//! Input: text (YAML run config or JSON `reconfigure` request), a NUL byte, then frames,
//! each a length byte (its top bit: from the outside port) and that many bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_dataplane::builtin::{L2Rewrite, OutputNode};
use nfx_dataplane::graph::{Graph, GraphPlan};
use nfx_dataplane::services::Topology;
use nfx_dataplane::{config, ClassifierConfig, RunConfig};
use nfx_proto::request::ReconfigureForm;
use nfx_proto::Request;
use nfx_packet::{Direction, Packet, PacketBuf};
use nfx_vnf::{Node, NodeCtx};

/// An instance that lets every packet through.
struct Pass(String);

impl Node for Pass {
    fn name(&self) -> &str {
        &self.0
    }

    fn process(&mut self, _pkts: &mut [Packet], _ctx: &mut NodeCtx<'_>) {}
}

/// The egress rewrites: Forward frames leave with these MACs on the outside port.
const FORWARD: L2Rewrite = L2Rewrite {
    dst: [2, 0, 0, 0, 0, 2],
    src: [2, 0, 0, 0, 0, 1],
};
/// Reverse frames leave with these on the inside port.
const REVERSE: L2Rewrite = L2Rewrite {
    dst: [2, 0, 0, 0, 0, 4],
    src: [2, 0, 0, 0, 0, 3],
};

fn graph(topo: &Topology) -> Graph {
    let output = OutputNode {
        forward: FORWARD,
        reverse: REVERSE,
    };
    let mut g = Graph::new(Vec::new(), output, None).with_classifier(ClassifierConfig {
        flows: 16,
        timeout_s: 1,
    });
    let plan = GraphPlan {
        instances: topo
            .instances
            .iter()
            .map(|i| {
                (
                    i.id.clone(),
                    Some(Box::new(Pass(i.id.clone())) as Box<dyn Node>),
                )
            })
            .collect(),
        services: topo
            .services
            .iter()
            .map(|s| (s.id.clone(), s.chain.clone()))
            .collect(),
        selectors: Some(topo.services.iter().map(|s| s.selector).collect()),
    };
    g.replace(plan).expect("a checked topology installs");
    g
}

fn run(topo: &Topology, mut bytes: &[u8]) {
    let mut g = graph(topo);
    let mut now = 1u64;
    while let Some((&head, rest)) = bytes.split_first() {
        let n = usize::from(head & 0x7f).min(rest.len());
        let dir = if head & 0x80 == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        let mut pkts = vec![Packet::new(PacketBuf::from_frame(&rest[..n]), dir)];
        if g.run(&mut pkts, dir, now) == 1 {
            let p = &pkts[0];
            assert!(p.alive(), "a dropped frame counted as leaving");
            assert!(usize::from(p.service) < topo.services.len());
            let l2 = match dir {
                Direction::Forward => FORWARD,
                Direction::Reverse => REVERSE,
            };
            let f = p.buf.frame();
            assert_eq!(
                (&f[..6], &f[6..12]),
                (&l2.dst[..], &l2.src[..]),
                "egress MACs"
            );
        }
        bytes = &rest[n..];
        now += 300_000_000;
        g.housekeeping(now);
    }
    let classified = g.node_stats()[1].packets;
    let dropped = g.node_stats()[1].drops["no_service"];
    let served: u64 = g
        .service_stats()
        .iter()
        .map(|s| s.forward.rx_packets + s.reverse.rx_packets)
        .sum();
    assert_eq!(
        classified,
        served + dropped,
        "a frame neither served nor dropped"
    );
}

fuzz_target!(|data: &[u8]| {
    let (head, frames) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(head) else {
        return;
    };
    match RunConfig::parse(text, "fuzz.yaml").map(|cfg| config::topology(&cfg)) {
        Ok(Ok(topo)) => run(&topo, frames),
        Ok(Err(e)) => assert!(!e.problem.is_empty()),
        Err(e) => assert!(
            e.to_string().starts_with("fuzz.yaml"),
            "error without the file: {e}"
        ),
    }
    let reconfigure = match Request::parse(text) {
        Ok(Request::Reconfigure(r)) => r,
        Ok(_) => return,
        Err(e) => return assert!(!e.is_empty()),
    };
    match reconfigure.topology() {
        Ok(ReconfigureForm::Services(set)) => match Topology::from_services(&set) {
            Ok(topo) => run(&topo, frames),
            Err(e) => assert!(!e.problem.is_empty()),
        },
        Ok(ReconfigureForm::Chain(_)) => {}
        Err(e) => assert!(e.starts_with("reconfigure"), "{e}"),
    }
});
