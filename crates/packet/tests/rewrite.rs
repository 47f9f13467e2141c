//! Header rewriting checked against an independent parser (etherparse): every
//! rewritten packet must carry exactly the checksums a full recomputation gives.

mod common;

use common::{packet, ping, tcp, udp, verify};
use etherparse::{Icmpv4Type, NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};
use nfx_packet::checksum::{checksum, pseudo_header_sum};
use nfx_packet::rewrite::{decrement_ttl, set_addr, set_inner, set_macs, set_port, End};
use nfx_packet::{parse, DropReason, Packet, VnetHdr};
use proptest::prelude::*;

fn ip(a: [u8; 4]) -> u32 {
    u32::from_be_bytes(a)
}

fn addrs(h: &PacketHeaders<'_>) -> ([u8; 4], [u8; 4]) {
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
        panic!("not ipv4")
    };
    (ip.source, ip.destination)
}

fn ports(h: &PacketHeaders<'_>) -> (u16, u16) {
    match &h.transport {
        Some(TransportHeader::Tcp(t)) => (t.source_port, t.destination_port),
        Some(TransportHeader::Udp(u)) => (u.source_port, u.destination_port),
        _ => panic!("no ports"),
    }
}

#[test]
fn tcp_snat_and_dnat_rewrite_keeps_checksums_valid() {
    let mut p = packet(&tcp(
        [10, 0, 0, 1],
        [10, 0, 1, 2],
        40000,
        80,
        0x12,
        b"hello",
    ));
    set_addr(&mut p, End::Src, ip([192, 0, 2, 7]));
    set_port(&mut p, End::Src, 1024);
    set_addr(&mut p, End::Dst, ip([198, 51, 100, 9]));
    set_port(&mut p, End::Dst, 8080);
    let h = verify(p.buf.frame());
    assert_eq!(addrs(&h), ([192, 0, 2, 7], [198, 51, 100, 9]));
    assert_eq!(ports(&h), (1024, 8080));
    assert_eq!(
        parse(p.buf.frame()).unwrap().key,
        p.meta.key,
        "meta follows the bytes"
    );
}

#[test]
fn udp_rewrite_keeps_checksum_valid_and_zero_stays_zero() {
    let mut p = packet(&udp([10, 0, 0, 1], [10, 0, 1, 2], 5000, 53, b"query"));
    set_addr(&mut p, End::Src, ip([203, 0, 113, 1]));
    set_port(&mut p, End::Src, 60000);
    verify(p.buf.frame());

    let mut f = udp([10, 0, 0, 1], [10, 0, 1, 2], 5000, 53, b"query");
    let m = parse(&f).unwrap();
    f[m.l4 + 6] = 0;
    f[m.l4 + 7] = 0;
    let mut p = packet(&f);
    set_addr(&mut p, End::Src, ip([203, 0, 113, 1]));
    set_port(&mut p, End::Dst, 5353);
    let m = p.meta;
    assert_eq!(
        &p.buf.frame()[m.l4 + 6..m.l4 + 8],
        &[0, 0],
        "UDP checksum 0 means none"
    );
    verify(p.buf.frame());
}

#[test]
fn icmp_echo_id_rewrite() {
    let mut p = packet(&ping([10, 0, 0, 1], [10, 0, 1, 2], 77, b"abcdefgh"));
    set_addr(&mut p, End::Src, ip([192, 0, 2, 1]));
    set_port(&mut p, End::Src, 4242);
    let h = verify(p.buf.frame());
    match h.transport {
        Some(TransportHeader::Icmpv4(i)) => {
            assert!(matches!(i.icmp_type, Icmpv4Type::EchoRequest(e) if e.id == 4242))
        }
        _ => panic!("not icmp"),
    }
    assert_eq!((p.meta.key.sport, p.meta.key.dport), (4242, 4242));
}

#[test]
fn ttl_decrement_and_expiry() {
    let mut p = packet(&tcp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, 0x10, b""));
    decrement_ttl(&mut p).unwrap();
    let h = verify(p.buf.frame());
    let Some(NetHeaders::Ipv4(iph, _)) = &h.net else {
        panic!()
    };
    assert_eq!(iph.time_to_live, 63);
    let mut f = tcp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, 0x10, b"");
    let mut p1 = packet(&f);
    for _ in 0..63 {
        decrement_ttl(&mut p1).unwrap();
    }
    assert_eq!(decrement_ttl(&mut p1), Err(DropReason::TtlExpired));
    f.copy_from_slice(p1.buf.frame());
    verify(&f);
}

#[test]
fn mac_rewrite() {
    let mut p = packet(&udp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, b"x"));
    set_macs(&mut p, [0xaa; 6], [0xbb; 6]);
    assert_eq!(&p.buf.frame()[0..6], &[0xbb; 6]);
    assert_eq!(&p.buf.frame()[6..12], &[0xaa; 6]);
}

/// Turns a full-checksum TCP/UDP packet into what the kernel hands over with
/// CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum.
fn make_partial(p: &mut Packet) {
    let m = p.meta;
    let co = m.l4 + if m.key.proto == 6 { 16 } else { 6 };
    let l4_len = (m.ip_end - m.l4) as u16;
    let ps = pseudo_header_sum(m.key.src, m.key.dst, m.key.proto, l4_len);
    p.buf.frame_mut()[co..co + 2].copy_from_slice(&ps.to_be_bytes());
    p.buf.vnet.flags = VnetHdr::F_NEEDS_CSUM;
    p.buf.vnet.csum_start = m.l4 as u16;
    p.buf.vnet.csum_offset = co as u16 - m.l4 as u16;
}

