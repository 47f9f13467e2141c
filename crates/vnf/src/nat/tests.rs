//! NAT node tests: translations checked by etherparse, port allocation, port
//! forwarding, ICMP, release, timeouts, table-full behaviour and state migration.

use super::*;
use crate::testutil::*;
use crate::SkipReason;
use nfx_packet::Direction::{Forward as F, Reverse as R};

const IN: &str = "10.200.1.1";
const IN2: &str = "10.200.1.7";
pub(super) const REM: &str = "10.200.3.2";
pub(super) const PUB: &str = "10.200.2.100";

/// A source NAT to PUB with ports `lo..=hi` for `max` mappings.
pub(super) fn nat(lo: u16, hi: u16, max: usize) -> Nat {
    Nat::new(
        "nat",
        Some(Snat {
            public_ip: ip(PUB),
            lo,
            hi,
        }),
        vec![],
        max,
        Timeouts::default(),
    )
}

/// Sends and returns (drop, (src, sport, dst, dport)) after checking checksums.
fn go(
    n: &mut Nat,
    frame: &[u8],
    dir: Direction,
    now: u64,
) -> (Option<DropReason>, (u32, u16, u32, u16)) {
    let p = send(n, frame, dir, now);
    let k = p.meta.key;
    if p.drop.is_none() {
        assert_eq!(
            verify(p.buf.frame()),
            (k.src, k.sport, k.dst, k.dport),
            "meta follows bytes"
        );
    }
    (p.drop, (k.src, k.sport, k.dst, k.dport))
}

#[test]
fn snat_keeps_port_and_translates_replies() {
    let mut n = nat(1024, 65535, 100);
    let (d, k) = go(&mut n, &tcp(IN, 40000, REM, 80, 0x02, b""), F, 1);
    assert_eq!(d, None);
    assert_eq!(k, (ip(PUB), 40000, ip(REM), 80));
    let (d, k) = go(&mut n, &tcp(REM, 80, PUB, 40000, 0x12, b""), R, 2);
    assert_eq!(d, None);
    assert_eq!(k, (ip(REM), 80, ip(IN), 40000));
    let (_, k) = go(&mut n, &tcp(IN, 40000, REM, 80, 0x10, b"data data"), F, 3);
    assert_eq!(k.1, 40000);
    assert_eq!(n.mappings(), 1);
    assert_eq!(n.stats()["snat_created"], 1);
}

#[test]
fn port_collisions_and_ranges() {
    let mut n = nat(2000, 2002, 100);
    let (_, a) = go(&mut n, &udp(IN, 2000, REM, 53, b"q"), F, 1);
    assert_eq!(a.1, 2000, "original port kept when free");
    let (_, b) = go(&mut n, &udp(IN2, 2000, REM, 53, b"q"), F, 1);
    assert_ne!(b.1, 2000, "same remote endpoint: next free port");
    assert!((2000..=2002).contains(&b.1));
    let (_, c) = go(&mut n, &udp(IN2, 2000, REM, 54, b"q"), F, 1);
    assert_eq!(
        c.1, 2000,
        "another remote port: the original port is free there"
    );
    let (_, d) = go(&mut n, &udp(IN, 80, REM, 53, b"q"), F, 1);
    assert!(
        (2000..=2002).contains(&d.1),
        "port outside the range is remapped"
    );
    // Every port of the range taken towards REM:53 → no port.
    let (e, _) = go(&mut n, &udp("10.200.1.9", 2001, REM, 53, b"q"), F, 1);
    assert_eq!(e, Some(DropReason::NatNoPort));
    // Protocols have separate spaces.
    let (_, t) = go(&mut n, &tcp(IN2, 2000, REM, 53, 0x02, b""), F, 1);
    assert_eq!(t.1, 2000);
    // Replies reach the right inside hosts.
    assert_eq!(
        go(&mut n, &udp(REM, 53, PUB, b.1, b"a"), R, 2).1,
        (ip(REM), 53, ip(IN2), 2000)
    );
    assert_eq!(
        go(&mut n, &udp(REM, 53, PUB, 2000, b"a"), R, 2).1,
        (ip(REM), 53, ip(IN), 2000)
    );
}

