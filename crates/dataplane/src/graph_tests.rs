//! Graph tests with synthetic packets and test nodes: order in both directions, drops
//! counted against the deciding node, counters, events, chain replacement.

use crate::builtin::{L2Rewrite, OutputNode};
use crate::graph::{Graph, GraphPlan};
use crate::testkit::{seq_of, trace_of, udp_frame, TagNode};
use nfx_packet::{Direction, DropReason, Packet, PacketBuf, PacketVector};
use nfx_vnf::Node;
use std::io::Write;
use std::sync::{Arc, Mutex};

fn output() -> OutputNode {
    OutputNode {
        forward: L2Rewrite {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 0x20],
        },
        reverse: L2Rewrite {
            dst: [2, 0, 0, 0, 0, 1],
            src: [2, 0, 0, 0, 0, 0x10],
        },
    }
}

fn tags(ids: &[u8]) -> Vec<Box<dyn Node>> {
    ids.iter()
        .map(|&i| Box::new(TagNode::new(&format!("tag{i}"), i)) as Box<dyn Node>)
        .collect()
}

fn vector_of(seqs: impl Iterator<Item = u32>, dir: Direction) -> PacketVector {
    let mut v = PacketVector::new(256, PacketBuf::MTU_CAPACITY);
    let mut n = 0;
    for (slot, seq) in v.slots_mut().iter_mut().zip(seqs) {
        let f = udp_frame(seq);
        slot.buf.storage_mut()[..f.len()].copy_from_slice(&f);
        slot.buf.set_len(f.len());
        n += 1;
    }
    v.set_len(n, dir, false);
    v
}

#[test]
fn forward_runs_chain_in_order_and_reverse_backwards() {
    let mut g = Graph::new(tags(&[1, 2, 3]), output(), None);
    let mut v = vector_of(0..10, Direction::Forward);
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 10);
    for p in v.packets() {
        assert_eq!(trace_of(p.buf.frame()), vec![1, 2, 3]);
        assert_eq!(&p.buf.frame()[..6], &[2, 0, 0, 0, 0, 2]);
    }
    let mut v = vector_of(0..10, Direction::Reverse);
    assert_eq!(g.run(v.packets_mut(), Direction::Reverse, 2), 10);
    for p in v.packets() {
        assert_eq!(trace_of(p.buf.frame()), vec![3, 2, 1]);
        assert_eq!(&p.buf.frame()[..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&p.buf.frame()[6..12], &[2, 0, 0, 0, 0, 0x10]);
    }
}

#[test]
fn drops_count_against_the_deciding_node_and_survivors_keep_order() {
    let mut middle = TagNode::new("tag2", 2);
    middle.drop_every = Some(3);
    let chain: Vec<Box<dyn Node>> = vec![
        Box::new(TagNode::new("tag1", 1)),
        Box::new(middle),
        Box::new(TagNode::new("tag3", 3)),
    ];
    let mut g = Graph::new(chain, output(), None);
    let mut v = vector_of(0..100, Direction::Forward);
    let live = g.run(v.packets_mut(), Direction::Forward, 1);
    let dropped = (0..100).filter(|s| s % 3 == 0).count();
    assert_eq!(live, 100 - dropped);
    let seqs: Vec<u32> = v.packets()[..live]
        .iter()
        .map(|p| seq_of(p.buf.frame()))
        .collect();
    let want: Vec<u32> = (0..100).filter(|s| s % 3 != 0).collect();
    assert_eq!(seqs, want, "survivors reordered");
    let st = g.node_stats();
    let names: Vec<&str> = st.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["parse", "tag1", "tag2", "tag3", "output"]);
    assert_eq!(st[1].packets, 100);
    assert_eq!(st[2].packets, 100);
    assert_eq!(st[2].drops["acl_deny"], dropped as u64);
    assert_eq!(st[1].drops.values().sum::<u64>(), 0);
    assert_eq!(st[3].packets, (100 - dropped) as u64);
    assert_eq!(st[4].packets, (100 - dropped) as u64);
    assert_eq!(st[1].bytes, 100 * udp_frame(0).len() as u64);
    assert!(st[1].cycles_per_packet > 0.0);
    assert_eq!(st[2].stats["id"], 2);
}

