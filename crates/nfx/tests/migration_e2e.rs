//! End-to-end: live migration of a firewall → NAT instance between two `nfx run`
//! processes on the testbed's edge, under real traffic, through the local VNFM. Both
//! workers share `to-src`/`to-cloud` through PACKET_FANOUT groups; the handoff steers,
//! drains the old worker, moves the flow state and releases the new one. Checks: an
//! iperf3 TCP transfer survives with every byte, dst keeps seeing the same translated
//! address and port, the new worker drops nothing for lack of state, the old one
//! forwards nothing after the handoff, and a sequence-numbered UDP stream arrives
//! complete and in order. Needs root; each test has its own prefix and subnet, removes
//! its testbed and workers even on failure, and bounds every traffic run.

mod common;

use common::eventually;
use nfx_control::vnfm::local::{stop_recorded_workers, LocalConfig, LocalVnfm, WorkerTemplate};
use nfx_control::vnfm::{InstanceSpec, Vnfm};
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_packet::{Direction, PacketBuf, PacketVector};
use nfx_proto::fetch_stats;
use nfx_proto::run_config::{PortConfig, Ports};
use nfx_testbed::acl::{IPERF_PORT, UDPGEN_PORT};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::runconfig::{chain_nodes, Chain};
use nfx_testbed::{netns, Host, Spec, TestbedGuard};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");
/// Traffic tests share two cores: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Shuts the local VNFM's workers down (and kills them if they do not go) on drop, so a
/// failing test leaves no dataplane process behind.
struct Workers {
    run_dir: PathBuf,
}

impl Drop for Workers {
    fn drop(&mut self) {
        stop_recorded_workers(&self.run_dir);
    }
}

/// A testbed with the edge kernel's forwarding off and a local VNFM with two workers
/// (`w0`, `w1`) on edge in one fanout group; firewall → NAT deployed on `w0`.
struct Rig {
    vnfm: LocalVnfm,
    _workers: Workers,
    tb: TestbedGuard,
    _dir: nfx_testbed::tempfile::TempDir,
    chain: Vec<Value>,
}

impl Rig {
    fn up(prefix: &str, subnet_base: u8, group: u16) -> Rig {
        let tb = TestbedGuard::up(Spec {
            prefix: prefix.into(),
            subnet_base,
        })
        .unwrap();
        tb.set_edge_forwarding(false).unwrap();
        let dir = nfx_testbed::tempfile::tempdir().unwrap();
        let (src_mac, cloud_mac) = tb.edge_peer_macs().unwrap();
        let template = WorkerTemplate {
            netns: Some(tb.ns(Host::Edge)),
            ports: Ports {
                inside: PortConfig {
                    iface: "to-src".into(),
                    peer_mac: src_mac.clone(),
                    table_tier: false,
                },
                outside: PortConfig {
                    iface: "to-cloud".into(),
                    peer_mac: cloud_mac.clone(),
                    table_tier: false,
                },
            },
            vector: None,
            poll: Some(nfx_io::PollMode::Adaptive),
            ring_slots: None,
            fanout: Some(group),
            fast_path: None,
            allowed_dirs: Vec::new(),
            nice: None,
            kernel_stack: None,
            io: None,
        };
        let cfg = LocalConfig {
            run_dir: dir.path().to_path_buf(),
            nfx_bin: Some(PathBuf::from(NFX)),
            workers: [("w0".into(), template.clone()), ("w1".into(), template)].into(),
        };
        let workers = Workers {
            run_dir: dir.path().to_path_buf(),
        };
        let vnfm = LocalVnfm::new(cfg).unwrap();
        let chain = chain_nodes(
            &tb,
            &Chain::Full {
                patterns: PathBuf::from("/nonexistent"),
                elephant_bytes: 1,
            },
        )[..2]
            .to_vec();
        let rig = Rig {
            vnfm,
            _workers: workers,
            tb,
            _dir: dir,
            chain,
        };
        rig.deploy("a", "w0");
        rig
    }

