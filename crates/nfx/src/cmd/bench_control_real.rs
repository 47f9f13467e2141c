//! `nfx bench control --real`: the control plane on real hosts. Builds a 3-host testbed
//! with its agents (`nfx testbed up --hosts 3`), starts the controller (`nfx up`) on it and
//! measures, in one run:
//! * steering overhead: sockperf TCP ping-pong from `src` to `dst` across the three hosts,
//!   with plain kernel forwarding (every host's `forward` accepting everything) against a
//!   transit path programmed by the agents (marks, policy routes, closed forwarding),
//!   alternated twice; the p50 difference per host hop;
//! * deploy to first packet: a paced UDP stream runs (and is dropped at h1) while two
//!   services are submitted; the time from the first submit to the first datagram at `dst`;
//! * a new instance on a running worker and a new worker process (medians of 20 and of 5
//!   starts), as the agent times them (and as the controller's HTTPS call sees them);
//! * a migration under a paced UDP stream: datagrams sent − received; then the same
//!   firewall moved to a software device of the egress host (`nfx migrate --device`
//!   across hosts: flow state exported and imported, path re-steered) under the same
//!   stream: datagrams lost and the operation's time;
//! * the middle host's agent killed with SIGKILL: time to the controller's `agent.down`,
//!   and from it to the end of the re-placements.

use super::bench_tunnel::loadavg;
use super::controlled_bed::ControlledBed;
use super::testbed_hosts;
use anyhow::{bail, Context};
use nfx_control::client::read_token_file;
use nfx_control::hostagent::steering::HostPath;
use nfx_control::netns_exec::NetnsExecutor;
use nfx_control::ops::{OpKind, Operation};
use nfx_control::tls;
use nfx_control::vnfm::remote::{AgentLink, RemoteVnfm};
use nfx_control::vnfm::{InstanceSpec, Vnfm};
use nfx_model::Service;
use nfx_testbed::hosts::HostsSpec;
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use nfx_testbed::{netns, sockperf};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// UDP port of the measured stream (service A).
const UDP_PORT: u16 = 9000;
/// TCP port of service B.
const TCP_PORT: u16 = 5201;
/// sockperf port (the transit path of the steering measurement).
const SOCKPERF_PORT: u16 = 11111;
/// Rate of the paced streams, packets/s.
const PPS: u64 = 10_000;
/// Deploys on a running worker measured (median reported).
const RUNNING_DEPLOYS: usize = 20;
/// Deploys that start a worker process measured (median reported), the worker
/// destroyed in between.
const NEW_WORKER_DEPLOYS: usize = 5;

/// Options of the real run.
pub struct RealOptions {
    /// Namespace prefix of its testbed.
    pub prefix: String,
    /// Subnet base of its testbed.
    pub subnet_base: u8,
    /// sockperf seconds per steering sample.
    pub sockperf_secs: u32,
}

/// What `--real` measures (the first seven fields are the agreed JSON).
#[derive(Debug, Clone, Serialize)]
pub struct RealReport {
    /// From the first of two service submits to the first datagram at `dst`, s.
    pub deploy_to_first_packet_s: f64,
    /// Agent's time for a new instance on a running worker (median), ms.
    pub instance_on_running_worker_ms: f64,
    /// Agent's time for a new instance that starts a worker process (median), ms.
    pub new_worker_ms: f64,
    /// From SIGKILL of an agent to the controller's `agent.down`, s.
    pub agent_failure_detect_s: f64,
    /// From `agent.down` to the end of the last re-placement it caused, s.
    pub replace_after_detect_s: f64,
    /// Datagrams of a paced stream lost across a migration.
    pub migration_lost_packets: u64,
    /// Datagrams of the same paced stream lost across a move of the firewall to another
    /// host.
    pub crosshost_migration_lost_packets: u64,
    /// That cross-host migrate operation, from the request to its end, ms.
    pub crosshost_migration_ms: f64,
    /// Datagrams sent across the cross-host migration.
    pub crosshost_migration_sent: u64,
    /// Host the firewall left and host it went to.
    pub crosshost_migration_hosts: (String, String),
    /// sockperf p50 (half round trip) added per host hop by the agents' steering, µs.
    pub steering_added_p50_us_per_hop: f64,
    /// sockperf p50 with plain forwarding, µs (mean of the samples).
    pub plain_p50_us: f64,
    /// sockperf p50 through the steered transit path, µs (mean of the samples).
    pub steered_p50_us: f64,
    /// Host hops of the measured path.
    pub hops: u32,
    /// From the first submit until both services' operations completed, s.
    pub both_services_completed_s: f64,
    /// The controller-side round trip (HTTPS) of the running-worker deploy (median), ms.
    pub instance_on_running_worker_rtt_ms: f64,
    /// The controller-side round trip of the new-worker deploy (median), ms.
    pub new_worker_rtt_ms: f64,
    /// Agent's time of each new-worker deploy, in order, ms.
    pub new_worker_samples_ms: Vec<f64>,
    /// Datagrams sent / received across the migration.
    pub migration_sent: u64,
    /// Datagrams received across the migration.
    pub migration_received: u64,
    /// 1-minute load average at start and end.
    pub load_avg: (Option<f64>, Option<f64>),
}

