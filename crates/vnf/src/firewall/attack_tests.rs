//! The firewall under attack: SYN and ACK floods from one source, blind resets, ICMP
//! errors that do not fit their flow, forged state blobs.

use super::*;
use crate::testutil::*;
use crate::SkipReason;
use acl::{PortRange, Prefix, Rule};
use nfx_packet::Direction::{Forward as F, Reverse as R};
use tcp::{ACK, RST, SYN};

const S: &str = "10.9.0.2";
const FLOODER: &str = "10.66.0.1";
/// Flood segments: 3,969 vectors of 252 (1,000,188).
const FLOOD: u32 = 252 * 3969;

fn allow_all(max: usize, loose: bool) -> Firewall {
    Firewall::new(
        "fw",
        Acl::new(vec![], true),
        max,
        Timeouts::default(),
        loose,
        false,
    )
}

/// Client `c:sport` → S:80 with client ISN 100 and server ISN 500; returns the next
/// client seq and the server seq it acknowledges.
fn connect(fw: &mut Firewall, c: &str, sport: u16, now: u64) -> (u32, u32) {
    let f = |fl, sa, p: &[u8]| tcp_seq(c, sport, S, 80, fl, sa, p);
    let b = |fl, sa| tcp_seq(S, 80, c, sport, fl, sa, b"");
    assert_eq!(send(fw, &f(SYN, (100, 0), b""), F, now).drop, None);
    assert_eq!(send(fw, &b(SYN | ACK, (500, 101)), R, now).drop, None);
    assert_eq!(send(fw, &f(ACK, (101, 501), b""), F, now).drop, None);
    (101, 501)
}

/// Established clients 10.0.1.i:2000 → S:80, each sending 10-byte segments.
struct Established {
    seqs: Vec<u32>,
    sent: u64,
}

impl Established {
    fn open(fw: &mut Firewall, n: usize) -> Self {
        let seqs = (0..n)
            .map(|i| connect(fw, &format!("10.0.1.{}", i + 1), 2000, SEC).0)
            .collect();
        Self { seqs, sent: 0 }
    }

    /// True when every connection is still tracked, established and assured.
    fn all_alive(&self, fw: &Firewall) -> bool {
        (0..self.seqs.len()).all(|i| {
            let k = FlowKey {
                src: ip(&format!("10.0.1.{}", i + 1)),
                dst: ip(S),
                sport: 2000,
                dport: 80,
                proto: 6,
            };
            fw.entry_of(&k)
                .is_some_and(|v| v.state == TcpState::Established as u8 && v.flags & ASSURED != 0)
        })
    }

    /// The next data segment of client `i % n`.
    fn next(&mut self) -> Packet {
        let i = (self.sent % self.seqs.len() as u64) as usize;
        self.sent += 1;
        let seq = self.seqs[i];
        self.seqs[i] = seq.wrapping_add(10);
        let c = format!("10.0.1.{}", i + 1);
        pkt(&tcp_seq(&c, 2000, S, 80, ACK, (seq, 501), b"0123456789"), F)
    }
}

/// Floods `fw` with `FLOOD` segments with `flags` from FLOODER to S, every 5-tuple
/// different, 252 per vector with 4 segments of established connections; checks
/// after every vector that the table stays within its bound and that no established
/// segment is dropped.
fn flood(fw: &mut Firewall, est: &mut Established, flags: u8) {
    let cap = fw.table.capacity();
    let memory = fw.table.memory_bytes();
    let template = pkt(&tcp_seq(FLOODER, 1, S, 1, flags, (7, 7), b""), F);
    let mut v: Vec<Packet> = vec![template; 256];
    let mut i = 0u32;
    while i < FLOOD {
        for p in v.iter_mut().take(252) {
            set_ports(p, (i % 60_000) as u16 + 1024, (i / 60_000) as u16 + 1);
            i += 1;
        }
        for p in v.iter_mut().skip(252) {
            *p = est.next();
        }
        run_vec(fw, &mut v, 2 * SEC);
        assert!(
            fw.flows() <= cap,
            "{} flows in a table of {cap}",
            fw.flows()
        );
        for p in &v[252..] {
            assert_eq!(p.drop, None, "an established segment was dropped");
        }
    }
    assert_eq!(fw.table.memory_bytes(), memory, "the table never grows");
    assert!(est.all_alive(fw));
}

