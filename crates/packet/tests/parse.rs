//! Parser behaviour on valid, hostile and unusual frames.

mod common;

use common::{ping, tcp, udp};
use etherparse::PacketBuilder;
use nfx_packet::checksum::checksum;
use nfx_packet::{parse, DropReason};

/// Recomputes the IPv4 header checksum after a test edited the header.
fn fix_ip_checksum(f: &mut [u8], l3: usize) {
    let ihl = usize::from(f[l3] & 0x0f) * 4;
    f[l3 + 10] = 0;
    f[l3 + 11] = 0;
    let c = checksum(&f[l3..l3 + ihl]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Inserts IPv4 options (multiple of 4 bytes) into a frame without VLAN.
fn with_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    let mut f = frame[..34].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&frame[34..]);
    f[14] = 0x40 | ((20 + opts.len()) / 4) as u8;
    let total = u16::from_be_bytes([f[16], f[17]]) + opts.len() as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    fix_ip_checksum(&mut f, 14);
    f
}

#[test]
fn tcp_udp_icmp_keys() {
    let m = parse(&tcp([10, 0, 0, 1], [10, 0, 1, 2], 1234, 80, 0x02, b"x")).unwrap();
    assert_eq!((m.key.src, m.key.dst), (0x0a000001, 0x0a000102));
    assert_eq!((m.key.sport, m.key.dport, m.key.proto), (1234, 80, 6));
    assert_eq!(m.tcp_flags & 0x02, 0x02);
    assert_eq!((m.l3, m.l4, m.payload, m.ip_end), (14, 34, 54, 55));
    let m = parse(&udp([10, 0, 0, 1], [10, 0, 1, 2], 5, 6, b"abc")).unwrap();
    assert_eq!(
        (m.key.sport, m.key.dport, m.key.proto, m.payload),
        (5, 6, 17, 42)
    );
    let m = parse(&ping([10, 0, 0, 1], [10, 0, 1, 2], 99, b"")).unwrap();
    assert_eq!((m.key.sport, m.key.dport, m.icmp_type), (99, 99, 8));
}

#[test]
fn vlan_tags() {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .single_vlan(7.try_into().unwrap())
        .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
        .udp(1, 2)
        .write(&mut v, b"p")
        .unwrap();
    let m = parse(&v).unwrap();
    assert_eq!((m.l3, m.key.dport), (18, 2));
    // QinQ: an 802.1ad tag in front.
    let mut q = v[..12].to_vec();
    q.extend_from_slice(&[0x88, 0xa8, 0, 5]);
    q.extend_from_slice(&v[12..]);
    assert_eq!(parse(&q).unwrap().l3, 22);
    // Three tags are not followed.
    let mut t = q[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00, 0, 6]);
    t.extend_from_slice(&q[12..]);
    assert_eq!(parse(&t), Err(DropReason::NonIp));
    assert_eq!(parse(&v[..16]), Err(DropReason::Truncated));
}

#[test]
fn non_ip_and_short_frames() {
    let mut arp = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(parse(&arp), Err(DropReason::NonIp));
    assert_eq!(parse(&arp[..10]), Err(DropReason::Truncated));
    let f = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"");
    assert_eq!(parse(&f[..30]), Err(DropReason::Truncated));
}

#[test]
fn ip_header_checks() {
    let good = tcp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, 0x10, b"data");
    let mut v6 = good.clone();
    v6[14] = 0x65;
    assert_eq!(parse(&v6), Err(DropReason::BadIpHeader));
    let mut ihl = good.clone();
    ihl[14] = 0x44;
    fix_ip_checksum(&mut ihl, 14);
    assert_eq!(parse(&ihl), Err(DropReason::BadIpHeader));
    let mut long = good.clone();
    long[16..18].copy_from_slice(&2000u16.to_be_bytes());
    fix_ip_checksum(&mut long, 14);
    assert_eq!(parse(&long), Err(DropReason::Truncated));
    let mut short = good.clone();
    short[16..18].copy_from_slice(&10u16.to_be_bytes());
    fix_ip_checksum(&mut short, 14);
    assert_eq!(parse(&short), Err(DropReason::BadIpHeader));
    let mut csum = good.clone();
    csum[24] ^= 0x55;
    assert_eq!(parse(&csum), Err(DropReason::BadIpChecksum));
    let mut ttl = good.clone();
    ttl[22] = 0;
    fix_ip_checksum(&mut ttl, 14);
    assert_eq!(parse(&ttl), Err(DropReason::TtlExpired));
    // Ethernet padding after the IP packet is fine.
    let mut pad = good.clone();
    pad.extend_from_slice(&[0; 20]);
    assert_eq!(parse(&pad).unwrap().ip_end, good.len());
}

