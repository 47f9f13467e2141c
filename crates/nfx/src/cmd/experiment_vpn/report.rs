//! The ladder's outputs: `summary.json` (the documented field names, plus the load average
//! and what the accelerator is), `details.json` (every sample, per-end CPU, per-round
//! ratios), `chart.png` and `report.md` (nfx's rungs beside the paper's Tables 1–2).

use super::super::claim::Claim;
use super::{Rung, Sample, STREAMS};
use nfx_chart::{Axes, Series, Style};
use nfx_testbed::bench::median;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The paper's Tables 1–2 (5GC = server side, CU = client side; S-S = 1 stream, M-S =
/// multiple streams). A2 and A3 were measured with multiple streams only.
mod paper {
    /// One row: scenario, streams (1 = S-S, 8 = M-S), send and receive Gbit/s,
    /// retransmissions, 5GC CPU % (total, user, system), CU CPU % (total, user, system).
    pub struct Row {
        pub name: &'static str,
        pub streams: u32,
        pub send_gbps: f64,
        pub recv_gbps: f64,
        pub retransmits: u64,
        pub core: (f64, f64, f64),
        pub cu: (f64, f64, f64),
    }

    pub const ROWS: [Row; 6] = [
        Row {
            name: "A",
            streams: 1,
            send_gbps: 9.89328,
            recv_gbps: 9.89327,
            retransmits: 0,
            core: (61.9658, 8.23386, 53.7319),
            cu: (35.983, 5.03469, 30.9483),
        },
        Row {
            name: "A",
            streams: 8,
            send_gbps: 9.89736,
            recv_gbps: 9.89725,
            retransmits: 1,
            core: (95.9105, 18.9873, 76.9232),
            cu: (41.7224, 8.2758, 33.4466),
        },
        Row {
            name: "A1",
            streams: 1,
            send_gbps: 0.522386,
            recv_gbps: 0.522374,
            retransmits: 163_311,
            core: (37.1798, 10.0446, 27.1352),
            cu: (3.54544, 0.36947, 3.17597),
        },
        Row {
            name: "A1",
            streams: 8,
            send_gbps: 0.54832,
            recv_gbps: 0.548203,
            retransmits: 347_139,
            core: (44.2623, 8.84595, 35.4163),
            cu: (4.68069, 0.944212, 3.73648),
        },
        Row {
            name: "A2",
            streams: 8,
            send_gbps: 5.347821,
            recv_gbps: 5.347733,
            retransmits: 3,
            core: (100.0, 49.257, 50.743),
            cu: (7.121, 0.782, 2.51),
        },
        Row {
            name: "A3",
            streams: 8,
            send_gbps: 8.928763,
            recv_gbps: 8.972871,
            retransmits: 0,
            core: (59.34, 2.173, 23.439),
            cu: (7.856, 0.828, 2.87),
        },
    ];

    /// The paper's A2 receive rate over A1's (multiple streams).
    pub fn a2_over_a1() -> f64 {
        ROWS[4].recv_gbps / ROWS[3].recv_gbps
    }

    /// The paper's 5GC CPU per Gbit/s on A3 over A2's (its Table 1 over Table 2).
    pub fn a3_cpu_per_gbit_over_a2() -> f64 {
        (ROWS[5].core.0 / ROWS[5].recv_gbps) / (ROWS[4].core.0 / ROWS[4].recv_gbps)
    }
}

/// A rung that could not be measured in one round.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The rung.
    pub rung: &'static str,
    /// The round.
    pub round: u32,
    /// Why.
    pub error: String,
}

/// Everything the report needs.
pub struct Inputs<'a> {
    /// Every run.
    pub samples: &'a [Sample],
    /// Rungs that failed in a round.
    pub failures: &'a [Failure],
    /// Rounds of the ladder.
    pub rounds: u32,
    /// Seconds per iperf3 run.
    pub secs: u32,
    /// `--quick`.
    pub quick: bool,
    /// Core of the lookaside device.
    pub device_core: u32,
    /// Wall time of the whole run, s.
    pub elapsed_s: f64,
    /// Load averages at the start.
    pub load_start: Vec<f64>,
    /// Load averages at the end.
    pub load_end: Vec<f64>,
}

