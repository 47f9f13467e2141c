//! The experiment's outputs: `summary.json` (the documented field names, nothing else),
//! `details.json` (every sample, per-panel ratios, the run's conditions), `chart.png`
//! and `report.md` (nfx's figures beside HYPER's published ones).

use super::measure::{Deploy, MigrationRun};
use super::Fig4Case;
use nfx_chart::{Axes, Series, Style};
use nfx_testbed::bench::{median, BenchReport, CaseResult};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// HYPER's published figures (the paper's §VI and Fig. 4).
mod paper {
    /// Fig. 4(a): software firewall latency over the hardware one, without DPDK.
    pub const FIG4A_SW_OVER_HW_LAT: (f64, f64) = (119.0, 154.0);
    /// Fig. 4(a): the same with DPDK (average).
    pub const FIG4A_DPDK_OVER_HW_LAT: f64 = 5.4;
    /// Fig. 4(a): software throughput below hardware without DPDK (DPDK: about equal).
    pub const FIG4A_SW_THROUGHPUT_LOSS_PCT: f64 = 91.0;
    /// Fig. 4(c): hybrid chain latency decrease against the all-DPDK chain, %.
    pub const FIG4C_HYBRID_DECREASE_PCT: (f64, f64) = (40.0, 67.0);
    /// §VI-B: deploy + configure of a hardware firewall with 16 table entries, ms.
    pub const DEPLOY_MS: f64 = 6.1;
    /// §VI-C: flows migrated per second between two hardware firewalls.
    pub const MIGRATION_FLOWS_PER_S: f64 = 9_000.0;
}

/// Everything the report needs.
pub struct Inputs<'a> {
    /// The cases run, in order.
    pub cases: &'a [Fig4Case],
    /// Their measurements.
    pub bench: &'a BenchReport,
    /// Deploy samples.
    pub deploy: &'a Deploy,
    /// The migration.
    pub migration: &'a MigrationRun,
    /// `--quick`.
    pub quick: bool,
    /// Seconds per measurement.
    pub secs: u32,
    /// Latency rounds.
    pub lat_repeat: u32,
    /// Wall time of the whole run, s.
    pub elapsed_s: f64,
    /// /proc/loadavg at the end.
    pub loadavg: String,
}

/// One case in `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRow {
    /// Benchmark case name.
    pub name: String,
    /// `software`, `table`, `hybrid` or `kernel`.
    pub tier: String,
    /// sockperf TCP ping-pong p50 (half round trip), µs.
    pub lat_p50_us: Option<f64>,
    /// Its p99, µs.
    pub lat_p99_us: Option<f64>,
    /// iperf3 TCP, one stream, Gbit/s.
    pub tcp1_gbps: Option<f64>,
}

/// Deploy time per tier (medians), ms.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeployMs {
    /// A software worker with the 16-rule firewall started until it answers.
    pub software: Option<f64>,
    /// The 16-rule firewall installed (deploy + configure) on a prepared table device.
    pub table: Option<f64>,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Every case.
    pub cases: Vec<CaseRow>,
    /// Fig. 4(c): hybrid chain p50 over the all-software chain's.
    pub hybrid_vs_software_lat_p50: Option<f64>,
    /// Fig. 4(b): table-tier 3-VNF chain p50 over the software chain's.
    pub table_vs_software_lat_p50: Option<f64>,
    /// Deploy time per tier.
    pub deploy_ms: DeployMs,
    /// Connections (firewall state + NAT mapping) migrated per second.
    pub migration_flows_per_s: f64,
}

/// One panel of Fig. 4: the faster tier over software.
#[derive(Debug, Clone, Serialize)]
pub struct PanelRatios {
    /// `a`, `b` or `c`.
    pub panel: String,
    /// The software case.
    pub software: String,
    /// The table-tier or hybrid case.
    pub other: String,
    /// p50 latency, other / software.
    pub lat_p50: Option<f64>,
    /// p99 latency, other / software.
    pub lat_p99: Option<f64>,
    /// Latency each adds over kernel forwarding (p50), other / software.
    pub lat_p50_over_kernel: Option<f64>,
    /// 1-stream TCP throughput, other / software.
    pub tcp1: Option<f64>,
}

