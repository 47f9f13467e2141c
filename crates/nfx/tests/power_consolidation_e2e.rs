//! The controller's power manager on real knobs, on a one-host testbed (`nfx testbed up
//! --hosts 1`).
//!
//! Consolidation: a chain of a firewall and an
//! elephant-flow detector, each on a worker of its own on the same host, managed with
//! `nfx up --power-manager-service`. Idle, the manager pins every thread of both
//! workers to the host's first core; the test reads each thread's `Cpus_allowed_list`
//! from `/proc/<pid>/task/<tid>/status` and finds the decision as a completed `power`
//! operation with its reason. Under a paced UDP stream through the chain, the workers
//! ask for more than one core gives them (their CPU time plus the time they waited for
//! it, from the kernel's `schedstat`): they are spread over all of the host's cores
//! again, read back the same way; once the stream stops they are consolidated again.
//! The service's latency SLA (1 ms) keeps its workers unlimited, so the affinity is the
//! only knob that moves.
//!
//! Poll mode: a one-firewall service, managed with the busy-poll threshold tuned to
//! 1,000 frames/s (`--power-busy-above-pps`, so a rate this machine carries beside builds
//! is clearly "high"). Idle, its worker stays adaptive; under a paced 3,000 datagram/s
//! stream the manager switches it to busy polling, which the worker reports and its CPU
//! time from `/proc` shows; once the stream stops it is switched back to adaptive and
//! its CPU time falls to a tenth or less. Each switch is a completed `power` operation
//! with its reason.
//!
//! Nothing waits for a fixed time: every step is polled with a bound (the CPU windows
//! are measurements, not waits). The two tests run one after the other (one testbed at
//! a time, same prefix). Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;

use common::eventually;
use nfx_control::client::Client;
use nfx_testbed::udpgen::{self, Sink};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One testbed at a time: both tests use the same prefix and subnet.
static SERIAL: Mutex<()> = Mutex::new(());

const PREFIX: &str = "hc-";
const BASE: &str = "188";
const TOKEN: &str = "power-consolidation-e2e-token-0123456";
const SERVICE: &str = "cons-svc";
const PORT: u16 = 9100;
/// Paced rate of the stream: each adaptive worker spins 200 µs after a packet, so at
/// this rate both ask for most of a core, far above the manager's 0.75-core spread
/// threshold, while a 2-core CI machine still carries it.
const PPS: u64 = 4_000;
/// How long the stream may run before the spread must have happened.
const LOAD_S: u64 = 12;
/// Bound on each consolidation (the manager needs two heartbeat reports, 1 s apart).
const SETTLE: Duration = Duration::from_secs(10);

fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

/// The service: a firewall and an elephant-flow detector in a chain, each needing 60 %
/// of a device, so each gets a worker of its own (the testbed splits the host's cores
/// between two devices).
fn service_yaml(
    src: &(String, std::net::Ipv4Addr, String),
    dst_addr: std::net::Ipv4Addr,
    need: f64,
) -> String {
    let fw = format!(
        "      - function: firewall
        capacity_need: {need}
        config: {{ default: deny, rules: [{{ action: allow, proto: udp, dport: {PORT} }}] }}
      - function: elephant
        capacity_need: {need}
        config: {{ min_bytes: 1000000 }}
"
    );
    format!(
        "services:
  - id: {SERVICE}
    tenant: acme
    ingress: {host}
    egress: {host}
    selector: {{ src: {}/32, dst: {dst_addr}/32, proto: udp, dport: {PORT} }}
    chain:
{fw}    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        src.1,
        host = src.2,
    )
}

/// Each worker of the service: (device, pid), from the controller's energy summary.
fn workers(c: &Client) -> Vec<(String, u32)> {
    workers_of(c, SERVICE)
}

/// Each worker of `service`: (device, pid), from the controller's energy summary.
fn workers_of(c: &Client, service: &str) -> Vec<(String, u32)> {
    let e = c.get("/api/v1/energy").unwrap().body;
    let Some(svc) = e["services"]
        .as_array()
        .and_then(|v| v.iter().find(|s| s["service"] == service))
    else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = Vec::new();
    for i in svc["instances"].as_array().into_iter().flatten() {
        let (Some(host), Some(device)) = (i["host"].as_str(), i["device"].as_str()) else {
            continue;
        };
        let pid = e["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|h| h["host"] == host)
            .flat_map(|h| h["workers"].as_array().cloned().unwrap_or_default())
            .find(|w| w["device"] == device)
            .and_then(|w| w["pid"].as_u64());
        if let Some(pid) = pid {
            if !out.iter().any(|(d, _)| d == device) {
                out.push((device.to_string(), pid as u32));
            }
        }
    }
    out
}

/// A `Cpus_allowed_list` value (`0-2,5`) as a sorted list of CPUs.
fn cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => v.push(part.parse().ok()?),
        }
    }
    v.sort_unstable();
    Some(v)
}

