//! `nfx experiment vpn-ladder`: the VPN paper's ladder ("Optimizing 5G VPN+ Transport
//! Networks with Vector Packet Processing and FPGA Cryptographic Offloading") rerun on
//! the namespace testbed. A = plain forwarding src → edge → cloud → dst (no tunnel);
//! A1 = an nfx ESP tunnel src ↔ dst on its scalar per-packet path (offloads off, one
//! packet per crypto batch); A2 = the vector path (TUN/UDP offloads, 64-packet batches)
//! on the CPU's crypto instructions; A3 = A2 with the crypto on the lookaside device,
//! a reserved core running the cpu engine (modelled hardware, not an FPGA). Keys are
//! negotiated by IKEv2 (AES-256-GCM, as the paper's tunnel). iperf3 TCP with 1 and 8
//! streams per rung, rungs interleaved over rounds, medians; CPU user/system of each
//! endpoint's processes from `/proc/<pid>/stat`. Writes `summary.json`, `details.json`,
//! `chart.png` and `report.md`.

pub(crate) mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use nfx_io::cpu::TaskStat;
use nfx_testbed::cpu::{ProcessCpu, UserSys};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::peers::{INNER_DST, IPERF_PORT};
use nfx_testbed::{Host, Spec, TestbedGuard};
use serde::Serialize;

use super::bench_tunnel::{start_device, start_tunnel, Children, TunnelOpts};

/// Arguments of `nfx experiment vpn-ladder`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// One round of 2-s runs (for CI; well under a minute).
    #[arg(long)]
    quick: bool,
    /// Rounds of the whole ladder, rungs interleaved (default 3, 1 with --quick).
    #[arg(long)]
    rounds: Option<u32>,
    /// Seconds per iperf3 run (default 6, 2 with --quick).
    #[arg(long)]
    duration: Option<u32>,
    /// Core the lookaside device (A3's modelled hardware) is pinned to.
    #[arg(long, default_value_t = 1)]
    device_core: u32,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-vpn-")]
    prefix: String,
    /// Second octet of the testbed's 10.b.x.x addresses.
    #[arg(long, default_value_t = 212)]
    subnet_base: u8,
}

/// One rung of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// Plain forwarding, no tunnel.
    A,
    /// Tunnel, scalar per-packet path.
    A1,
    /// Tunnel, vector/offload path, crypto on the CPU.
    A2,
    /// A2 with the crypto on the lookaside device.
    A3,
}

impl Rung {
    /// The ladder in run order.
    pub const ALL: [Rung; 4] = [Rung::A, Rung::A1, Rung::A2, Rung::A3];

    /// The paper's name of the rung.
    pub fn name(self) -> &'static str {
        match self {
            Rung::A => "A",
            Rung::A1 => "A1",
            Rung::A2 => "A2",
            Rung::A3 => "A3",
        }
    }

    /// What nfx runs for it.
    pub fn what(self) -> &'static str {
        match self {
            Rung::A => "plain forwarding by the edge and cloud kernels, no tunnel",
            Rung::A1 => "nfx ESP tunnel, scalar path: offloads off, 1 packet per crypto batch, cpu engine",
            Rung::A2 => "nfx ESP tunnel, vector path: TUN/UDP offloads, 64-packet batches, cpu engine (AES instructions)",
            Rung::A3 => "A2 with the crypto on the lookaside device (modelled hardware: a reserved core running the cpu engine)",
        }
    }
}

/// Stream counts of every rung (the paper's single and multiple streams).
pub const STREAMS: [u32; 2] = [1, 8];

/// The ESP transform (the paper's tunnel ran AES-256).
const ESP: &str = "aes-256-gcm";

/// CPU of one end of the link: its iperf3 and, when tunnelled, its tunnel endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EndCpu {
    /// The iperf3 process (client at src, server at dst).
    pub iperf3: UserSys,
    /// The nfx tunnel endpoint process (zero on rung A).
    pub tunnel: UserSys,
}

