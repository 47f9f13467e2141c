//! `nfx demo`: builds a testbed, runs the firewall → NAT → elephant → DPI chain on edge
//! with `nfx run`, drives real traffic through it for a bounded time (iperf3 TCP, a UDP
//! stream, a denied connection, a DPI test payload, a ping), prints a live per-VNF
//! table every second and a final summary, then tears everything down.

use anyhow::Context;
use nfx_testbed::acl::{DENIED_PORT, IPERF_PORT, UDPGEN_PORT};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::nfxrun::{read_events, NfxRun};
use nfx_testbed::probe::{self, EchoResult, TcpOutcome};
use nfx_testbed::runconfig::{Chain, RunSpec};
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use nfx_testbed::{control, Host, Spec, TestbedGuard};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The DPI test string (pattern `nfx-test-alert` in configs/dpi/patterns.txt).
const DPI_TEST: &[u8] = b"NFX-DPI-TEST hello from the nfx demo";

/// Arguments of `nfx demo`.
#[derive(clap::Args)]
pub struct Args {
    /// How long traffic runs, seconds (5..=600).
    #[arg(long, default_value_t = 20)]
    duration: u32,
    /// Keep the testbed and the run directory afterwards (remove with `nfx testbed down --prefix nfx-demo-`).
    #[arg(long)]
    keep: bool,
    /// Poll mode of the dataplane: busy, interrupt or adaptive.
    #[arg(long, default_value = "adaptive")]
    poll: String,
    /// DPI pattern file.
    #[arg(long, default_value = "configs/dpi/patterns.txt")]
    patterns: PathBuf,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-demo-")]
    prefix: String,
    /// The b of the testbed's 10.b.x.x subnets.
    #[arg(long, default_value_t = 199)]
    subnet_base: u8,
}

/// Results of the short probes (denied connection, DPI payload, ping).
struct Probes {
    denied: anyhow::Result<TcpOutcome>,
    dpi_sent: anyhow::Result<u64>,
    ping: anyhow::Result<EchoResult>,
}

/// Runs the demo.
pub fn run(args: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    if !(5..=600).contains(&args.duration) {
        anyhow::bail!("--duration must be 5..=600 seconds");
    }
    nfx_testbed::stop::install();
    let dir = nfx_testbed::tempfile::Builder::new()
        .prefix("nfx-demo-")
        .tempdir()?;
    let patterns = super::data::resolve(&args.patterns, dir.path())?;
    let spec = Spec {
        prefix: args.prefix.clone(),
        subnet_base: args.subnet_base,
    };
    println!(
        "nfx demo: building testbed {}{{src,edge,cloud,dst}} (10.{}.0.0/16)",
        spec.prefix, spec.subnet_base
    );
    let tb = TestbedGuard::up(spec)?;
    let res = demo(&args, &tb, &patterns, dir.path());
    if args.keep {
        let kept = dir.keep();
        println!(
            "kept testbed (prefix {}) and run directory {}",
            args.prefix,
            kept.display()
        );
        tb.keep();
    } else {
        println!("tearing down testbed {}", args.prefix);
    }
    res
}