/// One rung × stream count in `summary.json` (medians over the rounds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RungRow {
    /// `A`, `A1`, `A2` or `A3`.
    pub name: String,
    /// Parallel TCP streams.
    pub streams: u32,
    /// Sender Gbit/s.
    pub send_gbps: f64,
    /// Receiver Gbit/s.
    pub recv_gbps: f64,
    /// TCP retransmissions.
    pub retransmits: u64,
    /// User CPU of both endpoints (iperf3 + tunnel endpoint at each end), % of one core.
    pub cpu_user_pct: f64,
    /// System CPU of both endpoints, % of one core.
    pub cpu_sys_pct: f64,
    /// Endpoint CPU seconds (user + system, both ends) per GB received.
    pub cpu_s_per_gb: f64,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Every rung × stream count.
    pub rungs: Vec<RungRow>,
    /// A2's receive rate over A1's, 8 streams (`null` when either is missing).
    pub a2_over_a1: Option<f64>,
    /// A3's endpoint CPU per GB over A2's, 8 streams.
    pub a3_cpu_per_gb_over_a2: Option<f64>,
    /// 1, 5 and 15-minute load averages at the end of the run (a shared machine).
    pub load_average: Vec<f64>,
    /// What stands in for the paper's FPGA.
    pub accelerator: String,
}

/// Per-run derived figures (also used for the medians).
struct Derived {
    user_pct: f64,
    sys_pct: f64,
    cpu_s_per_gb: f64,
    tunnel_s_per_gb: f64,
    device_s_per_gb: f64,
}

fn derive(s: &Sample) -> Derived {
    let (a, b) = (s.src.total(), s.dst.total());
    let wall = s.wall_s.max(1e-3);
    let gb = (s.received_bytes as f64 / 1e9).max(1e-9);
    let tunnel =
        s.src.tunnel.user_s + s.src.tunnel.sys_s + s.dst.tunnel.user_s + s.dst.tunnel.sys_s;
    Derived {
        user_pct: (a.user_s + b.user_s) / wall * 100.0,
        sys_pct: (a.sys_s + b.sys_s) / wall * 100.0,
        cpu_s_per_gb: (a.user_s + a.sys_s + b.user_s + b.sys_s) / gb,
        tunnel_s_per_gb: tunnel / gb,
        device_s_per_gb: s.device.map_or(0.0, |d| d.user_s + d.sys_s) / gb,
    }
}

fn pick<'a>(i: &'a Inputs<'_>, rung: &str, streams: u32) -> Vec<&'a Sample> {
    i.samples
        .iter()
        .filter(|s| s.rung == rung && s.streams == streams)
        .collect()
}

fn med(v: &[&Sample], f: impl Fn(&Sample) -> f64) -> Option<f64> {
    median(&v.iter().map(|s| f(s)).collect::<Vec<_>>())
}

fn row(i: &Inputs<'_>, rung: Rung, streams: u32) -> Option<RungRow> {
    let v = pick(i, rung.name(), streams);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    Some(RungRow {
        name: rung.name().into(),
        streams,
        send_gbps: r3(med(&v, |s| s.send_gbps)?),
        recv_gbps: r3(med(&v, |s| s.recv_gbps)?),
        retransmits: med(&v, |s| s.retransmits as f64)?.round() as u64,
        cpu_user_pct: r3(med(&v, |s| derive(s).user_pct)?),
        cpu_sys_pct: r3(med(&v, |s| derive(s).sys_pct)?),
        cpu_s_per_gb: r3(med(&v, |s| derive(s).cpu_s_per_gb)?),
    })
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some((a / b * 1000.0).round() / 1000.0),
        _ => None,
    }
}

fn get(rows: &[RungRow], name: &str, streams: u32, f: fn(&RungRow) -> f64) -> Option<f64> {
    rows.iter()
        .find(|r| r.name == name && r.streams == streams)
        .map(f)
}

/// The accelerator's label, everywhere it appears.
pub fn accelerator(core: u32) -> String {
    format!(
        "modelled: reserved core running the cpu engine (nfx accel serve pinned to core {core}; \
         AES-256-GCM on the CPU's AES instructions), not an FPGA"
    )
}

