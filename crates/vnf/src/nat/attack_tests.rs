//! The NAT under attack: an exhausted port pool, floods of new mappings from one
//! source, ICMP errors aimed elsewhere, forged state blobs.

use super::*;
use crate::testutil::*;
use crate::SkipReason;
use nfx_packet::Direction::{Forward as F, Reverse as R};
use proptest::prelude::*;

use super::tests::{nat, PUB, REM};

fn inside(i: u32) -> String {
    std::net::Ipv4Addr::from(ip("10.100.0.0") + i).to_string()
}

#[test]
fn an_exhausted_pool_refuses_at_once() {
    let mut n = nat(40000, 40009, 1000);
    for i in 0..10 {
        let p = send(&mut n, &udp(&inside(i), 5000, REM, 53, b"q"), F, SEC);
        assert_eq!(p.drop, None);
    }
    let probes = n.port_probes();
    assert!(probes <= 10 * (1 + u64::from(MAX_PROBES)));
    // Every port towards REM:53 is taken: 100,000 more inside hosts cost no lookup.
    for i in 10..100_010 {
        let p = send(&mut n, &udp(&inside(i), 5000, REM, 53, b"q"), F, SEC);
        assert_eq!(p.drop, Some(DropReason::NatNoPort));
    }
    assert_eq!(n.port_probes(), probes, "refused without a single lookup");
    assert_eq!(n.dropped(NatDrop::PoolExhausted), 100_000);
    // Another remote endpoint still has the whole pool.
    let p = send(&mut n, &udp(&inside(7), 5000, REM, 54, b"q"), F, SEC);
    assert_eq!(p.drop, None);
    // A released mapping gives its port back.
    n.expire(SEC + 31 * SEC);
    assert_eq!(n.mappings(), 0);
    assert_eq!(n.stats()["remotes"], 0);
}

#[test]
fn a_fragmented_pool_costs_at_most_the_probe_bound() {
    let mut n = nat(40000, 40999, 10_000);
    // The even ports towards REM:53 taken by hosts that keep their own port, then
    // all odd ports but one by hosts that need one chosen.
    for i in 0..500 {
        let p = send(
            &mut n,
            &udp(&inside(i), 40000 + 2 * i as u16, REM, 53, b""),
            F,
            SEC,
        );
        assert_eq!((p.drop, p.meta.key.sport), (None, 40000 + 2 * i as u16));
    }
    for i in 500..999 {
        let before = n.port_probes();
        assert_eq!(
            send(&mut n, &udp(&inside(i), 5, REM, 53, b""), F, SEC).drop,
            None
        );
        assert!(n.port_probes() - before <= u64::from(MAX_PROBES));
    }
    for i in 999..1999 {
        let before = n.port_probes();
        let p = send(&mut n, &udp(&inside(i), 5, REM, 53, b""), F, SEC);
        assert!(n.port_probes() - before <= u64::from(MAX_PROBES) + 1);
        if p.drop.is_none() {
            break;
        }
        assert_eq!(p.drop, Some(DropReason::NatNoPort));
    }
    assert_eq!(n.mappings(), 1000, "the cursor reaches the last free port");
}

