//! The compiled form of a workload: integer-nanosecond latencies, instances as compact
//! records, and per-function instance lists sorted by node so that the DP can group a
//! stage by node in one pass.

use crate::workload::{
    check_amount, check_latency, Id, InstanceSpec, SlaSpec, Workload, MAX_LATENCY_US,
};
use nfx_model::ModelError;
use std::collections::HashMap;

/// "No index" marker for instances, functions and entries.
pub const NONE: u32 = u32::MAX;

/// Converts µs to integer ns (1 ns resolution makes DP sums exact and order-independent).
pub fn to_ns(us: f64) -> u64 {
    (us * 1000.0).round() as u64
}

/// Converts integer ns back to µs for reports.
pub fn to_us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// What an SLA asks of every instance on its path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Needs {
    /// Free throughput required, Gbit/s.
    pub throughput_gbps: f64,
    /// Free capacity required.
    pub capacity: f64,
}

/// One instance in the compiled network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inst {
    /// Node index.
    pub node: u32,
    /// Function index.
    pub function: u32,
    /// Processing latency, ns.
    pub proc_ns: u64,
    /// Free throughput (total − used), Gbit/s.
    pub free_gbps: f64,
    /// Free capacity (total − used).
    pub free_capacity: f64,
}

impl Inst {
    /// Whether the instance has room for `needs` (HYPER's throughput/capacity check).
    #[inline]
    pub fn serves(&self, needs: &Needs) -> bool {
        self.free_gbps >= needs.throughput_gbps && self.free_capacity >= needs.capacity
    }
}

/// A compiled SLA query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Source node index.
    pub src: u32,
    /// Destination node index.
    pub dst: u32,
    /// Function index per stage ([`NONE`] for a function with no instance anywhere).
    pub chain: Vec<u32>,
    /// Function names per stage, for explanations.
    pub names: Vec<String>,
    /// Latency bound, ns.
    pub bound_ns: u64,
    /// What every instance on the path needs, unless `stage_capacity` says otherwise.
    pub needs: Needs,
    /// Capacity each stage's instance needs (one entry per stage: a firewall's table
    /// entries, a tunnel's queue pair); empty: `needs.capacity` at every stage.
    pub stage_capacity: Vec<f64>,
}

impl Query {
    /// What the instance at stage `k` must have free.
    #[inline]
    pub fn needs_at(&self, k: usize) -> Needs {
        Needs {
            throughput_gbps: self.needs.throughput_gbps,
            capacity: self
                .stage_capacity
                .get(k)
                .copied()
                .unwrap_or(self.needs.capacity),
        }
    }
}

/// Nodes, transfer latencies and instances, ready for repeated queries.
#[derive(Debug, Clone)]
pub struct Network {
    nodes: Vec<String>,
    node_index: HashMap<String, u32>,
    transfer: Vec<u64>,
    functions: Vec<String>,
    function_index: HashMap<String, u32>,
    insts: Vec<Inst>,
    inst_ids: Vec<String>,
    inst_index: HashMap<String, u32>,
    by_function: Vec<Vec<u32>>,
}

impl Network {
    /// A network of `nodes` with a symmetric transfer matrix (µs) and no instances; `file`
    /// names the source in errors.
    pub fn new(file: &str, nodes: &[String], transfer_us: &[Vec<f64>]) -> Result<Self, ModelError> {
        let n = nodes.len();
        let node_index = index_nodes(file, nodes)?;
        if transfer_us.len() != n {
            return Err(ModelError::new(
                file,
                "transfer_latency_us",
                format!(
                    "must have one row per node ({n}), has {}",
                    transfer_us.len()
                ),
            ));
        }
        let mut transfer = vec![0u64; n * n];
        for (i, row) in transfer_us.iter().enumerate() {
            if row.len() != n {
                return Err(ModelError::new(
                    file,
                    format!("transfer_latency_us[{i}]"),
                    format!("must have one entry per node ({n}), has {}", row.len()),
                ));
            }
            for (j, &v) in row.iter().enumerate() {
                // The field name is only formatted on an error: thousands of hosts make
                // millions of entries, and a name per entry would dominate the build.
                let f = || format!("transfer_latency_us[{i}][{j}]");
                if check_latency(file, "", v).is_err() {
                    check_latency(file, &f(), v)?;
                }
                if i != j {
                    transfer[i * n + j] = to_ns(v);
                }
                if j < i && to_ns(v) != to_ns(transfer_us[j][i]) {
                    return Err(ModelError::new(
                        file,
                        f(),
                        format!(
                            "the matrix must be symmetric: {v} here but {} at [{j}][{i}]",
                            transfer_us[j][i]
                        ),
                    ));
                }
            }
        }
        Ok(Network::empty(nodes, node_index, transfer))
    }

