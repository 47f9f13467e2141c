//! End to end through real namespaces made by this test: `a — m — b`, where `m` has
//! ip_forward=0 and runs an nfx worker between its two veths. UDP datagrams and a TCP
//! connection pass only while nfx runs (the kernel of `m` does not forward them).

use nfx_dataplane::{vnf_builder, Dataplane, NodeBuilder, RunConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

/// The three namespaces; deleted on drop, also when an assertion fails.
struct Topo {
    a: String,
    m: String,
    b: String,
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Topo {
    fn new(tag: &str, net: u8) -> Self {
        let pid = std::process::id();
        let t = Topo {
            a: format!("nfxdp-{tag}-{pid}-a"),
            m: format!("nfxdp-{tag}-{pid}-m"),
            b: format!("nfxdp-{tag}-{pid}-b"),
        };
        let (a, m, b) = (t.a.as_str(), t.m.as_str(), t.b.as_str());
        for ns in [a, m, b] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        sh(&[
            "ip",
            "-n",
            a,
            "link",
            "add",
            "veth0",
            "address",
            "02:00:00:01:00:01",
            "type",
            "veth",
            "peer",
            "name",
            "ma",
            "netns",
            m,
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "link",
            "add",
            "veth0",
            "address",
            "02:00:00:01:00:02",
            "type",
            "veth",
            "peer",
            "name",
            "mb",
            "netns",
            m,
        ]);
        let a_ip = format!("10.{net}.1.1/24");
        let ma_ip = format!("10.{net}.1.2/24");
        let mb_ip = format!("10.{net}.2.1/24");
        let b_ip = format!("10.{net}.2.2/24");
        sh(&["ip", "-n", a, "addr", "add", &a_ip, "dev", "veth0"]);
        sh(&["ip", "-n", m, "addr", "add", &ma_ip, "dev", "ma"]);
        sh(&["ip", "-n", m, "addr", "add", &mb_ip, "dev", "mb"]);
        sh(&["ip", "-n", b, "addr", "add", &b_ip, "dev", "veth0"]);
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
            &format!("10.{net}.1.2"),
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.2.1"),
        ]);
        sh(&[
            "ip",
            "netns",
            "exec",
            m,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=0",
        ]);
        t
    }

    fn mac(ns: &str, dev: &str) -> String {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", dev])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let i = text.find("link/ether ").expect("ether line") + 11;
        text[i..i + 17].to_string()
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in [&self.a, &self.m, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `f` on a new thread inside namespace `ns`.
fn within<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns).unwrap();
        f()
    })
}

/// Sends `n` datagrams from `a` and counts how many `b` receives within `wait`; fails
/// if they arrive out of order or twice.
fn udp_through(t: &Topo, net: u8, n: usize, wait: Duration) -> usize {
    let dst: SocketAddr = format!("10.{net}.2.2:5000").parse().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let rx = within(&t.b, move || {
        let s = UdpSocket::bind(dst).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got: Vec<usize> = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + wait;
        while got.len() < n && Instant::now() < deadline {
            if let Ok(k) = s.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..k]);
                got.push(text.trim_start_matches("datagram ").parse().unwrap());
            }
        }
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "datagrams reordered or duplicated: {got:?}"
        );
        got.len()
    });
    ready.recv().unwrap();
    within(&t.a, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..n {
            let _ = s.send_to(format!("datagram {i}").as_bytes(), dst);
            // Paced so that b's default socket buffer (~270 small datagrams) never
            // overflows when the fast path delivers at the sender's speed.
            if i % 64 == 63 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .join()
    .unwrap();
    rx.join().unwrap()
}

/// Sends `len` bytes over TCP from `a` to `b` and returns what `b` echoed back as its count.
fn tcp_through(t: &Topo, net: u8, len: usize) -> u64 {
    let addr: SocketAddr = format!("10.{net}.2.2:5001").parse().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let server = within(&t.b, move || {
        let l = TcpListener::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        l.set_nonblocking(false).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut total = 0u64;
        let mut buf = vec![0u8; 65536];
        loop {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => total += k as u64,
            }
        }
        let _ = c.write_all(&total.to_be_bytes());
        total
    });
    ready.recv().unwrap();
    let client = within(&t.a, move || {
        let mut c =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect through nfx");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let chunk = vec![0x5au8; 65536];
        let mut sent = 0;
        while sent < len {
            let k = (len - sent).min(chunk.len());
            c.write_all(&chunk[..k]).unwrap();
            sent += k;
        }
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut echo = [0u8; 8];
        c.read_exact(&mut echo).unwrap();
        u64::from_be_bytes(echo)
    });
    let echoed = client.join().unwrap();
    assert_eq!(server.join().unwrap(), echoed);
    echoed
}

