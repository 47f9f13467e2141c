//! Elephant detector tests: thresholds, one event per flow, bounded memory, GSO.

use super::testpkt::{as_gso, ping, run, tcp, udp, udp_from};
use super::*;
use crate::Node;
use nfx_packet::DropReason;

const MS: u64 = 1_000_000;

/// A UDP packet of exactly 1000 IP bytes (20 IP + 8 UDP + 972 payload).
fn kb_packet() -> nfx_packet::Packet {
    udp(4000, 5000, &[0u8; 972])
}

fn detector(min_bytes: u64, min_rate_bps: u64) -> ElephantDetector {
    let cfg = ElephantConfig {
        min_bytes,
        min_rate_bps,
        ..ElephantConfig::default()
    };
    ElephantDetector::new("ele", &cfg).unwrap()
}

/// Sends `n` 1000-byte packets, 1 ms apart from `start_ns`; returns the events.
fn send_kb(d: &mut ElephantDetector, n: u64, start_ns: u64) -> Vec<serde_json::Value> {
    (0..n)
        .flat_map(|i| run(d, &mut [kb_packet()], start_ns + i * MS))
        .collect()
}

#[test]
fn byte_threshold_just_below_and_at() {
    let mut below = detector(10_001, 0);
    assert!(send_kb(&mut below, 10, 0).is_empty());
    let mut at = detector(10_000, 0);
    assert!(send_kb(&mut at, 9, 0).is_empty());
    let ev = send_kb(&mut at, 1, 9 * MS);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["kind"], "elephant");
    assert_eq!(ev[0]["node"], "ele");
    assert_eq!(ev[0]["detail"]["bytes"], 10_000);
    assert_eq!(ev[0]["detail"]["packets"], 10);
    assert_eq!(ev[0]["flow"]["sport"], 4000);
    assert_eq!(ev[0]["flow"]["dst"], "10.0.0.2");
}

#[test]
fn rate_threshold_is_per_window() {
    // 80 kbit/s over 1 s = 10 000 bytes in one window.
    let mut d = detector(0, 80_000);
    // 9 000 bytes in each of five windows: never an elephant, whatever the total.
    for w in 0..5 {
        assert!(send_kb(&mut d, 9, w * 1000 * MS).is_empty(), "window {w}");
    }
    // 10 000 bytes within the next window: elephant on the 10th packet.
    let ev = send_kb(&mut d, 10, 5000 * MS);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["detail"]["bytes"], 55_000);
    // The rate reported is over the window so far: 10 000 bytes in 9 ms.
    assert_eq!(ev[0]["detail"]["rate_bps"], 10_000 * 8 * 1000 / 9);
}

#[test]
fn both_conditions_must_hold() {
    let mut d = detector(20_000, 80_000);
    // Rate reached in the first window but only 10 000 bytes in total.
    assert!(send_kb(&mut d, 10, 0).is_empty());
    assert_eq!(send_kb(&mut d, 10, 1000 * MS).len(), 1);
}

#[test]
fn exactly_one_event_per_flow() {
    let mut d = detector(1000, 0);
    let mut events = send_kb(&mut d, 50, 0);
    events.extend(send_kb(&mut d, 50, 10_000 * MS));
    assert_eq!(events.len(), 1);
    // A different flow gets its own event.
    let other = run(&mut d, &mut [udp(4001, 5000, &[0u8; 972])], 20_000 * MS);
    assert_eq!(other.len(), 1);
    assert_eq!(d.elephants(), 2);
    assert_eq!(d.stats()["elephants"], 2);
}

#[test]
fn ping_never_becomes_an_elephant() {
    let mut d = ElephantDetector::new("ele", &ElephantConfig::default()).unwrap();
    // One hour of `ping` (1/s) and ten minutes of `ping -i 0.01`.
    for s in 0..3600u16 {
        assert!(run(&mut d, &mut [ping(77, s)], u64::from(s) * 1000 * MS).is_empty());
    }
    for i in 0..60_000u64 {
        let t = 4_000_000 * MS + i * 10 * MS;
        assert!(run(&mut d, &mut [ping(78, i as u16)], t).is_empty());
    }
    assert_eq!(d.elephants(), 0);
    assert_eq!(d.flows(), 2);
}

