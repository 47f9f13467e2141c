//! `nfx bench tunnel`: iperf3 TCP (1 and 4 streams), CPU per GB and sockperf latency
//! through a tunnel between the testbed's `src` and `dst` namespaces (underlay routed
//! by the kernels of `edge` and `cloud`), in one run: no tunnel, each nfx engine, and
//! the peers (wireguard-go, boringtun, OpenVPN, strongSwan, OpenSSH and Dropbear port forwards).
//! Peers that are not installed are reported as skipped, peers that fail as failed,
//! each with the reason; none is faked.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nfx_testbed::cpu::ProcessCpu;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::peers::{Peer, Traffic, INNER_DST, INNER_SRC, IPERF_PORT, SOCKPERF_PORT};
use nfx_testbed::sockperf::{self, SockperfServer};
use nfx_testbed::{Host, Spec, TestbedGuard};
use serde_json::{json, Value};

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {
    /// Write the results as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<super::output::JsonOut>,
    /// Seconds per iperf3 / sockperf run.
    #[arg(long, default_value_t = 5)]
    pub duration: u32,
    /// Namespace prefix of the benchmark's own testbed.
    #[arg(long, default_value = "nfxtb-")]
    pub prefix: String,
    /// Second address octet of that testbed.
    #[arg(long, default_value_t = 211)]
    pub subnet_base: u8,
    /// Run only these cases (comma-separated names; default: all).
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Rounds of the whole case list, run interleaved (a, b, a, b, ...); the table and
    /// the ratios use each case's per-field median, and every round's own ratios are
    /// printed and kept in the JSON (the machine is shared and noisy).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
}

/// The measured fields of a case (each is reduced to its median over the rounds).
const FIELDS: [&str; 5] = [
    "tcp1_gbps",
    "tcp4_gbps",
    "cpu_core_s_per_gb",
    "lat_p50_us",
    "lat_p99_us",
];

/// nfx's own cases, in run order (the peers follow, in [`Peer::ALL`] order).
const NFX_CASES: [&str; 6] = [
    "no-tunnel",
    "nfx-soft",
    "nfx-cpu",
    "nfx-cpu-1thread",
    "nfx-cpu-no-offload",
    "nfx-lookaside",
];
/// The references every case is compared with in the printed table.
const REF_WG: &str = "wireguard-go";
const REF_SSH: &str = "openssh-aes128-gcm";
const REF_NONE: &str = "no-tunnel";

/// Kills child processes on drop (benchmark endpoints and the device).
pub(crate) struct Children(pub(crate) Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Every case name, in run order.
fn all_cases() -> Vec<&'static str> {
    NFX_CASES
        .into_iter()
        .chain(Peer::ALL.iter().map(|p| p.name()))
        .collect()
}

/// The cases to run: all when `wanted` is empty, else those named (in run order);
/// an unknown name is an error listing the valid ones.
fn select(wanted: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let all = all_cases();
    let wanted: Vec<&str> = wanted
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = wanted.iter().find(|w| !all.contains(w)) {
        anyhow::bail!(
            "--cases: unknown case {bad:?}; valid cases: {}",
            all.join(", ")
        );
    }
    if wanted.is_empty() {
        return Ok(all);
    }
    Ok(all.into_iter().filter(|c| wanted.contains(c)).collect())
}

/// A TCP port on 127.0.0.1 that nothing listens on now (for an endpoint's EM, so
/// that parallel runs and other tools never share one).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).context("finding a free EM port")?;
    Ok(l.local_addr()?.port())
}

/// True when the endpoint's EM on `port` answers `/status` (asked with `token`) and `ok`
/// holds for it.
fn em_status(port: u16, token: &str, ok: impl Fn(&Value) -> bool) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!(
        "GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    if c.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut text = String::new();
    if c.read_to_string(&mut text).is_err() {
        return false;
    }
    text.split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str::<Value>(body).ok())
        .is_some_and(|st| ok(&st))
}

