//! `nfx report --from` on the committed fixtures (the summaries of real quick runs,
//! docs/experiments/report.md): a self-contained page, claims.json with the agreed names,
//! claims judged from the figures both ways, and a failed experiment reported as such.
//! No root, no namespaces: the experiments themselves are tested in their own files.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

const EXPERIMENTS: [&str; 5] = [
    "hyper",
    "accel-switch",
    "edge-video",
    "vpn-ladder",
    "energy",
];

/// A 1×1 PNG standing in for each experiment's chart.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// A row of claims.json; unknown names are an error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    paper: String,
    claim: String,
    paper_value: String,
    nfx_value: Option<String>,
    holds: bool,
    reason: Option<String>,
}

/// The fixtures copied into a fresh directory, each with a chart.
fn runs() -> (nfx_testbed::tempfile::TempDir, PathBuf) {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report");
    let runs = dir.path().join("runs");
    for e in EXPERIMENTS {
        std::fs::create_dir_all(runs.join(e)).unwrap();
        for f in std::fs::read_dir(fixtures.join(e)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), runs.join(e).join(f.file_name())).unwrap();
        }
        std::fs::write(runs.join(e).join("chart.png"), PNG).unwrap();
    }
    (dir, runs)
}

fn report(runs: &Path, out: &Path, extra: &[&str]) -> (Output, String, Vec<Claim>) {
    let o = Command::new(NFX)
        .arg("report")
        .arg("--from")
        .arg(runs)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let claims: Vec<Claim> =
        serde_json::from_str(&std::fs::read_to_string(out.join("claims.json")).unwrap()).unwrap();
    (o, html, claims)
}

fn find<'a>(claims: &'a [Claim], paper: &str, claim: &str) -> &'a Claim {
    claims
        .iter()
        .find(|c| c.paper.starts_with(paper) && c.claim.starts_with(claim))
        .unwrap_or_else(|| panic!("no claim {paper} / {claim} in {claims:?}"))
}

/// Every value of `attr="…"` in the page.
fn attr_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let pat = format!("{attr}=\"");
    html.match_indices(&pat)
        .map(|(i, _)| {
            let rest = &html[i + pat.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
fn the_page_is_self_contained_and_claims_json_has_every_paper() {
    let (dir, runs) = runs();
    let out = dir.path().join("report");
    let (o, html, claims) = report(&runs, &out, &[]);
    assert!(o.status.success(), "{o:?}");
    for v in attr_values(&html, "src")
        .into_iter()
        .chain(attr_values(&html, "href"))
    {
        assert!(
            v.starts_with("data:image/png;base64,") || v.starts_with('#'),
            "an external reference: {v}"
        );
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert_eq!(html.matches("data:image/png;base64,").count(), 5);
    assert_eq!(html.matches("class=\"model\">Modelled:").count(), 5);
    for needle in ["kernel", "load average", "cores", "energy source: model"] {
        assert!(html.contains(needle), "{needle} missing from the page");
    }
    for e in EXPERIMENTS {
        assert!(
            out.join(e).join("summary.json").is_file(),
            "{e} not collected"
        );
        assert!(html.contains(&format!("<section id=\"{e}\">")), "{e}");
    }
    let papers: std::collections::BTreeSet<&str> =
        claims.iter().map(|c| c.paper.as_str()).collect();
    assert_eq!(papers.len(), 5, "{papers:?}");
    assert!(claims.len() >= 20, "{claims:?}");
    for c in &claims {
        assert!(!c.claim.is_empty() && !c.paper_value.is_empty(), "{c:?}");
        if c.nfx_value.is_none() {
            assert!(!c.holds && c.reason.is_some(), "{c:?}");
        }
        let row = format!(
            "<td>{}</td>",
            c.nfx_value.as_deref().unwrap_or("not measured")
        );
        assert!(html.contains(&row), "{row} not on the page");
    }
    assert!(claims.iter().any(|c| c.holds) && claims.iter().any(|c| !c.holds));
}

/// Sets `key` of `exp`'s summary to `v`.
fn set(runs: &Path, exp: &str, key: &str, v: f64) {
    let p = runs.join(exp).join("summary.json");
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    s[key] = v.into();
    std::fs::write(&p, s.to_string()).unwrap();
}

#[test]
fn a_claim_holds_or_not_from_the_figure() {
    let (dir, runs) = runs();
    for (ratio, holds) in [(0.5, true), (0.9, false)] {
        set(&runs, "hyper", "hybrid_vs_software_lat_p50", ratio);
        set(
            &runs,
            "vpn-ladder",
            "a2_over_a1",
            if holds { 5.0 } else { 4.99 },
        );
        let out = dir.path().join(format!("report-{ratio}"));
        let (o, _, claims) = report(&runs, &out, &[]);
        assert!(o.status.success(), "{o:?}");
        let c = find(&claims, "HYPER", "(4c)");
        assert_eq!(c.nfx_value.as_deref(), Some(&*format!("{ratio:.2}×")));
        assert_eq!(c.holds, holds, "{c:?}");
        let c = find(&claims, "VPN+", "A2/A1");
        assert_eq!(c.holds, holds, "{c:?}");
    }
}

#[test]
fn a_missing_summary_fails_its_experiment_and_still_writes_the_page() {
    let (dir, runs) = runs();
    std::fs::remove_file(runs.join("energy/summary.json")).unwrap();
    let out = dir.path().join("report");
    let (o, html, claims) = report(&runs, &out, &["--only", "hyper,energy"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("energy"), "{err}");
    let energy: Vec<&Claim> = claims
        .iter()
        .filter(|c| c.paper.starts_with("Energy"))
        .collect();
    assert!(!energy.is_empty());
    for c in energy {
        assert!(c.nfx_value.is_none() && !c.holds, "{c:?}");
        assert!(
            c.reason.as_deref().unwrap().contains("summary.json"),
            "{c:?}"
        );
    }
    let skipped = claims
        .iter()
        .filter(|c| c.reason.as_deref() == Some("skipped (not in --only)"))
        .count();
    assert!(skipped >= 10, "{claims:?}");
    assert!(find(&claims, "HYPER", "(4b)").nfx_value.is_some());
    assert!(html.contains("<b>failed</b>") && html.contains("skipped (not in --only)"));
}
