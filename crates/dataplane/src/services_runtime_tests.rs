//! Worker tests of services over in-memory ports: a `services:` run config, per-service
//! stats, closed by default, reconfiguration of the service set under load without
//! loss or reordering, the `services` form of `reconfigure` on the control protocol,
//! and state export/import by instance id.

use crate::config::RunConfig;
use crate::runtime::Dataplane;
use crate::services::ServiceSet;
use crate::testkit::{
    feed, seq_of, start_on_mem_ports, trace_of, udp_frame_between, wait_tx, MemPort, WireEnd,
};
use serde_json::json;
use std::time::{Duration, Instant};

const SERVICES: &str = "
instances:
  t1: {function: tag, config: {id: 1}}
  t2: {function: tag, config: {id: 2}}
services:
  - {id: a, selector: {src: 10.0.0.0/24}, chain: [t1, t2]}
  - {id: b, selector: {src: 10.0.1.0/24, proto: udp, dport: 2000-2001}, chain: [t2]}
";

fn start(what: &str) -> (Dataplane, WireEnd, WireEnd) {
    let text = format!(
        "name: s\nports:\n  inside: {{iface: in0, peer_mac: '02:00:00:00:00:01'}}\n  outside: {{iface: out0, peer_mac: '02:00:00:00:00:02'}}\nvector: 64\npoll: adaptive\n{what}"
    );
    start_on_mem_ports(&RunConfig::parse(&text, "s.yaml").unwrap())
}

/// Stats once `classify` has seen `n` frames (or after 10 s).
fn classified(dp: &Dataplane, n: u64) -> crate::Stats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = dp.controller().stats().unwrap();
        if st.node("classify").is_some_and(|c| c.packets >= n) || Instant::now() >= deadline {
            return st;
        }
        std::thread::yield_now();
    }
}

fn from(host: [u8; 4], dport: u16, seq: u32) -> Vec<u8> {
    udp_frame_between(host, [10, 0, 9, 1], 1000, dport, seq)
}

const A: [u8; 4] = [10, 0, 0, 5];
const B: [u8; 4] = [10, 0, 1, 5];
const NOBODY: [u8; 4] = [10, 0, 2, 5];

#[test]
fn each_service_runs_its_chain_and_unmatched_frames_are_dropped() {
    let (dp, inside, outside) = start(SERVICES);
    let frames = (0..30).map(|i| match i % 3 {
        0 => from(A, 2000, i),
        1 => from(B, 2000, i),
        _ => from(NOBODY, 2000, i),
    });
    MemPort::inject(&inside.0, &inside.1, frames);
    let st = classified(&dp, 30);
    let out = wait_tx(&outside.0, 20);
    assert_eq!(out.len(), 20);
    for f in &out {
        let want: &[u8] = if seq_of(f).is_multiple_of(3) {
            &[1, 2]
        } else {
            &[2]
        };
        assert_eq!(trace_of(f), want, "frame {}", seq_of(f));
    }
    // Service b's selector wants ports 2000-2001: 3000 is nobody's.
    MemPort::inject(&inside.0, &inside.1, [from(B, 3000, 99)]);
    // Replies: a's and b's go back through their chains backwards.
    MemPort::inject(
        &outside.0,
        &outside.1,
        [
            udp_frame_between([10, 0, 9, 1], A, 2000, 1000, 100),
            udp_frame_between([10, 0, 9, 1], B, 2000, 1000, 101),
        ],
    );
    let back = wait_tx(&inside.0, 2);
    assert_eq!(back.len(), 2);
    assert_eq!(trace_of(&back[0]), [2, 1]);
    assert_eq!(trace_of(&back[1]), [2]);
    let st2 = classified(&dp, 33);
    assert_eq!(st.node("classify").unwrap().drops["no_service"], 10);
    assert_eq!(st2.node("classify").unwrap().drops["no_service"], 11);
    let names: Vec<&str> = st2.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["parse", "classify", "t1", "t2", "output"]);
    let a = st2.service("a").unwrap();
    assert_eq!(a.chain, ["t1", "t2"]);
    assert_eq!((a.forward.rx_packets, a.forward.tx_packets), (10, 10));
    assert_eq!((a.reverse.rx_packets, a.reverse.tx_packets), (1, 1));
    let b = st2.service("b").unwrap();
    assert_eq!((b.forward.rx_packets, b.reverse.rx_packets), (10, 1));
    assert_eq!(
        st2.node("t2").unwrap().stats["tagged"],
        22,
        "one state for both services"
    );
    let text = crate::stats::render_table(&st2, None);
    assert!(text.lines().any(|l| l.starts_with("a ")), "{text}");
}

#[test]
fn an_empty_service_set_is_closed() {
    let (dp, inside, outside) = start("services: []\n");
    MemPort::inject(&inside.0, &inside.1, (0..10).map(|i| from(A, 1, i)));
    MemPort::inject(&outside.0, &outside.1, (0..5).map(|i| from(A, 1, i)));
    let st = classified(&dp, 15);
    assert_eq!(st.node("classify").unwrap().drops["no_service"], 15);
    assert!(outside.0.lock().unwrap().tx.is_empty());
    assert!(inside.0.lock().unwrap().tx.is_empty());
    assert!(st.services.is_empty());
}

fn set(v: serde_json::Value) -> ServiceSet {
    serde_json::from_value(v).unwrap()
}