/// Waits until endpoint `child`'s EM on `port` reports what `ok` wants (`what` names
/// it in the error); fails at once if the endpoint exits.
fn em_up(
    child: &mut Child,
    port: u16,
    token: &str,
    limit: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            anyhow::bail!(
                "tunnel endpoint exited ({st}) before its EM on port {port} reported {what}"
            );
        }
        if em_status(port, token, &ok) {
            return Ok(());
        }
        if t0.elapsed() > limit {
            anyhow::bail!("tunnel endpoint EM on port {port} did not report {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How the two nfx endpoints of a case run.
pub(crate) struct TunnelOpts<'a> {
    /// The software engine (`soft` or `cpu`; the fallback when `device` is set).
    pub engine: &'a str,
    /// The lookaside device's socket, to run the crypto there.
    pub device: Option<&'a Path>,
    /// `false` selects the per-packet path (no TUN/UDP offloads) for comparison.
    pub offload: bool,
    /// Packets per crypto batch (`None`: the tunnel's default).
    pub batch: Option<usize>,
    /// The ESP transform IKE negotiates.
    pub esp: &'a str,
    /// Packet worker threads per endpoint (`None`: the tunnel's default, the CPUs it
    /// may use).
    pub threads: Option<usize>,
}

impl<'a> TunnelOpts<'a> {
    /// The benchmark's usual endpoints: `engine`, offloads on, AES-128-GCM.
    pub(crate) fn new(engine: &'a str) -> Self {
        Self {
            engine,
            device: None,
            offload: true,
            batch: None,
            esp: "aes-128-gcm",
            threads: None,
        }
    }
}

/// Starts the two nfx endpoints (src and dst) as `o` says, keyed by IKEv2 with a fresh
/// pre-shared key, and waits until both have the CHILD_SA installed.
pub(crate) fn start_tunnel(
    tb: &TestbedGuard,
    dir: &Path,
    o: &TunnelOpts<'_>,
) -> anyhow::Result<Children> {
    let exe = std::env::current_exe()?;
    let (src, dst) = (tb.src_ip(), tb.dst_ip());
    let mut kids = Children(Vec::new());
    write_psk(dir)?;
    let token = nfx_control::client::write_new_token(&dir.join("em-token"))?;
    let mut ports = Vec::new();
    for (i, ns, local, peer, inner, role) in [
        (1u16, tb.ns(Host::Src), src, dst, INNER_SRC, "initiator"),
        (2u16, tb.ns(Host::Dst), dst, src, INNER_DST, "responder"),
    ] {
        let port = free_port()?;
        let dev = o
            .device
            .map(|d| format!("lookaside: '{}'\n", d.display()))
            .unwrap_or_default();
        let batch = o.batch.map(|b| format!("batch: {b}\n")).unwrap_or_default();
        let threads = o
            .threads
            .map(|t| format!("threads: {t}\n"))
            .unwrap_or_default();
        let cfg = format!(
            "name: bench{i}\nnetns: {ns}\nem_listen: '127.0.0.1:{port}'\nem_token_file: em-token\n\
             engine: {engine}\n{dev}\
             offload: {offload}\n{batch}{threads}\
             tun: {{name: nfxesp{i}, address: {inner}/24}}\n\
             underlay: {{local: '{local}:4500', peer: '{peer}:4500'}}\n\
             ike: {{role: {role}, local_id: bench{i}.nfx, remote_id: bench{peer_i}.nfx, \
             psk_file: bench.psk, esp: [{esp}]}}\n",
            engine = o.engine,
            offload = o.offload,
            esp = o.esp,
            peer_i = 3 - i
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
        let child = kids.0.last_mut().context("endpoint just started")?;
        em_up(
            child,
            port,
            &token,
            Duration::from_secs(15),
            "ready",
            |st| st["ready"] == true,
        )?;
        ports.push(port);
    }
    // Traffic starts once IKE has installed the CHILD_SA on both ends.
    for (k, port) in kids.0.iter_mut().zip(ports) {
        em_up(
            k,
            port,
            &token,
            Duration::from_secs(15),
            "an IKE CHILD_SA",
            |st| st["ike"]["child"].is_object(),
        )?;
    }
    Ok(kids)
}

/// Writes a fresh random pre-shared key for the two endpoints (0600).
fn write_psk(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let hex = crate::cmd::experiment::hex_random(32)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join("bench.psk"))?;
    std::io::Write::write_all(&mut f, hex.as_bytes())?;
    Ok(())
}

/// Starts `nfx accel serve` (the lookaside device, pinned to `core` and polling
/// `spin_us` after its last work when given) and waits for its socket.
pub(crate) fn start_device(
    sock: &Path,
    core: Option<u32>,
    spin_us: Option<u64>,
) -> anyhow::Result<Children> {
    start_device_with(sock, core, spin_us, &["--queue-pairs", "2"])
}

/// [`start_device`] with other `nfx accel serve` options (`args`: its queue pairs,
/// slots...).
pub(crate) fn start_device_with(
    sock: &Path,
    core: Option<u32>,
    spin_us: Option<u64>,
    args: &[&str],
) -> anyhow::Result<Children> {
    let _ = std::fs::remove_file(sock);
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["accel", "serve"])
        .args(args)
        .arg("--socket")
        .arg(sock)
        .stdout(Stdio::null());
    if let Some(c) = core {
        cmd.args(["--core", &c.to_string()]);
    }
    if let Some(us) = spin_us {
        cmd.args(["--spin-us", &us.to_string()]);
    }
    let dev = Children(vec![cmd.spawn()?]);
    let t0 = Instant::now();
    while !sock.exists() {
        if t0.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("lookaside device did not create {}", sock.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(dev)
}

/// Traffic straight to an address in `dst` (no tunnel, or an nfx tunnel's inner address).
pub(crate) fn direct(addr: Ipv4Addr) -> Traffic {
    Traffic {
        server_addr: addr,
        client_addr: addr,
        iperf_server_port: IPERF_PORT,
        iperf_client_port: IPERF_PORT,
        sockperf_server_port: SOCKPERF_PORT,
        sockperf_client_port: SOCKPERF_PORT,
    }
}

/// Measures one case: servers in dst, clients in src, CPU of `pids` during the
/// 1-stream run.
fn measure(
    tb: &TestbedGuard,
    name: &str,
    t: &Traffic,
    secs: u32,
    pids: &[u32],
) -> anyhow::Result<Value> {
    let (src, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst));
    let _srv = IperfServer::start(&dst, t.server_addr, t.iperf_server_port)?;
    let tcp = |streams| ClientSpec::tcp(&src, t.client_addr, t.iperf_client_port, secs, streams);
    let cpus: Vec<ProcessCpu> = pids
        .iter()
        .map(|&p| ProcessCpu::start(p))
        .collect::<anyhow::Result<_>>()?;
    let t0 = Instant::now();
    let one = iperf::client(&tcp(1))?;
    let wall = t0.elapsed().as_secs_f64();
    let mut core_s = 0.0;
    for c in &cpus {
        core_s += c.cores()? * wall;
    }
    let four = iperf::client(&tcp(4))?;
    let _sp = SockperfServer::start(&dst, t.server_addr, t.sockperf_server_port)?;
    let lat = sockperf::ping_pong(&src, t.client_addr, t.sockperf_client_port, secs)?;
    let gb = one.received_bytes as f64 / 1e9;
    Ok(json!({
        "name": name,
        "tcp1_gbps": round(one.gbps, 1000.0),
        "tcp4_gbps": round(four.gbps, 1000.0),
        "cpu_core_s_per_gb": if gb > 0.0 { round(core_s / gb, 1000.0) } else { 0.0 },
        "lat_p50_us": round(lat.p50_us, 10.0),
        "lat_p99_us": round(lat.p99_us, 10.0),
    }))
}

fn round(x: f64, d: f64) -> f64 {
    (x * d).round() / d
}

/// What became of one case.
enum Outcome {
    /// Measured: the JSON record.
    Measured(Value),
    /// Not run, with the reason (a peer that is not installed).
    Skipped(String),
    /// Tried and failed, with the error.
    Failed(String),
}

/// Runs one case on the testbed.
fn run_case(tb: &TestbedGuard, dir: &Path, name: &str, secs: u32) -> Outcome {
    let r = match name {
        "no-tunnel" => measure(tb, name, &direct(tb.dst_ip()), secs, &[]),
        "nfx-soft" | "nfx-cpu" | "nfx-cpu-1thread" | "nfx-cpu-no-offload" => {
            let (engine, offload) = match name {
                "nfx-soft" => ("soft", true),
                "nfx-cpu" | "nfx-cpu-1thread" => ("cpu", true),
                _ => ("cpu", false),
            };
            let opts = TunnelOpts {
                offload,
                threads: (name == "nfx-cpu-1thread").then_some(1),
                ..TunnelOpts::new(engine)
            };
            start_tunnel(tb, dir, &opts).and_then(|kids| {
                let pids: Vec<u32> = kids.0.iter().map(Child::id).collect();
                measure(tb, name, &direct(INNER_DST), secs, &pids)
            })
        }
        "nfx-lookaside" => {
            let sock = dir.join("accel.sock");
            start_device(&sock, None, None).and_then(|dev| {
                let opts = TunnelOpts {
                    device: Some(&sock),
                    ..TunnelOpts::new("cpu")
                };
                let kids = start_tunnel(tb, dir, &opts)?;
                let mut pids: Vec<u32> = kids.0.iter().map(Child::id).collect();
                pids.extend(dev.0.iter().map(Child::id));
                measure(tb, name, &direct(INNER_DST), secs, &pids)
            })
        }
        peer => {
            let Some(p) = Peer::from_name(peer) else {
                return Outcome::Failed(format!("unknown case {peer}"));
            };
            if let Some(why) = p.missing() {
                return Outcome::Skipped(why);
            }
            p.start(tb).and_then(|g| {
                measure(tb, name, &g.traffic(), secs, &g.pids())
                    .map_err(|e| anyhow::anyhow!("{e:#}; peer logs: {}", g.diagnostics()))
            })
        }
    };
    match r {
        Ok(v) => Outcome::Measured(v),
        Err(e) => Outcome::Failed(format!("{e:#}")),
    }
}

/// `case / reference` of a numeric field when both are measured and the reference is
/// not zero.
fn ratio(cases: &[Value], name: &str, reference: &str, field: &str) -> Option<f64> {
    let get = |n: &str| {
        cases
            .iter()
            .find(|c| c["name"] == n)
            .and_then(|c| c[field].as_f64())
    };
    let (x, r) = (get(name)?, get(reference)?);
    (r > 0.0).then(|| round(x / r, 100.0))
}

/// The ratio fields of [`ratios`], in output order.
const RATIO_FIELDS: [&str; 8] = [
    "tcp1_vs_wireguard_go",
    "tcp4_vs_wireguard_go",
    "p50_vs_wireguard_go",
    "tcp1_vs_openssh_aes128_gcm",
    "cpu_vs_openssh_aes128_gcm",
    "p50_vs_openssh_aes128_gcm",
    "tcp1_vs_no_tunnel",
    "tcp4_vs_own_tcp1",
];

/// The comparisons the targets are stated in, for every measured case: against the
/// references (wireguard-go, OpenSSH aes128-gcm, no tunnel) and 4 streams against the
/// case's own 1 stream.
fn ratios(cases: &[Value]) -> Vec<Value> {
    cases
        .iter()
        .filter_map(|c| {
            let n = c["name"].as_str()?;
            let (t1, t4) = (c["tcp1_gbps"].as_f64(), c["tcp4_gbps"].as_f64());
            let own = match (t1, t4) {
                (Some(a), Some(b)) if a > 0.0 => Some(round(b / a, 100.0)),
                _ => None,
            };
            Some(json!({
                "name": n,
                "tcp1_vs_wireguard_go": ratio(cases, n, REF_WG, "tcp1_gbps"),
                "tcp4_vs_wireguard_go": ratio(cases, n, REF_WG, "tcp4_gbps"),
                "p50_vs_wireguard_go": ratio(cases, n, REF_WG, "lat_p50_us"),
                "tcp1_vs_openssh_aes128_gcm": ratio(cases, n, REF_SSH, "tcp1_gbps"),
                "cpu_vs_openssh_aes128_gcm": ratio(cases, n, REF_SSH, "cpu_core_s_per_gb"),
                "p50_vs_openssh_aes128_gcm": ratio(cases, n, REF_SSH, "lat_p50_us"),
                "tcp1_vs_no_tunnel": ratio(cases, n, REF_NONE, "tcp1_gbps"),
                "tcp4_vs_own_tcp1": own,
            }))
        })
        .collect()
}

/// Per case, the median over the rounds of each ratio of [`ratios`] taken within its
/// round (the upper median of an even count; absent where no round has it): on a
/// shared machine a round's ratio compares runs a few seconds apart, so its median
/// is steadier than the ratio of two medians.
fn ratio_medians(rounds: &[Vec<Value>]) -> Vec<Value> {
    let per_round: Vec<Vec<Value>> = rounds.iter().map(|r| ratios(r)).collect();
    let mut names: Vec<&str> = Vec::new();
    for r in per_round.iter().flatten() {
        if let Some(n) = r["name"].as_str().filter(|n| !names.contains(n)) {
            names.push(n);
        }
    }
    names
        .iter()
        .map(|&n| {
            let mut out = json!({ "name": n });
            for f in RATIO_FIELDS {
                let mut v: Vec<f64> = per_round
                    .iter()
                    .flatten()
                    .filter(|r| r["name"] == n)
                    .filter_map(|r| r[f].as_f64())
                    .collect();
                v.sort_by(f64::total_cmp);
                if let Some(m) = v.get(v.len() / 2) {
                    out[f] = json!(m);
                }
            }
            out
        })
        .collect()
}

/// The printed table: measured cases with their ratios, then failures and skips.
fn table(cases: &[Value], ratios: &[Value], others: &[(String, String, String)]) -> String {
    let fmt_ratio = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.2}x"));
    // serde_json's Display ignores width: render numbers as strings first.
    let num = |v: &Value| v.as_f64().map_or("-".into(), |x| x.to_string());
    let mut s = format!(
        "{:<20} {:>9} {:>9} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8}\n",
        "case",
        "tcp1Gb/s",
        "tcp4Gb/s",
        "core-s/GB",
        "p50 us",
        "p99 us",
        "tcp1/wg",
        "tcp1/ossh",
        "p50/wg"
    );
    for (c, r) in cases.iter().zip(ratios) {
        s.push_str(&format!(
            "{:<20} {:>9} {:>9} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8}\n",
            c["name"].as_str().unwrap_or(""),
            num(&c["tcp1_gbps"]),
            num(&c["tcp4_gbps"]),
            num(&c["cpu_core_s_per_gb"]),
            num(&c["lat_p50_us"]),
            num(&c["lat_p99_us"]),
            fmt_ratio(&r["tcp1_vs_wireguard_go"]),
            fmt_ratio(&r["tcp1_vs_openssh_aes128_gcm"]),
            fmt_ratio(&r["p50_vs_wireguard_go"]),
        ));
    }
    for (name, what, why) in others {
        s.push_str(&format!("{name:<20} {what}: {why}\n"));
    }
    s
}

