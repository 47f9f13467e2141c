//! HYPER's retry loop, exact: when no chain meets the bound (or a stage has no instance
//! with room), ask the mediator for a faster instance where one helps most, add it, and
//! re-run the DP. Resource failures mark the failing instance (it is filtered out), never
//! the physical node it sits on.

use crate::dp::{Chainer, Outcome, Status};
use crate::network::{to_us, Needs, Network, Query};
use crate::workload::{InstanceSpec, SlaSpec};
use nfx_model::ModelError;

/// The mediator's side of the loop (it decides tier and device; chaining only asks).
pub trait Mediator {
    /// Places a new instance of `function` on or near node `near_node` whose processing
    /// latency is at most `latency_budget_us` and that has room for `needs`; `None` if it
    /// cannot. The returned instance joins the network as given.
    fn place_faster(
        &mut self,
        function: &str,
        near_node: &str,
        latency_budget_us: f64,
        needs: Needs,
    ) -> Option<InstanceSpec>;
}

/// What the retry loop ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryAnswer {
    /// Final outcome (path in the chainer).
    pub outcome: Outcome,
    /// Ids of instances the mediator placed on the way.
    pub placed: Vec<String>,
    /// Requests made to the mediator.
    pub requests: usize,
    /// Why the loop stopped without success, when it did.
    pub stopped: Option<String>,
}

/// Answers `sla`, asking `mediator` for at most `max_requests` new instances. New instances
/// are added to `net` (they exist once placed). The path is in `chainer.path()`.
pub fn solve_with_retry(
    net: &mut Network,
    chainer: &mut Chainer,
    sla: &SlaSpec,
    mediator: &mut dyn Mediator,
    max_requests: usize,
) -> Result<RetryAnswer, ModelError> {
    let mut refused: Vec<(usize, u32)> = Vec::new();
    let mut ans = RetryAnswer {
        outcome: Outcome {
            status: Status::InfeasibleResources,
            latency_ns: None,
            stage: None,
        },
        placed: Vec::new(),
        requests: 0,
        stopped: None,
    };
    loop {
        let q = net.query("<sla>", &sla.id.to_string(), sla)?;
        ans.outcome = chainer.solve(net, &q);
        if ans.outcome.status == Status::Ok {
            return Ok(ans);
        }
        if ans.requests >= max_requests {
            ans.stopped = Some(format!("gave up after {max_requests} placement requests"));
            return Ok(ans);
        }
        let Some((stage, node, budget_ns)) = best_request(net, &q, &ans.outcome, &refused) else {
            ans.stopped = Some(
                "no single faster instance at any stage and node can meet the bound".to_string(),
            );
            return Ok(ans);
        };
        ans.requests += 1;
        refused.push((stage, node));
        let placed = mediator.place_faster(
            &q.names[stage],
            net.node_id(node),
            to_us(budget_ns),
            q.needs_at(stage),
        );
        if let Some(spec) = placed {
            if spec.function.to_string() != q.names[stage] {
                return Err(ModelError::new(
                    "<mediator>",
                    "function",
                    format!(
                        "asked for {:?}, the mediator placed {:?}",
                        q.names[stage], spec.function
                    ),
                ));
            }
            net.add_instance("<mediator>", "instance", &spec)?;
            ans.placed.push(spec.id.to_string());
        }
    }
}

/// Picks the (stage, node) where a new instance helps most — the smallest latency of the
/// rest of the chain around it — and the processing budget left there. For a stage with no
/// usable instance, only that stage is considered.
fn best_request(
    net: &Network,
    q: &Query,
    o: &Outcome,
    refused: &[(usize, u32)],
) -> Option<(usize, u32, u64)> {
    let (arrive, leave) = around_tables(net, q, relax_sparse);
    pick_request(q, o, refused, &arrive, &leave)
}

/// Unreachable in the `around` tables.
const INF: u64 = u64::MAX / 4;