#[test]
fn sharded_nat_hands_out_only_its_residue_class() {
    for (index, count) in [(0, 2), (1, 2), (2, 3)] {
        let mut n = nat(5000, 5999, 1000);
        assert_eq!(Node::shard(&mut n, index, count), Ok(true));
        for i in 0..20u16 {
            // Inside ports of both classes, in and out of the range.
            for sport in [5000 + i, 40000 + i] {
                let (d, k) = go(&mut n, &tcp(IN, sport, REM, 80, 0x02, b""), F, 1);
                assert_eq!(d, None);
                assert_eq!(usize::from(k.1) % count, index, "port {} for {sport}", k.1);
                let (d, back) = go(&mut n, &tcp(REM, 80, PUB, k.1, 0x12, b""), R, 2);
                assert_eq!((d, back.3), (None, sport));
            }
        }
        let p = send(&mut n, &icmp_echo(IN, REM, 7, false), F, 1);
        assert_eq!(usize::from(p.meta.key.sport) % count, index);
    }
    // The residue class runs out before the range does.
    let mut n = nat(6000, 6003, 100);
    assert_eq!(Node::shard(&mut n, 1, 2), Ok(true));
    for i in 0..2 {
        assert_eq!(go(&mut n, &udp(IN, 7000 + i, REM, 53, b"q"), F, 1).0, None);
    }
    let (d, _) = go(&mut n, &udp(IN, 7002, REM, 53, b"q"), F, 1);
    assert_eq!(d, Some(DropReason::NatNoPort));
}

#[test]
fn sharding_refuses_port_forwards_and_tiny_ranges() {
    let mut n = nat(6000, 6000, 10);
    assert!(Node::shard(&mut n, 0, 2)
        .unwrap_err()
        .contains("fewer than the workers"));
    assert_eq!(Node::shard(&mut n, 0, 1), Ok(true));
    let mut d = Nat::new(
        "nat",
        None,
        vec![Dnat {
            proto: 6,
            public_ip: ip(PUB),
            public_port: 8080,
            to_ip: ip(IN),
            to_port: 80,
        }],
        10,
        Timeouts::default(),
    );
    assert!(Node::shard(&mut d, 1, 2).unwrap_err().contains("dnat"));
    assert_eq!(Node::shard(&mut d, 0, 1), Ok(false));
}

#[test]
fn icmp_echo_id_translation() {
    let mut n = nat(30000, 30010, 100);
    let p = send(&mut n, &icmp_echo(IN, REM, 7, false), F, 1);
    assert_eq!(p.drop, None);
    verify(p.buf.frame());
    let id = p.meta.key.sport;
    assert!((30000..=30010).contains(&id));
    assert_eq!(p.meta.key.src, ip(PUB));
    let r = send(&mut n, &icmp_echo(REM, PUB, id, true), R, 2);
    assert_eq!(r.drop, None);
    verify(r.buf.frame());
    assert_eq!((r.meta.key.dst, r.meta.key.dport), (ip(IN), 7));
}

#[test]
fn unsolicited_inbound() {
    let mut n = nat(1024, 65535, 100);
    assert_eq!(
        go(&mut n, &udp(REM, 53, PUB, 5000, b"x"), R, 1).0,
        Some(DropReason::NatNoMapping)
    );
    // Not addressed to a public address: not NAT's business.
    assert_eq!(go(&mut n, &udp(REM, 53, IN, 5000, b"x"), R, 1).0, None);
}

#[test]
fn dnat_port_forward() {
    let d = Dnat {
        proto: 6,
        public_ip: ip(PUB),
        public_port: 8080,
        to_ip: ip(IN),
        to_port: 80,
    };
    let mut n = Nat::new(
        "nat",
        Some(Snat {
            public_ip: ip(PUB),
            lo: 8000,
            hi: 8080,
        }),
        vec![d],
        100,
        Timeouts::default(),
    );
    let (drop, k) = go(&mut n, &tcp(REM, 5555, PUB, 8080, 0x02, b""), R, 1);
    assert_eq!(drop, None);
    assert_eq!(k, (ip(REM), 5555, ip(IN), 80));
    let (drop, k) = go(&mut n, &tcp(IN, 80, REM, 5555, 0x12, b""), F, 2);
    assert_eq!(drop, None);
    assert_eq!(k, (ip(PUB), 8080, ip(REM), 5555));
    assert_eq!(n.stats()["dnat_created"], 1);
    // SNAT never hands out the forwarded port.
    let (_, k) = go(&mut n, &tcp(IN2, 8080, REM, 5555, 0x02, b""), F, 3);
    assert_ne!(k.1, 8080);
    // UDP to the forwarded TCP port is not forwarded.
    assert_eq!(
        go(&mut n, &udp(REM, 1, PUB, 8080, b""), R, 3).0,
        Some(DropReason::NatNoMapping)
    );
}

