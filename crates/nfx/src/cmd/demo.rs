//! `nfx demo`: the product end to end, through the controller. Builds a 3-host testbed
//! with TLS agents (`nfx testbed up --hosts 3`, in-process), starts the controller on its
//! infrastructure.yaml (`nfx up --ssm`, a child process), deploys two tenants' services
//! from YAML (configs/demo/; tenant B's crosses an IKEv2-keyed ESP tunnel on the hosts'
//! lookaside devices), drives real traffic per tenant while printing every instance's
//! live counters from the controller's status API, migrates one of tenant A's functions
//! under a UDP counter stream, shows the controller's SSM moving tenant B's tunnel
//! endpoints between a queue pair and their CPU engine under tenant B's iperf3, shows
//! each tenant's deny rule acting on its own traffic only, destroys both services (the
//! path closes again) and tears everything down — on error and Ctrl-C too. `--simulate`
//! runs the same control steps on simulated devices without root, namespaces or
//! traffic, labelled SIMULATED.

use super::controlled_bed::ControlledBed;
use super::demo_tunnel::{self, Journal, Reassignment, TunnelEnd, TunnelObserved};
use super::demo_view::{self, InstanceView};
use super::output::JsonOut;
use anyhow::{bail, Context};
use nfx_testbed::hosts::{EndpointInfo, HostsSpec};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::probe::{self, TcpOutcome};
use nfx_testbed::udpgen::{self, GenReport, GenSpec, Sink};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tenant A's counter stream (allowed by its firewall).
const A_STREAM_PORT: u16 = 9000;
/// Tenant A's DPI test payloads: alert, then drop.
const A_DPI_ALERT_PORT: u16 = 9001;
const A_DPI_DROP_PORT: u16 = 9002;
/// A port of tenant A's selector that its firewall denies.
const A_DENIED_PORT: u16 = 9050;
/// Tenant B's iperf3 port.
const B_IPERF_PORT: u16 = 5201;
/// Tenant B's iperf3 pacing: the demo's three hosts, four endpoints, workers and
/// controller share this machine's cores, and its checks are about isolation and
/// correctness, not B's peak rate (`nfx bench dataplane` measures that); an unpaced flow
/// would take every cycle the rest leaves.
const B_IPERF_RATE: &str = "1G";
/// The port tenant B's firewall denies.
const B_DENIED_PORT: u16 = 5299;
/// Rate of tenant A's counter stream, datagrams/s (a worker's receive ring holds 250 ms
/// of it, so a loaded 2-core machine starving a worker briefly loses nothing).
const A_STREAM_PPS: u64 = 2_000;
/// Datagrams of tenant A's denied probe.
const A_DENIED_COUNT: u64 = 20;
/// The DPI test strings (configs/dpi/patterns.txt: `nfx-test-alert`, `nfx-test-drop`).
const DPI_ALERT: &[u8] = b"NFX-DPI-TEST hello from the nfx demo";
const DPI_DROP: &[u8] = b"NFX-DPI-DROP-TEST from the nfx demo";

/// Arguments of `nfx demo`.
#[derive(clap::Args)]
pub struct Args {
    /// How long traffic runs, seconds (5..=600).
    #[arg(long, default_value_t = 20)]
    duration: u32,
    /// DPI pattern file (tenant A's DPI reads it).
    #[arg(long, default_value = "configs/dpi/patterns.txt")]
    patterns: PathBuf,
    /// Tenant A's service descriptor.
    #[arg(long, default_value = "configs/demo/tenant-a.yaml")]
    tenant_a: PathBuf,
    /// Tenant B's service descriptor.
    #[arg(long, default_value = "configs/demo/tenant-b.yaml")]
    tenant_b: PathBuf,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-demo-")]
    prefix: String,
    /// The b of the testbed's 10.b.x.x subnets.
    #[arg(long, default_value_t = 199)]
    subnet_base: u8,
    /// Simulated devices instead of the testbed: the control steps only, no packets
    /// (no root needed); every listing says SIMULATED.
    #[arg(long)]
    simulate: bool,
    /// Write the summary as JSON to this file (`-` for stdout).
    #[arg(long)]
    json: Option<JsonOut>,
}