/// The testbed and controller, with a direct client of every agent.
struct Bed {
    bed: ControlledBed,
    agents: BTreeMap<String, RemoteVnfm>,
}

impl std::ops::Deref for Bed {
    type Target = ControlledBed;
    fn deref(&self) -> &ControlledBed {
        &self.bed
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn up(o: &RealOptions) -> anyhow::Result<Bed> {
    let out = std::env::temp_dir().join(format!("{}bench-control", o.prefix));
    let spec = HostsSpec {
        prefix: o.prefix.clone(),
        subnet_base: o.subnet_base,
        hosts: 3,
        extra_endpoints: Vec::new(),
        names: Vec::new(),
        links: Vec::new(),
    };
    let bed = ControlledBed::up(&spec, &out, &[], &[])?;
    let exec = NetnsExecutor::start(&bed.lay.mgmt_netns, 2)?;
    let ctl_tls = tls::client_config(&tls::TlsFiles {
        ca: out.join("pki").join(tls::CA_FILE),
        cert: out.join("pki/controller.pem"),
        key: out.join("pki/controller.key"),
    })?;
    let token = read_token_file(&out.join("token"))?;
    let mut agents = BTreeMap::new();
    for h in &bed.lay.hosts {
        agents.insert(
            h.id.clone(),
            RemoteVnfm::with_link(AgentLink {
                base: format!("https://{}:{}", h.mgmt, testbed_hosts::AGENT_PORT),
                token: Some(token.clone()),
                tls: Some(ctl_tls.clone()),
                exec: Some(exec.clone()),
                timeout: Duration::from_secs(30),
            }),
        );
    }
    Ok(Bed { bed, agents })
}

/// A service of the bench between `src` and `dst`: a firewall allowing `proto`/`port`.
fn service(bed: &Bed, id: &str, proto: &str, port: u16) -> anyhow::Result<Service> {
    let (src, dst) = (bed.endpoint("src")?, bed.endpoint("dst")?);
    Ok(serde_json::from_value(json!({
        "id": id, "tenant": "bench", "ingress": src.host, "egress": dst.host,
        "selector": {"src": format!("{}/32", src.address), "dst": format!("{}/32", dst.address),
                     "proto": proto, "dport": port},
        "chain": [{"function": "firewall", "capacity_need": 0.25,
                   "config": {"default": "deny", "rules": [{"action": "allow", "proto": proto, "dport": port}]}}],
        "sla": {"max_latency_us": 1000, "min_throughput_gbps": 1},
    }))?)
}

/// Loads `script` with `nft -f -` inside `ns`.
fn nft_in(ns: &str, script: &str) -> anyhow::Result<()> {
    let script = script.to_string();
    netns::in_netns(ns, move || {
        nfx_io::command::run("nft", &["-f", "-"], Some(&script), Duration::from_secs(10))
            .map(|_| ())
            .map_err(Into::into)
    })
}

/// sockperf p50 with plain forwarding and through the agents' transit path (µs).
fn steering(bed: &Bed, secs: u32) -> anyhow::Result<(f64, f64, u32)> {
    let (src, dst) = (bed.endpoint("src")?, bed.endpoint("dst")?);
    let _srv = sockperf::SockperfServer::start(&dst.netns, dst.address, SOCKPERF_PORT)?;
    let route = ["h1", "h2", "h3"];
    let selector = serde_json::from_value(json!({
        "src": format!("{}/32", src.address), "dst": format!("{}/32", dst.address),
        "proto": "tcp", "dport": SOCKPERF_PORT}))?;
    let open = "add table inet nfx_steer\ndelete table inet nfx_steer\n\
                table inet nfx_steer {\n\
                \x20 chain forward {\n\
                \x20   type filter hook forward priority filter; policy accept;\n\
                \x20 }\n\
                }\n";
    let (mut plain, mut steered) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        for h in route {
            nft_in(&bed.host_ns(h), open)?;
        }
        plain.push(sockperf::ping_pong(&src.netns, dst.address, SOCKPERF_PORT, secs)?.p50_us);
        for (i, h) in route.iter().enumerate() {
            let hp = HostPath {
                selector: Clone::clone(&selector),
                prev: i.checked_sub(1).map(|k| route[k].to_string()),
                next: route.get(i + 1).map(|s| s.to_string()),
                stages: Vec::new(),
                instances: BTreeMap::new(),
                after_nat: Vec::new(),
                nat_before: false,
                tunnel_next: None,
                tunnel_prev: None,
            };
            bed.agents[*h].put_path("bench-steer", &hp)?;
        }
        steered.push(sockperf::ping_pong(&src.netns, dst.address, SOCKPERF_PORT, secs)?.p50_us);
        for h in route {
            bed.agents[h].delete_path("bench-steer")?;
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    Ok((mean(&plain), mean(&steered), route.len() as u32))
}

/// A paced UDP stream from `src` to `dst:UDP_PORT` on its own thread.
fn stream(
    bed: &Bed,
    secs: f64,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<udpgen::GenReport>>> {
    let (src, dst) = (bed.endpoint("src")?, bed.endpoint("dst")?);
    let spec = GenSpec {
        ns: src.netns.clone(),
        dst: dst.address,
        port: UDP_PORT,
        payload: 64,
        pattern: Vec::new(),
        flows: 1,
        duration: Duration::from_secs_f64(secs),
        batch: 1,
        pps: Some(PPS),
    };
    Ok(std::thread::spawn(move || udpgen::generate(spec)))
}

/// Deploys two services while a stream is dropped at the ingress; returns (first packet,
/// both completed) seconds after the first submit, and the services' ids.
fn deploy_to_first_packet(bed: &Bed) -> anyhow::Result<(f64, f64)> {
    let dst = bed.endpoint("dst")?;
    let sink = Sink::start(&dst.netns, UDP_PORT, b"")?;
    let gen = stream(bed, 6.0)?;
    std::thread::sleep(Duration::from_millis(500));
    if sink.packets() != 0 {
        bail!("datagrams crossed the testbed before any deploy");
    }
    let t0 = Instant::now();
    let a = bed
        .api
        .deploy(&service(bed, "bench-udp", "udp", UDP_PORT)?)?;
    let b = bed
        .api
        .deploy(&service(bed, "bench-tcp", "tcp", TCP_PORT)?)?;
    let mut first = None;
    while first.is_none() && t0.elapsed() < Duration::from_secs(5) {
        if sink.packets() > 0 {
            first = Some(t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    bed.wait_op(&a)?;
    bed.wait_op(&b)?;
    let both = t0.elapsed().as_secs_f64();
    gen.join()
        .map_err(|_| anyhow::anyhow!("generator panicked"))??;
    sink.finish()?;
    Ok((
        first.context("no datagram crossed within 5 s of the deploy")?,
        both,
    ))
}

/// (agent ms, round-trip ms) of a deploy through `agent`.
fn timed_deploy(agent: &RemoteVnfm, spec: &InstanceSpec) -> anyhow::Result<(f64, f64)> {
    let t = Instant::now();
    let st = agent.deploy_instance(spec)?;
    let rtt = t.elapsed().as_secs_f64() * 1e3;
    let ms = st.detail["agent_ms"]
        .as_f64()
        .context("the agent's answer has no agent_ms")?;
    Ok((ms, rtt))
}

/// Agent and round-trip times (medians) of deploys that start a worker (and each
/// sample's agent time) and of deploys on the running worker.
struct DeployTimes {
    new: (f64, f64),
    new_samples: Vec<f64>,
    running: (f64, f64),
}

/// New workers (each destroyed before the next), then instances on a running worker, on
/// a device no service uses.
fn deploy_times(bed: &Bed) -> anyhow::Result<DeployTimes> {
    let used: Vec<String> = bed
        .api
        .instances()?
        .into_iter()
        .map(|i| i.spec.device)
        .collect();
    let dev = ["h2-sw0", "h2-sw1", "h3-sw0", "h3-sw1"]
        .into_iter()
        .find(|d| !used.iter().any(|u| u == d))
        .context("no idle device")?;
    let host = &dev[..2];
    let agent = &bed.agents[host];
    let spec = |k: usize| -> anyhow::Result<InstanceSpec> {
        Ok(serde_json::from_value(json!({
            "id": format!("bench-x{k}"), "function": "firewall", "device": dev,
            "config": {"default": "allow"}, "throughput_gbps": 0.1, "capacity": 0.1}))?)
    };
    let mut new = Vec::new();
    for k in 0..NEW_WORKER_DEPLOYS {
        new.push(timed_deploy(agent, &spec(0)?)?);
        if k + 1 < NEW_WORKER_DEPLOYS {
            agent.destruct_instance("bench-x0")?;
        }
    }
    let mut running = Vec::new();
    for k in 1..=RUNNING_DEPLOYS {
        running.push(timed_deploy(agent, &spec(k)?)?);
    }
    for k in (0..=RUNNING_DEPLOYS).rev() {
        agent.destruct_instance(&format!("bench-x{k}"))?;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians = |v: &[(f64, f64)]| {
        (
            median(v.iter().map(|r| r.0).collect()),
            median(v.iter().map(|r| r.1).collect()),
        )
    };
    Ok(DeployTimes {
        new: medians(&new),
        new_samples: new.iter().map(|r| r.0).collect(),
        running: medians(&running),
    })
}

/// What one migration under the paced stream gave.
struct Moved {
    sent: u64,
    received: u64,
    /// From the request to the operation's end, ms.
    ms: f64,
    /// Host of the instance before and after.
    hosts: (String, String),
}

/// Migrates bench-udp's instance to `device` (`None`: as `nfx migrate` chooses) under a
/// paced stream.
fn migration(bed: &Bed, device: Option<&str>) -> anyhow::Result<Moved> {
    let dst = bed.endpoint("dst")?;
    let hop = |bed: &Bed| -> anyhow::Result<_> {
        bed.api
            .service("bench-udp")?
            .path
            .and_then(|p| p.hops.into_iter().next())
            .context("bench-udp has no hop")
    };
    let before = hop(bed)?;
    let sink = Sink::start(&dst.netns, UDP_PORT, b"")?;
    let gen = stream(bed, 4.0)?;
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    bed.wait_op(&bed.api.migrate(&before.instance, device)?)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let sent = gen
        .join()
        .map_err(|_| anyhow::anyhow!("generator panicked"))??
        .sent;
    std::thread::sleep(Duration::from_millis(500));
    let received = sink.finish()?.packets;
    let after = hop(bed)?;
    if after.instance == before.instance {
        bail!("the migration of {} did not move it", before.instance);
    }
    Ok(Moved {
        sent,
        received,
        ms,
        hosts: (before.host, after.host),
    })
}

/// Kills the agent of `host`; (detection s, re-placement s after detection).
fn agent_failure(bed: &Bed, out: &Path, host: &str) -> anyhow::Result<(f64, f64)> {
    let pid: i32 = std::fs::read_to_string(out.join("agents").join(format!("{host}.pid")))?
        .trim()
        .parse()?;
    let killed = now_ms();
    // SAFETY: kill(2) of the agent this bench's testbed started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let t = Instant::now();
    let down_ms = loop {
        let ev = bed.api.events(200)?;
        if let Some(e) = ev
            .iter()
            .find(|e| e.kind == "agent.down" && e.detail["host"] == host)
        {
            break e.ts_ms;
        }
        if t.elapsed() > Duration::from_secs(15) {
            bail!("the controller did not notice the agent of {host} die");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Every re-placement started after the detection, to its end.
    let done_ms = loop {
        let ops = bed.api.operations()?;
        let replaces: Vec<&Operation> = ops
            .iter()
            .filter(|o| o.kind == OpKind::Replace && o.created_ms >= down_ms)
            .collect();
        let finished = replaces.iter().all(|o| o.state.is_final());
        if !replaces.is_empty() && finished {
            break replaces
                .iter()
                .map(|o| o.updated_ms)
                .max()
                .unwrap_or(down_ms);
        }
        if t.elapsed() > Duration::from_secs(30) {
            bail!("no re-placement finished after the agent of {host} died");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((
        (down_ms - killed) as f64 / 1e3,
        (done_ms - down_ms) as f64 / 1e3,
    ))
}

/// Runs the whole measurement.
pub fn run(o: &RealOptions) -> anyhow::Result<RealReport> {
    nfx_testbed::root::require_root()?;
    let load_start = loadavg();
    let bed = up(o)?;
    crate::note!("steering: sockperf plain vs steered ...");
    let (plain, steered, hops) = steering(&bed, o.sockperf_secs)?;
    crate::note!("deploy to first packet ...");
    let (first, both) = deploy_to_first_packet(&bed)?;
    crate::note!("deploys on the agent ...");
    let times = deploy_times(&bed)?;
    let (new, running) = (times.new, times.running);
    crate::note!("migration under a stream ...");
    let same = migration(&bed, None)?;
    let (sent, received) = (same.sent, same.received);
    crate::note!("migration to another host under a stream ...");
    let egress = bed.endpoint("dst")?.host.clone();
    let across = migration(&bed, Some(&format!("{egress}-sw0")))?;
    // Back to where it was, so that the agent-failure step finds the services as before.
    let back = format!("{}-sw0", across.hosts.0);
    let fw = bed
        .api
        .service("bench-udp")?
        .path
        .and_then(|p| p.hops.into_iter().next());
    if let Some(h) = fw {
        bed.wait_op(&bed.api.migrate(&h.instance, Some(&back))?)?;
    }
    crate::note!("agent failure ...");
    let (detect, replace) = agent_failure(&bed, &bed.out, "h2")?;
    Ok(RealReport {
        deploy_to_first_packet_s: first,
        instance_on_running_worker_ms: running.0,
        new_worker_ms: new.0,
        agent_failure_detect_s: detect,
        replace_after_detect_s: replace,
        migration_lost_packets: sent.saturating_sub(received),
        crosshost_migration_lost_packets: across.sent.saturating_sub(across.received),
        crosshost_migration_ms: across.ms,
        crosshost_migration_sent: across.sent,
        crosshost_migration_hosts: across.hosts,
        steering_added_p50_us_per_hop: (steered - plain) / f64::from(hops),
        plain_p50_us: plain,
        steered_p50_us: steered,
        hops,
        both_services_completed_s: both,
        instance_on_running_worker_rtt_ms: running.1,
        new_worker_rtt_ms: new.1,
        new_worker_samples_ms: times.new_samples,
        migration_sent: sent,
        migration_received: received,
        load_avg: (load_start, loadavg()),
    })
}

/// Prints the report with the targets.
pub fn print(r: &RealReport) {
    let row = |name: &str, v: String, target: &str| crate::say!("  {name:<36} {v:>12}   {target}");
    crate::say!(
        "real control plane on 3 hosts (load {:?} → {:?})",
        r.load_avg.0,
        r.load_avg.1
    );
    row(
        "deploy → first packet (2 services)",
        format!("{:.3} s", r.deploy_to_first_packet_s),
        "≤ 2 s",
    );
    row(
        "  both operations completed",
        format!("{:.3} s", r.both_services_completed_s),
        "",
    );
    row(
        "instance on a running worker (agent)",
        format!("{:.3} ms", r.instance_on_running_worker_ms),
        "≤ 1 ms",
    );
    row(
        "  round trip over HTTPS",
        format!("{:.3} ms", r.instance_on_running_worker_rtt_ms),
        "",
    );
    row(
        "new worker process (agent, median)",
        format!("{:.1} ms", r.new_worker_ms),
        "≤ 50 ms",
    );
    row(
        "  each start",
        r.new_worker_samples_ms
            .iter()
            .map(|m| format!("{m:.0}"))
            .collect::<Vec<_>>()
            .join(" "),
        "ms",
    );
    row(
        "  round trip over HTTPS",
        format!("{:.1} ms", r.new_worker_rtt_ms),
        "",
    );
    row(
        "agent failure detected",
        format!("{:.3} s", r.agent_failure_detect_s),
        "≤ 3 s",
    );
    row(
        "re-placed after detection",
        format!("{:.3} s", r.replace_after_detect_s),
        "≤ 1 s",
    );
    row(
        "migration lost packets",
        format!("{} of {}", r.migration_lost_packets, r.migration_sent),
        "0",
    );
    row(
        "cross-host migration lost packets",
        format!(
            "{} of {}",
            r.crosshost_migration_lost_packets, r.crosshost_migration_sent
        ),
        &format!(
            "{} → {} in {:.0} ms",
            r.crosshost_migration_hosts.0, r.crosshost_migration_hosts.1, r.crosshost_migration_ms
        ),
    );
    row(
        "steering added p50 per hop",
        format!("{:.2} µs", r.steering_added_p50_us_per_hop),
        "≤ 5 µs",
    );
    row(
        "  sockperf p50 plain / steered",
        format!("{:.1} / {:.1}", r.plain_p50_us, r.steered_p50_us),
        &format!("µs over {} hosts", r.hops),
    );
}
