//! The edge-video outputs: `summary.json` (the field names docs/experiments/edge-video.md
//! lists), `details.json` (every run), `chart.png` and `report.md` (nfx's figures beside
//! the paper's Table 2).

use super::flow::Proto;
use super::{Run, Vnf, CHUNKS, MULTI_CHUNK, PROTOS};
use nfx_chart::{Axes, Series, Style};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The paper's Table 2: (vnf, proto, chunk or 0 for "default", exec ms, E2E ms).
const PAPER: [(&str, &str, usize, Option<f64>, f64); 14] = [
    ("none", "tcp", 0, None, 29.73),
    ("none", "udp", 0, None, 21.80),
    ("sw", "tcp", 128, Some(29.57), 49.14),
    ("sw", "tcp", 256, Some(27.38), 46.56),
    ("sw", "tcp", 512, Some(25.44), 44.24),
    ("sw", "udp", 128, Some(27.95), 47.38),
    ("sw", "udp", 256, Some(25.11), 44.21),
    ("sw", "udp", 512, Some(23.68), 42.6),
    ("hw", "tcp", 128, Some(2.68), 31.47),
    ("hw", "tcp", 256, Some(2.06), 30.66),
    ("hw", "tcp", 512, Some(1.91), 28.20),
    ("hw", "udp", 128, Some(2.18), 30.8),
    ("hw", "udp", 256, Some(2.06), 27.07),
    ("hw", "udp", 512, Some(1.91), 24.45),
];

/// `tcp` or `udp`.
pub fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    }
}

/// Everything the report needs.
pub struct Inputs<'a> {
    /// Every run.
    pub runs: &'a [Run],
    /// Size of the clip, bytes.
    pub clip_bytes: usize,
    /// Its bitrate, Mbit/s.
    pub clip_mbps: f64,
    /// `--quick`.
    pub quick: bool,
    /// Seconds of video per run.
    pub secs: u32,
    /// Core of the lookaside device.
    pub device_core: u32,
    /// Wall time of the whole run, s.
    pub elapsed_s: f64,
    /// /proc/loadavg at the end.
    pub loadavg: String,
    /// The energy meter's source (`model` or `rapl`) when multi-stream cases ran.
    pub energy_source: Option<&'static str>,
}

/// One case in `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    /// `none`, `sw` or `hw`.
    pub vnf: String,
    /// `tcp` or `udp`.
    pub proto: String,
    /// Chunk size, bytes.
    pub chunk: usize,
    /// Concurrent streams.
    pub streams: u32,
    /// Mean over the runs of each run's mean VNF execution time per chunk, ms.
    pub exec_ms_mean: f64,
    /// Half-width of its 95 % confidence interval (Student's t), ms.
    pub exec_ms_ci95: f64,
    /// Mean over the runs of each run's mean end-to-end latency, ms.
    pub e2e_ms_mean: f64,
    /// Half-width of its 95 % confidence interval, ms.
    pub e2e_ms_ci95: f64,
    /// Chunks lost, all runs.
    pub lost_chunks: u64,
    /// Chunks corrupt, all runs.
    pub corrupt_chunks: u64,
    /// Mean energy per run of the VNF threads and the lookaside device, J, from the
    /// energy meter (multi-stream cases; `null` for single streams).
    pub energy_j: Option<f64>,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Every case.
    pub cases: Vec<Case>,
    /// SW-VNF execution time over HW-VNF's at 512-byte chunks (both transports): how
    /// many times faster the modelled hardware encrypts a chunk.
    pub hw_vs_sw_exec: Option<f64>,
}

/// Student's t at 97.5 % for `df` degrees of freedom (1.96 beyond the table).
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.wrapping_sub(1)).copied().unwrap_or(1.96)
}

/// Mean and 95 % confidence half-width of `v` (half-width 0 for one value).
pub fn mean_ci95(v: &[f64]) -> (f64, f64) {
    let n = v.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    (m, t975(n - 1) * (var / n as f64).sqrt())
}