/// The CPUs every thread of `pid` may run on, from `/proc/<pid>/task/*/status`.
fn thread_cpus(pid: u32) -> Vec<(u32, Vec<usize>)> {
    nfx_io::cpu::thread_ids(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
            let line = s
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            Some((tid, cpu_list(line)?))
        })
        .collect()
}

/// Whether every thread of every worker may run on exactly `cpus`.
fn all_on(ws: &[(String, u32)], cpus: &[usize]) -> bool {
    ws.iter().all(|(_, pid)| {
        let t = thread_cpus(*pid);
        !t.is_empty() && t.iter().all(|(_, c)| c == cpus)
    })
}

/// Completed `power` operations on the service whose reason contains `what`, for each
/// worker's device.
fn completed(c: &Client, ws: &[(String, u32)], what: &str) -> Vec<String> {
    let ops = hostbed::operations(c, "power", SERVICE);
    ws.iter()
        .filter_map(|(d, _)| {
            ops.iter()
                .filter(|o| o["state"] == "COMPLETED")
                .filter_map(|o| o["reason"].as_str())
                .find(|r| r.starts_with(&format!("{d}: affinity")) && r.contains(what))
                .map(str::to_string)
        })
        .collect()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn the_power_manager_consolidates_idle_workers_and_spreads_them_under_load() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("power_consolidation_e2e: one CPU, nothing to consolidate: skipped");
        return;
    }
    let t0 = Instant::now();
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 1);
    let (src, dst) = (bed.endpoint("src"), bed.endpoint("dst"));
    let (_ctl, url) =
        hostbed::controller_with(&bed.out, TOKEN, &["--power-manager-service", SERVICE]);
    let file = bed.out.join("svc.yaml");
    // The testbed gives each of its two software devices half the host's cores.
    let need = 0.6 * (cores / 2) as f64;
    std::fs::write(&file, service_yaml(&src, dst.1, need)).unwrap();
    nfx(&["deploy", file.to_str().unwrap(), "--url", &url]);
    let c = Client::new(&url, Some(TOKEN.to_string().into()));
    let mut ws = Vec::new();
    assert!(
        eventually(Duration::from_secs(8), || {
            ws = workers(&c);
            ws.len() == 2
        }),
        "the service's two workers were never metered: {ws:?}"
    );
    let first = vec![0usize];
    let every: Vec<usize> = (0..cores).collect();

    // Idle: every thread of both workers on core 0, and the decision on record.
    let consolidated = eventually(SETTLE, || {
        all_on(&ws, &first) && completed(&c, &ws, "consolidated on core 0").len() == 2
    });
    let ops = hostbed::operations(&c, "power", SERVICE);
    assert!(
        consolidated,
        "idle workers not consolidated: threads {:?}, ops {ops:#?}",
        ws.iter().map(|(_, p)| thread_cpus(*p)).collect::<Vec<_>>()
    );
    let idle_at = t0.elapsed().as_secs_f64();
    let why_idle = completed(&c, &ws, "consolidated on core 0");

    // Under the stream: spread over every core again, read back from the kernel.
    let sink = Sink::start(&dst.0, PORT, b"").unwrap();
    let spec = common::paced(&src.0, dst.1, PORT, PPS, LOAD_S);
    let tl = Instant::now();
    let gen = std::thread::spawn(move || udpgen::generate(spec));
    let spread = eventually(Duration::from_secs(LOAD_S), || {
        all_on(&ws, &every) && completed(&c, &ws, "spread over cores").len() == 2
    });
    let spread_s = tl.elapsed().as_secs_f64();
    let carried = sink.packets();
    let ops = hostbed::operations(&c, "power", SERVICE);
    assert!(
        spread,
        "not spread under load after {spread_s:.1} s ({carried} datagrams through): threads {:?}, ops {ops:#?}",
        ws.iter().map(|(_, p)| thread_cpus(*p)).collect::<Vec<_>>()
    );
    let why_spread = completed(&c, &ws, "spread over cores");
    let sent = gen.join().unwrap().unwrap().sent;
    let got = sink.finish().unwrap().packets;
    assert!(got > sent / 2, "the chain carried {got} of {sent}");

    // The stream over: consolidated again (a second decision per worker).
    let again = eventually(SETTLE, || {
        all_on(&ws, &first) && {
            let ops = hostbed::operations(&c, "power", SERVICE);
            ops.iter()
                .filter(|o| o["state"] == "COMPLETED")
                .filter_map(|o| o["reason"].as_str())
                .filter(|r| r.contains("consolidated on core 0"))
                .count()
                >= 4
        }
    });
    let ops = hostbed::operations(&c, "power", SERVICE);
    assert!(again, "not consolidated again after the load: {ops:#?}");
    // The reasons are in `nfx status` too.
    let text = nfx(&["status", "--url", &url]);
    assert!(
        text.lines()
            .any(|l| l.contains("power") && l.contains(SERVICE) && l.contains("affinity")),
        "{text}"
    );
    // Only the affinity moved: no CPU limit, no poll-mode change at this rate.
    assert!(
        ops.iter().all(|o| o["reason"]
            .as_str()
            .is_some_and(|r| r.contains(": affinity "))),
        "{ops:#?}"
    );
    eprintln!(
        "power_consolidation_e2e: {cores} cores; consolidated idle at {idle_at:.1} s ({why_idle:?}); spread {spread_s:.1} s into a {PPS} datagram/s stream ({why_spread:?}); chain carried {got} of {sent}; {} power operations; {:.1} s in all; load {}",
        ops.len(),
        t0.elapsed().as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    nfx(&["destroy", SERVICE, "--url", &url]);
    drop(_ctl);
    bed.down();
}