fn demo(
    args: &Args,
    tb: &TestbedGuard,
    patterns: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    tb.set_edge_forwarding(false)?;
    let events = dir.join("events.jsonl");
    let spec = RunSpec {
        name: "demo-edge".into(),
        control_socket: dir.join("demo-edge.sock"),
        events: Some(events.clone()),
        vector: 256,
        poll: args.poll.clone(),
        chain: Chain::Full {
            patterns: patterns.to_path_buf(),
            elephant_bytes: 1_000_000,
        },
    };
    let exe = std::env::current_exe().context("locating the nfx binary")?;
    let nfx = NfxRun::start(&exe, tb, &spec, &[], dir)?;
    println!(
        "dataplane up on {} (config {}), edge kernel forwarding off",
        tb.ns(Host::Edge),
        nfx.config().display()
    );

    let (src_ns, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    let _iperf_srv = IperfServer::start(&dst_ns, dst, IPERF_PORT)?;
    let stream_sink = Sink::start(&dst_ns, UDPGEN_PORT, &[])?;
    let dpi_sink = Sink::start(&dst_ns, UDPGEN_PORT + 1, b"NFX-DPI-TEST")?;
    let traffic_secs = args.duration.saturating_sub(3).max(2);

    let iperf_spec = ClientSpec::tcp(&src_ns, dst, IPERF_PORT, traffic_secs, 1);
    let tcp = std::thread::spawn(move || iperf::client(&iperf_spec));
    let mut stream = GenSpec::flood(
        &src_ns,
        dst,
        UDPGEN_PORT,
        Duration::from_secs(u64::from(traffic_secs)),
    );
    stream.payload = 200;
    stream.flows = 1;
    stream.batch = 16;
    stream.pps = Some(20_000);
    let udp = std::thread::spawn(move || udpgen::generate(stream));
    let (p_src, p_dst) = (src_ns.clone(), dst);
    let probes = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        let denied = probe::tcp_request(
            &p_src,
            p_dst,
            DENIED_PORT,
            b"hello",
            Duration::from_millis(1500),
        );
        let mut dpi = GenSpec::flood(&p_src, p_dst, UDPGEN_PORT + 1, Duration::from_millis(300));
        dpi.payload = DPI_TEST.len();
        dpi.pattern = DPI_TEST.to_vec();
        dpi.flows = 1;
        dpi.batch = 1;
        dpi.pps = Some(10);
        let dpi_sent = udpgen::generate(dpi).map(|r| r.sent);
        let ping = probe::icmp_echo(&p_src, p_dst, 3, Duration::from_millis(200));
        Probes {
            denied,
            dpi_sent,
            ping,
        }
    });

    let start = Instant::now();
    let mut prev: Option<(Value, Instant)> = None;
    let limit = Duration::from_secs(u64::from(args.duration));
    while start.elapsed() < limit && !nfx_testbed::stop::requested() {
        std::thread::sleep(Duration::from_secs(1));
        let now = Instant::now();
        match nfx.stats() {
            Ok(s) => {
                print!(
                    "{}",
                    live_table(
                        start.elapsed(),
                        &s,
                        prev.as_ref().map(|(p, t)| (p, now - *t))
                    )
                );
                prev = Some((s, now));
            }
            Err(e) => println!("stats unavailable: {e:#}"),
        }
        if tcp.is_finished() && udp.is_finished() && probes.is_finished() {
            break;
        }
    }
    let interrupted = nfx_testbed::stop::requested();
    if interrupted {
        println!("interrupted: stopping traffic and tearing down");
    }
    let tcp = tcp
        .join()
        .map_err(|_| anyhow::anyhow!("iperf3 thread panicked"))?;
    let udp = udp
        .join()
        .map_err(|_| anyhow::anyhow!("UDP thread panicked"))?;
    let probes = probes
        .join()
        .map_err(|_| anyhow::anyhow!("probe thread panicked"))?;
    let stream_got = stream_sink.finish()?;
    let dpi_got = dpi_sink.finish()?;
    let last = nfx.stats().ok();
    let fin = nfx.stop()?;
    let stats = if fin.get("nodes").is_some() {
        fin
    } else {
        last.unwrap_or(fin)
    };
    let (evs, _) = read_events(&events);

    println!(
        "\n== nfx demo summary ({:.1} s) ==",
        start.elapsed().as_secs_f64()
    );
    print!("{}", node_totals(&stats));
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        println!("  [{}] {what}", if ok { " ok " } else { "FAIL" });
        if !ok {
            failed.push(what);
        }
    };
    match &tcp {
        Ok(r) => check(
            r.received_bytes > 0,
            format!(
                "iperf3 TCP src→dst: {:.2} Gbit/s, {} bytes delivered",
                r.gbps, r.received_bytes
            ),
        ),
        Err(e) => check(false, format!("iperf3 TCP: {e:#}")),
    }
    match &udp {
        Ok(g) => check(
            stream_got.packets > 0,
            format!(
                "UDP stream: {} sent, {} received at dst",
                g.sent, stream_got.packets
            ),
        ),
        Err(e) => check(false, format!("UDP stream: {e:#}")),
    }
    let acl_deny = control::total_drop(&stats, "acl_deny");
    match &probes.denied {
        Ok(o) => check(
            *o == TcpOutcome::TimedOut && acl_deny > 0,
            format!("connection to dst:{DENIED_PORT}: {o:?}; acl_deny drops = {acl_deny}"),
        ),
        Err(e) => check(false, format!("denied-port probe: {e:#}")),
    }
    let dpi_events = evs.iter().filter(|e| e["kind"] == "dpi_match").count();
    match &probes.dpi_sent {
        Ok(n) => check(
            dpi_events > 0,
            format!(
                "DPI payload: {n} sent, {} arrived, {dpi_events} dpi_match events",
                dpi_got.matched
            ),
        ),
        Err(e) => check(false, format!("DPI payload: {e:#}")),
    }
    let elephants: Vec<&Value> = evs.iter().filter(|e| e["kind"] == "elephant").collect();
    let iperf_elephant = elephants.iter().any(|e| {
        e["flow"]["proto"] == 6
            && (e["flow"]["dport"] == IPERF_PORT || e["flow"]["sport"] == IPERF_PORT)
    });
    let icmp_elephant = elephants.iter().any(|e| e["flow"]["proto"] == 1);
    check(
        iperf_elephant && !icmp_elephant,
        format!(
            "elephant events: {} (iperf3 flow: {iperf_elephant}, ICMP: {icmp_elephant})",
            elephants.len()
        ),
    );
    match &probes.ping {
        Ok(p) => check(
            p.received > 0,
            format!("ping dst: {}/{} replies", p.received, p.sent),
        ),
        Err(e) => check(false, format!("ping: {e:#}")),
    }
    println!("  events: {} total in {}", evs.len(), events.display());
    if interrupted {
        anyhow::bail!("demo interrupted");
    }
    if !failed.is_empty() {
        anyhow::bail!("{} demo check(s) failed", failed.len());
    }
    Ok(())
}

