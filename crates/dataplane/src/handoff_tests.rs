//! Tests of the handoff commands (hold, release, drain, steer) over in-memory ports:
//! held frames are kept (not run) and come out complete and in order on release, a drain
//! forwards everything queued and then holds, a standby starts held, and bad requests
//! get clear errors without changing the worker's state.

use crate::config::RunConfig;
use crate::runtime::Dataplane;
use crate::testkit::{seq_of, start_on_mem_ports, udp_frame, wait_tx, MemPort, WireEnd};
use std::time::{Duration, Instant};

fn start(extra: &str) -> (Dataplane, WireEnd, WireEnd) {
    let text = format!(
        "name: h\nports:\n  inside: {{iface: in0, peer_mac: '02:00:00:00:00:01'}}\n  outside: {{iface: out0, peer_mac: '02:00:00:00:00:02'}}\npoll: interrupt\nchain: [{{tag: {{id: 1}}}}]\n{extra}"
    );
    start_on_mem_ports(&RunConfig::parse(&text, "h.yaml").unwrap())
}

/// Two answered commands: the worker went through at least one full loop turn (which
/// reads the ports unless held) between them.
fn loop_turn(dp: &Dataplane) {
    dp.controller().stats().unwrap();
    dp.controller().stats().unwrap();
}

/// Stats once the inside port's held frames reach `n` (or after 10 s).
fn held_frames_reach(dp: &Dataplane, n: u64) -> crate::stats::Stats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = dp.controller().stats().unwrap();
        if st.ports[0].held_frames >= n || Instant::now() >= deadline {
            return st;
        }
        std::thread::yield_now();
    }
}

fn in_order(frames: &[Vec<u8>], from: u32) {
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(seq_of(f), from + i as u32, "reordered or lost at {i}");
    }
}

#[test]
fn held_frames_wait_and_come_out_in_order_on_release() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    ctl.hold().unwrap();
    MemPort::inject(&inside.0, &inside.1, (0..300).map(udp_frame));
    loop_turn(&dp);
    assert!(outside.0.lock().unwrap().tx.is_empty());
    // Taken off the port (its queue would overflow) and kept by the worker.
    let st = held_frames_reach(&dp, 300);
    assert!(inside.0.lock().unwrap().rx.is_empty());
    assert!(st.held);
    assert_eq!(st.ports[0].held_frames, 300);
    assert!(outside.0.lock().unwrap().tx.is_empty());
    ctl.release().unwrap();
    let out = wait_tx(&outside.0, 300);
    assert_eq!(out.len(), 300);
    in_order(&out, 0);
    let st = ctl.stats().unwrap();
    assert!(!st.held);
    assert_eq!(st.ports[0].held_frames, 0);
}

#[test]
fn drain_forwards_what_is_queued_then_holds() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    ctl.hold().unwrap();
    MemPort::inject(&inside.0, &inside.1, (0..1000).map(udp_frame));
    MemPort::inject(&outside.0, &outside.1, (5000..5010).map(udp_frame));
    let d = ctl.drain().unwrap();
    assert!(d.complete);
    assert_eq!(d.packets, 1010);
    in_order(&outside.0.lock().unwrap().tx, 0);
    assert_eq!(inside.0.lock().unwrap().tx.len(), 10);
    // Held after the drain: new frames are kept, not run.
    MemPort::inject(&inside.0, &inside.1, (1000..1100).map(udp_frame));
    let st = held_frames_reach(&dp, 100);
    assert!(st.held);
    assert_eq!(st.ports[0].rx_packets, 1100);
    assert_eq!(outside.0.lock().unwrap().tx.len(), 1000);
    ctl.release().unwrap();
    let out = wait_tx(&outside.0, 1100);
    assert_eq!(out.len(), 1100);
    in_order(&out, 0);
}

#[test]
fn standby_starts_held_and_active_does_not() {
    let (dp, inside, outside) = start("fanout: {group: 9, role: standby}\n");
    MemPort::inject(&inside.0, &inside.1, (0..10).map(udp_frame));
    loop_turn(&dp);
    assert!(outside.0.lock().unwrap().tx.is_empty());
    assert!(dp.controller().stats().unwrap().held);
    dp.controller().release().unwrap();
    assert_eq!(wait_tx(&outside.0, 10).len(), 10);

    let (dp, inside, outside) = start("fanout: {group: 9}\n");
    assert!(!dp.controller().stats().unwrap().held);
    MemPort::inject(&inside.0, &inside.1, (0..10).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 10).len(), 10);
}

#[test]
fn steer_on_ports_outside_a_fanout_group_fails_and_changes_nothing() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    let e = ctl.steer(1).unwrap_err().to_string();
    assert!(e.contains("steer") && e.contains("in0"), "{e}");
    MemPort::inject(&inside.0, &inside.1, (0..20).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 20).len(), 20);
    assert!(!ctl.stats().unwrap().held);
}