fn a_and_maybe_b(with_b: bool) -> ServiceSet {
    let mut services =
        vec![json!({"id": "a", "selector": {"src": "10.0.0.0/24"}, "chain": ["t1", "t2"]})];
    if with_b {
        services.insert(
            0,
            json!({"id": "b", "selector": {"src": "10.0.1.0/24"}, "chain": ["t3", "t1"]}),
        );
    }
    let mut instances = json!({
        "t1": {"function": "tag", "config": {"id": 1}},
        "t2": {"function": "tag", "config": {"id": 2}},
    });
    if with_b {
        instances["t3"] = json!({"function": "tag", "config": {"id": 3}});
    }
    set(json!({"services": services, "instances": instances}))
}

#[test]
fn adding_and_removing_a_service_under_load_loses_nothing_of_the_other() {
    let (dp, inside, outside) = start(SERVICES);
    let ctl = dp.controller();
    const N: u32 = 20_000;
    let feeder = feed(inside.clone(), N, |s| from(A, 1, s));
    let mut swaps = 0;
    while outside.0.lock().unwrap().tx.len() < N as usize / 2 {
        let r = ctl
            .reconfigure_services(&a_and_maybe_b(swaps % 2 == 0))
            .unwrap();
        let want: &[&str] = if swaps % 2 == 0 { &["b", "a"] } else { &["a"] };
        assert_eq!(r.services, want);
        swaps += 1;
    }
    feeder.join().unwrap();
    let out = wait_tx(&outside.0, N as usize);
    assert_eq!(
        out.len(),
        N as usize,
        "frames of `a` lost across {swaps} swaps"
    );
    for (i, f) in out.iter().enumerate() {
        assert_eq!(seq_of(f), i as u32, "reordered at {i}");
        assert_eq!(trace_of(f), [1, 2], "frame {i} left service a's chain");
    }
    assert!(swaps > 0);
    // The added service carries its own traffic once installed.
    ctl.reconfigure_services(&a_and_maybe_b(true)).unwrap();
    MemPort::inject(&inside.0, &inside.1, [from(B, 1, 7)]);
    let out = wait_tx(&outside.0, N as usize + 1);
    assert_eq!(trace_of(out.last().unwrap()), [3, 1]);
    let st = ctl.stats().unwrap();
    assert_eq!(st.service("a").unwrap().forward.rx_packets, u64::from(N));
    assert_eq!(
        st.node("t1").unwrap().stats["tagged"],
        u64::from(N) + 1,
        "t1 kept its state through every swap"
    );
}

#[test]
fn reconfigure_with_services_over_the_control_protocol() {
    let (dp, inside, outside) = start("chain: [{tag: {id: 1}}]\n");
    let ctl = dp.controller();
    let ask = |v: serde_json::Value| -> serde_json::Value {
        serde_json::from_str(&ctl.handle_line(&v.to_string())).unwrap()
    };
    let mut req = serde_json::to_value(a_and_maybe_b(true)).unwrap();
    req["cmd"] = json!("reconfigure");
    let r = ask(req.clone());
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["nodes"], json!(["t1", "t2", "t3"]));
    assert_eq!(r["services"], json!(["b", "a"]));
    let built: Vec<&str> = r["built"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(built, ["t1", "t2", "t3"], "{r}");
    assert!(r.get("stats").is_none(), "no whole stats document: {r}");
    MemPort::inject(&inside.0, &inside.1, [from(B, 1, 0), from(NOBODY, 1, 1)]);
    let out = wait_tx(&outside.0, 1);
    assert_eq!(trace_of(&out[0]), [3, 1]);
    for (bad, needle) in [
        (
            json!({"cmd": "reconfigure", "services": [{"id": "x", "chain": ["t9"]}]}),
            "services[0].chain[0]",
        ),
        (
            json!({"cmd": "reconfigure", "services": [{"id": "x"}, {"id": "x"}]}),
            "services[1].id",
        ),
        (
            json!({"cmd": "reconfigure", "services": [], "chain": []}),
            "not both",
        ),
        (
            json!({"cmd": "reconfigure", "services": [{"id": "x", "selector": {"port": 1}}]}),
            "services[0].selector",
        ),
        (
            json!({"cmd": "reconfigure", "instances": {"t1": {"function": "tag", "config": {}}}}),
            "instances.t1.config.id",
        ),
    ] {
        let v = ask(bad.clone());
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{bad} gave {v}"));
        assert!(e.contains(needle), "{bad}: {e}");
    }
    // Refused sets changed nothing.
    MemPort::inject(&inside.0, &inside.1, [from(B, 1, 2)]);
    assert_eq!(trace_of(&wait_tx(&outside.0, 2)[1]), [3, 1]);
    // Back to a chain: one implicit service, no classifier.
    let r = ask(json!({"cmd": "reconfigure", "chain": [{"tag": {"id": 4}}]}));
    assert_eq!(r["nodes"], json!(["tag"]));
    assert!(r["stats"].get("services").is_none(), "{r}");
    MemPort::inject(&inside.0, &inside.1, [from(NOBODY, 1, 3)]);
    assert_eq!(trace_of(&wait_tx(&outside.0, 3)[2]), [4]);
}

#[test]
fn state_moves_by_instance_id() {
    let (dp, inside, outside) = start(SERVICES);
    MemPort::inject(&inside.0, &inside.1, (0..6).map(|i| from(A, 1, i)));
    assert_eq!(wait_tx(&outside.0, 6).len(), 6);
    let blob = dp.controller().export_state("t1").unwrap();
    let (other, _, _) = start(SERVICES);
    assert_eq!(other.controller().import_state("t1", blob).unwrap(), 1);
    let st = other.controller().stats().unwrap();
    assert_eq!(st.node("t1").unwrap().stats["tagged"], 6);
    let e = dp.controller().export_state("tag").unwrap_err().to_string();
    assert!(e.contains("tag"), "{e}");
}