impl EndCpu {
    /// User and system seconds of the whole end.
    pub fn total(&self) -> UserSys {
        UserSys {
            user_s: self.iperf3.user_s + self.tunnel.user_s,
            sys_s: self.iperf3.sys_s + self.tunnel.sys_s,
        }
    }
}

/// One iperf3 run of one rung.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// `A`, `A1`, `A2` or `A3`.
    pub rung: &'static str,
    /// Parallel TCP streams.
    pub streams: u32,
    /// Round (1-based).
    pub round: u32,
    /// Sender Gbit/s.
    pub send_gbps: f64,
    /// Receiver Gbit/s.
    pub recv_gbps: f64,
    /// Bytes the receiver got.
    pub received_bytes: u64,
    /// TCP retransmissions reported by the sender.
    pub retransmits: u64,
    /// Wall seconds of the client run (the CPU window).
    pub wall_s: f64,
    /// The sending end (src).
    pub src: EndCpu,
    /// The receiving end (dst).
    pub dst: EndCpu,
    /// The lookaside device process (A3 only; the modelled hardware, not an endpoint).
    pub device: Option<UserSys>,
}

/// The processes of one rung that the CPU windows read.
struct RungProcs {
    tunnel_src: Option<u32>,
    tunnel_dst: Option<u32>,
    device: Option<u32>,
    _kids: Vec<Children>,
}

/// Sets up `rung` (tunnel endpoints, device) on the testbed.
fn set_up(rung: Rung, tb: &TestbedGuard, dir: &Path, core: u32) -> anyhow::Result<RungProcs> {
    let base = TunnelOpts {
        esp: ESP,
        ..TunnelOpts::new("cpu")
    };
    let (opts, device) = match rung {
        Rung::A => {
            return Ok(RungProcs {
                tunnel_src: None,
                tunnel_dst: None,
                device: None,
                _kids: Vec::new(),
            })
        }
        Rung::A1 => (
            TunnelOpts {
                offload: false,
                batch: Some(1),
                ..base
            },
            None,
        ),
        Rung::A2 => (base, None),
        Rung::A3 => (
            base,
            Some(start_device(&dir.join("accel.sock"), Some(core), None)?),
        ),
    };
    let sock = dir.join("accel.sock");
    let opts = TunnelOpts {
        device: device.as_ref().map(|_| sock.as_path()),
        ..opts
    };
    let kids = start_tunnel(tb, dir, &opts)?;
    let pid = |i: usize| kids.0.get(i).map(|c| c.id());
    let dev_pid = device.as_ref().and_then(|d| d.0.first()).map(|c| c.id());
    Ok(RungProcs {
        tunnel_src: pid(0),
        tunnel_dst: pid(1),
        device: dev_pid,
        _kids: std::iter::once(kids).chain(device).collect(),
    })
}

/// CPU seconds of `pid` since `start` (zero when there is no such process).
fn used(c: &Option<ProcessCpu>) -> anyhow::Result<UserSys> {
    c.as_ref().map_or(Ok(UserSys::default()), ProcessCpu::used)
}

