//! `nfx bench tunnel`: iperf3 TCP (1 and 4 streams), CPU per GB and sockperf latency
//! through an ESP tunnel between the testbed's `src` and `dst` namespaces (underlay
//! routed by the kernels of `edge` and `cloud`), for no tunnel and each nfx engine, in
//! one run. Peers that are not installed are reported as skipped with the reason.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nfx_testbed::cpu::ProcessCpu;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::sockperf::{self, SockperfServer};
use nfx_testbed::{Host, Spec, TestbedGuard};
use serde_json::{json, Value};

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seconds per iperf3 / sockperf run.
    #[arg(long, default_value_t = 5)]
    pub duration: u32,
    /// Namespace prefix of the benchmark's own testbed.
    #[arg(long, default_value = "nfxtb-")]
    pub prefix: String,
    /// Second address octet of that testbed.
    #[arg(long, default_value_t = 211)]
    pub subnet_base: u8,
}

/// Inner (TUN) addresses of the src and dst endpoints.
const INNER_SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 1);
const INNER_DST: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 2);
const KEY_1: &str = "0x000102030405060708090a0b0c0d0e0f10111213";
const KEY_2: &str = "0x202122232425262728292a2b2c2d2e2f30313233";

/// Kills child processes on drop (benchmark endpoints and the device).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn em_up(port: u16, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if t0.elapsed() > limit {
            anyhow::bail!("tunnel endpoint EM on port {port} did not come up");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the two endpoints (src and dst) with `engine`, or the lookaside `device`.
fn start_tunnel(
    tb: &TestbedGuard,
    dir: &Path,
    engine: &str,
    device: Option<&Path>,
) -> anyhow::Result<Children> {
    let exe = std::env::current_exe()?;
    let (src, dst) = (tb.src_ip(), tb.dst_ip());
    let mut kids = Children(Vec::new());
    for (i, ns, local, peer, inner, okey, ikey) in [
        (1u16, tb.ns(Host::Src), src, dst, INNER_SRC, KEY_1, KEY_2),
        (2u16, tb.ns(Host::Dst), dst, src, INNER_DST, KEY_2, KEY_1),
    ] {
        let port = 7390 + i;
        let (ospi, ispi) = if i == 1 {
            (0x2001, 0x2002)
        } else {
            (0x2002, 0x2001)
        };
        let dev = device
            .map(|d| format!("lookaside: '{}'\n", d.display()))
            .unwrap_or_default();
        let cfg = format!(
            "name: bench{i}\nnetns: {ns}\nem_listen: '127.0.0.1:{port}'\nengine: {engine}\n{dev}\
             alg: aes-128-gcm\ntun: {{name: nfxesp{i}, address: {inner}/24}}\n\
             underlay: {{local: '{local}:4500', peer: '{peer}:4500'}}\n\
             outbound: {{spi: {ospi}, key: '{okey}'}}\ninbound: {{spi: {ispi}, key: '{ikey}'}}\n"
        );
        let path = dir.join(format!("bench{i}.yaml"));
        std::fs::write(&path, cfg)?;
        kids.0.push(
            Command::new(&exe)
                .args(["tunnel", "--config"])
                .arg(&path)
                .stdout(Stdio::null())
                .spawn()?,
        );
        em_up(port, Duration::from_secs(15))?;
    }
    Ok(kids)
}

/// Measures one case: traffic from src to `server` (in dst).
fn measure(
    tb: &TestbedGuard,
    name: &str,
    server: Ipv4Addr,
    secs: u32,
    pids: &[u32],
) -> anyhow::Result<Value> {
    let (src, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst));
    let _srv = IperfServer::start(&dst, server, 5201)?;
    let cpus: Vec<ProcessCpu> = pids
        .iter()
        .map(|&p| ProcessCpu::start(p))
        .collect::<anyhow::Result<_>>()?;
    let t0 = Instant::now();
    let one = iperf::client(&ClientSpec::tcp(&src, server, 5201, secs, 1))?;
    let wall = t0.elapsed().as_secs_f64();
    let mut core_s = 0.0;
    for c in &cpus {
        core_s += c.cores()? * wall;
    }
    let four = iperf::client(&ClientSpec::tcp(&src, server, 5201, secs, 4))?;
    let _sp = SockperfServer::start(&dst, server, 11111)?;
    let lat = sockperf::ping_pong(&src, server, 11111, secs)?;
    let gb = one.received_bytes as f64 / 1e9;
    let r = |x: f64, d: f64| (x * d).round() / d;
    Ok(json!({
        "name": name,
        "tcp1_gbps": r(one.gbps, 1000.0),
        "tcp4_gbps": r(four.gbps, 1000.0),
        "cpu_core_s_per_gb": if gb > 0.0 { r(core_s / gb, 1000.0) } else { 0.0 },
        "lat_p50_us": r(lat.p50_us, 10.0),
        "lat_p99_us": r(lat.p99_us, 10.0),
    }))
}

