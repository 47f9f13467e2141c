//! End-to-end tests of the `nfx` binary's testbed, demo, bench and config handling.
//! Namespace tests need root; each uses its own prefix and subnet and cleans up.

use nfx_testbed::{netns, Spec, Testbed};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;

const NFX: &str = env!("CARGO_BIN_EXE_nfx");
/// Tests that move traffic share two cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn nfx(args: &[&str]) -> Output {
    Command::new(NFX).args(args).output().expect("running nfx")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Removes a testbed on drop, whatever happened in the test.
struct Down(Spec);
impl Drop for Down {
    fn drop(&mut self) {
        if let Ok(tb) = Testbed::attach(self.0.clone()) {
            let _ = tb.down();
        }
    }
}

fn ours(prefix: &str) -> Vec<String> {
    netns::list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn testbed_up_twice_then_down_leaves_nothing() {
    let prefix = "nfxe2e-cli-";
    let _down = Down(Spec {
        prefix: prefix.into(),
        subnet_base: 243,
    });
    let args = ["--prefix", prefix, "--subnet-base", "243"];
    for _ in 0..2 {
        let o = nfx(&[&["testbed", "up"][..], &args].concat());
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = nfx(&[&["testbed", "status", "--json"][..], &args].concat());
    assert!(o.status.success(), "{}", text(&o));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["hosts"].as_array().unwrap().len(), 4);
    assert_eq!(st["hosts"][1]["forwarding"], true);
    assert_eq!(ours(prefix).len(), 4);
    let o = nfx(&[&["testbed", "down"][..], &args].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(ours(prefix).is_empty(), "{:?}", ours(prefix));
    let o = nfx(&[&["testbed", "down"][..], &args].concat());
    assert!(text(&o).contains("nothing to remove"), "{}", text(&o));
}

#[test]
fn not_root_gets_a_clear_message() {
    let want = nfx_testbed::root::NEED_ROOT;
    if nfx_testbed::root::effective_uid() != 0 {
        let o = nfx(&["testbed", "up", "--prefix", "nfxe2e-nr-"]);
        assert!(!o.status.success());
        assert!(text(&o).contains(want), "{}", text(&o));
        return;
    }
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(setpriv) = setpriv else {
        assert_eq!(
            nfx_testbed::root::check_euid(1000).unwrap_err().to_string(),
            want
        );
        return;
    };
    for action in ["up", "down", "status"] {
        let o = Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", NFX])
            .args(["testbed", action, "--prefix", "nfxe2e-nr-"])
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(text(&o).contains(want), "{action}: {}", text(&o));
    }
    assert!(ours("nfxe2e-nr-").is_empty());
}

#[test]
fn wrong_config_names_file_and_field() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown.yaml",
            "name: x\nports:\n  inside: {iface: a, peer_mac: \"02:00:00:00:00:01\"}\n  outside: {iface: b, peer_mac: \"02:00:00:00:00:02\"}\nvectr: 8\n",
            "vectr",
        ),
        (
            "badport.yaml",
            "name: x\nports:\n  inside: {iface: a, peer_mac: \"02:00:00:00:00:01\"}\n  outside: {iface: b, peer_mac: \"02:00:00:00:00:02\"}\nchain:\n  - firewall: {rules: [{action: allow, proto: tcp, dport: 70000}]}\n",
            "dport",
        ),
    ];
    for (file, body, field) in cases {
        let p = dir.path().join(file);
        std::fs::write(&p, body).unwrap();
        let o = nfx(&["run", "--config", p.to_str().unwrap(), "--duration", "1"]);
        assert!(!o.status.success(), "{file} was accepted");
        let t = text(&o);
        assert!(t.contains(file), "{file}: {t}");
        assert!(t.contains(field), "{file}: {t}");
    }
}

