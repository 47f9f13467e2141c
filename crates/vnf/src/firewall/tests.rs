//! Firewall node tests: state transitions, rule order, timeouts, table-full
//! behaviour and state migration.

use super::*;
use crate::testutil::*;
use crate::SkipReason;
use acl::{PortRange, Prefix, Rule};
use nfx_packet::Direction::{Forward as F, Reverse as R};
use tcp::{ACK, FIN, RST, SYN};

const C: &str = "10.0.0.1";
const S: &str = "10.9.0.2";

fn allow_all() -> Firewall {
    Firewall::new(
        "fw",
        Acl::new(vec![], true),
        1000,
        Timeouts::default(),
        false,
        false,
    )
}

fn st(fw: &Firewall, sport: u16) -> Option<&'static str> {
    let k = FlowKey {
        src: ip(C),
        dst: ip(S),
        sport,
        dport: 80,
        proto: 6,
    };
    fw.state_of(&k).map(state_name)
}

fn seg(fw: &mut Firewall, orig: bool, flags: u8, now: u64) -> Option<DropReason> {
    let f = if orig {
        tcp(C, 4000, S, 80, flags, b"")
    } else {
        tcp(S, 80, C, 4000, flags, b"")
    };
    send(fw, &f, if orig { F } else { R }, now).drop
}

#[test]
fn tcp_handshake_data_and_close() {
    let mut fw = allow_all();
    assert_eq!(seg(&mut fw, true, SYN, 1), None);
    assert_eq!(st(&fw, 4000), Some("syn_sent"));
    assert_eq!(seg(&mut fw, false, SYN | ACK, 2), None);
    assert_eq!(st(&fw, 4000), Some("syn_recv"));
    assert_eq!(seg(&mut fw, true, ACK, 3), None);
    assert_eq!(st(&fw, 4000), Some("established"));
    assert_eq!(seg(&mut fw, false, ACK, 4), None);
    assert_eq!(seg(&mut fw, true, FIN | ACK, 5), None);
    assert_eq!(st(&fw, 4000), Some("fin_wait"));
    assert_eq!(seg(&mut fw, false, ACK, 6), None);
    assert_eq!(st(&fw, 4000), Some("close_wait"));
    assert_eq!(seg(&mut fw, false, FIN | ACK, 7), None);
    assert_eq!(st(&fw, 4000), Some("last_ack"));
    assert_eq!(seg(&mut fw, true, ACK, 8), None);
    assert_eq!(st(&fw, 4000), Some("time_wait"));
    assert_eq!(fw.stats()["by_state"]["time_wait"], 1);
    assert_eq!(fw.stats()["flows"], 1);
    // TIME_WAIT lasts 120 s by default, then the entry goes.
    fw.expire(8 + 121 * SEC);
    assert_eq!(fw.flows(), 0);
    assert_eq!(fw.stats()["by_state"]["time_wait"], 0);
}

#[test]
fn rst_closes_and_out_of_state_segments_are_dropped() {
    let mut fw = allow_all();
    seg(&mut fw, true, SYN, 1);
    assert_eq!(
        seg(&mut fw, false, ACK, 2),
        Some(DropReason::InvalidState),
        "ACK before SYN-ACK"
    );
    seg(&mut fw, false, SYN | ACK, 3);
    seg(&mut fw, true, ACK, 4);
    assert_eq!(seg(&mut fw, false, RST, 5), None);
    assert_eq!(st(&fw, 4000), Some("close"));
    assert_eq!(
        seg(&mut fw, false, SYN | ACK, 6),
        Some(DropReason::InvalidState)
    );
    // CLOSE lasts 10 s.
    fw.expire(5 + 11 * SEC);
    assert_eq!(fw.flows(), 0);
}

#[test]
fn reverse_new_flows_and_non_syn_without_state() {
    let mut fw = allow_all();
    assert_eq!(
        seg(&mut fw, false, SYN, 1),
        Some(DropReason::InvalidState),
        "outside may not open"
    );
    assert_eq!(
        seg(&mut fw, true, ACK, 1),
        Some(DropReason::InvalidState),
        "no state, not SYN"
    );
    assert_eq!(
        send(&mut fw, &udp(S, 53, C, 5000, b"x"), R, 1).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(fw.flows(), 0);
    let mut loose = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        10,
        Timeouts::default(),
        true,
        false,
    );
    assert_eq!(seg(&mut loose, true, ACK, 1), None, "loose pickup");
    assert_eq!(st(&loose, 4000), Some("established"));
    let mut rev = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        10,
        Timeouts::default(),
        false,
        true,
    );
    assert_eq!(seg(&mut rev, false, SYN, 1), None, "reverse_new: acl");
    assert_eq!(
        seg(&mut rev, true, SYN | ACK, 2),
        None,
        "the server side answers"
    );
}

