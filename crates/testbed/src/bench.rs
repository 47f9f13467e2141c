//! `nfx bench dataplane`: kernel forwarding, kernel nftables, nfx forward-only, the nfx
//! chain in vector and scalar mode — all measured in one run on one testbed, with the
//! same traffic, so the ratios between them mean something.

use crate::acl::{IPERF_PORT, SOCKPERF_PORT, UDPGEN_PORT};
use crate::cpu::{ProcessCpu, SystemCpu};
use crate::iperf::{self, ClientSpec, IperfServer};
use crate::nfxrun::NfxRun;
use crate::runconfig::{Chain, RunSpec};
use crate::sockperf::{self, SockperfServer};
use crate::udpgen::{self, GenSpec, Sink};
use crate::{nftables::NftBaseline, Host, Spec, TestbedGuard};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Case names, in run order.
pub const CASES: [&str; 5] = [
    "kernel-forward",
    "kernel-nftables",
    "nfx-forward",
    "nfx-chain",
    "nfx-chain-scalar",
];

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// The `nfx` binary that runs the dataplane.
    pub nfx_bin: PathBuf,
    /// Testbed to build (removed at the end).
    pub spec: Spec,
    /// Seconds per throughput / latency measurement.
    pub secs: u32,
    /// DPI pattern file for the chain.
    pub patterns: PathBuf,
    /// Poll mode of the nfx cases.
    pub poll: String,
    /// Only these cases (all when empty).
    pub only: Vec<String>,
}

/// One row of the result, as written to JSON. A measurement that failed is `null`.
#[derive(Debug, Clone, Serialize, Default)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// iperf3 TCP, 1 stream, Gbit/s received.
    pub tcp1_gbps: Option<f64>,
    /// iperf3 TCP, 4 streams, Gbit/s received.
    pub tcp4_gbps: Option<f64>,
    /// 64-byte UDP frames received at dst, million per second.
    pub udp64_mpps: Option<f64>,
    /// sockperf TCP ping-pong median, µs (half round trip).
    pub lat_p50_us: Option<f64>,
    /// sockperf TCP ping-pong 99th percentile, µs.
    pub lat_p99_us: Option<f64>,
    /// System-wide CPU cores busy during the 1-stream TCP run.
    pub cpu_cores: Option<f64>,
}

/// The whole result.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BenchReport {
    /// One row per case.
    pub cases: Vec<CaseResult>,
    /// CPU % of one core used by an idle adaptive-mode nfx chain process.
    pub idle_cpu_pct_adaptive: Option<f64>,
    /// 64-byte UDP Mpps of the chain in adaptive mode divided by busy mode.
    pub adaptive_vs_busy_throughput: Option<f64>,
}