/// Peers and the binary each needs; none is faked when missing.
const PEERS: [(&str, &str); 6] = [
    ("wireguard-go", "wireguard-go"),
    ("boringtun", "boringtun-cli"),
    ("openvpn", "openvpn"),
    ("openssh-aes128-gcm", "sshd"),
    ("openssh-aes128-ctr", "sshd"),
    ("dropbear-aes128-ctr", "dropbear"),
];

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let secs = args.duration.clamp(1, 60);
    let tb = TestbedGuard::up(Spec {
        prefix: args.prefix.clone(),
        subnet_base: args.subnet_base,
    })
    .context("testbed")?;
    let dir = std::env::temp_dir().join(format!("{}bench-tunnel", args.prefix));
    std::fs::create_dir_all(&dir)?;
    let mut cases = Vec::new();
    eprintln!("no-tunnel ...");
    cases.push(measure(&tb, "no-tunnel", tb.dst_ip(), secs, &[])?);
    for engine in ["soft", "cpu"] {
        eprintln!("nfx-{engine} ...");
        let kids = start_tunnel(&tb, &dir, engine, None)?;
        let pids: Vec<u32> = kids.0.iter().map(Child::id).collect();
        cases.push(measure(
            &tb,
            &format!("nfx-{engine}"),
            INNER_DST,
            secs,
            &pids,
        )?);
    }
    eprintln!("nfx-lookaside ...");
    let sock = dir.join("accel.sock");
    let _ = std::fs::remove_file(&sock);
    let dev = Children(vec![Command::new(std::env::current_exe()?)
        .args(["accel", "serve", "--queue-pairs", "2", "--socket"])
        .arg(&sock)
        .stdout(Stdio::null())
        .spawn()?]);
    let t0 = Instant::now();
    while !sock.exists() {
        if t0.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("lookaside device did not create {}", sock.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let kids = start_tunnel(&tb, &dir, "cpu", Some(&sock))?;
    let mut pids: Vec<u32> = kids.0.iter().map(Child::id).collect();
    pids.push(dev.0[0].id());
    cases.push(measure(&tb, "nfx-lookaside", INNER_DST, secs, &pids)?);
    drop(kids);
    drop(dev);
    let mut skipped = Vec::new();
    for (name, bin) in PEERS {
        skipped.push((name, format!("`{bin}` is not installed here")));
        if on_path(bin) {
            skipped.last_mut().expect("just pushed").1 =
                format!("`{bin}` is installed but its harness is not built into nfx yet");
        }
    }
    println!(
        "{:<22} {:>9} {:>9} {:>12} {:>9} {:>9}",
        "case", "tcp1Gb/s", "tcp4Gb/s", "core-s/GB", "p50 us", "p99 us"
    );
    for c in &cases {
        println!(
            "{:<22} {:>9} {:>9} {:>12} {:>9} {:>9}",
            c["name"].as_str().unwrap_or(""),
            c["tcp1_gbps"],
            c["tcp4_gbps"],
            c["cpu_core_s_per_gb"],
            c["lat_p50_us"],
            c["lat_p99_us"]
        );
    }
    for (name, why) in &skipped {
        println!("{name:<22} skipped: {why}");
    }
    if let Some(path) = &args.json {
        let out = json!({"cases": cases});
        std::fs::write(path, serde_json::to_string_pretty(&out)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
