//! The table tier on real veth links: namespaces a — mid — b, mid's kernel forwarding
//! off, and a table-tier chain attached to mid's interfaces that forwards by itself
//! (tcx ingress, redirect). iperf3 runs through a firewall + NAT; a full table refuses
//! new flows with a counted reason and keeps carrying the existing ones; a NAT migrates
//! to a new chain under traffic without losing a datagram or changing a mapping.

mod common;

use common::{is_root, Namespaces};
use nfx_fastpath::table::testrun::Verdict;
use nfx_fastpath::table::{Placement, PortSpec, TableChain};
use nfx_vnf::NodeSpec;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MAC_A: &str = "02:00:00:00:0a:00";
const MAC_M0: &str = "02:00:00:00:0c:00";
const MAC_M1: &str = "02:00:00:00:0c:01";
const MAC_B: &str = "02:00:00:00:0b:00";
const PUBLIC: &str = "192.0.2.1";

fn mac(s: &str) -> [u8; 6] {
    nfx_io::sys::parse_mac(s).unwrap()
}

fn spec(yaml: &str) -> NodeSpec {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
    serde_json::from_value(v).unwrap()
}

/// a (10.93.1.1, fd93:1::1) — m0 | m1 — b (10.93.2.1, fd93:2::1); b reaches the NAT's
/// public address through mid.
fn line(tag: &str) -> Namespaces {
    let g = Namespaces::new("nfxtt", tag, &["a", "mid", "b"]);
    g.link(0, "a0", MAC_A, 1, "m0", MAC_M0);
    g.link(1, "m1", MAC_M1, 2, "b0", MAC_B);
    for (n, dev, v4, v6) in [
        (0, "a0", "10.93.1.1/24", "fd93:1::1/64"),
        (1, "m0", "10.93.1.2/24", "fd93:1::2/64"),
        (1, "m1", "10.93.2.2/24", "fd93:2::2/64"),
        (2, "b0", "10.93.2.1/24", "fd93:2::1/64"),
    ] {
        g.addr(n, dev, v4);
        g.ip(n, &["-6", "addr", "add", v6, "dev", dev, "nodad"]);
    }
    g.ip(0, &["route", "add", "default", "via", "10.93.1.2"]);
    g.ip(0, &["-6", "route", "add", "default", "via", "fd93:1::2"]);
    g.ip(
        2,
        &["route", "add", &format!("{PUBLIC}/32"), "via", "10.93.2.2"],
    );
    g.ip(
        2,
        &["-6", "route", "add", "fd93:1::/64", "via", "fd93:2::2"],
    );
    g
}

fn alone() -> Placement {
    Placement::Alone {
        inside: PortSpec {
            iface: "m0".into(),
            peer_mac: mac(MAC_A),
        },
        outside: PortSpec {
            iface: "m1".into(),
            peer_mac: mac(MAC_B),
        },
    }
}

/// Deploys `chain` and attaches it alone between mid's ports.
fn attach(g: &Namespaces, chain: &[(&str, &str)]) -> TableChain {
    let fns: Vec<(String, NodeSpec)> = chain
        .iter()
        .map(|(n, s)| (n.to_string(), spec(s)))
        .collect();
    g.within(1, move || {
        let mut c = TableChain::deploy(&fns, Path::new(".")).unwrap();
        c.attach(&alone()).unwrap();
        c
    })
}

