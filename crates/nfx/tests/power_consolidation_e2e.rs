//! The controller's power manager consolidating a service's workers on real knobs, on a
//! one-host testbed (`nfx testbed up --hosts 1`): a chain of a firewall and an
//! elephant-flow detector, each on a worker of its own on the same host, managed with
//! `nfx up --power-manager-service`. Idle, the manager pins every thread of both
//! workers to the host's first core; the test reads each thread's `Cpus_allowed_list`
//! from `/proc/<pid>/task/<tid>/status` and finds the decision as a completed `power`
//! operation with its reason. Under a paced UDP stream through the chain, the workers
//! ask for more than one core gives them (their CPU time plus the time they waited for
//! it, from the kernel's `schedstat`): they are spread over all of the host's cores
//! again, read back the same way; once the stream stops they are consolidated again.
//! The service's latency SLA (1 ms) keeps its workers unlimited, so the affinity is the
//! only knob that moves. Nothing waits for a fixed time: every step is polled with a
//! bound. Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;

use common::eventually;
use nfx_control::client::Client;
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use std::time::{Duration, Instant};

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
    let e = c.get("/api/v1/energy").unwrap().body;
    let Some(svc) = e["services"]
        .as_array()
        .and_then(|v| v.iter().find(|s| s["service"] == SERVICE))
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
    let spec = GenSpec {
        ns: src.0.clone(),
        dst: dst.1,
        port: PORT,
        payload: 512,
        pattern: Vec::new(),
        flows: 1,
        duration: Duration::from_secs(LOAD_S),
        batch: 1,
        pps: Some(PPS),
    };
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