/// Builds the summary from the samples.
pub fn summary(i: &Inputs<'_>) -> Summary {
    let rungs: Vec<RungRow> = Rung::ALL
        .iter()
        .flat_map(|&r| STREAMS.iter().filter_map(move |&n| row(i, r, n)))
        .collect();
    Summary {
        a2_over_a1: ratio(
            get(&rungs, "A2", 8, |r| r.recv_gbps),
            get(&rungs, "A1", 8, |r| r.recv_gbps),
        ),
        a3_cpu_per_gb_over_a2: ratio(
            get(&rungs, "A3", 8, |r| r.cpu_s_per_gb),
            get(&rungs, "A2", 8, |r| r.cpu_s_per_gb),
        ),
        rungs,
        load_average: i.load_end.clone(),
        accelerator: accelerator(i.device_core),
    }
}

/// The paper's name in claims.
pub const PAPER: &str = "VPN+ (VPP with FPGA crypto offload)";

/// The targets of the ladder, checked against a run's medians (`None`: no run, every
/// claim unmeasured).
pub fn claims(s: Option<&Summary>) -> Vec<Claim> {
    let rungs = s.map_or(&[][..], |s| &s.rungs[..]);
    let g = |n, k, f| get(rungs, n, k, f);
    let recv = |r: &RungRow| r.recv_gbps;
    let (a2, a3) = (g("A2", 8, recv), g("A3", 8, recv));
    let a3_retr = rungs
        .iter()
        .find(|r| r.name == "A3" && r.streams == 1)
        .map(|r| r.retransmits);
    vec![
        Claim::number(
            PAPER,
            "A2/A1 receive rate ≥ 5× (8 streams)",
            format!("{:.2}×", paper::a2_over_a1()),
            s.and_then(|s| s.a2_over_a1),
            (2, "×"),
            |r| r >= 5.0,
        ),
        Claim::new(
            PAPER,
            "A3 throughput ≥ A2's (8 streams)",
            format!(
                "{:.2} vs {:.2} Gbit/s",
                paper::ROWS[5].recv_gbps,
                paper::ROWS[4].recv_gbps
            ),
            a3.zip(a2)
                .map(|(x, y)| (format!("{x:.2} vs {y:.2} Gbit/s"), x >= y)),
        ),
        Claim::number(
            PAPER,
            "A3 endpoint CPU per GB ≤ 0.7× A2's (8 streams)",
            format!(
                "{:.2}× (5GC CPU per Gbit/s; 100 % → 59 % CPU)",
                paper::a3_cpu_per_gbit_over_a2()
            ),
            s.and_then(|s| s.a3_cpu_per_gb_over_a2),
            (2, "×"),
            |r| r <= 0.7,
        ),
        Claim::new(
            PAPER,
            "zero retransmissions on A3, 1 stream",
            "0 (A3 was measured with multiple streams only)",
            a3_retr.map(|r| (r.to_string(), r == 0)),
        ),
    ]
}

/// One rung × stream count in `details.json`: the medians per end and per process kind.
#[derive(Debug, Serialize)]
struct DetailRow {
    name: &'static str,
    streams: u32,
    src_user_pct: Option<f64>,
    src_sys_pct: Option<f64>,
    dst_user_pct: Option<f64>,
    dst_sys_pct: Option<f64>,
    tunnel_cpu_s_per_gb: Option<f64>,
    device_cpu_s_per_gb: Option<f64>,
}

/// `details.json`.
#[derive(Debug, Serialize)]
struct Details<'a> {
    rungs: Vec<DetailRow>,
    claims: Vec<Claim>,
    round_ratios: Vec<RoundRatios>,
    samples: &'a [Sample],
    failures: &'a [Failure],
    rung_setups: Vec<(&'static str, &'static str)>,
    rounds: u32,
    secs: u32,
    quick: bool,
    elapsed_s: f64,
    load_average_start: &'a [f64],
    load_average_end: &'a [f64],
}

/// The two ladder ratios within one round (same-run ratios only).
#[derive(Debug, Serialize)]
struct RoundRatios {
    round: u32,
    a2_over_a1: Option<f64>,
    a3_cpu_per_gb_over_a2: Option<f64>,
}