/// One case's record over several rounds: each field's median (the upper one of an even
/// count), and the rounds themselves when there was more than one.
fn median_case(name: &str, rounds: &[Value]) -> Value {
    let mut out = json!({ "name": name });
    for f in FIELDS {
        let mut v: Vec<f64> = rounds.iter().filter_map(|r| r[f].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        if let Some(m) = v.get(v.len() / 2) {
            out[f] = json!(m);
        }
    }
    if rounds.len() > 1 {
        out["rounds"] = json!(rounds);
    }
    out
}

/// Per round, `case: tcp1/wg tcp1/ossh` for every case that has a ratio in it.
fn round_lines(rounds: &[Vec<Value>]) -> String {
    let mut s = String::new();
    for (i, r) in rounds.iter().enumerate() {
        let parts: Vec<String> = ratios(r)
            .iter()
            .filter_map(|x| {
                let (wg, ossh) = (
                    x["tcp1_vs_wireguard_go"].as_f64(),
                    x["tcp1_vs_openssh_aes128_gcm"].as_f64(),
                );
                let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
                (wg.is_some() || ossh.is_some())
                    .then(|| format!("{} {}/{}", x["name"].as_str().unwrap_or(""), f(wg), f(ossh)))
            })
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!(
                "round {} tcp1/wg/ossh: {}\n",
                i + 1,
                parts.join(", ")
            ));
        }
    }
    s
}

