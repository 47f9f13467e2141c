//! Restricted-master integer heuristic: the covering master over the columns that
//! column generation and branch and price have generated so far, solved as an
//! integer program by a bounded branch and bound without pricing. On instances with
//! many overlapping device models the root LP is within a fraction of a per cent of
//! the optimum, but the dives and plunges (which fix one column at a time and
//! re-price) end in placements several per cent above it; a combination of the
//! columns already generated is often much closer, and searching over them is cheap
//! because no pricing is needed.
//!
//! A node fixes copies of columns (its demand and device counts shrink) and forbids
//! others; its LP covers the remaining demand with the allowed columns clipped to it
//! (a clipped column is a subset of a feasible device content, so it fits). Columns
//! at an integer value are fixed at once (a dive step), then the largest fractional
//! column is branched on: one more copy fixed, or the column forbidden. The nodes are
//! searched depth first in passes of limited discrepancy (forbidding counts as one),
//! and every node completes its LP's integer parts greedily (or, for a small rest,
//! with the complete search) into a placement. It proves nothing: the bound of the
//! solver never depends on it.

use crate::complete;
use crate::greedy::best_greedy;
use crate::problem::{Pattern, Problem};
use crate::simplex::{LpStatus, Master};
use std::time::{Duration, Instant};

/// Values closer than this to an integer count as integral.
const EPS: f64 = 1e-6;
/// A rest of at most this many instances (and at most a quarter of all) is completed
/// by the complete search for at most [`COMPLETE_TIME`] instead of greedily.
const COMPLETE_ITEMS: usize = 30;
const COMPLETE_TIME: Duration = Duration::from_millis(10);
/// Most discrepancies (forbidden columns on a path) of the last pass.
const MAX_DISCREPANCY: u32 = 6;

/// A node of the search: what it has fixed and forbidden.
#[derive(Clone)]
struct Node {
    demand: Vec<u32>,
    avail: Vec<u32>,
    fixed: Vec<Pattern>,
    forbidden: Vec<u32>,
    discrepancies: u32,
}

/// Search state of one call.
struct Rmh<'a> {
    p: &'a Problem,
    cols: &'a [Pattern],
    ub: u64,
    best: Option<Vec<Pattern>>,
    deadline: Instant,
    total: usize,
}

/// Searches for a placement of every instance cheaper than `ub` built from `cols`
/// (feasible device contents; a column may be used several times, clipped to what is
/// still needed) until `deadline`. Returns the cheapest one found, if any.
pub fn search(p: &Problem, cols: &[Pattern], ub: u64, deadline: Instant) -> Option<Vec<Pattern>> {
    let demand = p.demands();
    let mut s = Rmh {
        p,
        cols,
        ub,
        best: None,
        deadline,
        total: demand.iter().map(|&d| d as usize).sum(),
    };
    let root = Node {
        demand,
        avail: p.counts(),
        fixed: Vec::new(),
        forbidden: Vec::new(),
        discrepancies: 0,
    };
    for max_disc in 0..=MAX_DISCREPANCY {
        if !s.pass(&root, max_disc) || Instant::now() >= deadline {
            break;
        }
    }
    s.best
}

