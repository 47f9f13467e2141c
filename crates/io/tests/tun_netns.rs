//! TUN port in a namespace made by this test: packets the kernel routes into the TUN
//! arrive as parseable frames (synthetic Ethernet header), and a packet written into it
//! reaches the kernel, which answers (ICMP echo) through it.

use nfx_io::{Port, TunPort};
use nfx_packet::{parse, Direction, Packet, PacketBuf, PacketVector};
use std::process::Command;
use std::time::{Duration, Instant};

struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn recv_one(
    port: &mut TunPort,
    v: &mut PacketVector,
    want: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let n = port.recv(v.slots_mut()).unwrap();
        v.set_len(n, Direction::Forward, false);
        if let Some(p) = v.packets().iter().find(|p| want(p.buf.frame())) {
            return Some(p.buf.frame().to_vec());
        }
        std::thread::yield_now();
    }
    None
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn tun_carries_packets_both_ways() {
    let ns = Ns(format!("nfxio-tun-{}", std::process::id()));
    ip(&["netns", "add", &ns.0]);
    let name = ns.0.clone();
    std::thread::spawn(move || {
        nfx_io::netns::enter_netns(&name).unwrap();
        let mut port = TunPort::open("nfxtun0", 32).unwrap();
        ip(&["-n", &name, "addr", "add", "10.77.0.1/24", "dev", "nfxtun0"]);
        let mut v = PacketVector::new(32, PacketBuf::GSO_CAPACITY);

        let s = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
        s.send_to(b"into the tunnel", "10.77.0.2:9").unwrap();
        let f = recv_one(&mut port, &mut v, |f| {
            parse(f).is_ok_and(|m| m.key.proto == 17)
        })
        .expect("UDP packet from the kernel");
        let m = parse(&f).unwrap();
        assert_eq!(m.key.dst, u32::from_be_bytes([10, 77, 0, 2]));
        assert_eq!(m.key.dport, 9);
        assert_eq!(&f[m.payload..m.ip_end], b"into the tunnel");

        let b = etherparse::PacketBuilder::ethernet2([0; 6], [0; 6])
            .ipv4([10, 77, 0, 2], [10, 77, 0, 1], 64)
            .icmpv4_echo_request(7, 1);
        let mut echo = Vec::new();
        b.write(&mut echo, b"ping").unwrap();
        let mut pkts = vec![Packet::new(
            PacketBuf::from_frame(&echo),
            Direction::Reverse,
        )];
        assert_eq!(port.send(&mut pkts), 1);
        let reply = recv_one(&mut port, &mut v, |f| {
            parse(f).is_ok_and(|m| m.key.proto == 1 && m.icmp_type == 0)
        })
        .expect("echo reply from the kernel");
        assert_eq!(
            parse(&reply).unwrap().key.dst,
            u32::from_be_bytes([10, 77, 0, 2])
        );
        assert_eq!(port.counters().tx_packets, 1);
        assert!(port.counters().rx_packets >= 2);
    })
    .join()
    .unwrap();
}