    /// A network of `nodes` whose transfer latencies are already integer ns, row-major
    /// (`transfer_ns[i * n + j]`): what [`Network::new`] builds from the same latencies in
    /// µs, without the per-entry conversion — a caller that keeps a precomputed matrix
    /// gathers each query's sub-network in O(n²) copies. The matrix must be symmetric and
    /// within [`MAX_LATENCY_US`]; the diagonal is taken as 0.
    pub fn from_ns(
        file: &str,
        nodes: &[String],
        transfer_ns: Vec<u64>,
    ) -> Result<Self, ModelError> {
        let n = nodes.len();
        let node_index = index_nodes(file, nodes)?;
        if transfer_ns.len() != n * n {
            return Err(ModelError::new(
                file,
                "transfer_latency_ns",
                format!("must have {n} × {n} entries, has {}", transfer_ns.len()),
            ));
        }
        let max = to_ns(MAX_LATENCY_US);
        let mut transfer = transfer_ns;
        for i in 0..n {
            transfer[i * n + i] = 0;
            for j in 0..i {
                let (a, b) = (transfer[i * n + j], transfer[j * n + i]);
                if a != b || a > max {
                    return Err(ModelError::new(
                        file,
                        format!("transfer_latency_ns[{i}][{j}]"),
                        format!(
                            "must be symmetric and at most {MAX_LATENCY_US} µs: {a} ns here, {b} ns at [{j}][{i}]"
                        ),
                    ));
                }
            }
        }
        Ok(Network::empty(nodes, node_index, transfer))
    }

    fn empty(nodes: &[String], node_index: HashMap<String, u32>, transfer: Vec<u64>) -> Self {
        Network {
            nodes: nodes.to_vec(),
            node_index,
            transfer,
            functions: Vec::new(),
            function_index: HashMap::new(),
            insts: Vec::new(),
            inst_ids: Vec::new(),
            inst_index: HashMap::new(),
            by_function: Vec::new(),
        }
    }

    /// Compiles a workload's nodes and instances, and checks every SLA's references.
    pub fn from_workload(file: &str, w: &Workload) -> Result<Self, ModelError> {
        let nodes: Vec<String> = w.nodes.iter().map(ToString::to_string).collect();
        let mut net = Network::new(file, &nodes, &w.transfer_latency_us)?;
        for (i, spec) in w.instances.iter().enumerate() {
            net.add_instance(file, &format!("instances[{i}]"), spec)?;
        }
        for (i, s) in w.slas.iter().enumerate() {
            net.query(file, &format!("slas[{i}]"), s)?;
        }
        Ok(net)
    }