/// Runs every case (or `opts.only`) and the adaptive-mode checks; `log` gets progress
/// and measurement errors (a failed measurement leaves `null`, the run goes on).
pub fn run(opts: &BenchOpts, log: &mut dyn FnMut(&str)) -> anyhow::Result<BenchReport> {
    crate::root::require_root()?;
    let tb = TestbedGuard::up(opts.spec.clone())?;
    let dir = tempfile::Builder::new().prefix("nfx-bench-").tempdir()?;
    let dst = tb.dst_ip();
    let dst_ns = tb.ns(Host::Dst);
    let _iperf = IperfServer::start(&dst_ns, dst, IPERF_PORT)?;
    let _sockperf = SockperfServer::start(&dst_ns, dst, SOCKPERF_PORT)?;
    let mut rep = BenchReport::default();
    let want = |c: &str| opts.only.is_empty() || opts.only.iter().any(|o| o == c);
    for case in CASES.into_iter().filter(|c| want(c)) {
        if crate::stop::requested() {
            anyhow::bail!("interrupted");
        }
        log(&format!("case {case}"));
        let r = (|| -> anyhow::Result<CaseResult> {
            match case {
                "kernel-forward" | "kernel-nftables" => {
                    tb.set_edge_forwarding(true)?;
                    let _nft = if case == "kernel-nftables" {
                        Some(NftBaseline::apply(&tb)?)
                    } else {
                        None
                    };
                    Ok(measure(case, &tb, opts.secs, log))
                }
                _ => {
                    tb.set_edge_forwarding(false)?;
                    let (chain, scalar) = chain_of(case, opts);
                    let spec = run_spec(case, &dir, chain, &opts.poll);
                    let extra: &[&str] = if scalar { &["--scalar"] } else { &[] };
                    let nfx = NfxRun::start(&opts.nfx_bin, &tb, &spec, extra, dir.path())?;
                    let r = measure(case, &tb, opts.secs, log);
                    nfx.stop()?;
                    Ok(r)
                }
            }
        })();
        match r {
            Ok(r) => rep.cases.push(r),
            Err(e) => {
                log(&format!("  {case} failed: {e:#}"));
                rep.cases.push(CaseResult {
                    name: case.into(),
                    ..Default::default()
                });
            }
        }
    }
    if want("nfx-chain") && !crate::stop::requested() {
        tb.set_edge_forwarding(false)?;
        match adaptive_checks(opts, &tb, dir.path(), log) {
            Ok((idle, ratio)) => {
                rep.idle_cpu_pct_adaptive = Some(idle);
                rep.adaptive_vs_busy_throughput = Some(ratio);
            }
            Err(e) => log(&format!("adaptive-mode checks failed: {e:#}")),
        }
    }
    tb.set_edge_forwarding(true)?;
    Ok(rep)
}

fn chain_of(case: &str, opts: &BenchOpts) -> (Chain, bool) {
    let full = Chain::Full {
        patterns: opts.patterns.clone(),
        elephant_bytes: 1_000_000,
    };
    match case {
        "nfx-forward" => (Chain::Empty, false),
        "nfx-chain-scalar" => (full, true),
        _ => (full, false),
    }
}

fn run_spec(name: &str, dir: &tempfile::TempDir, chain: Chain, poll: &str) -> RunSpec {
    RunSpec {
        name: name.into(),
        control_socket: dir.path().join(format!("{name}.sock")),
        events: Some(dir.path().join(format!("{name}.events.jsonl"))),
        vector: 256,
        poll: poll.into(),
        chain,
    }
}

