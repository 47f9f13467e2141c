//! Packet builders and an independent checksum verifier (etherparse) for the tests.
#![allow(dead_code)]

use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};
use nfx_packet::{parse, Direction, Packet, PacketBuf};

/// Builds an Ethernet/IPv4/TCP frame with valid checksums.
pub fn tcp(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 65535);
    if flags & 0x02 != 0 {
        b = b.syn();
    }
    if flags & 0x10 != 0 {
        b = b.ack(1);
    }
    if flags & 0x01 != 0 {
        b = b.fin();
    }
    if flags & 0x04 != 0 {
        b = b.rst();
    }
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// Builds an Ethernet/IPv4/UDP frame with a valid checksum.
pub fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

/// Builds an Ethernet/IPv4/ICMP echo request frame.
pub fn ping(src: [u8; 4], dst: [u8; 4], id: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .icmpv4_echo_request(id, 1)
        .write(&mut v, payload)
        .unwrap();
    v
}

/// Wraps a frame as a parsed packet.
pub fn packet(frame: &[u8]) -> Packet {
    let mut p = Packet::new(PacketBuf::from_frame(frame), Direction::Forward);
    p.meta = parse(frame).expect("test frame parses");
    p
}

/// Checks the IPv4 header checksum and the L4 checksum of `frame` with etherparse,
/// recomputing both independently. Returns the parsed headers for field checks.
pub fn verify(frame: &[u8]) -> PacketHeaders<'_> {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses");
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
        panic!("not ipv4")
    };
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "ip checksum");
    let payload = h.payload.slice();
    match &h.transport {
        Some(TransportHeader::Tcp(t)) => {
            assert_eq!(
                t.checksum,
                t.calc_checksum_ipv4(ip, payload).unwrap(),
                "tcp checksum"
            )
        }
        // A UDP checksum of 0 means "none".
        Some(TransportHeader::Udp(u)) if u.checksum != 0 => {
            assert_eq!(
                u.checksum,
                u.calc_checksum_ipv4(ip, payload).unwrap(),
                "udp checksum"
            )
        }
        Some(TransportHeader::Icmpv4(i)) => {
            assert_eq!(
                i.checksum,
                i.icmp_type.calc_checksum(payload),
                "icmp checksum"
            )
        }
        _ => {}
    }
    h
}
