//! Graph tests of services: every frame visits exactly the instances of its service,
//! in that service's order (replies: backwards), whatever the other services and
//! however instances are shared; unmatched frames are dropped as `no_service`; shared
//! instances keep one state; per-service counters add up.

use crate::builtin::{L2Rewrite, OutputNode};
use crate::classify::{Cidr, Classifier, PortRange, Selector, Tuple};
use crate::config::ClassifierConfig;
use crate::graph::{Graph, GraphPlan};
use crate::testkit::{seq_of, trace_of, udp_frame_between, TagNode};
use nfx_packet::{Direction, PacketBuf, PacketVector};
use nfx_vnf::Node;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Instances `t1` … `t5`, tagging their number.
const INSTANCES: u8 = 5;

fn output() -> OutputNode {
    let l2 = L2Rewrite {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 0x20],
    };
    OutputNode {
        forward: l2,
        reverse: l2,
    }
}

/// A graph whose service `k` runs the instances `chains[k]` (tag ids) and selects by
/// `selectors[k]`.
fn graph(chains: &[Vec<u8>], selectors: &[Selector]) -> Graph {
    let mut g = Graph::new(Vec::new(), output(), None).with_classifier(ClassifierConfig::default());
    let plan = GraphPlan {
        instances: (1..=INSTANCES)
            .map(|i| {
                let node: Box<dyn Node> = Box::new(TagNode::new(&format!("t{i}"), i));
                (format!("t{i}"), Some(node))
            })
            .collect(),
        services: chains
            .iter()
            .enumerate()
            .map(|(k, c)| {
                (
                    format!("s{k}"),
                    c.iter().map(|&i| usize::from(i) - 1).collect(),
                )
            })
            .collect(),
        selectors: Some(selectors.to_vec()),
    };
    g.replace(plan).unwrap();
    g
}

/// A flow: source host (10.0.0.x), source port, destination port.
type Flow = (u8, u16, u16);

fn vector(frames: impl Iterator<Item = Vec<u8>>, dir: Direction) -> PacketVector {
    let mut v = PacketVector::new(256, PacketBuf::MTU_CAPACITY);
    let mut n = 0;
    for (slot, f) in v.slots_mut().iter_mut().zip(frames) {
        slot.buf.storage_mut()[..f.len()].copy_from_slice(&f);
        slot.buf.set_len(f.len());
        n += 1;
    }
    v.set_len(n, dir, false);
    v
}

const SERVER: [u8; 4] = [10, 9, 0, 1];

fn forward_frame(f: Flow, seq: u32) -> Vec<u8> {
    udp_frame_between([10, 0, 0, f.0], SERVER, f.1, f.2, seq)
}

fn reply_frame(f: Flow, seq: u32) -> Vec<u8> {
    udp_frame_between(SERVER, [10, 0, 0, f.0], f.2, f.1, seq)
}

fn tagged(g: &Graph) -> BTreeMap<String, u64> {
    g.node_stats()
        .into_iter()
        .filter(|n| n.name.starts_with('t'))
        .map(|n| (n.name, n.stats["tagged"].as_u64().unwrap()))
        .collect()
}