/// What the NIC (or the kernel's software fallback) does with a partial checksum.
fn complete_partial(frame: &mut [u8], p: &Packet) {
    let m = p.meta;
    let co = usize::from(p.buf.vnet.csum_start + p.buf.vnet.csum_offset);
    let c = checksum(&frame[m.l4..m.ip_end]);
    let c = if c == 0 && m.key.proto == 17 {
        0xffff
    } else {
        c
    };
    frame[co..co + 2].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn partial_checksum_rewrite_completes_to_valid_checksum() {
    for frame in [
        tcp(
            [10, 0, 0, 1],
            [10, 0, 1, 2],
            40000,
            5201,
            0x10,
            &[7u8; 1000],
        ),
        udp([10, 0, 0, 1], [10, 0, 1, 2], 40000, 5201, &[9u8; 333]),
    ] {
        let mut p = packet(&frame);
        make_partial(&mut p);
        set_addr(&mut p, End::Src, ip([10, 200, 2, 100]));
        set_port(&mut p, End::Src, 1999);
        set_addr(&mut p, End::Dst, ip([172, 16, 0, 1]));
        let m = p.meta;
        let co = m.l4 + if m.key.proto == 6 { 16 } else { 6 };
        let expect = pseudo_header_sum(m.key.src, m.key.dst, m.key.proto, (m.ip_end - m.l4) as u16);
        let got = u16::from_be_bytes([p.buf.frame()[co], p.buf.frame()[co + 1]]);
        assert_eq!(got, expect, "partial field = new pseudo-header sum");
        let mut out = p.buf.frame().to_vec();
        complete_partial(&mut out, &p);
        verify(&out);
    }
}

/// An ICMP port-unreachable quoting a whole UDP datagram sent from `inner_src`.
fn icmp_unreachable(outer_src: [u8; 4], outer_dst: [u8; 4], inner: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(outer_src, outer_dst, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut v, inner)
        .unwrap();
    v
}

#[test]
fn icmp_error_inner_rewrite() {
    let inner_udp = udp([192, 0, 2, 100], [10, 0, 3, 2], 1024, 53, b"q");
    let inner_tcp = tcp([192, 0, 2, 100], [10, 0, 3, 2], 1024, 80, 0x02, b"");
    for inner in [inner_udp, inner_tcp] {
        let f = icmp_unreachable([10, 0, 3, 2], [192, 0, 2, 100], &inner[14..]);
        let mut p = packet(&f);
        assert!(p.meta.has_inner());
        assert_eq!(p.meta.inner_key.src, ip([192, 0, 2, 100]));
        assert_eq!(p.meta.inner_key.sport, 1024);
        set_addr(&mut p, End::Dst, ip([10, 0, 0, 1]));
        set_inner(&mut p, End::Src, ip([10, 0, 0, 1]), 40000);
        verify(p.buf.frame());
        let inner_bytes = &p.buf.frame()[p.meta.inner_l3..];
        let ih = PacketHeaders::from_ip_slice(inner_bytes).unwrap();
        let Some(NetHeaders::Ipv4(iph, _)) = &ih.net else {
            panic!()
        };
        assert_eq!(iph.source, [10, 0, 0, 1]);
        assert_eq!(iph.header_checksum, iph.calc_header_checksum());
        let payload = ih.payload.slice();
        match &ih.transport {
            Some(TransportHeader::Udp(u)) => {
                assert_eq!(u.source_port, 40000);
                assert_eq!(u.checksum, u.calc_checksum_ipv4(iph, payload).unwrap());
            }
            Some(TransportHeader::Tcp(t)) => {
                assert_eq!(t.source_port, 40000);
                assert_eq!(t.checksum, t.calc_checksum_ipv4(iph, payload).unwrap());
            }
            _ => panic!("inner transport"),
        }
        assert_eq!(parse(p.buf.frame()).unwrap().inner_key, p.meta.inner_key);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn incremental_rewrite_equals_full_recompute(
        proto in 0u8..3, src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        sport in any::<u16>(), dport in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        new_src in any::<u32>(), new_dst in any::<u32>(),
        new_sport in any::<u16>(), new_dport in any::<u16>(),
        partial in any::<bool>(),
    ) {
        let frame = match proto {
            0 => tcp(src, dst, sport, dport, 0x10, &payload),
            1 => udp(src, dst, sport, dport, &payload),
            _ => ping(src, dst, sport, &payload),
        };
        let mut p = packet(&frame);
        let partial = partial && proto != 2;
        if partial {
            make_partial(&mut p);
        }
        set_addr(&mut p, End::Src, new_src);
        set_port(&mut p, End::Src, new_sport);
        set_addr(&mut p, End::Dst, new_dst);
        set_port(&mut p, End::Dst, new_dport);
        decrement_ttl(&mut p).unwrap();
        let mut out = p.buf.frame().to_vec();
        if partial {
            complete_partial(&mut out, &p);
        }
        verify(&out);
        let m = parse(&out).unwrap();
        prop_assert_eq!(m.key, p.meta.key);
        prop_assert_eq!(m.key.src, new_src);
        prop_assert_eq!(m.key.dst, new_dst);
    }
}
