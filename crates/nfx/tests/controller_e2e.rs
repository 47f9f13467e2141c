//! End-to-end: the controller (`nfx up`) drives real `nfx run` workers through its local
//! agent, over its REST API, while iperf3 traffic crosses the testbed. A NAT service is
//! deployed on one of edge's two software devices, migrated with `POST
//! /api/v1/instances/{id}/migrate` to the other device (deploy new → move flows → destroy
//! old → re-steer) mid-transfer, and destroyed. Checks: every operation completes, the
//! TCP transfer survives with every byte and the same translated source, the new worker
//! carries the traffic and dropped nothing for lack of state, the old worker is gone,
//! and after the destroy no worker process is left. Needs root; own prefix, subnet and
//! fanout group; everything is removed on failure too.

mod common;
mod up;

use common::eventually;
use nfx_control::vnfm::state_file::recorded_pids;
use nfx_proto::{fetch_stats, Stats};
use nfx_testbed::acl::IPERF_PORT;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::{netns, Host, Spec, TestbedGuard};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "controller-e2e-token-0123456789";
const DEVICES: [&str; 2] = ["w0", "w1"];

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

/// Frames both ports sent.
fn ports_tx(s: &Stats) -> u64 {
    ["inside", "outside"]
        .iter()
        .filter_map(|p| s.port(p))
        .map(|p| p.tx_packets)
        .sum()
}

fn tx_packets(sock: &Path) -> u64 {
    fetch_stats(sock).map(|s| ports_tx(&s)).unwrap_or(0)
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn rest_deploy_migrate_destroy_under_traffic() {
    let tb = TestbedGuard::up(Spec {
        prefix: "nfxctl-".into(),
        subnet_base: 239,
    })
    .unwrap();
    tb.set_edge_forwarding(false).unwrap();
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let up = up::start(&tb, dir.path(), &DEVICES, TOKEN, 3300);
    let (run_dir, c) = (up.run_dir.clone(), &up.client);

    up.deploy_nat(&tb, "masq");
    let inst = c.get("/api/v1/instances").unwrap().body;
    let inst = inst.as_array().unwrap();
    assert_eq!(inst.len(), 1, "{inst:?}");
    let old_id = inst[0]["spec"]["id"].as_str().unwrap().to_string();
    let old_dev = inst[0]["spec"]["device"].as_str().unwrap().to_string();
    let new_dev = DEVICES.iter().find(|d| **d != old_dev).unwrap().to_string();
    let old_sock = run_dir.join(format!("{old_dev}.sock"));
    let new_sock = run_dir.join(format!("{new_dev}.sock"));

    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    let _srv = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let client =
        std::thread::spawn(move || iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 6, 1)));
    assert!(
        eventually(Duration::from_secs(5), || tx_packets(&old_sock) > 2000),
        "no traffic through {old_dev}"
    );
    let peers_before = netns::tcp_peers(&dst_ns, IPERF_PORT).unwrap();
    assert!(
        !peers_before.is_empty()
            && peers_before
                .iter()
                .all(|p| p.starts_with(&tb.nat_ip().to_string())),
        "{peers_before:?}"
    );

    let op = c
        .post(
            &format!("/api/v1/instances/{old_id}/migrate"),
            &json!({"device": new_dev}),
        )
        .unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let done = serde_json::to_value(
        c.wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(30))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(done["state"], "COMPLETED", "{done}");
    let steps = done["steps"].as_array().unwrap();
    assert!(
        steps.len() >= 3 && steps.iter().all(|s| s["status"] == "done"),
        "{done}"
    );
    let inst = c.get("/api/v1/instances").unwrap().body;
    let inst = inst.as_array().unwrap().clone();
    assert_eq!(inst.len(), 1, "{inst:?}");
    assert_eq!(inst[0]["spec"]["device"], new_dev.as_str(), "{inst:?}");
    let new_id = inst[0]["spec"]["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, old_id);
    let path = c.get("/api/v1/services/masq").unwrap().body;
    assert_eq!(
        path["path"]["hops"][0]["instance"],
        new_id.as_str(),
        "{path}"
    );

    let moved = tx_packets(&new_sock);
    assert!(
        eventually(Duration::from_secs(3), || tx_packets(&new_sock)
            > moved + 1000),
        "{new_dev} does not carry the traffic"
    );
    assert!(
        eventually(Duration::from_secs(5), || fetch_stats(&old_sock).is_err()),
        "the old worker still runs after its instance was destroyed"
    );
    let peers_after = netns::tcp_peers(&dst_ns, IPERF_PORT).unwrap();
    let tcp = client
        .join()
        .unwrap()
        .expect("iperf3 failed across the migration");
    assert_eq!(
        peers_before, peers_after,
        "dst saw another translated source"
    );
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    assert!(
        tcp.received_bytes as f64 >= tcp.sent_bytes as f64 * 0.99,
        "{tcp:?}"
    );
    let s = fetch_stats(&new_sock).unwrap();
    assert_eq!(s.node_drop("nat", "nat_no_mapping"), 0, "{s:?}");
    let live = c.get(&format!("/api/v1/instances/{new_id}")).unwrap().body;
    assert!(live["state"]["packets"].as_u64().unwrap_or(0) > 0, "{live}");

    let pids: Vec<u32> = recorded_pids(&run_dir)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let op = c.delete("/api/v1/services/masq").unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let done = serde_json::to_value(
        c.wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(30))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert!(c
        .get("/api/v1/instances")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .is_empty());
    assert!(
        eventually(Duration::from_secs(5), || pids.iter().all(|p| !alive(*p))),
        "worker processes left after the destroy: {pids:?}"
    );
}