/// Runs `flows[i]` as frame `seq = i` forward, then a reply per forwarded frame, and
/// checks every frame's path against the reference classifier.
fn check_isolation(chains: &[Vec<u8>], selectors: &[Selector], flows: &[Flow]) {
    let mut g = graph(chains, selectors);
    let reference = Classifier::new(selectors.to_vec());
    let service_of = |f: &Flow| {
        reference.first_match(&Tuple {
            src: u32::from_be_bytes([10, 0, 0, f.0]),
            dst: u32::from_be_bytes(SERVER),
            proto: 17,
            sport: f.1,
            dport: f.2,
        })
    };
    let mut v = vector(
        flows
            .iter()
            .enumerate()
            .map(|(i, f)| forward_frame(*f, i as u32)),
        Direction::Forward,
    );
    let live = g.run(v.packets_mut(), Direction::Forward, 1);
    let mut want: Vec<u32> = (0..flows.len() as u32)
        .filter(|&i| service_of(&flows[i as usize]).is_some())
        .collect();
    let mut got: Vec<u32> = v.packets()[..live]
        .iter()
        .map(|p| seq_of(p.buf.frame()))
        .collect();
    // Within a service, arrival order.
    for k in 0..chains.len() {
        let of_k: Vec<u32> = got
            .iter()
            .copied()
            .filter(|&s| service_of(&flows[s as usize]) == Some(k))
            .collect();
        assert!(
            of_k.windows(2).all(|w| w[0] < w[1]),
            "service {k} reordered: {of_k:?}"
        );
    }
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "forwarded frames");
    for p in &v.packets()[..live] {
        let seq = seq_of(p.buf.frame());
        let k = service_of(&flows[seq as usize]).unwrap();
        assert_eq!(
            trace_of(p.buf.frame()),
            chains[k],
            "frame {seq} of service {k}"
        );
    }
    let unmatched = (flows.len() - want.len()) as u64;
    let st = g.node_stats();
    assert_eq!(st[1].name, "classify");
    assert_eq!(st[1].drops["no_service"], unmatched);
    // Replies go back through their flow's service, backwards.
    let replies: Vec<u32> = want.clone();
    let mut v = vector(
        replies.iter().map(|&i| reply_frame(flows[i as usize], i)),
        Direction::Reverse,
    );
    let live = g.run(v.packets_mut(), Direction::Reverse, 2);
    assert_eq!(live, replies.len(), "replies dropped");
    for p in &v.packets()[..live] {
        let seq = seq_of(p.buf.frame());
        let k = service_of(&flows[seq as usize]).unwrap();
        let mut back = chains[k].clone();
        back.reverse();
        assert_eq!(trace_of(p.buf.frame()), back, "reply {seq} of service {k}");
    }
    // One state per instance, fed by every service it is in.
    let per_service: Vec<u64> = (0..chains.len())
        .map(|k| {
            want.iter()
                .filter(|&&i| service_of(&flows[i as usize]) == Some(k))
                .count() as u64
        })
        .collect();
    for (name, n) in tagged(&g) {
        let id: u8 = name[1..].parse().unwrap();
        let expect: u64 = chains
            .iter()
            .zip(&per_service)
            .filter(|(c, _)| c.contains(&id))
            .map(|(_, n)| 2 * n)
            .sum();
        assert_eq!(n, expect, "{name}");
    }
    for (s, n) in g.service_stats().iter().zip(&per_service) {
        assert_eq!(
            (s.forward.rx_packets, s.reverse.rx_packets),
            (*n, *n),
            "{}",
            s.id
        );
        assert_eq!(s.forward.tx_packets, *n);
    }
}

fn arb_selector() -> impl Strategy<Value = Selector> {
    (
        prop::option::of((0u32..256, prop::sample::select(vec![0u32, 24, 28, 30, 32]))),
        prop::option::of((0u16..8, 0u16..8)),
        prop::option::of(prop::sample::select(vec![6u8, 17])),
    )
        .prop_map(|(src, dport, proto)| Selector {
            src: src.map(|(a, l)| {
                let mask = u32::MAX.checked_shl(32 - l).unwrap_or(0);
                Cidr::V4 {
                    net: (0x0a00_0000 | a) & mask,
                    mask,
                }
            }),
            dport: dport.map(|(a, b)| PortRange {
                lo: a.min(b),
                hi: a.max(b),
            }),
            proto,
            ..Selector::default()
        })
}