#[test]
fn icmp_errors_follow_the_mapping() {
    let mut n = nat(1024, 65535, 100);
    let q = udp(IN, 4000, REM, 53, b"query");
    let sent = send(&mut n, &q, F, 1);
    let err = icmp_unreachable(REM, PUB, sent.buf.frame());
    let p = send(&mut n, &err, R, 2);
    assert_eq!(p.drop, None);
    verify(p.buf.frame());
    assert_eq!(p.meta.key.dst, ip(IN));
    assert_eq!(
        (p.meta.inner_key.src, p.meta.inner_key.sport),
        (ip(IN), 4000)
    );
    let other = icmp_unreachable(REM, PUB, &udp(PUB, 4001, REM, 53, b"q"));
    assert_eq!(
        send(&mut n, &other, R, 2).drop,
        Some(DropReason::NatNoMapping)
    );
}

#[test]
fn release_on_rst_fin_and_idle() {
    let mut n = nat(1024, 65535, 100);
    go(&mut n, &tcp(IN, 40001, REM, 80, 0x02, b""), F, SEC);
    go(&mut n, &tcp(REM, 80, PUB, 40001, 0x12, b""), R, SEC);
    go(&mut n, &tcp(IN, 40001, REM, 80, 0x04, b""), F, 2 * SEC);
    n.expire(11 * SEC);
    assert_eq!(n.mappings(), 1, "closing mappings linger tcp_close (10 s)");
    n.expire(13 * SEC);
    assert_eq!(n.mappings(), 0);
    go(&mut n, &tcp(IN, 40002, REM, 80, 0x02, b""), F, 20 * SEC);
    go(&mut n, &tcp(REM, 80, PUB, 40002, 0x12, b""), R, 20 * SEC);
    go(&mut n, &tcp(IN, 40002, REM, 80, 0x11, b""), F, 21 * SEC);
    n.expire(100 * SEC);
    assert_eq!(n.mappings(), 1, "one FIN is not a close");
    go(&mut n, &tcp(REM, 80, PUB, 40002, 0x11, b""), R, 101 * SEC);
    n.expire(112 * SEC);
    assert_eq!(n.mappings(), 0, "FIN both ways releases");
    // Idle UDP: 30 s unanswered.
    go(&mut n, &udp(IN, 40003, REM, 53, b""), F, 200 * SEC);
    n.expire(229 * SEC);
    assert_eq!(n.mappings(), 1);
    n.expire(231 * SEC);
    assert_eq!(n.mappings(), 0);
    assert_eq!(n.table.len(), 0, "both entries of every mapping are gone");
}

#[test]
fn table_full_evicts_unanswered_then_refuses() {
    let mut n = nat(1024, 65535, 1);
    assert_eq!(go(&mut n, &udp(IN, 40001, REM, 53, b""), F, 1).0, None);
    assert_eq!(
        go(&mut n, &udp(IN, 40002, REM, 53, b""), F, 2).0,
        None,
        "unanswered mapping evicted"
    );
    assert_eq!(n.mappings(), 1);
    assert_eq!(n.table.len(), 2);
    assert_eq!(n.stats()["evicted"], 1);
    assert_eq!(go(&mut n, &udp(REM, 53, PUB, 40002, b""), R, 3).0, None);
    assert_eq!(
        go(&mut n, &udp(IN, 40003, REM, 53, b""), F, 4).0,
        Some(DropReason::TableFull)
    );
    assert_eq!(n.table.len(), 2, "a failed insert leaves no half mapping");
}

#[test]
fn one_million_mappings_fit() {
    let mut n = nat(1024, 65535, 1_000_000);
    for i in 0..1_000_000u32 {
        let m = Mapping {
            proto: 17,
            inside: (0x0a00_0000 + i, 5000),
            public: (ip(PUB), 5000),
            remote: (0x0b00_0000 + i, 53),
        };
        assert!(n.insert_mapping(&m, 0, SEC, false).is_ok(), "mapping {i}");
        n.count(&m, false, 0);
    }
    assert_eq!(n.mappings(), 1_000_000);
    let bpf = n.stats()["bytes_per_flow"].as_u64().unwrap();
    assert!(bpf <= 120, "{bpf} bytes per mapping");
}

