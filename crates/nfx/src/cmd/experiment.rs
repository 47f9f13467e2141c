//! `nfx experiment accel-switch`: the SSH-tunnel paper's demonstration rerun on the testbed
//! (`nfx experiment energy` lives in `experiment_energy`, `nfx experiment hyper` in
//! `experiment_hyper`, `nfx experiment vpn-ladder` in `experiment_vpn`, `nfx experiment edge-video` in
//! `experiment_edge`).
//! Two ESP tunnels src→dst on the `soft` engine (as Dropbear was), one lookaside queue
//! pair, and the SSM; tunnel 1 carries 10 Mbit/s then saturates, later tunnel 2 saturates
//! and tunnel 1 drops back. Writes timeseries.csv, chart.png and summary.json.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nfx_ssm::chart::{self, Point, Series};
use nfx_ssm::{EmClient, EmStatus, Kind, Policy, PolicyConfig, Ssm};
use nfx_testbed::process::ChildGuard;
use nfx_testbed::{iperf, netns, Host, Spec, TestbedGuard};
use serde::{Deserialize, Serialize};

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The SSH-tunnel paper's accelerator-switch demonstration (Fig. 5).
    AccelSwitch(AccelSwitch),
    /// The edge-encryption paper's Table 2: a video clip chunked and PRESENT-encrypted
    /// at the edge (No-VNF, SW-VNF, HW-VNF on modelled hardware), TCP and UDP.
    EdgeVideo(super::experiment_edge::Args),
    /// The energy paper: NAT and transcoding boxes under a video load ramp, four
    /// dataplanes (kernel, busy poll, adaptive, adaptive + power manager).
    Energy(super::experiment_energy::Args),
    /// HYPER Fig. 4: one VNF, a 3-VNF chain and a hybrid chain, software vs table tier;
    /// deploy time per tier and the table tier's migration rate.
    Hyper(super::experiment_hyper::Args),
    /// The VPN+ paper's ladder: plain forwarding, the tunnel's scalar path, its vector
    /// path, and the vector path with the crypto on the lookaside device (modelled
    /// hardware); 1 and 8 TCP streams, CPU user/system per endpoint.
    VpnLadder(super::experiment_vpn::Args),
}

/// Arguments of `nfx experiment accel-switch`.
#[derive(clap::Args)]
struct AccelSwitch {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// Length of the run in seconds (at least 20).
    #[arg(long, default_value_t = 40)]
    duration: u64,
    /// SSM poll period in milliseconds.
    #[arg(long, default_value_t = 500)]
    period_ms: u64,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-as-")]
    prefix: String,
    /// Second octet of the testbed's 10.b.x.x addresses.
    #[arg(long, default_value_t = 207)]
    subnet_base: u8,
    /// SSM upper CPU threshold (%): grant above it. A saturated `soft` tunnel sits at
    /// 75–100 % of a core on the shared 2-vCPU testbed (iperf3 and the kernel take the rest).
    #[arg(long, default_value_t = 70.0)]
    upper: f64,
    /// SSM lower CPU threshold (%): revoke below it. It must lie under the CPU of a
    /// saturated tunnel on the accelerator (20–45 % with the offloads) and above an
    /// idle one (0–4 % at 10 Mbit/s), or the grant flaps.
    #[arg(long, default_value_t = 10.0)]
    lower: f64,
    /// Microseconds the lookaside device keeps polling after its last work before it
    /// sleeps (`nfx accel serve --spin-us`). The pipelined tunnel keeps it fed and wakes
    /// it through the doorbell; a longer spin takes CPU the tunnel ends and iperf3 need
    /// on the 2-vCPU testbed (docs/experiments/accel-switch.md).
    #[arg(long, default_value_t = 30)]
    device_spin_us: u64,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::AccelSwitch(a) => accel_switch(&a),
        What::EdgeVideo(a) => super::experiment_edge::run(a),
        What::Energy(a) => super::experiment_energy::run(a),
        What::Hyper(a) => super::experiment_hyper::run(a),
        What::VpnLadder(a) => super::experiment_vpn::run(a),
    }
}