/// The poll-mode test's service.
const POLL_SERVICE: &str = "poll-svc";
/// The busy-poll threshold the controller is started with, frames/s.
const BUSY_ABOVE: u64 = 1_000;
/// The "high" rate: three times the threshold, well within what a loaded 2-core
/// machine carries through one worker.
const HIGH_PPS: u64 = 3_000;
/// How long the high stream runs: the switch (two heartbeat reports, ≤ 4 s) and a CPU
/// window fit in it.
const HIGH_S: u64 = 14;
/// Window over which a worker's CPU time is measured.
const CPU_WINDOW: Duration = Duration::from_secs(2);

/// The poll-mode test's service: one firewall on one worker, its 1 ms latency SLA
/// keeping the worker unlimited (the poll mode is the only knob that moves).
fn poll_service_yaml(
    src: &(String, std::net::Ipv4Addr, String),
    dst: std::net::Ipv4Addr,
) -> String {
    format!(
        "services:
  - id: {POLL_SERVICE}
    tenant: acme
    ingress: {host}
    egress: {host}
    selector: {{ src: {}/32, dst: {dst}/32, proto: udp, dport: {PORT} }}
    chain:
      - function: firewall
        config: {{ default: deny, rules: [{{ action: allow, proto: udp, dport: {PORT} }}] }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        src.1,
        host = src.2,
    )
}

/// The poll mode of every thread of `device`'s worker as the agent read it from the
/// worker's stats (via the controller).
fn reported_polls(c: &Client, device: &str) -> Vec<String> {
    let e = c.get("/api/v1/energy").unwrap().body;
    e["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|h| h["workers"].as_array().cloned().unwrap_or_default())
        .filter(|w| w["device"] == device)
        .flat_map(|w| w["threads"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["poll"].as_str().map(str::to_string))
        .collect()
}

/// Reasons of the completed poll-mode decisions on `device` that switched it to `mode`.
fn poll_decisions(c: &Client, device: &str, mode: &str) -> Vec<String> {
    hostbed::operations(c, "power", POLL_SERVICE)
        .iter()
        .filter(|o| o["state"] == "COMPLETED")
        .filter_map(|o| o["reason"].as_str())
        .filter(|r| r.starts_with(&format!("{device}: poll {mode}:")))
        .map(str::to_string)
        .collect()
}

/// Cores `pid`'s threads used over [`CPU_WINDOW`], from `/proc`.
fn cores_used(pid: u32) -> f64 {
    let (a, t) = (hostbed::cpu_s(pid), Instant::now());
    std::thread::sleep(CPU_WINDOW);
    (hostbed::cpu_s(pid) - a) / t.elapsed().as_secs_f64()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn the_power_manager_busy_polls_a_loaded_worker_and_lets_it_sleep_when_idle() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 1);
    let (src, dst) = (bed.endpoint("src"), bed.endpoint("dst"));
    let threshold = BUSY_ABOVE.to_string();
    let (_ctl, url) = hostbed::controller_with(
        &bed.out,
        TOKEN,
        &[
            "--power-manager-service",
            POLL_SERVICE,
            "--power-busy-above-pps",
            &threshold,
        ],
    );
    let file = bed.out.join("poll.yaml");
    std::fs::write(&file, poll_service_yaml(&src, dst.1)).unwrap();
    nfx(&["deploy", file.to_str().unwrap(), "--url", &url]);
    let c = Client::new(&url, Some(TOKEN.to_string().into()));
    let mut ws = Vec::new();
    assert!(
        eventually(Duration::from_secs(8), || {
            ws = workers_of(&c, POLL_SERVICE);
            ws.len() == 1 && !reported_polls(&c, &ws[0].0).is_empty()
        }),
        "the service's worker was never metered: {ws:?}"
    );
    let (device, pid) = ws[0].clone();

    // Idle: adaptive (the worker's default), and the manager leaves it so.
    let idle_before = cores_used(pid);
    let polls = reported_polls(&c, &device);
    assert!(polls.iter().all(|p| p == "adaptive"), "{polls:?}");
    assert!(
        hostbed::operations(&c, "power", POLL_SERVICE).is_empty(),
        "{:#?}",
        hostbed::operations(&c, "power", POLL_SERVICE)
    );

    // Under the high stream: switched to busy polling, as the worker reports it.
    let sink = Sink::start(&dst.0, PORT, b"").unwrap();
    let spec = common::paced(&src.0, dst.1, PORT, HIGH_PPS, HIGH_S);
    let tl = Instant::now();
    let gen = std::thread::spawn(move || udpgen::generate(spec));
    let busy = eventually(Duration::from_secs(HIGH_S) - CPU_WINDOW, || {
        poll_decisions(&c, &device, "busy").len() == 1
            && reported_polls(&c, &device).iter().all(|p| p == "busy")
    });
    let busy_s = tl.elapsed().as_secs_f64();
    assert!(
        busy,
        "not busy polling {busy_s:.1} s into a {HIGH_PPS} datagram/s stream ({} through): polls {:?}, ops {:#?}",
        sink.packets(),
        reported_polls(&c, &device),
        hostbed::operations(&c, "power", POLL_SERVICE)
    );
    let busy_cores = cores_used(pid);
    let in_stream = tl.elapsed() < Duration::from_secs(HIGH_S);
    let why_busy = poll_decisions(&c, &device, "busy").remove(0);
    assert!(
        why_busy.contains(&format!("pps > {BUSY_ABOVE}: busy polling")),
        "{why_busy}"
    );
    let sent = gen.join().unwrap().unwrap().sent;
    let got = sink.finish().unwrap().packets;
    assert!(
        in_stream,
        "the stream ended before the busy CPU was measured"
    );
    assert!(got > sent / 2, "the worker carried {got} of {sent}");

    // The stream over: adaptive again, and the worker's CPU time falls.
    let adaptive = eventually(Duration::from_secs(10), || {
        poll_decisions(&c, &device, "adaptive").len() == 1
            && reported_polls(&c, &device).iter().all(|p| p == "adaptive")
    });
    assert!(
        adaptive,
        "not adaptive again after the stream: polls {:?}, ops {:#?}",
        reported_polls(&c, &device),
        hostbed::operations(&c, "power", POLL_SERVICE)
    );
    let idle_after = cores_used(pid);
    let why_adaptive = poll_decisions(&c, &device, "adaptive").remove(0);
    assert!(
        why_adaptive.contains(&format!("pps < {}: adaptive polling", BUSY_ABOVE / 2)),
        "{why_adaptive}"
    );
    assert!(
        idle_after <= 0.05 && busy_cores >= 10.0 * idle_after,
        "busy {busy_cores:.3} cores, adaptive and idle {idle_after:.3} (before the stream {idle_before:.3})"
    );
    // The reasons are in `nfx status`; no other knob moved.
    let text = nfx(&["status", "--url", &url]);
    for mode in ["busy", "adaptive"] {
        assert!(
            text.lines().any(|l| l.contains(POLL_SERVICE)
                && l.contains(&format!("{device}: poll {mode}:"))),
            "{text}"
        );
    }
    let ops = hostbed::operations(&c, "power", POLL_SERVICE);
    assert_eq!(ops.len(), 2, "{ops:#?}");
    eprintln!(
        "power_consolidation_e2e: poll mode: idle adaptive {idle_before:.3} cores; busy {busy_s:.1} s into {HIGH_PPS} datagram/s ({why_busy}) at {busy_cores:.3} cores; adaptive again ({why_adaptive}) at {idle_after:.3} cores; carried {got} of {sent}; {:.1} s in all; load {}",
        t0.elapsed().as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    nfx(&["destroy", POLL_SERVICE, "--url", &url]);
    drop(_ctl);
    bed.down();
}