    /// Adds an instance (workload or mediator-placed), keeping per-function lists sorted.
    pub fn add_instance(
        &mut self,
        file: &str,
        field: &str,
        spec: &InstanceSpec,
    ) -> Result<u32, ModelError> {
        spec.check(file, field)?;
        let id = spec.id.to_string();
        let function_name = spec.function.to_string();
        let node = *self.node_index.get(&spec.node.to_string()).ok_or_else(|| {
            ModelError::new(
                file,
                format!("{field}.node"),
                format!("unknown node {:?}", spec.node),
            )
        })?;
        if self.inst_index.contains_key(&id) {
            return Err(ModelError::new(
                file,
                format!("{field}.id"),
                format!("duplicate instance id {:?}", spec.id),
            ));
        }
        if function_name.is_empty() {
            return Err(ModelError::new(
                file,
                format!("{field}.function"),
                "must not be empty",
            ));
        }
        let function = match self.function_index.get(&function_name) {
            Some(&f) => f,
            None => {
                let f = self.functions.len() as u32;
                self.functions.push(function_name.clone());
                self.function_index.insert(function_name, f);
                self.by_function.push(Vec::new());
                f
            }
        };
        let idx = self.insts.len() as u32;
        self.insts.push(Inst {
            node,
            function,
            proc_ns: to_ns(spec.processing_latency_us),
            free_gbps: spec.throughput_total_gbps - spec.throughput_used_gbps,
            free_capacity: spec.capacity_total - spec.capacity_used,
        });
        self.inst_ids.push(id.clone());
        self.inst_index.insert(id, idx);
        let insts = &self.insts;
        let key = |i: u32| (insts[i as usize].node, insts[i as usize].proc_ns, i);
        let list = &mut self.by_function[function as usize];
        let at = list.partition_point(|&i| key(i) < key(idx));
        list.insert(at, idx);
        Ok(idx)
    }

