//! The exact DP against the exhaustive oracle on random small networks (SLAs with one
//! capacity need or one per stage), including both kinds of infeasibility; explanations
//! name the failing stage.

use nfx_chaining::baseline::{HyperLoop, Marking};
use nfx_chaining::explain::explain;
use nfx_chaining::generate::{generate, Shape};
use nfx_chaining::network::to_us;
use nfx_chaining::{exhaustive, Chainer, Id, InstanceSpec, Network, SlaSpec, Status, Workload};
use proptest::prelude::*;
use std::collections::HashMap;

const FNS: [&str; 4] = ["fw", "nat", "dpi", "lb"];

fn workload() -> impl Strategy<Value = Workload> {
    (1usize..5).prop_flat_map(|n| {
        let matrix = prop::collection::vec(0u32..40, n * n);
        let insts = prop::collection::vec((0usize..3, 0..n, 0u32..60, 0u32..6, 0u32..4), 0..10);
        let slas = prop::collection::vec(
            (
                0..n,
                0..n,
                prop::collection::vec((0usize..4, 0u32..4), 0..5),
                0u32..300,
                0u32..6,
                0u32..4,
                any::<bool>(),
            ),
            1..6,
        );
        (Just(n), matrix, insts, slas).prop_map(|(n, m, insts, slas)| {
            let nodes: Vec<Id> = (0..n).map(|i| Id::Int(i as i64)).collect();
            let t = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| {
                            let (a, b) = (i.min(j), i.max(j));
                            if a == b {
                                0.0
                            } else {
                                f64::from(m[a * n + b]) / 2.0
                            }
                        })
                        .collect()
                })
                .collect();
            let instances = insts
                .iter()
                .enumerate()
                .map(|(k, &(f, node, lat, tput, cap))| InstanceSpec {
                    id: Id::Int(100 + k as i64),
                    function: FNS[f].into(),
                    node: nodes[node].clone(),
                    kind: "software".into(),
                    processing_latency_us: f64::from(lat) / 2.0,
                    throughput_total_gbps: 5.0,
                    throughput_used_gbps: 5.0 - f64::from(tput),
                    capacity_total: 3.0,
                    capacity_used: 3.0 - f64::from(cap),
                })
                .collect();
            let slas = slas
                .iter()
                .enumerate()
                .map(|(k, (s, d, chain, bound, tput, cap, per_stage))| SlaSpec {
                    id: Id::Text(format!("s{k}")),
                    src_node: nodes[*s].clone(),
                    dst_node: nodes[*d].clone(),
                    chain: chain.iter().map(|&(f, _)| Id::from(FNS[f])).collect(),
                    latency_bound_us: f64::from(*bound),
                    throughput_gbps: f64::from(*tput) / 2.0,
                    capacity_need: f64::from(*cap),
                    stage_capacity: if *per_stage {
                        chain.iter().map(|&(_, c)| f64::from(c)).collect()
                    } else {
                        Vec::new()
                    },
                })
                .collect();
            Workload {
                nodes,
                transfer_latency_us: t,
                instances,
                slas,
            }
        })
    })
}

/// Checks every SLA of `w`; returns how many of each status the oracle gave.
fn check_all(w: &Workload) -> HashMap<Status, usize> {
    let net = Network::from_workload("prop", w).unwrap();
    let mut dp = Chainer::new();
    let mut hyper = HyperLoop::new();
    let mut seen = HashMap::new();
    for s in &w.slas {
        let q = net.query("prop", &s.id.to_string(), s).unwrap();
        let got = dp.solve(&net, &q);
        let (want, _) = exhaustive::solve(&net, &q);
        assert_eq!(got, want, "sla {s:?}");
        *seen.entry(want.status).or_insert(0) += 1;
        match got.status {
            Status::InfeasibleResources => {
                let k = got.stage.unwrap();
                let text = explain(&net, &q, &got, &[]);
                assert!(
                    text.starts_with(&format!("stage {} ({})", k + 1, s.chain[k])),
                    "{text}"
                );
            }
            _ => {
                let path = dp.path();
                assert_eq!(path.len(), s.chain.len());
                for (k, (&x, f)) in path.iter().zip(&s.chain).enumerate() {
                    assert_eq!(net.function_name(net.inst(x).function), f.to_string());
                    assert!(net.inst(x).serves(&q.needs_at(k)));
                }
                assert_eq!(Some(net.path_latency_ns(&q, path)), got.latency_ns);
                let text = explain(&net, &q, &got, path);
                let lat = format!("{:.3} µs", to_us(got.latency_ns.unwrap()));
                assert!(text.contains(&lat), "{text}");
            }
        }
        let h = hyper.solve(&net, &q, Marking::Instance);
        if want.status == Status::Ok {
            assert_eq!(h, want);
        } else {
            assert_ne!(h.status, Status::Ok);
        }
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn dp_equals_exhaustive(w in workload()) {
        check_all(&w);
    }
}

#[test]
fn generated_workloads_cover_every_status_and_agree() {
    let mut seen: HashMap<Status, usize> = HashMap::new();
    for seed in 0..20 {
        let w = generate(&Shape::small(100), seed);
        for (k, v) in check_all(&w) {
            *seen.entry(k).or_insert(0) += v;
        }
    }
    for s in [
        Status::Ok,
        Status::InfeasibleLatency,
        Status::InfeasibleResources,
    ] {
        assert!(seen.get(&s).copied().unwrap_or(0) > 20, "{s:?}: {seen:?}");
    }
}
