//! The lookaside device's metrics (`nfx accel serve --metrics-listen ADDR`): grants,
//! revocations, refusals and bad input from [`DeviceStats`], and per held queue pair its
//! occupancy, sessions, ops and bytes ([`QpStats`]). Every series carries `device` (the
//! socket path); a queue pair's series carry `qp` (its index) and `pid` (its holder), so a
//! queue pair granted to another client starts new series.

use super::device::{DeviceStats, QpStats};
use crate::EngineKind;
use nfx_metrics::{labels, Families};

/// The engine whose code the device's data thread runs.
const ENGINE: EngineKind = EngineKind::Cpu;

/// Renders the device's counters and held queue pairs as Prometheus text.
pub fn render(device: &str, queue_pairs: usize, stats: &DeviceStats, held: &[QpStats]) -> String {
    families(device, queue_pairs, stats, held).encode()
}

/// Every sample name [`render`] can export, from its registry.
pub fn sample_names() -> Vec<String> {
    families("", 0, &DeviceStats::default(), &[])
        .sample_names()
        .to_vec()
}

fn families(device: &str, queue_pairs: usize, s: &DeviceStats, held: &[QpStats]) -> Families {
    let mut f = Families::default();
    let d = labels(&[("device", device)]);
    f.int_gauge(
        "nfx_accel_info",
        "Always 1; the engine label names the code the device runs",
    )
    .get_or_create(&labels(&[("device", device), ("engine", ENGINE.as_str())]))
    .set(1);
    f.int_gauge("nfx_accel_queue_pairs", "Queue pairs the device has")
        .get_or_create(&d)
        .set(queue_pairs as i64);
    f.int_gauge(
        "nfx_accel_queue_pairs_held",
        "Queue pairs held by clients now",
    )
    .get_or_create(&d)
    .set(held.len() as i64);
    for (name, help, v) in [
        (
            "nfx_accel_grants",
            "Queue pairs granted to clients",
            s.admitted,
        ),
        (
            "nfx_accel_revocations",
            "Queue pairs revoked by their client (failover) and acknowledged",
            s.revocations,
        ),
        ("nfx_accel_ops", "Ring entries completed, any status", s.ops),
    ] {
        f.count(name, help).get_or_create(&d).inc_by(v);
    }
    let refused = f.count(
        "nfx_accel_refused",
        "Requests refused, by reason (peer: credential check; capacity: no queue pair left; sessions: session table full)",
    );
    let bad = f.count(
        "nfx_accel_bad_input",
        "Bad input from clients, by kind (message, entry, protocol: ring protocol broken, queue pair no longer served)",
    );
    for (fam, label, pairs) in [
        (
            &refused,
            "reason",
            [
                ("peer", s.refused_peers),
                ("capacity", s.refused_capacity),
                ("sessions", s.sessions_refused),
            ],
        ),
        (
            &bad,
            "kind",
            [
                ("message", s.bad_messages),
                ("entry", s.bad_entries),
                ("protocol", s.protocol_violations),
            ],
        ),
    ] {
        for (k, v) in pairs {
            fam.get_or_create(&labels(&[("device", device), (label, k)]))
                .inc_by(v);
        }
    }
    queue_pair_families(&mut f, device, held);
    f
}

fn queue_pair_families(f: &mut Families, device: &str, held: &[QpStats]) {
    let in_flight = f.int_gauge(
        "nfx_accel_qp_in_flight",
        "Ring entries submitted and not yet completed",
    );
    let occupancy = f.gauge(
        "nfx_accel_qp_occupancy_ratio",
        "Ring entries in flight over the ring size",
    );
    let sessions = f.int_gauge("nfx_accel_qp_sessions", "Sessions open on the queue pair");
    let served = f.int_gauge(
        "nfx_accel_qp_served",
        "1 while the device serves the queue pair, 0 once revoked or broken by its client",
    );
    let ops = f.count(
        "nfx_accel_qp_ops",
        "Ring entries completed on the queue pair",
    );
    let bytes = f.count(
        "nfx_accel_qp_bytes",
        "Data bytes of the entries completed with success",
    );
    let auth = f.count(
        "nfx_accel_qp_auth_failures",
        "Entries completed with an authentication failure",
    );
    let rejected = f.count(
        "nfx_accel_qp_rejected",
        "Entries rejected (bad argument, no such session)",
    );
    for q in held {
        let (i, pid) = (q.index.to_string(), q.pid.to_string());
        let l = labels(&[("device", device), ("qp", &i), ("pid", &pid)]);
        in_flight.get_or_create(&l).set(q.in_flight as i64);
        occupancy
            .get_or_create(&l)
            .set(q.in_flight as f64 / f64::from(q.ring_size.max(1)));
        sessions.get_or_create(&l).set(q.sessions as i64);
        served.get_or_create(&l).set(i64::from(q.served));
        ops.get_or_create(&l).inc_by(q.work.ops);
        bytes.get_or_create(&l).inc_by(q.work.bytes);
        auth.get_or_create(&l).inc_by(q.work.auth_failures);
        rejected.get_or_create(&l).inc_by(q.work.rejected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineStats;

    #[test]
    fn device_and_queue_pair_counters_are_rendered() {
        let s = DeviceStats {
            admitted: 3,
            revocations: 1,
            ops: 40,
            refused_capacity: 2,
            bad_entries: 5,
            ..Default::default()
        };
        let q = QpStats {
            index: 1,
            pid: 77,
            sessions: 2,
            in_flight: 64,
            ring_size: 256,
            served: true,
            work: EngineStats {
                ops: 40,
                bytes: 4000,
                rejected: 5,
                ..Default::default()
            },
        };
        let t = render("/run/a.sock", 4, &s, &[q]);
        for line in [
            r#"nfx_accel_grants_total{device="/run/a.sock"} 3"#,
            r#"nfx_accel_revocations_total{device="/run/a.sock"} 1"#,
            r#"nfx_accel_refused_total{device="/run/a.sock",reason="capacity"} 2"#,
            r#"nfx_accel_bad_input_total{device="/run/a.sock",kind="entry"} 5"#,
            r#"nfx_accel_info{device="/run/a.sock",engine="cpu"} 1"#,
            r#"nfx_accel_queue_pairs_held{device="/run/a.sock"} 1"#,
            r#"nfx_accel_qp_occupancy_ratio{device="/run/a.sock",qp="1",pid="77"} 0.25"#,
            r#"nfx_accel_qp_bytes_total{device="/run/a.sock",qp="1",pid="77"} 4000"#,
            r#"nfx_accel_qp_sessions{device="/run/a.sock",qp="1",pid="77"} 2"#,
        ] {
            assert!(t.contains(line), "missing {line}:\n{t}");
        }
        let names = sample_names();
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let n = l.split(['{', ' ']).next().unwrap();
            assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
        }
    }
}