impl Rmh<'_> {
    /// One depth-first pass over the nodes with at most `max_disc` discrepancies.
    /// Returns whether some node was left out for having more (another pass may help).
    fn pass(&mut self, root: &Node, max_disc: u32) -> bool {
        let mut stack = vec![root.clone()];
        let mut cut_off = false;
        while let Some(node) = stack.pop() {
            if Instant::now() >= self.deadline {
                return false;
            }
            if node.discrepancies > max_disc {
                cut_off = true;
                continue;
            }
            let Some((up, down)) = self.process(node) else {
                continue;
            };
            // The forbidding child has one more discrepancy; the fixing one goes first.
            if let Some(d) = down {
                stack.push(d);
            }
            stack.push(up);
        }
        cut_off
    }

    /// Solves a node's LP, records the placements its rounding gives and returns its
    /// children (one more copy of a fractional column fixed; that column forbidden),
    /// or `None` when the node is closed.
    fn process(&mut self, mut node: Node) -> Option<(Node, Option<Node>)> {
        let p = self.p;
        loop {
            if node.demand.iter().all(|&d| d == 0) {
                self.record(node.fixed);
                return None;
            }
            let fixed_cost = p.cost(&node.fixed);
            if fixed_cost >= self.ub {
                return None;
            }
            let (mut lp, used) = self.node_lp(&node)?;
            if lp.solve(self.deadline) != LpStatus::Optimal {
                return None;
            }
            let first = lp.first_structural();
            let xs: Vec<f64> = (0..used.len()).map(|i| lp.value(first + i)).collect();
            if lp.artificial() > EPS {
                // These columns cannot cover the rest: complete it greedily.
                self.complete(&node, &[]);
                return None;
            }
            if fixed_cost + ceil(lp.objective()) >= self.ub {
                return None;
            }
            let whole: Vec<(u32, u32)> = used
                .iter()
                .zip(&xs)
                .filter(|(_, &x)| x >= 1.0 - EPS)
                .map(|(&j, &x)| (j, (x + EPS).floor() as u32))
                .collect();
            self.complete(&node, &whole);
            let frac = used
                .iter()
                .zip(&xs)
                .filter(|(_, &x)| (x - x.round()).abs() > EPS)
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(&j, _)| j);
            let Some(j) = frac else {
                // Integral: the rounding above was this LP's solution.
                return None;
            };
            if whole.is_empty() {
                let mut down = node.clone();
                down.forbidden.push(j);
                down.discrepancies += 1;
                self.fix(&mut node, j, 1);
                return Some((node, Some(down)));
            }
            // A dive step: the integer parts are fixed without a branch.
            for &(j, n) in &whole {
                self.fix(&mut node, j, n);
            }
        }
    }

    /// The node's LP over the allowed columns that still cover something, and the
    /// column index of each structural LP column; `None` if none is left.
    fn node_lp(&self, node: &Node) -> Option<(Master, Vec<u32>)> {
        let p = self.p;
        let types: Vec<usize> = (0..p.types.len()).filter(|&t| node.demand[t] > 0).collect();
        let mut row_of_type = vec![usize::MAX; p.types.len()];
        for (r, &t) in types.iter().enumerate() {
            row_of_type[t] = r;
        }
        let models: Vec<usize> = (0..p.models.len()).filter(|&k| node.avail[k] > 0).collect();
        let mut row_of_model = vec![usize::MAX; p.models.len()];
        for (i, &k) in models.iter().enumerate() {
            row_of_model[k] = types.len() + i;
        }
        let rhs_ge: Vec<f64> = types.iter().map(|&t| f64::from(node.demand[t])).collect();
        let rhs_le: Vec<f64> = models.iter().map(|&k| f64::from(node.avail[k])).collect();
        let big_m = crate::colgen::big_m(p, &models, &node.avail);
        let mut lp = Master::new(&rhs_ge, &rhs_le, big_m);
        let mut used = Vec::new();
        let mut forbidden = vec![false; self.cols.len()];
        for &j in &node.forbidden {
            forbidden[j as usize] = true;
        }
        let mut entries = Vec::new();
        for (j, col) in self.cols.iter().enumerate() {
            if forbidden[j] || row_of_model[col.model] == usize::MAX {
                continue;
            }
            entries.clear();
            entries.extend(
                col.clipped(&node.demand)
                    .into_iter()
                    .map(|(t, c)| (row_of_type[t as usize], f64::from(c))),
            );
            if entries.is_empty() {
                continue;
            }
            entries.push((row_of_model[col.model], 1.0));
            lp.add_column(p.models[col.model].cost as f64, &entries);
            used.push(j as u32);
        }
        (!used.is_empty()).then_some((lp, used))
    }

    /// Fixes `n` copies of column `j` (clipped to the node's demand and devices).
    fn fix(&self, node: &mut Node, j: u32, n: u32) {
        let col = &self.cols[j as usize];
        for _ in 0..n {
            let items = col.clipped(&node.demand);
            if items.is_empty() || node.avail[col.model] == 0 {
                return;
            }
            node.avail[col.model] -= 1;
            for &(t, c) in &items {
                node.demand[t as usize] -= c;
            }
            node.fixed.push(Pattern {
                model: col.model,
                items,
            });
        }
    }

    /// Records the node's fixed columns plus `whole` (column, copies), with the rest
    /// completed greedily or, when small, by the complete search.
    fn complete(&mut self, node: &Node, whole: &[(u32, u32)]) {
        let p = self.p;
        let mut n = node.clone();
        for &(j, c) in whole {
            self.fix(&mut n, j, c);
        }
        let fixed_cost = p.cost(&n.fixed);
        if fixed_cost >= self.ub {
            return;
        }
        if n.demand.iter().any(|&d| d > 0) {
            let Some(mut rest) = best_greedy(p, &n.demand, &n.avail) else {
                return;
            };
            let left: usize = n.demand.iter().map(|&d| d as usize).sum();
            if left <= COMPLETE_ITEMS.min(self.total / 4) {
                let slice = (Instant::now() + COMPLETE_TIME).min(self.deadline);
                let limit = (self.ub - fixed_cost).min(p.cost(&rest));
                if let Some(better) =
                    complete::search(p, &n.demand, &n.avail, limit, slice).improved
                {
                    rest = better;
                }
            }
            n.fixed.extend(rest);
        }
        self.record(n.fixed);
    }

    fn record(&mut self, pats: Vec<Pattern>) {
        let c = self.p.cost(&pats);
        if c < self.ub {
            self.ub = c;
            self.best = Some(pats);
        }
    }
}

