//! The fast path on real veth links between three namespaces made by this test,
//! a — mid — b, with no userspace forwarder: only the BPF program moves frames.
//! A pending entry forwards nothing and counts what it hands up; an armed entry
//! rewrites (destination and source NAT, MACs, TTL) with checksums b's kernel accepts,
//! and counts packets and bytes; a removed entry forwards nothing again. Every frame
//! handed up is counted until it has arrived at the port's packet socket.

use nfx_fastpath::{Action, FastPath, FlowKey4, ACTIVE};
use nfx_io::{AfPacketOptions, AfPacketPort, Port};
use nfx_packet::{PacketBuf, PacketVector};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

mod common;

use common::Namespaces;

/// Namespaces a, mid, b: a0 (10.91.1.1) — m0 (10.91.1.2) | m1 (10.91.2.2) — b0 (10.91.2.1).
struct Line {
    ns: [String; 3],
    _guard: Namespaces,
}

impl Line {
    /// Made under names unique to this process and `tag` (tests run in parallel).
    fn new(tag: &str) -> Self {
        let g = Namespaces::new("nfxfp", tag, &["a", "mid", "b"]);
        g.link(0, "a0", "02:00:00:00:0a:00", 1, "m0", "02:00:00:00:0c:00");
        g.link(1, "m1", "02:00:00:00:0c:01", 2, "b0", "02:00:00:00:0b:00");
        for (n, dev, addr) in [
            (0, "a0", "10.91.1.1/24"),
            (1, "m0", "10.91.1.2/24"),
            (1, "m1", "10.91.2.2/24"),
            (2, "b0", "10.91.2.1/24"),
        ] {
            g.addr(n, dev, addr);
        }
        // a reaches mid's address on its link; static neighbours keep ARP out of it.
        g.ip(
            0,
            &[
                "neigh",
                "add",
                "10.91.1.2",
                "lladdr",
                "02:00:00:00:0c:00",
                "dev",
                "a0",
            ],
        );
        g.ip(
            2,
            &[
                "neigh",
                "add",
                "10.91.2.2",
                "lladdr",
                "02:00:00:00:0c:01",
                "dev",
                "b0",
            ],
        );
        Line {
            ns: [g.names[0].clone(), g.names[1].clone(), g.names[2].clone()],
            _guard: g,
        }
    }

    fn ifindex(&self, ns: usize, dev: &str) -> u32 {
        self._guard.ifindex(ns, dev)
    }
}

/// Sends `n` datagrams from a (10.91.1.1:4000) to mid's 10.91.1.2:9000.
fn send_from_a(ns: &str, n: usize) {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns).unwrap();
        let s = UdpSocket::bind("10.91.1.1:4000").unwrap();
        for i in 0..n {
            s.send_to(format!("datagram {i}").as_bytes(), "10.91.1.2:9000")
                .unwrap();
        }
    })
    .join()
    .unwrap();
}

/// A socket in b on 10.91.2.1:9001.
fn receiver_in_b(ns: &str) -> UdpSocket {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&ns).unwrap();
        let s = UdpSocket::bind("10.91.2.1:9001").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s
    })
    .join()
    .unwrap()
}

fn drain(s: &UdpSocket) -> Vec<(String, SocketAddrV4)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = s.recv_from(&mut buf) {
        let std::net::SocketAddr::V4(from) = from else {
            panic!("v6 sender")
        };
        got.push((String::from_utf8_lossy(&buf[..n]).into_owned(), from));
    }
    got
}

/// a's datagrams (10.91.1.1:4000 → 10.91.1.2:9000, arriving on m0) and the rewrite that
/// sends them from m1 (10.91.2.2:5555) to b (10.91.2.1:9001).
fn nat_flow(m0: u32, m1: u32) -> (FlowKey4, Action) {
    let key = FlowKey4 {
        ifindex: m0,
        proto: 17,
        src: u32::from(Ipv4Addr::new(10, 91, 1, 1)),
        dst: u32::from(Ipv4Addr::new(10, 91, 1, 2)),
        sport: 4000,
        dport: 9000,
    };
    let action = Action {
        out_ifindex: m1,
        macs: [2, 0, 0, 0, 0x0b, 0, 2, 0, 0, 0, 0x0c, 1],
        src: u32::from(Ipv4Addr::new(10, 91, 2, 2)),
        dst: u32::from(Ipv4Addr::new(10, 91, 2, 1)),
        sport: 5555,
        dport: 9001,
    };
    (key, action)
}