/// What the demo saw, checked and summarised (`--json`).
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Whether the devices were simulated (no packets).
    pub simulated: bool,
    /// Instances deployed, with their VNFM kind.
    pub instances: Vec<InstanceSummary>,
    /// Tenant A's counter stream: datagrams sent and received at `dst`.
    pub a_stream_sent: u64,
    /// Datagrams of the stream received.
    pub a_stream_received: u64,
    /// The migration of tenant A's firewall.
    pub migration: Option<Migration>,
    /// Datagrams of the stream lost (sent − received; the migration ran under it).
    pub migration_lost_packets: u64,
    /// The source addresses the stream arrived from at `dst`: tenant A's NAT rewrote
    /// `src`'s address to its public one.
    pub a_stream_sources: Vec<Ipv4Addr>,
    /// Tenant A's denied datagrams sent, received, and its firewall's `acl_deny` drops.
    pub a_denied: (u64, u64, u64),
    /// Tenant B's iperf3 goodput, Gbit/s, and bytes received.
    pub b_gbps: f64,
    /// Bytes tenant B's iperf3 delivered.
    pub b_bytes: u64,
    /// Why tenant B's iperf3 failed (a reset, ...); none: it ran to its end.
    pub b_iperf_error: Option<String>,
    /// Tenant B's tunnel endpoints at the end of the traffic: device, tier, engine,
    /// queue pair, IKE state and ESP counters.
    pub b_tunnel: Vec<TunnelEnd>,
    /// ESP datagrams tenant B's tunnel endpoints sent (both directions).
    pub b_tunnel_packets: u64,
    /// Inner bytes they carried.
    pub b_tunnel_bytes: u64,
    /// Inner bytes the endpoints sent as ESP after the first reassignment under traffic.
    pub b_tunnel_bytes_after_switch: u64,
    /// The grants and revokes of tenant B's endpoints' queue pairs, from the
    /// controller's operations.
    pub reassignments: Vec<Reassignment>,
    /// What decided them.
    pub reassigned_by: String,
    /// Flows tenant B's elephant detector reported (its iperf3 flow is one).
    pub b_elephants: u64,
    /// Tenant B's denied connection outcome and its firewall's `acl_deny` drops.
    pub b_denied: (String, u64),
    /// Packets tenant A's firewall saw (its own traffic only).
    pub a_firewall_packets: u64,
    /// Datagrams that crossed before deploy and after destroy.
    pub closed_before_after: (u64, u64),
    /// Namespaces of the testbed still present after the teardown.
    pub namespaces_left: Vec<String>,
    /// Checks that failed.
    pub failed: Vec<String>,
}

/// A migration through the controller.
#[derive(Debug, Clone, Serialize)]
pub struct Migration {
    /// The migrated instance.
    pub instance: String,
    /// Its device before.
    pub from: String,
    /// The device of its successor.
    pub to: String,
    /// Seconds the operation took.
    pub secs: f64,
}

/// One instance in the summary.
#[derive(Debug, Serialize)]
pub struct InstanceSummary {
    /// Instance id.
    pub id: String,
    /// Service using it.
    pub service: String,
    /// Function.
    pub function: String,
    /// Host.
    pub host: String,
    /// Device.
    pub device: String,
    /// VNFM kind (`remote`: an agent's real workers; `simulated`).
    pub vnfm: String,
}

impl From<&InstanceView> for InstanceSummary {
    fn from(i: &InstanceView) -> Self {
        InstanceSummary {
            id: i.spec.id.clone(),
            service: i.service().into(),
            function: i.spec.function.clone(),
            host: i.host.clone(),
            device: i.spec.device.clone(),
            vnfm: i.vnfm.clone(),
        }
    }
}

