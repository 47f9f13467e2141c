//! Crash test: the controller runs as a child process (this test binary in child mode),
//! is killed with SIGKILL in the middle of a deploy whose simulated device takes 700 ms per
//! instance, and is started again on the same database and simulator state. The restarted
//! controller must resume the operation from its journal and end consistent: every
//! recorded instance exists at the agent and nothing else does.

use crate::common::{authed, service, tmp, wait_ready, INFRA, TOKEN};
use nfx_control::server::{run_up, UpConfig};
use nfx_control::vnfm::sim::SimConfig;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Kills the child on drop so a failing test leaves no server behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Child mode: serves a controller configured from the environment (run by `spawn`).
#[test]
#[ignore]
fn child_server() {
    let Ok(dir) = std::env::var("NFX_CTL_CHILD_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let _ = std::fs::remove_file(dir.join("ready"));
    run_up(UpConfig {
        db: dir.join("state.db"),
        listen: "127.0.0.1:0".parse().unwrap(),
        token: zeroize::Zeroizing::new(TOKEN.into()),
        infra: nfx_model::Infrastructure::from_yaml("infra.yaml", INFRA).unwrap(),
        sim: SimConfig {
            deploy_delay: Duration::from_millis(700),
            state_file: Some(dir.join("sim.json")),
        },
        local: None,
        read_token: None,
        agents: Vec::new(),
        ready_file: Some(dir.join("ready")),
        power_manager: false,
        power_services: Vec::new(),
        power_tuning: Default::default(),
        ssm: None,
    })
    .unwrap();
}

fn spawn(dir: &std::path::Path) -> (Guard, String) {
    let _ = std::fs::remove_file(dir.join("ready"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "restart::child_server",
            "--nocapture",
        ])
        .env("NFX_CTL_CHILD_DIR", dir)
        .spawn()
        .unwrap();
    let g = Guard(child);
    let base = format!("http://{}", wait_ready(&dir.join("ready")));
    (g, base)
}

fn sim_instances(dir: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("sim.json")).unwrap_or_else(|_| "{}".into());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn sigkill_mid_deploy_then_restart_ends_consistent() {
    let dir = tmp("restart");
    let (mut g, base) = spawn(&dir);
    let c = authed(&base);
    let mut svc = service("web", "edge", "cloud", 500.0);
    svc["chain"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"function": "dpi", "config": {"patterns": "patterns.txt"}}));
    let op = c.post("/api/v1/services", &svc).unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let op_id = op.body["id"].as_str().unwrap().to_string();
    let start = Instant::now();
    while sim_instances(&dir).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "first deploy never landed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    g.0.kill().unwrap();
    g.0.wait().unwrap();
    let at_kill = sim_instances(&dir);
    assert!(
        !at_kill.is_empty() && at_kill.len() < 3,
        "kill did not land mid-operation: {at_kill:?}"
    );

    let (_g2, base2) = spawn(&dir);
    let c = authed(&base2);
    let done =
        serde_json::to_value(c.wait_operation(&op_id, Duration::from_secs(30)).unwrap()).unwrap();
    assert_eq!(done["recovered"], true, "{done}");
    let state = done["state"].as_str().unwrap().to_string();
    assert!(state == "COMPLETED" || state == "ROLLED_BACK", "{done}");

    let mut recorded: Vec<String> = c
        .get("/api/v1/instances")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["status"], "running", "{i}");
            i["spec"]["id"].as_str().unwrap().to_string()
        })
        .collect();
    recorded.sort();
    let mut at_agent = sim_instances(&dir);
    at_agent.sort();
    assert_eq!(recorded, at_agent, "database and agent disagree");
    let s = c.get("/api/v1/services/web").unwrap().body;
    if state == "COMPLETED" {
        assert_eq!(recorded.len(), 3);
        assert_eq!(s["status"], "active");
        assert_eq!(s["path"]["hops"].as_array().unwrap().len(), 3);
    } else {
        assert!(recorded.is_empty());
        assert_eq!(s["status"], "failed");
    }
    let ev = c.get("/api/v1/events?limit=1000").unwrap().body;
    assert!(ev
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "operation.recovered"));
    assert!(ev
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "controller.reconciled"));
    let _ = std::fs::remove_dir_all(&dir);
}