    /// Deploys `fw-<tag>` and `nat-<tag>` on `device`.
    fn deploy(&self, tag: &str, device: &str) {
        for (i, (f, short)) in [("firewall", "fw"), ("nat", "nat")].iter().enumerate() {
            self.vnfm
                .deploy_instance(&InstanceSpec {
                    id: format!("{short}-{tag}"),
                    function: f.to_string(),
                    device: device.into(),
                    config: self.chain[i][*f].clone(),
                    throughput_gbps: 0.0,
                    capacity: 0.0,
                })
                .unwrap();
        }
    }

    fn socket(&self, device: &str) -> PathBuf {
        self._dir.path().join(format!("{device}.sock"))
    }

    /// Moves fw-a/nat-a to fw-b/nat-b (one handoff) and checks both reports.
    fn migrate(&self) -> u64 {
        let fw = self.vnfm.migrate_instance("fw-a", "fw-b", &[]).unwrap();
        let nat = self.vnfm.migrate_instance("nat-a", "nat-b", &[]).unwrap();
        assert!(fw.flows >= 1 && nat.flows >= 1, "{fw:?} {nat:?}");
        // 12-byte blob header, 56-byte firewall records (key, state, TCP windows).
        assert_eq!(fw.bytes, 12 + 56 * fw.flows, "{fw:?}");
        fw.flows + nat.flows
    }

    /// Drops for lack of state on worker `device`: firewall `invalid_state` and
    /// `out_of_window` (no flow, or windows that do not fit: stale or missing state),
    /// NAT `nat_no_mapping`, and frames lost to a full socket while held. The firewall's
    /// `invalid_rst` is left out: when iperf3's server closes a stream with data still
    /// arriving, its resets carry a sequence number before the client's last ack, which
    /// conntrack also calls invalid; that is the transfer's end, not the handoff.
    fn stateless_drops(&self, device: &str) -> (u64, u64, u64) {
        let s = fetch_stats(&self.socket(device)).unwrap();
        let fw_drop = |reason: &str| {
            s.node("firewall")
                .and_then(|n| n.stats["drops"][reason].as_u64())
                .unwrap_or_else(|| panic!("firewall stats without drops.{reason}: {s:?}"))
        };
        let socket: u64 = s.ports.iter().map(|p| p.socket_drops).sum();
        (
            fw_drop("invalid_state") + fw_drop("out_of_window"),
            s.node_drop("nat", "nat_no_mapping"),
            socket,
        )
    }

    fn tx_packets(&self, device: &str) -> u64 {
        let s = fetch_stats(&self.socket(device)).unwrap();
        s.ports.iter().map(|p| p.tx_packets).sum()
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn tcp_transfer_survives_migration_with_same_nat_mapping() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rig = Rig::up("nfxmig-tcp-", 246, 3100);
    let (src, dst_ns, dst) = (rig.tb.ns(Host::Src), rig.tb.ns(Host::Dst), rig.tb.dst_ip());
    let _srv = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let client =
        std::thread::spawn(move || iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 6, 1)));
    assert!(
        eventually(Duration::from_secs(5), || rig.tx_packets("w0") > 2000),
        "no traffic through w0"
    );
    // The standby joins the groups while traffic flows: it must not take any yet.
    rig.deploy("b", "w1");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        rig.tx_packets("w1"),
        0,
        "the standby forwarded before the handoff"
    );
    let peers_before = netns::tcp_peers(&dst_ns, IPERF_PORT).unwrap();
    assert!(
        peers_before
            .iter()
            .all(|p| p.starts_with(&rig.tb.nat_ip().to_string())),
        "{peers_before:?}"
    );
    let flows = rig.migrate();
    let a_after = rig.tx_packets("w0");
    std::thread::sleep(Duration::from_millis(700));
    let peers_after = netns::tcp_peers(&dst_ns, IPERF_PORT).unwrap();
    let tcp = client
        .join()
        .unwrap()
        .expect("iperf3 failed across the migration");
    assert_eq!(
        rig.tx_packets("w0"),
        a_after,
        "w0 forwarded after the handoff"
    );
    assert!(rig.tx_packets("w1") > 1000, "w1 carries the traffic");
    assert!(!peers_before.is_empty());
    assert_eq!(
        peers_before, peers_after,
        "dst saw another translated source"
    );
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    assert!(
        tcp.received_bytes as f64 >= tcp.sent_bytes as f64 * 0.99,
        "{tcp:?}"
    );
    assert_eq!(rig.stateless_drops("w1"), (0, 0, 0), "{flows} flows moved");
    for id in ["fw-a", "nat-a"] {
        rig.vnfm.destruct_instance(id).unwrap();
    }
    assert!(eventually(Duration::from_secs(3), || fetch_stats(
        &rig.socket("w0")
    )
    .is_err()));
}

