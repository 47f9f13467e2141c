//! Quick forwarding measurement for docs/dataplane.md, on namespaces it makes itself
//! (`a — m — b`, removed at exit): iperf3 TCP through the kernel of `m` vs through nfx
//! in `m` (adaptive and busy), 64-byte UDP packets/s forwarded by nfx in vector vs scalar
//! mode (a batched AF_PACKET generator in `a`), and the CPU of an idle adaptive worker.
//!
//! `cargo run --release -p nfx-dataplane --example fwd_bench [SECONDS]` (root, iperf3).
//!
//! `... --example fwd_bench services [SECONDS] [ROUNDS]` measures the classifier
//! instead, all cases with empty chains and in interleaved rounds: first in process
//! (no I/O: vectors of 256 64-byte frames of 256 flows through `Graph::run`, both
//! directions), the ns per packet of the `chain: []` form, of one `services:` entry that
//! takes everything, of 16 services of which the last matches (15 selectors tried per
//! frame) and of two services splitting every vector half and half; then the 64-byte
//! flood through a worker in the namespaces for the first three. It prints medians and
//! their ratios to the chain form.
//!
//! `... --example fwd_bench latency [SECONDS] [ROUNDS]` measures what measuring each
//! packet's latency costs: the 64-byte flood through a busy worker with the
//! measurement on (the default) and off (`latency: false`), in interleaved rounds;
//! medians of packets/s and worker CPU ns per packet, and their ratios to "off".

use nfx_dataplane::builtin::{L2Rewrite, OutputNode};
use nfx_dataplane::classify::{Cidr, PortRange, Selector};
use nfx_dataplane::graph::{Graph, GraphPlan};
use nfx_dataplane::latency::LatencyWindow;
use nfx_dataplane::{vnf_builder, ClassifierConfig, Dataplane, NodeBuilder, RunConfig};
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_packet::{Direction, Packet, PacketBuf, PacketVector};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NET: u8 = 249;

