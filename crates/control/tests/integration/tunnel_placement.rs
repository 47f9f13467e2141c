//! Placement of a service's ESP tunnel through the controller on the simulated VNFM: one
//! `esp` endpoint on each end host's accelerator device, one queue pair each, freed on
//! destroy; without a free queue pair the endpoint is placed on its CPU engine and the
//! SSM's grant and revoke move the queue pair in the model and the state database (a
//! restarted controller keeps the move); a tunnel without an accelerator device, or
//! against the path's direction is refused at plan with the reason.

use nfx_control::controller::Controller;
use nfx_control::enforcer::Enforcer;
use nfx_control::mediator::tunnel::{fnv1a, EndpointConfig, TUNNEL_SLOTS};
use nfx_control::mediator::{Mediator, VnfmMap};
use nfx_control::ops::OpState;
use nfx_control::store::Store;
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_model::service::Service;
use nfx_model::{Infrastructure, Tier};
use std::sync::Arc;

/// Three hosts in a line; h1 has one queue pair, h2 two, h3 no accelerator.
const INFRA: &str = "
hosts: [{ id: h1, cores: 4 }, { id: h2, cores: 4 }, { id: h3, cores: 4 }]
devices:
  - { id: h1-sw, host: h1, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 2 }
  - { id: h2-sw, host: h2, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 2 }
  - { id: h3-sw, host: h3, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 2 }
  - { id: h1-acc, host: h1, tier: accelerator, functions: [esp], latency_us: 10, throughput_gbps: 10, queue_pairs: 1, algorithms: [aes-128-gcm] }
  - { id: h2-acc, host: h2, tier: accelerator, functions: [esp], latency_us: 10, throughput_gbps: 10, queue_pairs: 2, algorithms: [aes-128-gcm, aes-256-gcm] }
links: [{ a: h1, b: h2, latency_us: 20 }, { a: h2, b: h3, latency_us: 20 }]
";

fn controller() -> Arc<Controller> {
    controller_on(std::path::Path::new(":memory:"), SimConfig::default())
}

/// A controller on the state database `db` with the simulator `sim`.
fn controller_on(db: &std::path::Path, sim: SimConfig) -> Arc<Controller> {
    let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
    let sim = Arc::new(SimVnfm::new(&infra, sim).unwrap());
    let med = Mediator::new(infra, VnfmMap::new(sim), Arc::new(Enforcer::default())).unwrap();
    Controller::open(Store::open(db).unwrap(), med).unwrap()
}

fn svc(id: &str, tunnel: serde_json::Value) -> Service {
    serde_json::from_value(serde_json::json!({
        "id": id, "tenant": "globex", "ingress": "h1", "egress": "h3",
        "chain": [{"function": "firewall", "config": {"default": "allow"}}],
        "sla": {"max_latency_us": 1000.0, "min_throughput_gbps": 1.0},
        "tunnel": tunnel,
    }))
    .unwrap()
}

/// Queue pairs in use on `device`.
fn used_qps(ctl: &Controller, device: &str) -> f64 {
    ctl.with_mediator(|m| {
        let d = m.model().devices().iter().find(|d| d.id == device).cloned();
        let d = d.expect("device in the model");
        assert_eq!(d.tier, Tier::Accelerator);
        d.capacity.used
    })
}