fn case(i: &Inputs<'_>, vnf: Vnf, proto: Proto, chunk: usize, streams: u32) -> Option<Case> {
    let rs: Vec<&Run> = i
        .runs
        .iter()
        .filter(|r| {
            r.vnf == vnf.name()
                && r.proto == proto_name(proto)
                && r.chunk == chunk
                && r.streams == streams
        })
        .collect();
    if rs.is_empty() {
        return None;
    }
    let (em, ec) = mean_ci95(&rs.iter().map(|r| r.exec_ms).collect::<Vec<_>>());
    let (lm, lc) = mean_ci95(&rs.iter().map(|r| r.e2e_ms).collect::<Vec<_>>());
    Some(Case {
        vnf: vnf.name().into(),
        proto: proto_name(proto).into(),
        chunk,
        streams,
        exec_ms_mean: em,
        exec_ms_ci95: ec,
        e2e_ms_mean: lm,
        e2e_ms_ci95: lc,
        lost_chunks: rs.iter().map(|r| r.lost_chunks).sum(),
        corrupt_chunks: rs.iter().map(|r| r.corrupt_chunks).sum(),
        energy_j: rs
            .iter()
            .map(|r| r.energy_j)
            .sum::<Option<f64>>()
            .map(|j| j / rs.len() as f64),
    })
}

/// Builds the summary.
pub fn summary(i: &Inputs<'_>) -> Summary {
    let mut cases = Vec::new();
    for vnf in Vnf::ALL {
        for proto in PROTOS {
            for chunk in CHUNKS {
                cases.extend(case(i, vnf, proto, chunk, 1));
            }
        }
    }
    let mut counts: Vec<u32> = i
        .runs
        .iter()
        .map(|r| r.streams)
        .filter(|&n| n > 1)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        for vnf in Vnf::ALL {
            cases.extend(case(i, vnf, Proto::Udp, MULTI_CHUNK, n));
        }
    }
    let exec_512 = |v: &str| -> Option<f64> {
        let x: Vec<f64> = cases
            .iter()
            .filter(|c| c.vnf == v && c.chunk == 512 && c.streams == 1)
            .map(|c| c.exec_ms_mean)
            .collect();
        (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
    };
    let hw_vs_sw_exec = match (exec_512("sw"), exec_512("hw")) {
        (Some(s), Some(h)) if h > 0.0 => Some(s / h),
        _ => None,
    };
    Summary {
        cases,
        hw_vs_sw_exec,
    }
}

/// Writes every output into `dir`.
pub fn write(dir: &Path, i: &Inputs<'_>) -> anyhow::Result<Summary> {
    let s = summary(i);
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&s)? + "\n",
    )?;
    std::fs::write(
        dir.join("details.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "runs": i.runs, "clip_bytes": i.clip_bytes, "clip_mbps": i.clip_mbps,
            "quick": i.quick, "seconds": i.secs, "elapsed_s": i.elapsed_s,
            "loadavg": i.loadavg, "accelerator": accelerator(i.device_core),
            "energy_source": i.energy_source,
        }))? + "\n",
    )?;
    chart(&dir.join("chart.png"), &s).map_err(anyhow::Error::msg)?;
    std::fs::write(dir.join("report.md"), markdown(i, &s))?;
    Ok(s)
}

fn accelerator(core: u32) -> String {
    format!(
        "modelled: reserved core running the bitsliced PRESENT engine (nfx accel serve pinned to core {core}), not an FPGA"
    )
}