/// The line of test `tag` and the indexes of m0 and m1.
fn line_with_middle(tag: &str) -> (Line, u32, u32) {
    let line = Line::new(tag);
    let (m0, m1) = (line.ifindex(1, "m0"), line.ifindex(1, "m1"));
    (line, m0, m1)
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn armed_entries_forward_with_nat_and_pending_ones_hand_up() {
    let (line, m0, m1) = line_with_middle("nat");
    let mid = line.ns[1].clone();
    let mut fp = std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&mid).unwrap();
        let mut fp = FastPath::load(4).unwrap();
        fp.attach("m0").unwrap();
        fp.attach("m1").unwrap();
        fp
    })
    .join()
    .unwrap();
    let (key, action) = nat_flow(m0, m1);
    let rx = receiver_in_b(&line.ns[2]);
    let slot = fp.install(&key, &action).unwrap();
    assert_eq!(fp.len(), 1);

    send_from_a(&line.ns[0], 5);
    assert!(drain(&rx).is_empty(), "a pending entry forwarded");
    let seen = fp.ctl(slot);
    assert_eq!(seen, 5, "pending entry must count the frames it handed up");
    assert_eq!(fp.counters(slot).packets, 0);
    assert!(
        !fp.arm(slot, seen - 1),
        "armed although frames were counted since"
    );
    assert!(fp.arm(slot, seen));
    assert!(fp.is_active(slot));
    assert_ne!(fp.ctl(slot) & ACTIVE, 0);

    send_from_a(&line.ns[0], 20);
    let got = drain(&rx);
    assert_eq!(
        got.len(),
        20,
        "b's kernel accepted every rewritten datagram: {got:?}"
    );
    for (i, (text, from)) in got.iter().enumerate() {
        assert_eq!(text, &format!("datagram {i}"), "order and payload");
        assert_eq!(*from, SocketAddrV4::new(Ipv4Addr::new(10, 91, 2, 2), 5555));
    }
    let c = fp.counters(slot);
    assert_eq!(c.packets, 20);
    assert_eq!(
        c.bytes,
        20 * (14 + 28)
            + (0..20)
                .map(|i| format!("datagram {i}").len() as u64)
                .sum::<u64>()
    );
    assert!(c.last_ns > 0);

    fp.remove(&key, slot);
    assert!(fp.is_empty());
    send_from_a(&line.ns[0], 3);
    assert!(drain(&rx).is_empty(), "a removed entry forwarded");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_full_table_says_so() {
    let mut fp = FastPath::load(2).unwrap();
    let action = Action {
        out_ifindex: 1,
        macs: [0; 12],
        src: 1,
        dst: 2,
        sport: 3,
        dport: 4,
    };
    let k = |p| FlowKey4 {
        ifindex: 1,
        proto: 6,
        src: 1,
        dst: 2,
        sport: p,
        dport: 80,
    };
    let a = fp.install(&k(1), &action).unwrap();
    fp.install(&k(2), &action).unwrap();
    assert!(matches!(
        fp.install(&k(3), &action),
        Err(nfx_fastpath::InstallError::Full)
    ));
    fp.remove(&k(1), a);
    assert!(
        matches!(
            fp.install(&k(3), &action),
            Err(nfx_fastpath::InstallError::Full)
        ),
        "slot reused inside its grace period"
    );
    std::thread::sleep(Duration::from_millis(250));
    fp.install(&k(3), &action).unwrap();
    assert_eq!(fp.len(), 2);
}

/// Takes frames from `port` until it has taken `want` or a second has passed.
fn take(port: &mut AfPacketPort, want: u64) {
    let mut vec = PacketVector::new(64, PacketBuf::GSO_CAPACITY);
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while port.counters().rx_taken < want && std::time::Instant::now() < deadline {
        let n = port.recv(vec.slots_mut()).unwrap();
        port.release(&mut vec.slots_mut()[..n]);
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn deliveries_to_the_port_socket_are_counted_from_its_first_frame() {
    let (line, m0, m1) = line_with_middle("count");
    let (mid, a) = (line.ns[1].clone(), line.ns[0].clone());
    // Bound, so that b answers the redirected datagrams with no ICMP error onto m1.
    let rx = receiver_in_b(&line.ns[2]);
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&mid).unwrap();
        let mut fp = FastPath::load(4).unwrap();
        assert_eq!(fp.register("m0").unwrap(), 0);
        assert_eq!(fp.register("m1").unwrap(), 1);
        assert_eq!(fp.register("m0").unwrap(), 0, "registering twice");
        assert!(fp.register("nosuch0").is_err());
        let opts = AfPacketOptions {
            fast_path: true,
            rx_ring: Some(64),
            rx_slot: nfx_io::ring::GSO_SLOT,
            rx_in_place: true,
            socket_filter: Some(fp.socket_filter().unwrap()),
            ..AfPacketOptions::default()
        };
        let mut port = AfPacketPort::open("m0", opts).unwrap();

        // Before the tc program is attached: offered to the socket, never handed up.
        send_from_a(&a, 3);
        let d = fp.delivery(0);
        assert_eq!((d.handed_up, d.arrived, d.offered), (0, 0, 3));
        assert!(!fp.delivered(0, 0), "three frames wait in the socket");
        take(&mut port, 3);
        assert_eq!(port.counters().rx_taken, 3);
        assert!(fp.delivered(0, 3));

        // Attached: the flow's entry pending (frames handed up and counted), then armed
        // (frames redirected, not counted).
        fp.attach("m0").unwrap();
        fp.attach("m1").unwrap();
        let (key, action) = nat_flow(m0, m1);
        let slot = fp.install(&key, &action).unwrap();
        send_from_a(&a, 2);
        assert_eq!(fp.ctl(slot), 2);
        let d = fp.delivery(0);
        assert_eq!((d.handed_up, d.arrived, d.offered), (2, 2, 5));
        assert!(fp.arm(slot, 2));
        send_from_a(&a, 4);
        assert_eq!(
            fp.counters(slot).packets,
            4,
            "the armed flow was redirected"
        );
        assert_eq!(fp.delivery(0), d, "redirected frames are not handed up");
        assert!(!fp.delivered(0, 3), "two frames still in the socket");
        take(&mut port, 5);
        assert!(fp.delivered(0, 5));
        assert!(!fp.delivered(0, 4));
        assert_eq!(fp.delivery(1), Default::default(), "nothing arrived on m1");
    })
    .join()
    .unwrap();
    assert_eq!(drain(&rx).len(), 4);
}