#[test]
fn up_refuses_a_bad_ssm_calibration_naming_the_flag_and_the_file() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let bad = dir.path().join("cal.json");
    std::fs::write(
        &bad,
        r#"{"points": [{"engine": "", "alg": "aes-128-gcm"}]}"#,
    )
    .unwrap();
    for file in [bad, dir.path().join("missing.json")] {
        let o = Command::new(NFX)
            .current_dir(dir.path())
            .env_remove("NFX_TOKEN")
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--ssm",
                "--ssm-calibration",
            ])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{} was accepted", file.display());
        let t = text(&o);
        assert!(t.contains("--ssm-calibration"), "{t}");
        assert!(
            t.contains(file.file_name().unwrap().to_str().unwrap()),
            "{t}"
        );
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn bench_dataplane_writes_the_agreed_json() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _down = Down(Spec {
        prefix: "nfxe2e-bench-".into(),
        subnet_base: 244,
    });
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = Command::new(NFX)
        .args([
            "bench",
            "dataplane",
            "--duration",
            "1",
            "--cases",
            "kernel-forward,nfx-forward",
        ])
        .args([
            "--prefix",
            "nfxe2e-bench-",
            "--subnet-base",
            "244",
            "--json",
        ])
        .arg(&json)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0]["name"], "kernel-forward");
    for c in cases {
        for k in [
            "tcp1_gbps",
            "tcp4_gbps",
            "udp64_mpps",
            "lat_p50_us",
            "lat_p99_us",
            "cpu_cores",
        ] {
            assert!(c[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {c}");
        }
    }
    // Latency in three interleaved rounds (the default), each run listed, and the
    // difference to kernel-forward taken round by round.
    assert_eq!(v["lat_repeat"], 3);
    for c in cases {
        assert_eq!(c["lat_p50_runs_us"].as_array().unwrap().len(), 3, "{c}");
        assert!(c["lat_p50_over_kernel_us"].as_f64().is_some(), "{c}");
    }
    assert_eq!(cases[0]["lat_p50_over_kernel_us"], 0.0);
    assert!(v.get("idle_cpu_pct_adaptive").is_some());
    assert!(v.get("adaptive_vs_busy_throughput").is_some());
    assert!(ours("nfxe2e-bench-").is_empty());
}

/// Removes a multi-host testbed (`nfx testbed up --hosts`) on drop.
struct HostsDown(&'static str);
impl Drop for HostsDown {
    fn drop(&mut self) {
        let _ = nfx_testbed::hosts::down(self.0);
    }
}

/// `nfx demo` through the controller on its 3-host testbed: both tenants deployed by the
/// agents' real workers and tunnel endpoints, the migration under tenant A's stream loses
/// nothing, tenant A's deny rule drops its own denied datagrams while tenant B's iperf3
/// carries data across its ESP tunnel on the lookaside devices and its firewall counts
/// only B's denied connection, the controller's SSM switches a tunnel endpoint's engine
/// while that iperf3 runs (no reset, the tunnel carries on), the path is closed before
/// the deploy and after the destroy, and the teardown leaves no namespace, process or
/// run file.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn demo_runs_through_the_controller_and_cleans_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = "nfxe2e-demo-";
    let _down = HostsDown(prefix);
    let json = std::env::temp_dir().join(format!("nfxe2e-demo-{}.json", std::process::id()));
    let t0 = std::time::Instant::now();
    let o = Command::new(NFX)
        .args([
            "demo",
            "--duration",
            "6",
            "--prefix",
            prefix,
            "--subnet-base",
            "245",
            "--json",
        ])
        .arg(&json)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t0.elapsed().as_secs() <= 60,
        "the demo took {:?}",
        t0.elapsed()
    );
    for want in [
        "firewall",
        "nat",
        "dpi",
        "elephant",
        "acl_deny",
        "real (remote)",
        "tearing down",
    ] {
        assert!(t.contains(want), "demo output lacks {want}: {t}");
    }
    assert!(!t.contains("SIMULATED") && !t.contains("FAIL"), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(v["simulated"], false);
    let insts = v["instances"].as_array().unwrap();
    assert_eq!(insts.len(), 7, "{v}");
    assert!(insts.iter().all(|i| i["vnfm"] == "remote"), "{v}");
    // The migration under the counter stream: every datagram arrived.
    assert!(v["a_stream_sent"].as_u64().unwrap() > 5_000, "{v}");
    assert_eq!(v["migration_lost_packets"], 0, "{v}");
    assert_eq!(v["a_stream_sent"], v["a_stream_received"], "{v}");
    // Tenant A's NAT: every datagram of the stream arrived from its public address.
    assert_eq!(
        v["a_stream_sources"],
        serde_json::json!(["198.51.100.1"]),
        "{v}"
    );
    let m = &v["migration"];
    assert_ne!(m["from"], m["to"], "{v}");
    // Tenant A's deny rule drops A's denied datagrams; B's traffic is untouched by it.
    let (sent, got, deny) = (&v["a_denied"][0], &v["a_denied"][1], &v["a_denied"][2]);
    assert!(
        sent.as_u64().unwrap() > 0 && got == 0 && deny.as_u64() >= sent.as_u64(),
        "{v}"
    );
    assert!(v["b_bytes"].as_u64().unwrap() > 1_000_000, "{v}");
    assert!(
        v["a_firewall_packets"].as_u64().unwrap() < v["b_bytes"].as_u64().unwrap() / 1500,
        "A's firewall saw B's packets: {v}"
    );
    assert_eq!(v["b_denied"][0], "TimedOut", "{v}");
    assert!(v["b_elephants"].as_u64().unwrap() >= 1, "{v}");
    // Tenant B's iperf3 crossed its tunnel: two endpoints on the hosts' lookaside devices,
    // keyed, the egress end delivering at least what iperf3 received.
    let ends = v["b_tunnel"].as_array().unwrap();
    assert_eq!(ends.len(), 2, "{v}");
    for e in ends {
        assert_eq!(e["tier"], "accelerator", "{v}");
        assert_eq!(e["ike"], "established", "{v}");
        assert_eq!(e["drops"]["auth_failed"], 0, "{v}");
    }
    let delivered = ends.iter().map(|e| e["rx_bytes"].as_u64().unwrap()).max();
    assert!(delivered >= v["b_bytes"].as_u64(), "{v}");
    assert!(v["b_tunnel_bytes"].as_u64().unwrap() > 1_000_000, "{v}");
    // The SSM moved an endpoint between its queue pair and its CPU engine while iperf3
    // ran, which went on without a reset and kept the tunnel carrying.
    assert_eq!(v["b_iperf_error"], serde_json::Value::Null, "{v}");
    let moved = v["reassignments"].as_array().unwrap().iter().filter(|r| {
        r["under_traffic"] == true
            && r["state"] == "COMPLETED"
            && r["instance"]
                .as_str()
                .is_some_and(|i| i.starts_with("tenant-b-esp-"))
    });
    assert!(moved.count() >= 1, "{v}");
    assert!(
        v["b_tunnel_bytes_after_switch"].as_u64().unwrap() > 0,
        "{v}"
    );
    // Closed by default: nothing crossed before the deploy or after the destroy.
    assert_eq!(v["closed_before_after"], serde_json::json!([0, 0]), "{v}");
    assert_eq!(v["namespaces_left"], serde_json::json!([]), "{v}");
    assert!(ours(prefix).is_empty());
    let procs = Command::new("pgrep").args(["-f", prefix]).output().unwrap();
    assert!(
        procs.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&procs.stdout)
    );
}