#[test]
fn syn_flood_from_one_source_stays_bounded_and_spares_established_flows() {
    let mut fw = allow_all(10_000, false);
    let mut est = Established::open(&mut fw, 100);
    flood(&mut fw, &mut est, SYN);
    assert_eq!(fw.flows(), 10_000, "the flood fills what is left, no more");
    assert!(
        fw.table.evictions() > 900_000,
        "its own SYNs make room for each other"
    );
    // With a per-source limit the flooder keeps 1,000 entries and other sources
    // still open connections in the middle of it.
    let mut fw = allow_all(10_000, false).with_source_limit(1000);
    let mut est = Established::open(&mut fw, 100);
    flood(&mut fw, &mut est, SYN);
    assert_eq!(fw.flows_of_source(ip(FLOODER)), 1000);
    assert_eq!(fw.flows(), 1100);
    assert_eq!(fw.dropped(FwDrop::SourceLimit), u64::from(FLOOD) - 1000);
    connect(&mut fw, "10.0.2.1", 3000, 3 * SEC);
}

#[test]
fn ack_flood_from_one_source_stays_bounded_and_spares_established_flows() {
    // Strict: a bare ACK without state creates nothing.
    let mut fw = allow_all(10_000, false);
    let mut est = Established::open(&mut fw, 100);
    flood(&mut fw, &mut est, ACK);
    assert_eq!(fw.flows(), 100);
    assert_eq!(fw.dropped(FwDrop::InvalidState), u64::from(FLOOD));
    // Loose: each bare ACK is picked up, unassured and evictable, for at most
    // `unacknowledged` (300 s), never the 5-day established timeout.
    let mut fw = allow_all(10_000, true);
    let mut est = Established::open(&mut fw, 100);
    flood(&mut fw, &mut est, ACK);
    assert_eq!(fw.flows(), 10_000);
    let picked = FlowKey {
        src: ip(FLOODER),
        dst: ip(S),
        sport: 1024,
        dport: 1,
        proto: 6,
    };
    let (ck, _) = canonical(&FlowKey {
        sport: 1024 + ((FLOOD - 1) % 60_000) as u16,
        dport: 1 + ((FLOOD - 1) / 60_000) as u16,
        ..picked
    });
    let slot = fw.table.find(&ck).expect("the last pickup is tracked");
    let e = fw.table.get(slot);
    assert!(e.val.flags & ASSURED == 0);
    assert_eq!(e.expires_ns, 2 * SEC + 300 * SEC);
    connect(&mut fw, "10.0.2.1", 3000, 3 * SEC);
}

