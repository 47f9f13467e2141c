//! Quick forwarding measurement for docs/dataplane.md, on namespaces it makes itself
//! (`a — m — b`, removed at exit): iperf3 TCP through the kernel of `m` vs through nfx
//! in `m` (adaptive and busy), 64-byte UDP packets/s forwarded by nfx in vector vs scalar
//! mode (a batched AF_PACKET generator in `a`), and the CPU of an idle adaptive worker.
//!
//! `cargo run --release -p nfx-dataplane --example fwd_bench [SECONDS]` (root, iperf3).

use nfx_dataplane::{build_chain_from, ChainBuilder, Dataplane, RunConfig};
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_packet::{Direction, Packet, PacketBuf};
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
    let text = format!(
        "name: bench\nnetns: {}\nports:\n  inside: {{iface: ma, peer_mac: '{}'}}\n  outside: {{iface: mb, peer_mac: '{}'}}\nvector: {vector}\npoll: {poll}\n",
        t.ns[1],
        t.mac(0, "veth0"),
        t.mac(2, "veth0")
    );
    RunConfig::parse(&text, "bench.yaml").unwrap()
}

fn builder() -> ChainBuilder {
    Arc::new(|specs: &[serde_json::Value], skip: usize| {
        build_chain_from(specs, skip, std::path::Path::new("."))
    })
}

/// 64-byte UDP frames from `a` towards an address `b` does not own (b's kernel drops them
/// cheaply in routing), as fast as batched sendmmsg goes, until `stop`.
fn udp_flood(t: &Topo, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let ns = t.ns[0].clone();
    let dst_mac = nfx_io::sys::parse_mac(&t.mac(1, "ma")).unwrap();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns).unwrap();
        let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
        let b = etherparse::PacketBuilder::ethernet2(port.mac(), dst_mac)
            .ipv4([10, NET, 1, 1], [10, NET, 2, 99], 64)
            .udp(4000, 4001);
        let mut frame = Vec::new();
        b.write(&mut frame, &[0u8; 18]).unwrap();
        let mut pkts: Vec<Packet> = (0..256)
            .map(|_| Packet::new(PacketBuf::from_frame(&frame), Direction::Forward))
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

fn udp_pps(t: &Topo, vector: usize, secs: u64) -> (f64, f64) {
    let dp = Dataplane::start(&config(t, "busy", vector), builder()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let gen = udp_flood(t, stop.clone());
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
    let pps = (s1.ports[1].tx_packets - s0.ports[1].tx_packets) as f64 / dt;
    eprintln!(
        "  vector {vector}: offered {offered} frames, mean vector {:.1}",
        st.workers[0].mean_vector
    );
    (pps, st.workers[0].mean_vector)
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let t = Topo::new();
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