/// Sends `seq` (u32, big endian) datagrams from `ns` to `dst:port`, about 10,000 per
/// second, until `stop`; returns how many were sent.
fn udp_sender(
    ns: String,
    dst: Ipv4Addr,
    port: u16,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(SocketAddrV4::new(dst, port)).unwrap();
        let mut seq = 0u32;
        let mut payload = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..10 {
                payload[..4].copy_from_slice(&seq.to_be_bytes());
                s.send(&payload).unwrap();
                seq += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        seq
    })
}

/// Sequence numbers in arrival order, and the source (address, port) pairs seen.
type Captured = (Vec<u32>, BTreeSet<(u32, u16)>);

/// Captures, with an AF_PACKET socket (32 MiB buffer) on dst's `veth0`, every UDP
/// datagram to `port` that reaches dst, until `stop` and 500 ms of silence; returns the
/// sequence numbers in arrival order and the set of source address:port. Capturing at
/// the interface rather than in a UDP socket keeps dst's own socket buffer (and CPU
/// scheduling on a shared machine) out of what is measured: nfx's delivery.
fn udp_receiver(ns: String, port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Captured> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        // Bound so that dst's kernel does not answer with port-unreachable errors.
        let _sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).unwrap();
        let mut cap = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
        ready_tx.send(()).unwrap();
        let (mut seqs, mut from) = (Vec::new(), BTreeSet::new());
        let mut v = PacketVector::new(256, PacketBuf::MTU_CAPACITY);
        let mut idle = Instant::now();
        loop {
            let n = cap.recv(v.slots_mut()).unwrap();
            if n == 0 {
                if stop.load(Ordering::Relaxed) && idle.elapsed() > Duration::from_millis(500) {
                    return (seqs, from);
                }
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            idle = Instant::now();
            v.set_len(n, Direction::Forward, false);
            for p in v.packets() {
                let f = p.buf.frame();
                let Ok(m) = nfx_packet::parse(f) else {
                    continue;
                };
                if m.key.proto == 17 && m.key.dport == port && f.len() >= m.payload + 4 {
                    let b = &f[m.payload..m.payload + 4];
                    seqs.push(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    from.insert((m.key.src, m.key.sport));
                }
            }
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    h
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn udp_sequence_arrives_complete_and_in_order_across_migration() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rig = Rig::up("nfxmig-udp-", 247, 3200);
    let port = UDPGEN_PORT + 3;
    let (stop_tx, stop_rx) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let rx = udp_receiver(rig.tb.ns(Host::Dst), port, stop_rx.clone());
    let tx = udp_sender(rig.tb.ns(Host::Src), rig.tb.dst_ip(), port, stop_tx.clone());
    assert!(eventually(Duration::from_secs(5), || rig.tx_packets("w0") > 3000));
    rig.deploy("b", "w1");
    std::thread::sleep(Duration::from_millis(300));
    let at_handoff = rig.tx_packets("w0");
    rig.migrate();
    std::thread::sleep(Duration::from_millis(1000));
    stop_tx.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    stop_rx.store(true, Ordering::Relaxed);
    let (seqs, from) = rx.join().unwrap();
    assert!(sent > 5000, "sent only {sent}");
    let got: BTreeSet<u32> = seqs.iter().copied().collect();
    let missing: Vec<u32> = (0..sent).filter(|s| !got.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "lost {} of {sent}: {:?}; handoff near {at_handoff}; w0 {}; w1 {}",
        missing.len(),
        &missing[..missing.len().min(40)],
        fetch_stats(&rig.socket("w0"))
            .map(|s| serde_json::to_string(&s).unwrap_or_default())
            .unwrap_or_default(),
        fetch_stats(&rig.socket("w1"))
            .map(|s| serde_json::to_string(&s).unwrap_or_default())
            .unwrap_or_default(),
    );
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u32),
        "reordered: first bad at {:?}",
        seqs.iter().enumerate().find(|(i, &s)| s != *i as u32)
    );
    assert_eq!(from.len(), 1, "dst saw several sources: {from:?}");
    assert_eq!(
        Ipv4Addr::from(from.iter().next().unwrap().0),
        rig.tb.nat_ip()
    );
    assert_eq!(rig.stateless_drops("w1"), (0, 0, 0));
}