fn round_ratios(i: &Inputs<'_>) -> Vec<RoundRatios> {
    (1..=i.rounds)
        .map(|round| {
            let one = |rung: &str, f: &dyn Fn(&Sample) -> f64| {
                i.samples
                    .iter()
                    .find(|s| s.round == round && s.rung == rung && s.streams == 8)
                    .map(f)
            };
            let recv = |s: &Sample| s.recv_gbps;
            let cpu = |s: &Sample| derive(s).cpu_s_per_gb;
            RoundRatios {
                round,
                a2_over_a1: ratio(one("A2", &recv), one("A1", &recv)),
                a3_cpu_per_gb_over_a2: ratio(one("A3", &cpu), one("A2", &cpu)),
            }
        })
        .collect()
}

fn detail_rows(i: &Inputs<'_>) -> Vec<DetailRow> {
    let mut out = Vec::new();
    for r in Rung::ALL {
        for n in STREAMS {
            let v = pick(i, r.name(), n);
            let pct = |f: fn(&Sample) -> f64| med(&v, |s| f(s) / s.wall_s.max(1e-3) * 100.0);
            out.push(DetailRow {
                name: r.name(),
                streams: n,
                src_user_pct: pct(|s| s.src.total().user_s),
                src_sys_pct: pct(|s| s.src.total().sys_s),
                dst_user_pct: pct(|s| s.dst.total().user_s),
                dst_sys_pct: pct(|s| s.dst.total().sys_s),
                tunnel_cpu_s_per_gb: med(&v, |s| derive(s).tunnel_s_per_gb),
                device_cpu_s_per_gb: med(&v, |s| derive(s).device_s_per_gb),
            });
        }
    }
    out
}

/// Writes every output into `dir` and returns the summary.
pub fn write(dir: &Path, i: &Inputs<'_>) -> anyhow::Result<Summary> {
    let s = summary(i);
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&s)? + "\n",
    )?;
    let details = Details {
        rungs: detail_rows(i),
        claims: claims(Some(&s)),
        round_ratios: round_ratios(i),
        samples: i.samples,
        failures: i.failures,
        rung_setups: Rung::ALL.iter().map(|r| (r.name(), r.what())).collect(),
        rounds: i.rounds,
        secs: i.secs,
        quick: i.quick,
        elapsed_s: i.elapsed_s,
        load_average_start: &i.load_start,
        load_average_end: &i.load_end,
    };
    std::fs::write(
        dir.join("details.json"),
        serde_json::to_string_pretty(&details)? + "\n",
    )?;
    chart(&dir.join("chart.png"), &s).map_err(anyhow::Error::msg)?;
    std::fs::write(dir.join("report.md"), markdown(i, &s))?;
    Ok(s)
}

/// x position of a rung on the chart.
fn x_of(name: &str) -> f64 {
    Rung::ALL.iter().position(|r| r.name() == name).unwrap_or(0) as f64
}

/// Receive rate (nfx and the paper) and endpoint CPU per GB, per rung.
fn chart(path: &Path, s: &Summary) -> Result<(), String> {
    let fig = nfx_chart::Figure::new(
        path,
        (1000, 760),
        "nfx experiment vpn-ladder (A3's accelerator is modelled: a reserved core running the cpu engine)",
        16,
        2,
    )?;
    let panels = &fig.panels;
    let nfx = |streams: u32, f: fn(&RungRow) -> f64| -> Vec<(f64, f64)> {
        s.rungs
            .iter()
            .filter(|r| r.streams == streams)
            .map(|r| (x_of(&r.name), f(r)))
            .collect()
    };
    let paper_pts = |streams: u32| -> Vec<(f64, f64)> {
        paper::ROWS
            .iter()
            .filter(|r| r.streams == streams)
            .map(|r| (x_of(r.name), r.recv_gbps))
            .collect()
    };
    let series = |name: &str, points, style| Series {
        name: name.into(),
        points,
        style,
    };
    let recv = |r: &RungRow| r.recv_gbps;
    let x =
        "rung: 0 = A (no tunnel), 1 = A1 (scalar), 2 = A2 (vector), 3 = A3 (vector + lookaside)";
    nfx_chart::panel(
        &panels[0],
        Axes {
            caption: "receive rate (iperf3 TCP)",
            x,
            y: "Gbit/s",
        },
        &[
            series("nfx, 1 stream", nfx(1, recv), Style::LinePoints),
            series("nfx, 8 streams", nfx(8, recv), Style::LinePoints),
            series("paper, 1 stream", paper_pts(1), Style::Points),
            series("paper, multiple streams", paper_pts(8), Style::Points),
        ],
    )?;
    let cpu = |r: &RungRow| r.cpu_s_per_gb;
    nfx_chart::panel(
        &panels[1],
        Axes {
            caption: "endpoint CPU (iperf3 + tunnel endpoint, both ends) per GB received",
            x,
            y: "CPU s/GB",
        },
        &[
            series("nfx, 1 stream", nfx(1, cpu), Style::LinePoints),
            series("nfx, 8 streams", nfx(8, cpu), Style::LinePoints),
        ],
    )?;
    fig.present()
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.prec$}"))
}

