//! The baselines the exact DP is compared with in `nfx bench chaining`:
//! a function-only strawman, and HYPER's own loop (latency DP, then throughput/capacity
//! check, mark what failed, repeat), marking either the failing instance or, as the paper's
//! wording allows, the whole physical node.

use crate::dp::{classify, Chainer, Outcome, Status};
use crate::network::{Network, Query, NONE};

/// What the function-only strawman answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrawmanAnswer {
    /// Status it claims (it believes latency = Σ processing).
    pub claimed: Status,
    /// True latency of its path, ns (None when a function has no instance).
    pub true_latency_ns: Option<u64>,
    /// Whether every instance on its path really has the free resources.
    pub resources_ok: bool,
}

/// Picks the lowest-processing-latency instance of each function, ignoring transfers and
/// resources; the path is left in `path`.
pub fn strawman(net: &Network, q: &Query, path: &mut Vec<u32>) -> StrawmanAnswer {
    path.clear();
    let mut proc_sum = 0;
    for &f in &q.chain {
        let Some(&x) = net
            .instances_of(f)
            .iter()
            .min_by_key(|&&x| (net.inst(x).proc_ns, x))
        else {
            return StrawmanAnswer {
                claimed: Status::InfeasibleResources,
                true_latency_ns: None,
                resources_ok: false,
            };
        };
        proc_sum += net.inst(x).proc_ns;
        path.push(x);
    }
    StrawmanAnswer {
        claimed: if proc_sum <= q.bound_ns {
            Status::Ok
        } else {
            Status::InfeasibleLatency
        },
        true_latency_ns: Some(net.path_latency_ns(q, path)),
        resources_ok: path
            .iter()
            .enumerate()
            .all(|(k, &x)| net.inst(x).serves(&q.needs_at(k))),
    }
}

/// What HYPER's loop marks when an instance on the chosen path lacks resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marking {
    /// Only the failing instance (equivalent to filtering first: exact).
    Instance,
    /// Every instance on the failing instance's node (the variant that answers wrongly).
    Node,
}

/// HYPER's Step 2/Step 3 loop with reusable marks.
#[derive(Debug, Default, Clone)]
pub struct HyperLoop {
    chainer: Chainer,
    /// Marks per (stage, instance): a stage may need more capacity than another, so an
    /// instance failing one stage can still serve the next. A node mark (the paper's
    /// variant) removes the node at every stage.
    marked_inst: Vec<bool>,
    marked_node: Vec<bool>,
    /// DP rounds run by the last query.
    pub rounds: usize,
}

impl HyperLoop {
    /// An empty loop state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path of the last answer that found one.
    pub fn path(&self) -> &[u32] {
        self.chainer.path()
    }

    /// Answers `q` the paper's way: latency DP over unmarked instances; if the best path
    /// exceeds the bound, stop; else check its instances' resources, mark failures, repeat.
    pub fn solve(&mut self, net: &Network, q: &Query, marking: Marking) -> Outcome {
        let (ni, nn, stages) = (net.insts().len(), net.node_count(), q.chain.len());
        self.marked_inst.clear();
        self.marked_inst.resize(ni * stages, false);
        self.marked_node.clear();
        self.marked_node.resize(nn, false);
        self.rounds = 0;
        loop {
            self.rounds += 1;
            let (mi, mn) = (&self.marked_inst, &self.marked_node);
            let res = self.chainer.best_path(net, q, |k, x| {
                !mi[k * ni + x as usize] && !mn[net.inst(x).node as usize]
            });
            let o = classify(q, res);
            if o.status != Status::Ok {
                return o;
            }
            let mut failed = false;
            for (k, &x) in self.chainer.path().iter().enumerate() {
                let i = net.inst(x);
                if !i.serves(&q.needs_at(k)) {
                    failed = true;
                    match marking {
                        Marking::Instance => self.marked_inst[k * ni + x as usize] = true,
                        Marking::Node => self.marked_node[i.node as usize] = true,
                    }
                }
            }
            if !failed {
                return o;
            }
        }
    }
}

/// How an answer compares with the exact one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Both say no chain exists, or both say `ok` with a valid path as fast as the optimum.
    Right,
    /// Said `ok` with a path that breaks the bound or lacks resources.
    AcceptsBad,
    /// Said `ok` with a valid path slower than the optimum.
    Suboptimal,
    /// Said infeasible where a chain exists.
    MissedChain,
}