/// Execution time and E2E latency against chunk size, per case (UDP and TCP).
fn chart(path: &Path, s: &Summary) -> Result<(), String> {
    let fig = nfx_chart::Figure::new(
        path,
        (1000, 760),
        "nfx experiment edge-video (HW-VNF is modelled: a reserved core running the bitsliced PRESENT engine)",
        16,
        2,
    )?;
    let series = |f: fn(&Case) -> f64| -> Vec<Series> {
        let mut v = Vec::new();
        for vnf in Vnf::ALL {
            for proto in PROTOS {
                v.push(Series {
                    name: format!("{} {}", vnf.name(), proto_name(proto)),
                    points: s
                        .cases
                        .iter()
                        .filter(|c| {
                            c.vnf == vnf.name() && c.proto == proto_name(proto) && c.streams == 1
                        })
                        .map(|c| (c.chunk as f64, f(c)))
                        .collect(),
                    style: Style::LinePoints,
                });
            }
        }
        v
    };
    let x = "chunk size, bytes";
    nfx_chart::panel(
        &fig.panels[0],
        Axes {
            caption: "VNF execution time per chunk (mean of runs)",
            x,
            y: "ms",
        },
        &series(|c| c.exec_ms_mean),
    )?;
    nfx_chart::panel(
        &fig.panels[1],
        Axes {
            caption: "end-to-end latency per chunk (mean of runs)",
            x,
            y: "ms",
        },
        &series(|c| c.e2e_ms_mean),
    )?;
    fig.present()
}

/// The short table printed at the end of a run.
pub fn console(s: &Summary, i: &Inputs<'_>) -> String {
    let mut o = format!(
        "{:<5} {:<5} {:>6} {:>7} {:>16} {:>16} {:>6} {:>8} {:>9}\n",
        "vnf",
        "proto",
        "chunk",
        "streams",
        "exec ms ±95%",
        "e2e ms ±95%",
        "lost",
        "corrupt",
        "energy J"
    );
    for c in &s.cases {
        let _ = writeln!(
            o,
            "{:<5} {:<5} {:>6} {:>7} {:>9.4} ±{:<6.4} {:>9.3} ±{:<6.3} {:>6} {:>8} {:>9}",
            c.vnf,
            c.proto,
            c.chunk,
            c.streams,
            c.exec_ms_mean,
            c.exec_ms_ci95,
            c.e2e_ms_mean,
            c.e2e_ms_ci95,
            c.lost_chunks,
            c.corrupt_chunks,
            c.energy_j.map_or("–".into(), |j| format!("{j:.2}"))
        );
    }
    let _ = writeln!(
        o,
        "SW/HW execution time at 512 B: {} (paper 11–13×); accelerator: {}",
        s.hw_vs_sw_exec.map_or("–".into(), |r| format!("{r:.2}×")),
        accelerator(i.device_core)
    );
    let _ = writeln!(o, "load average: {}", i.loadavg);
    o
}