/// One tunnel's saturated phase in accel-switch's `summary.json`: means on a software
/// engine and on `lookaside`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TunnelRow {
    /// `t1` or `t2`.
    pub name: String,
    /// Gbit/s before the grant.
    pub gbps_before: f64,
    /// Gbit/s on the lookaside device.
    pub gbps_with_accel: f64,
    /// CPU % of the src endpoint before the grant.
    pub cpu_pct_before: f64,
    /// CPU % on the lookaside device.
    pub cpu_pct_with_accel: f64,
}

/// accel-switch's `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccelSwitchSummary {
    /// Both tunnels.
    pub tunnels: Vec<TunnelRow>,
    /// SSM reaction per grant (threshold-crossing sample → engine switched), ms.
    pub reaction_ms: Vec<f64>,
    /// Live engine switch per grant, µs.
    pub switch_us: Vec<u64>,
    /// Σ (src tx − dst rx) packets over both tunnels.
    pub lost_packets: i64,
    /// The SSM's poll period, ms.
    pub period_ms: u64,
}

/// One tunnel of the experiment: endpoint in src (managed by the SSM) and in dst.
struct Tunnel {
    name: &'static str,
    src_inner: Ipv4Addr,
    dst_inner: Ipv4Addr,
    em_src: u16,
    em_dst: u16,
    port: u16,
    iperf: u16,
}

const TUNNELS: [Tunnel; 2] = [
    Tunnel {
        name: "t1",
        src_inner: Ipv4Addr::new(172, 31, 1, 1),
        dst_inner: Ipv4Addr::new(172, 31, 1, 2),
        em_src: 7301,
        em_dst: 7311,
        port: 4501,
        iperf: 5201,
    },
    Tunnel {
        name: "t2",
        src_inner: Ipv4Addr::new(172, 31, 2, 1),
        dst_inner: Ipv4Addr::new(172, 31, 2, 2),
        em_src: 7302,
        em_dst: 7312,
        port: 4502,
        iperf: 5202,
    },
];

const ALG: &str = "aes-128-ctr-hmac-sha256";

/// The endpoints' EM token file, next to their configs in the work directory.
const EM_TOKEN: &str = "em-token";

/// `n` random bytes from /dev/urandom as hex (keys of test and benchmark endpoints).
pub(crate) fn hex_random(n: usize) -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    }))
}

/// Writes the two endpoint configs of a tunnel (keys fresh from /dev/urandom; the files
/// are 0600 in the output's private work dir and removed with it).
fn write_configs(
    dir: &Path,
    t: &Tunnel,
    src_ns: &str,
    dst_ns: &str,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let (k1, a1, k2, a2) = (
        hex_random(20)?,
        hex_random(32)?,
        hex_random(20)?,
        hex_random(32)?,
    );
    let spi = |i: u32| 0x1000 + i + u32::from(t.port);
    let conf =
        |side: &str,
         ns: &str,
         em: u16,
         inner: Ipv4Addr,
         local: Ipv4Addr,
         peer: Ipv4Addr,
         engine: &str,
         out: (&str, &str, u32),
         inb: (&str, &str, u32)| {
            format!(
            "name: {n}-{side}\nnetns: {ns}\nem_listen: 127.0.0.1:{em}\nem_token_file: {EM_TOKEN}\n\
             lookaside_dir: .\nengine: {engine}\nalg: {ALG}\n\
             tun:\n  name: {n}{side}\n  address: {inner}/30\n\
             underlay:\n  local: {local}:{p}\n  peer: {peer}:{p}\n\
             insecure_static_keys: true\nseq_state: {n}-{side}.seq\n\
             outbound:\n  spi: {}\n  key: {}\n  auth_key: {}\n\
             inbound:\n  spi: {}\n  key: {}\n  auth_key: {}\n",
            out.2, out.0, out.1, inb.2, inb.0, inb.1,
            n = t.name,
            p = t.port,
        )
        };
    let a = conf(
        "src",
        src_ns,
        t.em_src,
        t.src_inner,
        src_ip,
        dst_ip,
        "soft",
        (&k1, &a1, spi(1)),
        (&k2, &a2, spi(2)),
    );
    let b = conf(
        "dst",
        dst_ns,
        t.em_dst,
        t.dst_inner,
        dst_ip,
        src_ip,
        "cpu",
        (&k2, &a2, spi(2)),
        (&k1, &a1, spi(1)),
    );
    let mut paths = Vec::new();
    for (side, text) in [("src", a), ("dst", b)] {
        let p = dir.join(format!("{}-{side}.yaml", t.name));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&p)
            .with_context(|| format!("writing {}", p.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        paths.push(p);
    }
    Ok((paths[0].clone(), paths[1].clone()))
}

fn spawn_nfx(args: &[&str], log: &Path) -> anyhow::Result<ChildGuard> {
    let exe = std::env::current_exe().context("locating the nfx binary")?;
    let f = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f);
    ChildGuard::spawn(cmd)
}

