//! `nfx up` over a testbed: the controller with its local agent running real `nfx run`
//! workers for software devices on the testbed's edge host, started as a process on an
//! ephemeral loopback port; dropping the guard kills it and stops every worker it recorded.

use crate::common::eventually;
use nfx_control::client::{load_token, Client};
use nfx_control::vnfm::local::stop_recorded_workers;
use nfx_testbed::runconfig::{chain_nodes, write_yaml, Chain};
use nfx_testbed::{Host, TestbedGuard};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

/// A running controller; killed (and its workers stopped) when dropped.
pub struct Up {
    child: Child,
    /// The local agent's run directory (worker sockets `<device>.sock`).
    pub run_dir: PathBuf,
    /// `http://ADDR` of the API.
    pub base: String,
    /// A client with the admin token.
    pub client: Client,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        stop_recorded_workers(&self.run_dir);
    }
}

/// The testbed as an infrastructure: edge has the software devices `devices`.
fn infra(devices: &[&str]) -> Value {
    let sw = |id: &str| {
        json!({"id": id, "host": "edge", "tier": "software", "functions": ["firewall", "nat"],
               "latency_us": 40, "throughput_gbps": 10, "cost": 1, "cpu_cores": 1})
    };
    json!({
        "hosts": [{"id": "src", "cores": 1}, {"id": "edge", "cores": 2},
                  {"id": "cloud", "cores": 1}, {"id": "dst", "cores": 1}],
        "devices": devices.iter().map(|d| sw(d)).collect::<Vec<_>>(),
        "links": [{"a": "src", "b": "edge", "latency_us": 30},
                  {"a": "edge", "b": "cloud", "latency_us": 30},
                  {"a": "cloud", "b": "dst", "latency_us": 30}],
    })
}

/// Starts `nfx up` in `dir` with admin token `token`, one worker per device of `devices`
/// on `tb`'s edge (packet fanout group `fanout`), and waits until it serves.
pub fn start(tb: &TestbedGuard, dir: &Path, devices: &[&str], token: &str, fanout: u16) -> Up {
    let run_dir = dir.join("agent");
    let (src_mac, cloud_mac) = tb.edge_peer_macs().unwrap();
    let template = json!({
        "netns": tb.ns(Host::Edge),
        "ports": {"inside": {"iface": "to-src", "peer_mac": src_mac},
                  "outside": {"iface": "to-cloud", "peer_mac": cloud_mac}},
        "poll": "adaptive",
        "fanout": fanout,
    });
    let workers: serde_json::Map<String, Value> = devices
        .iter()
        .map(|d| (d.to_string(), template.clone()))
        .collect();
    let local = json!({"run_dir": run_dir, "nfx_bin": NFX, "workers": workers});
    write_yaml(&dir.join("infra.yaml"), &infra(devices)).unwrap();
    write_yaml(&dir.join("local.yaml"), &local).unwrap();
    let ready = dir.join("ready");
    let child = Command::new(NFX)
        .arg("up")
        .arg("--db")
        .arg(dir.join("state.db"))
        .args(["--listen", "127.0.0.1:0"])
        .arg("--infra")
        .arg(dir.join("infra.yaml"))
        .arg("--local-config")
        .arg(dir.join("local.yaml"))
        .arg("--ready-file")
        .arg(&ready)
        .env("NFX_TOKEN", token)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut up = Up {
        child,
        run_dir,
        base: String::new(),
        client: Client::new("http://unset", None),
    };
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(&ready)
            .map(|s| !s.is_empty())
            .unwrap_or(false)),
        "controller never became ready"
    );
    up.base = format!("http://{}", std::fs::read_to_string(&ready).unwrap().trim());
    std::fs::write(dir.join("token"), token).unwrap();
    up.client = Client::new(&up.base, load_token(Some(&dir.join("token"))).unwrap());
    up
}

impl Up {
    /// Deploys service `id`: one NAT (the testbed's translation) from src to dst, and waits
    /// until its operation completed.
    pub fn deploy_nat(&self, tb: &TestbedGuard, id: &str) {
        let nat = chain_nodes(
            tb,
            &Chain::Full {
                patterns: PathBuf::from("/nonexistent"),
                elephant_bytes: 1,
            },
        )[1]["nat"]
            .clone();
        let svc = json!({
            "id": id, "tenant": "t", "ingress": "src", "egress": "dst",
            "chain": [{"function": "nat", "config": nat}],
            "sla": {"max_latency_us": 1000, "min_throughput_gbps": 1},
        });
        let op = self.client.post("/api/v1/services", &svc).unwrap();
        assert_eq!(op.status, 202, "{op:?}");
        let done = serde_json::to_value(
            self.client
                .wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(30))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(done["state"], "COMPLETED", "{done}");
    }
}