struct Topo {
    ns: [String; 3],
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Topo {
    fn new() -> Self {
        let pid = std::process::id();
        let t = Topo {
            ns: ["a", "m", "b"].map(|s| format!("nfxbench-{pid}-{s}")),
        };
        let [a, m, b] = [&t.ns[0], &t.ns[1], &t.ns[2]].map(|s| s.as_str());
        for ns in [a, m, b] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "dev", "lo", "up"]);
        }
        sh(&[
            "ip", "-n", a, "link", "add", "veth0", "type", "veth", "peer", "name", "ma", "netns", m,
        ]);
        sh(&[
            "ip", "-n", b, "link", "add", "veth0", "type", "veth", "peer", "name", "mb", "netns", m,
        ]);
        sh(&[
            "ip",
            "-n",
            a,
            "addr",
            "add",
            &format!("10.{NET}.1.1/24"),
            "dev",
            "veth0",
        ]);
        sh(&[
            "ip",
            "-n",
            m,
            "addr",
            "add",
            &format!("10.{NET}.1.2/24"),
            "dev",
            "ma",
        ]);
        sh(&[
            "ip",
            "-n",
            m,
            "addr",
            "add",
            &format!("10.{NET}.2.1/24"),
            "dev",
            "mb",
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "addr",
            "add",
            &format!("10.{NET}.2.2/24"),
            "dev",
            "veth0",
        ]);
        for (ns, dev) in [(a, "veth0"), (m, "ma"), (m, "mb"), (b, "veth0")] {
            sh(&["ip", "-n", ns, "link", "set", "dev", dev, "up"]);
        }
        sh(&[
            "ip",
            "-n",
            a,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{NET}.1.2"),
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{NET}.2.1"),
        ]);
        t
    }

    fn forward(&self, on: bool) {
        sh(&[
            "ip",
            "netns",
            "exec",
            &self.ns[1],
            "sysctl",
            "-qw",
            &format!("net.ipv4.ip_forward={}", u8::from(on)),
        ]);
    }

    fn mac(&self, i: usize, dev: &str) -> String {
        let text = sh(&["ip", "-n", &self.ns[i], "-o", "link", "show", dev]);
        let k = text.find("link/ether ").unwrap() + 11;
        text[k..k + 17].to_string()
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn iperf_tcp(t: &Topo, secs: u64) -> f64 {
    let mut server = Command::new("ip")
        .args([
            "netns", "exec", &t.ns[2], "iperf3", "-s", "-1", "-p", "5299",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.ns[0],
            "iperf3",
            "-c",
            &format!("10.{NET}.2.2"),
            "-p",
            "5299",
            "-J",
            "-t",
        ])
        .arg(secs.to_string())
        .output()
        .unwrap();
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9
}

fn config(t: &Topo, poll: &str, vector: usize) -> RunConfig {
    config_with(t, "bench", poll, vector, "")
}

/// The run config of instance `name` with `what` (a chain or services) appended.
fn config_with(t: &Topo, name: &str, poll: &str, vector: usize, what: &str) -> RunConfig {
    let text = format!(
        "name: {name}\nnetns: {}\nports:\n  inside: {{iface: ma, peer_mac: '{}'}}\n  outside: {{iface: mb, peer_mac: '{}'}}\nvector: {vector}\npoll: {poll}\n{what}",
        t.ns[1],
        t.mac(0, "veth0"),
        t.mac(2, "veth0")
    );
    RunConfig::parse(&text, "bench.yaml").unwrap()
}

fn builder() -> NodeBuilder {
    vnf_builder(std::path::Path::new("."))
}

/// 64-byte UDP frames of `flows` flows (source ports 4000…) from `a` towards an address
/// `b` does not own (b's kernel drops them cheaply in routing), as fast as batched
/// sendmmsg goes, until `stop`.
fn udp_flood(t: &Topo, stop: Arc<AtomicBool>, flows: u16) -> std::thread::JoinHandle<u64> {
    let ns = t.ns[0].clone();
    let dst_mac = nfx_io::sys::parse_mac(&t.mac(1, "ma")).unwrap();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns).unwrap();
        let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
        let mut pkts: Vec<Packet> = (0..256u16)
            .map(|i| {
                let b = etherparse::PacketBuilder::ethernet2(port.mac(), dst_mac)
                    .ipv4([10, NET, 1, 1], [10, NET, 2, 99], 64)
                    .udp(4000 + i % flows.max(1), 4001);
                let mut frame = Vec::new();
                b.write(&mut frame, &[0u8; 18]).unwrap();
                Packet::new(PacketBuf::from_frame(&frame), Direction::Forward)
            })
            .collect();
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for p in pkts.iter_mut() {
                p.drop = None;
            }
            sent += port.send(&mut pkts) as u64;
        }
        sent
    })
}

/// One 64-byte flood of `flows` flows through `cfg` (busy poll) for `secs`: packets/s
/// sent on, worker CPU ns per packet, `classify` cycles per packet (0 without
/// services) and the mean vector.
fn flood_through(t: &Topo, cfg: &RunConfig, secs: u64, flows: u16) -> [f64; 4] {
    let dp = Dataplane::start(cfg, builder()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let gen = udp_flood(t, stop.clone(), flows);
    std::thread::sleep(Duration::from_millis(500));
    let ctl = dp.controller();
    let s0 = ctl.stats().unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let s1 = ctl.stats().unwrap();
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let offered = gen.join().unwrap();
    let st = dp.stop().unwrap();
    let sent = (s1.ports[1].tx_packets - s0.ports[1].tx_packets) as f64;
    let cpu_ns = (s1.workers[0].cpu_s - s0.workers[0].cpu_s) * 1e9 / sent.max(1.0);
    let classify = s1.node("classify").map_or(0.0, |n| n.cycles_per_packet);
    eprintln!(
        "  {}: offered {offered} frames, mean vector {:.1}",
        cfg.name, st.workers[0].mean_vector
    );
    [sent / dt, cpu_ns, classify, st.workers[0].mean_vector]
}

fn udp_pps(t: &Topo, vector: usize, secs: u64) -> (f64, f64) {
    let [pps, _, _, mean] = flood_through(t, &config(t, "busy", vector), secs, 1);
    (pps, mean)
}

/// A graph whose chains are empty or (`nat`) one source NAT: the `chain:` form
/// (`None`) or services with `selectors`, all through the same chain.
fn bench_graph(selectors: Option<Vec<Selector>>, nat: bool) -> Graph {
    let l2 = L2Rewrite {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
    };
    let output = OutputNode {
        forward: l2,
        reverse: l2,
    };
    let nodes = || {
        let spec = serde_json::json!({"nat": {"snat": {"public_ip": format!("10.{NET}.2.100")}}});
        let nat = nat.then(|| {
            nfx_dataplane::build_node("nat", &spec, &std::path::Path::new(".").into()).unwrap()
        });
        nat.into_iter().collect::<Vec<_>>()
    };
    let Some(sel) = selectors else {
        return Graph::new(nodes(), output, None);
    };
    let mut g = Graph::new(Vec::new(), output, None).with_classifier(ClassifierConfig::default());
    let chain: Vec<usize> = if nat { vec![0] } else { Vec::new() };
    g.replace(GraphPlan {
        instances: nodes()
            .into_iter()
            .map(|n| (n.name().to_string(), Some(n)))
            .collect(),
        services: (0..sel.len())
            .map(|i| (format!("s{i}"), chain.clone()))
            .collect(),
        selectors: Some(sel),
    })
    .unwrap();
    g
}

/// A 64-byte UDP frame (18 bytes of payload).
fn bench_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut f, &[0u8; 18])
        .unwrap();
    f
}