#[test]
fn both_endpoints_take_one_queue_pair_each_and_destroy_frees_them() {
    let ctl = controller();
    let s = svc("vpn", serde_json::json!({"from": "h1", "to": "h2"}));
    let plan = ctl.plan(&s).unwrap();
    let esp: Vec<_> = plan
        .placements
        .iter()
        .filter(|p| p.function == "esp")
        .collect();
    assert_eq!(esp.len(), 2, "{plan:?}");
    assert_eq!(
        (esp[0].device.as_str(), esp[1].device.as_str()),
        ("h1-acc", "h2-acc")
    );
    assert!(esp[0].reason.contains("initiator"), "{}", esp[0].reason);
    assert!(esp[1].reason.contains("responder"), "{}", esp[1].reason);
    let op = ctl.deploy(s).unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    assert_eq!(
        (used_qps(&ctl, "h1-acc"), used_qps(&ctl, "h2-acc")),
        (1.0, 1.0)
    );
    let rows = ctl.instances().unwrap();
    let ends: Vec<_> = rows.iter().filter(|r| r.spec.function == "esp").collect();
    assert_eq!(ends.len(), 2);
    for r in &ends {
        assert_eq!(r.status, "running");
        assert_eq!(r.users, vec!["vpn".to_string()]);
        assert_eq!(r.spec.capacity, 1.0);
        assert_eq!(r.spec.config["tunnel"], "vpn");
    }
    let peer = |host: &str| {
        ends.iter()
            .find(|r| r.host == host)
            .map(|r| r.spec.config["peer_host"].as_str().unwrap().to_string())
    };
    assert_eq!(peer("h1").as_deref(), Some("h2"));
    assert_eq!(peer("h2").as_deref(), Some("h1"));

    let e = ctl.migrate("vpn-esp-h1", None).unwrap_err().to_string();
    assert!(e.contains("endpoint of service vpn's tunnel"), "{e}");

    let op = ctl.destroy("vpn").unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    assert!(ctl.instances().unwrap().is_empty());
    assert_eq!(
        (used_qps(&ctl, "h1-acc"), used_qps(&ctl, "h2-acc")),
        (0.0, 0.0)
    );
}

#[test]
fn a_full_accelerator_places_on_cpu_and_the_ssm_moves_the_queue_pair() {
    let ctl = controller();
    let op = ctl
        .deploy(svc("a", serde_json::json!({"from": "h1", "to": "h2"})))
        .unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    let b = svc("b", serde_json::json!({"from": "h1", "to": "h2"}));
    let plan = ctl.plan(&b).unwrap();
    let h1 = plan
        .placements
        .iter()
        .find(|p| p.instance == "b-esp-h1")
        .unwrap();
    assert!(h1.reason.contains("CPU engine"), "{}", h1.reason);
    let op = ctl.deploy(b).unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    let cap = |id: &str| {
        ctl.instances()
            .unwrap()
            .into_iter()
            .find(|r| r.spec.id == id)
            .map(|r| r.spec.capacity)
    };
    assert_eq!((cap("a-esp-h1"), cap("b-esp-h1")), (Some(1.0), Some(0.0)));
    assert_eq!(cap("b-esp-h2"), Some(1.0), "h2 has two queue pairs");
    assert_eq!(used_qps(&ctl, "h1-acc"), 1.0);

    let e = ctl
        .set_queue_pair("b-esp-h1", true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("h1-acc"), "{e}");
    assert_eq!((cap("a-esp-h1"), cap("b-esp-h1")), (Some(1.0), Some(0.0)));
    ctl.set_queue_pair("a-esp-h1", false).unwrap();
    ctl.set_queue_pair("b-esp-h1", true).unwrap();
    assert_eq!((cap("a-esp-h1"), cap("b-esp-h1")), (Some(0.0), Some(1.0)));
    assert_eq!(used_qps(&ctl, "h1-acc"), 1.0);
    assert!(ctl.set_queue_pair("nope", true).is_err());

    ctl.destroy("b").unwrap();
    assert_eq!(
        used_qps(&ctl, "h1-acc"),
        0.0,
        "destroy frees the moved queue pair"
    );
}

/// The queue pair of each endpoint on `device`, by instance id.
fn holders(ctl: &Controller, ids: &[&str]) -> Vec<Option<f64>> {
    let rows = ctl.instances().unwrap();
    ids.iter()
        .map(|id| {
            rows.iter()
                .find(|r| r.spec.id == *id)
                .map(|r| r.spec.capacity)
        })
        .collect()
}

