//! Test packets for the DPI and elephant tests: built with `etherparse` (an
//! independent encoder) and parsed with `nfx_packet::parse`, as the dataplane does.

use crate::{EventSink, Node, NodeCtx};
use etherparse::PacketBuilder;
use nfx_packet::{parse, Direction, Packet, PacketBuf, VnetHdr};

const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Test addresses 10.0.0.1 → 10.0.0.2.
pub const SRC: [u8; 4] = [10, 0, 0, 1];
/// See [`SRC`].
pub const DST: [u8; 4] = [10, 0, 0, 2];

fn finish(frame: Vec<u8>) -> Packet {
    let mut p = Packet::new(PacketBuf::from_frame(&frame), Direction::Forward);
    p.meta = parse(p.buf.frame()).expect("test frame parses");
    p
}

/// A TCP segment with ACK|PSH (plus `extra_flags`: "syn", "fin", "rst").
pub fn tcp(sport: u16, dport: u16, seq: u32, extra: &str, payload: &[u8]) -> Packet {
    let mut b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4(SRC, DST, 64)
        .tcp(sport, dport, seq, 65535)
        .ack(1)
        .psh();
    match extra {
        "syn" => b = b.syn(),
        "fin" => b = b.fin(),
        "rst" => b = b.rst(),
        _ => {}
    }
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("tcp frame builds");
    finish(v)
}

/// A UDP datagram from port `sport` to `dport`.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Packet {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4(SRC, DST, 64)
        .udp(sport, dport);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("udp frame builds");
    finish(v)
}

/// A UDP datagram from an arbitrary source address (for floods of distinct flows).
pub fn udp_from(src: [u8; 4], sport: u16, payload: &[u8]) -> Packet {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4(src, DST, 64)
        .udp(sport, 9);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("udp frame builds");
    finish(v)
}

/// An ICMP echo request as `ping` sends it (56 data bytes, 84 IP bytes).
pub fn ping(id: u16, seq: u16) -> Packet {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4(SRC, DST, 64)
        .icmpv4_echo_request(id, seq);
    let data = [0x42u8; 56];
    let mut v = Vec::with_capacity(b.size(data.len()));
    b.write(&mut v, &data).expect("icmp frame builds");
    finish(v)
}

/// Marks a TCP packet as a GSO super-packet of `gso_size`-byte segments.
pub fn as_gso(mut p: Packet, gso_size: u16) -> Packet {
    p.buf.vnet = VnetHdr {
        gso_type: VnetHdr::GSO_TCPV4,
        gso_size,
        hdr_len: p.meta.payload as u16,
        ..VnetHdr::default()
    };
    p
}

/// Runs `node` over `pkts` at `now_ns`; returns the events raised (as JSON values).
pub fn run(node: &mut dyn Node, pkts: &mut [Packet], now_ns: u64) -> Vec<serde_json::Value> {
    let mut sink = EventSink::default();
    let mut ctx = NodeCtx {
        now_ns,
        events: &mut sink,
    };
    node.process(pkts, &mut ctx);
    sink.drain()
        .map(|e| serde_json::to_value(&e).expect("event serializes"))
        .collect()
}