/// 256 frames of 256 flows (`10.NET.1.1:4000+i → 10.NET.2.99:4001+i%2`).
fn bench_frames() -> Vec<Vec<u8>> {
    (0..256u16)
        .map(|i| bench_frame([10, NET, 1, 1], [10, NET, 2, 99], 4000 + i, 4001 + i % 2))
        .collect()
}

/// The replies to `frames` as `g` sends them on (after its NAT, if any).
fn bench_replies(g: &mut Graph, v: &mut PacketVector, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    graph_ns(g, v, frames, Direction::Forward, 1, None);
    v.packets()
        .iter()
        .map(|p| {
            let k = p.meta.key;
            bench_frame(k.dst.to_be_bytes(), k.src.to_be_bytes(), k.dport, k.sport)
        })
        .collect()
}

/// CPU ns (of this thread, from the kernel: time the thread waited for a CPU does not
/// count) per packet of `vectors` runs of `frames` through `g` in `dir` (frames
/// refilled before each run, so the TTL never runs out). With `latency`, each run's
/// frames are recorded in it as the worker does after a send: one clock read per
/// vector, one histogram count per frame (stamped 20 µs before the run).
fn graph_ns(
    g: &mut Graph,
    v: &mut PacketVector,
    frames: &[Vec<u8>],
    dir: Direction,
    vectors: u32,
    mut latency: Option<&mut LatencyWindow>,
) -> f64 {
    let mut stamps = vec![0u64; frames.len()];
    let t0 = nfx_io::cpu::thread_cpu_time();
    let mut live = 0;
    for _ in 0..vectors {
        for (slot, f) in v.slots_mut().iter_mut().zip(frames) {
            slot.buf.storage_mut()[..f.len()].copy_from_slice(f);
            slot.buf.set_len(f.len());
        }
        if latency.is_some() {
            stamps.fill(nfx_io::stamp_clock_ns() - 20_000);
        }
        v.set_len(frames.len(), dir, false);
        live += g.run(v.packets_mut(), dir, 1);
        if let Some(l) = latency.as_deref_mut() {
            l.record(&stamps, nfx_io::stamp_clock_ns());
        }
    }
    let cpu = nfx_io::cpu::thread_cpu_time().saturating_sub(t0);
    let ns = cpu.as_nanos() as f64 / (f64::from(vectors) * frames.len() as f64);
    assert_eq!(live, vectors as usize * frames.len(), "frames dropped");
    ns
}