#[test]
fn ip_options() {
    let base = udp([10, 0, 0, 1], [10, 0, 1, 2], 7, 8, b"opt");
    // NOP, NOP, router alert (4 bytes): valid.
    let ok = with_options(&base, &[1, 1, 0x94, 4, 0, 0, 0, 0]);
    let m = parse(&ok).unwrap();
    assert_eq!((m.l4, m.key.dport), (42, 8));
    // End-of-list then garbage: valid.
    assert!(parse(&with_options(&base, &[0, 0xff, 0xff, 0xff])).is_ok());
    // Option length 1 and option running past the header: invalid.
    assert_eq!(
        parse(&with_options(&base, &[0x94, 1, 0, 0])),
        Err(DropReason::BadIpHeader)
    );
    assert_eq!(
        parse(&with_options(&base, &[1, 1, 0x94, 9])),
        Err(DropReason::BadIpHeader)
    );
    assert_eq!(
        parse(&with_options(&base, &[1, 1, 1, 0x94])),
        Err(DropReason::BadIpHeader)
    );
}

#[test]
fn fragments() {
    let mut first = udp([10, 0, 0, 1], [10, 0, 1, 2], 7, 8, &[1; 64]);
    first[20] = 0x20; // more fragments, offset 0
    fix_ip_checksum(&mut first, 14);
    let m = parse(&first).unwrap();
    assert!(m.first_fragment);
    assert_eq!(m.key.dport, 8);
    let mut later = first.clone();
    later[20] = 0x00;
    later[21] = 0x08; // offset 64 bytes
    fix_ip_checksum(&mut later, 14);
    assert_eq!(parse(&later), Err(DropReason::Fragment));
    // A first fragment too short for the L4 header cannot be tracked.
    let mut tiny = first[..14 + 20 + 4].to_vec();
    tiny[16..18].copy_from_slice(&24u16.to_be_bytes());
    fix_ip_checksum(&mut tiny, 14);
    assert_eq!(parse(&tiny), Err(DropReason::Fragment));
}

#[test]
fn l4_header_checks() {
    let mut doff = tcp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, 0x10, b"");
    doff[46] = 0x40; // data offset 16 bytes < 20
    assert_eq!(parse(&doff), Err(DropReason::BadL4Header));
    let mut big = tcp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, 0x10, b"");
    big[46] = 0xf0; // 60 bytes > segment
    assert_eq!(parse(&big), Err(DropReason::BadL4Header));
    let mut ulen = udp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, b"abc");
    ulen[38..40].copy_from_slice(&500u16.to_be_bytes());
    assert_eq!(parse(&ulen), Err(DropReason::BadL4Header));
    ulen[38..40].copy_from_slice(&4u16.to_be_bytes());
    assert_eq!(parse(&ulen), Err(DropReason::BadL4Header));
    let mut short = udp([10, 0, 0, 1], [10, 0, 1, 2], 1, 2, b"");
    short.truncate(14 + 20 + 4);
    short[16..18].copy_from_slice(&24u16.to_be_bytes());
    fix_ip_checksum(&mut short, 14);
    assert_eq!(parse(&short), Err(DropReason::BadL4Header));
}

#[test]
fn icmp_error_inner_key() {
    let inner = tcp([192, 0, 2, 100], [10, 0, 3, 2], 1024, 80, 0x02, b"");
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([10, 0, 3, 1], [192, 0, 2, 100], 64)
        .icmpv4(etherparse::Icmpv4Type::TimeExceeded(
            etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit,
        ))
        .write(&mut v, &inner[14..14 + 28])
        .unwrap();
    let m = parse(&v).unwrap();
    assert!(m.has_inner());
    assert_eq!(m.icmp_type, 11);
    assert_eq!((m.inner_l3, m.inner_l4), (42, 62));
    assert_eq!(
        (m.inner_key.src, m.inner_key.sport, m.inner_key.dport),
        (0xc0000264, 1024, 80)
    );
    // Quoting fewer than 8 L4 bytes: still a valid ICMP error, just unrelated.
    let mut w = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([10, 0, 3, 1], [192, 0, 2, 100], 64)
        .icmpv4(etherparse::Icmpv4Type::TimeExceeded(
            etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit,
        ))
        .write(&mut w, &inner[14..14 + 24])
        .unwrap();
    assert!(!parse(&w).unwrap().has_inner());
}