/// `details.json`.
#[derive(Debug, Serialize)]
struct Details<'a> {
    panels: Vec<PanelRatios>,
    cases: Vec<&'a CaseResult>,
    deploy: &'a Deploy,
    table_prepare_ms: Option<f64>,
    migration: &'a MigrationRun,
    quick: bool,
    secs: u32,
    lat_repeat: u32,
    elapsed_s: f64,
    loadavg: &'a str,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn result<'a>(i: &'a Inputs<'_>, name: &str) -> Option<&'a CaseResult> {
    i.bench.cases.iter().find(|c| c.name == name)
}

/// The ratios of each panel.
pub fn panels(i: &Inputs<'_>) -> Vec<PanelRatios> {
    ["a", "b", "c"]
        .iter()
        .filter_map(|p| {
            let sw = i
                .cases
                .iter()
                .find(|c| c.panel == *p && c.tier == "software")?;
            let other = i
                .cases
                .iter()
                .find(|c| c.panel == *p && c.tier != "software")?;
            let (s, o) = (result(i, sw.name), result(i, other.name));
            let get = |c: Option<&CaseResult>, f: fn(&CaseResult) -> Option<f64>| c.and_then(f);
            Some(PanelRatios {
                panel: p.to_string(),
                software: sw.name.into(),
                other: other.name.into(),
                lat_p50: ratio(get(o, |c| c.lat_p50_us), get(s, |c| c.lat_p50_us)),
                lat_p99: ratio(get(o, |c| c.lat_p99_us), get(s, |c| c.lat_p99_us)),
                lat_p50_over_kernel: ratio(
                    get(o, |c| c.lat_p50_over_kernel_us),
                    get(s, |c| c.lat_p50_over_kernel_us),
                ),
                tcp1: ratio(get(o, |c| c.tcp1_gbps), get(s, |c| c.tcp1_gbps)),
            })
        })
        .collect()
}

/// Builds the summary from the inputs.
pub fn summary(i: &Inputs<'_>) -> Summary {
    let ps = panels(i);
    let panel = |p: &str| ps.iter().find(|r| r.panel == p).and_then(|r| r.lat_p50);
    Summary {
        cases: i
            .cases
            .iter()
            .map(|c| {
                let r = result(i, c.name);
                CaseRow {
                    name: c.name.into(),
                    tier: c.tier.into(),
                    lat_p50_us: r.and_then(|r| r.lat_p50_us),
                    lat_p99_us: r.and_then(|r| r.lat_p99_us),
                    tcp1_gbps: r.and_then(|r| r.tcp1_gbps),
                }
            })
            .collect(),
        hybrid_vs_software_lat_p50: panel("c"),
        table_vs_software_lat_p50: panel("b"),
        deploy_ms: DeployMs {
            software: median(&i.deploy.software_ms),
            table: median(&i.deploy.table_ms),
        },
        migration_flows_per_s: i.migration.connections_per_s,
    }
}

/// Writes every output into `dir` and returns the summary.
pub fn write(dir: &Path, i: &Inputs<'_>) -> anyhow::Result<Summary> {
    let s = summary(i);
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&s)? + "\n",
    )?;
    let details = Details {
        panels: panels(i),
        cases: i.bench.cases.iter().collect(),
        deploy: i.deploy,
        table_prepare_ms: median(&i.deploy.table_prepare_ms),
        migration: i.migration,
        quick: i.quick,
        secs: i.secs,
        lat_repeat: i.lat_repeat,
        elapsed_s: i.elapsed_s,
        loadavg: &i.loadavg,
    };
    std::fs::write(
        dir.join("details.json"),
        serde_json::to_string_pretty(&details)? + "\n",
    )?;
    chart(&dir.join("chart.png"), &s).map_err(anyhow::Error::msg)?;
    std::fs::write(dir.join("report.md"), markdown(i, &s))?;
    Ok(s)
}