    /// Compiles an SLA; unknown nodes are errors, unknown functions become [`NONE`]
    /// stages (answered as lacking resources: no instance exists).
    pub fn query(&self, file: &str, field: &str, s: &SlaSpec) -> Result<Query, ModelError> {
        let node = |name: &str, v: &Id| {
            self.node_index.get(&v.to_string()).copied().ok_or_else(|| {
                ModelError::new(
                    file,
                    format!("{field}.{name}"),
                    format!("unknown node {v:?}"),
                )
            })
        };
        let src = node("src_node", &s.src_node)?;
        let dst = node("dst_node", &s.dst_node)?;
        check_amount(
            file,
            &format!("{field}.latency_bound_us"),
            s.latency_bound_us,
        )?;
        check_amount(file, &format!("{field}.throughput_gbps"), s.throughput_gbps)?;
        check_amount(file, &format!("{field}.capacity_need"), s.capacity_need)?;
        if !s.stage_capacity.is_empty() && s.stage_capacity.len() != s.chain.len() {
            return Err(ModelError::new(
                file,
                format!("{field}.stage_capacity"),
                format!(
                    "has {} entries for a chain of {} functions",
                    s.stage_capacity.len(),
                    s.chain.len()
                ),
            ));
        }
        for (k, &c) in s.stage_capacity.iter().enumerate() {
            check_amount(file, &format!("{field}.stage_capacity[{k}]"), c)?;
        }
        Ok(Query {
            src,
            dst,
            chain: s
                .chain
                .iter()
                .map(|f| {
                    self.function_index
                        .get(&f.to_string())
                        .copied()
                        .unwrap_or(NONE)
                })
                .collect(),
            names: s.chain.iter().map(ToString::to_string).collect(),
            bound_ns: to_ns(s.latency_bound_us.min(1e12)),
            needs: Needs {
                throughput_gbps: s.throughput_gbps,
                capacity: s.capacity_need,
            },
            stage_capacity: s.stage_capacity.clone(),
        })
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Node id of index `i`.
    pub fn node_id(&self, i: u32) -> &str {
        &self.nodes[i as usize]
    }

    /// Transfer latency between two node indices, ns (0 on the same node).
    #[inline]
    pub fn transfer_ns(&self, a: u32, b: u32) -> u64 {
        self.transfer[a as usize * self.nodes.len() + b as usize]
    }

    /// The row of transfer latencies from node `a`, ns.
    #[inline]
    pub fn transfer_row(&self, a: u32) -> &[u64] {
        let n = self.nodes.len();
        &self.transfer[a as usize * n..(a as usize + 1) * n]
    }

    /// Instance `i`.
    #[inline]
    pub fn inst(&self, i: u32) -> &Inst {
        &self.insts[i as usize]
    }

    /// All instances.
    pub fn insts(&self) -> &[Inst] {
        &self.insts
    }

    /// Id of instance `i`.
    pub fn inst_id(&self, i: u32) -> &str {
        &self.inst_ids[i as usize]
    }

    /// Name of function `f`.
    pub fn function_name(&self, f: u32) -> &str {
        &self.functions[f as usize]
    }

    /// Instances of function `f` (empty for [`NONE`]), sorted by node then latency.
    #[inline]
    pub fn instances_of(&self, f: u32) -> &[u32] {
        if f == NONE {
            &[]
        } else {
            &self.by_function[f as usize]
        }
    }

    /// Latency of `path` for `q` per the definition, ns.
    pub fn path_latency_ns(&self, q: &Query, path: &[u32]) -> u64 {
        let mut at = q.src;
        let mut total = 0;
        for &i in path {
            let x = self.inst(i);
            total += self.transfer_ns(at, x.node) + x.proc_ns;
            at = x.node;
        }
        total + self.transfer_ns(at, q.dst)
    }
}

/// Node id → index; ids must be non-empty and distinct.
fn index_nodes(file: &str, nodes: &[String]) -> Result<HashMap<String, u32>, ModelError> {
    let mut node_index = HashMap::with_capacity(nodes.len());
    for (i, id) in nodes.iter().enumerate() {
        if id.is_empty() {
            return Err(ModelError::new(
                file,
                format!("nodes[{i}]"),
                "must not be empty",
            ));
        }
        if node_index.insert(id.clone(), i as u32).is_some() {
            return Err(ModelError::new(
                file,
                format!("nodes[{i}]"),
                format!("duplicate node {id:?}"),
            ));
        }
    }
    Ok(node_index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(id: &str, f: &str, node: &str, lat: f64) -> InstanceSpec {
        InstanceSpec {
            id: id.into(),
            function: f.into(),
            node: node.into(),
            kind: "software".into(),
            processing_latency_us: lat,
            throughput_total_gbps: 10.0,
            throughput_used_gbps: 4.0,
            capacity_total: 8.0,
            capacity_used: 2.0,
        }
    }

    fn net() -> Network {
        let nodes = vec!["a".to_string(), "b".to_string()];
        Network::new("w.json", &nodes, &[vec![0.0, 10.5], vec![10.5, 0.0]]).unwrap()
    }

    #[test]
    fn units_round_to_nanoseconds() {
        assert_eq!(to_ns(1.2345), 1235);
        assert_eq!(to_us(1500), 1.5);
    }

    #[test]
    fn instances_sorted_by_node_then_latency() {
        let mut n = net();
        n.add_instance("w", "i[0]", &inst("x", "fw", "b", 5.0))
            .unwrap();
        n.add_instance("w", "i[1]", &inst("y", "fw", "a", 9.0))
            .unwrap();
        n.add_instance("w", "i[2]", &inst("z", "fw", "a", 3.0))
            .unwrap();
        let ids: Vec<&str> = n.instances_of(0).iter().map(|&i| n.inst_id(i)).collect();
        assert_eq!(ids, ["z", "y", "x"]);
        assert_eq!(n.inst(0).free_gbps, 6.0);
        assert_eq!(n.transfer_ns(0, 1), 10_500);
    }

    #[test]
    fn bad_matrix_and_instances_are_located() {
        let nodes = vec!["a".to_string(), "b".to_string()];
        let e = Network::new("w.json", &nodes, &[vec![0.0, 1.0], vec![2.0, 0.0]]).unwrap_err();
        assert_eq!(e.field, "transfer_latency_us[1][0]");
        let e = Network::new("w.json", &nodes, &[vec![0.0, 1.0]]).unwrap_err();
        assert_eq!(e.field, "transfer_latency_us");
        let e = Network::new("w.json", &nodes, &[vec![0.0, -1.0], vec![-1.0, 0.0]]).unwrap_err();
        assert_eq!(e.field, "transfer_latency_us[0][1]");
        let mut n = net();
        let e = n
            .add_instance("w", "instances[0]", &inst("x", "fw", "c", 1.0))
            .unwrap_err();
        assert_eq!(e.field, "instances[0].node");
        n.add_instance("w", "instances[0]", &inst("x", "fw", "a", 1.0))
            .unwrap();
        let e = n
            .add_instance("w", "instances[1]", &inst("x", "fw", "a", 1.0))
            .unwrap_err();
        assert_eq!(e.field, "instances[1].id");
        let e = n
            .add_instance("w", "instances[1]", &inst("y", "fw", "a", f64::NAN))
            .unwrap_err();
        assert_eq!(e.field, "instances[1].processing_latency_us");
    }

    #[test]
    fn from_ns_equals_new_and_checks_the_matrix() {
        let nodes: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let us = [
            vec![0.0, 10.5, 3.25],
            vec![10.5, 0.0, 7.0],
            vec![3.25, 7.0, 0.0],
        ];
        let a = Network::new("w", &nodes, &us).unwrap();
        let ns: Vec<u64> = us.iter().flatten().map(|&v| to_ns(v)).collect();
        let b = Network::from_ns("w", &nodes, ns.clone()).unwrap();
        for i in 0..3 {
            assert_eq!(a.transfer_row(i), b.transfer_row(i));
        }
        let mut bad = ns.clone();
        bad[2] += 1;
        let e = Network::from_ns("w", &nodes, bad).unwrap_err();
        assert_eq!(e.field, "transfer_latency_ns[2][0]");
        assert!(Network::from_ns("w", &nodes, ns[..8].to_vec()).is_err());
        let dup = vec!["a".to_string(), "a".to_string()];
        assert_eq!(
            Network::from_ns("w", &dup, vec![0; 4]).unwrap_err().field,
            "nodes[1]"
        );
    }

    #[test]
    fn queries_resolve_names() {
        let mut n = net();
        n.add_instance("w", "i", &inst("x", "fw", "b", 5.0))
            .unwrap();
        let mut s = SlaSpec {
            id: "s".into(),
            src_node: "a".into(),
            dst_node: "b".into(),
            chain: vec!["fw".into(), "dpi".into()],
            latency_bound_us: 100.0,
            throughput_gbps: 1.0,
            capacity_need: 1.0,
            stage_capacity: Vec::new(),
        };
        let q = n.query("w", "slas[0]", &s).unwrap();
        assert_eq!(q.chain, vec![0, NONE]);
        assert_eq!(q.bound_ns, 100_000);
        assert_eq!(n.path_latency_ns(&q, &[0]), 10_500 + 5_000);
        s.dst_node = "zz".into();
        assert_eq!(
            n.query("w", "slas[0]", &s).unwrap_err().field,
            "slas[0].dst_node"
        );
        s.dst_node = "b".into();
        s.stage_capacity = vec![16.0, 1.0];
        let q = n.query("w", "slas[0]", &s).unwrap();
        assert_eq!(
            (q.needs_at(0).capacity, q.needs_at(1).capacity),
            (16.0, 1.0)
        );
        s.stage_capacity = vec![16.0];
        assert!(n
            .query("w", "slas[0]", &s)
            .unwrap_err()
            .message
            .contains("1 entries"));
        s.stage_capacity = vec![1.0, -2.0];
        assert_eq!(
            n.query("w", "slas[0]", &s).unwrap_err().field,
            "slas[0].stage_capacity[1]"
        );
        s.stage_capacity.clear();
        s.throughput_gbps = -1.0;
        assert_eq!(
            n.query("w", "slas[0]", &s).unwrap_err().field,
            "slas[0].throughput_gbps"
        );
    }
}
