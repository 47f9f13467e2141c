//! The traffic drivers against the kernel baselines on a real testbed (root): iperf3 TCP
//! and UDP, the UDP generator and sink, sockperf, CPU measurement, and the nftables
//! baseline (masquerade proves itself: dst sees edge's outside address).

use nfx_testbed::acl::{IPERF_PORT, SOCKPERF_PORT, UDPGEN_PORT};
use nfx_testbed::cpu::SystemCpu;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::nftables::NftBaseline;
use nfx_testbed::probe::{self, PeerEcho, TcpOutcome};
use nfx_testbed::sockperf::{self, SockperfServer};
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use nfx_testbed::{Host, Spec, TestbedGuard};
use std::time::Duration;

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn kernel_forwarding_and_nftables_carry_measured_traffic() {
    let tb = TestbedGuard::up(Spec {
        prefix: "nfxit-kern-".into(),
        subnet_base: 236,
    })
    .unwrap();
    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    let _iperf = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let _sp = SockperfServer::start(&dst_ns, dst, SOCKPERF_PORT).unwrap();

    let cpu = SystemCpu::start().unwrap();
    let tcp = iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 1, 2)).unwrap();
    assert!(tcp.gbps > 0.0 && tcp.received_bytes > 0, "{tcp:?}");
    assert!(cpu.cores().unwrap() > 0.0);

    let mut u = ClientSpec::tcp(&src, dst, IPERF_PORT, 1, 1);
    u.udp = Some(("10M".into(), 64));
    let udp = iperf::client(&u).unwrap();
    assert!(udp.udp_packets > 0, "{udp:?}");

    let sink = Sink::start(&dst_ns, UDPGEN_PORT, &[]).unwrap();
    let g = udpgen::generate(GenSpec::flood(
        &src,
        dst,
        UDPGEN_PORT,
        Duration::from_secs(1),
    ))
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let got = sink.finish().unwrap();
    assert!(got.packets > 0 && got.packets <= g.sent, "{got:?} {g:?}");
    eprintln!(
        "generator offered {:.3} Mpps, sink received {:.3} Mpps",
        g.mpps(),
        got.packets as f64 / g.secs / 1e6
    );

    let lat = sockperf::ping_pong(&src, dst, SOCKPERF_PORT, 1).unwrap();
    assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us, "{lat:?}");
    eprintln!("tcp {tcp:?}\nlatency {lat:?}");

    let _echo = PeerEcho::start(&dst_ns, IPERF_PORT + 8).unwrap();
    let plain =
        probe::tcp_request(&src, dst, IPERF_PORT + 8, b"?", Duration::from_secs(2)).unwrap();
    assert_eq!(plain, TcpOutcome::Reply(tb.src_ip().to_string()));
    let nft = NftBaseline::apply(&tb).unwrap();
    let masq = probe::tcp_request(&src, dst, IPERF_PORT + 8, b"?", Duration::from_secs(2)).unwrap();
    assert_eq!(masq, TcpOutcome::Reply(tb.edge_outside_ip().to_string()));
    let denied = probe::tcp_request(&src, dst, 23, b"?", Duration::from_secs(1)).unwrap();
    assert_eq!(denied, TcpOutcome::TimedOut);
    let tcp = iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 1, 1)).unwrap();
    assert!(tcp.received_bytes > 0);
    drop(nft);
}
