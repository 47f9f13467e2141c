//! `nfx bench dataplane`: kernel forwarding, kernel nftables, nfx forward-only, the nfx
//! chain in vector and scalar mode — all measured in one run on one testbed, with the
//! same traffic, so the ratios between them mean something.

mod affinity;
mod flood;

pub use flood::{udp64, FloodOpts, Generator, Isolation, SinkKind, Udp64};

use crate::acl::{IPERF_PORT, SOCKPERF_PORT};
use crate::cpu::{ProcessCpu, SystemCpu};
use crate::iperf::{self, ClientSpec, IperfServer};
use crate::nfxrun::NfxRun;
use crate::runconfig::{Chain, RunSpec};
use crate::sockperf::{self, SockperfServer};
use crate::tablerun::{table_config, TablePlace, TableRun};
use crate::{nftables::NftBaseline, Host, Spec, TestbedGuard};
use nfx_proto::Stats;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Case names run by default, in run order.
pub const DEFAULT_CASES: [&str; 8] = [
    "kernel-forward",
    "kernel-nftables",
    "nfx-forward",
    "nfx-chain",
    "nfx-chain-scalar",
    "nfx-fastpath",
    "nfx-table-fw-nat",
    "nfx-hybrid",
];

/// Every case name, in run order: the defaults, `nfx-chain-2w` (the chain on two
/// workers, `nfx run --workers 2`) and `nfx-fw-nat` (firewall + NAT in userspace only,
/// the `nfx-fastpath` chain without its fast path), which run only when `--cases`
/// names them. `nfx-table-fw-nat` runs the firewall and NAT on the table tier alone
/// (`nfx table run`, eBPF); `nfx-hybrid` runs them there and elephant + DPI in a
/// software worker behind it (docs/dataplane.md, "Hybrid chains"). HYPER's Fig. 4
/// cases (`nfx experiment hyper`): `nfx-fw` / `nfx-table-fw` (the firewall alone, in a
/// software worker / on the table tier) and `nfx-fw-nat-ele` / `nfx-table-fw-nat-ele`
/// (firewall → NAT → elephant).
pub const CASES: [&str; 14] = [
    "kernel-forward",
    "kernel-nftables",
    "nfx-forward",
    "nfx-chain",
    "nfx-chain-scalar",
    "nfx-chain-2w",
    "nfx-fw-nat",
    "nfx-fastpath",
    "nfx-table-fw-nat",
    "nfx-hybrid",
    "nfx-fw",
    "nfx-table-fw",
    "nfx-fw-nat-ele",
    "nfx-table-fw-nat-ele",
];

/// The elephant threshold (bytes) of every case's elephant node.
const ELEPHANT_BYTES: u64 = 1_000_000;

/// The table-tier chain of a `nfx-table-*` case.
fn table_chain(case: &str) -> Option<Chain> {
    match case {
        "nfx-table-fw-nat" => Some(Chain::FirewallNat),
        "nfx-table-fw" => Some(Chain::Firewall),
        "nfx-table-fw-nat-ele" => Some(Chain::FirewallNatElephant {
            elephant_bytes: ELEPHANT_BYTES,
        }),
        _ => None,
    }
}