/// Waits until the tunnel's EM reports its data path ready (TUN up with its address,
/// underlay bound): the EM answers before that, and an iperf3 server bound to the inner
/// address cannot start earlier.
fn wait_em(em: &EmClient, limit: Duration) -> anyhow::Result<EmStatus> {
    let end = Instant::now() + limit;
    loop {
        match em.status() {
            Ok(s) if s.ready => return Ok(s),
            Ok(_) if Instant::now() >= end => bail!("tunnel data path not ready after {limit:?}"),
            Err(e) if Instant::now() >= end => bail!("tunnel EM did not come up: {e}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One traffic phase of a tunnel: from `from` to `to` seconds, rate (None = saturate).
struct Phase {
    from: f64,
    to: f64,
    rate: Option<&'static str>,
}

fn schedule(d: f64) -> [Vec<Phase>; 2] {
    let (a, b) = (0.2 * d, 0.6 * d);
    [
        vec![
            Phase {
                from: 0.0,
                to: a,
                rate: Some("10M"),
            },
            Phase {
                from: a,
                to: b,
                rate: None,
            },
            Phase {
                from: b,
                to: d,
                rate: Some("10M"),
            },
        ],
        vec![
            Phase {
                from: 0.0,
                to: b,
                rate: Some("10M"),
            },
            Phase {
                from: b,
                to: d,
                rate: None,
            },
        ],
    ]
}

/// Drives one tunnel's phases with iperf3 TCP clients, each bounded in time.
fn drive(
    ns: String,
    server: Ipv4Addr,
    port: u16,
    phases: Vec<Phase>,
    t0: Instant,
    stop: Arc<AtomicBool>,
) {
    for ph in phases {
        let start = t0 + Duration::from_secs_f64(ph.from);
        if let Some(w) = start.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let secs = ((ph.to - ph.from).round() as u64).max(1).to_string();
        let (srv, p) = (server.to_string(), port.to_string());
        let mut a = vec![
            "iperf3",
            "-c",
            &srv,
            "-p",
            &p,
            "-t",
            &secs,
            "--connect-timeout",
            "3000",
        ];
        if let Some(r) = ph.rate {
            a.extend_from_slice(&["-b", r]);
        }
        let mut cmd = netns::command(&ns, &a);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let limit = Duration::from_secs_f64(ph.to - ph.from + 10.0);
        if let Err(e) = nfx_testbed::process::output_within(cmd, limit) {
            eprintln!("accel-switch: iperf3 on {srv}: {e:#}");
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn accel_switch(a: &AccelSwitch) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.duration >= 20,
        "--duration {}: must be at least 20 s",
        a.duration
    );
    anyhow::ensure!(
        0.0 < a.lower && a.lower < a.upper && a.upper <= 100.0,
        "--lower {} / --upper {}: need 0 < lower < upper <= 100",
        a.lower,
        a.upper
    );
    nfx_testbed::root::require_root()?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let work = a.out.join("work");
    std::fs::create_dir_all(&work)?;
    let tb = TestbedGuard::up(Spec {
        prefix: a.prefix.clone(),
        subnet_base: a.subnet_base,
    })?;
    let (src_ns, dst_ns) = (tb.ns(Host::Src), tb.ns(Host::Dst));
    let sock = work.join("accel.sock");
    let sock_s = sock.to_string_lossy().to_string();
    let spin = a.device_spin_us.to_string();
    let _device = spawn_nfx(
        &[
            "accel",
            "serve",
            "--queue-pairs",
            "1",
            "--socket",
            &sock_s,
            "--spin-us",
            &spin,
        ],
        &work.join("accel.log"),
    )?;
    let end = Instant::now() + Duration::from_secs(5);
    while !sock.exists() {
        anyhow::ensure!(
            Instant::now() < end,
            "lookaside device did not create {}",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut procs = Vec::new();
    let mut servers = Vec::new();
    let timeout = Duration::from_millis(a.period_ms.clamp(100, 2000));
    let token = nfx_control::client::write_new_token(&work.join(EM_TOKEN))?;
    let em = |port: u16| EmClient::new(&format!("http://127.0.0.1:{port}"), token.clone(), timeout);
    for t in &TUNNELS {
        let (cs, cd) = write_configs(&work, t, &src_ns, &dst_ns, tb.src_ip(), tb.dst_ip())?;
        for (c, side) in [(cs, "src"), (cd, "dst")] {
            let c = c.to_string_lossy().to_string();
            procs.push(spawn_nfx(
                &["tunnel", "--config", &c],
                &work.join(format!("{}-{side}.log", t.name)),
            )?);
        }
        wait_em(&em(t.em_src), Duration::from_secs(10))?;
        wait_em(&em(t.em_dst), Duration::from_secs(10))?;
        servers.push(iperf::IperfServer::start(&dst_ns, t.dst_inner, t.iperf)?);
    }
    let ems = TUNNELS
        .iter()
        .map(|t| (t.name.to_string(), em(t.em_src)))
        .collect();
    let cfg = PolicyConfig {
        upper: a.upper,
        lower: a.lower,
        samples: 2,
        cooldown_ns: 2_000_000_000,
        queue_pairs: 1,
        min_gain: 1.0,
    };
    let events = std::fs::File::create(a.out.join("ssm-events.jsonl"))?;
    let mut ssm = Ssm::new(Policy::new(cfg, None), ems, &sock_s).with_sink(Box::new(events));
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let period = Duration::from_millis(a.period_ms);
    let ssm_thread = {
        let st = stop.clone();
        std::thread::spawn(move || {
            ssm.run(period, &st);
            ssm
        })
    };
    let d = a.duration as f64;
    let drivers: Vec<_> = schedule(d)
        .into_iter()
        .zip(TUNNELS.iter())
        .map(|(ph, t)| {
            let (ns, st) = (src_ns.clone(), stop.clone());
            let (srv, port) = (t.dst_inner, t.iperf);
            std::thread::spawn(move || drive(ns, srv, port, ph, t0, st))
        })
        .collect();
    let probes: Vec<EmClient> = TUNNELS.iter().map(|t| em(t.em_src)).collect();
    let mut series: Vec<Series> = TUNNELS
        .iter()
        .map(|t| Series {
            name: t.name.into(),
            points: vec![],
        })
        .collect();
    let mut next = Instant::now();
    let progress = super::output::Progress::bar("accel-switch: seconds", d as u64);
    while t0.elapsed().as_secs_f64() < d {
        let t_s = t0.elapsed().as_secs_f64();
        progress.set(t_s as u64);
        for (s, em) in series.iter_mut().zip(&probes) {
            match em.status() {
                Ok(st) => s.points.push(Point {
                    t_s,
                    cpu_pct: st.cpu_pct,
                    gbps: st.tx_gbps,
                    engine: st.engine,
                }),
                Err(e) => crate::note!("accel-switch: {} status: {e}", s.name),
            }
        }
        next += period;
        if let Some(w) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
    drop(progress);
    stop.store(true, Ordering::Relaxed);
    for h in drivers {
        let _ = h.join();
    }
    let ssm = ssm_thread
        .join()
        .map_err(|_| anyhow::anyhow!("SSM thread panicked"))?;
    std::thread::sleep(period);
    let mut lost: i64 = 0;
    for t in &TUNNELS {
        let s = em(t.em_src).status()?;
        let r = em(t.em_dst).status()?;
        lost += (s.tx_packets as i64 - r.rx_packets as i64).max(0);
    }
    drop(procs);
    drop(servers);
    write_outputs(a, &series, &ssm, lost, d)?;
    drop(tb);
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

fn write_outputs(
    a: &AccelSwitch,
    series: &[Series],
    ssm: &Ssm,
    lost: i64,
    d: f64,
) -> anyhow::Result<()> {
    let mut csv = String::from("t_s");
    for s in series {
        let _ = write!(csv, ",{0}_cpu_pct,{0}_gbps,{0}_engine", s.name);
    }
    csv.push('\n');
    let n = series.iter().map(|s| s.points.len()).min().unwrap_or(0);
    for i in 0..n {
        let _ = write!(csv, "{:.3}", series[0].points[i].t_s);
        for s in series {
            let p = &s.points[i];
            let _ = write!(csv, ",{:.1},{:.4},{}", p.cpu_pct, p.gbps, p.engine);
        }
        csv.push('\n');
    }
    std::fs::write(a.out.join("timeseries.csv"), csv)?;
    chart::draw(
        &a.out.join("chart.png"),
        "accel-switch: two ESP tunnels, one lookaside queue pair",
        series,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let sched = schedule(d);
    let mut tunnels = Vec::new();
    println!("tunnel  Gbit/s soft → lookaside (gain)   CPU % soft → lookaside");
    for (s, ph) in series.iter().zip(sched.iter()) {
        let sat = ph
            .iter()
            .find(|p| p.rate.is_none())
            .map(|p| (p.from + 1.0, p.to))
            .unwrap_or((0.0, 0.0));
        let pick = |accel: bool| -> (Vec<f64>, Vec<f64>) {
            s.points
                .iter()
                .filter(|p| p.t_s >= sat.0 && p.t_s <= sat.1 && (p.engine == "lookaside") == accel)
                .map(|p| (p.gbps, p.cpu_pct))
                .unzip()
        };
        let (g0, c0) = pick(false);
        let (g1, c1) = pick(true);
        let (gb, ga, cb, ca) = (mean(&g0), mean(&g1), mean(&c0), mean(&c1));
        println!(
            "{:6}  {gb:.3} → {ga:.3} ({:.2}x)          {cb:.1} → {ca:.1} ({:+.1})",
            s.name,
            if gb > 0.0 { ga / gb } else { 0.0 },
            ca - cb
        );
        tunnels.push(TunnelRow {
            name: s.name.clone(),
            gbps_before: gb,
            gbps_with_accel: ga,
            cpu_pct_before: cb,
            cpu_pct_with_accel: ca,
        });
    }
    let reaction: Vec<f64> = ssm
        .log()
        .iter()
        .filter(|d| d.decision == Kind::Grant)
        .filter_map(|d| d.reaction_ms)
        .collect();
    let switch_us: Vec<u64> = ssm
        .log()
        .iter()
        .filter(|d| d.decision == Kind::Grant)
        .filter_map(|d| d.switch_us)
        .collect();
    println!(
        "SSM reaction (ms): {reaction:?}; engine switch (µs): {switch_us:?}; lost packets: {lost}"
    );
    let summary = AccelSwitchSummary {
        tunnels,
        reaction_ms: reaction,
        switch_us,
        lost_packets: lost,
        period_ms: a.period_ms,
    };
    std::fs::write(
        a.out.join("summary.json"),
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    println!(
        "wrote {}/{{timeseries.csv,chart.png,summary.json,ssm-events.jsonl}}",
        a.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_covers_the_run_and_saturates_each_tunnel_once() {
        for ph in schedule(40.0) {
            assert_eq!(ph.first().unwrap().from, 0.0);
            assert_eq!(ph.last().unwrap().to, 40.0);
            assert!(ph.windows(2).all(|w| w[0].to == w[1].from));
            assert_eq!(ph.iter().filter(|p| p.rate.is_none()).count(), 1);
        }
    }
}