#[test]
fn parse_drops_malformed_frames_before_the_chain() {
    let mut g = Graph::new(tags(&[1]), output(), None);
    let mut v = vector_of(0..4, Direction::Forward);
    v.packets_mut()[1].buf.set_len(20);
    v.packets_mut()[2].buf.frame_mut()[12] = 0x86;
    let live = g.run(v.packets_mut(), Direction::Forward, 1);
    assert_eq!(live, 2);
    let st = g.node_stats();
    assert_eq!(st[0].drops["truncated"], 1);
    assert_eq!(st[0].drops["non_ip"], 1);
    assert_eq!(st[1].packets, 2);
}

#[test]
fn ttl_expiry_is_counted_at_output() {
    let mut g = Graph::new(vec![], output(), None);
    let mut v = vector_of(0..2, Direction::Forward);
    let f = v.packets_mut()[0].buf.frame_mut();
    f[22] = 1;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = nfx_packet::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let live = g.run(v.packets_mut(), Direction::Forward, 1);
    assert_eq!(live, 1);
    let st = g.node_stats();
    assert_eq!(st.last().unwrap().drops["ttl_expired"], 1, "{st:?}");
}

#[test]
fn tx_failures_count_against_output() {
    let mut g = Graph::new(vec![], output(), None);
    let mut p = Packet::new(PacketBuf::from_frame(&udp_frame(1)), Direction::Forward);
    p.drop = Some(DropReason::TxError);
    g.count_tx_drops(&[p]);
    assert_eq!(g.node_stats().last().unwrap().drops["tx_error"], 1);
}

/// A writer whose bytes the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn events_are_counted_and_written_as_json_lines() {
    let mut n = TagNode::new("tag1", 1);
    n.event_every = Some(5);
    let out = Shared::default();
    let mut g = Graph::new(vec![Box::new(n)], output(), Some(Box::new(out.clone())));
    let mut v = vector_of(0..20, Direction::Forward);
    g.run(v.packets_mut(), Direction::Forward, 77);
    g.housekeeping(78);
    let counts = g.event_counts();
    assert_eq!(counts["elephant"], 4);
    assert_eq!(counts["dpi_match"], 0);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1]["kind"], "elephant");
    assert_eq!(lines[1]["node"], "tag1");
    assert_eq!(lines[1]["ts_ns"], 77);
    assert_eq!(lines[1]["detail"]["seq"], 5);
    assert_eq!(lines[1]["flow"]["src"], "10.0.0.1");
}

#[test]
fn replacing_the_chain_keeps_counters_of_same_named_nodes() {
    let mut g = Graph::new(tags(&[1, 2]), output(), None);
    let mut v = vector_of(0..10, Direction::Forward);
    g.run(v.packets_mut(), Direction::Forward, 1);
    let (old, carried) = g.replace(GraphPlan::chain(tags(&[2, 3]))).unwrap();
    assert_eq!(old.len(), 2);
    assert_eq!(carried, 1, "only tag2 exists on both sides");
    assert_eq!(g.vnf_names(), ["tag2", "tag3"]);
    let mut v = vector_of(0..10, Direction::Forward);
    g.run(v.packets_mut(), Direction::Forward, 2);
    let st = g.node_stats();
    assert_eq!(st[1].name, "tag2");
    assert_eq!(st[1].packets, 20);
    assert_eq!(st[2].packets, 10);
    assert_eq!(
        st[1].stats["tagged"], 20,
        "tag2's state was not carried over"
    );
    assert_eq!(st[2].stats["tagged"], 10);
    assert_eq!(trace_of(v.packets()[0].buf.frame()), vec![2, 3]);
    assert!(g.vnf_mut("tag3").is_some());
    assert!(g.vnf_mut("tag1").is_none());
}

