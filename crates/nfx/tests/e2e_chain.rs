//! End-to-end: real traffic from src to dst through `nfx run` on edge with the chain
//! firewall → NAT → elephant → DPI, and proof that the edge kernel forwards nothing
//! by itself. Needs root (network namespaces); each test has its own prefix and
//! subnet, removes its testbed even on failure, and bounds every traffic run.

mod common;

use common::eventually;
use nfx_testbed::acl::{DENIED_PORT, IPERF_PORT, UDPGEN_PORT};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::nfxrun::{read_events, NfxRun};
use nfx_testbed::probe::{self, PeerEcho, TcpOutcome};
use nfx_testbed::runconfig::{Chain, RunSpec};
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use nfx_testbed::{Host, Spec, TestbedGuard};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

const NFX: &str = env!("CARGO_BIN_EXE_nfx");
/// Traffic tests share two cores: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn patterns() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/dpi/patterns.txt")
}

fn is_flow(e: &Value, proto: u64, port: u16) -> bool {
    e["flow"]["proto"] == proto && (e["flow"]["dport"] == port || e["flow"]["sport"] == port)
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn chain_carries_traffic_translates_and_enforces() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = TestbedGuard::up(Spec {
        prefix: "nfxe2e-chain-".into(),
        subnet_base: 241,
    })
    .unwrap();
    tb.set_edge_forwarding(false).unwrap();
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let ev_path = dir.path().join("events.jsonl");
    let spec = RunSpec {
        name: "e2e-chain".into(),
        control_socket: dir.path().join("e2e-chain.sock"),
        events: Some(ev_path.clone()),
        vector: 256,
        poll: "adaptive".into(),
        chain: Chain::Full {
            patterns: patterns(),
            elephant_bytes: 1_000_000,
        },
    };
    let nfx = NfxRun::start(Path::new(NFX), &tb, &spec, &[], dir.path()).unwrap();
    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());

    // TCP: data arrives, and nfx's inside port saw what iperf3 sent (plus headers).
    let _srv = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let before = nfx.stats().unwrap();
    let tcp = iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 2, 1)).unwrap();
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    // Every byte the receiver got went through the inside port first; the workers
    // publish their counters periodically, so wait (bounded) until the stats show it.
    let inside_rx = || {
        let rx = |s: &nfx_proto::Stats| s.port("inside").map_or(0, |p| p.rx_bytes);
        rx(&nfx.stats().unwrap()) - rx(&before)
    };
    let mut rx = 0;
    eventually(Duration::from_secs(3), || {
        rx = inside_rx();
        rx >= tcp.received_bytes
    });
    let sent = tcp.sent_bytes as f64;
    assert!(
        rx >= tcp.received_bytes && (rx as f64) <= sent * 1.08 + 2e6,
        "inside rx_bytes {rx} vs iperf3 received {} / sent {}",
        tcp.received_bytes,
        tcp.sent_bytes
    );

    // UDP through the chain.
    let mut u = ClientSpec::tcp(&src, dst, IPERF_PORT, 1, 1);
    u.udp = Some(("20M".into(), 1000));
    let udp = iperf::client(&u).unwrap();
    assert!(
        udp.udp_packets > 0 && udp.udp_lost < udp.udp_packets,
        "{udp:?}"
    );
    assert!(udp.received_bytes > 0, "{udp:?}");

    // NAT: dst sees 10.b.2.100 and the reply comes back to src.
    let _echo = PeerEcho::start(&dst_ns, IPERF_PORT + 8).unwrap();
    let seen = probe::tcp_request(
        &src,
        dst,
        IPERF_PORT + 8,
        b"who am i",
        Duration::from_secs(3),
    )
    .unwrap();
    assert_eq!(seen, TcpOutcome::Reply(tb.nat_ip().to_string()));

    // A port the ACL denies: the connection fails and acl_deny rises.
    let denied_before = nfx.stats().unwrap().total_drop("acl_deny");
    let denied =
        probe::tcp_request(&src, dst, DENIED_PORT, b"x", Duration::from_millis(1500)).unwrap();
    assert_eq!(denied, TcpOutcome::TimedOut);
    assert!(nfx.stats().unwrap().total_drop("acl_deny") > denied_before);

    // DPI: a payload with the test pattern raises a dpi_match event.
    let sink = Sink::start(&dst_ns, UDPGEN_PORT + 1, b"NFX-DPI-TEST").unwrap();
    let mut g = GenSpec::flood(&src, dst, UDPGEN_PORT + 1, Duration::from_millis(200));
    g.pattern = b"NFX-DPI-TEST from e2e".to_vec();
    g.payload = 64;
    g.flows = 1;
    g.batch = 1;
    g.pps = Some(20);
    udpgen::generate(g).unwrap();
    assert!(eventually(Duration::from_secs(3), || {
        nfx.stats()
            .map(|s| s.event("dpi_match") > 0)
            .unwrap_or(false)
    }));
    assert!(
        sink.finish().unwrap().matched > 0,
        "alert-only pattern must still be delivered"
    );

    // Ping gets answered and is no elephant.
    let ping = probe::icmp_echo(&src, dst, 3, Duration::from_millis(100)).unwrap();
    assert_eq!(ping.received, 3, "{ping:?}");

    let fin = nfx.stop().unwrap();
    assert!(fin.event("elephant") >= 1, "{fin:?}");
    let (evs, bad) = read_events(&ev_path);
    assert_eq!(bad, 0);
    let kinds = |k: &'static str| evs.iter().filter(move |e| e["kind"] == k);
    assert!(
        kinds("dpi_match").any(|e| e["detail"].to_string().contains("nfx-test-alert")),
        "{evs:?}"
    );
    assert!(
        kinds("elephant").any(|e| is_flow(e, 6, IPERF_PORT)),
        "{evs:?}"
    );
    assert!(
        !kinds("elephant").any(|e| e["flow"]["proto"] == 1),
        "{evs:?}"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn edge_kernel_forwards_nothing_without_nfx() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = TestbedGuard::up(Spec {
        prefix: "nfxe2e-off-".into(),
        subnet_base: 242,
    })
    .unwrap();
    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    // With the kernel forwarding, dst is reachable (the topology itself works) ...
    probe::udp_reachable(&src, dst, Duration::from_secs(3)).unwrap();
    // ... and with forwarding off and no nfx running, nothing gets through.
    tb.set_edge_forwarding(false).unwrap();
    assert!(probe::udp_reachable(&src, dst, Duration::from_secs(1)).is_err());
    let sink = Sink::start(&dst_ns, UDPGEN_PORT, &[]).unwrap();
    let sent = udpgen::generate(GenSpec::flood(
        &src,
        dst,
        UDPGEN_PORT,
        Duration::from_millis(500),
    ))
    .unwrap()
    .sent;
    assert!(sent > 0);
    assert_eq!(sink.finish().unwrap().packets, 0);
    let _echo = PeerEcho::start(&dst_ns, IPERF_PORT).unwrap();
    let r = probe::tcp_request(&src, dst, IPERF_PORT, b"x", Duration::from_secs(1)).unwrap();
    assert_eq!(r, TcpOutcome::TimedOut);
}