/// A chain: distinct instances in random order.
fn arb_chain() -> impl Strategy<Value = Vec<u8>> {
    Just((1..=INSTANCES).collect::<Vec<u8>>())
        .prop_shuffle()
        .prop_flat_map(|all| (0..=all.len()).prop_map(move |n| all[..n].to_vec()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn a_frame_visits_exactly_its_services_instances_in_its_order(
        services in prop::collection::vec((arb_chain(), arb_selector()), 0..5),
        flows in prop::collection::vec((0u8..=255, 1000u16..1004, 0u16..8), 1..200),
    ) {
        let (chains, selectors): (Vec<_>, Vec<_>) = services.into_iter().unzip();
        check_isolation(&chains, &selectors, &flows);
    }
}

#[test]
fn a_shared_instance_runs_at_its_place_in_each_order() {
    let a = Selector {
        src: Some(Cidr::parse("10.0.0.0/25").unwrap()),
        ..Selector::default()
    };
    let flows: Vec<Flow> = (0..120u8).map(|i| (i * 2, 1000, 1)).collect();
    check_isolation(&[vec![1, 2], vec![2, 1]], &[a, Selector::default()], &flows);
}

#[test]
fn an_empty_service_set_forwards_nothing() {
    let mut g = graph(&[], &[]);
    let mut v = vector(
        (0..10).map(|i| forward_frame((1, 1000, 1), i)),
        Direction::Forward,
    );
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 0);
    let mut v = vector(
        (0..4).map(|i| reply_frame((1, 1000, 1), i)),
        Direction::Reverse,
    );
    assert_eq!(g.run(v.packets_mut(), Direction::Reverse, 1), 0);
    assert_eq!(g.node_stats()[1].drops["no_service"], 14);
    assert!(tagged(&g).values().all(|n| *n == 0));
}

fn vnf(id: &str, spec: serde_json::Value) -> Box<dyn Node> {
    crate::chain::build_node(id, &spec, &std::path::Path::new(".").into()).unwrap()
}

#[test]
fn replacing_services_keeps_flows_and_counters_of_those_that_remain() {
    let web = Selector {
        dport: Some(PortRange { lo: 1, hi: 1 }),
        ..Selector::default()
    };
    let nat = vnf(
        "nat",
        serde_json::json!({"nat": {"snat": {"public_ip": "10.9.9.100"}}}),
    );
    let mut g = Graph::new(Vec::new(), output(), None);
    g.replace(GraphPlan {
        instances: vec![
            ("t1".into(), Some(Box::new(TagNode::new("t1", 1)))),
            ("nat".into(), Some(nat)),
            ("t3".into(), Some(Box::new(TagNode::new("t3", 3)))),
        ],
        services: vec![("s0".into(), vec![0, 1])],
        selectors: Some(vec![web]),
    })
    .unwrap();
    let mut v = vector(
        (0..5).map(|i| forward_frame((1, 1000, 1), i)),
        Direction::Forward,
    );
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 5);
    let public = v.packets()[0].meta.key;
    assert_eq!(
        public.src,
        u32::from_be_bytes([10, 9, 9, 100]),
        "translated"
    );
    // Add a service in front; the first keeps its id, instances and flow.
    let dns = Selector {
        dport: Some(PortRange { lo: 2, hi: 2 }),
        ..Selector::default()
    };
    let keep = |id: &str| (id.to_string(), None);
    let (old, carried) = g
        .replace(GraphPlan {
            instances: vec![keep("t1"), keep("nat"), keep("t3")],
            services: vec![("dns".into(), vec![2]), ("s0".into(), vec![0, 1])],
            selectors: Some(vec![dns, web]),
        })
        .unwrap();
    assert_eq!((old.len(), carried), (0, 0));
    // The replies, addressed to the NAT's public port, still find their service, now
    // at index 1, and come back translated.
    let reply = |i| {
        udp_frame_between(
            SERVER,
            public.src.to_be_bytes(),
            public.dport,
            public.sport,
            i,
        )
    };
    let mut v = vector((0..3).map(reply), Direction::Reverse);
    assert_eq!(g.run(v.packets_mut(), Direction::Reverse, 2), 3);
    assert_eq!(trace_of(v.packets()[0].buf.frame()), [1]);
    assert_eq!(
        v.packets()[0].meta.key.dst,
        u32::from_be_bytes([10, 0, 0, 1])
    );
    let mut v = vector(
        (0..2).map(|i| forward_frame((1, 1000, 2), i)),
        Direction::Forward,
    );
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 3), 2);
    assert_eq!(trace_of(v.packets()[0].buf.frame()), [3]);
    let st = g.service_stats();
    assert_eq!(st[0].id, "dns");
    assert_eq!(st[0].forward.rx_packets, 2);
    assert_eq!(st[1].id, "s0");
    assert_eq!((st[1].forward.rx_packets, st[1].reverse.rx_packets), (5, 3));
    assert_eq!(st[1].chain, ["t1", "nat"]);
    assert_eq!(g.node_stats()[1].stats["reverse_by_flow"], 3);
    // Without the service, its flow is forgotten: the replies are nobody's.
    g.replace(GraphPlan {
        instances: vec![keep("t1"), keep("nat"), keep("t3")],
        services: vec![("dns".into(), vec![2])],
        selectors: Some(vec![dns]),
    })
    .unwrap();
    let mut v = vector((3..5).map(reply), Direction::Reverse);
    assert_eq!(g.run(v.packets_mut(), Direction::Reverse, 4), 0);
}