#[test]
fn a_queue_pair_the_ssm_moved_holds_across_a_controller_restart() {
    let dir = std::env::temp_dir().join(format!("nfx-ssm-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("state.db");
    let sim = SimConfig {
        state_file: Some(dir.join("sim.json")),
        ..SimConfig::default()
    };
    let ids = ["a-esp-h1", "b-esp-h1"];
    {
        let ctl = controller_on(&db, sim.clone());
        for id in ["a", "b"] {
            let op = ctl
                .deploy(svc(id, serde_json::json!({"from": "h1", "to": "h2"})))
                .unwrap();
            assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
        }
        ctl.set_queue_pair("a-esp-h1", false).unwrap();
        ctl.set_queue_pair("b-esp-h1", true).unwrap();
        assert_eq!(holders(&ctl, &ids), [Some(0.0), Some(1.0)]);
    }
    let ctl = controller_on(&db, sim);
    let summary = ctl.recover().unwrap();
    assert_eq!(
        holders(&ctl, &ids),
        [Some(0.0), Some(1.0)],
        "the restarted controller lost the SSM's move ({summary})"
    );
    assert_eq!(used_qps(&ctl, "h1-acc"), 1.0);
    let e = ctl
        .set_queue_pair("a-esp-h1", true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("h1-acc"), "the queue pair is still held: {e}");
    let c = svc("c", serde_json::json!({"from": "h1", "to": "h2"}));
    let plan = ctl.plan(&c).unwrap();
    let h1 = plan.placements.iter().find(|p| p.instance == "c-esp-h1");
    assert!(h1.unwrap().reason.contains("CPU engine"), "{plan:?}");
    ctl.destroy("b").unwrap();
    assert_eq!(
        used_qps(&ctl, "h1-acc"),
        0.0,
        "destroy frees the moved queue pair"
    );
    ctl.set_queue_pair("a-esp-h1", true).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tunnels_without_an_accelerator_or_against_the_path_are_refused() {
    let ctl = controller();
    let e = ctl
        .plan(&svc("x", serde_json::json!({"from": "h2", "to": "h3"})))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("h3") && e.contains("no accelerator-tier device"),
        "{e}"
    );
    let e = ctl
        .plan(&svc("y", serde_json::json!({"from": "h2", "to": "h1"})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not go from h2 straight to h1"), "{e}");
    let e = ctl
        .plan(&svc(
            "z",
            serde_json::json!({"from": "h1", "to": "h2", "alg": "aes-256-gcm"}),
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("h1") && e.contains("aes-256-gcm"), "{e}");
    assert!(
        ctl.instances().unwrap().is_empty(),
        "a refused plan reserves nothing"
    );
}

/// The slot (UDP port and TUN /30) of a deployed endpoint.
fn slot_of(ctl: &Controller, instance: &str) -> u16 {
    let rows = ctl.instances().unwrap();
    let row = rows.iter().find(|r| r.spec.id == instance).expect("row");
    let c: EndpointConfig = serde_json::from_value(row.spec.config.clone()).unwrap();
    c.slot
        .expect("the controller assigns every new tunnel a slot")
}

#[test]
fn two_tunnels_whose_names_hash_alike_get_their_own_slots() {
    let slot = |name: &str| fnv1a(name.as_bytes()) % u32::from(TUNNEL_SLOTS);
    let first = "vpn0";
    let twin = (1..)
        .map(|i| format!("vpn{i}"))
        .find(|n| slot(n) == slot(first))
        .unwrap();
    let ctl = controller();
    for name in [first, twin.as_str()] {
        let op = ctl
            .deploy(svc(name, serde_json::json!({"from": "h1", "to": "h2"})))
            .unwrap();
        assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    }
    let a = slot_of(&ctl, &format!("{first}-esp-h1"));
    assert_eq!(a, slot_of(&ctl, &format!("{first}-esp-h2")));
    let b = slot_of(&ctl, &format!("{twin}-esp-h1"));
    assert_eq!(b, slot_of(&ctl, &format!("{twin}-esp-h2")));
    assert_eq!(u32::from(a), slot(first));
    assert_ne!(a, b, "{first} and {twin} share slot {a}");
}