/// Runs the demo.
pub fn run(args: Args) -> anyhow::Result<()> {
    if !(5..=600).contains(&args.duration) {
        bail!("--duration must be 5..=600 seconds");
    }
    if !args.simulate {
        nfx_testbed::root::require_root()?;
    }
    nfx_testbed::stop::install();
    let dir = nfx_testbed::tempfile::Builder::new()
        .prefix("nfx-demo-")
        .tempdir()?;
    // The agents let workers read files in the run directory only: the patterns go there.
    let patterns = dir.path().join("dpi-patterns.txt");
    std::fs::copy(super::data::resolve(&args.patterns, dir.path())?, &patterns)
        .with_context(|| format!("copying {}", args.patterns.display()))?;
    let files = Files {
        patterns,
        tenants: [
            super::data::resolve(&args.tenant_a, dir.path())?,
            super::data::resolve(&args.tenant_b, dir.path())?,
        ],
    };
    let spec = HostsSpec {
        prefix: args.prefix.clone(),
        subnet_base: args.subnet_base,
        hosts: 3,
        // Round-robin from h1: dst-b on h1, src-b on h2 (tenant B enters at h2).
        extra_endpoints: vec!["dst-b".into(), "src-b".into()],
        names: Vec::new(),
        links: Vec::new(),
    };
    let mut sum = Summary {
        simulated: args.simulate,
        ..Summary::default()
    };
    let res = if args.simulate {
        super::demo_sim::run(&spec, &files, dir.path(), &mut sum)
    } else {
        real(&args, &spec, &files, dir.path(), &mut sum)
    };
    if let Some(f) = &args.json {
        f.write(&sum)?;
    }
    res?;
    if nfx_testbed::stop::requested() {
        bail!("demo interrupted");
    }
    if !sum.failed.is_empty() {
        bail!("{} demo check(s) failed", sum.failed.len());
    }
    Ok(())
}

/// The demo's input files, resolved (on disk or the embedded copies).
pub struct Files {
    /// DPI pattern file.
    pub patterns: PathBuf,
    /// Tenant A's and tenant B's service descriptors.
    pub tenants: [PathBuf; 2],
}

/// Records a check: printed as `[ ok ]`/`[FAIL]`, failures kept in the summary.
pub fn check(sum: &mut Summary, ok: bool, what: String) {
    crate::say!("  [{}] {what}", if ok { " ok " } else { "FAIL" });
    if !ok {
        sum.failed.push(what);
    }
}