fn rule(allow: bool, proto: Option<u8>, dst: &str, dport: &str) -> Rule {
    Rule {
        allow,
        proto,
        src: Prefix::ANY,
        dst: Prefix::parse(dst).unwrap(),
        sport: PortRange::ANY,
        dport: PortRange::parse(dport).unwrap(),
    }
}

#[test]
fn acl_first_match_and_default_only_for_new_flows() {
    let acl = Acl::new(
        vec![
            rule(false, Some(6), "10.9.0.0/16", "22"),
            rule(true, Some(6), "10.9.0.0/16", "1-1000"),
        ],
        false,
    );
    let mut fw = Firewall::new("fw", acl, 100, Timeouts::default(), false, false);
    assert_eq!(
        send(&mut fw, &tcp(C, 1, S, 22, SYN, b""), F, 1).drop,
        Some(DropReason::AclDeny)
    );
    assert_eq!(send(&mut fw, &tcp(C, 1, S, 80, SYN, b""), F, 1).drop, None);
    assert_eq!(
        send(&mut fw, &tcp(C, 1, S, 5201, SYN, b""), F, 1).drop,
        Some(DropReason::AclDeny)
    );
    assert_eq!(
        send(&mut fw, &udp(C, 1, S, 80, b""), F, 1).drop,
        Some(DropReason::AclDeny)
    );
    // Replies are not checked against the ACL (the rules only name the server port).
    assert_eq!(
        send(&mut fw, &tcp(S, 80, C, 1, SYN | ACK, b""), R, 2).drop,
        None
    );
    assert_eq!(fw.flows(), 1);
}