/// Every measurement of one case; a failing one is logged and left `None`.
fn measure(case: &str, tb: &TestbedGuard, secs: u32, log: &mut dyn FnMut(&str)) -> CaseResult {
    let src_ns = tb.ns(Host::Src);
    let mut r = CaseResult {
        name: case.into(),
        ..Default::default()
    };
    let mut note = |what: &str, res: anyhow::Result<f64>| match res {
        Ok(v) => {
            log(&format!("  {what}: {v:.3}"));
            Some(v)
        }
        Err(e) => {
            log(&format!("  {what} failed: {e:#}"));
            None
        }
    };
    let cpu = SystemCpu::start();
    let tcp1 = iperf::client(&ClientSpec::tcp(&src_ns, tb.dst_ip(), IPERF_PORT, secs, 1));
    let cores = cpu.and_then(|c| c.cores());
    r.tcp1_gbps = note("tcp1 Gbit/s", tcp1.map(|x| x.gbps));
    r.cpu_cores = note("cpu cores", cores);
    let tcp4 = iperf::client(&ClientSpec::tcp(&src_ns, tb.dst_ip(), IPERF_PORT, secs, 4));
    r.tcp4_gbps = note("tcp4 Gbit/s", tcp4.map(|x| x.gbps));
    let udp = udp64(tb, secs);
    let offered = match &udp {
        Ok(u) => Ok(u.offered_mpps),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    r.udp64_mpps = note("udp64 Mpps", udp.map(|u| u.received_mpps));
    note("udp64 offered Mpps (generator)", offered);
    let lat = sockperf::ping_pong(&src_ns, tb.dst_ip(), SOCKPERF_PORT, secs);
    match lat {
        Ok(l) => {
            r.lat_p50_us = note("p50 µs", Ok(l.p50_us));
            r.lat_p99_us = note("p99 µs", Ok(l.p99_us));
        }
        Err(e) => log(&format!("  sockperf failed: {e:#}")),
    }
    r
}

/// One 64-byte UDP flood: what the generator offered and what arrived at dst.
#[derive(Debug, Clone, Copy)]
pub struct Udp64 {
    /// Datagrams per second (millions) received by the sink in dst.
    pub received_mpps: f64,
    /// Datagrams per second (millions) the kernel accepted from the generator in src.
    pub offered_mpps: f64,
}

/// Floods 64-byte UDP frames from src for `secs`: offered and received Mpps.
pub fn udp64(tb: &TestbedGuard, secs: u32) -> anyhow::Result<Udp64> {
    let sink = Sink::start(&tb.ns(Host::Dst), UDPGEN_PORT, &[])?;
    let g = udpgen::generate(GenSpec::flood(
        &tb.ns(Host::Src),
        tb.dst_ip(),
        UDPGEN_PORT,
        Duration::from_secs(u64::from(secs)),
    ))?;
    drain(&sink);
    let got = sink.finish()?;
    if got.packets == 0 {
        anyhow::bail!("no UDP packet arrived (sent {})", g.sent);
    }
    Ok(Udp64 {
        received_mpps: got.packets as f64 / g.secs / 1e6,
        offered_mpps: g.mpps(),
    })
}

/// Waits until the sink stops receiving (queued packets delivered), at most 1 s.
fn drain(sink: &Sink) {
    let until = Instant::now() + Duration::from_secs(1);
    let mut last = sink.packets();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        let now = sink.packets();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Idle CPU of an adaptive chain, and adaptive vs busy 64-byte UDP throughput.
fn adaptive_checks(
    opts: &BenchOpts,
    tb: &TestbedGuard,
    dir: &Path,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<(f64, f64)> {
    let tmp = tempfile::Builder::new()
        .prefix("adaptive-")
        .tempdir_in(dir)?;
    let mut mpps = Vec::new();
    let mut idle = 0.0;
    for poll in ["adaptive", "busy"] {
        let (chain, _) = chain_of("nfx-chain", opts);
        let spec = run_spec(&format!("chain-{poll}"), &tmp, chain, poll);
        let nfx = NfxRun::start(&opts.nfx_bin, tb, &spec, &[], tmp.path())?;
        if poll == "adaptive" {
            // Let start-up settle, then measure a quiet interval.
            std::thread::sleep(Duration::from_millis(500));
            let cpu = ProcessCpu::start(nfx.pid())?;
            std::thread::sleep(Duration::from_secs(u64::from(opts.secs.clamp(2, 5))));
            idle = cpu.cores()? * 100.0;
            log(&format!("  idle adaptive CPU: {idle:.2} % of a core"));
        }
        let u = udp64(tb, opts.secs)?;
        let m = u.received_mpps;
        log(&format!(
            "  {poll} udp64 Mpps: {m:.3} (offered {:.3})",
            u.offered_mpps
        ));
        mpps.push(m);
        nfx.stop()?;
    }
    Ok((idle, mpps[0] / mpps[1]))
}

/// The result as a table with ratios to the kernel baselines.
pub fn table(rep: &BenchReport) -> String {
    let find = |n: &str| rep.cases.iter().find(|c| c.name == n);
    let kf = find("kernel-forward");
    let kn = find("kernel-nftables");
    let f = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let mut s = format!(
        "{:<17} {:>8} {:>8} {:>9} {:>8} {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9}\n",
        "case",
        "tcp1",
        "tcp4",
        "udp64",
        "p50",
        "p99",
        "cores",
        "tcp1/kfwd",
        "tcp1/knft",
        "udp/kfwd",
        "+p50 µs"
    );
    s.push_str(&format!(
        "{:<17} {:>8} {:>8} {:>9} {:>8} {:>8} {:>6} |\n",
        "", "Gbit/s", "Gbit/s", "Mpps", "µs", "µs", ""
    ));
    for c in &rep.cases {
        let dp50 = match (c.lat_p50_us, kf.and_then(|k| k.lat_p50_us)) {
            (Some(a), Some(b)) => format!("{:+.1}", a - b),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "{:<17} {:>8} {:>8} {:>9} {:>8} {:>8} {:>6} | {:>9} {:>9} {:>9} {:>9}\n",
            c.name,
            f(c.tcp1_gbps, 2),
            f(c.tcp4_gbps, 2),
            f(c.udp64_mpps, 3),
            f(c.lat_p50_us, 1),
            f(c.lat_p99_us, 1),
            f(c.cpu_cores, 2),
            ratio(c.tcp1_gbps, kf.and_then(|k| k.tcp1_gbps)),
            ratio(c.tcp1_gbps, kn.and_then(|k| k.tcp1_gbps)),
            ratio(c.udp64_mpps, kf.and_then(|k| k.udp64_mpps)),
            dp50,
        ));
    }
    let vec_vs_scalar = ratio(
        find("nfx-chain").and_then(|c| c.udp64_mpps),
        find("nfx-chain-scalar").and_then(|c| c.udp64_mpps),
    );
    s.push_str(&format!("vector/scalar udp64: {vec_vs_scalar}\n"));
    s.push_str(&format!(
        "idle adaptive CPU: {} % of a core; adaptive/busy udp64: {}\n",
        f(rep.idle_cpu_pct_adaptive, 2),
        f(rep.adaptive_vs_busy_throughput, 2)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, tcp1: f64, udp: f64, p50: f64) -> CaseResult {
        CaseResult {
            name: name.into(),
            tcp1_gbps: Some(tcp1),
            tcp4_gbps: None,
            udp64_mpps: Some(udp),
            lat_p50_us: Some(p50),
            lat_p99_us: Some(p50 * 2.0),
            cpu_cores: Some(1.0),
        }
    }

    #[test]
    fn json_has_the_agreed_shape() {
        let rep = BenchReport {
            cases: vec![case("kernel-forward", 20.0, 0.4, 30.0)],
            idle_cpu_pct_adaptive: Some(0.5),
            adaptive_vs_busy_throughput: None,
        };
        let v = serde_json::to_value(&rep).unwrap();
        let keys: Vec<_> = v["cases"][0].as_object().unwrap().keys().cloned().collect();
        let mut want = vec![
            "name",
            "tcp1_gbps",
            "tcp4_gbps",
            "udp64_mpps",
            "lat_p50_us",
            "lat_p99_us",
            "cpu_cores",
        ];
        want.sort();
        let mut keys = keys;
        keys.sort();
        assert_eq!(keys, want);
        assert!(v["adaptive_vs_busy_throughput"].is_null());
        assert_eq!(v["idle_cpu_pct_adaptive"], 0.5);
    }

    #[test]
    fn table_shows_ratios_to_kernel() {
        let rep = BenchReport {
            cases: vec![
                case("kernel-forward", 20.0, 0.4, 30.0),
                case("kernel-nftables", 10.0, 0.3, 31.0),
                case("nfx-chain", 10.0, 0.8, 40.0),
                case("nfx-chain-scalar", 5.0, 0.2, 41.0),
            ],
            ..Default::default()
        };
        let t = table(&rep);
        let row = t.lines().find(|l| l.starts_with("nfx-chain ")).unwrap();
        assert!(row.contains(" 0.50 "), "{row}");
        assert!(row.contains(" 1.00 "), "{row}");
        assert!(row.contains(" 2.00 "), "{row}");
        assert!(row.contains("+10.0"), "{row}");
        assert!(t.contains("vector/scalar udp64: 4.00"));
    }
}