/// Judges a claimed status and path latency against the exact outcome. `valid` says whether
/// the claimed path really meets the bound and has the resources. Which kind of
/// infeasibility is claimed does not matter here (HYPER's loop reports latency before it
/// ever looks at resources).
pub fn judge(exact: &Outcome, claimed: Status, latency_ns: Option<u64>, valid: bool) -> Verdict {
    match (claimed == Status::Ok, exact.status == Status::Ok) {
        (true, _) if !valid => Verdict::AcceptsBad,
        (true, _) if latency_ns > exact.latency_ns => Verdict::Suboptimal,
        (false, true) => Verdict::MissedChain,
        _ => Verdict::Right,
    }
}

/// Whether a path (from any method) meets `q`: right length, right functions, resources,
/// and the latency bound.
pub fn path_valid(net: &Network, q: &Query, path: &[u32]) -> bool {
    path.len() == q.chain.len()
        && path.iter().zip(&q.chain).enumerate().all(|(k, (&x, &f))| {
            f != NONE && net.inst(x).function == f && net.inst(x).serves(&q.needs_at(k))
        })
        && net.path_latency_ns(q, path) <= q.bound_ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{InstanceSpec, SlaSpec};

    /// a—b 10 µs; the fast fw sits on node b next to a full nat.
    fn net() -> Network {
        let nodes = vec!["a".to_string(), "b".to_string()];
        let mut n = Network::new("t", &nodes, &[vec![0.0, 10.0], vec![10.0, 0.0]]).unwrap();
        for (id, f, node, lat, free) in [
            ("fw-a", "fw", "a", 40.0, 10.0),
            ("fw-b", "fw", "b", 1.0, 10.0),
            ("nat-a", "nat", "a", 30.0, 10.0),
            ("nat-b", "nat", "b", 1.0, 0.0),
        ] {
            let spec = InstanceSpec {
                id: id.into(),
                function: f.into(),
                node: node.into(),
                kind: "table".into(),
                processing_latency_us: lat,
                throughput_total_gbps: free,
                throughput_used_gbps: 0.0,
                capacity_total: 1.0,
                capacity_used: 0.0,
            };
            n.add_instance("t", "i", &spec).unwrap();
        }
        n
    }

    fn query(n: &Network, bound: f64) -> Query {
        let s = SlaSpec {
            id: "s".into(),
            src_node: "a".into(),
            dst_node: "a".into(),
            chain: vec!["fw".into(), "nat".into()],
            latency_bound_us: bound,
            throughput_gbps: 1.0,
            capacity_need: 1.0,
            stage_capacity: Vec::new(),
        };
        n.query("t", "s", &s).unwrap()
    }

    #[test]
    fn node_marking_loses_the_good_instance() {
        let n = net();
        let q = query(&n, 100.0);
        let exact = Chainer::new().solve(&n, &q);
        assert_eq!(exact.latency_ns, Some(10_000 + 1_000 + 10_000 + 30_000));
        let mut h = HyperLoop::new();
        let by_inst = h.solve(&n, &q, Marking::Instance);
        assert_eq!(by_inst, exact);
        assert_eq!(h.rounds, 2);
        let by_node = h.solve(&n, &q, Marking::Node);
        assert_eq!(by_node.latency_ns, Some(70_000));
        assert_eq!(
            judge(&exact, by_node.status, by_node.latency_ns, true),
            Verdict::Suboptimal
        );
        let tight = query(&n, 60.0);
        let by_node = h.solve(&n, &tight, Marking::Node);
        assert_eq!(by_node.status, Status::InfeasibleLatency);
        assert_eq!(
            judge(
                &Chainer::new().solve(&n, &tight),
                by_node.status,
                None,
                false
            ),
            Verdict::MissedChain
        );
    }

    #[test]
    fn strawman_ignores_transfers_and_resources() {
        let n = net();
        let q = query(&n, 100.0);
        let mut p = Vec::new();
        let a = strawman(&n, &q, &mut p);
        assert_eq!(a.claimed, Status::Ok);
        assert!(!a.resources_ok);
        assert_eq!(a.true_latency_ns, Some(22_000));
        assert!(!path_valid(&n, &q, &p));
        let exact = Chainer::new().solve(&n, &q);
        assert_eq!(
            judge(&exact, a.claimed, a.true_latency_ns, false),
            Verdict::AcceptsBad
        );
        assert_eq!(
            judge(&exact, Status::Ok, exact.latency_ns, true),
            Verdict::Right
        );
    }
}