/// `cmd` in namespace `ns`, killed after `limit`; its stdout.
fn run_in(ns: &str, cmd: &[&str], limit: Duration) -> String {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn firewall_and_nat_carry_iperf3_and_ipv6_passes_the_firewall() {
    assert!(is_root());
    let g = line("iperf");
    let chain = attach(
        &g,
        &[
            (
                "firewall",
                "firewall: {default: deny, max_flows: 1024, rules: [{action: allow, proto: tcp, dport: 5201}, {action: allow, proto: icmp}]}",
            ),
            ("nat", &format!("nat: {{snat: {{public_ip: {PUBLIC}}}, max_flows: 1024}}")),
        ],
    );
    let b = g.names[2].clone();
    let server = std::thread::spawn(move || {
        run_in(
            &b,
            &["iperf3", "-s", "-1", "-B", "10.93.2.1", "-J"],
            Duration::from_secs(20),
        )
    });
    std::thread::sleep(Duration::from_millis(400));
    let client = run_in(
        &g.names[0],
        &["iperf3", "-c", "10.93.2.1", "-t", "2", "-J"],
        Duration::from_secs(15),
    );
    let server = server.join().unwrap();
    let c: serde_json::Value = serde_json::from_str(&client).expect("iperf3 client JSON");
    let bps = c["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        bps > 50e6,
        "TCP through the table tier: {bps} bit/s\n{client}"
    );
    let s: serde_json::Value = serde_json::from_str(&server).expect("iperf3 server JSON");
    assert_eq!(
        s["start"]["connected"][0]["remote_host"], PUBLIC,
        "b sees the NAT's address"
    );
    // IPv6 crosses the firewall (ICMPv6 echo allowed) untranslated: the NAT is IPv4.
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &g.names[0],
            "ping",
            "-6",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "2",
            "fd93:2::1",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // UDP is not in the ACL.
    g.within(0, || {
        let s = UdpSocket::bind("10.93.1.1:0").unwrap();
        s.send_to(b"x", "10.93.2.1:9").unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let st = chain.stats().unwrap();
    let fw = &st.nodes[1];
    assert!(fw.packets > 1000, "{st:?}");
    assert_eq!(fw.drops["acl_deny"], 1, "{st:?}");
    assert!(
        st.functions[1].created >= 2,
        "iperf3's two connections: {st:?}"
    );
    assert!(st.nodes.iter().all(|n| n.drops["table_full"] == 0));
    assert!(
        st.nodes[0].to_kernel > 0,
        "ARP and neighbour discovery went to mid's kernel"
    );
}

/// A UDP socket in namespace `n` bound to `addr`, with a short read timeout.
fn socket_in(g: &Namespaces, n: usize, addr: &str) -> UdpSocket {
    let addr = addr.to_string();
    g.within(n, move || {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s
    })
}

fn drain(s: &UdpSocket) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = s.recv_from(&mut buf) {
        got.push((buf[..n].to_vec(), from));
    }
    got
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_full_table_refuses_new_flows_with_a_counted_reason_and_keeps_the_old_ones() {
    let g = line("full");
    let chain = attach(
        &g,
        &[("firewall", "firewall: {default: allow, max_flows: 3}")],
    );
    let rx = socket_in(&g, 2, "10.93.2.1:9000");
    let senders: Vec<UdpSocket> = (0..4)
        .map(|i| socket_in(&g, 0, &format!("10.93.1.1:{}", 4000 + i)))
        .collect();
    for (i, s) in senders.iter().enumerate().take(3) {
        s.send_to(format!("old {i}").as_bytes(), "10.93.2.1:9000")
            .unwrap();
    }
    assert_eq!(drain(&rx).len(), 3);
    for _ in 0..5 {
        senders[3].send_to(b"new", "10.93.2.1:9000").unwrap();
    }
    for (i, s) in senders.iter().enumerate().take(3) {
        s.send_to(format!("still {i}").as_bytes(), "10.93.2.1:9000")
            .unwrap();
    }
    let got = drain(&rx);
    let texts: Vec<String> = got
        .iter()
        .map(|(b, _)| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert_eq!(
        texts,
        ["still 0", "still 1", "still 2"],
        "the three tracked flows go on, the fourth does not"
    );
    let st = chain.stats().unwrap();
    assert_eq!(st.nodes[1].drops["table_full"], 5, "{st:?}");
    assert_eq!((st.functions[0].flows, st.functions[0].capacity), (3, 3));
}

/// Flows the migration test installs before its stream (through the program itself).
const INSTALLED: u32 = 20_000;

/// A UDP frame a → mid of installed flow `i`: 10.93.1.1:(1024 + i % 50000) → 10.77.x.y:53.
fn installed_flow(i: u32) -> Vec<u8> {
    let dst = [10, 77, (i / 250) as u8, (i % 250 + 1) as u8];
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(mac(MAC_A), mac(MAC_M0))
        .ipv4([10, 93, 1, 1], dst, 64)
        .udp(1024 + (i % 50_000) as u16, 53)
        .write(&mut v, b"flow")
        .unwrap();
    v
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_nat_migrates_under_traffic_without_a_lost_datagram_or_a_changed_mapping() {
    let g = line("migrate");
    let nat = format!(
        "nat: {{snat: {{public_ip: {PUBLIC}, port_range: [20000, 20100]}}, max_flows: 32768}}"
    );
    let fns = [
        ("firewall", "firewall: {default: allow, max_flows: 32768}"),
        ("nat", nat.as_str()),
    ];
    let mut old = attach(&g, &fns);
    // Fill the tables through the old chain's own program: a migration of many flows.
    let m0 = g.ifindex(1, "m0");
    for i in 0..INSTALLED {
        let run = old
            .run_frame(
                nfx_fastpath::table::raw::HOOK_INGRESS,
                m0,
                &installed_flow(i),
                0,
            )
            .unwrap();
        assert_eq!(run.verdict, Verdict::Redirect, "flow {i}");
    }
    // The new chain is programmed and installed ahead, not attached.
    let specs: Vec<(String, NodeSpec)> =
        fns.iter().map(|(n, s)| (n.to_string(), spec(s))).collect();
    let mut new = TableChain::deploy(&specs, Path::new(".")).unwrap();
    const N: u32 = 3000;
    let rx = socket_in(&g, 2, "10.93.2.1:9000");
    let echo = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        while let Ok((n, from)) = rx.recv_from(&mut buf) {
            got.push((u32::from_be_bytes(buf[..4].try_into().unwrap()), from));
            rx.send_to(&buf[..n], from).unwrap();
            if got.len() == N as usize {
                break;
            }
        }
        got
    });
    let tx = socket_in(&g, 0, "10.93.1.1:4000");
    let (third_tx, third) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        let mut echoed = 0;
        let mut buf = [0u8; 64];
        tx.set_nonblocking(true).unwrap();
        for i in 0..N {
            tx.send_to(&i.to_be_bytes(), "10.93.2.1:9000").unwrap();
            if i == N / 3 {
                third_tx.send(()).unwrap();
            }
            while tx.recv(&mut buf).is_ok() {
                echoed += 1;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        tx.set_nonblocking(false).unwrap();
        tx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        while echoed < N && tx.recv(&mut buf).is_ok() {
            echoed += 1;
        }
        echoed
    });
    third.recv().unwrap();
    let m = old.migrate_to(&mut new).unwrap();
    eprintln!(
        "migrated {} records ({} after the switch) in {:?} (copy {:?}, switch {:?}): {:.0} records/s",
        m.flows,
        m.after_switch,
        m.total,
        m.copy,
        m.switch,
        m.flows_per_s()
    );
    assert!(!old.is_attached() && new.is_attached());
    assert_eq!(
        m.flows,
        2 * (INSTALLED as usize + 1),
        "each flow's firewall state and NAT mapping: {m:?}"
    );
    assert_eq!(m.remapped, 0, "{m:?}");
    let echoed = sender.join().unwrap();
    let got = echo.join().unwrap();
    let seqs: Vec<u32> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        seqs,
        (0..N).collect::<Vec<_>>(),
        "every datagram arrived, in order"
    );
    let from: std::collections::BTreeSet<SocketAddr> = got.iter().map(|(_, f)| *f).collect();
    assert_eq!(from.len(), 1, "one mapping from start to end: {from:?}");
    assert_eq!(from.iter().next().unwrap().ip().to_string(), PUBLIC);
    assert_eq!(echoed, N, "every echo came back through the NAT");
    let (before, after) = (old.stats().unwrap(), new.stats().unwrap());
    let by_old = before.nodes[2].packets - u64::from(INSTALLED);
    let by_new = after.nodes[2].packets;
    assert!(
        by_old > 0 && by_new > 0 && by_old + by_new == 2 * u64::from(N),
        "each datagram and echo crossed one chain, both chains carried some: {before:?} {after:?}"
    );
    assert_eq!(
        after.functions[1].created, 0,
        "no mapping of its own: {after:?}"
    );
    assert_eq!(after.functions[1].flows, u64::from(INSTALLED) + 1);
    assert!(
        after
            .nodes
            .iter()
            .all(|n| n.drops.values().all(|&d| d == 0)),
        "{after:?}"
    );
}

/// One datagram a → b through the NAT: the source address b sees.
fn through(tx: &UdpSocket, rx: &UdpSocket, tag: &[u8]) -> Option<SocketAddr> {
    tx.send_to(tag, "10.93.2.1:9100").ok()?;
    let mut buf = [0u8; 64];
    let (n, from) = rx.recv_from(&mut buf).ok()?;
    (buf[..n] == *tag).then_some(from)
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_pinned_chain_outlives_its_owner_and_is_adopted_with_its_mappings() {
    assert!(is_root());
    let dir = Path::new("/sys/fs/bpf").join(format!("nfx-test-pin-{}", std::process::id()));
    nfx_io::bpf::ensure_bpffs(Path::new("/sys/fs/bpf")).unwrap();
    let g = line("pin");
    let specs: Vec<(String, NodeSpec)> = vec![
        (
            "fw".into(),
            spec("firewall: {default: allow, max_flows: 64}"),
        ),
        (
            "nat".into(),
            spec(&format!(
                "nat: {{snat: {{public_ip: {PUBLIC}, port_range: [30000, 30100]}}, max_flows: 64}}"
            )),
        ),
    ];
    let rx = socket_in(&g, 2, "10.93.2.1:9100");
    rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let tx = socket_in(&g, 0, "10.93.1.1:4100");
    let (fns, d) = (specs.clone(), dir.clone());
    let shape = g.within(1, move || {
        let mut c = TableChain::deploy_pinned(&fns, Path::new("."), &d).unwrap();
        c.attach(&alone()).unwrap();
        c.shape()
        // Dropped: as when its owner is killed.
    });
    let programs = || g.within(1, || nfx_fastpath::table::tcx_programs("m0").unwrap());
    assert_eq!(programs(), 1, "the pinned chain left with its owner");
    let mapped = through(&tx, &rx, b"owner gone").expect("nothing passes");
    assert_eq!(mapped.ip().to_string(), PUBLIC);
    assert!((30000..=30100).contains(&mapped.port()), "{mapped}");

    // Pinned at other ports than these: refused, and the chain still runs.
    let swapped = match alone() {
        Placement::Alone { inside, outside } => Placement::Alone {
            inside: outside,
            outside: inside,
        },
        p => p,
    };
    let (fns, d) = (specs.clone(), dir.clone());
    let refused = g.within(1, move || {
        TableChain::adopt(&fns, Path::new("."), shape, &d, &swapped).err()
    });
    assert!(
        refused.is_some_and(|e| e.to_string().contains("not attached where")),
        "adopted at the wrong ports"
    );
    assert_eq!(through(&tx, &rx, b"refused"), Some(mapped));

    let (fns, d) = (specs.clone(), dir.clone());
    let mut chain = g.within(1, move || {
        TableChain::adopt(&fns, Path::new("."), shape, &d, &alone()).unwrap()
    });
    assert_eq!(programs(), 1);
    assert_eq!(
        through(&tx, &rx, b"adopted"),
        Some(mapped),
        "mapping changed"
    );
    let stats = chain.stats().unwrap();
    let nat = stats.functions.iter().find(|f| f.name == "nat").unwrap();
    assert!(nat.flows >= 1, "{stats:?}");
    let counted = stats
        .nodes
        .iter()
        .find(|n| n.name == "nat")
        .unwrap()
        .packets;
    assert!(counted >= 3, "the counters restarted: {counted}");

    g.within(1, move || chain.detach());
    assert_eq!(programs(), 0);
    assert!(!dir.exists(), "pins left behind");
    assert_eq!(through(&tx, &rx, b"detached"), None);
}