/// `arrive[k][v]`: best latency reaching node v ready for stage k; `leave[k][v]`: best
/// latency from finishing stage k at node v to the destination. `relax` computes
/// `out[v] = min_u at[u] + transfer(u, v)`.
fn around_tables(
    net: &Network,
    q: &Query,
    relax: fn(&Network, &[u64], &mut Vec<u64>),
) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let n = net.node_count();
    let stages = q.chain.len();
    let mut arrive: Vec<Vec<u64>> = Vec::with_capacity(stages + 1);
    arrive.push(net.transfer_row(q.src).to_vec());
    let mut at = vec![INF; n];
    for k in 0..stages {
        at.iter_mut().for_each(|x| *x = INF);
        for &x in net.instances_of(q.chain[k]) {
            let i = net.inst(x);
            if i.serves(&q.needs_at(k)) {
                let v = i.node as usize;
                at[v] = at[v].min(arrive[k][v].saturating_add(i.proc_ns));
            }
        }
        let mut next = Vec::new();
        relax(net, &at, &mut next);
        arrive.push(next);
    }
    let mut leave = vec![Vec::new(); stages];
    for k in (0..stages).rev() {
        leave[k] = if k + 1 == stages {
            net.transfer_row(q.dst).to_vec()
        } else {
            at.iter_mut().for_each(|x| *x = INF);
            for &x in net.instances_of(q.chain[k + 1]) {
                let i = net.inst(x);
                if i.serves(&q.needs_at(k + 1)) {
                    let v = i.node as usize;
                    at[v] = at[v].min(i.proc_ns.saturating_add(leave[k + 1][v]));
                }
            }
            let mut next = Vec::new();
            relax(net, &at, &mut next);
            next
        };
    }
    (arrive, leave)
}

/// `out[v] = min_u at[u] + transfer(u, v)` over the nodes u with `at[u] < INF` only, via
/// row v (the matrix is symmetric): O(n × reachable) instead of O(n²). Equal to the dense
/// minimum: where no such u exists the dense one is `at[v] + 0 = INF` too, and an
/// unreachable u never beats a reachable one.
fn relax_sparse(net: &Network, at: &[u64], out: &mut Vec<u64>) {
    let live: Vec<(usize, u64)> = at
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c < INF)
        .map(|(u, &c)| (u, c))
        .collect();
    out.clear();
    out.extend((0..at.len()).map(|v| {
        let row = net.transfer_row(v as u32);
        live.iter()
            .map(|&(u, c)| c.saturating_add(row[u]))
            .fold(INF, u64::min)
    }));
}