/// `nfx demo --simulate` needs no root: the same control steps on simulated devices, every
/// instance labelled SIMULATED.
#[test]
fn demo_simulate_is_labelled_and_needs_no_testbed() {
    let o = Command::new(NFX)
        .args(["demo", "--simulate", "--duration", "5", "--json", "-"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["simulated"], true);
    let insts = v["instances"].as_array().unwrap();
    assert_eq!(insts.len(), 7, "{v}");
    assert!(insts.iter().all(|i| i["vnfm"] == "simulated"), "{v}");
    assert_ne!(v["migration"]["from"], v["migration"]["to"], "{v}");
    let human = String::from_utf8_lossy(&o.stderr);
    assert!(human.contains("SIMULATED"), "{human}");
    assert!(!human.contains("real (remote)"), "{human}");
}

#[test]
fn bench_placement_reports_each_family() {
    let o = Command::new(NFX)
        .args([
            "bench",
            "placement",
            "--families",
            "throughput,few-expensive",
            "--quick",
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(v["sets"].as_array().unwrap().len(), 0, "{v}");
    let fams = v["families"].as_array().unwrap();
    let names: Vec<&str> = fams.iter().map(|f| f["family"].as_str().unwrap()).collect();
    assert_eq!(names, ["throughput", "few-expensive"]);
    for f in fams {
        assert_eq!(f["instances"], 2, "{f}");
        let proven = f["proven"].as_u64().unwrap();
        let within = f["within_1pct"].as_u64().unwrap();
        assert!(proven <= within && within <= 2, "{f}");
        assert!(f["max_gap_pct"].as_f64().unwrap() >= f["mean_gap_pct"].as_f64().unwrap());
        assert!(f["max_seconds"].as_f64().unwrap() < 2.0, "{f}");
        assert_eq!(f["worse_than_ffd"], 0, "{f}");
        assert!(f["vs_ffd_worst"].as_f64().unwrap() <= 0.0, "{f}");
    }
    assert_eq!(v["rows"].as_array().unwrap().len(), 4, "{v}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("few-expensive") && err.contains("within 1 %"),
        "{err}"
    );
    let o = Command::new(NFX)
        .args(["bench", "placement", "--families", "nope"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("unknown family `nope`"), "{}", text(&o));
}

#[test]
fn json_dash_keeps_stdout_for_the_json_alone() {
    let o = Command::new(NFX)
        .args([
            "bench",
            "placement",
            "--sets",
            "",
            "--generated",
            "1",
            "--time-limit",
            "1",
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(v["sets"].as_array().unwrap().len(), 3, "{v}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("hyper_n30"),
        "the table moved to stderr: {err}"
    );

    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let file = dir.path().join("chain.json");
    let o = nfx(&[
        "chain",
        "--input",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../configs/examples/chain-workload.json"
        ),
        "--json",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(v["answers"].is_array(), "{v}");
}

/// The CLI run beside `nfx up` (same directory, no token given) finds the token file
/// `nfx up` wrote; operations list in the order they were made (op-2 before op-10);
/// `nfx status | head -1` (stdout closed early) ends cleanly, not with a panic.
#[test]
fn cli_beside_nfx_up_finds_its_token_and_lists_operations_in_order() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let infra =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/examples/infrastructure.yaml");
    let (_up, url) = up_in(dir.path(), &infra);
    std::fs::write(
        dir.path().join("svc.yaml"),
        "services:\n  - id: t\n    tenant: x\n    ingress: src\n    egress: dst\n    chain:\n      \
         - { function: firewall, config: { default: allow } }\n    sla: { max_latency_us: 1000, min_throughput_gbps: 0.1 }\n",
    )
    .unwrap();
    let cli = |args: &[&str]| {
        Command::new(NFX)
            .current_dir(dir.path())
            .env_remove("NFX_TOKEN")
            .env("NFX_URL", &url)
            .args(args)
            .output()
            .unwrap()
    };
    for round in 0..6 {
        let o = cli(&["deploy", "svc.yaml"]);
        assert!(o.status.success(), "deploy {round}: {}", text(&o));
        let o = cli(&["destroy", "t"]);
        assert!(o.status.success(), "destroy {round}: {}", text(&o));
    }
    let o = cli(&["status", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<u64> = v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap()["op-".len()..].parse().unwrap())
        .collect();
    assert!(ids.len() >= 12, "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "not in order: {ids:?}");

    // Closing the read end before `nfx status` has written (it first makes three
    // requests) makes its write fail with EPIPE, as `| head -1` does.
    let mut status = Command::new(NFX)
        .current_dir(dir.path())
        .env_remove("NFX_TOKEN")
        .env("NFX_URL", &url)
        .arg("status")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(status.stdout.take());
    let o = status.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
}

/// Starts `nfx up --infra INFRA` in `dir` (simulated VNFM, token file beside its
/// database there); returns its guard and URL.
fn up_in(dir: &Path, infra: &Path) -> (nfx_testbed::process::ChildGuard, String) {
    let mut up = Command::new(NFX);
    up.current_dir(dir)
        .env_remove("NFX_TOKEN")
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            "ready",
            "--infra",
        ])
        .arg(infra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let guard = nfx_testbed::process::ChildGuard::spawn(up).unwrap();
    let ready = dir.join("ready");
    let t0 = std::time::Instant::now();
    let addr = loop {
        match std::fs::read_to_string(&ready) {
            Ok(a) if !a.trim().is_empty() => break a.trim().to_string(),
            _ => {
                assert!(t0.elapsed().as_secs() < 20, "nfx up never became ready");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    };
    let url = if addr.starts_with("http") {
        addr
    } else {
        format!("http://{addr}")
    };
    (guard, url)
}

/// One schema, from the CLI: the descriptor's `calibration` block brings the dataplane
/// bench's latency in (the nominal 999 µs would miss the SLA); `nfx plan --export-*`
/// writes inputs `nfx place` and `nfx chain` accept; `nfx plan --optimize` finds the
/// cheaper placement of what best fit deployed and `nfx deploy --optimize` carries it out.
#[test]
fn plan_exports_the_tools_inputs_and_optimize_moves_to_the_cheap_device() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let sw = |id: &str, cores: u32, cost: u32| {
        format!(
            "  - {{ id: {id}, host: h, tier: software, functions: [f1, f2], latency_us: 999, \
             throughput_gbps: 1, cpu_cores: {cores}, cost: {cost}, calibration: fw }}\n"
        )
    };
    let infra = format!(
        "hosts: [{{ id: h, cores: 16 }}]\ndevices:\n{}{}{}calibration: {{ dataplane: dp.json }}\n",
        sw("a", 2, 5),
        sw("b", 2, 5),
        sw("big", 4, 3)
    );
    std::fs::write(dir.path().join("infra.yaml"), infra).unwrap();
    std::fs::write(
        dir.path().join("dp.json"),
        r#"{"cases":[{"name":"fw","tcp1_gbps":10,"tcp4_gbps":null,"lat_p99_us":40,"cpu_cores":1}]}"#,
    )
    .unwrap();
    let svc = |f: &str, n: usize| {
        (1..=n)
            .map(|i| {
                format!(
                    "  - {{ id: {f}-{i}, tenant: x, ingress: h, egress: h, chain: [{{ function: {f} }}], \
                     sla: {{ max_latency_us: 500, min_throughput_gbps: 1 }} }}\n"
                )
            })
            .collect::<String>()
    };
    let services = format!("services:\n{}{}", svc("f1", 2), svc("f2", 2));
    std::fs::write(dir.path().join("svc.yaml"), services).unwrap();
    let (_up, url) = up_in(dir.path(), Path::new("infra.yaml"));
    let cli = |args: &[&str]| {
        let o = Command::new(NFX)
            .current_dir(dir.path())
            .env_remove("NFX_TOKEN")
            .env("NFX_URL", &url)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "nfx {args:?}: {}", text(&o));
        o
    };
    cli(&[
        "plan",
        "svc.yaml",
        "--export-placement",
        "p.json",
        "--export-chaining",
        "c.json",
    ]);
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("p.json")).unwrap()).unwrap();
    assert_eq!(p["devices"][0]["latency_us"], 40, "calibrated: {p}");
    assert_eq!(
        p["devices"][0]["throughput_gbps"], 20,
        "10 Gbit/s per core × 2"
    );
    assert_eq!(p["vnf_instances"].as_array().unwrap().len(), 4);
    let o = cli(&["place", "--input", "p.json", "--json"]);
    let placed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(placed["objective"], 3, "all four on big: {placed}");
    let o = cli(&["chain", "--input", "c.json", "--json"]);
    let chained: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(chained["answers"].as_array().unwrap().len(), 4);
    cli(&["deploy", "svc.yaml"]);
    let o = cli(&["plan", "--optimize", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["cost_now"], 10.0, "{plan}");
    assert_eq!(plan["cost_optimal"], 3.0, "{plan}");
    assert_eq!(plan["migrations"].as_array().unwrap().len(), 4, "{plan}");
    let o = cli(&["plan", "--optimize"]);
    assert!(
        text(&o).contains("cost now 10, optimal 3 (proven optimal"),
        "{}",
        text(&o)
    );
    let o = cli(&["deploy", "--optimize", "--json"]);
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(run["error"].is_null(), "{run}");
    assert_eq!(run["operations"].as_array().unwrap().len(), 4);
    let o = cli(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for i in v["instances"].as_array().unwrap() {
        assert_eq!(i["spec"]["device"], "big", "{i}");
    }
}

/// A 3-host infrastructure with the host names `nfx testbed up --hosts 3` gives (h1, h2,
/// h3 in a line), one software device each: what configs/demo's services are written for.
const HOSTS3: &str = "hosts:
  - { id: h1, cores: 2 }
  - { id: h2, cores: 2 }
  - { id: h3, cores: 2 }
devices:
  - { id: h1-sw0, host: h1, tier: software, functions: [firewall, nat, elephant, dpi], latency_us: 30, throughput_gbps: 10, cost: 1, cpu_cores: 2 }
  - { id: h2-sw0, host: h2, tier: software, functions: [firewall, nat, elephant, dpi], latency_us: 30, throughput_gbps: 10, cost: 1, cpu_cores: 2 }
  - { id: h3-sw0, host: h3, tier: software, functions: [firewall, nat, elephant, dpi], latency_us: 30, throughput_gbps: 10, cost: 1, cpu_cores: 2 }
  - { id: h1-acc0, host: h1, tier: accelerator, functions: [esp], latency_us: 20, throughput_gbps: 2, cost: 1, queue_pairs: 2, algorithms: [aes-128-gcm, aes-256-gcm, chacha20-poly1305] }
  - { id: h2-acc0, host: h2, tier: accelerator, functions: [esp], latency_us: 20, throughput_gbps: 2, cost: 1, queue_pairs: 2, algorithms: [aes-128-gcm, aes-256-gcm, chacha20-poly1305] }
  - { id: h3-acc0, host: h3, tier: accelerator, functions: [esp], latency_us: 20, throughput_gbps: 2, cost: 1, queue_pairs: 2, algorithms: [aes-128-gcm, aes-256-gcm, chacha20-poly1305] }
links:
  - { a: h1, b: h2, latency_us: 30 }
  - { a: h2, b: h3, latency_us: 30 }
";

/// Every `.yaml` file under `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(yaml_files(&p));
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A tunnel endpoint's config loads as docs/tunnel.md has a user run it: copied with the
/// secret files its comments tell them to make (mode 0600) beside it.
fn tunnel_config_loads(file: &Path, dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join(file.file_name().unwrap());
    std::fs::copy(file, &copy).unwrap();
    for (name, secret) in [
        ("tunnel.psk", "ab".repeat(32)),
        ("em.token", "cd".repeat(24)),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, secret).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    if let Err(e) = nfx_tunnel::config::Config::load(&copy) {
        panic!("{}: {e}", file.display());
    }
}

/// Every YAML file shipped in configs/ loads with the schema it is written in (a file no
/// check covers fails the test), and every shipped service file plans through the
/// controller (`nfx plan`): configs/examples on its own infrastructure, configs/demo on
/// the testbed's 3 hosts. (configs/demo also deploys for real in
/// `demo_runs_through_the_controller_and_cleans_up`, configs/examples/services.yaml in
/// examples_e2e.rs.)
#[test]
fn every_shipped_config_loads_and_its_services_plan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let hosts3 = dir.path().join("hosts3.yaml");
    std::fs::write(&hosts3, HOSTS3).unwrap();
    let mut plans: Vec<(std::path::PathBuf, Vec<std::path::PathBuf>)> = vec![
        (root.join("examples/infrastructure.yaml"), Vec::new()),
        (hosts3, Vec::new()),
    ];
    for file in yaml_files(&root) {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        match rel.as_str() {
            r if r.ends_with("infrastructure.yaml") => {
                if let Err(e) = nfx_model::Infrastructure::load(&file) {
                    panic!("{e}");
                }
            }
            "examples/services.yaml" | "examples/transcode.yaml" => plans[0].1.push(file),
            r if r.starts_with("demo/") => plans[1].1.push(file),
            r if r.starts_with("tunnel/") => {
                let d = dir.path().join(r.replace(['/', '.'], "-"));
                std::fs::create_dir_all(&d).unwrap();
                tunnel_config_loads(&file, &d);
            }
            other => panic!("configs/{other}: no check covers this file; add one here"),
        }
    }
    for (k, (infra, services)) in plans.iter().enumerate() {
        assert!(
            !services.is_empty(),
            "no service file for {}",
            infra.display()
        );
        let up_dir = dir.path().join(format!("up{k}"));
        std::fs::create_dir_all(&up_dir).unwrap();
        let (_up, url) = up_in(&up_dir, infra);
        for svc in services {
            let o = Command::new(NFX)
                .current_dir(&up_dir)
                .env_remove("NFX_TOKEN")
                .env("NFX_URL", &url)
                .arg("plan")
                .arg(svc)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}: {}", svc.display(), text(&o));
        }
    }
}