fn config(t: &Topo, net: u8, chain: &str) -> RunConfig {
    let text = format!(
        "name: e2e-{net}\nnetns: {}\nports:\n  inside: {{iface: ma, peer_mac: '{}'}}\n  outside: {{iface: mb, peer_mac: '{}'}}\nvector: 256\npoll: adaptive\nchain: {chain}\n",
        t.m,
        Topo::mac(&t.a, "veth0"),
        Topo::mac(&t.b, "veth0"),
    );
    RunConfig::parse(&text, "e2e.yaml").unwrap()
}

fn builder() -> NodeBuilder {
    vnf_builder(std::path::Path::new("."))
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn udp_and_tcp_pass_only_through_nfx() {
    let net = 251;
    let t = Topo::new("fwd", net);
    assert_eq!(
        udp_through(&t, net, 20, Duration::from_millis(300)),
        0,
        "the kernel of m forwards by itself"
    );

    let dp = Dataplane::start(&config(&t, net, "[]"), builder()).unwrap();
    assert_eq!(
        udp_through(&t, net, 200, Duration::from_secs(5)),
        200,
        "UDP datagrams lost through nfx"
    );
    let bytes = 8 << 20;
    assert_eq!(tcp_through(&t, net, bytes), bytes as u64);
    let st = dp.stop().unwrap();
    let parse = st.node("parse").unwrap();
    assert!(parse.packets >= 200, "{parse:?}");
    assert!(
        st.ports[1].tx_bytes >= bytes as u64,
        "outside port sent {} bytes",
        st.ports[1].tx_bytes
    );
    assert!(
        st.ports[0].tx_packets > 0,
        "no reverse traffic (TCP ACKs) went back inside"
    );
    assert_eq!(st.node("output").unwrap().drops["tx_error"], 0);

    assert_eq!(
        udp_through(&t, net, 20, Duration::from_millis(300)),
        0,
        "traffic still passes after nfx stopped"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn chain_with_firewall_drops_denied_udp_and_counts_it() {
    let net = 252;
    let t = Topo::new("acl", net);
    let chain = "[{firewall: {default: allow, rules: [{action: deny, proto: udp, dport: 5000}]}}]";
    let dp = Dataplane::start(&config(&t, net, chain), builder()).unwrap();
    assert_eq!(
        udp_through(&t, net, 30, Duration::from_millis(500)),
        0,
        "denied datagrams arrived"
    );
    let bytes = 1 << 20;
    assert_eq!(
        tcp_through(&t, net, bytes),
        bytes as u64,
        "allowed TCP did not pass"
    );
    let r = dp
        .controller()
        .reconfigure(&[serde_json::json!({"firewall": {"default": "allow"}})])
        .unwrap();
    assert_eq!(r.names, ["firewall"]);
    assert_eq!(r.built.len(), 1, "the changed firewall is rebuilt");
    assert_eq!(r.built[0].name, "firewall");
    assert_eq!(
        udp_through(&t, net, 30, Duration::from_secs(5)),
        30,
        "rule change did not take effect"
    );
    let st = dp.stop().unwrap();
    assert_eq!(st.node("firewall").unwrap().drops["acl_deny"], 30);
}

/// Opens `n` TCP connections from `a` to `b` at once, `len` bytes each; returns, per
/// connection, the bytes `b` counted and the source address `b` saw.
fn tcp_parallel(t: &Topo, net: u8, n: usize, len: usize) -> Vec<(u64, std::net::IpAddr)> {
    let addr: SocketAddr = format!("10.{net}.2.2:5002").parse().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let server = within(&t.b, move || {
        let l = TcpListener::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        let conns: Vec<_> = (0..n)
            .map(|_| {
                let (mut c, peer) = l.accept().unwrap();
                std::thread::spawn(move || {
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut total = 0u64;
                    let mut buf = vec![0u8; 65536];
                    while let Ok(k @ 1..) = c.read(&mut buf) {
                        total += k as u64;
                    }
                    let _ = c.write_all(&total.to_be_bytes());
                    (total, peer.ip())
                })
            })
            .collect();
        conns
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    ready.recv().unwrap();
    let clients: Vec<_> = (0..n)
        .map(|_| {
            within(&t.a, move || {
                let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                    .expect("connect through nfx");
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
                let chunk = vec![0x5au8; len];
                c.write_all(&chunk).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
                let mut echo = [0u8; 8];
                c.read_exact(&mut echo).unwrap();
                u64::from_be_bytes(echo)
            })
        })
        .collect();
    let echoed: Vec<u64> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    let seen = server.join().unwrap();
    let mut a: Vec<u64> = seen.iter().map(|s| s.0).collect();
    let mut b = echoed;
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "what b counted and what a heard back differ");
    seen
}

/// Every connection of `seen` delivered `len` bytes from the NAT's address 10.net.3.100.
fn assert_whole_and_translated(seen: &[(u64, std::net::IpAddr)], len: usize, net: u8) {
    for (bytes, peer) in seen {
        assert_eq!(*bytes, len as u64);
        assert_eq!(
            peer.to_string(),
            format!("10.{net}.3.100"),
            "not translated"
        );
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn two_workers_share_tcp_through_firewall_and_nat() {
    let net = 253;
    let t = Topo::new("2w", net);
    let chain = format!(
        "[{{firewall: {{default: deny, rules: [{{action: allow, proto: tcp, dport: 5002}}]}}}}, \
         {{nat: {{snat: {{public_ip: 10.{net}.3.100}}}}}}]"
    );
    let mut cfg = config(&t, net, &chain);
    cfg.workers = 2;
    let dp = Dataplane::start(&cfg, builder()).unwrap();
    // 16 connections: the chance that the flow hash puts all on one worker is 2^-15.
    let len = 1 << 20;
    let seen = tcp_parallel(&t, net, 16, len);
    assert_eq!(seen.len(), 16);
    assert_whole_and_translated(&seen, len, net);
    let live = dp.controller().stats().unwrap();
    assert_eq!(live.workers.len(), 2);
    let st = dp.stop().unwrap();
    assert_eq!(st.workers.iter().map(|w| w.id).collect::<Vec<_>>(), [0, 1]);
    for w in &st.workers {
        assert!(
            w.rx_packets >= 20,
            "worker {} saw {} frames",
            w.id,
            w.rx_packets
        );
    }
    let nat = st.node("nat").unwrap();
    assert_eq!(
        nat.drops["nat_no_mapping"], 0,
        "a reply met the wrong worker"
    );
    assert_eq!(nat.stats["snat_created"], 16);
    assert_eq!(st.node("firewall").unwrap().drops["acl_deny"], 0);
}

#[test]
fn port_forwards_are_refused_with_two_workers() {
    let text = "name: x\nports:\n  inside: {iface: ia, peer_mac: '02:00:00:00:00:01'}\n  outside: {iface: ib, peer_mac: '02:00:00:00:00:02'}\nworkers: 2\nchain:\n  - nat: {dnat: [{proto: tcp, public_ip: 10.0.0.1, public_port: 80, to_ip: 10.1.0.1, to_port: 80}]}\n";
    let cfg = RunConfig::parse(text, "2w.yaml").unwrap();
    let e = Dataplane::start(&cfg, builder()).err().unwrap().to_string();
    assert!(
        e.contains("2w.yaml") && e.contains("workers") && e.contains("dnat"),
        "{e}"
    );
}

/// IPv4 packets the kernel of namespace `ns` received so far (`Ip: InReceives`).
fn kernel_ip_in(ns: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
    let (keys, values) = (ip.next().unwrap(), ip.next().unwrap());
    let at = keys
        .split_whitespace()
        .position(|k| k == "InReceives")
        .unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// The kernel-stack isolation tables (netdev family) of namespace `ns`.
fn isolation_tables(ns: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "tables", "netdev"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("table netdev "))
        .filter(|t| t.starts_with(nfx_io::isolate::TABLE_PREFIX))
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn kernel_of_m_sees_no_forwarded_frame_unless_kept() {
    let net = 254;
    let t = Topo::new("iso", net);
    // A table left by a process that no longer exists (pid above any pid_max).
    let stale = "nfx_isolate_1073741823_1_0";
    sh(&[
        "ip",
        "netns",
        "exec",
        &t.m,
        "nft",
        &format!("add table netdev {stale}"),
    ]);
    assert_eq!(isolation_tables(&t.m), vec![stale.to_string()]);

    let dp = Dataplane::start(&config(&t, net, "[]"), builder()).unwrap();
    let tables = isolation_tables(&t.m);
    assert_eq!(
        tables.len(),
        2,
        "one table per port, stale one gone: {tables:?}"
    );
    assert!(!tables.iter().any(|x| x == stale), "{tables:?}");
    let before = kernel_ip_in(&t.m);
    assert_eq!(udp_through(&t, net, 200, Duration::from_secs(5)), 200);
    assert_eq!(tcp_through(&t, net, 1 << 20), 1 << 20);
    assert_eq!(
        kernel_ip_in(&t.m) - before,
        0,
        "the kernel of m received frames nfx forwarded"
    );
    dp.stop().unwrap();
    assert!(isolation_tables(&t.m).is_empty(), "tables left after stop");

    let mut cfg = config(&t, net, "[]");
    cfg.kernel_stack = nfx_dataplane::config::KernelStack::Keep;
    let dp = Dataplane::start(&cfg, builder()).unwrap();
    assert!(isolation_tables(&t.m).is_empty());
    let before = kernel_ip_in(&t.m);
    assert_eq!(udp_through(&t, net, 200, Duration::from_secs(5)), 200);
    let seen = kernel_ip_in(&t.m) - before;
    assert!(
        seen >= 200,
        "with kernel_stack: keep m saw only {seen} of 200"
    );
    dp.stop().unwrap();
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn fast_path_carries_settled_flows_and_the_chain_stays_exact() {
    let net = 248;
    let t = Topo::new("fp", net);
    let chain = format!(
        "[{{firewall: {{default: deny, rules: [{{action: allow, proto: tcp, dport: 5002}}, {{action: allow, proto: udp, dport: 5000}}]}}}}, \
         {{nat: {{snat: {{public_ip: 10.{net}.3.100}}}}}}, {{elephant: {{min_bytes: 8000000, min_rate_bps: 0}}}}]"
    );
    let mut cfg = config(&t, net, &chain);
    cfg.fast_path = Some(nfx_dataplane::config::FastPathConfig { capacity: 64 });
    let dp = Dataplane::start(&cfg, builder()).unwrap();
    let len = 32 << 20;
    let seen = tcp_parallel(&t, net, 4, len);
    assert_whole_and_translated(&seen, len, net);
    // A UDP flow is admitted, moves to the fast path, and a rule change takes it back.
    assert_eq!(udp_through(&t, net, 300, Duration::from_secs(5)), 300);
    std::thread::sleep(Duration::from_millis(300));
    let live = dp.controller().stats().unwrap();
    let fp = live.fast_path.clone().expect("fast_path stats");
    assert!(fp.installed >= 8, "{fp:?}");
    assert!(fp.armed >= 4, "{fp:?}");
    assert!(
        fp.removed_closed >= 8,
        "FIN/RST must retire TCP entries: {fp:?}"
    );
    assert!(
        fp.bytes > 4 * len as u64 / 2,
        "the fast path carried only {} of {} bytes: {fp:?}",
        fp.bytes,
        4 * len
    );
    let fw = live.node("firewall").unwrap();
    assert!(
        fw.packets > fp.packets,
        "replays must be counted by the firewall: {} vs {}",
        fw.packets,
        fp.packets
    );
    assert_eq!(live.events["elephant"], 4, "{:?}", live.events);
    dp.controller()
        .reconfigure(&[
            serde_json::json!({"firewall": {"default": "deny"}}),
            serde_json::json!({"nat": {"snat": {"public_ip": format!("10.{net}.3.100")}}}),
        ])
        .unwrap();
    let fp = dp.controller().stats().unwrap().fast_path.unwrap();
    assert_eq!(
        fp.entries, 0,
        "a reconfiguration must take every flow back: {fp:?}"
    );
    assert_eq!(udp_through(&t, net, 30, Duration::from_millis(500)), 0);
    let st = dp.stop().unwrap();
    assert!(st.node("firewall").unwrap().drops["acl_deny"] >= 30);
    let nat = st.node("nat").unwrap();
    assert_eq!(nat.drops["nat_no_mapping"], 0);
    assert_eq!(st.node("output").unwrap().drops["tx_error"], 0);
}

/// Sends `n` numbered datagrams from `src` (an address of namespace `a`) to
/// 10.net.2.2:`port` in namespace `b`, paced; returns, in arrival order, the numbers `b`
/// received within `wait` and the source address it saw on each.
fn udp_from(
    (a, b): (&str, &str),
    net: u8,
    src: &str,
    port: u16,
    n: usize,
    wait: Duration,
) -> Vec<(usize, std::net::IpAddr)> {
    let dst: SocketAddr = format!("10.{net}.2.2:{port}").parse().unwrap();
    let src: SocketAddr = format!("{src}:0").parse().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let rx = within(b, move || {
        let s = UdpSocket::bind(dst).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + wait;
        while got.len() < n && Instant::now() < deadline {
            if let Ok((k, peer)) = s.recv_from(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..k]);
                got.push((text.parse().unwrap(), peer.ip()));
            }
        }
        got
    });
    ready.recv().unwrap();
    within(a, move || {
        let s = UdpSocket::bind(src).unwrap();
        for i in 0..n {
            let _ = s.send_to(i.to_string().as_bytes(), dst);
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .join()
    .unwrap();
    rx.join().unwrap()
}

/// Runs `iperf3 -J` bounded in time inside `ns`; returns whether it succeeded (exit
/// status and no `error` in its report) and the report.
fn iperf3(ns: &str, args: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new("timeout")
        .args(["20", "ip", "netns", "exec", ns, "iperf3", "-J"])
        .args(args)
        .output()
        .expect("iperf3 (package iperf3)");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    // iperf3 3.12 with -J reports some failures (no connection) with status 0.
    let ok = out.status.success() && json.get("error").is_none();
    (ok, json)
}

/// The services form of the run config, with service `c` (from 10.net.5.0/24, through
/// B's NAT) listed first when `with_c`.
fn services_config(net: u8, with_c: bool) -> String {
    let c = if with_c {
        format!("  - {{id: c, selector: {{src: 10.{net}.5.0/24}}, chain: [nat-b]}}\n")
    } else {
        String::new()
    };
    format!(
        "services:\n{c}\
         \x20 - {{id: a, selector: {{src: 10.{net}.1.0/24}}, chain: [fw-a, nat-a]}}\n\
         \x20 - {{id: b, selector: {{src: 10.{net}.4.0/24}}, chain: [nat-b]}}\n\
         instances:\n\
         \x20 fw-a: {{function: firewall, config: {{default: allow, rules: [{{action: deny, proto: tcp, dport: 5201}}]}}}}\n\
         \x20 nat-a: {{function: nat, config: {{snat: {{public_ip: 10.{net}.3.100}}}}}}\n\
         \x20 nat-b: {{function: nat, config: {{snat: {{public_ip: 10.{net}.3.200}}}}}}\n"
    )
}

fn services_of(text: &str) -> nfx_dataplane::ServiceSet {
    serde_yaml_ng::from_str(text).unwrap()
}

/// One worker, two services on two source subnets of `a`: A (10.net.1.0/24) =
/// firewall denying TCP/5201 → NAT to 10.net.3.100, B (10.net.4.0/24) = NAT to
/// 10.net.3.200. A's deny leaves B's iperf3 untouched, each is translated to its own
/// address, a third subnet is nobody's (`no_service`), and adding a service while B's
/// traffic flows loses none of it.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn two_services_on_one_worker_stay_apart() {
    let net = 247;
    let t = Topo::new("svc", net);
    for subnet in [4, 5] {
        sh(&[
            "ip",
            "-n",
            &t.a,
            "addr",
            "add",
            &format!("10.{net}.{subnet}.1/24"),
            "dev",
            "veth0",
        ]);
    }
    let text = format!(
        "name: e2e-svc\nnetns: {}\nports:\n  inside: {{iface: ma, peer_mac: '{}'}}\n  outside: {{iface: mb, peer_mac: '{}'}}\npoll: adaptive\n{}",
        t.m,
        Topo::mac(&t.a, "veth0"),
        Topo::mac(&t.b, "veth0"),
        services_config(net, false)
    );
    let cfg = RunConfig::parse(&text, "svc.yaml").unwrap();
    let dp = Dataplane::start(&cfg, builder()).unwrap();
    let (a_ip, b_ip, c_ip) = (
        format!("10.{net}.1.1"),
        format!("10.{net}.4.1"),
        format!("10.{net}.5.1"),
    );
    let server = format!("10.{net}.2.2");

    // A's deny: its iperf3 cannot even connect.
    let (ok, refused) = iperf3(
        &t.a,
        &[
            "-c",
            &server,
            "-B",
            &a_ip,
            "-t",
            "1",
            "--connect-timeout",
            "1000",
        ],
    );
    assert!(!ok, "service a's firewall let TCP/5201 through: {refused}");
    // B's iperf3 to the same port runs, translated to B's address.
    let srv = {
        let ns = t.b.clone();
        std::thread::spawn(move || iperf3(&ns, &["-s", "-1"]))
    };
    std::thread::sleep(Duration::from_millis(300));
    let (ok, client) = iperf3(&t.a, &["-c", &server, "-B", &b_ip, "-t", "2"]);
    assert!(ok, "service b's iperf3 failed: {client}");
    let (_, served) = srv.join().unwrap();
    assert_eq!(
        served["start"]["connected"][0]["remote_host"],
        format!("10.{net}.3.200"),
        "{served}"
    );
    let received = client["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(received > 1 << 20, "service b moved only {received} bytes");

    // UDP probes: each service's datagrams arrive from its NAT; nobody's are dropped.
    let ends = (t.a.as_str(), t.b.as_str());
    let a = udp_from(ends, net, &a_ip, 5000, 50, Duration::from_secs(5));
    assert_eq!(a.len(), 50);
    assert!(a
        .iter()
        .all(|(_, p)| p.to_string() == format!("10.{net}.3.100")));
    let b = udp_from(ends, net, &b_ip, 5000, 50, Duration::from_secs(5));
    assert_eq!(b.len(), 50);
    assert!(b
        .iter()
        .all(|(_, p)| p.to_string() == format!("10.{net}.3.200")));
    let nobody = udp_from(ends, net, &c_ip, 5000, 40, Duration::from_millis(500));
    assert!(nobody.is_empty(), "traffic of no service passed");
    let st = dp.controller().stats().unwrap();
    assert!(st.node("classify").unwrap().drops["no_service"] >= 40);
    let sa = st.service("a").unwrap();
    assert!(sa.drops["acl_deny"] >= 1, "{sa:?}");
    let sb = st.service("b").unwrap();
    assert_eq!(sb.drops.values().sum::<u64>(), 0, "{sb:?}");
    assert!(
        sb.forward.rx_bytes > 1 << 20 && sb.reverse.rx_packets > 0,
        "{sb:?}"
    );
    assert_eq!(
        st.node("fw-a").unwrap().packets,
        sa.forward.rx_packets + sa.reverse.rx_packets
    );

    // While B's datagrams flow, then while its iperf3 runs, service c is added in
    // front of the list and removed again, over and over.
    let ctl = dp.controller();
    let mut swaps = 0;
    let mut swap_until = |done: &dyn Fn() -> bool| {
        while !done() {
            let r = ctl
                .reconfigure_services(&services_of(&services_config(net, swaps % 2 == 0)))
                .unwrap();
            assert_eq!(r.carried, 0, "no instance is rebuilt");
            swaps += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let stream = {
        let (a, b, src) = (t.a.clone(), t.b.clone(), b_ip.clone());
        std::thread::spawn(move || {
            udp_from((&a, &b), net, &src, 5001, 8000, Duration::from_secs(10))
        })
    };
    swap_until(&|| stream.is_finished());
    let got = stream.join().unwrap();
    assert_eq!(got.len(), 8000, "service b lost datagrams across the swaps");
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "reordered");
    let srv = {
        let ns = t.b.clone();
        std::thread::spawn(move || iperf3(&ns, &["-s", "-1"]))
    };
    std::thread::sleep(Duration::from_millis(300));
    let tcp = {
        let (ns, server, src) = (t.a.clone(), server.clone(), b_ip.clone());
        std::thread::spawn(move || iperf3(&ns, &["-c", &server, "-B", &src, "-t", "2"]))
    };
    swap_until(&|| tcp.is_finished());
    let (ok, client) = tcp.join().unwrap();
    assert!(ok, "service b's TCP broke across the swaps: {client}");
    srv.join().unwrap();
    assert!(swaps >= 10, "only {swaps} swaps");
    // With c installed, its subnet is served, through B's NAT.
    ctl.reconfigure_services(&services_of(&services_config(net, true)))
        .unwrap();
    let c = udp_from(ends, net, &c_ip, 5000, 20, Duration::from_secs(5));
    assert_eq!(c.len(), 20);
    assert!(c
        .iter()
        .all(|(_, p)| p.to_string() == format!("10.{net}.3.200")));
    let st = dp.stop().unwrap();
    assert_eq!(st.node("nat-b").unwrap().drops["nat_no_mapping"], 0);
    assert_eq!(st.service("c").unwrap().forward.tx_packets, 20);
}

/// Two workers on the same interfaces without a shared fanout group would each forward
/// every frame (one copy un-NATed, unfiltered): the second is refused at start, naming
/// the interface and the process that serves it, and the first keeps forwarding alone.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_second_worker_on_the_same_interfaces_is_refused() {
    let net = 246;
    let t = Topo::new("dup", net);
    let first = Dataplane::start(&config(&t, net, "[]"), builder()).unwrap();
    let mut cfg = config(&t, net, "[]");
    cfg.name = "e2e-dup-2".into();
    let e = Dataplane::start(&cfg, builder()).err().unwrap().to_string();
    assert!(
        e.contains("ma")
            && e.contains("already served")
            && e.contains(&std::process::id().to_string()),
        "{e}"
    );
    // Each datagram arrives once (`udp_through` fails on a duplicate).
    assert_eq!(udp_through(&t, net, 100, Duration::from_secs(5)), 100);
    first.stop().unwrap();
    // Once the first is gone, the interfaces are free again.
    let again = Dataplane::start(&cfg, builder()).unwrap();
    assert_eq!(udp_through(&t, net, 20, Duration::from_secs(5)), 20);
    again.stop().unwrap();
}