#[test]
fn a_flood_of_new_mappings_from_one_source_is_capped() {
    // 100 answered mappings of other hosts, then 1,000,188 new flows from one host.
    let mut n = nat(1024, 65535, 10_000).with_limits(vec![], 1000);
    for i in 0..100 {
        let c = inside(1000 + i);
        go_both(&mut n, &c, 40000);
    }
    let flooder = inside(1);
    let template = pkt(&tcp(&flooder, 1, REM, 1, 0x02, b""), F);
    let mut v = vec![template.clone(); 256];
    let mut sent = 0u32;
    for round in 0..3969u32 {
        for p in v.iter_mut().take(252) {
            // The NAT rewrote last round's packets in place.
            p.clone_from(&template);
            set_ports(p, (sent % 60_000) as u16 + 1024, (sent / 60_000) as u16 + 1);
            sent += 1;
        }
        for (j, p) in v.iter_mut().skip(252).enumerate() {
            let c = inside(1000 + (round * 4 + j as u32) % 100);
            *p = pkt(&tcp(&c, 40000, REM, 80, 0x10, b"x"), F);
        }
        run_vec(&mut n, &mut v, 2 * SEC);
        for p in &v[252..] {
            assert_eq!(p.drop, None, "an answered mapping was refused");
            assert_eq!(p.meta.key.src, ip(PUB));
        }
        assert!(n.mappings() <= 10_000);
    }
    assert_eq!(n.mappings_of_source(ip(&flooder)), 1000);
    assert_eq!(n.mappings(), 1100);
    assert_eq!(n.dropped(NatDrop::SourceLimit), u64::from(sent) - 1000);
}

/// Opens and answers a TCP mapping of `c:sport` → REM:80.
fn go_both(n: &mut Nat, c: &str, sport: u16) {
    let p = send(n, &tcp(c, sport, REM, 80, 0x02, b""), F, SEC);
    assert_eq!(p.drop, None);
    let back = send(n, &tcp(REM, 80, PUB, p.meta.key.sport, 0x12, b""), R, SEC);
    assert_eq!(back.drop, None);
}

#[test]
fn without_a_source_cap_a_flood_only_evicts_unanswered_mappings() {
    let mut n = nat(1024, 65535, 1000);
    for i in 0..100 {
        go_both(&mut n, &inside(1000 + i), 40000);
    }
    let flooder = inside(1);
    for i in 0..20_000u16 {
        send(&mut n, &udp(&flooder, i, REM, 53, b""), F, 2 * SEC);
    }
    assert_eq!(n.mappings(), 1000);
    for i in 0..100 {
        let p = send(
            &mut n,
            &tcp(&inside(1000 + i), 40000, REM, 80, 0x10, b""),
            F,
            3 * SEC,
        );
        assert_eq!((p.drop, p.meta.key.src), (None, ip(PUB)));
    }
}

#[test]
fn icmp_errors_go_only_to_the_quoted_source() {
    let mut n = nat(1024, 65535, 100);
    let q = send(&mut n, &udp(&inside(1), 4000, REM, 53, b"q"), F, SEC);
    // To the public address the quoted packet left from: translated.
    let ok = send(
        &mut n,
        &icmp_unreachable(REM, PUB, q.buf.frame()),
        R,
        2 * SEC,
    );
    assert_eq!((ok.drop, ok.meta.key.dst), (None, ip(&inside(1))));
    // Aimed at another address (an inside host) with the same quote: dropped.
    let aimed = send(
        &mut n,
        &icmp_unreachable(REM, &inside(9), q.buf.frame()),
        R,
        2 * SEC,
    );
    assert_eq!(aimed.drop, Some(DropReason::NatNoMapping));
    assert_eq!(n.dropped(NatDrop::IcmpMismatch), 1);
}

