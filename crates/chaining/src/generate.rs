//! Random chaining workloads for the benchmark and the property tests: nodes in a plane
//! (transfer latency grows with distance), software/table/accelerator-like instances with
//! partly used resources, and SLAs with chains of distinct functions.

use crate::workload::{Id, InstanceSpec, SlaSpec, Workload};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Function names used by generated workloads (the first `functions` are used).
pub const FUNCTIONS: &[&str] = &[
    "firewall", "nat", "dpi", "elephant", "esp", "lb", "ids", "cache", "proxy", "wanopt",
];

/// Shape of a generated workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Number of nodes.
    pub nodes: usize,
    /// Number of instances (each function gets at least one while instances last).
    pub instances: usize,
    /// Number of distinct functions (≤ [`FUNCTIONS`].len()).
    pub functions: usize,
    /// Number of SLAs.
    pub slas: usize,
    /// Shortest chain.
    pub min_chain: usize,
    /// Longest chain (≤ `functions`).
    pub max_chain: usize,
}

impl Shape {
    /// The small case: 20 instances on 10 nodes, 8 functions, chains of 2–6.
    pub fn small(slas: usize) -> Self {
        Shape {
            nodes: 10,
            instances: 20,
            functions: 8,
            slas,
            min_chain: 2,
            max_chain: 6,
        }
    }

    /// The large case: 1,000 instances over 100 nodes, 10 functions, chains of 2–6.
    pub fn large(slas: usize) -> Self {
        Shape {
            nodes: 100,
            instances: 1000,
            functions: 10,
            slas,
            min_chain: 2,
            max_chain: 6,
        }
    }
}

/// Rounds to 0.1 µs so that generated numbers print compactly.
fn tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Generates a workload of `shape` from `seed` (same seed, same workload).
pub fn generate(shape: &Shape, seed: u64) -> Workload {
    let mut rng = StdRng::seed_from_u64(seed);
    let functions = shape.functions.clamp(1, FUNCTIONS.len());
    let nodes: Vec<Id> = (0..shape.nodes.max(1))
        .map(|i| Id::Text(format!("n{i}")))
        .collect();
    let pos: Vec<(f64, f64)> = nodes
        .iter()
        .map(|_| (rng.random::<f64>(), rng.random::<f64>()))
        .collect();
    let transfer_latency_us = pos
        .iter()
        .map(|a| {
            pos.iter()
                .map(|b| {
                    let d = ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt();
                    if d == 0.0 {
                        0.0
                    } else {
                        tenth(5.0 + 150.0 * d)
                    }
                })
                .collect()
        })
        .collect();
    let instances = (0..shape.instances)
        .map(|i| {
            let f = if i < functions {
                i
            } else {
                rng.random_range(0..functions)
            };
            let node = rng.random_range(0..nodes.len());
            let (kind, lat, tput, cap): (&str, f64, f64, f64) = match rng.random_range(0..10) {
                0..=5 => (
                    "software",
                    rng.random_range(20.0..150.0),
                    rng.random_range(5.0..20.0),
                    rng.random_range(8.0..32.0),
                ),
                6..=8 => (
                    "table",
                    rng.random_range(1.0..8.0),
                    rng.random_range(20.0..100.0),
                    rng.random_range(4.0..16.0),
                ),
                _ => (
                    "accelerator",
                    rng.random_range(5.0..20.0),
                    rng.random_range(10.0..40.0),
                    rng.random_range(2.0..8.0),
                ),
            };
            let tput = tenth(tput);
            let cap = cap.round();
            InstanceSpec {
                id: Id::Text(format!("{}-{i}", FUNCTIONS[f])),
                function: FUNCTIONS[f].into(),
                node: nodes[node].clone(),
                kind: kind.to_string(),
                processing_latency_us: tenth(lat),
                throughput_total_gbps: tput,
                throughput_used_gbps: tenth(tput * rng.random_range(0.0..0.9)),
                capacity_total: cap,
                capacity_used: (cap * rng.random_range(0.0..0.9)).floor(),
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..functions).collect();
    let slas = (0..shape.slas)
        .map(|i| {
            let len = rng.random_range(shape.min_chain..=shape.max_chain.max(shape.min_chain));
            order.shuffle(&mut rng);
            let chain = order
                .iter()
                .take(len.min(functions))
                .map(|&f| Id::from(FUNCTIONS[f]))
                .collect();
            SlaSpec {
                id: Id::Text(format!("sla-{i}")),
                src_node: nodes[rng.random_range(0..nodes.len())].clone(),
                dst_node: nodes[rng.random_range(0..nodes.len())].clone(),
                chain,
                latency_bound_us: tenth(rng.random_range(100.0..900.0)),
                throughput_gbps: tenth(rng.random_range(0.5..5.0)),
                capacity_need: rng.random_range(1..=4) as f64,
                stage_capacity: Vec::new(),
            }
        })
        .collect();
    Workload {
        nodes,
        transfer_latency_us,
        instances,
        slas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_well_formed() {
        let a = generate(&Shape::small(50), 7);
        assert_eq!(a, generate(&Shape::small(50), 7));
        assert_ne!(a, generate(&Shape::small(50), 8));
        assert_eq!(a.instances.len(), 20);
        assert_eq!(a.slas.len(), 50);
        for s in &a.slas {
            assert!((2..=6).contains(&s.chain.len()));
            let mut c: Vec<String> = s.chain.iter().map(ToString::to_string).collect();
            c.sort();
            c.dedup();
            assert_eq!(c.len(), s.chain.len());
        }
        for f in &FUNCTIONS[..8] {
            assert!(a.instances.iter().any(|i| i.function == Id::from(*f)));
        }
        crate::Network::from_workload("gen", &a).unwrap();
    }
}