/// The medians of the rounds' own ratios, one line per case.
fn median_lines(medians: &[Value]) -> String {
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.2}x"));
    medians
        .iter()
        .map(|m| {
            format!(
                "median of rounds {}: tcp1/ossh {} tcp1/wg {} tcp1/none {} tcp4/tcp1 {} cpu/ossh {} p50/ossh {}\n",
                m["name"].as_str().unwrap_or(""),
                f(&m["tcp1_vs_openssh_aes128_gcm"]),
                f(&m["tcp1_vs_wireguard_go"]),
                f(&m["tcp1_vs_no_tunnel"]),
                f(&m["tcp4_vs_own_tcp1"]),
                f(&m["cpu_vs_openssh_aes128_gcm"]),
                f(&m["p50_vs_openssh_aes128_gcm"]),
            )
        })
        .collect()
}

/// The 1-minute load average (the machine is shared; results depend on it).
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let secs = args.duration.clamp(1, 60);
    let selected = select(&args.cases)?;
    let tb = TestbedGuard::up(Spec {
        prefix: args.prefix.clone(),
        subnet_base: args.subnet_base,
    })
    .context("testbed")?;
    let dir = std::env::temp_dir().join(format!("{}bench-tunnel", args.prefix));
    std::fs::create_dir_all(&dir)?;
    let load_start = loadavg();
    let mut others = Vec::new();
    let (mut failed, mut skipped) = (Vec::new(), Vec::new());
    let mut rounds: Vec<Vec<Value>> = Vec::new();
    let progress = super::output::Progress::bar(
        "tunnel",
        (selected.len() as u32 * args.repeat.max(1)).into(),
    );
    for round in 1..=args.repeat.max(1) {
        let mut measured = Vec::new();
        for &name in &selected {
            progress.message(format!("{name} (round {round})"));
            crate::note!("{name} (round {round}) ...");
            match run_case(&tb, &dir, name, secs) {
                Outcome::Measured(v) => measured.push(v),
                Outcome::Skipped(why) => {
                    crate::note!("{name}: skipped: {why}");
                    if round == 1 {
                        skipped.push(json!({"name": name, "reason": why}));
                        others.push((name.to_string(), "skipped".to_string(), why));
                    }
                }
                Outcome::Failed(e) => {
                    crate::note!("{name}: failed: {e}");
                    failed.push(json!({"name": name, "round": round, "error": e}));
                    others.push((name.to_string(), format!("failed (round {round})"), e));
                }
            }
            progress.inc();
        }
        rounds.push(measured);
    }
    drop(progress);
    let cases: Vec<Value> = selected
        .iter()
        .filter_map(|&name| {
            let mine: Vec<Value> = rounds
                .iter()
                .flatten()
                .filter(|c| c["name"] == name)
                .cloned()
                .collect();
            (!mine.is_empty()).then(|| median_case(name, &mine))
        })
        .collect();
    let load_end = loadavg();
    let ratios = ratios(&cases);
    crate::say!("{}", table(&cases, &ratios, &others).trim_end());
    if rounds.len() > 1 {
        crate::say!("{}", round_lines(&rounds).trim_end());
        crate::say!("{}", median_lines(&ratio_medians(&rounds)).trim_end());
    }
    crate::say!(
        "load average (1 min): {} at start, {} at end",
        load_start.map_or("?".into(), |l| l.to_string()),
        load_end.map_or("?".into(), |l| l.to_string())
    );
    if let Some(path) = &args.json {
        let round_ratios: Vec<Vec<Value>> = rounds.iter().map(|r| self::ratios(r)).collect();
        let out = json!({
            "cases": cases,
            "ratios": ratios,
            "failed": failed,
            "skipped": skipped,
            "duration_s": secs,
            "repeat": rounds.len(),
            "round_ratios": round_ratios,
            "ratio_medians": ratio_medians(&rounds),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
        });
        path.write(&out)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, tcp1: f64, p50: f64) -> Value {
        json!({"name": name, "tcp1_gbps": tcp1, "tcp4_gbps": tcp1 * 2.0,
               "cpu_core_s_per_gb": 1.0, "lat_p50_us": p50, "lat_p99_us": p50 * 2.0})
    }

    #[test]
    fn all_issue_case_names_are_known_in_order() {
        assert_eq!(
            all_cases(),
            [
                "no-tunnel",
                "nfx-soft",
                "nfx-cpu",
                "nfx-cpu-1thread",
                "nfx-cpu-no-offload",
                "nfx-lookaside",
                "wireguard-go",
                "boringtun",
                "openvpn",
                "strongswan",
                "openssh-aes128-gcm",
                "openssh-aes128-ctr",
                "dropbear-aes128-ctr"
            ]
        );
    }

    #[test]
    fn case_selection_keeps_run_order_and_rejects_unknown_names() {
        assert_eq!(select(&[]).unwrap().len(), 13);
        let s = select(&["openvpn".into(), " nfx-cpu".into(), String::new()]).unwrap();
        assert_eq!(s, ["nfx-cpu", "openvpn"]);
        let e = select(&["nfx-gpu".into()]).unwrap_err().to_string();
        assert!(e.contains("unknown case \"nfx-gpu\""), "{e}");
        assert!(e.contains("wireguard-go"), "{e}");
    }

    #[test]
    fn ratios_compare_with_both_references() {
        let cases = vec![
            case("nfx-cpu", 6.2, 41.0),
            case("wireguard-go", 3.1, 82.0),
            case("openssh-aes128-gcm", 7.75, 50.0),
        ];
        let r = ratios(&cases);
        assert_eq!(r[0]["tcp1_vs_wireguard_go"], 2.0);
        assert_eq!(r[0]["tcp4_vs_wireguard_go"], 2.0);
        assert_eq!(r[0]["p50_vs_wireguard_go"], 0.5);
        assert_eq!(r[0]["tcp1_vs_openssh_aes128_gcm"], 0.8);
        assert_eq!(r[1]["tcp1_vs_wireguard_go"], 1.0);
        let alone = ratios(&[case("nfx-cpu", 1.0, 1.0)]);
        assert!(alone[0]["tcp1_vs_wireguard_go"].is_null());
        let zero = [case("nfx-cpu", 1.0, 1.0), case("wireguard-go", 0.0, 0.0)];
        assert!(ratio(&zero, "nfx-cpu", REF_WG, "tcp1_gbps").is_none());
    }

    #[test]
    fn table_shows_ratios_and_reasons_not_numbers_for_failures() {
        let cases = vec![case("nfx-cpu", 6.2, 41.0), case("wireguard-go", 3.1, 82.0)];
        let others = vec![(
            "openvpn".to_string(),
            "failed".to_string(),
            "starting openvpn: tunnel not ready".to_string(),
        )];
        let t = table(&cases, &ratios(&cases), &others);
        let cpu = t.lines().find(|l| l.starts_with("nfx-cpu")).unwrap();
        assert!(cpu.contains("2.00x") && cpu.contains("0.50x"), "{t}");
        assert!(cpu.trim_end().ends_with("0.50x"), "{t}");
        assert!(
            t.contains("openvpn              failed: starting openvpn"),
            "{t}"
        );
        assert_eq!(t.lines().count(), 4);
        let header = t.lines().next().unwrap();
        let col = header.find("tcp4Gb/s").unwrap() + "tcp4Gb/s".len();
        assert_eq!(
            &cpu[col - 5..col],
            " 12.4",
            "numbers align under headers:\n{t}"
        );
    }

    #[test]
    fn em_wait_fails_fast_when_the_endpoint_exits() {
        let port = free_port().unwrap();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        let mut child = Command::new("true").spawn().unwrap();
        let t0 = Instant::now();
        let e = em_up(
            &mut child,
            port,
            "t",
            Duration::from_secs(10),
            "ready",
            |_| true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("exited"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn repeated_cases_report_per_field_medians_and_per_round_ratios() {
        let a = [
            case("nfx-cpu", 4.0, 40.0),
            case("nfx-cpu", 6.0, 30.0),
            case("nfx-cpu", 5.0, 90.0),
        ];
        let m = median_case("nfx-cpu", &a);
        assert_eq!(
            (m["tcp1_gbps"].as_f64(), m["lat_p50_us"].as_f64()),
            (Some(5.0), Some(40.0))
        );
        assert_eq!(m["rounds"].as_array().unwrap().len(), 3);
        let one = median_case("nfx-cpu", &a[..1]);
        assert_eq!(one["tcp1_gbps"], 4.0);
        assert!(one.get("rounds").is_none());
        let rounds = vec![
            vec![
                case("nfx-cpu", 5.0, 1.0),
                case("openssh-aes128-gcm", 4.0, 1.0),
            ],
            vec![
                case("nfx-cpu", 4.0, 1.0),
                case("openssh-aes128-gcm", 5.0, 1.0),
            ],
        ];
        let lines = round_lines(&rounds);
        assert!(
            lines.contains("round 1 tcp1/wg/ossh: nfx-cpu -/1.25x"),
            "{lines}"
        );
        assert!(
            lines.contains("round 2 tcp1/wg/ossh: nfx-cpu -/0.80x"),
            "{lines}"
        );
        let m = ratio_medians(&rounds);
        assert_eq!(m[0]["name"], "nfx-cpu");
        assert_eq!(m[0]["tcp1_vs_openssh_aes128_gcm"], 1.25);
        assert_eq!(m[0]["tcp4_vs_own_tcp1"], 2.0);
        assert_eq!(m[0]["cpu_vs_openssh_aes128_gcm"], 1.0);
        assert!(m[0].get("tcp1_vs_no_tunnel").is_none(), "{m:?}");
        let text = median_lines(&m);
        assert!(text.contains("nfx-cpu: tcp1/ossh 1.25x"), "{text}");
    }

    #[test]
    fn load_average_is_read() {
        assert!(loadavg().is_some_and(|l| l >= 0.0));
    }
}
