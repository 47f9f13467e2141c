//! Shared helpers of the controller integration tests: a small infrastructure and an
//! in-process controller on an ephemeral loopback port.

use nfx_control::client::Client;
use nfx_control::server::{run_up, UpConfig};
use nfx_control::vnfm::sim::SimConfig;
use nfx_model::Infrastructure;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Admin token used by the tests.
pub const TOKEN: &str = "test-token-0123456789";

/// Read-only token used by the tests.
pub const READ_TOKEN: &str = "read-token-9876543210";

/// Two hosts; two software devices and a table device on `edge`, one software on `cloud`.
pub const INFRA: &str = "
hosts: [{ id: edge, cores: 8 }, { id: cloud, cores: 8 }]
devices:
  - { id: sw-edge, host: edge, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
  - { id: sw-edge2, host: edge, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
  - { id: tt-edge, host: edge, tier: table, functions: [firewall, nat], latency_us: 2, throughput_gbps: 100, table_entries: 1048576, cost: 5 }
  - { id: sw-cloud, host: cloud, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
links: [{ a: edge, b: cloud, latency_us: 20 }]
";

/// A fresh temporary directory named after the test.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nfx-ctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits for a file written by a server once it listens; returns its content.
pub fn wait_ready(file: &std::path::Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if !s.is_empty() {
                return s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "server never became ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a controller in a background thread; returns its base URL.
pub fn start(dir: &std::path::Path, delay: Duration) -> String {
    let ready = dir.join("ready");
    let cfg = UpConfig {
        db: dir.join("state.db"),
        listen: "127.0.0.1:0".parse().unwrap(),
        token: Zeroizing::new(TOKEN.into()),
        infra: Infrastructure::from_yaml("infra.yaml", INFRA).unwrap(),
        sim: SimConfig {
            deploy_delay: delay,
            state_file: Some(dir.join("sim.json")),
        },
        local: None,
        read_token: Some(Zeroizing::new(READ_TOKEN.into())),
        agents: Vec::new(),
        ready_file: Some(ready.clone()),
        power_manager: false,
        power_services: Vec::new(),
        power_tuning: Default::default(),
        ssm: None,
    };
    std::thread::spawn(move || run_up(cfg));
    format!("http://{}", wait_ready(&ready))
}

/// A client with the read-only token.
pub fn reader(base: &str) -> Client {
    Client::new(base, Some(Zeroizing::new(READ_TOKEN.into())))
}

/// A client with the admin token.
pub fn authed(base: &str) -> Client {
    Client::new(base, Some(Zeroizing::new(TOKEN.into())))
}

/// A service between `ingress` and `egress` with a firewall → NAT chain.
pub fn service(id: &str, ingress: &str, egress: &str, max_latency_us: f64) -> serde_json::Value {
    serde_json::json!({
        "id": id, "tenant": "acme", "ingress": ingress, "egress": egress,
        "chain": [
            {"function": "firewall", "config": {"rules": [{"action": "allow", "proto": "tcp", "dport": 80}]}},
            {"function": "nat", "config": {"snat": {"public_ip": "10.200.2.100"}}}
        ],
        "sla": {"max_latency_us": max_latency_us, "min_throughput_gbps": 1.0}
    })
}