#[test]
fn iperf_like_tcp_flow_with_gso_is_an_elephant() {
    let mut d = ElephantDetector::new("ele", &ElephantConfig::default()).unwrap();
    let mut events = Vec::new();
    // 64 000-byte GSO super-packets every 50 µs (about 10 Gbit/s).
    for i in 0..40u32 {
        let p = as_gso(tcp(40000, 5201, 1 + i * 64_000, "", &[0x55; 64_000]), 1448);
        events.extend(run(&mut d, &mut [p], u64::from(i) * 50_000));
    }
    assert_eq!(events.len(), 1);
    // 64 000 / 1448 → 45 segments of 40 header bytes each.
    let per_super = 64_000 + 45 * 40;
    // The default rate condition (10 Mbit/s over 1 s = 1.25 MB) binds before 1 MB.
    let first = 1_250_000u64.div_ceil(per_super);
    assert_eq!(events[0]["detail"]["bytes"], first * per_super);
    assert_eq!(events[0]["detail"]["packets"], first * 45);
}

#[test]
fn wire_size_counts_gso_segments_and_plain_packets() {
    let plain = tcp(1, 2, 0, "", &[0u8; 100]);
    assert_eq!(wire_size(&plain), (140, 1));
    let gso = as_gso(tcp(1, 2, 0, "", &[0u8; 3000]), 1000);
    assert_eq!(wire_size(&gso), (3000 + 3 * 40, 3));
    let one_seg = as_gso(tcp(1, 2, 0, "", &[0u8; 500]), 1000);
    assert_eq!(wire_size(&one_seg), (540, 1));
}

#[test]
fn dropped_packets_are_not_counted() {
    let mut d = detector(1000, 0);
    let mut p = kb_packet();
    p.drop = Some(DropReason::AclDeny);
    assert!(run(&mut d, &mut [p], 0).is_empty());
    assert_eq!(d.flows(), 0);
    assert_eq!(d.stats()["packets"], 0);
}

#[test]
fn flood_of_distinct_flows_stays_bounded_and_spares_the_elephant() {
    let cfg = ElephantConfig {
        max_flows: 1024,
        min_bytes: 100_000,
        ..ElephantConfig::default()
    };
    let mut d = ElephantDetector::new("ele", &cfg).unwrap();
    let mem = d.stats()["memory_bytes"].clone();
    assert_eq!(mem, 1024 * ElephantDetector::slot_bytes());
    let mut events = Vec::new();
    let mut t = 0;
    for i in 0..200_000u32 {
        let b = i.to_be_bytes();
        let mut vec = [udp_from([11, b[1], b[2], b[3]], 1, &[0u8; 18])];
        events.extend(run(&mut d, &mut vec, t));
        if i % 50 == 0 {
            // One heavy flow keeps sending among the flood.
            events.extend(run(&mut d, &mut [kb_packet()], t));
        }
        t += 1000;
        assert!(d.flows() <= 1024);
    }
    assert_eq!(d.stats()["memory_bytes"], mem);
    assert_eq!(d.stats()["flow_capacity"], 1024);
    assert!(d.stats()["evictions"].as_u64().unwrap() > 190_000);
    assert_eq!(events.len(), 1, "only the heavy flow, once: {events:?}");
    assert_eq!(events[0]["flow"]["sport"], 4000);
}

#[test]
fn idle_flows_expire() {
    let cfg = ElephantConfig {
        idle_timeout_ms: 100,
        ..ElephantConfig::default()
    };
    let mut d = ElephantDetector::new("ele", &cfg).unwrap();
    run(&mut d, &mut [kb_packet()], 0);
    run(&mut d, &mut [udp(1, 2, b"x")], 150 * MS);
    // Expiry sweeps the table over 50 ticks.
    (0..50).for_each(|_| d.expire(200 * MS));
    assert_eq!(d.flows(), 1);
    assert_eq!(d.stats()["expired"], 1);
}

#[test]
fn bad_config_is_refused() {
    let cfg = ElephantConfig {
        window_ms: 0,
        ..ElephantConfig::default()
    };
    let e = ElephantDetector::new("ele", &cfg).unwrap_err();
    assert_eq!(e.field, "window_ms");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    #[test]
    fn any_meta_and_offload_header_never_panic(
        l3 in 0usize..100_000,
        payload in 0usize..100_000,
        ip_end in 0usize..100_000,
        gso_type in proptest::prelude::any::<u8>(),
        gso_size in proptest::prelude::any::<u16>(),
    ) {
        let mut d = detector(1, 1);
        let mut p = kb_packet();
        p.meta.l3 = l3;
        p.meta.payload = payload;
        p.meta.ip_end = ip_end;
        p.buf.vnet.gso_type = gso_type;
        p.buf.vnet.gso_size = gso_size;
        let (bytes, segs) = wire_size(&p);
        proptest::prop_assert!(segs >= 1);
        proptest::prop_assert!(bytes <= 2 * 100_000 * 100_000);
        run(&mut d, &mut [p], 0);
    }
}