/// Latency and throughput per panel: x = 1, 2, 3 for Fig. 4(a), (b), (c).
fn chart(path: &Path, s: &Summary) -> Result<(), String> {
    let fig = nfx_chart::Figure::new(
        path,
        (1000, 1000),
        "nfx experiment hyper: HYPER Fig. 4 on the namespace testbed (x: 1 = one VNF, 2 = 3-VNF chain, 3 = hybrid chain)",
        16,
        3,
    )?;
    let panels = &fig.panels;
    let pick = |faster: bool, f: fn(&CaseRow) -> Option<f64>| -> Vec<(f64, f64)> {
        s.cases
            .iter()
            .filter(|c| c.tier != "kernel" && (c.tier != "software") == faster)
            .enumerate()
            .filter_map(|(k, c)| f(c).map(|v| (k as f64 + 1.0, v)))
            .collect()
    };
    let pair = |f: fn(&CaseRow) -> Option<f64>| {
        [false, true].map(|faster| Series {
            name: if faster {
                "table tier / hybrid"
            } else {
                "software"
            }
            .into(),
            points: pick(faster, f),
            style: Style::Points,
        })
    };
    let x = "HYPER Fig. 4 panel";
    for (area, caption, y, f) in [
        (
            &panels[0],
            "latency p50 (sockperf TCP ping-pong, half round trip)",
            "µs",
            (|c: &CaseRow| c.lat_p50_us) as fn(&CaseRow) -> Option<f64>,
        ),
        (&panels[1], "latency p99", "µs", |c: &CaseRow| c.lat_p99_us),
        (
            &panels[2],
            "throughput (iperf3 TCP, 1 stream)",
            "Gbit/s",
            |c: &CaseRow| c.tcp1_gbps,
        ),
    ] {
        nfx_chart::panel(area, Axes { caption, x, y }, &pair(f))?;
    }
    fig.present()
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.prec$}"))
}

/// The short table printed at the end of a run.
pub fn console(s: &Summary, i: &Inputs<'_>) -> String {
    let mut o = format!(
        "{:<22} {:<9} {:>9} {:>9} {:>10}\n",
        "case", "tier", "p50 µs", "p99 µs", "tcp1 Gb/s"
    );
    for c in &s.cases {
        let _ = writeln!(
            o,
            "{:<22} {:<9} {:>9} {:>9} {:>10}",
            c.name,
            c.tier,
            f(c.lat_p50_us, 1),
            f(c.lat_p99_us, 1),
            f(c.tcp1_gbps, 2)
        );
    }
    let _ = writeln!(
        o,
        "hybrid/software p50 {} (HYPER 0.33–0.60); table/software p50 (3-VNF chain) {}",
        f(s.hybrid_vs_software_lat_p50, 2),
        f(s.table_vs_software_lat_p50, 2)
    );
    let _ = writeln!(
        o,
        "deploy ms: software {} table {} (HYPER {}); migration {:.0} connections/s (HYPER ~{:.0} flows/s)",
        f(s.deploy_ms.software, 1),
        f(s.deploy_ms.table, 3),
        paper::DEPLOY_MS,
        s.migration_flows_per_s,
        paper::MIGRATION_FLOWS_PER_S
    );
    let _ = writeln!(o, "load average: {}", i.loadavg);
    o
}