#[test]
fn a_blind_reset_is_dropped_and_the_connection_survives() {
    let mut fw = allow_all(100, false);
    let c = "10.0.0.1";
    let (seq, ack) = connect(&mut fw, c, 4000, SEC);
    let key = FlowKey {
        src: ip(c),
        dst: ip(S),
        sport: 4000,
        dport: 80,
        proto: 6,
    };
    let from_server = |fl, s: u32| pkt(&tcp_seq(S, 80, c, 4000, fl, (s, seq), b""), R);
    // A spoofer knows the 5-tuple but not the server's sequence numbers.
    for guess in [0u32, 1 << 20, 1 << 31, 3_000_000_000, 499, ack - 1] {
        let mut p = from_server(RST, guess);
        assert_eq!(
            run1(&mut fw, &mut p, 2 * SEC),
            Some(DropReason::InvalidState),
            "{guess}"
        );
        let mut p = from_server(RST | ACK, guess);
        assert_eq!(
            run1(&mut fw, &mut p, 2 * SEC),
            Some(DropReason::InvalidState),
            "{guess}"
        );
    }
    assert_eq!(fw.dropped(FwDrop::InvalidRst), 12);
    assert_eq!(fw.state_of(&key).map(state_name), Some("established"));
    // Data still flows both ways, and out-of-window data is refused too.
    let data = tcp_seq(c, 4000, S, 80, ACK, (seq, ack), b"hello");
    assert_eq!(send(&mut fw, &data, F, 3 * SEC).drop, None);
    let far = tcp_seq(S, 80, c, 4000, ACK, (ack + 10_000_000, seq + 5), b"x");
    assert_eq!(
        send(&mut fw, &far, R, 3 * SEC).drop,
        Some(DropReason::InvalidState)
    );
    assert_eq!(fw.dropped(FwDrop::OutOfWindow), 1);
    // The real server's reset, exactly where the client expects it, closes.
    let mut p = from_server(RST, ack);
    assert_eq!(run1(&mut fw, &mut p, 4 * SEC), None);
    assert_eq!(fw.state_of(&key).map(state_name), Some("close"));
}

#[test]
fn icmp_errors_must_fit_the_flow_they_quote() {
    let mut fw = allow_all(100, false);
    let c = "10.0.0.1";
    let q = udp(c, 7000, S, 53, b"q");
    send(&mut fw, &q, F, SEC);
    let err = |fw: &Firewall, from: &str, to: &str, quoted: &[u8], dir| {
        send(
            &mut fw_clone(fw),
            &icmp_unreachable(from, to, quoted),
            dir,
            2 * SEC,
        )
        .drop
    };
    // Back to the quoted packet's sender, from outside: related.
    assert_eq!(err(&fw, S, c, &q, R), None);
    assert_eq!(
        err(&fw, "192.0.2.1", c, &q, R),
        None,
        "a router on the path"
    );
    // To another inside host, or travelling the wrong way: dropped.
    assert_eq!(
        err(&fw, S, "10.0.0.99", &q, R),
        Some(DropReason::InvalidState)
    );
    assert_eq!(err(&fw, S, c, &q, F), Some(DropReason::InvalidState));
    // About a packet the server sent: goes to the server, outwards.
    let reply = udp(S, 53, c, 7000, b"a");
    assert_eq!(err(&fw, c, S, &reply, F), None);
    assert_eq!(err(&fw, c, S, &reply, R), Some(DropReason::InvalidState));
    // TCP: the quoted sequence number must be one the sender can have in flight.
    let (seq, ack) = connect(&mut fw, c, 4000, SEC);
    let sent = tcp_seq(c, 4000, S, 80, ACK, (seq, ack), b"data");
    send(&mut fw, &sent, F, SEC);
    assert_eq!(err(&fw, S, c, &sent, R), None);
    let stale = tcp_seq(
        c,
        4000,
        S,
        80,
        ACK,
        (seq.wrapping_sub(1 << 30), ack),
        b"data",
    );
    assert_eq!(err(&fw, S, c, &stale, R), Some(DropReason::InvalidState));
    let mut fw2 = fw_clone(&fw);
    send(&mut fw2, &icmp_unreachable(S, "10.0.0.99", &q), R, 2 * SEC);
    assert_eq!(fw2.dropped(FwDrop::IcmpMismatch), 1);
}

/// A copy of `fw` through its own export/import (each probe in a fresh firewall).
fn fw_clone(fw: &Firewall) -> Firewall {
    let mut blob = Vec::new();
    fw.export_state(&mut blob);
    let mut copy = allow_all(100, false);
    copy.tick(fw.now_ns);
    copy.import_state(&blob).unwrap();
    copy
}