/// A device's worker started again right after its last instance was destroyed: the
/// destroy returns once the old process has ended (with it, the isolation tables that
/// would make the new worker refuse the interfaces as served by a live process), and
/// every start is announced by the worker (`READY=1`), not found by probing.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_worker_restarts_at_once_after_its_last_instance_is_destroyed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = TestbedGuard::up(Spec {
        prefix: "nfxmig-rst-".into(),
        subnet_base: 249,
    })
    .unwrap();
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let (src_mac, cloud_mac) = tb.edge_peer_macs().unwrap();
    let port = |iface: &str, peer_mac: &str| PortConfig {
        iface: iface.into(),
        peer_mac: peer_mac.into(),
        table_tier: false,
    };
    let template = WorkerTemplate {
        netns: Some(tb.ns(Host::Edge)),
        ports: Ports {
            inside: port("to-src", &src_mac),
            outside: port("to-cloud", &cloud_mac),
        },
        vector: None,
        poll: Some(nfx_io::PollMode::Adaptive),
        ring_slots: Some(64),
        fanout: None,
        fast_path: None,
        allowed_dirs: Vec::new(),
        nice: None,
        kernel_stack: None,
        io: None,
    };
    let _workers = Workers {
        run_dir: dir.path().to_path_buf(),
    };
    let vnfm = LocalVnfm::new(LocalConfig {
        run_dir: dir.path().to_path_buf(),
        nfx_bin: Some(PathBuf::from(NFX)),
        workers: [("w0".into(), template)].into(),
    })
    .unwrap();
    let spec = InstanceSpec {
        id: "fw-r".into(),
        function: "firewall".into(),
        device: "w0".into(),
        config: serde_json::json!({"default": "allow"}),
        throughput_gbps: 0.0,
        capacity: 0.0,
    };
    let mut pids = BTreeSet::new();
    for round in 0..5 {
        let st = vnfm
            .deploy_instance(&spec)
            .unwrap_or_else(|e| panic!("start {round}: {e}"));
        assert_eq!(st.status, "running");
        let pid = vnfm.worker_processes()[0].pid;
        assert!(pids.insert(pid), "round {round}: a new process each time");
        assert!(
            !dir.path().join("w0.ready").exists(),
            "the readiness socket goes once the worker is up"
        );
        vnfm.destruct_instance("fw-r").unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.starts_with(" Z"))),
            "round {round}: worker {pid} still runs after its destroy"
        );
    }
}