fn markdown(i: &Inputs<'_>, s: &Summary) -> String {
    let mut m = String::new();
    let decoded = i.runs.iter().filter(|r| r.decoded).count();
    let _ = writeln!(
        m,
        "# nfx experiment edge-video — the edge-encryption paper's Table 2 on the namespace testbed\n\n\
         The paper (an FPGA-based PRESENT encryption VNF at the edge, NetFPGA) streamed \
         camera video through an edge server that reorganised it into 128/256/512-byte \
         chunks and encrypted each, to a cloud that decrypted; No-VNF, SW-VNF and HW-VNF, \
         TCP and UDP, means of 10 runs with 95 % confidence intervals. nfx: an H.264 clip \
         ({} bytes, {:.1} Mbit/s, {} s; ffmpeg test source) paced out of `src`, chunked and \
         encrypted with PRESENT-80-CTR on `edge`, decrypted on `cloud`, checked byte for \
         byte and decoded with ffmpeg on `dst`. SW-VNF runs the portable `soft` engine in \
         the VNF; HW-VNF the lookaside device — **{}**.\n",
        i.clip_bytes,
        i.clip_mbps,
        i.secs,
        accelerator(i.device_core)
    );
    let _ = writeln!(
        m,
        "{} run(s) in all{}, {:.0} s; {decoded} of them decoded by ffmpeg without an error \
         (every run with no loss and no corruption is decoded); load average at the end \
         `{}` (a shared 2-core machine: only ratios within the run mean anything).\n",
        i.runs.len(),
        if i.quick { ", `--quick`" } else { "" },
        i.elapsed_s,
        i.loadavg
    );
    let _ = writeln!(
        m,
        "| case | proto | chunk | nfx exec ms (±95 %) | nfx E2E ms (±95 %) | lost | corrupt | paper exec ms | paper E2E ms |\n|---|---|---|---|---|---|---|---|---|"
    );
    for c in s.cases.iter().filter(|c| c.streams == 1) {
        let p = PAPER
            .iter()
            .find(|p| p.0 == c.vnf && p.1 == c.proto && (p.2 == c.chunk || p.2 == 0));
        let _ = writeln!(
            m,
            "| {} | {} | {} | {:.4} ± {:.4} | {:.3} ± {:.3} | {} | {} | {} | {} |",
            c.vnf,
            c.proto,
            c.chunk,
            c.exec_ms_mean,
            c.exec_ms_ci95,
            c.e2e_ms_mean,
            c.e2e_ms_ci95,
            c.lost_chunks,
            c.corrupt_chunks,
            p.and_then(|p| p.3).map_or("N/A".into(), |x| format!("{x}")),
            p.map_or("–".into(), |p| format!("{}", p.4)),
        );
    }
    let _ = writeln!(
        m,
        "\nSW-VNF execution time over HW-VNF's at 512-byte chunks: **{}** (the paper: 11–13×).",
        s.hw_vs_sw_exec.map_or("–".into(), |r| format!("{r:.2}×"))
    );
    multi_stream_table(&mut m, i, s);
    m
}