fn loads(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The short table printed at the end of a run.
pub fn console(s: &Summary, i: &Inputs<'_>) -> String {
    let mut o = format!(
        "{:<5} {:>7} {:>9} {:>9} {:>8} {:>7} {:>7} {:>9}\n",
        "rung", "streams", "send Gb/s", "recv Gb/s", "retrans", "user %", "sys %", "CPU s/GB"
    );
    for r in &s.rungs {
        let _ = writeln!(
            o,
            "{:<5} {:>7} {:>9.3} {:>9.3} {:>8} {:>7.1} {:>7.1} {:>9.3}",
            r.name,
            r.streams,
            r.send_gbps,
            r.recv_gbps,
            r.retransmits,
            r.cpu_user_pct,
            r.cpu_sys_pct,
            r.cpu_s_per_gb
        );
    }
    for c in claims(Some(s)) {
        let _ = writeln!(
            o,
            "{}: nfx {} (paper {}) — {}",
            c.claim,
            c.shown(),
            c.paper_value,
            if c.holds { "holds" } else { "does not hold" }
        );
    }
    for fl in i.failures {
        let _ = writeln!(
            o,
            "rung {} failed in round {}: {}",
            fl.rung, fl.round, fl.error
        );
    }
    let _ = writeln!(o, "accelerator: {}", s.accelerator);
    let _ = writeln!(
        o,
        "load average: {} at start, {} at end",
        loads(&i.load_start),
        loads(&i.load_end)
    );
    o
}

fn markdown(i: &Inputs<'_>, s: &Summary) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "# nfx experiment vpn-ladder — the VPN+ paper's ladder on the namespace testbed\n\n\
         \"Optimizing 5G VPN+ Transport Networks with Vector Packet Processing and FPGA \
         Cryptographic Offloading\" measured an AES-256 VPN between two compute nodes on a \
         10 Gbit/s fabric with iperf3 (300 s, 32 MB buffers): A plain link, A1 the VPN on \
         the kernel's scalar path, A2 with VPP's vector processing, A3 with the crypto on \
         a Zynq FPGA SoC. nfx reruns the ladder between the `src` and `dst` namespaces of \
         its testbed (veth links routed by the `edge` and `cloud` kernels), IKEv2-keyed \
         AES-256-GCM ESP tunnels:\n"
    );
    for r in Rung::ALL {
        let _ = writeln!(m, "- **{}**: {}", r.name(), r.what());
    }
    let _ = writeln!(
        m,
        "\n**The accelerator is modelled**: {}. On this machine that core is shared with \
         everything else, so A3 moves the crypto off the endpoints' processes but not off \
         the machine.\n",
        s.accelerator
    );
    let _ = writeln!(
        m,
        "Run: {} round(s), rungs interleaved, {} s per iperf3 run{}; {:.0} s in all; load \
         average `{}` at the start, `{}` at the end — a shared 2-core machine, so only \
         ratios within this run mean anything. Endpoint CPU is the user and system time \
         the kernel accounted to each end's processes (`/proc/<pid>/stat`: the iperf3 \
         client or server and the tunnel endpoint) over the iperf3 run, in % of one core, \
         both ends added; the kernel's softirq work lands on whichever process it \
         interrupted.\n",
        i.rounds,
        i.secs,
        if i.quick { ", `--quick`" } else { "" },
        i.elapsed_s,
        loads(&i.load_start),
        loads(&i.load_end)
    );
    let _ = writeln!(
        m,
        "## nfx (medians) beside the paper's Tables 1–2\n\n\
         | rung | streams | nfx send Gbit/s | nfx recv Gbit/s | nfx retrans. | nfx CPU user % | nfx CPU sys % | nfx CPU s/GB | paper send / recv Gbit/s | paper retrans. | paper CPU % 5GC (user/sys) | paper CPU % CU (user/sys) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &s.rungs {
        let p = paper::ROWS
            .iter()
            .find(|p| p.name == r.name && p.streams == r.streams);
        let (pg, pr, pc, pu) = p.map_or_else(
            || {
                (
                    "not measured".to_string(),
                    "–".into(),
                    "–".into(),
                    "–".into(),
                )
            },
            |p| {
                (
                    format!("{:.3} / {:.3}", p.send_gbps, p.recv_gbps),
                    p.retransmits.to_string(),
                    format!("{:.1} ({:.1}/{:.1})", p.core.0, p.core.1, p.core.2),
                    format!("{:.1} ({:.1}/{:.1})", p.cu.0, p.cu.1, p.cu.2),
                )
            },
        );
        let _ = writeln!(
            m,
            "| {} | {} | {:.3} | {:.3} | {} | {:.1} | {:.1} | {:.3} | {pg} | {pr} | {pc} | {pu} |",
            r.name,
            r.streams,
            r.send_gbps,
            r.recv_gbps,
            r.retransmits,
            r.cpu_user_pct,
            r.cpu_sys_pct,
            r.cpu_s_per_gb
        );
    }
    let _ = writeln!(
        m,
        "\n## Targets\n\n| claim | paper | nfx | holds? |\n|---|---|---|---|"
    );
    for c in claims(Some(s)) {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} |",
            c.claim,
            c.paper_value,
            c.shown(),
            if c.holds { "yes" } else { "no" }
        );
    }
    let rr = round_ratios(i);
    let _ = writeln!(
        m,
        "\nPer round (8 streams): {}.",
        rr.iter()
            .map(|r| format!(
                "round {}: A2/A1 {}, A3/A2 CPU per GB {}",
                r.round,
                f(r.a2_over_a1, 2),
                f(r.a3_cpu_per_gb_over_a2, 2)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    for fl in i.failures {
        let _ = writeln!(
            m,
            "\n**Rung {} failed in round {}** (not measured there): {}",
            fl.rung, fl.round, fl.error
        );
    }
    let dev = detail_rows(i)
        .into_iter()
        .find(|d| d.name == "A3" && d.streams == 8);
    let _ = writeln!(
        m,
        "\n## Reading\n\n\
         - The paper's A1 collapsed to 0.5 Gbit/s with hundreds of thousands of \
         retransmissions (the kernel's scalar path could not keep up); nfx's A1 is its own \
         per-packet path (one read, one crypto call, one send per packet), so A2/A1 measures \
         what batching and the kernel offloads buy nfx, not what VPP bought the paper.\n\
         - A3 offloads only the cipher: the endpoints still read the TUN, build ESP and send \
         over UDP, so the endpoint CPU it can save is the cipher's share of A2's CPU. The \
         device spent {} CPU s per GB on A3 (8 streams) on its reserved core; that is \
         counted outside the endpoints, as the paper's FPGA fabric was.\n\
         - Plain forwarding (A) on veth is memory copies in one kernel, not a 10 Gbit/s \
         NIC: its rate is bounded by this machine's CPU, not by a wire.",
        f(dev.and_then(|d| d.device_cpu_s_per_gb), 3)
    );
    m
}

#[cfg(test)]
mod tests {
    use super::super::EndCpu;
    use super::*;
    use nfx_testbed::cpu::UserSys;

    fn sample(rung: &'static str, streams: u32, round: u32, gbps: f64, cpu_s: f64) -> Sample {
        let half = UserSys {
            user_s: cpu_s / 4.0,
            sys_s: cpu_s / 4.0,
        };
        Sample {
            rung,
            streams,
            round,
            send_gbps: gbps,
            recv_gbps: gbps,
            received_bytes: (gbps * 1e9 / 8.0) as u64,
            retransmits: if rung == "A1" { 100 } else { 0 },
            wall_s: 1.0,
            src: EndCpu {
                iperf3: half,
                tunnel: UserSys::default(),
            },
            dst: EndCpu {
                iperf3: half,
                tunnel: UserSys::default(),
            },
            device: (rung == "A3").then_some(half),
        }
    }

    fn inputs(samples: &[Sample], f: impl FnOnce(&Inputs<'_>)) {
        f(&Inputs {
            samples,
            failures: &[],
            rounds: 2,
            secs: 1,
            quick: true,
            device_core: 1,
            elapsed_s: 10.0,
            load_start: vec![1.0, 1.0, 1.0],
            load_end: vec![1.5, 1.0, 1.0],
        })
    }

    fn ladder() -> Vec<Sample> {
        let mut v = Vec::new();
        for round in 1..=2 {
            for (rung, g, c) in [
                ("A", 8.0, 0.5),
                ("A1", 0.5, 0.4),
                ("A2", 4.0, 1.0),
                ("A3", 4.8, 0.6),
            ] {
                for n in STREAMS {
                    v.push(sample(rung, n, round, g * f64::from(round), c));
                }
            }
        }
        v
    }

    #[test]
    fn summary_has_exactly_the_agreed_names_and_the_ladder_ratios() {
        inputs(&ladder(), |i| {
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
                    "a2_over_a1",
                    "a3_cpu_per_gb_over_a2",
                    "accelerator",
                    "load_average",
                    "rungs"
                ]
            );
            assert_eq!(
                keys(&v["rungs"][0]),
                [
                    "cpu_s_per_gb",
                    "cpu_sys_pct",
                    "cpu_user_pct",
                    "name",
                    "recv_gbps",
                    "retransmits",
                    "send_gbps",
                    "streams"
                ]
            );
            assert_eq!(s.rungs.len(), 8);
            // Medians of rounds 1 and 2: (0.5 + 1.0) / 2 and (4 + 8) / 2.
            assert_eq!(s.rungs[2].recv_gbps, 0.75);
            assert_eq!(s.a2_over_a1, Some(8.0));
            // CPU s/GB: 1.0 s over 0.5 GB and 1.0 GB (median 1.5) for A2; 0.6 s over
            // 0.6 GB and 1.2 GB (median 0.75) for A3.
            assert_eq!(s.a3_cpu_per_gb_over_a2, Some(0.5));
            assert_eq!(s.rungs[2].retransmits, 100);
            assert_eq!(s.rungs[0].cpu_user_pct, 25.0);
            assert!(s.accelerator.starts_with("modelled: reserved core running"));
            let c = claims(Some(&s));
            assert!(c.iter().all(|c| c.holds), "{c:?}");
            let md = markdown(i, &s);
            for needle in [
                "5.348 / 5.348",
                "347139",
                "modelled",
                "load average",
                "| A2/A1 receive rate ≥ 5× (8 streams) | 9.76× | 8.00× | yes |",
            ] {
                assert!(md.contains(needle), "{needle} missing:\n{md}");
            }
            assert!(
                !md.contains("/work/"),
                "the report names the paper, not a path"
            );
            let rr = round_ratios(i);
            assert_eq!(rr[0].a2_over_a1, Some(8.0));
        });
    }

    #[test]
    fn missing_rungs_give_null_ratios_and_failed_claims() {
        let only_a: Vec<Sample> = ladder().into_iter().filter(|s| s.rung == "A").collect();
        let failures = [Failure {
            rung: "A1",
            round: 1,
            error: "IKE: no CHILD_SA".into(),
        }];
        inputs(&only_a, |i| {
            let i = Inputs {
                failures: &failures,
                samples: i.samples,
                load_start: i.load_start.clone(),
                load_end: i.load_end.clone(),
                ..*i
            };
            let s = summary(&i);
            assert_eq!(s.rungs.len(), 2);
            assert!(s.a2_over_a1.is_none() && s.a3_cpu_per_gb_over_a2.is_none());
            assert!(claims(Some(&s)).iter().all(|c| !c.holds));
            let md = markdown(&i, &s);
            assert!(
                md.contains("**Rung A1 failed in round 1** (not measured there): IKE: no CHILD_SA"),
                "{md}"
            );
            assert!(console(&s, &i).contains("rung A1 failed in round 1"));
        });
    }

    #[test]
    fn outputs_are_written_and_the_chart_is_a_png() {
        inputs(&ladder(), |i| {
            let dir = nfx_testbed::tempfile::tempdir().unwrap();
            write(dir.path(), i).unwrap();
            let png = std::fs::read(dir.path().join("chart.png")).unwrap();
            assert_eq!(&png[1..4], b"PNG");
            for f in ["summary.json", "details.json", "report.md"] {
                assert!(dir.path().join(f).exists(), "{f}");
            }
        });
    }
}
