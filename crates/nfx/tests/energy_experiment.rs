//! `nfx experiment energy --quick` end to end on its own testbed: every output is
//! written and sane (energy > 0 with its source, four cases, the manager's decisions
//! recorded). Structure and sanity only, not speed. Needs root and ffmpeg
//! (scripts/deps.sh installs it).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn quick_energy_experiment_writes_sane_outputs() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let out = dir.path().join("energy");
    let mut cmd = Command::new(NFX);
    cmd.args([
        "experiment",
        "energy",
        "--quick",
        // Shorter than --quick's own ramp: this checks structure, not the figures.
        "--step-s",
        "1",
        "--streams",
        "4",
        "--prefix",
        "nfxe2e-energy-",
    ])
    .args(["--subnet-base", "158", "--out"])
    .arg(&out)
    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let started = Instant::now();
    let o = nfx_testbed::process::output_within(cmd, Duration::from_secs(1200)).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    eprintln!("quick energy experiment took {:?}", started.elapsed());
    for f in [
        "timeseries.csv",
        "summary.json",
        "chart.png",
        "report.md",
        "operations.jsonl",
    ] {
        assert!(out.join(f).exists(), "{f} missing\n{text}");
    }
    assert!(
        !out.join("work").exists(),
        "the work directory was left behind"
    );
    let png = std::fs::read(out.join("chart.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let has_rapl = Path::new("/sys/class/powercap/intel-rapl:0/energy_uj").exists();
    if !has_rapl {
        assert_eq!(s["energy_source"], "model", "{s}");
    }
    let cases = s["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["kernel", "nfx-busy", "nfx-adaptive", "nfx-adaptive+manager"]
    );
    for c in cases {
        for k in ["energy_j", "delivered_gbit", "j_per_gbit"] {
            let v = c[k].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{k} = {v} in {c}");
        }
        assert!(c["sla_violations"].as_u64().is_some(), "{c}");
    }
    let mean = |i: usize| cases[i]["mean_w"].as_f64().unwrap();
    // A busy poller spins a core whatever the load; an adaptive one sleeps when idle.
    assert!(
        mean(1) > mean(2),
        "busy {} W vs adaptive {} W",
        mean(1),
        mean(2)
    );
    let idle = s["idle_core_pct_adaptive"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&idle), "{idle}");
    for k in ["manager_energy_vs_busy", "manager_throughput_vs_busy"] {
        assert!(s[k].as_f64().is_some_and(|v| v > 0.0), "{k}: {s}");
    }
    // The manager's savings against adaptive alone (a share: below 1, negative when it
    // cost more).
    for k in [
        "manager_dynamic_saving_vs_adaptive",
        "manager_nat_cpu_saving_vs_adaptive",
    ] {
        assert!(s[k].as_f64().is_some_and(|v| v < 1.0), "{k}: {s}");
    }
    let csv = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    for n in &names {
        assert!(
            csv.lines().any(|l| l.starts_with(&format!("{n},"))),
            "no rows for {n}"
        );
    }
    assert!(csv
        .lines()
        .skip(1)
        .all(|l| l.contains(",model,") || l.contains(",rapl,")));
    let ops = std::fs::read_to_string(out.join("operations.jsonl")).unwrap();
    assert!(ops.lines().count() > 0, "the power manager decided nothing");
    for l in ops.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(!v["action"]["reason"].as_str().unwrap().is_empty(), "{l}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("source **"), "{report}");
    for ns in nfx_testbed::netns::list() {
        assert!(
            !ns.starts_with("nfxe2e-energy-"),
            "namespace {ns} left behind"
        );
    }
}
