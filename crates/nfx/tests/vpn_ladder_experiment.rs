//! `nfx experiment vpn-ladder --quick` end to end on its own testbed: every rung with 1
//! and 8 streams is in summary.json with traffic, retransmissions counted and CPU read
//! from the kernel, both ratios computed, chart.png a PNG and report.md beside the
//! paper's tables. Structure and sanity, not speed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn vpn_ladder_quick() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let out = dir.path().join("vpn");
    let mut cmd = Command::new(NFX);
    cmd.args([
        "experiment",
        "vpn-ladder",
        "--quick",
        "--prefix",
        "nfxe2e-vpn-",
    ])
    .args(["--subnet-base", "163", "--out"])
    .arg(&out)
    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let started = Instant::now();
    // The quick ladder's budget: killed (and failed) past a minute.
    let o = nfx_testbed::process::output_within(cmd, Duration::from_secs(60)).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    eprintln!("quick vpn ladder took {:?}", started.elapsed());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rungs = s["rungs"].as_array().unwrap();
    let names: Vec<(&str, u64)> = rungs
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["streams"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("A", 1),
            ("A", 8),
            ("A1", 1),
            ("A1", 8),
            ("A2", 1),
            ("A2", 8),
            ("A3", 1),
            ("A3", 8)
        ],
        "{s}"
    );
    let num = |v: &serde_json::Value| v.as_f64().filter(|x| x.is_finite());
    for r in rungs {
        for k in ["send_gbps", "recv_gbps", "cpu_s_per_gb"] {
            assert!(num(&r[k]).is_some_and(|x| x > 0.0), "{k} in {r}\n{text}");
        }
        assert!(r["retransmits"].is_u64(), "{r}");
        let (u, y) = (num(&r["cpu_user_pct"]), num(&r["cpu_sys_pct"]));
        assert!(
            u.is_some_and(|u| u >= 0.0) && y.is_some_and(|y| y >= 0.0),
            "{r}"
        );
        assert!(u.unwrap() + y.unwrap() > 0.0, "no CPU read for {r}");
    }
    for k in ["a2_over_a1", "a3_cpu_per_gb_over_a2"] {
        assert!(num(&s[k]).is_some_and(|x| x > 0.0), "{k}: {s}");
    }
    assert_eq!(s["load_average"].as_array().unwrap().len(), 3, "{s}");
    assert!(
        s["accelerator"].as_str().unwrap().starts_with("modelled:"),
        "{s}"
    );
    let png = std::fs::read(out.join("chart.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "Tables 1–2",
        "0.548",
        "8.973",
        "modelled",
        "load average",
        "holds?",
    ] {
        assert!(
            md.contains(needle),
            "{needle} missing from report.md:\n{md}"
        );
    }
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("details.json")).unwrap()).unwrap();
    let samples = d["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 8, "{d}");
    // The tunnel rungs' endpoints and A3's device were measured, not left at zero.
    for smp in samples.iter().filter(|x| x["rung"] != "A") {
        let t = &smp["src"]["tunnel"];
        assert!(
            num(&t["user_s"]).unwrap() + num(&t["sys_s"]).unwrap() > 0.0,
            "{smp}"
        );
    }
    assert!(samples
        .iter()
        .filter(|x| x["rung"] == "A3")
        .all(|x| x["device"].is_object()));
}
