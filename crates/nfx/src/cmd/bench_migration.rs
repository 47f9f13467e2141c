//! `nfx bench migration`: flow-state migration of the firewall and the NAT, against
//! HYPER's figures (~9,000 flows/s, 32 B per flow, 6.1 ms to deploy an instance with a
//! 16-entry table). Four measurements in one run:
//! * export + import rate of tables filled by real packets, in process (node API) and
//!   between two `nfx run` processes through their control sockets (`flows_per_s`);
//! * bytes per flow of the exported state;
//! * deploy + configure of a firewall with 16 ACL entries into a running worker through
//!   the local VNFM (median; `deploy_ms`);
//! * a loss-free handoff under a paced UDP stream on a private testbed (`lost_packets`:
//!   sent − received at dst, plus the drop counters, with the handoff's phases).

use anyhow::{bail, Context};
use nfx_control::vnfm::local::{
    stop_recorded_workers, HandoffReport, LocalConfig, LocalVnfm, WorkerTemplate,
};
use nfx_control::vnfm::{InstanceSpec, Vnfm};
use nfx_packet::{checksum, Direction, Packet, PacketBuf};
use nfx_proto::run_config::{PortConfig, Ports};
use nfx_proto::{fetch_stats as stats, Client, Stats};
use nfx_testbed::acl::UDPGEN_PORT;
use nfx_testbed::process::ChildGuard;
use nfx_testbed::runconfig::{chain_nodes, Chain};
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use nfx_testbed::{Host, Spec, TestbedGuard};
use nfx_vnf::{EventSink, Node, NodeCtx};
use serde_json::{json, Value};

use super::output::{JsonOut, Progress};
use crate::say;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `nfx bench migration`.
#[derive(clap::Args)]
pub struct Args {
    /// Write the results as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<JsonOut>,
    /// Flows in each table for the rate measurement (1,000..=4,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// Deploy measurements; the median is reported.
    #[arg(long, default_value_t = 9)]
    deploy_repeat: usize,
    /// Packets per second of the UDP stream during the handoff.
    #[arg(long, default_value_t = 20_000)]
    pps: u64,
    /// Namespace prefix of the private testbed and scratch namespace.
    #[arg(long, default_value = "nfx-bmig-")]
    prefix: String,
    /// The b of the testbed's 10.b.x.x subnets.
    #[arg(long, default_value_t = 196)]
    subnet_base: u8,
}

/// HYPER's figures (hyper-hybrid-nfv.txt §VI-C and the issue).
pub(crate) const PAPER_FLOWS_PER_S: f64 = 9_000.0;
const PAPER_BYTES_PER_FLOW: f64 = 32.0;
pub(crate) const PAPER_DEPLOY_MS: f64 = 6.1;

/// One table's export + import.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Rate {
    flows: u64,
    bytes: u64,
    export_s: f64,
    import_s: f64,
}

impl Rate {
    fn flows_per_s(&self) -> f64 {
        self.flows as f64 / (self.export_s + self.import_s).max(1e-9)
    }

    fn sum(a: Rate, b: Rate) -> Rate {
        Rate {
            flows: a.flows + b.flows,
            bytes: a.bytes + b.bytes,
            export_s: a.export_s + b.export_s,
            import_s: a.import_s + b.import_s,
        }
    }

    fn json(&self) -> Value {
        json!({
            "flows": self.flows, "bytes": self.bytes, "export_s": self.export_s,
            "import_s": self.import_s, "flows_per_s": self.flows_per_s(),
            "bytes_per_flow": self.bytes as f64 / self.flows.max(1) as f64,
        })
    }
}