#[test]
fn a_service_counts_the_drops_of_its_instances() {
    let mut dropper = TagNode::new("t1", 1);
    dropper.drop_every = Some(2);
    let mut g = Graph::new(Vec::new(), output(), None);
    g.replace(GraphPlan {
        instances: vec![("t1".into(), Some(Box::new(dropper)))],
        services: vec![("a".into(), vec![0])],
        selectors: Some(vec![Selector::default()]),
    })
    .unwrap();
    let mut v = vector(
        (0..10).map(|i| forward_frame((1, 1000, 1), i)),
        Direction::Forward,
    );
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 5);
    let s = &g.service_stats()[0];
    assert_eq!(s.drops["acl_deny"], 5);
    assert_eq!((s.forward.rx_packets, s.forward.tx_packets), (10, 5));
    let len = forward_frame((1, 1000, 1), 0).len() as u64;
    assert_eq!(
        (s.forward.rx_bytes, s.forward.tx_bytes),
        (10 * len, 5 * len)
    );
}

#[test]
fn a_fast_path_replay_runs_through_its_service_and_counts_there() {
    let fw = || {
        crate::chain::build_node(
            "fw",
            &serde_json::json!({"firewall": {"default": "allow"}}),
            &std::path::Path::new(".").into(),
        )
        .unwrap()
    };
    let only_1 = Selector {
        dport: Some(PortRange { lo: 1, hi: 1 }),
        ..Selector::default()
    };
    let mut g = Graph::new(Vec::new(), output(), None);
    g.replace(GraphPlan {
        instances: vec![
            ("fw".into(), Some(fw())),
            ("t1".into(), Some(Box::new(TagNode::new("t1", 1)))),
        ],
        services: vec![("fast".into(), vec![0]), ("slow".into(), vec![0, 1])],
        selectors: Some(vec![only_1, Selector::default()]),
    })
    .unwrap();
    // The fast mark survives only the service whose instances are all offloadable.
    let mut v = vector(
        [
            forward_frame((1, 1000, 1), 0),
            forward_frame((1, 1000, 2), 1),
        ]
        .into_iter(),
        Direction::Forward,
    );
    for p in v.packets_mut() {
        p.fast = true;
    }
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 2);
    let fast: Vec<(u32, bool)> = v
        .packets()
        .iter()
        .map(|p| (seq_of(p.buf.frame()), p.fast))
        .collect();
    assert_eq!(fast, [(0, true), (1, false)]);
    // A replay of what the fast path forwarded counts in its service, as many packets.
    let mut p = nfx_packet::Packet::new(
        PacketBuf::from_frame(&forward_frame((1, 1000, 1), 2)),
        Direction::Forward,
    );
    p.replay = Some(nfx_packet::Replay {
        packets: 10,
        bytes: 5000,
    });
    assert!(g.replay(&mut p, 2));
    let s = &g.service_stats()[0];
    assert_eq!(
        (s.forward.rx_packets, s.forward.rx_bytes),
        (11, 5000 + p.buf.len() as u64)
    );
    assert_eq!(s.forward.tx_packets, 11);
    assert_eq!(g.service_stats()[1].forward.rx_packets, 1);
    let classify = &g.node_stats()[1];
    assert_eq!(classify.packets, 12);
    // A replay that no service takes any more is refused (the entry would be revoked).
    g.replace(GraphPlan {
        instances: vec![("fw".into(), None), ("t1".into(), None)],
        services: vec![("slow".into(), vec![0, 1])],
        selectors: Some(vec![Selector {
            dport: Some(PortRange { lo: 2, hi: 2 }),
            ..Selector::default()
        }]),
    })
    .unwrap();
    let mut p = nfx_packet::Packet::new(
        PacketBuf::from_frame(&forward_frame((1, 1000, 1), 3)),
        Direction::Forward,
    );
    p.replay = Some(nfx_packet::Replay {
        packets: 3,
        bytes: 300,
    });
    assert!(!g.replay(&mut p, 3));
}