/// Deploys every service of the tenants' files through the controller; DPI functions
/// read `patterns`. Each line starts with `tag` (`SIMULATED ` or empty).
pub fn deploy(bed: &ControlledBed, files: &Files, tag: &str) -> anyhow::Result<()> {
    for f in &files.tenants {
        for mut s in nfx_control::client::load_services(f)? {
            for hop in s.chain.iter_mut().filter(|h| h.function == "dpi") {
                hop.config["patterns"] = files.patterns.display().to_string().into();
            }
            let id = s.id.clone();
            let t = Instant::now();
            let op = bed
                .api
                .deploy(&s)
                .and_then(|op| bed.wait_op(&op))
                .with_context(|| format!("deploying {id} from {}", f.display()))?;
            crate::say!(
                "{tag}deployed {id} from {} ({}, {:.2} s)",
                f.file_name().unwrap_or_default().to_string_lossy(),
                op.id,
                t.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// Migrates the instance of `service` running `function` to another device of its host
/// (the controller keeps a migration on its host): one whose worker already runs
/// another instance when there is one (and it has room), else the controller's choice. A device without
/// a worker gets a new worker process first, whose start-up competes for the two cores
/// with the stream the demo measures.
pub fn migrate(bed: &ControlledBed, service: &str, function: &str) -> anyhow::Result<Migration> {
    let list = demo_view::instances(&bed.api)?;
    let old = list
        .iter()
        .find(|i| i.service() == service && i.spec.function == function)
        .with_context(|| format!("{service} has no {function}"))?;
    let running = list
        .iter()
        .find(|i| i.host == old.host && i.tier == old.tier && i.spec.device != old.spec.device)
        .map(|i| i.spec.device.clone());
    let t = Instant::now();
    let op = match &running {
        Some(d) => bed
            .api
            .migrate(&old.spec.id, Some(d))
            .or_else(|_| bed.api.migrate(&old.spec.id, None))?,
        None => bed.api.migrate(&old.spec.id, None)?,
    };
    bed.wait_op(&op)?;
    let secs = t.elapsed().as_secs_f64();
    let list = demo_view::instances(&bed.api)?;
    let new = list
        .iter()
        .find(|i| i.service() == service && i.spec.function == function)
        .with_context(|| format!("{service} lost its {function}"))?;
    Ok(Migration {
        instance: old.spec.id.clone(),
        from: old.spec.device.clone(),
        to: new.spec.device.clone(),
        secs,
    })
}

/// Destroys both tenants' services; each line starts with `tag`.
pub fn destroy(bed: &ControlledBed, tag: &str) -> anyhow::Result<()> {
    for s in ["tenant-a", "tenant-b"] {
        bed.wait_op(&bed.api.destroy(s)?)?;
        crate::say!("{tag}destroyed {s}");
    }
    Ok(())
}

fn real(
    args: &Args,
    spec: &HostsSpec,
    files: &Files,
    dir: &Path,
    sum: &mut Summary,
) -> anyhow::Result<()> {
    crate::say!(
        "nfx demo: building a 3-host testbed {}{{h1,h2,h3}} (10.{}.0.0/16), one TLS agent per \
         host; tenant A: src (h1) → dst (h3), tenant B: src-b (h2) → dst-b (h1)",
        spec.prefix,
        spec.subnet_base
    );
    if nfx_testbed::hosts::recorded(&spec.prefix).is_some() {
        bail!(
            "a testbed with prefix {0:?} exists (another demo?); remove it with \
             `nfx testbed down --prefix {0}` or pick another --prefix",
            spec.prefix
        );
    }
    let bed = ControlledBed::up(
        spec,
        &dir.join("testbed"),
        &[dir.to_path_buf()],
        demo_tunnel::SSM_ARGS,
    )?;
    crate::say!(
        "controller up on {} (agents over mutual TLS; log {}); its SSM grants and revokes \
         the lookaside devices' queue pairs among live tunnel endpoints: {}",
        bed.out.join("infrastructure.yaml").display(),
        bed.out.join("controller.log").display(),
        demo_tunnel::DRIVER
    );
    let res = with_bed(args, &bed, files, sum);
    let namespaces = bed.lay.namespaces();
    crate::say!("tearing down testbed {}", spec.prefix);
    drop(bed);
    sum.namespaces_left = namespaces
        .into_iter()
        .filter(|ns| nfx_testbed::netns::exists(ns))
        .collect();
    let left = sum.namespaces_left.clone();
    check(
        sum,
        left.is_empty(),
        format!("teardown: namespaces left {left:?}"),
    );
    res
}

/// The endpoints the demo uses.
struct Ends<'a> {
    src: &'a EndpointInfo,
    dst: &'a EndpointInfo,
    src_b: &'a EndpointInfo,
    dst_b: &'a EndpointInfo,
}

fn with_bed(
    args: &Args,
    bed: &ControlledBed,
    files: &Files,
    sum: &mut Summary,
) -> anyhow::Result<()> {
    let e = Ends {
        src: bed.endpoint("src")?,
        dst: bed.endpoint("dst")?,
        src_b: bed.endpoint("src-b")?,
        dst_b: bed.endpoint("dst-b")?,
    };
    let before = burst(e.src, e.dst, A_STREAM_PORT)?;
    check(
        sum,
        before.1 == 0,
        format!(
            "closed before deploy: {} of {} datagrams crossed",
            before.1, before.0
        ),
    );
    deploy(bed, files, "")?;
    let list = demo_view::instances(&bed.api)?;
    crate::say!("{}", (demo_view::placement_table(&list)).trim_end());
    sum.instances = list.iter().map(InstanceSummary::from).collect();
    let mut journal = Journal::default();
    demo_tunnel::settle(bed, "tenant-b", &mut journal)?;
    let nat = nat_address(files, "tenant-a")?;
    traffic(args, bed, &e, nat, journal, sum)?;
    if nfx_testbed::stop::requested() {
        crate::say!("interrupted: tearing down");
        return Ok(());
    }
    destroy(bed, "")?;
    let after = burst(e.src, e.dst, A_STREAM_PORT)?;
    let b_after = probe::tcp_request(
        &e.src_b.netns,
        e.dst_b.address,
        B_IPERF_PORT,
        b"hello",
        Duration::from_millis(1000),
    )?;
    sum.closed_before_after = (before.1, after.1);
    check(
        sum,
        after.1 == 0 && b_after == TcpOutcome::TimedOut,
        format!(
            "closed after destroy: {} of {} datagrams of A crossed; B's connection: {b_after:?}",
            after.1, after.0
        ),
    );
    Ok(())
}

/// The public address of `service`'s source NAT in the tenants' files, if it has one.
fn nat_address(files: &Files, service: &str) -> anyhow::Result<Option<Ipv4Addr>> {
    for f in &files.tenants {
        let services = nfx_control::client::load_services(f)?;
        let Some(s) = services.into_iter().find(|s| s.id == service) else {
            continue;
        };
        for hop in s.chain.into_iter().filter(|h| h.function == "nat") {
            let nat: nfx_vnf::nat::NatConfig = serde_yaml_ng::from_value(hop.config)
                .with_context(|| format!("{}: {service}'s NAT config", f.display()))?;
            if let Some(snat) = nat.snat {
                let ip = snat.public_ip.parse().with_context(|| {
                    format!(
                        "{}: {service}'s NAT public_ip {:?}",
                        f.display(),
                        snat.public_ip
                    )
                })?;
                return Ok(Some(ip));
            }
        }
    }
    Ok(None)
}

/// A short paced UDP burst from `src` to `dst:port`: (sent, received).
fn burst(src: &EndpointInfo, dst: &EndpointInfo, port: u16) -> anyhow::Result<(u64, u64)> {
    let sink = Sink::start(&dst.netns, port, b"")?;
    let g = udpgen::generate(paced(src, dst.address, port, 300, 1_000))?;
    std::thread::sleep(Duration::from_millis(200));
    Ok((g.sent, sink.finish()?.packets))
}

/// A paced one-flow UDP stream of `ms` milliseconds at `pps`.
fn paced(src: &EndpointInfo, dst: Ipv4Addr, port: u16, ms: u64, pps: u64) -> GenSpec {
    let mut g = GenSpec::flood(&src.netns, dst, port, Duration::from_millis(ms));
    g.payload = 64;
    g.flows = 1;
    g.batch = 1;
    g.pps = Some(pps);
    g
}

/// Sends `count` datagrams carrying `payload` from `src` to `dst:port`.
fn payloads(
    src: &EndpointInfo,
    dst: Ipv4Addr,
    port: u16,
    payload: &[u8],
    count: u64,
) -> anyhow::Result<u64> {
    let mut g = paced(src, dst, port, count * 10, 100);
    g.payload = payload.len();
    g.pattern = payload.to_vec();
    Ok(udpgen::generate(g)?.sent)
}

/// Joins a traffic thread.
fn join<T>(h: JoinHandle<anyhow::Result<T>>, what: &str) -> anyhow::Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("the {what} thread panicked"))?
}

/// The traffic phase: tenant A's counter stream and probes, tenant B's iperf3 (through
/// its tunnel) and its denied connection, a migration of A's firewall half-way, live
/// counters and the SSM's decisions every second.
fn traffic(
    args: &Args,
    bed: &ControlledBed,
    e: &Ends,
    nat: Option<Ipv4Addr>,
    mut journal: Journal,
    sum: &mut Summary,
) -> anyhow::Result<()> {
    let secs = args.duration;
    let stream_sink = Sink::start(&e.dst.netns, A_STREAM_PORT, b"")?;
    let denied_sink = Sink::start(&e.dst.netns, A_DENIED_PORT, b"")?;
    let alert_sink = Sink::start(&e.dst.netns, A_DPI_ALERT_PORT, b"NFX-DPI-TEST")?;
    let drop_sink = Sink::start(&e.dst.netns, A_DPI_DROP_PORT, b"")?;
    let _iperf = IperfServer::start(&e.dst_b.netns, e.dst_b.address, B_IPERF_PORT)?;
    let stream = {
        let g = paced(
            e.src,
            e.dst.address,
            A_STREAM_PORT,
            u64::from(secs) * 1000,
            A_STREAM_PPS,
        );
        std::thread::spawn(move || udpgen::generate(g))
    };
    let tcp = {
        let c = ClientSpec::tcp(&e.src_b.netns, e.dst_b.address, B_IPERF_PORT, secs - 1, 1)
            .paced(B_IPERF_RATE);
        std::thread::spawn(move || -> anyhow::Result<_> {
            let start = demo_tunnel::now_ms();
            let r = iperf::client(&c);
            Ok((r, (start, demo_tunnel::now_ms())))
        })
    };
    let probes = {
        let (src, dst, src_b, dst_b) = (
            e.src.clone(),
            e.dst.address,
            e.src_b.netns.clone(),
            e.dst_b.address,
        );
        std::thread::spawn(move || -> anyhow::Result<(u64, u64, u64, TcpOutcome)> {
            std::thread::sleep(Duration::from_secs(1));
            let denied = payloads(
                &src,
                dst,
                A_DENIED_PORT,
                b"tenant A, denied",
                A_DENIED_COUNT,
            )?;
            let alert = payloads(&src, dst, A_DPI_ALERT_PORT, DPI_ALERT, 5)?;
            let dropped = payloads(&src, dst, A_DPI_DROP_PORT, DPI_DROP, 5)?;
            let b = probe::tcp_request(
                &src_b,
                dst_b,
                B_DENIED_PORT,
                b"hello",
                Duration::from_millis(1500),
            )?;
            Ok((denied, alert, dropped, b))
        })
    };
    let mut w = watch(bed, secs, &mut journal, || {
        stream.is_finished() && tcp.is_finished() && probes.is_finished()
    });
    if nfx_testbed::stop::requested() {
        // The traffic threads are left to end with the namespaces the teardown removes
        // (and with the process), rather than waited for.
        return Ok(());
    }
    let stream = join(stream, "stream")?;
    let (tcp, window) = join(tcp, "iperf3")?;
    let probes = join(probes, "probe")?;
    std::thread::sleep(Duration::from_millis(300));
    let arrived = stream_sink.finish()?;
    let denied_got = denied_sink.finish()?.packets;
    let alert_got = alert_sink.finish()?;
    let drop_got = drop_sink.finish()?.packets;
    let list = demo_view::instances(&bed.api)?;
    w.remember(&list);
    journal.print_new(bed);
    crate::say!("\n== nfx demo summary ==");
    crate::say!("{}", demo_view::live_table("final", &list, None).trim_end());
    let tunnel = TunnelObserved {
        ends: demo_tunnel::ends(&list, "tenant-b"),
        moves: demo_tunnel::reassignments(bed, Some(window))?,
        samples: w.tunnel,
    };
    let seen: Vec<InstanceView> = w.seen.into_values().collect();
    summarize(
        sum,
        &seen,
        Observed {
            stream,
            got: arrived.packets,
            sources: arrived.sources,
            nat,
            src: e.src.address,
            tcp,
            probes,
            denied_got,
            alert_got: alert_got.matched,
            drop_got,
            migrated: w.migrated,
            tunnel,
        },
    );
    Ok(())
}

/// What the live view saw.
struct Watched {
    /// The last counters of every instance seen, so a migrated one's count stays.
    seen: BTreeMap<String, InstanceView>,
    /// The migration of tenant A's firewall, once tried.
    migrated: Option<anyhow::Result<Migration>>,
    /// `(ms since the epoch, inner bytes tenant B's endpoints sent as ESP)` at each poll.
    tunnel: Vec<(i64, u64)>,
}

impl Watched {
    fn remember(&mut self, list: &[InstanceView]) {
        for i in list {
            self.seen.insert(i.spec.id.clone(), i.clone());
        }
        self.tunnel.push((
            demo_tunnel::now_ms(),
            demo_tunnel::sent_bytes(list, "tenant-b"),
        ));
    }
}

/// The live view: every second each instance's counters and the SSM's new decisions;
/// half-way, the migration of tenant A's firewall. Ends after `secs` + 2 s, on Ctrl-C,
/// or once `done()`.
fn watch(
    bed: &ControlledBed,
    secs: u32,
    journal: &mut Journal,
    done: impl Fn() -> bool,
) -> Watched {
    let mut w = Watched {
        seen: BTreeMap::new(),
        migrated: None,
        tunnel: Vec::new(),
    };
    let start = Instant::now();
    let mut prev: Option<(Vec<InstanceView>, Instant)> = None;
    while start.elapsed() < Duration::from_secs(u64::from(secs) + 2)
        && !nfx_testbed::stop::requested()
    {
        std::thread::sleep(Duration::from_secs(1));
        if w.migrated.is_none() && start.elapsed() >= Duration::from_secs(u64::from(secs / 2)) {
            crate::say!("migrating tenant-a's firewall under traffic ...");
            if let Ok(list) = demo_view::instances(&bed.api) {
                w.remember(&list);
            }
            let m = migrate(bed, "tenant-a", "firewall");
            if let Ok(m) = &m {
                crate::say!(
                    "migrated {}: {} → {} in {:.2} s",
                    m.instance,
                    m.from,
                    m.to,
                    m.secs
                );
            }
            w.migrated = Some(m);
        }
        let now = Instant::now();
        match demo_view::instances(&bed.api) {
            Ok(list) => {
                let p = prev.as_ref().map(|(p, t)| (p.as_slice(), now - *t));
                let title = format!("t={:>3.0}s", start.elapsed().as_secs_f64());
                crate::say!("{}", demo_view::live_table(&title, &list, p).trim_end());
                w.remember(&list);
                prev = Some((list, now));
            }
            Err(e) => crate::say!("status unavailable: {e:#}"),
        }
        journal.print_new(bed);
        if done() {
            break;
        }
    }
    w
}

/// What the traffic phase measured.
struct Observed {
    stream: GenReport,
    got: u64,
    /// Where the stream's datagrams came from at `dst`.
    sources: Vec<Ipv4Addr>,
    /// Tenant A's NAT public address (from its file), and `src`'s own.
    nat: Option<Ipv4Addr>,
    src: Ipv4Addr,
    tcp: anyhow::Result<iperf::IperfResult>,
    probes: (u64, u64, u64, TcpOutcome),
    denied_got: u64,
    alert_got: u64,
    drop_got: u64,
    migrated: Option<anyhow::Result<Migration>>,
    /// Tenant B's tunnel and the SSM's decisions.
    tunnel: TunnelObserved,
}

/// Checks what the traffic phase saw; `seen` holds the last counters of every instance
/// seen during it (a migrated function's old and new instance both).
fn summarize(sum: &mut Summary, seen: &[InstanceView], o: Observed) {
    let find = |svc: &str, f: &str| demo_view::total(seen, svc, f);
    let (a_fw, b_fw, a_dpi) = (
        find("tenant-a", "firewall"),
        find("tenant-b", "firewall"),
        find("tenant-a", "dpi"),
    );
    let (denied_sent, alert_sent, drop_sent, b_outcome) = o.probes;
    sum.a_stream_sent = o.stream.sent;
    sum.a_stream_received = o.got;
    sum.migration_lost_packets = o.stream.sent.saturating_sub(o.got);
    let lost = sum.migration_lost_packets;
    match o.migrated {
        Some(Ok(m)) => {
            let what = format!(
                "migration of tenant-a's firewall {} → {} ({:.2} s) under a {A_STREAM_PPS}/s \
                 UDP stream: {} sent, {} received, {lost} lost",
                m.from, m.to, m.secs, o.stream.sent, o.got
            );
            sum.migration = Some(m);
            check(sum, lost == 0 && o.stream.sent > 0, what);
        }
        Some(Err(e)) => check(sum, false, format!("migration: {e:#}")),
        None => check(sum, false, "migration: never started (interrupted?)".into()),
    }
    sum.a_stream_sources = o.sources.clone();
    if let Some(nat) = o.nat {
        check(
            sum,
            o.sources == [nat],
            format!(
                "tenant A's NAT: the stream arrived at dst from {:?} (its NAT's public address \
                 {nat}; src is {})",
                o.sources, o.src
            ),
        );
    }
    let a_deny = a_fw.drop_count("acl_deny");
    sum.a_denied = (denied_sent, o.denied_got, a_deny);
    check(
        sum,
        o.denied_got == 0 && a_deny >= denied_sent && denied_sent > 0,
        format!(
            "tenant A's deny rule: {denied_sent} datagrams to dst:{A_DENIED_PORT}, {} arrived, \
             acl_deny at A's firewall = {a_deny}",
            o.denied_got
        ),
    );
    let a_pkts = a_fw.packets;
    sum.a_firewall_packets = a_pkts;
    let a_total = o.stream.sent + denied_sent + alert_sent + drop_sent;
    match &o.tcp {
        Ok(r) => {
            sum.b_gbps = r.gbps;
            sum.b_bytes = r.received_bytes;
            check(
                sum,
                r.received_bytes > 0,
                format!(
                    "tenant B untouched by A's rules: iperf3 src-b→dst-b through its tunnel \
                     {:.2} Gbit/s, {} bytes, no reset; B's firewall counted {} packets",
                    r.gbps, r.received_bytes, b_fw.packets
                ),
            );
        }
        Err(e) => check(sum, false, format!("tenant B's iperf3: {e:#}")),
    }
    sum.b_iperf_error = o.tcp.as_ref().err().map(|e| format!("{e:#}"));
    let b_received = o.tcp.as_ref().ok().map(|r| r.received_bytes);
    demo_tunnel::check_tunnel(sum, o.tunnel, b_received);
    check(
        sum,
        a_pkts <= a_total,
        format!(
            "isolation: A's firewall counted only A's packets ({a_pkts} ≤ {a_total} A sent, \
             while B's chain carried {})",
            b_fw.packets
        ),
    );
    let b_deny = b_fw.drop_count("acl_deny");
    sum.b_denied = (format!("{b_outcome:?}"), b_deny);
    check(
        sum,
        b_outcome == TcpOutcome::TimedOut && b_deny > 0,
        format!(
            "tenant B's deny rule: connection to dst-b:{B_DENIED_PORT} {b_outcome:?}, acl_deny at \
             B's firewall = {b_deny}"
        ),
    );
    let elephants = find("tenant-b", "elephant").stats.elephants;
    sum.b_elephants = elephants;
    check(
        sum,
        elephants > 0,
        format!("tenant B's elephant detector: {elephants} elephant flow(s) (its iperf3 flow)"),
    );
    let dpi = demo_view::drops(&a_dpi);
    check(
        sum,
        o.alert_got > 0 && o.drop_got == 0 && drop_sent > 0,
        format!(
            "tenant A's DPI: {alert_sent} alert payloads sent, {} arrived; {drop_sent} drop \
             payloads sent, {} arrived (DPI drops: {dpi})",
            o.alert_got, o.drop_got
        ),
    );
}