/// Runs the benchmark.
pub fn run(args: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    if !(1_000..=4_000_000).contains(&args.flows) {
        bail!("--flows must be 1000..=4000000");
    }
    if !(1..=100).contains(&args.deploy_repeat) {
        bail!("--deploy-repeat must be 1..=100");
    }
    if !(100..=1_000_000).contains(&args.pps) {
        bail!("--pps must be 100..=1000000");
    }
    let nfx = std::env::current_exe()?;
    let dir = nfx_testbed::tempfile::tempdir()?;

    let progress = Progress::bar("migration", 4);
    progress.message(format!(
        "filling firewall and NAT tables with {} flows each",
        args.flows
    ));
    let specs = table_specs(args.flows);
    let mut blobs = Vec::new();
    let mut local = Vec::new();
    for spec in &specs {
        let (rate, blob) = in_process(spec, args.flows)?;
        local.push(rate);
        blobs.push(blob);
    }

    let scratch = ScratchNs::new(&format!("{}pp", args.prefix))?;
    progress.inc();
    progress.message("moving them between two nfx processes");
    let p2p = between_processes(&nfx, dir.path(), &scratch.0, &specs, &blobs)?;
    drop(blobs);
    progress.inc();
    progress.message("deploying 16-entry firewalls into a running worker");
    let deploy = deploy_samples(&nfx, dir.path(), &scratch.0, args.deploy_repeat)?;
    progress.inc();
    progress.message("handing off live traffic on a private testbed");
    let live = under_traffic(&nfx, dir.path(), &args)?;
    drop(progress);

    let p2p_all = Rate::sum(p2p[0], p2p[1]);
    let local_all = Rate::sum(local[0], local[1]);
    let deploy_ms = median(&deploy[0]);
    let deploy_small_ms = median(&deploy[1]);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load1: f64 = load
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let out = json!({
        "flows_per_s": p2p_all.flows_per_s(),
        "bytes_per_flow": p2p_all.bytes as f64 / p2p_all.flows.max(1) as f64,
        "lost_packets": live["lost_packets"],
        "deploy_ms": deploy_ms,
        "flows": args.flows,
        "process_to_process": {"firewall": p2p[0].json(), "nat": p2p[1].json(), "total": p2p_all.json()},
        "in_process": {"firewall": local[0].json(), "nat": local[1].json(), "total": local_all.json()},
        "deploy_samples_ms": deploy[0],
        "deploy_small_table_ms": deploy_small_ms,
        "deploy_small_table_flows": SMALL_TABLE,
        "deploy_small_table_samples_ms": deploy[1],
        "handoff": live,
        "paper": {"flows_per_s": PAPER_FLOWS_PER_S, "bytes_per_flow": PAPER_BYTES_PER_FLOW, "deploy_ms": PAPER_DEPLOY_MS},
        "loadavg_1m": load1,
    });
    say!("{:<34} {:>16} {:>14}", "metric", "nfx", "HYPER paper");
    let row = |m: &str, v: String, p: &str| say!("{m:<34} {v:>16} {p:>14}");
    row(
        "flows_per_s (process to process)",
        format!("{:.0}", p2p_all.flows_per_s()),
        "~9000",
    );
    for (name, r) in ["firewall", "nat"].iter().zip(&p2p) {
        row(&format!("  {name}"), format!("{:.0}", r.flows_per_s()), "");
    }
    row(
        "flows_per_s (in process)",
        format!("{:.0}", local_all.flows_per_s()),
        "",
    );
    row(
        "bytes_per_flow (fw / nat)",
        format!(
            "{:.1} / {:.1}",
            p2p[0].bytes as f64 / p2p[0].flows.max(1) as f64,
            p2p[1].bytes as f64 / p2p[1].flows.max(1) as f64
        ),
        "32",
    );
    row("lost_packets", live["lost_packets"].to_string(), "-");
    row(
        "handoff total / drain ms",
        format!(
            "{:.2} / {:.2}",
            live["phases"]["total_ms"].as_f64().unwrap_or(0.0),
            live["phases"]["drain_ms"].as_f64().unwrap_or(0.0)
        ),
        "-",
    );
    row("deploy_ms (median)", format!("{deploy_ms:.3}"), "6.1");
    row(
        &format!("  with a {SMALL_TABLE}-flow table"),
        format!("{deploy_small_ms:.3}"),
        "",
    );
    say!("load average {}", load.trim());
    if let Some(o) = &args.json {
        o.write(&out)?;
    }
    Ok(())
}