/// `b` rounded up, with a tolerance for LP noise.
fn ceil(b: f64) -> u64 {
    (b - 1e-6).ceil().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::colgen::ColGen;
    use crate::families::Family;
    use crate::ffd;
    use crate::validate;

    /// On instances of every family, with the root LP's columns, every placement the
    /// search returns is valid (the validator recomputes constraints and cost from the
    /// instance) and cheaper than the limit, and with
    /// FFD's cost as the limit it beats FFD on most of them.
    #[test]
    fn finds_valid_cheaper_placements_from_root_columns() {
        let (mut tried, mut better) = (0, 0);
        for f in Family::ALL {
            for seed in 0..2 {
                let inst = f.generate(24, seed);
                let p = Problem::new(&inst);
                let (demand, avail) = (p.demands(), p.counts());
                let ffd = p.patterns_of(&ffd::ffd(&inst).unwrap());
                let mut cg = ColGen::new(&p);
                let deadline = Instant::now() + Duration::from_millis(500);
                cg.solve(&demand, &avail, None, f64::INFINITY, true, deadline);
                let cols = cg.patterns().to_vec();
                for ub in [u64::MAX, p.cost(&ffd)] {
                    let until = Instant::now() + Duration::from_millis(200);
                    let Some(pats) = search(&p, &cols, ub, until) else {
                        assert!(ub < u64::MAX, "{}: nothing found", inst.name);
                        continue;
                    };
                    assert!(p.cost(&pats) < ub);
                    let assign = p.to_assignment(&pats, inst.vnf_instances.len()).unwrap();
                    assert_eq!(validate::check(&inst, &assign), Ok(p.cost(&pats)));
                    if ub < u64::MAX {
                        better += 1;
                    }
                }
                tried += 1;
            }
        }
        assert!(
            better * 2 >= tried,
            "only {better} of {tried} FFD placements beaten"
        );
    }
}
