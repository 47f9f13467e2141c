//! Answering a whole workload: the JSON shape printed by `nfx chain --json`.

use crate::dp::{Chainer, Outcome, Status};
use crate::explain::explain;
use crate::network::{to_us, Network, Query};
use crate::workload::{Id, Workload};
use nfx_model::ModelError;
use serde::Serialize;
use std::time::Instant;

/// One SLA's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// The SLA id.
    pub id: Id,
    /// `ok`, `infeasible_latency` or `infeasible_resources`.
    pub status: Status,
    /// Latency of the best path, µs (also for `infeasible_latency`; null when a stage has
    /// no usable instance).
    pub latency_us: Option<f64>,
    /// Instance ids of the best path (for `infeasible_latency`: the fastest, too slow;
    /// empty for `infeasible_resources`).
    pub path: Vec<Id>,
    /// Why: the path's make-up, or which stage and which bound fail.
    pub explanation: String,
}

/// Time spent answering, DP only (parsing, name resolution and explanations excluded).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// SLAs answered.
    pub slas: usize,
    /// Mean µs per SLA.
    pub mean_us: f64,
    /// 99th percentile µs per SLA.
    pub p99_us: f64,
    /// Slowest SLA, µs.
    pub max_us: f64,
}

/// Everything `nfx chain --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// One answer per SLA, in input order.
    pub answers: Vec<Answer>,
    /// Timing summary.
    pub timing: Timing,
}

/// Per-SLA timings summarised.
pub fn summarise(mut ns: Vec<u64>) -> Timing {
    ns.sort_unstable();
    let n = ns.len();
    let pick = |q: f64| {
        if n == 0 {
            0.0
        } else {
            to_us(ns[((n as f64 * q).ceil() as usize).clamp(1, n) - 1])
        }
    };
    Timing {
        slas: n,
        mean_us: if n == 0 {
            0.0
        } else {
            to_us(ns.iter().sum::<u64>()) / n as f64
        },
        p99_us: pick(0.99),
        max_us: pick(1.0),
    }
}

/// Compiles `w` (errors name `file` and the field) and answers every SLA exactly.
pub fn answer_workload(file: &str, w: &Workload) -> Result<Report, ModelError> {
    let net = Network::from_workload(file, w)?;
    let queries: Vec<Query> = w
        .slas
        .iter()
        .enumerate()
        .map(|(i, s)| net.query(file, &format!("slas[{i}]"), s))
        .collect::<Result<_, _>>()?;
    let mut chainer = Chainer::new();
    let mut times = Vec::with_capacity(queries.len());
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(queries.len());
    let mut paths: Vec<u32> = Vec::new();
    let mut spans = Vec::with_capacity(queries.len());
    for q in &queries {
        let t = Instant::now();
        let o = chainer.solve(&net, q);
        times.push(t.elapsed().as_nanos() as u64);
        outcomes.push(o);
        let start = paths.len();
        if o.latency_ns.is_some() {
            paths.extend_from_slice(chainer.path());
        }
        spans.push(start..paths.len());
    }
    let answers = w
        .slas
        .iter()
        .zip(&queries)
        .zip(outcomes.iter().zip(spans))
        .map(|((s, q), (o, span))| {
            let path = &paths[span];
            Answer {
                id: s.id.clone(),
                status: o.status,
                latency_us: o.latency_ns.map(to_us),
                path: path
                    .iter()
                    .map(|&x| w.instances[x as usize].id.clone())
                    .collect(),
                explanation: explain(&net, q, o, path),
            }
        })
        .collect();
    Ok(Report {
        answers,
        timing: summarise(times),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{generate, Shape};

    #[test]
    fn answers_every_sla_in_order() {
        let w = generate(&Shape::small(200), 3);
        let r = answer_workload("gen", &w).unwrap();
        assert_eq!(r.answers.len(), 200);
        assert_eq!(r.timing.slas, 200);
        for (a, s) in r.answers.iter().zip(&w.slas) {
            assert_eq!(a.id, s.id);
            match a.status {
                Status::Ok => {
                    assert_eq!(a.path.len(), s.chain.len());
                    assert!(a.latency_us.unwrap() <= s.latency_bound_us);
                    assert!(a.explanation.contains("<= bound"));
                }
                Status::InfeasibleLatency => {
                    assert!(a.latency_us.unwrap() > s.latency_bound_us);
                    assert!(a.explanation.contains("exceeding bound"));
                }
                Status::InfeasibleResources => {
                    assert!(a.latency_us.is_none() && a.path.is_empty());
                    assert!(a.explanation.starts_with("stage "));
                }
            }
        }
        let v = serde_json::to_value(&r).unwrap();
        let first = v["answers"][0].as_object().unwrap();
        for k in ["id", "status", "latency_us", "path"] {
            assert!(first.contains_key(k), "{k}");
        }
    }

    #[test]
    fn summary_percentiles() {
        let t = summarise((1..=100).map(|i| i * 1000).collect());
        assert_eq!(t.mean_us, 50.5);
        assert_eq!(t.p99_us, 99.0);
        assert_eq!(t.max_us, 100.0);
        assert_eq!(summarise(vec![]).slas, 0);
    }
}
