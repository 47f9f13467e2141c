//! `nfx experiment edge-video --quick` end to end on its own testbed: every case
//! (No/SW/HW-VNF × TCP/UDP × 128/256/512-byte chunks) is in summary.json with its means
//! and 95 % confidence widths, every chunk arrived and matched the clip, every stream
//! decoded with ffmpeg, and the outputs are written. Structure and sanity, not speed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn edge_video_quick() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let out = dir.path().join("edge");
    let mut cmd = Command::new(NFX);
    cmd.args([
        "experiment",
        "edge-video",
        "--quick",
        "--prefix",
        "nfxe2e-edge-",
    ])
    .args(["--subnet-base", "164", "--out"])
    .arg(&out)
    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let started = Instant::now();
    let o = nfx_testbed::process::output_within(cmd, Duration::from_secs(120)).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    eprintln!("quick edge-video took {:?}", started.elapsed());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let cases = s["cases"].as_array().unwrap();
    let mut names: Vec<(String, String, u64)> = cases
        .iter()
        .map(|c| {
            (
                c["vnf"].as_str().unwrap().to_string(),
                c["proto"].as_str().unwrap().to_string(),
                c["chunk"].as_u64().unwrap(),
            )
        })
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 18, "{s}");
    let num = |v: &serde_json::Value| v.as_f64().filter(|x| x.is_finite());
    for c in cases {
        assert_eq!(c["streams"], 1, "{c}");
        for k in ["exec_ms_mean", "e2e_ms_mean"] {
            assert!(num(&c[k]).is_some_and(|x| x > 0.0), "{k} in {c}\n{text}");
        }
        for k in ["exec_ms_ci95", "e2e_ms_ci95"] {
            assert!(num(&c[k]).is_some_and(|x| x >= 0.0), "{k} in {c}");
        }
        assert_eq!(
            (&c["lost_chunks"], &c["corrupt_chunks"]),
            (&0.into(), &0.into()),
            "{c}"
        );
        assert!(c["energy_j"].is_null(), "energy is not measured: {c}");
    }
    assert!(num(&s["hw_vs_sw_exec"]).is_some_and(|x| x > 0.0), "{s}");
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("details.json")).unwrap()).unwrap();
    let runs = d["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 36, "2 runs of each case");
    assert!(runs.iter().all(|r| r["decoded"] == true), "{d}");
    assert!(d["accelerator"].as_str().unwrap().starts_with("modelled:"));
    let png = std::fs::read(out.join("chart.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in ["Table 2", "24.45", "modelled", "load average", "11–13×"] {
        assert!(
            md.contains(needle),
            "{needle} missing from report.md:\n{md}"
        );
    }
}
