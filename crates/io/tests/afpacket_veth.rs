//! AF_PACKET port on a real veth pair between two namespaces made by this test:
//! batched frames arrive in order with their bytes, a GSO super-packet crosses whole,
//! a port does not read its own transmissions, and bad interfaces give clear errors.

use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_packet::{Direction, Packet, PacketBuf, PacketVector, VnetHdr};
use std::process::Command;
use std::time::{Duration, Instant};

/// Two namespaces joined by one veth pair; removed on drop, even when the test fails.
struct Pair {
    a: String,
    b: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pair {
    fn new(tag: &str) -> Self {
        let p = Pair {
            a: format!("nfxio-{tag}-{}-a", std::process::id()),
            b: format!("nfxio-{tag}-{}-b", std::process::id()),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        ip(&[
            "-n",
            &p.a,
            "link",
            "add",
            "veth0",
            "address",
            "02:00:00:00:aa:01",
            "type",
            "veth",
            "peer",
            "name",
            "veth0",
            "netns",
            &p.b,
            "address",
            "02:00:00:00:bb:01",
        ]);
        for ns in [&p.a, &p.b] {
            ip(&["-n", ns, "link", "set", "veth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            // Keep the kernel's own IPv6 chatter off the link so counts are exact.
            let _ = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                ])
                .status();
        }
        p
    }

    /// Runs `f` on a thread inside namespace `ns`.
    fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = ns.to_string();
        std::thread::spawn(move || {
            nfx_io::netns::enter_netns(&ns).unwrap();
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A small frame, the GSO `frame` with its vnet header, and another small frame, as
/// packets to send in that order.
fn small_gso_small(frame: &[u8], vnet: VnetHdr) -> Vec<Packet> {
    let mut buf = PacketBuf::with_capacity(PacketBuf::GSO_CAPACITY);
    buf.storage_mut()[..frame.len()].copy_from_slice(frame);
    buf.set_len(frame.len());
    buf.vnet = vnet;
    vec![
        Packet::new(PacketBuf::from_frame(&udp_frame(1, 60)), Direction::Forward),
        Packet::new(buf, Direction::Forward),
        Packet::new(PacketBuf::from_frame(&udp_frame(2, 60)), Direction::Forward),
    ]
}

/// Length of [`tcp_gso_frame`]'s frame.
const GSO_FRAME_LEN: usize = 14 + 20 + 20 + 30_000;

/// A TCP/IPv4 super-packet with 30,000 payload bytes (ACK|PSH, MSS 1448) and the vnet
/// header that asks the kernel to segment it.
fn tcp_gso_frame() -> (Vec<u8>, VnetHdr) {
    let mut f = udp_frame(0, GSO_FRAME_LEN);
    f[23] = 6;
    f[34 + 12] = 5 << 4;
    f[34 + 13] = 0x18;
    let vnet = VnetHdr {
        flags: VnetHdr::F_NEEDS_CSUM,
        gso_type: VnetHdr::GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    (f, vnet)
}

fn udp_frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0xbb, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xaa, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 99, 0, 1]);
    f[30..34].copy_from_slice(&[10, 99, 0, 2]);
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

fn recv_until(
    port: &mut AfPacketPort,
    want: usize,
    vec: &mut PacketVector,
    out: &mut Vec<(Vec<u8>, VnetHdr, bool)>,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < want && Instant::now() < deadline {
        let n = port.recv(vec.slots_mut()).unwrap();
        vec.set_len(n, Direction::Forward, false);
        for p in vec.packets() {
            // Only our test frames (IPv4 to 10.99.0.2); the kernel may emit others.
            if p.buf.len() >= 34 && p.buf.frame()[30..34] == [10, 99, 0, 2] {
                out.push((p.buf.frame().to_vec(), p.buf.vnet, p.buf.is_external()));
            }
        }
        port.release(vec.packets_mut());
        if n == 0 {
            std::thread::yield_now();
        }
    }
}

/// How the receiving port reads: `recvmmsg`, or a PACKET_MMAP ring of that many slots
/// of `slot` bytes whose frames are copied out or (`in_place`) lent to the packets.
#[derive(Clone, Copy)]
struct Rx {
    ring: Option<usize>,
    slot: usize,
    in_place: bool,
}

const MMSG: Rx = Rx {
    ring: None,
    slot: nfx_io::ring::SLOT,
    in_place: false,
};

fn ring(slots: usize) -> Rx {
    Rx {
        ring: Some(slots),
        ..MMSG
    }
}

fn rx_opts(rx: Rx) -> AfPacketOptions {
    AfPacketOptions {
        rx_ring: rx.ring,
        rx_slot: rx.slot,
        rx_in_place: rx.in_place,
        ..Default::default()
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn batched_frames_cross_in_order_with_their_bytes() {
    batched_frames(MMSG, None, "batch");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn batched_frames_cross_a_receive_ring_in_order() {
    // 128 slots for 300 frames: the ring wraps while the sender is still sending.
    batched_frames(ring(128), None, "ring");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn batched_frames_cross_a_receive_ring_in_place() {
    let rx = Rx {
        in_place: true,
        ..ring(128)
    };
    batched_frames(rx, None, "inplace");
    // Slots that hold GSO frames: 135 of 68 KiB, wrapped twice.
    let rx = Rx {
        slot: nfx_io::ring::GSO_SLOT,
        in_place: true,
        ..ring(128)
    };
    batched_frames(rx, None, "gsoslot");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn batched_frames_cross_a_transmit_ring_in_order() {
    // 15 slots for sends of 100 frames: the ring wraps within every send.
    batched_frames(MMSG, Some(15), "txring");
}

fn batched_frames(how: Rx, tx_ring: Option<usize>, tag: &str) {
    let pair = Pair::new(tag);
    let b = pair.b.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let rx = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        let mut port = AfPacketPort::open("veth0", rx_opts(how)).unwrap();
        ready_tx.send(()).unwrap();
        assert_eq!(port.mac(), [0x02, 0, 0, 0, 0xbb, 1]);
        let mut vec = PacketVector::new(64, PacketBuf::GSO_CAPACITY);
        let mut got = Vec::new();
        recv_until(&mut port, 300, &mut vec, &mut got);
        (got, port.counters().rx_packets)
    });
    ready.recv().unwrap();
    let a = pair.a.clone();
    let sent = Pair::within(&a, move || {
        let mut port = AfPacketPort::open(
            "veth0",
            AfPacketOptions {
                batch: 32,
                tx_ring,
                ..Default::default()
            },
        )
        .unwrap();
        let mut n = 0;
        for chunk in (0..300u32).collect::<Vec<_>>().chunks(100) {
            let mut pkts: Vec<Packet> = chunk
                .iter()
                .map(|&i| {
                    Packet::new(
                        PacketBuf::from_frame(&udp_frame(i, 60 + (i as usize % 200))),
                        Direction::Forward,
                    )
                })
                .collect();
            n += port.send(&mut pkts);
            // Give the receiver time to empty a small ring between chunks.
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(port.counters().tx_packets, 300);
        n
    });
    assert_eq!(sent, 300);
    let (got, rx_count) = rx.join().unwrap();
    assert_eq!(got.len(), 300, "received {} of 300", got.len());
    assert!(rx_count >= 300);
    for (i, (frame, _, external)) in got.iter().enumerate() {
        assert_eq!(
            frame,
            &udp_frame(i as u32, 60 + (i % 200)),
            "frame {i} differs"
        );
        assert_eq!(*external, how.in_place, "frame {i} in place");
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn gso_super_packet_crosses_unsegmented() {
    gso_super_packet(MMSG, None, "gso");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn gso_super_packet_crosses_a_receive_ring_in_order() {
    gso_super_packet(ring(64), None, "gsoring");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn gso_super_packet_lands_in_a_gso_slot_ring_in_place() {
    let rx = Rx {
        slot: nfx_io::ring::GSO_SLOT,
        in_place: true,
        ..ring(15)
    };
    let got = gso_super_packet(rx, None, "gsoinplace");
    assert!(got.iter().all(|g| g.2), "all three read in place");
    // With small slots the big frame still comes from the socket queue, copied.
    let rx = Rx {
        in_place: true,
        ..ring(64)
    };
    let got = gso_super_packet(rx, None, "gsoqueued");
    assert_eq!(
        got.iter().map(|g| g.2).collect::<Vec<_>>(),
        [true, false, true]
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn gso_super_packet_crosses_a_transmit_ring_unsegmented() {
    gso_super_packet(MMSG, Some(15), "gsotx");
}

/// Sends a small frame, a 30 000-byte TCP GSO frame and another small frame; all three
/// must arrive whole and in order (with a ring the big one comes from the socket queue).
fn gso_super_packet(rx: Rx, tx_ring: Option<usize>, tag: &str) -> Vec<(Vec<u8>, VnetHdr, bool)> {
    let pair = Pair::new(tag);
    let b = pair.b.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let rx = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        let mut port = AfPacketPort::open("veth0", rx_opts(rx)).unwrap();
        ready_tx.send(()).unwrap();
        let mut vec = PacketVector::new(8, PacketBuf::GSO_CAPACITY);
        let mut got = Vec::new();
        recv_until(&mut port, 3, &mut vec, &mut got);
        got
    });
    ready.recv().unwrap();
    let (f, vnet) = tcp_gso_frame();
    let a = pair.a.clone();
    let frame = f.clone();
    Pair::within(&a, move || {
        let mut port = AfPacketPort::open(
            "veth0",
            AfPacketOptions {
                tx_ring,
                ..Default::default()
            },
        )
        .unwrap();
        let mut pkts = small_gso_small(&frame, vnet);
        assert_eq!(
            port.send(&mut pkts),
            3,
            "kernel refused the GSO frame: {:?}",
            port.counters()
        );
    });
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 3, "GSO frame did not arrive whole");
    assert_eq!(got[0].0, udp_frame(1, 60));
    assert_eq!(got[2].0, udp_frame(2, 60));
    assert_eq!(got[1].0.len(), GSO_FRAME_LEN);
    assert_eq!(got[1].1.gso_type, VnetHdr::GSO_TCPV4);
    assert_eq!(got[1].1.gso_size, 1448);
    assert!(got[1].1.needs_csum());
    got
}

/// Frames used in place are sent from their ring slots with the virtio-net header
/// written in front of them (one buffer per frame): a small frame, a GSO super-packet
/// whose header the receiver rewrote, and another small frame go back whole, in order,
/// with the rewritten header.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn frames_lent_from_the_ring_are_sent_back_whole_with_their_header() {
    let pair = Pair::new("lentback");
    let b = pair.b.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let fwd = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        let rx = Rx {
            slot: nfx_io::ring::GSO_SLOT,
            in_place: true,
            ..ring(15)
        };
        let mut port = AfPacketPort::open("veth0", rx_opts(rx)).unwrap();
        ready_tx.send(()).unwrap();
        let mut vec = PacketVector::new(8, PacketBuf::MTU_CAPACITY);
        let (mut forwarded, mut lent) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while forwarded < 3 && Instant::now() < deadline {
            let n = port.recv(vec.slots_mut()).unwrap();
            vec.set_len(n, Direction::Forward, false);
            for p in vec.packets_mut() {
                lent += usize::from(p.buf.is_external());
                if p.buf.vnet.gso_type == VnetHdr::GSO_TCPV4 {
                    p.buf.vnet.gso_size = 1400;
                }
            }
            forwarded += port.send(vec.packets_mut());
            port.release(vec.packets_mut());
            if n == 0 {
                std::thread::yield_now();
            }
        }
        lent
    });
    ready.recv().unwrap();
    let (big, vnet) = tcp_gso_frame();
    let a = pair.a.clone();
    let frame = big.clone();
    let got = Pair::within(&a, move || {
        let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
        let mut pkts = small_gso_small(&frame, vnet);
        assert_eq!(port.send(&mut pkts), 3, "{:?}", port.counters());
        let mut vec = PacketVector::new(8, PacketBuf::GSO_CAPACITY);
        let mut got = Vec::new();
        recv_until(&mut port, 3, &mut vec, &mut got);
        got
    });
    assert_eq!(
        fwd.join().unwrap(),
        3,
        "all three forwarded from their slots"
    );
    assert_eq!(got.len(), 3, "frames did not come back whole");
    assert_eq!(got[0].0, udp_frame(1, 60));
    assert_eq!(got[1].0, big);
    assert_eq!(got[2].0, udp_frame(2, 60));
    assert_eq!(got[1].1.gso_type, VnetHdr::GSO_TCPV4);
    assert_eq!(got[1].1.gso_size, 1400, "the rewritten header went out");
    assert!(got[1].1.needs_csum());
}

/// Slots lent to packets stay out of the kernel's reach until `release`: with 20 of a
/// 32-slot ring held, 20 more frames fill the 12 free slots (8 dropped by the kernel),
/// the held frames keep their bytes, and after the release the 12 come out in order.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn held_ring_slots_are_not_overwritten_before_release() {
    let pair = Pair::new("held");
    let (a, b) = (pair.a.clone(), pair.b.clone());
    let send = move |from: u32| {
        let a = a.clone();
        Pair::within(&a, move || {
            let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
            let mut pkts: Vec<Packet> = (from..from + 20)
                .map(|i| {
                    Packet::new(
                        PacketBuf::from_frame(&udp_frame(i, 100)),
                        Direction::Forward,
                    )
                })
                .collect();
            assert_eq!(port.send(&mut pkts), 20);
        })
    };
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let rx = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        let rx = Rx {
            in_place: true,
            ..ring(32)
        };
        let mut port = AfPacketPort::open("veth0", rx_opts(rx)).unwrap();
        ready_tx.send(()).unwrap();
        let ours = |p: &Packet| p.buf.len() == 100 && p.buf.frame()[30..34] == [10, 99, 0, 2];
        let mut vec = PacketVector::new(64, PacketBuf::MTU_CAPACITY);
        go.recv().unwrap();
        // One receive takes all 20 (a second receive would release them).
        std::thread::sleep(Duration::from_millis(100));
        let n = port.recv(vec.slots_mut()).unwrap();
        vec.set_len(n, Direction::Forward, false);
        let held: Vec<u32> = vec
            .packets()
            .iter()
            .filter(|p| ours(p))
            .map(|p| u32::from_be_bytes(p.buf.frame()[42..46].try_into().unwrap()))
            .collect();
        ready_tx.send(()).unwrap();
        go.recv().unwrap();
        for (i, p) in vec.packets().iter().filter(|p| ours(p)).enumerate() {
            assert!(p.buf.is_external());
            assert_eq!(
                p.buf.frame(),
                &udp_frame(i as u32, 100)[..],
                "held frame {i}"
            );
        }
        port.release(vec.packets_mut());
        assert!(vec.packets().iter().all(|p| !p.buf.is_external()));
        let mut rest = Vec::new();
        recv_until(&mut port, 12, &mut vec, &mut rest);
        let rest: Vec<u32> = rest
            .iter()
            .map(|(f, _, _)| u32::from_be_bytes(f[42..46].try_into().unwrap()))
            .collect();
        (held, rest)
    });
    ready.recv().unwrap();
    send(0);
    go_tx.send(()).unwrap();
    ready.recv().unwrap();
    send(20);
    std::thread::sleep(Duration::from_millis(100));
    go_tx.send(()).unwrap();
    let (held, rest) = rx.join().unwrap();
    assert_eq!(held, (0..20).collect::<Vec<_>>());
    assert_eq!(rest, (20..32).collect::<Vec<_>>());
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn port_does_not_read_its_own_transmissions() {
    let pair = Pair::new("own");
    let a = pair.a.clone();
    let own = Pair::within(&a, || {
        let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
        let mut pkts = vec![Packet::new(
            PacketBuf::from_frame(&udp_frame(7, 80)),
            Direction::Forward,
        )];
        assert_eq!(port.send(&mut pkts), 1);
        let mut vec = PacketVector::new(8, PacketBuf::MTU_CAPACITY);
        let mut own = 0;
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            let n = port.recv(vec.slots_mut()).unwrap();
            vec.set_len(n, Direction::Forward, false);
            own += vec
                .packets()
                .iter()
                .filter(|p| p.buf.frame() == udp_frame(7, 80).as_slice())
                .count();
        }
        own
    });
    assert_eq!(own, 0, "the port read back its own frame");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn missing_interface_is_a_clear_error() {
    let err = AfPacketPort::open("nfx-nope0", AfPacketOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("nfx-nope0"), "{err}");
}

/// An IPv4/UDP frame from 10.99.0.1:1234 to 10.99.0.2:9999 whose payload is `len` copies
/// of `fill`, with a valid IP header checksum and no UDP checksum.
fn udp_to_b(fill: u8, len: usize) -> Vec<u8> {
    let mut f = udp_frame(0, 14 + 20 + 8 + len);
    f[26..30].copy_from_slice(&[10, 99, 0, 1]);
    let mut sum = 0u32;
    for i in (14..34).step_by(2) {
        sum += u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&9999u16.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    f[42..].fill(fill);
    f
}

/// The kernel hands a transmit-ring slot back from the skb destructor, which on veth
/// runs in the receiving namespace (`ip_rcv` orphans the skb) while a socket there may
/// still hold the data unread. A datagram sent from a slot must read the same after the
/// ring wrapped and rewrote that slot four times: the kernel copied the zero-copy
/// fragments when the skb crossed the veth (crates/io/src/txring.rs).
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn tx_ring_slot_is_not_reused_under_a_reader() {
    let pair = Pair::new("txhold");
    ip(&["-n", &pair.b, "addr", "add", "10.99.0.2/24", "dev", "veth0"]);
    let b = pair.b.clone();
    let sock = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        std::net::UdpSocket::bind("10.99.0.2:9999").unwrap()
    })
    .join()
    .unwrap();
    let a = pair.a.clone();
    Pair::within(&a, move || {
        let mut port = AfPacketPort::open(
            "veth0",
            AfPacketOptions {
                tx_ring: Some(15),
                ..Default::default()
            },
        )
        .unwrap();
        let mut first = vec![Packet::new(
            PacketBuf::from_frame(&udp_to_b(b'A', 1000)),
            Direction::Forward,
        )];
        assert_eq!(port.send(&mut first), 1);
        for _ in 0..4 {
            let mut later: Vec<Packet> = (0..15)
                .map(|_| {
                    Packet::new(
                        PacketBuf::from_frame(&udp_to_b(b'B', 1000)),
                        Direction::Forward,
                    )
                })
                .collect();
            assert_eq!(port.send(&mut later), 15, "{:?}", port.counters());
        }
    });
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(n, 1000);
    let bs = buf[..n].iter().filter(|&&c| c == b'B').count();
    assert_eq!(
        bs, 0,
        "the first datagram was overwritten through a reused slot"
    );
    let mut later = 0;
    while let Ok(n) = sock.recv(&mut buf) {
        assert!(buf[..n].iter().all(|&c| c == b'B'));
        later += 1;
        if later == 60 {
            break;
        }
    }
    assert_eq!(later, 60);
}

/// Netdev tables of namespace `ns` (`nft list tables netdev`).
fn netdev_tables(ns: &str) -> Vec<String> {
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
        .map(str::to_string)
        .collect()
}

/// A port that isolates the kernel still receives every frame (the taps come before the
/// ingress drop), while the namespace's IP stack gets none; the table goes with the port,
/// and then the kernel receives again.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn isolating_port_receives_what_the_kernel_no_longer_sees() {
    let pair = Pair::new("iso");
    ip(&["-n", &pair.b, "addr", "add", "10.99.0.2/24", "dev", "veth0"]);
    let b = pair.b.clone();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (sent_tx, sent) = std::sync::mpsc::channel::<()>();
    let rx = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&b).unwrap();
        let sock = std::net::UdpSocket::bind("10.99.0.2:9999").unwrap();
        let mut port = AfPacketPort::open(
            "veth0",
            AfPacketOptions {
                isolate_kernel: true,
                ..Default::default()
            },
        )
        .unwrap();
        let table = port.isolation_table().unwrap().to_string();
        ready_tx.send(table).unwrap();
        sent.recv().unwrap();
        let mut vec = PacketVector::new(64, PacketBuf::MTU_CAPACITY);
        let mut got = Vec::new();
        recv_until(&mut port, 20, &mut vec, &mut got);
        (got.len(), sock)
    });
    let table = ready.recv().unwrap();
    assert!(netdev_tables(&pair.b).contains(&table), "{table}");
    let send20 = |fill: u8| {
        Pair::within(&pair.a, move || {
            let mut port = AfPacketPort::open("veth0", AfPacketOptions::default()).unwrap();
            let mut pkts: Vec<Packet> = (0..20)
                .map(|_| {
                    Packet::new(
                        PacketBuf::from_frame(&udp_to_b(fill, 200)),
                        Direction::Forward,
                    )
                })
                .collect();
            assert_eq!(port.send(&mut pkts), 20);
        })
    };
    send20(b'I');
    sent_tx.send(()).unwrap();
    let (port_got, sock) = rx.join().unwrap();
    assert_eq!(port_got, 20, "the port missed frames");
    assert!(
        !netdev_tables(&pair.b).contains(&table),
        "table {table} left after the port closed"
    );
    // veth delivers in the sender's send, so the isolated frames would be queued by now.
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    assert_eq!(
        std::iter::from_fn(|| sock.recv(&mut buf).ok()).count(),
        0,
        "the kernel stack received isolated frames"
    );
    send20(b'K');
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let kernel_got = std::iter::from_fn(|| sock.recv(&mut buf).ok())
        .take(20)
        .count();
    assert_eq!(
        kernel_got, 20,
        "without the port the kernel must receive again"
    );
}