/// One iperf3 run of `streams` streams with the CPU windows around it.
fn measure(
    tb: &TestbedGuard,
    rung: Rung,
    procs: &RungProcs,
    server: &IperfServer,
    streams: u32,
    secs: u32,
    round: u32,
) -> anyhow::Result<Sample> {
    let start = |p: Option<u32>| p.map(ProcessCpu::start).transpose();
    let (srv, t_src, t_dst, dev) = (
        ProcessCpu::start(server.pid())?,
        start(procs.tunnel_src)?,
        start(procs.tunnel_dst)?,
        start(procs.device)?,
    );
    let spec = ClientSpec::tcp(&tb.ns(Host::Src), server.addr, server.port, secs, streams);
    let t0 = Instant::now();
    let (r, client) = iperf::client_with_cpu(&spec)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let zero = TaskStat {
        utime: 0,
        stime: 0,
        processor: None,
    };
    Ok(Sample {
        rung: rung.name(),
        streams,
        round,
        send_gbps: r.sent_gbps,
        recv_gbps: r.gbps,
        received_bytes: r.received_bytes,
        retransmits: r.retransmits,
        wall_s,
        src: EndCpu {
            iperf3: UserSys::between(&zero, &client),
            tunnel: used(&t_src)?,
        },
        dst: EndCpu {
            iperf3: srv.used()?,
            tunnel: used(&t_dst)?,
        },
        device: dev.as_ref().map(ProcessCpu::used).transpose()?,
    })
}

/// Runs every stream count of one rung, set up once.
fn run_rung(
    tb: &TestbedGuard,
    dir: &Path,
    rung: Rung,
    a: &Args,
    secs: u32,
    round: u32,
) -> anyhow::Result<Vec<Sample>> {
    let procs = set_up(rung, tb, dir, a.device_core)
        .with_context(|| format!("setting up rung {}", rung.name()))?;
    let addr = if rung == Rung::A {
        tb.dst_ip()
    } else {
        INNER_DST
    };
    let server = IperfServer::start(&tb.ns(Host::Dst), addr, IPERF_PORT)?;
    STREAMS
        .iter()
        .map(|&n| {
            measure(tb, rung, &procs, &server, n, secs, round)
                .with_context(|| format!("rung {} with {n} stream(s)", rung.name()))
        })
        .collect()
}

/// Runs the subcommand.
pub fn run(a: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    let rounds = a.rounds.unwrap_or(if a.quick { 1 } else { 3 });
    let secs = a.duration.unwrap_or(if a.quick { 2 } else { 6 });
    anyhow::ensure!((1..=20).contains(&rounds), "--rounds {rounds}: 1..=20");
    anyhow::ensure!((1..=300).contains(&secs), "--duration {secs}: 1..=300");
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let work = nfx_testbed::tempfile::Builder::new()
        .prefix("vpn-ladder-")
        .tempdir()?;
    let load_start = load_average();
    let started = Instant::now();
    let tb = TestbedGuard::up(Spec {
        prefix: a.prefix.clone(),
        subnet_base: a.subnet_base,
    })
    .context("testbed")?;
    let progress = super::output::Progress::bar("vpn-ladder", u64::from(rounds) * 4);
    let (mut samples, mut failures) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for rung in Rung::ALL {
            progress.message(format!("{} (round {round}/{rounds})", rung.name()));
            match run_rung(&tb, work.path(), rung, &a, secs, round) {
                Ok(v) => samples.extend(v),
                // One failed rung (an IKE exchange timing out on a loaded machine) loses
                // that rung's round, not the run; it is reported, and a rung without
                // any sample leaves its ratios `null`.
                Err(e) => {
                    crate::note!(
                        "vpn-ladder: rung {} round {round} failed: {e:#}",
                        rung.name()
                    );
                    failures.push(report::Failure {
                        rung: rung.name(),
                        round,
                        error: format!("{e:#}"),
                    });
                }
            }
            progress.inc();
        }
    }
    drop(progress);
    drop(tb);
    let inputs = report::Inputs {
        samples: &samples,
        failures: &failures,
        rounds,
        secs,
        quick: a.quick,
        device_core: a.device_core,
        elapsed_s: started.elapsed().as_secs_f64(),
        load_start,
        load_end: load_average(),
    };
    let summary = report::write(&a.out, &inputs)?;
    print!("{}", report::console(&summary, &inputs));
    println!(
        "wrote {}/{{summary.json,details.json,chart.png,report.md}}",
        a.out.display()
    );
    Ok(())
}

/// The 1, 5 and 15-minute load averages (the machine is shared).
fn load_average() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect()
}
