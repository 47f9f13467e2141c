//! Test helpers: frames built with etherparse, packets, a runner, and an independent
//! checksum check.

use crate::{EventSink, Node, NodeCtx};
use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};
use nfx_packet::{parse, Direction, DropReason, FlowKey, Meta, Packet, PacketBuf};

pub const SEC: u64 = 1_000_000_000;

pub fn ip(s: &str) -> u32 {
    s.parse::<std::net::Ipv4Addr>().unwrap().into()
}

fn b(a: u32) -> [u8; 4] {
    a.to_be_bytes()
}

pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_seq(src, sport, dst, dport, flags, (1, 1), payload)
}

/// A TCP frame with sequence and acknowledgement numbers `(seq, ack)` and a 64000-byte
/// window.
pub fn tcp_seq(
    src: &str,
    sport: u16,
    dst: &str,
    dport: u16,
    flags: u8,
    (seq, ack): (u32, u32),
    payload: &[u8],
) -> Vec<u8> {
    let mut bl = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(b(ip(src)), b(ip(dst)), 64)
        .tcp(sport, dport, seq, 64000);
    if flags & 0x02 != 0 {
        bl = bl.syn();
    }
    if flags & 0x10 != 0 {
        bl = bl.ack(ack);
    }
    if flags & 0x01 != 0 {
        bl = bl.fin();
    }
    if flags & 0x04 != 0 {
        bl = bl.rst();
    }
    let mut v = Vec::new();
    bl.write(&mut v, payload).unwrap();
    v
}

pub fn udp(src: &str, sport: u16, dst: &str, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(b(ip(src)), b(ip(dst)), 64)
        .udp(sport, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

pub fn icmp_echo(src: &str, dst: &str, id: u16, reply: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let bl = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(
        b(ip(src)),
        b(ip(dst)),
        64,
    );
    if reply {
        bl.icmpv4_echo_reply(id, 1).write(&mut v, b"ping").unwrap();
    } else {
        bl.icmpv4_echo_request(id, 1)
            .write(&mut v, b"ping")
            .unwrap();
    }
    v
}

/// An ICMP port unreachable from `from` to `to` quoting `inner` (an Ethernet frame).
pub fn icmp_unreachable(from: &str, to: &str, inner: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(b(ip(from)), b(ip(to)), 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut v, &inner[14..])
        .unwrap();
    v
}

/// Sets a TCP/UDP frame's ports, in the bytes and in `p.meta` (the L4 checksum is
/// left stale: stateful nodes do not check it).
pub fn set_ports(p: &mut Packet, sport: u16, dport: u16) {
    let l4 = p.meta.l4;
    let f = p.buf.frame_mut();
    f[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
    f[l4 + 2..l4 + 4].copy_from_slice(&dport.to_be_bytes());
    p.meta.key.sport = sport;
    p.meta.key.dport = dport;
    p.drop = None;
}

/// Runs a vector through `node` at `now`.
pub fn run_vec(node: &mut dyn Node, pkts: &mut [Packet], now: u64) {
    let mut sink = EventSink::default();
    let mut ctx = NodeCtx {
        now_ns: now,
        events: &mut sink,
    };
    node.process(pkts, &mut ctx);
}

pub fn pkt(frame: &[u8], dir: Direction) -> Packet {
    let mut p = Packet::new(PacketBuf::from_frame(frame), dir);
    p.meta = parse(frame).expect("test frame parses");
    p
}

/// A packet with only its metadata set (nodes that read `meta` only).
pub fn meta_only(key: FlowKey, tcp_flags: u8, dir: Direction) -> Packet {
    let mut p = Packet::new(PacketBuf::with_capacity(0), dir);
    p.meta = Meta {
        key,
        tcp_flags,
        ..Meta::default()
    };
    p
}

/// Runs one packet through `node` at `now`; returns its drop reason.
pub fn run1(node: &mut dyn Node, p: &mut Packet, now: u64) -> Option<DropReason> {
    let mut sink = EventSink::default();
    let mut ctx = NodeCtx {
        now_ns: now,
        events: &mut sink,
    };
    node.process(std::slice::from_mut(p), &mut ctx);
    p.drop
}

/// Sends a frame through `node`; returns the packet after processing.
pub fn send(node: &mut dyn Node, frame: &[u8], dir: Direction, now: u64) -> Packet {
    let mut p = pkt(frame, dir);
    run1(node, &mut p, now);
    p
}

/// Checks IP and L4 checksums with etherparse; returns (src, sport, dst, dport).
pub fn verify(frame: &[u8]) -> (u32, u16, u32, u16) {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses");
    let Some(NetHeaders::Ipv4(iph, _)) = &h.net else {
        panic!("not ipv4")
    };
    assert_eq!(
        iph.header_checksum,
        iph.calc_header_checksum(),
        "ip checksum"
    );
    let payload = h.payload.slice();
    let (sp, dp) = match &h.transport {
        Some(TransportHeader::Tcp(t)) => {
            assert_eq!(
                t.checksum,
                t.calc_checksum_ipv4(iph, payload).unwrap(),
                "tcp checksum"
            );
            (t.source_port, t.destination_port)
        }
        Some(TransportHeader::Udp(u)) => {
            if u.checksum != 0 {
                assert_eq!(
                    u.checksum,
                    u.calc_checksum_ipv4(iph, payload).unwrap(),
                    "udp checksum"
                );
            }
            (u.source_port, u.destination_port)
        }
        Some(TransportHeader::Icmpv4(i)) => {
            assert_eq!(
                i.checksum,
                i.icmp_type.calc_checksum(payload),
                "icmp checksum"
            );
            (0, 0)
        }
        _ => (0, 0),
    };
    (
        u32::from_be_bytes(iph.source),
        sp,
        u32::from_be_bytes(iph.destination),
        dp,
    )
}
