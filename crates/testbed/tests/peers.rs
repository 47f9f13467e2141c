//! The tunnel peers on a real testbed (root): each installed peer comes up between `src`
//! and `dst`, carries a short iperf3 TCP run and a sockperf ping-pong, reports its
//! processes for CPU accounting, and leaves no interface or process behind. A peer
//! whose programs are missing (CI does not install them) is skipped with the reason.

use nfx_testbed::cpu::ProcessCpu;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::peers::Peer;
use nfx_testbed::sockperf::{self, SockperfServer};
use nfx_testbed::{netns, Host, Spec, TestbedGuard};

/// Interfaces in `ns` other than the testbed's own (`lo`, veths).
fn extra_links(ns: &str) -> Vec<String> {
    netns::links(ns)
        .unwrap()
        .into_iter()
        .filter(|l| l.ifname != "lo" && l.ifalias.as_deref() != Some("nfx-testbed"))
        .map(|l| l.ifname)
        .collect()
}

/// Brings `peer` up on the testbed, pushes traffic through it and tears it down.
fn carries_traffic(tb: &TestbedGuard, peer: Peer) {
    let (src, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst));
    let before = (extra_links(&src), extra_links(&dst));
    let guard = peer.start(tb).unwrap_or_else(|e| panic!("{e:#}"));
    let t = guard.traffic();
    let pids = guard.pids();
    assert!(!pids.is_empty(), "{}: no processes", peer.name());
    let cpus: Vec<ProcessCpu> = pids
        .iter()
        .map(|&p| ProcessCpu::start(p).unwrap())
        .collect();
    let _iperf = IperfServer::start(&dst, t.server_addr, t.iperf_server_port).unwrap();
    let r = iperf::client(&ClientSpec::tcp(
        &src,
        t.client_addr,
        t.iperf_client_port,
        1,
        2,
    ))
    .unwrap_or_else(|e| panic!("{}: {e:#}", peer.name()));
    assert!(
        r.received_bytes > 0 && r.gbps > 0.0,
        "{}: {r:?}",
        peer.name()
    );
    let busy: f64 = cpus.iter().map(|c| c.cores().unwrap_or(0.0)).sum();
    assert!(busy > 0.0, "{}: its processes used no CPU", peer.name());
    let _sp = SockperfServer::start(&dst, t.server_addr, t.sockperf_server_port).unwrap();
    let lat = sockperf::ping_pong(&src, t.client_addr, t.sockperf_client_port, 1)
        .unwrap_or_else(|e| panic!("{}: {e:#}", peer.name()));
    assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us, "{lat:?}");
    eprintln!(
        "{}: {:.3} Gbit/s, {busy:.2} cores, p50 {} us",
        peer.name(),
        r.gbps,
        lat.p50_us
    );
    drop(guard);
    for p in pids {
        let alive = std::fs::read_to_string(format!("/proc/{p}/stat"))
            .map(|s| !s.contains(") Z"))
            .unwrap_or(false);
        assert!(!alive, "{}: process {p} survived its guard", peer.name());
    }
    assert_eq!(
        (extra_links(&src), extra_links(&dst)),
        before,
        "{}: interfaces left behind",
        peer.name()
    );
}

/// Runs `peers` one after another on a private testbed, skipping missing ones.
fn run_peers(prefix: &str, subnet_base: u8, peers: &[Peer]) {
    let present: Vec<Peer> = peers
        .iter()
        .copied()
        .filter(|p| match p.missing() {
            Some(why) => {
                eprintln!("skipped {}: {why}", p.name());
                false
            }
            None => true,
        })
        .collect();
    if present.is_empty() {
        return;
    }
    let tb = TestbedGuard::up(Spec {
        prefix: prefix.into(),
        subnet_base,
    })
    .unwrap();
    for p in present {
        carries_traffic(&tb, p);
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn wireguard_go_carries_iperf_and_sockperf() {
    run_peers("nfxit-pwg-", 226, &[Peer::WireguardGo]);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn openssh_forward_carries_iperf_and_sockperf() {
    run_peers("nfxit-pssh-", 227, &[Peer::OpensshAes128Gcm]);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn other_installed_peers_carry_iperf_and_sockperf() {
    run_peers(
        "nfxit-poth-",
        228,
        &[
            Peer::Boringtun,
            Peer::Openvpn,
            Peer::Strongswan,
            Peer::OpensshAes128Ctr,
            Peer::DropbearAes128Ctr,
        ],
    );
}