#[test]
fn udp_pseudo_state_and_timeouts() {
    let mut fw = allow_all();
    assert_eq!(send(&mut fw, &udp(C, 5000, S, 53, b"q"), F, SEC).drop, None);
    let k = FlowKey {
        src: ip(C),
        dst: ip(S),
        sport: 5000,
        dport: 53,
        proto: 17,
    };
    assert_eq!(fw.state_of(&k).map(state_name), Some("new"));
    assert_eq!(
        send(&mut fw, &udp(S, 53, C, 5000, b"a"), R, 2 * SEC).drop,
        None
    );
    assert_eq!(fw.state_of(&k).map(state_name), Some("replied"));
    // udp_stream timeout (120 s) after the last packet: a late reply is refused.
    assert_eq!(
        send(&mut fw, &udp(S, 53, C, 5000, b"a"), R, 100 * SEC).drop,
        None
    );
    assert_eq!(
        send(&mut fw, &udp(S, 53, C, 5000, b"a"), R, 221 * SEC).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(fw.flows(), 0, "the dead entry was removed on lookup");
    // An unanswered flow lives 30 s.
    send(&mut fw, &udp(C, 5001, S, 53, b"q"), F, 300 * SEC);
    fw.expire(329 * SEC);
    assert_eq!(fw.flows(), 1);
    fw.expire(331 * SEC);
    assert_eq!(fw.flows(), 0);
    assert_eq!(fw.stats()["expired"], 2);
}

#[test]
fn icmp_echo_and_related_errors() {
    let mut fw = allow_all();
    assert_eq!(
        send(&mut fw, &icmp_echo(S, C, 9, true), R, 1).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(
        send(&mut fw, &icmp_echo(C, S, 9, true), F, 1).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(send(&mut fw, &icmp_echo(C, S, 9, false), F, 1).drop, None);
    assert_eq!(send(&mut fw, &icmp_echo(S, C, 9, true), R, 2).drop, None);
    let k = FlowKey {
        src: ip(C),
        dst: ip(S),
        sport: 9,
        dport: 9,
        proto: 1,
    };
    assert_eq!(fw.state_of(&k).map(state_name), Some("replied"));
    // ICMP error about a tracked UDP flow passes; about an unknown one it does not.
    let q = udp(C, 7000, S, 53, b"q");
    send(&mut fw, &q, F, 3);
    assert_eq!(send(&mut fw, &icmp_unreachable(S, C, &q), R, 4).drop, None);
    let other = udp(C, 7001, S, 53, b"q");
    assert_eq!(
        send(&mut fw, &icmp_unreachable(S, C, &other), R, 4).drop,
        Some(DropReason::InvalidState)
    );
}

#[test]
fn table_full_evicts_unassured_then_refuses() {
    let mut fw = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        2,
        Timeouts::default(),
        false,
        false,
    );
    let key = |sport| FlowKey {
        src: ip(C),
        dst: ip(S),
        sport,
        dport: 80,
        proto: 6,
    };
    let open = |fw: &mut Firewall, sport: u16, now: u64| {
        send(fw, &tcp(C, sport, S, 80, SYN, b""), F, now).drop
    };
    assert_eq!(open(&mut fw, 1, 1), None);
    assert_eq!(open(&mut fw, 2, 2), None);
    // Full of SYN_SENT entries: the one closest to expiry makes room.
    assert_eq!(open(&mut fw, 3, 3), None);
    assert_eq!(fw.stats()["evictions"], 1);
    assert!(fw.state_of(&key(1)).is_none());
    // Assured (established) connections are never evicted.
    for sport in [2, 3] {
        send(&mut fw, &tcp(S, 80, C, sport, SYN | ACK, b""), R, 4);
        send(&mut fw, &tcp(C, sport, S, 80, ACK, b""), F, 5);
    }
    assert_eq!(fw.stats()["by_state"]["established"], 2);
    assert_eq!(open(&mut fw, 4, 6), Some(DropReason::TableFull));
    assert_eq!(fw.flows(), 2);
    assert_eq!(fw.dropped(FwDrop::TableFull), 1);
    assert_eq!(fw.stats()["drops"]["table_full"], 1);
}

#[test]
fn one_million_flows_fit() {
    let n = 1_000_000u32;
    let mut fw = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        n as usize,
        Timeouts::default(),
        false,
        false,
    );
    let mut v: Vec<Packet> = (0..256)
        .map(|_| meta_only(FlowKey::default(), 0, F))
        .collect();
    let mut sink = crate::EventSink::default();
    for base in (0..n).step_by(256) {
        for (j, p) in v.iter_mut().enumerate() {
            let i = base + j as u32;
            p.meta.key = FlowKey {
                src: 0x0a00_0000 + i,
                dst: 0x0b00_0001,
                sport: 1000,
                dport: 53,
                proto: 17,
            };
            p.drop = None;
        }
        fw.process(
            &mut v,
            &mut NodeCtx {
                now_ns: 1,
                events: &mut sink,
            },
        );
        assert!(v.iter().all(|p| p.alive()));
    }
    let s = fw.stats();
    assert_eq!(s["flows"], 1_000_000);
    let bpf = s["bytes_per_flow"].as_u64().unwrap();
    assert!(bpf <= 80, "{bpf} bytes per flow");
}

#[test]
fn export_import_round_trip_mid_connection() {
    let mut a = allow_all();
    seg(&mut a, true, SYN, SEC);
    seg(&mut a, false, SYN | ACK, SEC);
    seg(&mut a, true, ACK, SEC);
    send(&mut a, &udp(C, 5000, S, 53, b"q"), F, SEC);
    let mut blob = Vec::new();
    assert_eq!(a.export_state(&mut blob), 2);
    assert_eq!(
        blob.len(),
        crate::table::blob::HEADER_LEN + 2 * state::RECORD_LEN
    );
    // A fresh firewall that has not seen any clock yet, on another host.
    let mut b = allow_all();
    assert_eq!(b.import_state(&blob), Ok(2));
    assert_eq!(st(&b, 4000), Some("established"));
    // Mid-connection traffic in both directions passes, no InvalidState.
    assert_eq!(seg(&mut b, false, ACK, 500 * SEC), None);
    assert_eq!(seg(&mut b, true, ACK, 500 * SEC), None);
    assert_eq!(
        send(&mut b, &udp(S, 53, C, 5000, b"a"), R, 500 * SEC).drop,
        None
    );
    assert_eq!(b.stats()["by_state"]["established"], 1);
    // Importing again adds nothing (already tracked).
    assert_eq!(b.import_state(&blob), Ok(0));
}

/// A copy taken while the exporter still forwarded the connection lags behind it: as
/// imported, the connection's next segments are out of the copied window and dropped;
/// marked behind (`mark_windows_behind`), each side's window is learnt again from its
/// next segment, and once both are, the connection is held to its window again: a
/// segment far outside it (a blind injection) is dropped.
#[test]
fn a_copy_marked_behind_lets_the_connection_run_ahead() {
    let mut a = allow_all();
    let hs = [
        (tcp_seq(C, 4000, S, 80, SYN, (1000, 0), b""), F),
        (tcp_seq(S, 80, C, 4000, SYN | ACK, (5000, 1001), b""), R),
        (tcp_seq(C, 4000, S, 80, ACK, (1001, 5001), b""), F),
    ];
    for (f, d) in &hs {
        assert_eq!(send(&mut a, f, *d, SEC).drop, None);
    }
    send(&mut a, &udp(C, 5000, S, 53, b"q"), F, SEC);
    let mut blob = Vec::new();
    assert_eq!(a.export_state(&mut blob), 2);
    let ahead = tcp_seq(C, 4000, S, 80, ACK, (1001 + 10_000_000, 5001), b"x");
    let mut plain = allow_all();
    assert_eq!(plain.import_state(&blob), Ok(2));
    assert_eq!(
        send(&mut plain, &ahead, F, 2 * SEC).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(plain.dropped(FwDrop::OutOfWindow), 1);
    assert_eq!(mark_windows_behind(&mut blob), Ok(1));
    let mut behind = allow_all();
    assert_eq!(behind.import_state(&blob), Ok(2));
    assert_eq!(send(&mut behind, &ahead, F, 2 * SEC).drop, None);
    let (c, s) = (1002 + 10_000_000, 5001 + 700_000);
    let reply = tcp_seq(S, 80, C, 4000, ACK, (s, c), b"y");
    assert_eq!(send(&mut behind, &reply, R, 2 * SEC).drop, None);
    let next = tcp_seq(C, 4000, S, 80, ACK, (c, s + 1), b"z");
    assert_eq!(send(&mut behind, &next, F, 2 * SEC).drop, None);
    let blind = tcp_seq(C, 4000, S, 80, ACK, (c + 10_000_000, s + 1), b"!");
    assert_eq!(
        send(&mut behind, &blind, F, 2 * SEC).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(behind.dropped(FwDrop::OutOfWindow), 1);
    assert_eq!(
        mark_windows_behind(&mut blob[..4]).map_err(|e| matches!(e, StateError::Malformed(_))),
        Err(true)
    );
}

#[test]
fn import_refuses_unreadable_blobs_whole_and_skips_bad_records() {
    let mut a = allow_all();
    seg(&mut a, true, SYN, 1);
    send(&mut a, &udp(C, 9, S, 53, b""), F, 1);
    let mut blob = Vec::new();
    assert_eq!(a.export_state(&mut blob), 2);
    let mut b = allow_all();
    send(&mut b, &udp(C, 1, S, 2, b""), F, 1);
    let before = b.stats();
    // Header or length wrong: nothing is read.
    let mut bad_magic = blob.clone();
    bad_magic[0] = b'X';
    for bad in [&blob[..blob.len() - 1], &bad_magic[..], b"garbage!garbage!"] {
        assert!(matches!(b.import_state(bad), Err(StateError::Malformed(_))));
    }
    assert_eq!(b.stats(), before);
    // One record with an unknown state code and one with unknown flag bits: both
    // left out and counted, nothing else changes.
    let rec = crate::table::blob::HEADER_LEN;
    let mut bad = blob.clone();
    bad[rec + 13] = 42;
    bad[rec + state::RECORD_LEN + 14] = 0x20;
    let r = b.import_report(&bad).unwrap();
    assert_eq!((r.imported, r.skipped(SkipReason::Malformed)), (0, 2));
    assert_eq!(b.flows(), 1);
    assert_eq!(b.stats()["import"]["skipped"]["malformed"], 2);
    // The good blob goes in; offered again, every record is a duplicate.
    assert_eq!(b.import_state(&blob), Ok(2));
    let again = b.import_report(&blob).unwrap();
    assert_eq!(
        (again.imported, again.skipped(SkipReason::Duplicate)),
        (0, 2)
    );
    // Too many flows for the table: all or nothing.
    let mut tiny = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        1,
        Timeouts::default(),
        false,
        false,
    );
    let mut big = allow_all();
    for p in 0..5 {
        send(&mut big, &udp(C, p, S, 9, b""), F, 1);
    }
    let mut blob = Vec::new();
    big.export_state(&mut blob);
    assert_eq!(tiny.import_state(&blob), Err(StateError::TableFull(1)));
    assert_eq!(tiny.flows(), 0);
}

#[test]
fn only_established_tcp_and_admitted_udp_may_take_the_fast_path() {
    let mut fw = allow_all();
    let fast = |fw: &mut Firewall, orig: bool, flags: u8, now: u64| {
        let f = if orig {
            tcp(C, 4000, S, 80, flags, b"")
        } else {
            tcp(S, 80, C, 4000, flags, b"")
        };
        let mut p = pkt(&f, if orig { F } else { R });
        p.fast = true;
        assert_eq!(run1(fw, &mut p, now), None);
        p.fast
    };
    assert!(!fast(&mut fw, true, SYN, 1), "syn_sent");
    assert!(!fast(&mut fw, false, SYN | ACK, 2), "syn_recv");
    assert!(fast(&mut fw, true, ACK, 3), "established");
    assert!(fast(&mut fw, false, ACK, 4), "established, reply");
    assert!(!fast(&mut fw, true, FIN | ACK, 5), "closing");
    assert!(fw.offloadable());
    let v = |state| FwVal {
        state,
        ..FwVal::default()
    };
    assert!(settled(17, &v(STATE_NEW)) && settled(17, &v(STATE_REPLIED)));
    assert!(!settled(1, &v(STATE_NEW)), "ICMP stays in userspace");
}