/// The in-process part of the classifier bench (see the module documentation).
fn graph_bench(rounds: usize) {
    let all = Selector::default();
    let misses: Vec<Selector> = (0..15u8)
        .map(|i| Selector {
            src: Some(Cidr::parse(&format!("10.99.{i}.0/24")).unwrap()),
            ..all
        })
        .collect();
    let port = |p: u16| Selector {
        dport: Some(PortRange { lo: p, hi: p }),
        ..all
    };
    // Name, selectors (`None`: the chain form), NAT, index of the case it is compared to.
    let cases: Vec<(&str, Option<Vec<Selector>>, bool, usize)> = vec![
        ("chain", None, false, 0),
        ("services-1", Some(vec![all]), false, 0),
        (
            "services-16",
            Some(misses.iter().copied().chain([all]).collect()),
            false,
            0,
        ),
        (
            "2-services-mixed",
            Some(vec![port(4001), port(4002)]),
            false,
            0,
        ),
        ("chain+nat", None, true, 4),
        ("services-1+nat", Some(vec![all]), true, 4),
    ];
    let frames = bench_frames();
    let mut v = PacketVector::new(256, PacketBuf::MTU_CAPACITY);
    let mut graphs: Vec<Graph> = cases
        .iter()
        .map(|c| bench_graph(c.1.clone(), c.2))
        .collect();
    // The replies (after the NAT made its mappings and the classifier its flows), then a
    // warm-up of both directions.
    let replies: Vec<Vec<Vec<u8>>> = graphs
        .iter_mut()
        .map(|g| bench_replies(g, &mut v, &frames))
        .collect();
    for (g, back) in graphs.iter_mut().zip(&replies) {
        graph_ns(g, &mut v, &frames, Direction::Forward, 200, None);
        graph_ns(g, &mut v, back, Direction::Reverse, 200, None);
    }
    let mut ns = vec![[Vec::new(), Vec::new()]; cases.len()];
    for round in 0..rounds {
        for k in 0..cases.len() {
            let i = if round % 2 == 0 {
                k
            } else {
                cases.len() - 1 - k
            };
            ns[i][0].push(graph_ns(
                &mut graphs[i],
                &mut v,
                &frames,
                Direction::Forward,
                4000,
                None,
            ));
            ns[i][1].push(graph_ns(
                &mut graphs[i],
                &mut v,
                &replies[i],
                Direction::Reverse,
                4000,
                None,
            ));
        }
    }
    let median = |x: &[f64]| {
        let mut x = x.to_vec();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    println!(
        "in process: CPU ns/packet, median of {rounds} rounds × 1,024,000 packets; ratio and +ns \
         (median of the per-round differences) against the chain form with the same chain"
    );
    println!("case               forward  ratio     +ns    reverse  ratio     +ns");
    for ((name, _, _, base), r) in cases.iter().zip(&ns) {
        let cell = |d: usize| {
            let (m, b) = (median(&r[d]), median(&ns[*base][d]));
            let diffs: Vec<f64> = r[d].iter().zip(&ns[*base][d]).map(|(x, y)| x - y).collect();
            format!("{m:>7.1}  {:>5.3}  {:>+6.1}", m / b, median(&diffs))
        };
        println!("{name:<18} {}    {}", cell(0), cell(1));
    }
}

/// `rounds` floods of 256 flows through each of `cases`, the case order reversed every
/// other round: each case's [`flood_through`] results.
fn interleaved(t: &Topo, cases: &[RunConfig], secs: u64, rounds: usize) -> Vec<Vec<[f64; 4]>> {
    let mut results: Vec<Vec<[f64; 4]>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for i in order {
            results[i].push(flood_through(t, &cases[i], secs, 256));
        }
    }
    results
}