#[test]
fn handoff_requests_are_checked() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    let err = |line: &str| {
        let v: serde_json::Value = serde_json::from_str(&ctl.handle_line(line)).unwrap();
        v["error"].as_str().unwrap_or_default().to_string()
    };
    for bad in [
        r#"{"cmd":"steer"}"#,
        r#"{"cmd":"steer","member":-1}"#,
        r#"{"cmd":"steer","member":"one"}"#,
        r#"{"cmd":"steer","member":4294967296}"#,
    ] {
        assert!(err(bad).contains("`member`"), "{bad}: {}", err(bad));
    }
    assert!(err(r#"{"cmd":"handoff"}"#).contains("drain, steer"));
    assert!(err(r#"{"cmd":"steer","member":0}"#).contains("fanout"));
    // Still active and forwarding after the refused requests.
    MemPort::inject(&inside.0, &inside.1, (0..5).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 5).len(), 5);
    let ok =
        |line: &str| serde_json::from_str::<serde_json::Value>(&ctl.handle_line(line)).unwrap();
    assert_eq!(ok(r#"{"cmd":"hold"}"#)["held"], true);
    assert_eq!(ok(r#"{"cmd":"drain"}"#)["packets"], 0);
    assert_eq!(ok(r#"{"cmd":"release"}"#)["held"], false);
}

#[test]
fn reconfigure_rebuilds_only_instances_whose_spec_changed() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    MemPort::inject(&inside.0, &inside.1, (0..10).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 10).len(), 10);
    let tag = |id: u64| serde_json::json!({"tag": {"id": id}});
    // Appending keeps the first tag as it is: nothing is carried, its count continues.
    let r = ctl.reconfigure(&[tag(1), tag(2)]).unwrap();
    let built: Vec<_> = r
        .built
        .iter()
        .map(|n| (n.name.as_str(), n.packets))
        .collect();
    assert_eq!(
        built,
        [("tag-2", 0)],
        "the answer lists only the node built"
    );
    assert_eq!(
        (r.names, r.carried),
        (vec!["tag".to_string(), "tag-2".into()], 0)
    );
    MemPort::inject(&inside.0, &inside.1, (10..20).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 20).len(), 20);
    let st = ctl.stats().unwrap();
    assert_eq!(st.node("tag").unwrap().stats["tagged"], 20);
    assert_eq!(st.node("tag-2").unwrap().stats["tagged"], 10);
    // Changing the first spec rebuilds only it, with its state carried.
    let changed = [
        serde_json::json!({"tag": {"id": 1, "drop_every": 1000}}),
        tag(2),
    ];
    assert_eq!(ctl.reconfigure(&changed).unwrap().carried, 1);
    // A failed build changes nothing, and the next reconfigure still compares right.
    assert!(ctl.reconfigure(&[serde_json::json!({"tag": {}})]).is_err());
    let again = ctl.reconfigure(&changed).unwrap();
    assert_eq!(again.carried, 0, "identical specs keep every node");
    assert!(again.built.is_empty());
    assert_eq!(
        ctl.stats().unwrap().node("tag").unwrap().stats["tagged"],
        20
    );
}

#[test]
fn exported_state_round_trips_through_the_control_protocol() {
    let (dp, inside, outside) = start("");
    let ctl = dp.controller();
    MemPort::inject(&inside.0, &inside.1, (0..7).map(udp_frame));
    assert_eq!(wait_tx(&outside.0, 7).len(), 7);
    let out: serde_json::Value =
        serde_json::from_str(&ctl.handle_line(r#"{"cmd":"export_state","node":"tag"}"#)).unwrap();
    assert_eq!(out["node"], "tag");
    assert_eq!(out["bytes"], 8);
    let (dp2, _, _) = start("");
    let data = out["data_b64"].as_str().unwrap();
    let req = serde_json::json!({"cmd": "import_state", "node": "tag", "data_b64": data});
    let back: serde_json::Value =
        serde_json::from_str(&dp2.controller().handle_line(&req.to_string())).unwrap();
    assert_eq!(back["flows"], 1, "{back}");
    let st = dp2.controller().stats().unwrap();
    assert_eq!(st.node("tag").unwrap().stats["tagged"], 7);
    // An unknown node is refused, naming it.
    let v: serde_json::Value =
        serde_json::from_str(&ctl.handle_line(r#"{"cmd":"export_state","node":"tag9"}"#)).unwrap();
    assert!(v["error"].as_str().unwrap().contains("tag9"), "{v}");
    // The same move through the one client, over the control sockets.
    let (dp3, _, _) = start("");
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let _sa = crate::ControlServer::start(&a, ctl.clone(), None).unwrap();
    let _sb = crate::ControlServer::start(&b, dp3.controller(), None).unwrap();
    let mut from = nfx_proto::Client::connect(&a).unwrap();
    let blob = from.export_state("tag").unwrap();
    assert_eq!(blob.len(), 8);
    let mut to = nfx_proto::Client::connect(&b).unwrap();
    assert_eq!(to.import_state("tag", &blob).unwrap(), 1);
    assert_eq!(to.stats().unwrap().node("tag").unwrap().stats["tagged"], 7);
    let e = from.export_state("tag9").unwrap_err();
    assert!(e.is_refusal() && e.to_string().contains("tag9"), "{e}");
}

#[test]
fn control_server_stops_even_when_its_socket_file_is_gone() {
    let (dp, _, _) = start("");
    let dir = std::env::temp_dir().join(format!("nfx-ctl-gone-{}", std::process::id()));
    let path = dir.join("c.sock");
    let server = crate::ControlServer::start(&path, dp.controller(), None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(server);
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "dropping the server hung"
    );
}