#[test]
fn kept_instances_stay_as_they_are_and_the_rest_is_replaced() {
    let mut g = Graph::new(tags(&[1, 2]), output(), None);
    let mut v = vector_of(0..10, Direction::Forward);
    g.run(v.packets_mut(), Direction::Forward, 1);
    let mut rebuilt = tags(&[2, 3]).into_iter();
    let plan = GraphPlan {
        instances: vec![
            ("tag1".into(), None),
            ("tag2".into(), rebuilt.next()),
            ("tag3".into(), rebuilt.next()),
        ],
        services: vec![("chain".into(), vec![0, 1, 2])],
        selectors: None,
    };
    let (old, carried) = g.replace(plan).unwrap();
    assert_eq!(old.len(), 1, "only tag2 was replaced");
    assert_eq!(carried, 1);
    assert_eq!(g.vnf_names(), ["tag1", "tag2", "tag3"]);
    let mut v = vector_of(0..10, Direction::Forward);
    g.run(v.packets_mut(), Direction::Forward, 2);
    let st = g.node_stats();
    assert_eq!(st[1].stats["tagged"], 20, "tag1 kept its state");
    assert_eq!(st[2].stats["tagged"], 20);
    assert_eq!(st[3].stats["tagged"], 10);
    assert_eq!(trace_of(v.packets()[0].buf.frame()), vec![1, 2, 3]);
    // A plan that keeps what does not run, or is inconsistent, changes nothing.
    for bad in [
        GraphPlan {
            instances: vec![("tag9".into(), None)],
            services: vec![("chain".into(), vec![0])],
            selectors: None,
        },
        GraphPlan {
            instances: vec![("tag1".into(), None)],
            services: vec![("chain".into(), vec![1])],
            selectors: None,
        },
        GraphPlan {
            instances: vec![],
            services: vec![],
            selectors: None,
        },
        GraphPlan {
            instances: vec![],
            services: vec![("a".into(), vec![])],
            selectors: Some(vec![]),
        },
    ] {
        assert!(g.replace(bad).is_err());
        assert_eq!(g.vnf_names(), ["tag1", "tag2", "tag3"]);
    }
}

fn vnf(spec: serde_json::Value) -> Box<dyn Node> {
    crate::chain::build_chain(&[spec], std::path::Path::new("."))
        .unwrap()
        .remove(0)
}

#[test]
fn fast_marks_survive_only_offloadable_chains() {
    let fw = || vnf(serde_json::json!({"firewall": {"default": "allow"}}));
    let mut g = Graph::new(vec![fw()], output(), None);
    let mut v = vector_of(0..4, Direction::Forward);
    for p in v.packets_mut() {
        p.fast = true;
    }
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 4);
    assert!(v.packets().iter().all(|p| p.fast), "UDP through a firewall");
    let mut g = Graph::new(vec![fw(), tags(&[1]).remove(0)], output(), None);
    let mut v = vector_of(0..4, Direction::Forward);
    for p in v.packets_mut() {
        p.fast = true;
    }
    assert_eq!(g.run(v.packets_mut(), Direction::Forward, 1), 4);
    assert!(
        v.packets().iter().all(|p| !p.fast),
        "a node that is not offloadable keeps every flow in userspace"
    );
}

#[test]
fn a_replay_counts_its_packets_and_bytes_at_every_node_it_reaches() {
    let mut g = Graph::new(
        vec![
            vnf(serde_json::json!({"firewall": {"default": "allow"}})),
            vnf(serde_json::json!({"elephant": {"min_bytes": 4000, "min_rate_bps": 0}})),
        ],
        output(),
        None,
    );
    let mut p = Packet::new(PacketBuf::from_frame(&udp_frame(1)), Direction::Forward);
    p.replay = Some(nfx_packet::Replay {
        packets: 10,
        bytes: 5000,
    });
    assert!(g.replay(&mut p, 1));
    for n in g.node_stats() {
        assert_eq!((n.packets, n.bytes), (10, 5000), "{}", n.name);
    }
    assert_eq!(
        g.event_counts()["elephant"],
        1,
        "the replayed bytes made an elephant"
    );
    let mut deny = Graph::new(
        vec![vnf(serde_json::json!({"firewall": {"default": "deny"}}))],
        output(),
        None,
    );
    let mut p = Packet::new(PacketBuf::from_frame(&udp_frame(1)), Direction::Forward);
    p.replay = Some(nfx_packet::Replay {
        packets: 3,
        bytes: 300,
    });
    assert!(!deny.replay(&mut p, 1), "the chain's verdict changed");
}

#[test]
fn the_chain_reports_its_shortest_flow_timeout() {
    let g = Graph::new(tags(&[1]), output(), None);
    assert_eq!(g.flow_timeout_ns(), None);
    let g = Graph::new(
        vec![
            vnf(serde_json::json!({"firewall": {"default": "allow", "timeouts": {"udp": 7}}})),
            vnf(
                serde_json::json!({"nat": {"snat": {"public_ip": "10.0.0.1"}, "timeouts": {"udp_stream": 5}}}),
            ),
        ],
        output(),
        None,
    );
    assert_eq!(g.flow_timeout_ns(), Some(5_000_000_000));
}