#[test]
fn a_forged_state_blob_maps_nothing_outside_the_configuration() {
    let pub_ip = ip(PUB);
    let fwd = Dnat {
        proto: 6,
        public_ip: pub_ip,
        public_port: 8080,
        to_ip: ip("10.200.1.1"),
        to_port: 80,
    };
    let victim = || {
        Nat::new(
            "nat",
            Some(Snat {
                public_ip: pub_ip,
                lo: 40000,
                hi: 40999,
            }),
            vec![fwd],
            100,
            Timeouts::default(),
        )
        .with_limits(vec![Prefix::parse("10.200.1.0/24").unwrap()], 0)
    };
    let rec = |m: Mapping, flags: u8, ms: u32| {
        let mut r = vec![m.proto, flags];
        for (a, p) in [m.inside, m.public, m.remote] {
            r.extend_from_slice(&a.to_le_bytes());
            r.extend_from_slice(&p.to_le_bytes());
        }
        r.extend_from_slice(&ms.to_le_bytes());
        r
    };
    let m = |inside: &str, iport, public: (u32, u16), rport| Mapping {
        proto: 6,
        inside: (ip(inside), iport),
        public,
        remote: (ip(REM), rport),
    };
    let records = [
        // A good source-NAT mapping that claims to live 49 days.
        rec(
            m("10.200.1.5", 5000, (pub_ip, 40005), 80),
            REPLIED,
            u32::MAX,
        ),
        // Its twin: the same mapping again.
        rec(m("10.200.1.5", 5000, (pub_ip, 40005), 80), REPLIED, 1000),
        // Another public address, a port outside the pool, the forwarded port.
        rec(m("10.200.1.6", 5000, (ip("10.9.9.9"), 40006), 80), 0, 1000),
        rec(m("10.200.1.6", 5000, (pub_ip, 22), 80), 0, 1000),
        rec(m("10.200.1.6", 5000, (pub_ip, 8080), 81), 0, 1000),
        // A host outside the inside networks (a pinhole to it).
        rec(m("10.50.0.1", 22, (pub_ip, 40007), 5555), REPLIED, 1000),
        // A port forward to a host the configuration does not forward to.
        rec(
            m("10.200.1.200", 22, (pub_ip, 8080), 5555),
            DNAT | REPLIED,
            1000,
        ),
        // The configured forward: fine.
        rec(
            m("10.200.1.1", 80, (pub_ip, 8080), 5556),
            DNAT | REPLIED,
            1000,
        ),
    ];
    let mut blob = Vec::new();
    let at = crate::table::blob::write_header(&mut blob, crate::table::blob::BlobKind::Nat, 24);
    for r in &records {
        blob.extend_from_slice(r);
    }
    crate::table::blob::patch_count(&mut blob, at, records.len());
    let mut n = victim();
    let r = n.import_report(&blob).unwrap();
    assert_eq!(r.imported, 2);
    assert_eq!(r.skipped(SkipReason::Duplicate), 1);
    assert_eq!(r.skipped(SkipReason::OutsidePool), 3);
    assert_eq!(r.skipped(SkipReason::NotInside), 1);
    assert_eq!(r.skipped(SkipReason::NotConfigured), 1);
    // The 49-day claim became the answered-TCP timeout (7,440 s).
    n.expire(0);
    n.expire(7441 * SEC);
    assert_eq!(n.mappings(), 0);
}

proptest! {
    /// Random new flows, replies and expiry through a small pool: no public port is
    /// ever mapped twice towards one remote endpoint, and the pool's per-remote counts
    /// always match the mappings in the table.
    #[test]
    fn pool_counts_match_the_table(
        ops in proptest::collection::vec((0u32..30, 0u16..4, 0u16..3, any::<bool>()), 1..300),
    ) {
        let mut n = nat(50000, 50007, 64);
        let mut now = SEC;
        for (host, sport, rport, tick) in ops {
            if tick {
                now += 10 * SEC;
                n.expire(now);
            }
            send(&mut n, &udp(&inside(host), 5000 + sport, REM, 53 + rport, b""), F, now);
            let mut by_remote: std::collections::HashMap<u64, Vec<u16>> = Default::default();
            for (_, e) in n.table.iter().filter(|(_, e)| e.val.flags & FWD != 0) {
                let m = Mapping::of_entry(e);
                by_remote.entry(m.remote_key()).or_default().push(m.public.1);
            }
            let pool = n.pool.as_ref().unwrap();
            prop_assert_eq!(pool.remotes(), by_remote.len());
            for (rk, mut ports) in by_remote {
                prop_assert_eq!(pool.usage(rk).0 as usize, ports.len());
                ports.sort_unstable();
                let before = ports.len();
                ports.dedup();
                prop_assert_eq!(ports.len(), before, "a port mapped twice");
            }
        }
    }
}