/// One second of the live view: per worker CPU, per node packets, Gbit/s and drops.
fn live_table(t: Duration, s: &Value, prev: Option<(&Value, Duration)>) -> String {
    let mut out = format!("── t={:>4.0}s ", t.as_secs_f64());
    for w in s["workers"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "worker {} cpu {:>5.1}%  ",
            w["id"],
            w["cpu_pct"].as_f64().unwrap_or(0.0)
        ));
    }
    out.push_str(&format!(
        "events dpi {} elephant {}\n",
        control::events(s, "dpi_match"),
        control::events(s, "elephant")
    ));
    out.push_str(&format!(
        "   {:<10} {:>12} {:>8}  drops\n",
        "node", "packets", "Gbit/s"
    ));
    for n in s["nodes"].as_array().into_iter().flatten() {
        let name = n["name"].as_str().unwrap_or("?");
        let bytes = n["bytes"].as_u64().unwrap_or(0);
        let gbps = prev
            .and_then(|(p, dt)| {
                control::node(p, name).map(|pn| (pn["bytes"].as_u64().unwrap_or(0), dt))
            })
            .map(|(b0, dt)| {
                bytes.saturating_sub(b0) as f64 * 8.0 / dt.as_secs_f64().max(1e-3) / 1e9
            })
            .unwrap_or(0.0);
        out.push_str(&format!(
            "   {:<10} {:>12} {:>8.3}  {}\n",
            name,
            n["packets"].as_u64().unwrap_or(0),
            gbps,
            drops(n)
        ));
    }
    out
}

/// Non-zero drop counters of a node as `reason=n ...`.
fn drops(n: &Value) -> String {
    n["drops"]
        .as_object()
        .map(|d| {
            d.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Per-node totals for the summary.
fn node_totals(s: &Value) -> String {
    let mut out = format!(
        "   {:<10} {:>12} {:>14}  drops\n",
        "node", "packets", "bytes"
    );
    for n in s["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "   {:<10} {:>12} {:>14}  {}\n",
            n["name"].as_str().unwrap_or("?"),
            n["packets"].as_u64().unwrap_or(0),
            n["bytes"].as_u64().unwrap_or(0),
            drops(n)
        ));
    }
    out
}