/// The paper's Fig. 4 counterpart: UDP, 512-byte chunks, many streams at once.
fn multi_stream_table(m: &mut String, i: &Inputs<'_>, s: &Summary) {
    let multi: Vec<&Case> = s.cases.iter().filter(|c| c.streams > 1).collect();
    if multi.is_empty() {
        let _ = writeln!(
            m,
            "\nNo multi-stream cases in this run (`--streams`; the paper's Fig. 4)."
        );
        return;
    }
    let _ = writeln!(
        m,
        "\n## Many streams at once (the paper's Fig. 4: UDP, 512-byte chunks)\n\n\
         Energy: the VNF threads (edge and cloud) and the lookaside device, from the energy \
         meter — source **{}** (the host power model of the infrastructure descriptor \
         unless `rapl`). The paper: HW-VNF latency about No-VNF's at every scale, SW-VNF's \
         77 % above HW-VNF's at 100 streams; HW-VNF 72–76 % less energy than SW-VNF.\n\n\
         | streams | case | E2E ms (±95 %) | exec ms | lost | corrupt | energy J per run |\n\
         |---|---|---|---|---|---|---|",
        i.energy_source.unwrap_or("none")
    );
    for c in multi {
        let _ = writeln!(
            m,
            "| {} | {} | {:.3} ± {:.3} | {:.4} | {} | {} | {} |",
            c.streams,
            c.vnf,
            c.e2e_ms_mean,
            c.e2e_ms_ci95,
            c.exec_ms_mean,
            c.lost_chunks,
            c.corrupt_chunks,
            c.energy_j.map_or("–".into(), |j| format!("{j:.2}"))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(vnf: &'static str, proto: &'static str, chunk: usize, k: u32, exec: f64) -> Run {
        Run {
            vnf,
            proto,
            chunk,
            streams: 1,
            run: k,
            exec_ms: exec,
            e2e_ms: 10.0 + exec + f64::from(k),
            lost_chunks: 0,
            corrupt_chunks: 0,
            vnf_dropped: 0,
            ok_chunks: 100,
            decoded: true,
            energy_j: None,
        }
    }

    fn inputs<'a>(runs: &'a [Run], energy_source: Option<&'static str>) -> Inputs<'a> {
        Inputs {
            runs,
            clip_bytes: 1000,
            clip_mbps: 1.0,
            quick: true,
            secs: 1,
            device_core: 1,
            elapsed_s: 1.0,
            loadavg: "1 1 1".into(),
            energy_source,
        }
    }

    #[test]
    fn ci_uses_students_t() {
        let (m, h) = mean_ci95(&[1.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd = sqrt(2), n = 2: 12.706 * sqrt(2) / sqrt(2).
        assert!((h - 12.706).abs() < 1e-9, "{h}");
        assert_eq!(mean_ci95(&[5.0]), (5.0, 0.0));
        assert_eq!(t975(100), 1.96);
    }

    #[test]
    fn summary_has_the_agreed_names_and_the_exec_ratio() {
        let mut runs = Vec::new();
        for k in 1..=2 {
            for (v, e) in [("none", 0.001), ("sw", 0.2), ("hw", 0.02)] {
                for p in ["tcp", "udp"] {
                    for c in CHUNKS {
                        runs.push(run(v, p, c, k, e));
                    }
                }
            }
        }
        let i = inputs(&runs, None);
        let s = summary(&i);
        assert_eq!(s.cases.len(), 18);
        assert!((s.hw_vs_sw_exec.unwrap() - 10.0).abs() < 1e-9);
        let v = serde_json::to_value(&s.cases[0]).unwrap();
        let mut k: Vec<&String> = v.as_object().unwrap().keys().collect();
        k.sort();
        assert_eq!(
            k,
            [
                "chunk",
                "corrupt_chunks",
                "e2e_ms_ci95",
                "e2e_ms_mean",
                "energy_j",
                "exec_ms_ci95",
                "exec_ms_mean",
                "lost_chunks",
                "proto",
                "streams",
                "vnf"
            ]
        );
        assert!((s.cases[0].e2e_ms_ci95 - 12.706 * 0.5).abs() < 1e-9);
        let md = markdown(&i, &s);
        assert!(
            md.contains("| hw | udp | 512 |") && md.contains("| 1.91 | 24.45 |"),
            "{md}"
        );
        assert!(md.contains("No multi-stream cases"), "{md}");
        let dir = nfx_testbed::tempfile::tempdir().unwrap();
        write(dir.path(), &i).unwrap();
        assert_eq!(
            &std::fs::read(dir.path().join("chart.png")).unwrap()[1..4],
            b"PNG"
        );
    }

    #[test]
    fn multi_stream_runs_become_their_own_cases_with_energy() {
        let mut runs = Vec::new();
        for k in 1..=2 {
            runs.push(run("sw", "udp", 512, k, 0.2));
            runs.push(run("hw", "udp", 512, k, 0.02));
            for (v, j) in [("none", 1.0), ("sw", 4.0), ("hw", 2.0)] {
                let mut r = run(v, "udp", MULTI_CHUNK, k, 0.1);
                r.streams = 5;
                r.energy_j = Some(j * f64::from(k));
                runs.push(r);
            }
        }
        let i = inputs(&runs, Some("model"));
        let s = summary(&i);
        assert_eq!(s.cases.len(), 5);
        // Single-stream cases only in the execution ratio.
        assert!((s.hw_vs_sw_exec.unwrap() - 10.0).abs() < 1e-9);
        let multi: Vec<&Case> = s.cases.iter().filter(|c| c.streams == 5).collect();
        assert_eq!(multi.len(), 3);
        assert_eq!(multi[1].vnf, "sw");
        assert_eq!(multi[1].energy_j, Some(6.0));
        assert!(s
            .cases
            .iter()
            .filter(|c| c.streams == 1)
            .all(|c| c.energy_j.is_none()));
        let md = markdown(&i, &s);
        assert!(
            md.contains("| 5 | sw |") && md.contains("source **model**"),
            "{md}"
        );
    }
}