fn markdown(i: &Inputs<'_>, s: &Summary) -> String {
    let mut m = String::new();
    let ps = panels(i);
    let p = |x: &str| ps.iter().find(|r| r.panel == x);
    let _ = writeln!(
        m,
        "# nfx experiment hyper — HYPER Fig. 4 on the namespace testbed\n\n\
         HYPER (\"HYPER: A Hybrid High-Performance Framework for Network Function \
         Virtualization\") measured ONetCard hardware VNFs against VM software VNFs with \
         and without DPDK, using an Ixia tester. nfx reruns the comparison on veth links \
         between network namespaces: the *table tier* is nfx's eBPF implementation of the \
         firewall, NAT and elephant detection (tc programs over bounded maps, in the \
         kernel), the *software* tier is an `nfx run` worker (AF_PACKET), and latency is \
         a sockperf TCP ping-pong src → edge → dst (half round trip, including both end \
         hosts' stacks), so ratios are diluted by the end hosts' share, which HYPER's \
         tester did not carry.\n"
    );
    let _ = writeln!(
        m,
        "Run: {} s per measurement, {} latency round(s){}; {:.0} s in all; load average at \
         the end `{}` (a shared 2-core machine: other work ran beside it).\n",
        i.secs,
        i.lat_repeat,
        if i.quick { ", `--quick`" } else { "" },
        i.elapsed_s,
        i.loadavg
    );
    let _ = writeln!(
        m,
        "## Cases\n\n| case | tier | Fig. 4 | p50 µs | p99 µs | p50 over kernel µs | TCP 1 stream Gbit/s |\n|---|---|---|---|---|---|---|"
    );
    for c in i.cases {
        let r = result(i, c.name);
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.name,
            c.tier,
            c.panel,
            f(r.and_then(|r| r.lat_p50_us), 1),
            f(r.and_then(|r| r.lat_p99_us), 1),
            f(r.and_then(|r| r.lat_p50_over_kernel_us), 1),
            f(r.and_then(|r| r.tcp1_gbps), 2)
        );
    }
    let pct = |r: Option<f64>| r.map_or("–".into(), |r| format!("{:+.0} %", (r - 1.0) * 100.0));
    let _ = writeln!(
        m,
        "\n## nfx beside HYPER\n\n| figure | nfx | HYPER |\n|---|---|---|"
    );
    if let Some(a) = p("a") {
        let _ = writeln!(
            m,
            "| (a) one VNF (firewall): software latency over table tier | {}× (p50) | {}–{}× without DPDK, {}× with DPDK |",
            f(a.lat_p50.map(|r| 1.0 / r), 2),
            paper::FIG4A_SW_OVER_HW_LAT.0,
            paper::FIG4A_SW_OVER_HW_LAT.1,
            paper::FIG4A_DPDK_OVER_HW_LAT
        );
        let _ = writeln!(
            m,
            "| (a) software throughput against the table tier | {} | −{} % without DPDK, about equal with DPDK |",
            pct(a.tcp1.map(|r| 1.0 / r)),
            paper::FIG4A_SW_THROUGHPUT_LOSS_PCT
        );
    }
    if let Some(b) = p("b") {
        let _ = writeln!(
            m,
            "| (b) 3-VNF chain: table-tier latency against software | {} (p50), {} (p99) | lower latency and jitter than software with or without DPDK; throughput about equal to DPDK |",
            pct(b.lat_p50),
            pct(b.lat_p99)
        );
    }
    if let Some(c) = p("c") {
        let _ = writeln!(
            m,
            "| (c) hybrid chain latency against all-software | {} (p50), {} (p99){} | −{} % to −{} % against all-DPDK |",
            pct(c.lat_p50),
            pct(c.lat_p99),
            c.lat_p50_over_kernel.map_or(String::new(), |r| format!(
                "; added over kernel forwarding: {}",
                pct(Some(r))
            )),
            paper::FIG4C_HYBRID_DECREASE_PCT.0,
            paper::FIG4C_HYBRID_DECREASE_PCT.1
        );
    }
    let _ = writeln!(
        m,
        "| deploy + configure of a firewall with 16 entries | table tier {} ms (median of {}; the device was programmed ahead in {} ms; attaching it to its two ports took {} ms more); a software worker starts in {} ms | {} ms (hardware) |",
        f(s.deploy_ms.table, 3),
        i.deploy.table_ms.len(),
        f(median(&i.deploy.table_prepare_ms), 0),
        f(median(&i.deploy.table_attach_ms), 1),
        f(s.deploy_ms.software, 1),
        paper::DEPLOY_MS
    );
    let mg = i.migration;
    let _ = writeln!(
        m,
        "| migration rate | {:.0} connections/s ({:.0} records/s: {} connections, each a firewall flow and a NAT mapping, in {:.1} ms; switch {:.3} ms; {} mapping(s) changed) | ~{:.0} flows/s (firewall states) |",
        mg.connections_per_s,
        mg.records_per_s,
        mg.connections,
        mg.total_ms,
        mg.switch_ms,
        mg.remapped,
        paper::MIGRATION_FLOWS_PER_S
    );
    let _ = writeln!(
        m,
        "\nThe ratios are of medians measured in the same run; `details.json` holds every \
         sample. Migration: the connections were installed through the old chain's own \
         program (BPF_PROG_TEST_RUN), then `TableChain::migrate_to` copied the state to a \
         freshly deployed chain, switched every hook atomically and copied what was created \
         meanwhile (docs/dataplane.md, \"Table-tier migration\")."
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs_with(cases: &[Fig4Case], bench: &BenchReport, f: impl FnOnce(&Inputs<'_>)) {
        let deploy = Deploy {
            software_ms: vec![40.0, 30.0, 50.0],
            table_ms: vec![0.2, 0.1, 0.3],
            table_attach_ms: vec![10.0],
            table_prepare_ms: vec![300.0],
        };
        let migration = MigrationRun {
            connections: 100,
            records: 200,
            after_switch: 0,
            remapped: 0,
            copy_ms: 1.0,
            switch_ms: 0.1,
            total_ms: 2.0,
            connections_per_s: 50_000.0,
            records_per_s: 100_000.0,
            fill_s: 0.1,
        };
        f(&Inputs {
            cases,
            bench,
            deploy: &deploy,
            migration: &migration,
            quick: true,
            secs: 1,
            lat_repeat: 1,
            elapsed_s: 40.0,
            loadavg: "1.00 1.00 1.00 1/100 1".into(),
        });
    }

    fn case(name: &str, p50: f64, tcp1: f64) -> CaseResult {
        CaseResult {
            name: name.into(),
            lat_p50_us: Some(p50),
            lat_p99_us: Some(p50 * 2.0),
            tcp1_gbps: Some(tcp1),
            ..Default::default()
        }
    }

    #[test]
    fn summary_has_exactly_the_agreed_names_and_the_panel_ratios() {
        let bench = BenchReport {
            cases: vec![
                case("nfx-fw", 40.0, 2.0),
                case("nfx-table-fw", 20.0, 4.0),
                case("nfx-fw-nat-ele", 50.0, 2.0),
                case("nfx-table-fw-nat-ele", 25.0, 3.0),
                case("nfx-chain", 60.0, 1.5),
            ],
            ..Default::default()
        };
        inputs_with(&super::super::CASES, &bench, |i| {
            let s = summary(i);
            let v = serde_json::to_value(&s).unwrap();
            let keys = |o: &serde_json::Value| {
                let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(
                keys(&v),
                [
                    "cases",
                    "deploy_ms",
                    "hybrid_vs_software_lat_p50",
                    "migration_flows_per_s",
                    "table_vs_software_lat_p50",
                ]
            );
            assert_eq!(
                keys(&v["cases"][0]),
                ["lat_p50_us", "lat_p99_us", "name", "tcp1_gbps", "tier"]
            );
            assert_eq!(keys(&v["deploy_ms"]), ["software", "table"]);
            assert_eq!(v["cases"].as_array().unwrap().len(), 6);
            assert_eq!(v["table_vs_software_lat_p50"], 0.5);
            // The hybrid case failed: null, not a made-up number.
            assert!(v["hybrid_vs_software_lat_p50"].is_null());
            assert!(v["cases"][5]["lat_p50_us"].is_null());
            assert_eq!(v["deploy_ms"]["software"], 40.0);
            assert_eq!(v["deploy_ms"]["table"], 0.2);
            assert_eq!(v["migration_flows_per_s"], 50_000.0);
            let a = &panels(i)[0];
            assert_eq!((a.lat_p50, a.tcp1), (Some(0.5), Some(2.0)));
            let md = markdown(i, &s);
            assert!(
                md.contains(
                    "| (a) one VNF (firewall): software latency over table tier | 2.00× (p50)"
                ),
                "{md}"
            );
            assert!(
                md.contains("| (b) 3-VNF chain: table-tier latency against software | -50 % (p50)"),
                "{md}"
            );
            assert!(md.contains("6.1 ms (hardware)"), "{md}");
            assert!(
                !md.contains("/work/"),
                "the report names the paper, not a path"
            );
        });
    }

    #[test]
    fn chart_is_a_png() {
        let bench = BenchReport {
            cases: vec![case("nfx-chain", 60.0, 1.5), case("nfx-hybrid", 30.0, 2.0)],
            ..Default::default()
        };
        inputs_with(&super::super::CASES, &bench, |i| {
            let dir = nfx_testbed::tempfile::tempdir().unwrap();
            let s = write(dir.path(), i).unwrap();
            assert_eq!(s.hybrid_vs_software_lat_p50, Some(0.5));
            let png = std::fs::read(dir.path().join("chart.png")).unwrap();
            assert_eq!(&png[1..4], b"PNG");
            for f in ["summary.json", "details.json", "report.md"] {
                assert!(dir.path().join(f).exists(), "{f}");
            }
        });
    }
}