#[test]
fn export_import_keeps_mappings() {
    let mut a = nat(1024, 65535, 100);
    go(&mut a, &udp(IN, 2000, REM, 53, b"q"), F, SEC);
    let (_, k2) = go(&mut a, &udp(IN2, 2000, REM, 53, b"q"), F, SEC);
    go(&mut a, &tcp(IN, 40000, REM, 80, 0x02, b""), F, SEC);
    go(&mut a, &tcp(REM, 80, PUB, 40000, 0x12, b""), R, SEC);
    let mut blob = Vec::new();
    assert_eq!(a.export_state(&mut blob), 3);
    assert_eq!(
        blob.len(),
        crate::table::blob::HEADER_LEN + 3 * state::RECORD_LEN
    );
    let mut b = nat(1024, 65535, 100);
    assert_eq!(b.import_state(&blob), Ok(3));
    // Mid-connection: the reply goes to the same inside host, the forward keeps its port.
    assert_eq!(
        go(&mut b, &udp(REM, 53, PUB, k2.1, b"a"), R, 50 * SEC).1,
        (ip(REM), 53, ip(IN2), 2000)
    );
    assert_eq!(
        go(&mut b, &tcp(IN, 40000, REM, 80, 0x10, b"x"), F, 50 * SEC).1,
        (ip(PUB), 40000, ip(REM), 80)
    );
    assert_eq!(
        go(&mut b, &tcp(REM, 80, PUB, 40000, 0x10, b""), R, 50 * SEC).1,
        (ip(REM), 80, ip(IN), 40000)
    );
    let again = b.import_report(&blob).unwrap();
    assert_eq!(
        (again.imported, again.skipped(SkipReason::Duplicate)),
        (0, 3)
    );
    assert_eq!(b.mappings(), 3);
}

#[test]
fn import_refuses_unreadable_blobs_whole_and_skips_bad_records() {
    let mut a = nat(1024, 65535, 100);
    for p in 0..4 {
        go(&mut a, &udp(IN, 3000 + p, REM, 53, b"q"), F, 1);
    }
    let mut blob = Vec::new();
    a.export_state(&mut blob);
    let mut fw_blob = blob.clone();
    fw_blob[5] = 1;
    assert!(matches!(
        nat(1024, 65535, 10).import_state(&fw_blob),
        Err(StateError::WrongKind { .. })
    ));
    let mut small = nat(1024, 65535, 2);
    assert!(matches!(
        small.import_state(&blob[..20]),
        Err(StateError::Malformed(_))
    ));
    // A record with unknown flag bits is left out, the rest come in.
    let mut bad_flags = blob.clone();
    bad_flags[crate::table::blob::HEADER_LEN + 1] = 0x80;
    let mut b = nat(1024, 65535, 10);
    let r = b.import_report(&bad_flags).unwrap();
    assert_eq!((r.imported, r.skipped(SkipReason::Malformed)), (3, 1));
    // Too many mappings for the table: all or nothing.
    assert_eq!(small.import_state(&blob), Err(StateError::TableFull(2)));
    assert_eq!(small.table.len(), 0);
    assert_eq!(small.stats()["remotes"], 0, "no count left behind");
}

mod fuzz {
    use super::*;
    use crate::firewall::acl::Acl;
    use crate::firewall::{Firewall, Timeouts as FwTimeouts};
    use proptest::prelude::*;

    proptest! {
        /// Mutated frames through firewall and NAT in both directions: no panic, and
        /// whatever NAT rewrites still parses with the key it reports.
        #[test]
        fn mutated_frames_through_firewall_and_nat(
            which in 0usize..4, reverse in any::<bool>(),
            flips in proptest::collection::vec((14usize..70, any::<u8>()), 0..4),
        ) {
            let seeds = [
                tcp(IN, 40000, REM, 80, 0x02, b"abc"),
                udp(REM, 53, PUB, 40000, b"q"),
                icmp_echo(IN, REM, 9, false),
                icmp_unreachable(REM, PUB, &udp(PUB, 40000, REM, 53, b"q")),
            ];
            let mut f = seeds[which].clone();
            for (i, b) in flips {
                if i < f.len() {
                    f[i] = b;
                }
            }
            let Ok(meta) = nfx_packet::parse(&f) else { return Ok(()) };
            let dir = if reverse { R } else { F };
            let mut fw = Firewall::new("fw", Acl::new(vec![], true), 64, FwTimeouts::default(), true, true);
            let mut n = nat(1024, 65535, 64);
            go(&mut n, &udp(IN, 40000, REM, 53, b"q"), F, 1);
            let mut p = nfx_packet::Packet::new(nfx_packet::PacketBuf::from_frame(&f), dir);
            p.meta = meta;
            run1(&mut fw, &mut p, 2);
            p.drop = None;
            run1(&mut n, &mut p, 3);
            let again = nfx_packet::parse(p.buf.frame());
            prop_assert!(again.is_ok());
            prop_assert_eq!(again.unwrap().key, p.meta.key);
        }
    }
}
