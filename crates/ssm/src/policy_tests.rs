//! Table-driven tests of the policy with a fake clock and scripted CPU samples; a small
//! fake world applies the actions so the next samples report the engine the EM would.

use std::collections::BTreeMap;

use nfx_accel::{CalPoint, Calibration};

use super::*;

const SEC: u64 = 1_000_000_000;
const PERIOD: u64 = SEC / 2;

fn cfg(qps: usize) -> PolicyConfig {
    PolicyConfig {
        upper: 90.0,
        lower: 40.0,
        samples: 3,
        cooldown_ns: 2 * SEC,
        queue_pairs: qps,
        min_gain: 1.0,
    }
}

fn cal(lookaside_mbps: f64) -> Calibration {
    let mut c = Calibration::default();
    for (engine, mbps) in [
        ("soft", 200.0),
        ("cpu", 2000.0),
        ("lookaside", lookaside_mbps),
    ] {
        for bytes in [64u32, 1420] {
            c.insert(CalPoint {
                engine: engine.into(),
                alg: "aes-128-gcm".into(),
                bytes,
                mbps,
                ns_per_op: bytes as f64 * 1000.0 / mbps,
            });
        }
    }
    c
}

/// One VNF's reading in a tick: a CPU % or `None` for an unreachable EM.
type Tick = Vec<(&'static str, Option<f64>)>;

struct Run {
    actions: Vec<Vec<Action>>,
    decisions: Vec<Vec<Decision>>,
    policy: Policy,
}

fn run(policy: Policy, engine: &str, ticks: &[Tick]) -> Run {
    let mut p = policy;
    let mut engines: BTreeMap<&str, String> = BTreeMap::new();
    let mut out = Run {
        actions: vec![],
        decisions: vec![],
        policy: Policy::new(cfg(0), None),
    };
    for (i, tick) in ticks.iter().enumerate() {
        let now = i as u64 * PERIOD;
        let obs: Vec<(String, Observation)> = tick
            .iter()
            .map(|&(n, cpu)| {
                let e = engines
                    .entry(n)
                    .or_insert_with(|| engine.to_string())
                    .clone();
                let o = match cpu {
                    Some(c) => Observation::Sample(Sample {
                        engine: e,
                        alg: "aes-128-gcm".into(),
                        cpu_pct: c,
                        mean_packet_bytes: 1420.0,
                    }),
                    None => Observation::Unreachable("connection refused".into()),
                };
                (n.to_string(), o)
            })
            .collect();
        let step = p.step(now, &obs);
        for a in &step.actions {
            match a {
                Action::Grant(n) => {
                    engines.insert(leak(n), LOOKASIDE.into());
                }
                Action::Revoke(n) => {
                    engines.insert(leak(n), engine.into());
                }
            }
        }
        let held = engines.values().filter(|e| *e == LOOKASIDE).count();
        assert!(held <= p.config().queue_pairs, "tick {i}: {held} held");
        out.actions.push(step.actions);
        out.decisions.push(step.decisions);
    }
    out.policy = p;
    out
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn g(n: &str) -> Action {
    Action::Grant(n.into())
}
fn r(n: &str) -> Action {
    Action::Revoke(n.into())
}

fn rep(n: usize, t: Tick) -> Vec<Tick> {
    vec![t; n]
}

fn cat(parts: Vec<Vec<Tick>>) -> Vec<Tick> {
    parts.into_iter().flatten().collect()
}

/// (name, queue pairs, calibration, ticks, expected actions by tick index; ticks not
/// listed must have no action).
type Case = (
    &'static str,
    usize,
    Option<Calibration>,
    Vec<Tick>,
    Vec<(usize, Vec<Action>)>,
);

fn cases() -> Vec<Case> {
    vec![
        (
            "below upper never grants",
            1,
            None,
            rep(8, vec![("t1", Some(89.9))]),
            vec![],
        ),
        (
            "N consecutive above upper grants on the Nth",
            1,
            None,
            rep(4, vec![("t1", Some(95.0))]),
            vec![(2, vec![g("t1")])],
        ),
        (
            "a dip resets the consecutive count",
            1,
            None,
            vec![
                vec![("t1", Some(95.0))],
                vec![("t1", Some(95.0))],
                vec![("t1", Some(80.0))],
                vec![("t1", Some(95.0))],
                vec![("t1", Some(95.0))],
                vec![("t1", Some(95.0))],
            ],
            vec![(5, vec![g("t1")])],
        ),
        (
            "holder gives back after N below lower, after the cool-down",
            1,
            None,
            cat(vec![
                rep(3, vec![("t1", Some(99.0))]),
                rep(6, vec![("t1", Some(10.0))]),
            ]),
            // granted at t=1.0 s; cold from tick 5 (t=2.5 s) but cooling until 3.0 s
            vec![(2, vec![g("t1")]), (6, vec![r("t1")])],
        ),
        (
            "between thresholds a holder keeps its queue pair",
            1,
            None,
            cat(vec![
                rep(3, vec![("t1", Some(99.0))]),
                rep(8, vec![("t1", Some(60.0))]),
            ]),
            vec![(2, vec![g("t1")])],
        ),
        (
            "cool-down blocks a re-grant right after a revoke",
            1,
            None,
            cat(vec![
                rep(3, vec![("t1", Some(99.0))]),
                rep(4, vec![("t1", Some(10.0))]),
                rep(6, vec![("t1", Some(99.0))]),
            ]),
            // revoke at tick 6 (3.0 s); hot again from tick 9; cooling until tick 10 (5.0 s)
            vec![(2, vec![g("t1")]), (6, vec![r("t1")]), (10, vec![g("t1")])],
        ),
        (
            "revoke before grant when the holder is no longer hot",
            1,
            None,
            cat(vec![
                rep(3, vec![("t1", Some(99.0)), ("t2", Some(5.0))]),
                rep(4, vec![("t1", Some(88.0)), ("t2", Some(5.0))]),
                rep(3, vec![("t1", Some(70.0)), ("t2", Some(99.0))]),
            ]),
            vec![(2, vec![g("t1")]), (9, vec![r("t1"), g("t2")])],
        ),
        (
            "a hot holder is not preempted",
            1,
            None,
            cat(vec![
                rep(3, vec![("t1", Some(99.0)), ("t2", Some(5.0))]),
                rep(6, vec![("t1", Some(99.0)), ("t2", Some(99.0))]),
            ]),
            vec![(2, vec![g("t1")])],
        ),
        (
            "the VNF with the highest sustained CPU wins a contested queue pair",
            1,
            None,
            rep(
                4,
                vec![("a", Some(92.0)), ("b", Some(99.0)), ("c", Some(95.0))],
            ),
            vec![(2, vec![g("b")])],
        ),
        (
            "many VNFs share several queue pairs, never more than exist",
            2,
            None,
            rep(
                4,
                vec![
                    ("a", Some(92.0)),
                    ("b", Some(99.0)),
                    ("c", Some(95.0)),
                    ("d", Some(10.0)),
                ],
            ),
            vec![(2, vec![g("b"), g("c")])],
        ),
        (
            "calibration veto: lookaside slower than the current engine",
            1,
            Some(cal(100.0)),
            rep(5, vec![("t1", Some(99.0))]),
            vec![],
        ),
        (
            "calibration allows when lookaside is faster",
            1,
            Some(cal(1000.0)),
            rep(3, vec![("t1", Some(99.0))]),
            vec![(2, vec![g("t1")])],
        ),
        (
            "unreachable EM is counted, clears the window, never panics",
            1,
            None,
            vec![
                vec![("t1", Some(99.0))],
                vec![("t1", Some(99.0))],
                vec![("t1", None)],
                vec![("t1", Some(99.0))],
                vec![("t1", Some(99.0))],
                vec![("t1", Some(99.0))],
            ],
            vec![(5, vec![g("t1")])],
        ),
        (
            "zero queue pairs: deny, no action",
            0,
            None,
            rep(5, vec![("t1", Some(99.0))]),
            vec![],
        ),
    ]
}

#[test]
fn table() {
    for (name, qps, calib, ticks, expect) in cases() {
        let got = run(Policy::new(cfg(qps), calib), "soft", &ticks);
        for (i, acts) in got.actions.iter().enumerate() {
            let want: Vec<Action> = expect
                .iter()
                .find(|(t, _)| *t == i)
                .map(|(_, a)| a.clone())
                .unwrap_or_default();
            assert_eq!(acts, &want, "case `{name}`, tick {i}");
        }
        for (i, ds) in got.decisions.iter().enumerate() {
            assert!(
                ds.iter().all(|d| !d.reason.is_empty()),
                "case `{name}` tick {i}: decision without reason {ds:?}"
            );
            let names: Vec<&str> = ticks[i].iter().map(|(n, _)| *n).collect();
            for n in names {
                assert!(
                    ds.iter().any(|d| d.vnf == n),
                    "case `{name}` tick {i}: no decision for {n}"
                );
            }
        }
    }
}

#[test]
fn deny_and_veto_reasons_are_explicit() {
    let got = run(
        Policy::new(cfg(1), Some(cal(100.0))),
        "soft",
        &rep(3, vec![("t1", Some(99.0))]),
    );
    let d = &got.decisions[2][0];
    assert_eq!(d.decision, Kind::Deny);
    assert!(d.reason.contains("calibration veto"), "{}", d.reason);

    let got = run(
        Policy::new(cfg(1), None),
        "soft",
        &rep(4, vec![("a", Some(95.0)), ("b", Some(99.0))]),
    );
    let a = got.decisions[3].iter().find(|d| d.vnf == "a").unwrap();
    assert_eq!(a.decision, Kind::Deny);
    assert!(a.reason.contains("no free queue pair"), "{}", a.reason);

    let mut c = cal(1000.0);
    c.points.retain(|p| p.engine != "soft");
    let got = run(
        Policy::new(cfg(1), Some(c)),
        "soft",
        &rep(3, vec![("t1", Some(99.0))]),
    );
    assert!(got.decisions[2][0].reason.contains("no soft figure"));
}

#[test]
fn gain_breaks_ties_and_is_reported() {
    let got = run(
        Policy::new(cfg(1), Some(cal(1000.0))),
        "soft",
        &rep(3, vec![("t1", Some(99.0))]),
    );
    let grant = got.decisions[2]
        .iter()
        .find(|d| d.decision == Kind::Grant)
        .unwrap();
    assert!((grant.gain.unwrap() - 5.0).abs() < 1e-9);
    // against the cpu engine the same accelerator is a loss: veto
    let got = run(
        Policy::new(cfg(1), Some(cal(1000.0))),
        "cpu",
        &rep(3, vec![("t1", Some(99.0))]),
    );
    assert!(got.actions.iter().all(|a| a.is_empty()));
}

#[test]
fn failures_roll_back_and_unreachable_is_counted() {
    let mut p = Policy::new(cfg(1), None);
    let s = |c: f64| {
        Observation::Sample(Sample {
            engine: "soft".into(),
            alg: "aes-128-gcm".into(),
            cpu_pct: c,
            mean_packet_bytes: 1000.0,
        })
    };
    for i in 0..3 {
        p.step(i * PERIOD, &[("t1".into(), s(99.0))]);
    }
    assert_eq!(p.holders(), vec!["t1".to_string()]);
    let d = p.grant_failed(3 * PERIOD, "t1", "409 no free queue pair");
    assert_eq!(d.decision, Kind::Deny);
    assert!(p.holders().is_empty());
    let d = p.revoke_failed(3 * PERIOD, "t1", "timeout");
    assert_eq!(d.decision, Kind::Noop);
    assert_eq!(p.holders(), vec!["t1".to_string()]);
    p.step(
        4 * PERIOD,
        &[("t1".into(), Observation::Unreachable("x".into()))],
    );
    p.step(
        5 * PERIOD,
        &[("t1".into(), Observation::Unreachable("x".into()))],
    );
    assert_eq!(p.unreachable_counts()["t1"], 2);
}

#[test]
fn engine_reported_by_em_resyncs_holders() {
    let mut p = Policy::new(cfg(1), None);
    let obs = |e: &str| {
        vec![(
            "t1".to_string(),
            Observation::Sample(Sample {
                engine: e.into(),
                alg: "aes-128-gcm".into(),
                cpu_pct: 50.0,
                mean_packet_bytes: 1000.0,
            }),
        )]
    };
    p.step(0, &obs("lookaside"));
    assert_eq!(p.holders(), vec!["t1".to_string()]);
    let st = p.step(PERIOD, &obs("soft"));
    assert!(p.holders().is_empty());
    assert!(st.decisions[0].reason.contains("counted free"));
    p.step(2 * PERIOD, &obs("lookaside"));
    p.retain(&["t2".to_string()]);
    assert!(
        p.holders().is_empty(),
        "a VNF gone from the fleet holds nothing"
    );
    assert!(p.unreachable_counts().is_empty());
}

#[test]
fn config_validation_names_the_field() {
    let mut c = cfg(1);
    c.lower = 95.0;
    assert!(c.validate().unwrap_err().starts_with("lower"));
    let mut c = cfg(1);
    c.samples = 0;
    assert!(c.validate().unwrap_err().starts_with("samples"));
    assert!(cfg(3).validate().is_ok());
}