fn rule(allow: bool, src: &str, dport: &str) -> Rule {
    Rule {
        allow,
        proto: Some(6),
        src: Prefix::parse(src).unwrap(),
        dst: Prefix::ANY,
        sport: PortRange::ANY,
        dport: PortRange::parse(dport).unwrap(),
    }
}

#[test]
fn a_forged_state_blob_opens_no_pinhole() {
    // The attacker's firewall lets anything in, from both sides, and its blob says
    // so: an established SSH connection from outside, a web connection, a duplicate.
    let mut evil = Firewall::new(
        "fw",
        Acl::new(vec![], true),
        100,
        Timeouts::default(),
        false,
        true,
    );
    let out = "203.0.113.9";
    let inside = "10.0.0.5";
    let (s1, a1) = (100, 500);
    send(
        &mut evil,
        &tcp_seq(out, 5555, inside, 22, SYN, (s1, 0), b""),
        R,
        SEC,
    );
    send(
        &mut evil,
        &tcp_seq(inside, 22, out, 5555, SYN | ACK, (a1, s1 + 1), b""),
        F,
        SEC,
    );
    send(
        &mut evil,
        &tcp_seq(out, 5555, inside, 22, ACK, (s1 + 1, a1 + 1), b""),
        R,
        SEC,
    );
    connect(&mut evil, inside, 4000, SEC);
    let mut blob = Vec::new();
    assert_eq!(evil.export_state(&mut blob), 2);
    // Stretch every lifetime to the most a record can say (49 days).
    let first = crate::table::blob::HEADER_LEN;
    for r in 0..2 {
        let at = first + r * state::RECORD_LEN + 16;
        blob[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    }
    // The victim allows only inside web clients and no connection from outside.
    let acl = Acl::new(vec![rule(true, "10.0.0.0/8", "80")], false);
    let mut fw = Firewall::new("fw", acl, 100, Timeouts::default(), false, false);
    connect(&mut fw, inside, 4000, SEC);
    let r = fw.import_report(&blob).unwrap();
    assert_eq!(r.imported, 0);
    assert_eq!(
        r.skipped(SkipReason::ReverseNew),
        1,
        "no pinhole for ssh from outside"
    );
    assert_eq!(r.skipped(SkipReason::Duplicate), 1);
    // With `reverse_new: acl` the ssh record meets the ACL, which denies it.
    let acl = Acl::new(vec![rule(true, "10.0.0.0/8", "80")], false);
    let mut open = Firewall::new("fw", acl, 100, Timeouts::default(), false, true);
    let r = open.import_report(&blob).unwrap();
    assert_eq!((r.imported, r.skipped(SkipReason::AclDeny)), (1, 1));
    // The web connection it took lives 5 days at most, not 49.
    let web = FlowKey {
        src: ip(inside),
        dst: ip(S),
        sport: 4000,
        dport: 80,
        proto: 6,
    };
    let slot = open.table.find(&canonical(&web).0).unwrap();
    assert_eq!(open.table.get(slot).expires_ns, 432_000 * SEC);
    assert_eq!(open.stats()["import"]["skipped"]["acl_deny"], 1);
}

#[test]
fn per_source_limits_hold_for_imports_too() {
    let mut a = allow_all(100, false);
    for p in 0..10 {
        send(&mut a, &udp("10.0.0.1", p, S, 53, b""), F, SEC);
    }
    let mut blob = Vec::new();
    a.export_state(&mut blob);
    let mut b = allow_all(100, false).with_source_limit(4);
    let r = b.import_report(&blob).unwrap();
    assert_eq!((r.imported, r.skipped(SkipReason::SourceLimit)), (4, 6));
    assert_eq!(b.flows_of_source(ip("10.0.0.1")), 4);
    // Expiry gives the quota back (imported lifetimes count from the first tick).
    b.expire(SEC);
    b.expire(200 * SEC);
    assert_eq!((b.flows(), b.flows_of_source(ip("10.0.0.1"))), (0, 0));
}
