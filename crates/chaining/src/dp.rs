//! The exact stage DP (HYPER Algorithm 1, made exact): instances that cannot serve the SLA
//! are removed first, then one DP stage per function, with the previous stage grouped by
//! node (the cheapest arrival per node) so a stage costs O(nodes × nodes + candidates);
//! the previous stage is kept sorted by cost so the scan for a node stops as soon as no
//! cheaper arrival is possible.
//! Buffers live in [`Chainer`] and are reused: no allocation per query once warm.

use crate::network::{Network, Query, NONE};
use serde::{Deserialize, Serialize};

/// The answer class of an SLA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A chain meets the latency bound with enough free resources.
    Ok,
    /// Chains exist but the fastest exceeds the bound.
    InfeasibleLatency,
    /// Some stage has no instance with enough free throughput and capacity.
    InfeasibleResources,
}

impl Status {
    /// The name used in JSON answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::InfeasibleLatency => "infeasible_latency",
            Status::InfeasibleResources => "infeasible_resources",
        }
    }
}

/// Result of one query (the path itself is in [`Chainer::path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Answer class.
    pub status: Status,
    /// Latency of the best path, ns (absent when a stage has no usable instance).
    pub latency_ns: Option<u64>,
    /// First stage (0-based) without a usable instance, for `InfeasibleResources`.
    pub stage: Option<usize>,
}

/// Reusable DP state. One per thread; `solve` borrows it mutably.
#[derive(Debug, Default, Clone)]
pub struct Chainer {
    e_node: Vec<u32>,
    e_cost: Vec<u64>,
    e_inst: Vec<u32>,
    e_pre: Vec<u32>,
    /// The previous stage as (cost, node, entry), sorted by cost for early exit.
    prev: Vec<(u64, u32, u32)>,
    path: Vec<u32>,
}

impl Chainer {
    /// An empty chainer; buffers grow on first use and are kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path (instance indices, one per stage) of the last successful DP.
    pub fn path(&self) -> &[u32] {
        &self.path
    }

    /// Answers `q` exactly: filter by free throughput/capacity, then the stage DP.
    pub fn solve(&mut self, net: &Network, q: &Query) -> Outcome {
        let res = self.best_path(net, q, |k, x| net.inst(x).serves(&q.needs_at(k)));
        classify(q, res)
    }

    /// Minimum-latency path for `q` over the instances `usable(stage, instance)` accepts.
    /// `Ok(latency_ns)` with the path in [`Chainer::path`], or `Err(stage)` for the first
    /// stage with no usable instance.
    pub fn best_path<F: Fn(usize, u32) -> bool>(
        &mut self,
        net: &Network,
        q: &Query,
        usable: F,
    ) -> Result<u64, usize> {
        self.e_node.clear();
        self.e_cost.clear();
        self.e_inst.clear();
        self.e_pre.clear();
        self.e_node.push(q.src);
        self.e_cost.push(0);
        self.e_inst.push(NONE);
        self.e_pre.push(NONE);
        self.prev.clear();
        self.prev.push((0, q.src, 0));
        for (k, &f) in q.chain.iter().enumerate() {
            let start = self.e_node.len();
            let list = net.instances_of(f);
            let mut i = 0;
            while i < list.len() {
                let m = net.inst(list[i]).node;
                let mut chosen = NONE;
                while i < list.len() && net.inst(list[i]).node == m {
                    if chosen == NONE && usable(k, list[i]) {
                        chosen = list[i];
                    }
                    i += 1;
                }
                if chosen == NONE {
                    continue;
                }
                let (best, arg) = cheapest_arrival(&self.prev, net.transfer_row(m));
                self.e_node.push(m);
                self.e_cost.push(best + net.inst(chosen).proc_ns);
                self.e_inst.push(chosen);
                self.e_pre.push(arg);
            }
            if self.e_node.len() == start {
                return Err(k);
            }
            self.prev.clear();
            for j in start..self.e_node.len() {
                self.prev.push((self.e_cost[j], self.e_node[j], j as u32));
            }
            self.prev.sort_unstable();
        }
        let (best, arg) = cheapest_arrival(&self.prev, net.transfer_row(q.dst));
        self.path.clear();
        let mut j = arg as usize;
        while self.e_inst[j] != NONE {
            self.path.push(self.e_inst[j]);
            j = self.e_pre[j] as usize;
        }
        self.path.reverse();
        Ok(best)
    }
}

/// The cheapest way to reach a node whose transfer row is `row` from an entry of `prev`
/// (sorted by cost): `(cost, entry)`. Transfers are ≥ 0, so once an entry's own cost
/// reaches the best found, no later entry can improve it.
#[inline]
fn cheapest_arrival(prev: &[(u64, u32, u32)], row: &[u64]) -> (u64, u32) {
    let mut best = u64::MAX;
    let mut arg = 0;
    for &(cost, node, entry) in prev {
        if cost >= best {
            break;
        }
        let c = cost + row[node as usize];
        if c < best {
            best = c;
            arg = entry;
        }
    }
    (best, arg)
}