/// Firewall (allow by default) and NAT specs with room for `flows` entries.
pub(crate) fn table_specs(flows: usize) -> [Value; 2] {
    let room = flows * 2;
    [
        json!({"firewall": {"default": "allow", "max_flows": room}}),
        json!({"nat": {"snat": {"public_ip": "10.99.2.100"}, "max_flows": room}}),
    ]
}

/// A 60-byte UDP frame of flow `i`: 10.1.x.x → 10.3.x.x, distinct 5-tuple per `i`.
pub(crate) fn flow_frame(i: usize, out: &mut [u8]) {
    let (hi, lo) = ((i / 50_000) as u32, (i % 50_000) as u16);
    out[..60].fill(0);
    out[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    out[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    out[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut out[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&46u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&(0x0a01_0000 | hi).to_be_bytes());
    ip[16..20].copy_from_slice(&(0x0a03_0000 | hi).to_be_bytes());
    let c = checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    out[34..36].copy_from_slice(&(1024 + lo).to_be_bytes());
    out[36..38].copy_from_slice(&9000u16.to_be_bytes());
    out[38..40].copy_from_slice(&26u16.to_be_bytes());
}

/// Builds the node of `spec`, fills it with `flows` flows by running real packets
/// through it, then times export and import into a fresh node of the same spec.
fn in_process(spec: &Value, flows: usize) -> anyhow::Result<(Rate, Vec<u8>)> {
    let build = || -> anyhow::Result<Box<dyn Node>> {
        let mut v = nfx_dataplane::build_chain(std::slice::from_ref(spec), Path::new("."))
            .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))?;
        v.pop().context("no node built")
    };
    let mut node = build()?;
    let mut events = EventSink::default();
    let mut pkts: Vec<Packet> = (0..nfx_packet::MAX_VECTOR)
        .map(|_| {
            Packet::new(
                PacketBuf::with_capacity(PacketBuf::MTU_CAPACITY),
                Direction::Forward,
            )
        })
        .collect();
    let now = nfx_dataplane::worker::monotonic_ns();
    for start in (0..flows).step_by(pkts.len()) {
        let n = (flows - start).min(pkts.len());
        for (k, p) in pkts[..n].iter_mut().enumerate() {
            flow_frame(start + k, p.buf.storage_mut());
            p.buf.set_len(60);
            p.meta = nfx_packet::parse(p.buf.frame())
                .map_err(|r| anyhow::anyhow!("test frame does not parse: {}", r.as_str()))?;
            p.drop = None;
            p.dir = Direction::Forward;
        }
        let mut ctx = NodeCtx {
            now_ns: now,
            events: &mut events,
        };
        node.process(&mut pkts[..n], &mut ctx);
        if let Some(r) = pkts[..n].iter().find_map(|p| p.drop) {
            bail!(
                "{}: packet dropped while filling: {}",
                node.name(),
                r.as_str()
            );
        }
    }
    let mut blob = Vec::new();
    let t = Instant::now();
    let exported = node.export_state(&mut blob);
    let export_s = t.elapsed().as_secs_f64();
    if exported != flows {
        bail!(
            "{} exported {exported} flows, expected {flows}",
            node.name()
        );
    }
    let mut fresh = build()?;
    let t = Instant::now();
    let imported = fresh
        .import_state(&blob)
        .map_err(|e| anyhow::anyhow!("{}: import: {e}", fresh.name()))?;
    let import_s = t.elapsed().as_secs_f64();
    if imported != flows {
        bail!(
            "{} imported {imported} flows, expected {flows}",
            fresh.name()
        );
    }
    Ok((
        Rate {
            flows: flows as u64,
            bytes: blob.len() as u64,
            export_s,
            import_s,
        },
        blob,
    ))
}

/// A namespace with idle interfaces for dataplane processes that need ports but no
/// traffic; deleted on drop.
pub(crate) struct ScratchNs(pub(crate) String);

impl ScratchNs {
    pub(crate) fn new(name: &str) -> anyhow::Result<Self> {
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = ScratchNs(name.to_string());
        // Veth ends whose peers stay down: ports that carry no frame at all.
        for i in 0..6 {
            let (d, e) = (format!("d{i}"), format!("e{i}"));
            ip(&[
                "-n", name, "link", "add", &d, "type", "veth", "peer", "name", &e,
            ])?;
            ip(&["-n", name, "link", "set", &d, "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for ScratchNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    nfx_testbed::process::run(&[&["ip"][..], args].concat(), Duration::from_secs(10)).map(|_| ())
}

/// Starts `nfx run` with `cfg` (JSON written as YAML) and waits for its socket.
pub(crate) fn start_run(
    nfx: &Path,
    dir: &Path,
    cfg: &Value,
) -> anyhow::Result<(ChildGuard, PathBuf)> {
    let name = cfg["name"].as_str().context("config without name")?;
    let file = dir.join(format!("{name}.yaml"));
    nfx_testbed::runconfig::write_yaml(&file, cfg)?;
    let sock = PathBuf::from(cfg["control_socket"].as_str().context("no socket")?);
    let mut cmd = std::process::Command::new(nfx);
    cmd.arg("run")
        .arg("--config")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log")))?);
    let child = ChildGuard::spawn(cmd)?;
    Client::wait_ready(&sock, Duration::from_secs(15))?;
    Ok((child, sock))
}

/// Loads the blobs into process A (untimed), then times export from A and import into
/// B over the control sockets, per node.
fn between_processes(
    nfx: &Path,
    dir: &Path,
    ns: &str,
    specs: &[Value; 2],
    blobs: &[Vec<u8>],
) -> anyhow::Result<[Rate; 2]> {
    let cfg = |name: &str, a: &str, b: &str| {
        json!({
            "name": name, "netns": ns,
            "control_socket": dir.join(format!("{name}.sock")).to_string_lossy(),
            "ports": {"inside": {"iface": a, "peer_mac": "02:00:00:00:00:01"},
                      "outside": {"iface": b, "peer_mac": "02:00:00:00:00:02"}},
            "poll": "interrupt", "chain": specs,
        })
    };
    let (_a, sa) = start_run(nfx, dir, &cfg("bmig-a", "d0", "d1"))?;
    let (_b, sb) = start_run(nfx, dir, &cfg("bmig-b", "d2", "d3"))?;
    let long = Duration::from_secs(60);
    let mut a = Client::connect(&sa)?.with_timeout(long);
    let mut b = Client::connect(&sb)?.with_timeout(long);
    let mut rates = Vec::new();
    for (node, blob) in ["firewall", "nat"].iter().zip(blobs) {
        a.import_state(node, blob)?;
        let t = Instant::now();
        let out = a.export_state_b64(node)?;
        let export_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let flows = b.import_state_b64(node, out.data_b64)?;
        let import_s = t.elapsed().as_secs_f64();
        let bytes = out.bytes;
        if bytes != blob.len() as u64 {
            bail!(
                "{node}: process A exported {bytes} bytes, {} were loaded",
                blob.len()
            );
        }
        rates.push(Rate {
            flows,
            bytes,
            export_s,
            import_s,
        });
    }
    Ok([rates[0], rates[1]])
}

/// The paper's 16-entry table: 16 ACL rules; `max_flows` sizes the flow table (None:
/// the firewall's default of 262,144 flows, whose allocation dominates the deploy).
pub(crate) fn acl16(max_flows: Option<usize>) -> Value {
    let rules: Vec<Value> = (0..16)
        .map(|i| json!({"action": "allow", "proto": "tcp", "dport": 1000 + i}))
        .collect();
    let mut v = json!({"default": "deny", "rules": rules});
    if let Some(n) = max_flows {
        v["max_flows"] = json!(n);
    }
    v
}

/// Flow-table size of the second deploy measurement.
const SMALL_TABLE: usize = 4096;

/// Times `deploy_instance` of a 16-rule firewall into a running worker of the local
/// VNFM (which reconfigures the worker and returns once the worker's stats show the
/// instance), `repeat` times, destroying it in between; first with the default flow
/// table, then with a [`SMALL_TABLE`]-flow one.
fn deploy_samples(
    nfx: &Path,
    dir: &Path,
    ns: &str,
    repeat: usize,
) -> anyhow::Result<[Vec<f64>; 2]> {
    let run_dir = dir.join("deploy");
    let cfg = LocalConfig {
        run_dir: run_dir.clone(),
        nfx_bin: Some(nfx.to_path_buf()),
        workers: [(
            "w2".to_string(),
            WorkerTemplate {
                netns: Some(ns.to_string()),
                ports: ports(("d4", "02:00:00:00:00:01"), ("d5", "02:00:00:00:00:02")),
                vector: None,
                poll: Some(nfx_io::PollMode::Interrupt),
                ring_slots: None,
                fanout: None,
                fast_path: None,
                allowed_dirs: Vec::new(),
                nice: None,
                kernel_stack: None,
                io: None,
            },
        )]
        .into(),
    };
    let _workers = Workers::new(&run_dir);
    let vnfm = LocalVnfm::new(cfg)?;
    let spec = |id: &str, max_flows: Option<usize>| InstanceSpec {
        id: id.into(),
        function: "firewall".into(),
        device: "w2".into(),
        config: acl16(max_flows),
        throughput_gbps: 0.0,
        capacity: 0.0,
    };
    vnfm.deploy_instance(&spec("base", None))?;
    let mut out = [Vec::with_capacity(repeat), Vec::with_capacity(repeat)];
    for (samples, table) in out.iter_mut().zip([None, Some(SMALL_TABLE)]) {
        for _ in 0..repeat {
            let t = Instant::now();
            let st = vnfm.deploy_instance(&spec("acl16", table))?;
            samples.push(t.elapsed().as_secs_f64() * 1e3);
            if st.status != "running" || st.detail["node"]["stats"]["rules"] != 16 {
                bail!(
                    "deployed instance does not report its 16 rules: {:?}",
                    st.detail
                );
            }
            vnfm.destruct_instance("acl16")?;
        }
    }
    vnfm.destruct_instance("base")?;
    Ok(out)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

/// Stops (and if needed kills) the local VNFM's workers recorded in `run_dir` on drop.
struct Workers(PathBuf);

impl Workers {
    fn new(run_dir: &Path) -> Self {
        Workers(run_dir.to_path_buf())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        stop_recorded_workers(&self.0);
    }
}

/// A paced UDP stream src → dst through firewall → NAT on worker w0; mid-stream a
/// standby w1 is deployed and the traffic handed off. Returns losses, drop counters
/// and the handoff's phases.
fn under_traffic(nfx: &Path, dir: &Path, args: &Args) -> anyhow::Result<Value> {
    let tb = TestbedGuard::up(Spec {
        prefix: args.prefix.clone(),
        subnet_base: args.subnet_base,
    })?;
    tb.set_edge_forwarding(false)?;
    let (src_mac, cloud_mac) = tb.edge_peer_macs()?;
    let template = WorkerTemplate {
        netns: Some(tb.ns(Host::Edge)),
        ports: ports(("to-src", &src_mac), ("to-cloud", &cloud_mac)),
        vector: None,
        poll: Some(nfx_io::PollMode::Adaptive),
        ring_slots: None,
        fanout: Some(4000),
        fast_path: None,
        allowed_dirs: Vec::new(),
        nice: None,
        kernel_stack: None,
        io: None,
    };
    let run_dir = dir.join("handoff");
    let cfg = LocalConfig {
        run_dir: run_dir.clone(),
        nfx_bin: Some(nfx.to_path_buf()),
        workers: [("w0".into(), template.clone()), ("w1".into(), template)].into(),
    };
    let _workers = Workers::new(&run_dir);
    let vnfm = LocalVnfm::new(cfg)?;
    let chain = chain_nodes(
        &tb,
        &Chain::Full {
            patterns: PathBuf::from("unused"),
            elephant_bytes: 1,
        },
    );
    let deploy = |tag: &str, device: &str| -> anyhow::Result<()> {
        for (i, (f, short)) in [("firewall", "fw"), ("nat", "nat")].iter().enumerate() {
            vnfm.deploy_instance(&InstanceSpec {
                id: format!("{short}-{tag}"),
                function: f.to_string(),
                device: device.into(),
                config: chain[i][*f].clone(),
                throughput_gbps: 0.0,
                capacity: 0.0,
            })?;
        }
        Ok(())
    };
    deploy("a", "w0")?;
    let port = UDPGEN_PORT + 4;
    let sink = Sink::start(&tb.ns(Host::Dst), port, &[])?;
    let mut gen = GenSpec::flood(&tb.ns(Host::Src), tb.dst_ip(), port, Duration::from_secs(4));
    gen.pps = Some(args.pps);
    gen.batch = 16;
    let traffic = std::thread::spawn(move || udpgen::generate(gen));
    std::thread::sleep(Duration::from_millis(1200));
    deploy("b", "w1")?;
    std::thread::sleep(Duration::from_millis(300));
    let phases: HandoffReport = vnfm.handoff("w0", "w1")?;
    for (old, new) in [("fw-a", "fw-b"), ("nat-a", "nat-b")] {
        vnfm.migrate_instance(old, new, &[])?;
    }
    let gen = traffic
        .join()
        .map_err(|_| anyhow::anyhow!("generator thread panicked"))??;
    let deadline = Instant::now() + Duration::from_secs(3);
    while sink.packets() < gen.sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = sink.finish()?;
    let (s0, s1) = (
        stats(&run_dir.join("w0.sock"))?,
        stats(&run_dir.join("w1.sock"))?,
    );
    let socket = |s: &Stats| s.ports.iter().map(|p| p.socket_drops).sum::<u64>();
    let forwarded = |s: &Stats| s.port("outside").map_or(0, |p| p.tx_packets);
    let (w0_fwd, w1_fwd) = (forwarded(&s0), forwarded(&s1));
    for id in ["fw-a", "nat-a", "fw-b", "nat-b"] {
        vnfm.destruct_instance(id)?;
    }
    Ok(json!({
        "sent": gen.sent,
        "received": got.packets,
        "lost_packets": gen.sent.saturating_sub(got.packets),
        "pps": args.pps,
        "forwarded_by_old": w0_fwd,
        "forwarded_by_new": w1_fwd,
        "new_invalid_state": s1.node_drop("firewall", "invalid_state"),
        "new_nat_no_mapping": s1.node_drop("nat", "nat_no_mapping"),
        "socket_drops": socket(&s0) + socket(&s1),
        "phases": phases,
    }))
}

/// A worker's two ports: `(iface, peer_mac)` inside and outside.
fn ports(inside: (&str, &str), outside: (&str, &str)) -> Ports {
    let port = |(iface, mac): (&str, &str)| PortConfig {
        iface: iface.into(),
        peer_mac: mac.into(),
        table_tier: false,
    };
    Ports {
        inside: port(inside),
        outside: port(outside),
    }
}