/// The (stage, node) with the smallest latency around it, and the budget left there.
fn pick_request(
    q: &Query,
    o: &Outcome,
    refused: &[(usize, u32)],
    arrive: &[Vec<u64>],
    leave: &[Vec<u64>],
) -> Option<(usize, u32, u64)> {
    let stages = q.chain.len();
    let stage_range = match o.stage {
        Some(k) => k..k + 1,
        None => 0..stages,
    };
    let mut best: Option<(u64, usize, u32)> = None;
    for k in stage_range {
        for v in 0..arrive[k].len() as u32 {
            if refused.contains(&(k, v)) {
                continue;
            }
            let a = arrive[k][v as usize];
            let l = leave[k][v as usize];
            let around = a.min(INF).saturating_add(if l >= INF { 0 } else { l });
            if best.is_none_or(|(b, _, _)| around < b) {
                best = Some((around, k, v));
            }
        }
    }
    let (around, k, v) = best?;
    if around > q.bound_ns {
        return None;
    }
    Some((k, v, q.bound_ns - around))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a—b—c line, 10 µs per hop; one slow software nat on a.
    fn net() -> Network {
        let nodes: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let t = vec![
            vec![0.0, 10.0, 20.0],
            vec![10.0, 0.0, 10.0],
            vec![20.0, 10.0, 0.0],
        ];
        let mut n = Network::new("t", &nodes, &t).unwrap();
        n.add_instance("t", "i", &spec("nat-sw", "nat", "a", 100.0))
            .unwrap();
        n
    }

    fn spec(id: &str, f: &str, node: &str, lat: f64) -> InstanceSpec {
        InstanceSpec {
            id: id.into(),
            function: f.into(),
            node: node.into(),
            kind: "software".into(),
            processing_latency_us: lat,
            throughput_total_gbps: 10.0,
            throughput_used_gbps: 0.0,
            capacity_total: 8.0,
            capacity_used: 0.0,
        }
    }

    fn sla(bound: f64) -> SlaSpec {
        SlaSpec {
            id: "s1".into(),
            src_node: "b".into(),
            dst_node: "c".into(),
            chain: vec!["nat".into()],
            latency_bound_us: bound,
            throughput_gbps: 1.0,
            capacity_need: 1.0,
            stage_capacity: Vec::new(),
        }
    }

    /// Places a table-tier instance with a fixed latency if the budget allows, recording asks.
    struct Table {
        latency_us: f64,
        asked: Vec<(String, String, f64)>,
    }

    impl Mediator for Table {
        fn place_faster(
            &mut self,
            function: &str,
            near_node: &str,
            budget: f64,
            _needs: Needs,
        ) -> Option<InstanceSpec> {
            self.asked.push((function.into(), near_node.into(), budget));
            (self.latency_us <= budget).then(|| {
                spec(
                    &format!("{function}-hw{}", self.asked.len()),
                    function,
                    near_node,
                    self.latency_us,
                )
            })
        }
    }

    #[test]
    fn asks_near_the_path_and_succeeds() {
        let mut n = net();
        let mut c = Chainer::new();
        let mut m = Table {
            latency_us: 2.0,
            asked: vec![],
        };
        let a = solve_with_retry(&mut n, &mut c, &sla(50.0), &mut m, 3).unwrap();
        assert_eq!(a.outcome.status, Status::Ok);
        assert_eq!(a.requests, 1);
        assert_eq!(m.asked.len(), 1);
        let (f, node, budget) = &m.asked[0];
        assert_eq!(f, "nat");
        assert!(node == "b" || node == "c", "{node}");
        assert!((budget - 40.0).abs() < 1e-9, "{budget}");
        assert_eq!(a.outcome.latency_ns, Some(12_000));
        assert_eq!(n.inst_id(c.path()[0]), "nat-hw1");
    }

    #[test]
    fn refusals_move_on_then_give_up() {
        let mut n = net();
        let mut c = Chainer::new();
        let mut m = Table {
            latency_us: 45.0,
            asked: vec![],
        };
        let a = solve_with_retry(&mut n, &mut c, &sla(50.0), &mut m, 10).unwrap();
        assert_eq!(a.outcome.status, Status::InfeasibleLatency);
        assert!(a.placed.is_empty());
        assert_eq!(a.requests, 3);
        let nodes: Vec<&str> = m.asked.iter().map(|x| x.1.as_str()).collect();
        assert_eq!(nodes[2], "a");
        assert!(a.stopped.is_some());
    }

    #[test]
    fn missing_function_is_placed() {
        let mut n = net();
        let mut c = Chainer::new();
        let mut m = Table {
            latency_us: 2.0,
            asked: vec![],
        };
        let mut s = sla(500.0);
        s.chain = vec!["nat".into(), "dpi".into()];
        let a = solve_with_retry(&mut n, &mut c, &s, &mut m, 3).unwrap();
        assert_eq!(a.outcome.status, Status::Ok);
        assert_eq!(m.asked[0].0, "dpi");
        assert_eq!(a.placed, vec!["dpi-hw1".to_string()]);
    }

    /// The O(n²) relaxation the sparse one replaces.
    fn relax_dense(net: &Network, at: &[u64], out: &mut Vec<u64>) {
        let n = at.len();
        out.clear();
        out.extend((0..n).map(|v| {
            (0..n)
                .map(|u| at[u].saturating_add(net.transfer_ns(u as u32, v as u32)))
                .min()
                .unwrap_or(INF)
        }));
    }

    #[test]
    fn sparse_around_tables_equal_the_dense_ones() {
        use crate::generate::{generate, Shape};
        let shape = Shape {
            nodes: 12,
            instances: 18,
            slas: 150,
            ..Shape::small(0)
        };
        let mut checked = 0;
        for seed in 1..=6 {
            let w = generate(&shape, seed);
            let n = Network::from_workload("w", &w).unwrap();
            let mut c = Chainer::new();
            for (k, sla) in w.slas.iter().enumerate() {
                let mut sla = sla.clone();
                if k % 5 == 0 {
                    sla.chain.insert(k % (sla.chain.len() + 1), "absent".into());
                }
                let q = n.query("w", "s", &sla).unwrap();
                let o = c.solve(&n, &q);
                let dense = around_tables(&n, &q, relax_dense);
                assert_eq!(
                    around_tables(&n, &q, relax_sparse),
                    dense,
                    "seed {seed} sla {k}"
                );
                let refused: Vec<(usize, u32)> = (0..k % 4).map(|r| (r, r as u32)).collect();
                assert_eq!(
                    best_request(&n, &q, &o, &refused),
                    pick_request(&q, &o, &refused, &dense.0, &dense.1)
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 900);
    }

    #[test]
    fn hopeless_bound_stops_without_asking() {
        let mut n = net();
        let mut c = Chainer::new();
        let mut m = Table {
            latency_us: 0.0,
            asked: vec![],
        };
        let a = solve_with_retry(&mut n, &mut c, &sla(5.0), &mut m, 3).unwrap();
        assert_eq!(a.outcome.status, Status::InfeasibleLatency);
        assert_eq!(a.requests, 0);
    }
}