/// Turns a DP result into an [`Outcome`] against the query's bound.
pub fn classify(q: &Query, res: Result<u64, usize>) -> Outcome {
    match res {
        Ok(lat) => Outcome {
            status: if lat <= q.bound_ns {
                Status::Ok
            } else {
                Status::InfeasibleLatency
            },
            latency_ns: Some(lat),
            stage: None,
        },
        Err(k) => Outcome {
            status: Status::InfeasibleResources,
            latency_ns: None,
            stage: Some(k),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{InstanceSpec, SlaSpec};

    /// Three nodes on a line a—b—c (10 µs per hop), two functions.
    fn net() -> Network {
        let nodes: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let t = vec![
            vec![0.0, 10.0, 20.0],
            vec![10.0, 0.0, 10.0],
            vec![20.0, 10.0, 0.0],
        ];
        let mut n = Network::new("t", &nodes, &t).unwrap();
        for (id, f, node, lat, free) in [
            ("fw-a", "fw", "a", 50.0, 10.0),
            ("fw-c", "fw", "c", 5.0, 10.0),
            ("nat-a", "nat", "a", 5.0, 1.0),
            ("nat-c", "nat", "c", 30.0, 10.0),
        ] {
            let spec = InstanceSpec {
                id: id.into(),
                function: f.into(),
                node: node.into(),
                kind: "software".into(),
                processing_latency_us: lat,
                throughput_total_gbps: free,
                throughput_used_gbps: 0.0,
                capacity_total: 4.0,
                capacity_used: 0.0,
            };
            n.add_instance("t", "i", &spec).unwrap();
        }
        n
    }

    fn sla(chain: &[&str], bound: f64, gbps: f64) -> SlaSpec {
        SlaSpec {
            id: "s".into(),
            src_node: "a".into(),
            dst_node: "a".into(),
            chain: chain.iter().map(|&s| s.into()).collect(),
            latency_bound_us: bound,
            throughput_gbps: gbps,
            capacity_need: 1.0,
            stage_capacity: Vec::new(),
        }
    }

    fn ids(n: &Network, c: &Chainer) -> Vec<String> {
        c.path().iter().map(|&i| n.inst_id(i).to_string()).collect()
    }

    #[test]
    fn picks_the_fastest_path() {
        let n = net();
        let mut c = Chainer::new();
        let q = n.query("t", "s", &sla(&["fw", "nat"], 100.0, 1.0)).unwrap();
        let o = c.solve(&n, &q);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.latency_ns, Some(20_000 + 5_000 + 20_000 + 5_000));
        assert_eq!(ids(&n, &c), ["fw-c", "nat-a"]);
    }

    #[test]
    fn resources_filter_first() {
        let n = net();
        let mut c = Chainer::new();
        let q = n.query("t", "s", &sla(&["fw", "nat"], 100.0, 2.0)).unwrap();
        let o = c.solve(&n, &q);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.latency_ns, Some(20_000 + 5_000 + 30_000 + 20_000));
        assert_eq!(ids(&n, &c), ["fw-c", "nat-c"]);
    }

    #[test]
    fn latency_bound_reports_best() {
        let n = net();
        let mut c = Chainer::new();
        let q = n
            .query("t", "s", &sla(&["fw", "nat"], 49.999, 1.0))
            .unwrap();
        let o = c.solve(&n, &q);
        assert_eq!(o.status, Status::InfeasibleLatency);
        assert_eq!(o.latency_ns, Some(50_000));
    }

    #[test]
    fn missing_resources_name_the_stage() {
        let n = net();
        let mut c = Chainer::new();
        let q = n
            .query("t", "s", &sla(&["fw", "nat", "fw"], 1e6, 20.0))
            .unwrap();
        assert_eq!(
            c.solve(&n, &q),
            Outcome {
                status: Status::InfeasibleResources,
                latency_ns: None,
                stage: Some(0)
            }
        );
        let q = n.query("t", "s", &sla(&["fw", "dpi"], 1e6, 1.0)).unwrap();
        assert_eq!(c.solve(&n, &q).stage, Some(1));
    }

    #[test]
    fn empty_chain_is_a_direct_transfer() {
        let n = net();
        let mut c = Chainer::new();
        let mut s = sla(&[], 100.0, 1.0);
        s.dst_node = "c".into();
        let q = n.query("t", "s", &s).unwrap();
        let o = c.solve(&n, &q);
        assert_eq!(o.latency_ns, Some(20_000));
        assert!(c.path().is_empty());
    }
}
