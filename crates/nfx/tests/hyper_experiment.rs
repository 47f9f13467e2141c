//! `nfx experiment hyper --quick` end to end on its own testbed, run the way `nfx report
//! --only hyper --quick` runs it (with the report's `--prefix` and `--subnet-base` passed
//! on): summary.json has exactly the agreed names with a measurement in every field,
//! chart.png is a PNG and report.md puts HYPER's figures beside nfx's; the report page
//! and claims are written and no namespace of the prefix is left. Structure and sanity,
//! not speed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn quick_hyper_experiment_writes_the_agreed_summary() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let out = report.join("hyper");
    let mut cmd = Command::new(NFX);
    cmd.args([
        "report",
        "--only",
        "hyper",
        "--quick",
        "--prefix",
        "nfxe2e-hyper-",
    ])
    .args(["--subnet-base", "161", "--out"])
    .arg(&report)
    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let started = Instant::now();
    let o = nfx_testbed::process::output_within(cmd, Duration::from_secs(300)).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let log = std::fs::read_to_string(out.join("run.log")).unwrap_or_default();
    assert!(o.status.success(), "{text}\n{log}");
    eprintln!("quick hyper experiment took {:?}", started.elapsed());
    let command = std::fs::read_to_string(out.join("command.txt")).unwrap();
    assert!(
        command.contains("--prefix nfxe2e-hyper- --subnet-base 161"),
        "{command}"
    );
    for f in ["index.html", "claims.json"] {
        assert!(report.join(f).exists(), "{f} missing");
    }
    for ns in nfx_testbed::netns::list() {
        assert!(
            !ns.starts_with("nfxe2e-hyper-"),
            "namespace {ns} left behind"
        );
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let mut keys: Vec<&String> = s.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "cases",
            "deploy_ms",
            "hybrid_vs_software_lat_p50",
            "migration_flows_per_s",
            "table_vs_software_lat_p50"
        ],
        "{s}"
    );
    let cases = s["cases"].as_array().unwrap();
    let names: Vec<(&str, &str)> = cases
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["tier"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("nfx-fw", "software"),
            ("nfx-table-fw", "table"),
            ("nfx-fw-nat-ele", "software"),
            ("nfx-table-fw-nat-ele", "table"),
            ("nfx-chain", "software"),
            ("nfx-hybrid", "hybrid"),
        ]
    );
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    for c in cases {
        for k in ["lat_p50_us", "lat_p99_us", "tcp1_gbps"] {
            assert!(positive(&c[k]), "{k} in {c}\n{text}");
        }
    }
    for v in [
        &s["hybrid_vs_software_lat_p50"],
        &s["table_vs_software_lat_p50"],
        &s["deploy_ms"]["software"],
        &s["deploy_ms"]["table"],
        &s["migration_flows_per_s"],
    ] {
        assert!(positive(v), "{s}");
    }
    // Installing 16 rules is map updates; starting a worker is a process.
    assert!(
        s["deploy_ms"]["table"].as_f64() < s["deploy_ms"]["software"].as_f64(),
        "{s}"
    );
    let png = std::fs::read(out.join("chart.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in ["HYPER", "6.1 ms", "9000 flows/s", "load average"] {
        assert!(
            md.contains(needle),
            "{needle} missing from report.md:\n{md}"
        );
    }
    let details: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("details.json")).unwrap()).unwrap();
    assert_eq!(details["migration"]["remapped"], 0, "{details}");
}