/// The median of field `k` of `v`.
fn median(v: &[[f64; 4]], k: usize) -> f64 {
    let mut x: Vec<f64> = v.iter().map(|r| r[k]).collect();
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

/// The classifier's cost: see the module documentation.
fn classifier_bench(t: &Topo, secs: u64, rounds: usize) {
    graph_bench(rounds);
    let base = |name: &str, what: &str| config_with(t, name, "busy", 256, what);
    let misses: String = (0..15)
        .map(|i| format!("  - {{id: miss{i}, selector: {{src: 10.99.{i}.0/24, proto: udp}}}}\n"))
        .collect();
    let cases = [
        base("chain", "chain: []\n"),
        base("services-1", "services:\n  - {id: all}\n"),
        base(
            "services-16",
            &format!("services:\n{misses}  - {{id: all}}\n"),
        ),
    ];
    let results = interleaved(t, &cases, secs, rounds);
    print_ratios(&cases, &results, "   classify cyc/pkt", |r| {
        format!("   {:>16.1}", median(r, 2))
    });
}

/// The floods' medians per case, packets/s and CPU ns per packet with their ratios to
/// the first case, and what `extra` adds (its column named by `head`).
fn print_ratios(
    cases: &[RunConfig],
    results: &[Vec<[f64; 4]>],
    head: &str,
    extra: impl Fn(&[[f64; 4]]) -> String,
) {
    let (pps0, ns0) = (median(&results[0], 0), median(&results[0], 1));
    let n = results[0].len();
    println!("case           Mpps   ratio   cpu ns/pkt   ratio{head}   (medians of {n})");
    for (cfg, r) in cases.iter().zip(results) {
        let (pps, ns) = (median(r, 0), median(r, 1));
        println!(
            "{:<12} {:>6.3}  {:>6.3}   {:>10.1}  {:>6.3}{}",
            cfg.name,
            pps / 1e6,
            pps / pps0,
            ns,
            ns / ns0,
            extra(r)
        );
    }
}

/// The latency measurement's cost: see the module documentation.
fn latency_bench(t: &Topo, secs: u64, rounds: usize) {
    let frames = bench_frames();
    let mut v = PacketVector::new(256, PacketBuf::MTU_CAPACITY);
    let mut g = bench_graph(None, false);
    let mut window = LatencyWindow::new(0);
    graph_ns(&mut g, &mut v, &frames, Direction::Forward, 200, None);
    let mut ns = [Vec::new(), Vec::new()];
    for round in 0..rounds * 4 {
        for k in 0..2 {
            let on = (k + round) % 2 == 1;
            let l = on.then_some(&mut window);
            ns[usize::from(on)].push(graph_ns(
                &mut g,
                &mut v,
                &frames,
                Direction::Forward,
                4000,
                l,
            ));
        }
    }
    let [off, on] = ns.map(|mut x| {
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    });
    let p99 = window.stats(0).map_or(0.0, |s| s.p99_us);
    println!(
        "in process, chain [], 256-frame vectors (medians of {}):",
        rounds * 4
    );
    println!("latency-off  {off:>8.2} ns/pkt");
    println!(
        "latency-on   {on:>8.2} ns/pkt   ratio {:.3}   (+{:.2} ns/pkt; recorded p99 {p99:.0} µs)",
        on / off,
        on - off
    );
    println!("64-byte flood through a busy worker:");
    let cases = [
        config_with(t, "latency-off", "busy", 256, "latency: false\n"),
        config_with(t, "latency-on", "busy", 256, ""),
    ];
    let results = interleaved(t, &cases, secs, rounds);
    print_ratios(&cases, &results, "", |_| String::new());
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let t = Topo::new();
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    match std::env::args().nth(1).as_deref() {
        Some("services") => return classifier_bench(&t, arg(2, 5), arg(3, 3) as usize),
        Some("latency") => return latency_bench(&t, arg(2, 5), arg(3, 5) as usize),
        _ => {}
    }
    t.forward(true);
    let kernel = iperf_tcp(&t, secs);
    println!("tcp kernel-forward          {kernel:.2} Gbit/s");
    t.forward(false);
    let mut tcp = Vec::new();
    for poll in ["adaptive", "busy"] {
        let dp = Dataplane::start(&config(&t, poll, 256), builder()).unwrap();
        let g = iperf_tcp(&t, secs);
        let st = dp.stop().unwrap();
        println!(
            "tcp nfx-forward {poll:<9}   {g:.2} Gbit/s  ({:.0} % of kernel; worker cpu {:.0} %, mean vector {:.1}, tx_error {})",
            100.0 * g / kernel,
            st.workers[0].cpu_pct,
            st.workers[0].mean_vector,
            st.node("output").map_or(0, |n| n.drops["tx_error"])
        );
        tcp.push(g);
    }
    println!("adaptive / busy TCP         {:.2}", tcp[0] / tcp[1]);
    let (v, _) = udp_pps(&t, 256, secs);
    let (s, _) = udp_pps(&t, 1, secs);
    println!("udp64 nfx vector            {:.3} Mpps", v / 1e6);
    println!("udp64 nfx scalar            {:.3} Mpps", s / 1e6);
    println!("vector / scalar             {:.2}", v / s);
    let dp = Dataplane::start(&config(&t, "adaptive", 256), builder()).unwrap();
    let ctl = dp.controller();
    std::thread::sleep(Duration::from_millis(1500));
    let a = ctl.stats().unwrap();
    std::thread::sleep(Duration::from_secs(secs));
    let b = ctl.stats().unwrap();
    let idle = 100.0 * (b.workers[0].cpu_s - a.workers[0].cpu_s) / (b.uptime_s - a.uptime_s);
    println!("adaptive idle cpu           {idle:.2} % of a core");
    dp.stop().unwrap();
}