/// Flow-table entries of the `nfx-fastpath` case's fast path.
pub const FAST_PATH_CAPACITY: u32 = 65536;

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
    /// The 64-byte UDP flood (its `secs` is `secs`).
    pub flood: FloodOpts,
    /// TCP runs per case (median reported).
    pub tcp_repeat: u32,
    /// Latency rounds: each round sets every case up afresh and runs sockperf through
    /// it, in alternating order (medians reported).
    pub lat_repeat: u32,
    /// Receive path of the nfx cases (`nfx run --io`); the config default when `None`.
    pub io: Option<String>,
    /// Let edge's kernel stack see the frames nfx forwards (`nfx run --kernel-stack
    /// keep`); by default nfx keeps it off its ports (`kernel_stack: isolate`).
    pub keep_edge_stack: bool,
    /// Throughput as 1-stream TCP only: no 4-stream run, no 64-byte flood and no
    /// adaptive-mode checks (what HYPER's Fig. 4 reports, in a fraction of the time).
    pub tcp1_only: bool,
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
    /// 64-byte UDP frames received at dst, million per second (median of the runs).
    pub udp64_mpps: Option<f64>,
    /// 64-byte frames the generator got the kernel to accept, million per second
    /// (median of the runs).
    pub udp64_offered_mpps: Option<f64>,
    /// Received Mpps of every 64-byte run, in run order.
    pub udp64_runs: Vec<f64>,
    /// The generator thread's CPU µs per offered frame (median of the runs), which on
    /// veth includes edge's receive of each frame; about the worker's µs per frame
    /// (`worker_cpu_s_per_mpkt`) or more means the two CPUs limit the run together.
    pub udp64_gen_cpu_us_per_frame: Option<f64>,
    /// nfx worker CPU seconds (its thread's user + system time) per million frames it
    /// received during the 64-byte runs (median); `null` for kernel cases.
    pub worker_cpu_s_per_mpkt: Option<f64>,
    /// sockperf TCP ping-pong median, µs (half round trip; median over the latency
    /// rounds).
    pub lat_p50_us: Option<f64>,
    /// sockperf TCP ping-pong 99th percentile, µs (median over the latency rounds).
    pub lat_p99_us: Option<f64>,
    /// p50 of every latency round, in round order (`null`: the run failed).
    pub lat_p50_runs_us: Vec<Option<f64>>,
    /// p99 of every latency round, in round order.
    pub lat_p99_runs_us: Vec<Option<f64>>,
    /// Median over the rounds of this case's p50 minus kernel-forward's p50 in the same
    /// round (µs); `null` without kernel-forward.
    pub lat_p50_over_kernel_us: Option<f64>,
    /// The same for p99.
    pub lat_p99_over_kernel_us: Option<f64>,
    /// System-wide CPU cores busy during the 1-stream TCP run.
    pub cpu_cores: Option<f64>,
    /// nfx worker CPU seconds per GB (10^9 bytes) it received during the 1-stream TCP
    /// runs (median); `null` for kernel cases.
    pub tcp1_worker_cpu_s_per_gb: Option<f64>,
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
    /// 64-byte Mpps received, nfx-chain over nfx-chain-scalar.
    pub vector_vs_scalar_udp64: Option<f64>,
    /// Worker CPU per packet, nfx-chain-scalar over nfx-chain (how many times cheaper a
    /// packet is in vector mode, independent of the generator).
    pub vector_vs_scalar_cpu_per_packet: Option<f64>,
    /// Generator used for the 64-byte runs.
    pub generator: String,
    /// Sink used for the 64-byte runs.
    pub sink: String,
    /// 64-byte runs per measurement.
    pub repeat: u32,
    /// Latency rounds (every case once per round).
    pub lat_repeat: u32,
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
    let mut rep = BenchReport {
        generator: opts.flood.generator.as_str().into(),
        sink: opts.flood.sink.as_str().into(),
        repeat: opts.flood.repeat,
        lat_repeat: opts.lat_repeat.max(1),
        ..Default::default()
    };
    let want = |c: &str| {
        if opts.only.is_empty() {
            DEFAULT_CASES.contains(&c)
        } else {
            opts.only.iter().any(|o| o == c)
        }
    };
    for case in CASES.into_iter().filter(|c| want(c)) {
        if crate::stop::requested() {
            anyhow::bail!("interrupted");
        }
        log(&format!("case {case}"));
        let r = with_case(case, &tb, opts, dir.path(), case, |nfx| {
            measure(case, &tb, opts, nfx, log)
        });
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
    let names: Vec<String> = rep.cases.iter().map(|c| c.name.clone()).collect();
    if !names.is_empty() && !crate::stop::requested() {
        let lat = latency_rounds(&names, &tb, opts, dir.path(), log)?;
        apply_latency(&mut rep.cases, &lat);
    }
    if want("nfx-chain") && !opts.tcp1_only && !crate::stop::requested() {
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
    let find = |n: &str| rep.cases.iter().find(|c| c.name == n);
    let (v, sc) = (find("nfx-chain"), find("nfx-chain-scalar"));
    rep.vector_vs_scalar_udp64 = ratio(v.and_then(|c| c.udp64_mpps), sc.and_then(|c| c.udp64_mpps));
    rep.vector_vs_scalar_cpu_per_packet = ratio(
        sc.and_then(|c| c.worker_cpu_s_per_mpkt),
        v.and_then(|c| c.worker_cpu_s_per_mpkt),
    );
    Ok(rep)
}

/// `a / b` when both exist and `b` is positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The median of `v` (mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The chain of an nfx case and the `nfx run` arguments that make it that case.
fn chain_of(case: &str, opts: &BenchOpts) -> (Chain, Vec<String>) {
    let full = Chain::Full {
        patterns: opts.patterns.clone(),
        elephant_bytes: ELEPHANT_BYTES,
    };
    let mut extra: Vec<String> = match &opts.io {
        Some(io) => vec!["--io".into(), io.clone()],
        None => Vec::new(),
    };
    if opts.keep_edge_stack {
        extra.extend(["--kernel-stack".into(), "keep".into()]);
    }
    match case {
        "nfx-forward" => (Chain::Empty, extra),
        "nfx-chain-scalar" => {
            extra.push("--scalar".into());
            (full, extra)
        }
        "nfx-chain-2w" => {
            extra.extend(["--workers".into(), "2".into()]);
            (full, extra)
        }
        "nfx-fw-nat" => (Chain::FirewallNat, extra),
        "nfx-fw" => (Chain::Firewall, extra),
        "nfx-fw-nat-ele" => (
            Chain::FirewallNatElephant {
                elephant_bytes: ELEPHANT_BYTES,
            },
            extra,
        ),
        "nfx-fastpath" => {
            extra.extend(["--fast-path".into(), FAST_PATH_CAPACITY.to_string()]);
            (Chain::FirewallNat, extra)
        }
        "nfx-hybrid" => (
            Chain::HybridTail {
                patterns: opts.patterns.clone(),
                elephant_bytes: Some(ELEPHANT_BYTES),
            },
            extra,
        ),
        _ => (full, extra),
    }
}

fn run_spec(name: &str, dir: &Path, chain: Chain, poll: &str) -> RunSpec {
    RunSpec {
        name: name.into(),
        control_socket: dir.join(format!("{name}.sock")),
        events: Some(dir.join(format!("{name}.events.jsonl"))),
        vector: 256,
        poll: poll.into(),
        chain,
    }
}

/// Every measurement of one case; a failing one is logged and left `None`. With `nfx`,
/// the worker's CPU per packet is read from its stats around each 64-byte run.
fn measure(
    case: &str,
    tb: &TestbedGuard,
    opts: &BenchOpts,
    nfx: Option<&NfxRun>,
    log: &mut dyn FnMut(&str),
) -> CaseResult {
    let src_ns = tb.ns(Host::Src);
    let secs = opts.secs;
    let mut r = CaseResult {
        name: case.into(),
        ..Default::default()
    };
    let (mut tcp1, mut cores, mut tcp4) = (Vec::new(), Vec::new(), Vec::new());
    let mut per_gb = Vec::new();
    for _ in 0..opts.tcp_repeat.max(1) {
        let cpu = SystemCpu::start();
        let before = nfx.map(NfxRun::stats);
        let one = iperf::client(&ClientSpec::tcp(&src_ns, tb.dst_ip(), IPERF_PORT, secs, 1));
        let c = cpu.and_then(|c| c.cores());
        tcp1.extend(note(log, "tcp1 Gbit/s", one.map(|x| x.gbps)));
        cores.extend(note(log, "cpu cores", c));
        if let (Some(Ok(a)), Some(Ok(b))) = (before, nfx.map(NfxRun::stats)) {
            if let Some(x) = worker_cpu_s_per_gb(&a, &b) {
                log(&format!("  tcp1 worker CPU-s per GB: {x:.3}"));
                per_gb.push(x);
            }
        }
        if opts.tcp1_only {
            continue;
        }
        let four = iperf::client(&ClientSpec::tcp(&src_ns, tb.dst_ip(), IPERF_PORT, secs, 4));
        tcp4.extend(note(log, "tcp4 Gbit/s", four.map(|x| x.gbps)));
    }
    r.tcp1_gbps = median(&tcp1);
    r.cpu_cores = median(&cores);
    r.tcp1_worker_cpu_s_per_gb = median(&per_gb);
    r.tcp4_gbps = median(&tcp4);
    if let Some(Ok(st)) = nfx.map(NfxRun::stats) {
        let per: Vec<String> = st
            .workers
            .iter()
            .map(|w| w.rx_packets.to_string())
            .collect();
        if per.len() > 1 {
            log(&format!(
                "  frames received per worker after TCP: {}",
                per.join(" / ")
            ));
        }
    }
    if opts.tcp1_only {
        return r;
    }
    let (mut runs, mut cpu, mut gen_cpu) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..opts.flood.repeat.max(1) {
        let before = nfx.map(|n| n.stats());
        let u = match udp64(tb, &opts.flood, nfx.map(NfxRun::pid)) {
            Ok(u) => u,
            Err(e) => {
                log(&format!("  udp64 failed: {e:#}"));
                continue;
            }
        };
        let per_mpkt = match (before, nfx.map(|n| n.stats())) {
            (Some(Ok(a)), Some(Ok(b))) => worker_cpu_s_per_mpkt(&a, &b),
            _ => None,
        };
        log(&format!(
            "  udp64 Mpps: offered {:.3} received {:.3}{}{}{}",
            u.offered_mpps,
            u.received_mpps,
            per_mpkt.map_or(String::new(), |c| format!("; worker {c:.3} CPU-s per Mpkt")),
            u.gen_cpu_us_per_frame.map_or(String::new(), |c| format!(
                "; generator {c:.3} CPU-µs per frame"
            )),
            if u.other > 0 {
                format!("; {} other frames at dst", u.other)
            } else {
                String::new()
            }
        ));
        r.udp64_runs.push(u.received_mpps);
        runs.push((u.received_mpps, u.offered_mpps));
        cpu.extend(per_mpkt);
        gen_cpu.extend(u.gen_cpu_us_per_frame);
    }
    r.udp64_gen_cpu_us_per_frame = median(&gen_cpu);
    if let Some((received, offered)) = median_run(&runs) {
        r.udp64_mpps = Some(received);
        r.udp64_offered_mpps = Some(offered);
    }
    r.worker_cpu_s_per_mpkt = median(&cpu);
    r
}

/// Sets `case` up on edge — kernel forwarding (with the nftables baseline for
/// `kernel-nftables`) or a fresh `nfx run` of the case named `name` with edge's
/// forwarding off — runs `f` with the nfx process (if any) and takes the case down.
fn with_case<T>(
    case: &str,
    tb: &TestbedGuard,
    opts: &BenchOpts,
    dir: &Path,
    name: &str,
    f: impl FnOnce(Option<&NfxRun>) -> T,
) -> anyhow::Result<T> {
    if let Some(chain) = table_chain(case) {
        tb.set_edge_forwarding(false)?;
        let cfg = table_config(tb, name, &chain, TablePlace::Alone, None)?;
        let table = TableRun::start(&opts.nfx_bin, &cfg, dir)?;
        let r = f(None);
        table.stop()?;
        return Ok(r);
    }
    match case {
        "kernel-forward" | "kernel-nftables" => {
            tb.set_edge_forwarding(true)?;
            let _nft = if case == "kernel-nftables" {
                Some(NftBaseline::apply(tb)?)
            } else {
                None
            };
            Ok(f(None))
        }
        "nfx-hybrid" => {
            tb.set_edge_forwarding(false)?;
            let cfg = table_config(
                tb,
                name,
                &Chain::FirewallNat,
                TablePlace::BeforeWorker,
                None,
            )?;
            let table = TableRun::start(&opts.nfx_bin, &cfg, dir)?;
            let (chain, extra) = chain_of(case, opts);
            let spec = run_spec(name, dir, chain, &opts.poll);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let nfx = NfxRun::start(&opts.nfx_bin, tb, &spec, &extra, dir)?;
            let r = f(Some(&nfx));
            nfx.stop()?;
            table.stop()?;
            Ok(r)
        }
        _ => {
            tb.set_edge_forwarding(false)?;
            let (chain, extra) = chain_of(case, opts);
            let spec = run_spec(name, dir, chain, &opts.poll);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let nfx = NfxRun::start(&opts.nfx_bin, tb, &spec, &extra, dir)?;
            let r = f(Some(&nfx));
            nfx.stop()?;
            Ok(r)
        }
    }
}

/// Latency of one case in one round: (p50, p99) in µs, `None` when the run failed.
pub type LatRun = Option<(f64, f64)>;

/// The order of `cases` in latency round `round`: as given in even rounds, reversed in
/// odd ones, so that a drift in the machine's other load does not land on one case.
pub fn round_order(cases: &[String], round: u32) -> Vec<&str> {
    let mut v: Vec<&str> = cases.iter().map(String::as_str).collect();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// sockperf TCP ping-pong through every case, `opts.lat_repeat` rounds in alternating
/// order (see [`round_order`]), each case freshly set up per round (a new `nfx run`,
/// no flood state). Returns each case's runs in round order.
fn latency_rounds(
    cases: &[String],
    tb: &TestbedGuard,
    opts: &BenchOpts,
    dir: &Path,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<(String, Vec<LatRun>)>> {
    let tmp = tempfile::Builder::new()
        .prefix("latency-")
        .tempdir_in(dir)?;
    let src_ns = tb.ns(Host::Src);
    let mut out: Vec<(String, Vec<LatRun>)> =
        cases.iter().map(|c| (c.clone(), Vec::new())).collect();
    for round in 0..opts.lat_repeat.max(1) {
        for case in round_order(cases, round) {
            if crate::stop::requested() {
                anyhow::bail!("interrupted");
            }
            let name = format!("{case}-lat{round}");
            let res = with_case(case, tb, opts, tmp.path(), &name, |_| {
                sockperf::ping_pong(&src_ns, tb.dst_ip(), SOCKPERF_PORT, opts.secs)
            })
            .and_then(|r| r);
            let run = match res {
                Ok(l) => {
                    log(&format!(
                        "  latency round {round} {case}: p50 {:.1} µs, p99 {:.1} µs",
                        l.p50_us, l.p99_us
                    ));
                    Some((l.p50_us, l.p99_us))
                }
                Err(e) => {
                    log(&format!("  latency round {round} {case} failed: {e:#}"));
                    None
                }
            };
            if let Some((_, runs)) = out.iter_mut().find(|(c, _)| c == case) {
                runs.push(run);
            }
        }
    }
    Ok(out)
}

/// Fills each case's latency from its rounds: the medians of p50 and p99, and the
/// medians of its per-round differences to `kernel-forward` (measured minutes apart
/// at most, in the same round), which is what "added latency" means.
pub fn apply_latency(cases: &mut [CaseResult], lat: &[(String, Vec<LatRun>)]) {
    let kf = lat
        .iter()
        .find(|(c, _)| c == "kernel-forward")
        .map(|(_, r)| r.clone());
    for c in cases.iter_mut() {
        let Some((_, runs)) = lat.iter().find(|(n, _)| *n == c.name) else {
            continue;
        };
        let p50: Vec<f64> = runs.iter().flatten().map(|r| r.0).collect();
        let p99: Vec<f64> = runs.iter().flatten().map(|r| r.1).collect();
        c.lat_p50_us = median(&p50);
        c.lat_p99_us = median(&p99);
        c.lat_p50_runs_us = runs.iter().map(|r| r.map(|r| r.0)).collect();
        c.lat_p99_runs_us = runs.iter().map(|r| r.map(|r| r.1)).collect();
        if let Some(k) = &kf {
            let diff = |f: fn(&(f64, f64)) -> f64| -> Option<f64> {
                let d: Vec<f64> = runs
                    .iter()
                    .zip(k)
                    .filter_map(|(a, b)| Some(f(a.as_ref()?) - f(b.as_ref()?)))
                    .collect();
                median(&d)
            };
            c.lat_p50_over_kernel_us = diff(|r| r.0);
            c.lat_p99_over_kernel_us = diff(|r| r.1);
        }
    }
}

/// The median run of (received, offered) pairs by received rate, with that run's offered
/// rate (for an even count, the mean of the two middle runs), so the two belong together.
pub fn median_run(runs: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = runs
        .iter()
        .copied()
        .filter(|(r, o)| r.is_finite() && o.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        ((v[m - 1].0 + v[m].0) / 2.0, (v[m - 1].1 + v[m].1) / 2.0)
    })
}

/// Logs a measurement (or why it failed) and returns it.
fn note(log: &mut dyn FnMut(&str), what: &str, res: anyhow::Result<f64>) -> Option<f64> {
    match res {
        Ok(v) => {
            log(&format!("  {what}: {v:.3}"));
            Some(v)
        }
        Err(e) => {
            log(&format!("  {what} failed: {e:#}"));
            None
        }
    }
}

/// Worker CPU seconds per GB (10^9 bytes) received between two stats documents.
pub fn worker_cpu_s_per_gb(before: &Stats, after: &Stats) -> Option<f64> {
    let bytes = |st: &Stats| -> u64 { st.workers.iter().map(|w| w.rx_bytes).sum() };
    let (c0, _) = before.worker_totals();
    let (c1, _) = after.worker_totals();
    let b = bytes(after).checked_sub(bytes(before)).filter(|&b| b > 0)?;
    Some((c1 - c0).max(0.0) / (b as f64 / 1e9))
}

/// Worker CPU seconds per million received frames between two stats documents.
pub fn worker_cpu_s_per_mpkt(before: &Stats, after: &Stats) -> Option<f64> {
    let (c0, p0) = before.worker_totals();
    let (c1, p1) = after.worker_totals();
    let pkts = p1.checked_sub(p0).filter(|&p| p > 0)?;
    Some((c1 - c0).max(0.0) / (pkts as f64 / 1e6))
}

/// Idle CPU of an adaptive chain, and adaptive vs busy 64-byte UDP throughput: the
/// median of `repeat` runs each, taken in interleaved order (adaptive, busy, busy,
/// adaptive, …) with a fresh `nfx run` per run, so that a change in the machine's other
/// load does not land on one mode only.
fn adaptive_checks(
    opts: &BenchOpts,
    tb: &TestbedGuard,
    dir: &Path,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<(f64, f64)> {
    let tmp = tempfile::Builder::new()
        .prefix("adaptive-")
        .tempdir_in(dir)?;
    let mut runs = [Vec::new(), Vec::new()];
    let mut idle = None;
    for round in 0..opts.flood.repeat.max(1) {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for mode in order {
            let poll = ["adaptive", "busy"][mode];
            let (chain, extra) = chain_of("nfx-chain", opts);
            let spec = run_spec(&format!("chain-{poll}-{round}"), tmp.path(), chain, poll);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let nfx = NfxRun::start(&opts.nfx_bin, tb, &spec, &extra, tmp.path())?;
            if poll == "adaptive" && idle.is_none() {
                // Let start-up settle, then measure a quiet interval.
                std::thread::sleep(Duration::from_millis(500));
                let cpu = ProcessCpu::start(nfx.pid())?;
                std::thread::sleep(Duration::from_secs(u64::from(opts.secs.clamp(2, 5))));
                let pct = cpu.cores()? * 100.0;
                log(&format!("  idle adaptive CPU: {pct:.2} % of a core"));
                idle = Some(pct);
            }
            let u = udp64(tb, &opts.flood, Some(nfx.pid()))?;
            log(&format!(
                "  {poll} udp64 Mpps: {:.3} (offered {:.3})",
                u.received_mpps, u.offered_mpps
            ));
            runs[mode].push(u.received_mpps);
            nfx.stop()?;
        }
    }
    let (Some(a), Some(b), Some(idle)) = (median(&runs[0]), median(&runs[1]), idle) else {
        anyhow::bail!("no adaptive or busy run");
    };
    Ok((idle, a / b))
}

/// The result as a table with ratios to the kernel baselines.
pub fn table(rep: &BenchReport) -> String {
    let find = |n: &str| rep.cases.iter().find(|c| c.name == n);
    let kf = find("kernel-forward");
    let kn = find("kernel-nftables");
    let f = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    let r = |a: Option<f64>, b: Option<f64>| f(ratio(a, b), 2);
    let mut s = format!(
        "{:<17} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5} {:>7} {:>7} | {:>9} {:>9} {:>8} {:>7} {:>7}\n",
        "case",
        "tcp1",
        "tcp4",
        "udp64",
        "offered",
        "p50",
        "p99",
        "cores",
        "wcpu",
        "tcpwcpu",
        "tcp1/kfwd",
        "tcp1/knft",
        "udp/kfwd",
        "+p50",
        "+p99"
    );
    s.push_str(&format!(
        "{:<17} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5} {:>7} {:>7} | {:>9} {:>9} {:>8} {:>7} {:>7}\n",
        "", "Gbit/s", "Gbit/s", "Mpps", "Mpps", "µs", "µs", "", "s/Mpkt", "s/GB", "", "", "", "µs", "µs"
    ));
    for c in &rep.cases {
        let plus = |d: Option<f64>| d.map_or("-".into(), |d| format!("{d:+.1}"));
        s.push_str(&format!(
            "{:<17} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5} {:>7} {:>7} | {:>9} {:>9} {:>8} {:>7} {:>7}\n",
            c.name,
            f(c.tcp1_gbps, 2),
            f(c.tcp4_gbps, 2),
            f(c.udp64_mpps, 3),
            f(c.udp64_offered_mpps, 3),
            f(c.lat_p50_us, 1),
            f(c.lat_p99_us, 1),
            f(c.cpu_cores, 2),
            f(c.worker_cpu_s_per_mpkt, 3),
            f(c.tcp1_worker_cpu_s_per_gb, 3),
            r(c.tcp1_gbps, kf.and_then(|k| k.tcp1_gbps)),
            r(c.tcp1_gbps, kn.and_then(|k| k.tcp1_gbps)),
            r(c.udp64_mpps, kf.and_then(|k| k.udp64_mpps)),
            plus(c.lat_p50_over_kernel_us),
            plus(c.lat_p99_over_kernel_us),
        ));
    }
    s.push_str(&format!(
        "udp64: generator {}, sink {}, median of {} run(s); wcpu = nfx worker CPU-seconds per million frames received; tcpwcpu = per GB received in the 1-stream TCP runs\n",
        rep.generator, rep.sink, rep.repeat
    ));
    let gen: Vec<String> = rep
        .cases
        .iter()
        .filter_map(|c| {
            c.udp64_gen_cpu_us_per_frame
                .map(|g| format!("{} {g:.2}", c.name))
        })
        .collect();
    if !gen.is_empty() {
        s.push_str(&format!(
            "generator CPU µs per offered frame (incl. edge's receive, which veth runs in the sender): {}\n",
            gen.join(", ")
        ));
    }
    s.push_str(&format!(
        "latency: sockperf TCP ping-pong, median of {} round(s) in alternating case order, a fresh set-up per run; +p50/+p99 = median of the per-round differences to kernel-forward\n",
        rep.lat_repeat
    ));
    s.push_str(&format!(
        "vector/scalar udp64: {} (received Mpps); worker CPU per packet scalar/vector: {}\n",
        f(rep.vector_vs_scalar_udp64, 2),
        f(rep.vector_vs_scalar_cpu_per_packet, 2)
    ));
    if let Some(v) = find("nfx-chain") {
        if ratio(v.udp64_mpps, v.udp64_offered_mpps).is_some_and(|r| r >= 0.98) {
            s.push_str(
                "note: nfx-chain received what was offered (the generator, not the vector \
                 worker, was the limit): both vector/scalar ratios are lower bounds\n",
            );
        }
    }
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
            udp64_offered_mpps: Some(udp * 1.5),
            udp64_runs: vec![udp],
            udp64_gen_cpu_us_per_frame: Some(2.5),
            worker_cpu_s_per_mpkt: Some(1.0 / udp),
            lat_p50_us: Some(p50),
            lat_p99_us: Some(p50 * 2.0),
            lat_p50_runs_us: vec![Some(p50)],
            lat_p99_runs_us: vec![Some(p50 * 2.0)],
            lat_p50_over_kernel_us: Some(p50 - 30.0),
            lat_p99_over_kernel_us: Some(p50 * 2.0 - 60.0),
            cpu_cores: Some(1.0),
            tcp1_worker_cpu_s_per_gb: Some(tcp1 / 100.0),
        }
    }

    #[test]
    fn latency_rounds_alternate_and_differences_are_per_round() {
        let cases: Vec<String> = ["kernel-forward", "nfx-chain", "nfx-chain-scalar"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            round_order(&cases, 0),
            ["kernel-forward", "nfx-chain", "nfx-chain-scalar"]
        );
        assert_eq!(
            round_order(&cases, 1),
            ["nfx-chain-scalar", "nfx-chain", "kernel-forward"]
        );
        // Round 1 is slow for everything (other load): the per-round differences stay
        // +5 / +6 / +7 µs, while the difference of the medians would not.
        let lat = vec![
            (
                "kernel-forward".to_string(),
                vec![Some((20.0, 40.0)), Some((60.0, 90.0)), Some((21.0, 41.0))],
            ),
            (
                "nfx-chain".to_string(),
                vec![Some((25.0, 50.0)), Some((66.0, 99.0)), Some((28.0, 45.0))],
            ),
            ("nfx-chain-scalar".to_string(), vec![None, None, None]),
        ];
        let mut rows: Vec<CaseResult> = cases
            .iter()
            .map(|c| CaseResult {
                name: c.clone(),
                ..Default::default()
            })
            .collect();
        apply_latency(&mut rows, &lat);
        let chain = &rows[1];
        assert_eq!(chain.lat_p50_us, Some(28.0));
        assert_eq!(chain.lat_p99_us, Some(50.0));
        assert_eq!(chain.lat_p50_over_kernel_us, Some(6.0));
        assert_eq!(chain.lat_p99_over_kernel_us, Some(9.0));
        assert_eq!(chain.lat_p50_runs_us, [Some(25.0), Some(66.0), Some(28.0)]);
        assert_eq!(rows[0].lat_p50_over_kernel_us, Some(0.0));
        let scalar = &rows[2];
        assert_eq!(scalar.lat_p50_us, None);
        assert_eq!(scalar.lat_p50_over_kernel_us, None);
        assert_eq!(scalar.lat_p99_runs_us, [None, None, None]);
        // Without kernel-forward there is nothing to add to.
        let mut lone = vec![CaseResult {
            name: "nfx-chain".into(),
            ..Default::default()
        }];
        apply_latency(&mut lone, &lat[1..2]);
        assert_eq!(lone[0].lat_p50_us, Some(28.0));
        assert_eq!(lone[0].lat_p50_over_kernel_us, None);
    }

    #[test]
    fn json_has_the_agreed_shape() {
        let rep = BenchReport {
            cases: vec![case("kernel-forward", 20.0, 0.4, 30.0)],
            idle_cpu_pct_adaptive: Some(0.5),
            ..Default::default()
        };
        let v = serde_json::to_value(&rep).unwrap();
        let c = v["cases"][0].as_object().unwrap();
        // The agreed keys, then the 64-byte detail this bench adds.
        for k in [
            "name",
            "tcp1_gbps",
            "tcp4_gbps",
            "udp64_mpps",
            "lat_p50_us",
            "lat_p99_us",
            "cpu_cores",
            "udp64_offered_mpps",
            "udp64_runs",
            "worker_cpu_s_per_mpkt",
            "tcp1_worker_cpu_s_per_gb",
            "lat_p50_runs_us",
            "lat_p99_runs_us",
            "lat_p50_over_kernel_us",
            "lat_p99_over_kernel_us",
            "udp64_gen_cpu_us_per_frame",
        ] {
            assert!(c.contains_key(k), "{k}");
        }
        assert_eq!(c.len(), 16);
        for k in ["vector_vs_scalar_udp64", "vector_vs_scalar_cpu_per_packet"] {
            assert!(v[k].is_null(), "{k}");
        }
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
        let rep = BenchReport {
            vector_vs_scalar_udp64: Some(4.0),
            vector_vs_scalar_cpu_per_packet: Some(3.5),
            ..rep
        };
        let t = table(&rep);
        let row = t.lines().find(|l| l.starts_with("nfx-chain ")).unwrap();
        assert!(row.contains(" 0.50 "), "{row}");
        assert!(row.contains(" 1.00 "), "{row}");
        assert!(row.contains(" 2.00 "), "{row}");
        assert!(row.contains("+10.0"), "{row}");
        assert!(row.contains(" 1.200 "), "offered: {row}");
        assert!(row.contains(" 1.250 "), "worker CPU: {row}");
        assert!(row.contains(" 0.100 "), "worker CPU per GB: {row}");
        assert!(t.contains("vector/scalar udp64: 4.00"), "{t}");
        assert!(t.contains("scalar/vector: 3.50"), "{t}");
        assert!(t.contains("generator CPU µs per offered frame"), "{t}");
        assert!(t.contains("nfx-chain 2.50"), "{t}");
        assert!(!t.contains("lower bounds"), "{t}");
        let mut rep = rep;
        rep.cases[2].udp64_offered_mpps = Some(0.8);
        assert!(table(&rep).contains("lower bounds"));
    }

    #[test]
    fn median_and_worker_cpu_per_packet() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        let runs = [(0.05, 0.09), (0.03, 0.04), (0.04, 0.08)];
        assert_eq!(median_run(&runs), Some((0.04, 0.08)));
        assert_eq!(median_run(&runs[..2]), Some((0.04, 0.065)));
        assert_eq!(median_run(&[]), None);
        let worker = |cpu_s: f64, rx_packets: u64, rx_bytes: u64| Stats {
            workers: vec![nfx_proto::WorkerStats {
                cpu_s,
                rx_packets,
                rx_bytes,
                ..Default::default()
            }],
            ..Stats::default()
        };
        let st = |cpu: f64, rx: u64| worker(cpu, rx, 0);
        let per = worker_cpu_s_per_mpkt(&st(1.0, 1_000_000), &st(1.5, 3_000_000)).unwrap();
        assert!((per - 0.25).abs() < 1e-12, "{per}");
        assert_eq!(worker_cpu_s_per_mpkt(&st(1.0, 5), &st(2.0, 5)), None);
        let gb = |cpu: f64, b: u64| worker(cpu, 0, b);
        let per = worker_cpu_s_per_gb(&gb(2.0, 1_000_000_000), &gb(2.5, 3_000_000_000)).unwrap();
        assert!((per - 0.25).abs() < 1e-12, "{per}");
        assert_eq!(worker_cpu_s_per_gb(&gb(1.0, 5), &gb(2.0, 5)), None);
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
    }

    #[test]
    fn generator_and_sink_names() {
        for n in Generator::NAMES {
            assert_eq!(Generator::parse(n).unwrap().as_str(), n);
        }
        assert!(Generator::parse("dpdk").is_err());
        for n in SinkKind::NAMES {
            assert_eq!(SinkKind::parse(n).unwrap().as_str(), n);
        }
        assert!(SinkKind::parse("tap").is_err());
    }
}
