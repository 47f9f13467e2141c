//! The exact solver: bounds first (L2 for one device model, then the column-generation
//! LP bound), greedy incumbents, then column-generation diving with limited
//! discrepancy search — each node fixes the columns the LP already uses integrally (or
//! its largest fractional column), re-solves the residual LP with the shared column
//! pool, prunes by the residual bound and completes greedily. Passes with a growing
//! discrepancy budget run until the incumbent meets the bound (proven optimal) or the
//! deadline passes (the gap is then reported).

use crate::bounds;
use crate::colgen::ColGen;
use crate::complete;
use crate::greedy::best_greedy;
use crate::problem::{Pattern, Problem};
use crate::waste;
use std::time::Instant;

/// Largest discrepancy budget tried (passes run 0, 1, ..., this).
const MAX_DISCREPANCY: u32 = 12;
/// Residual problems with at most this many items are searched completely.
const RESIDUAL_ITEMS: usize = 40;
/// Time slice of one complete residual search.
const RESIDUAL_TIME: std::time::Duration = std::time::Duration::from_millis(30);
/// Alternatives tried at a node that still has discrepancy budget.
const BREADTH: usize = 3;

/// What the exact solver found.
#[derive(Debug, Clone)]
pub struct ExactResult {
    /// One pattern per used device.
    pub patterns: Vec<Pattern>,
    /// Their total cost.
    pub cost: u64,
    /// Proven lower bound on the optimum (equal to `cost` when optimal).
    pub bound: u64,
}

/// A proven lower bound that needs no LP: L2 when there is one device model whose
/// throughput never binds, else the fractional share-of-cost bound.
pub fn quick_bound(p: &Problem) -> u64 {
    // Each dimension separately: a device's items use at most all of its resource and
    // at most all of its throughput, so each sum is a valid bound on its own.
    let share = |x: u64, cap: u64| if cap == 0 { 0.0 } else { x as f64 / cap as f64 };
    let mut frac = [0.0f64; 2];
    for (t, ty) in p.types.iter().enumerate() {
        for (dim, acc) in frac.iter_mut().enumerate() {
            let per_item = (0..p.models.len())
                .filter(|&k| p.compat(t, k))
                .map(|k| {
                    let m = &p.models[k];
                    let s = if dim == 0 {
                        share(p.size(t, k), m.cap)
                    } else {
                        share(ty.thr, m.thr_cap)
                    };
                    m.cost as f64 * s
                })
                .fold(f64::INFINITY, f64::min);
            if per_item.is_finite() {
                *acc += per_item * ty.members.len() as f64;
            }
        }
    }
    let mut lb = (frac[0].max(frac[1]) - 1e-6).ceil().max(0.0) as u64;
    if p.models.len() == 1 {
        let m = &p.models[0];
        let thr: u128 = p
            .types
            .iter()
            .map(|t| u128::from(t.thr) * t.members.len() as u128)
            .sum();
        if thr <= u128::from(m.thr_cap) {
            let items: Vec<(u64, u64)> = p
                .types
                .iter()
                .enumerate()
                .map(|(t, ty)| (p.size(t, 0), ty.members.len() as u64))
                .collect();
            lb = lb.max(bounds::l2(&items, m.cap) * m.cost);
        }
    }
    lb
}

struct Search<'a> {
    p: &'a Problem,
    cg: ColGen<'a>,
    best: Vec<Pattern>,
    ub: u64,
    lb: u64,
    deadline: Instant,
    fixed: Vec<Pattern>,
}

/// Solves to optimality or until `deadline`. `incumbent` (a feasible placement, e.g.
/// FFD's) guarantees the answer is never worse than it. `None` means no placement was
/// found: `Err(true)` if the search proved there is none, `Err(false)` if time ran out.
pub fn solve(
    p: &Problem,
    incumbent: Option<Vec<Pattern>>,
    deadline: Instant,
) -> Result<ExactResult, bool> {
    let demand = p.demands();
    let avail = p.counts();
    let mut s = Search {
        p,
        cg: ColGen::new(p),
        ub: incumbent.as_ref().map_or(u64::MAX, |i| p.cost(i)),
        best: incumbent.unwrap_or_default(),
        lb: quick_bound(p),
        deadline,
        fixed: Vec::new(),
    };
    if let Some(g) = best_greedy(p, &demand, &avail) {
        s.offer_partial(&g, 0);
    }
    s.cg.add_patterns(&s.best.clone());
    if s.lb < s.ub {
        let root = s.cg.solve(&demand, &avail, None, f64::INFINITY, deadline);
        s.lb = s.lb.max(ceil_bound(root.bound));
        let mut disc = 0;
        while s.lb < s.ub && disc <= MAX_DISCREPANCY && Instant::now() < deadline {
            let (mut d, mut a) = (demand.clone(), avail.clone());
            s.dive(&mut d, &mut a, 0, disc, None);
            if disc == 0 && s.lb < s.ub {
                s.try_waste_proof();
            }
            disc += 1;
        }
    }
    let mut proven_none = false;
    if s.lb < s.ub && Instant::now() < deadline {
        let r = complete::search(p, &demand, &avail, s.ub, deadline);
        if let Some(pats) = r.improved {
            s.ub = p.cost(&pats);
            s.best = pats;
        }
        if r.finished {
            s.lb = s.ub;
            proven_none = s.best.is_empty();
        }
    }
    if s.best.is_empty() && demand.iter().any(|&d| d > 0) {
        return Err(proven_none);
    }
    Ok(ExactResult {
        cost: s.ub,
        bound: s.lb.min(s.ub),
        patterns: s.best,
    })
}

/// Rounds a floating lower bound on an integer cost up, with a tolerance.
fn ceil_bound(b: f64) -> u64 {
    (b - 1e-6).ceil().max(0.0) as u64
}

/// One dive move: copies of patterns to fix.
type Move = Vec<(Pattern, u32)>;

impl Search<'_> {
    /// For one device model with non-binding throughput (classical bin packing):
    /// raises the bound to the incumbent if no packing with one device fewer exists.
    fn try_waste_proof(&mut self) {
        let p = self.p;
        if p.models.len() != 1 || p.models[0].cost == 0 {
            return;
        }
        let m = &p.models[0];
        let thr: u128 = p
            .types
            .iter()
            .map(|t| u128::from(t.thr) * t.members.len() as u128)
            .sum();
        if thr > u128::from(m.thr_cap) || p.types.iter().any(|t| t.need_hw.max(t.need_sw) > m.cap) {
            return;
        }
        let items: Vec<(u64, u32)> = (0..p.types.len())
            .map(|t| (p.size(t, 0), p.types[t].members.len() as u32))
            .collect();
        let k = self.ub / m.cost - 1;
        if self.lb <= k * m.cost && waste::no_packing_in(&items, m.cap, k, self.deadline) {
            self.lb = self.ub;
        }
    }

    fn done(&self) -> bool {
        self.ub <= self.lb || Instant::now() >= self.deadline
    }

    /// Records `fixed ++ rest` if it is cheaper than the incumbent.
    fn offer_partial(&mut self, rest: &[Pattern], fixed_cost: u64) {
        let c = fixed_cost + self.p.cost(rest);
        if c < self.ub {
            self.ub = c;
            self.best = self.fixed.iter().chain(rest).cloned().collect();
        }
    }

    fn dive(
        &mut self,
        demand: &mut [u32],
        avail: &mut [u32],
        fixed_cost: u64,
        disc: u32,
        hint: Option<&[Pattern]>,
    ) {
        if self.done() {
            return;
        }
        if demand.iter().all(|&d| d == 0) {
            self.offer_partial(&[], fixed_cost);
            return;
        }
        if let Some(g) = best_greedy(self.p, demand, avail) {
            self.offer_partial(&g, fixed_cost);
        }
        if self.done() || fixed_cost >= self.ub {
            return;
        }
        let room = (self.ub - fixed_cost) as f64;
        let out = self.cg.solve(demand, avail, hint, room, self.deadline);
        if out.infeasible || fixed_cost + ceil_bound(out.bound) >= self.ub {
            return;
        }
        if demand.iter().map(|&d| d as usize).sum::<usize>() <= RESIDUAL_ITEMS {
            let slice = (Instant::now() + RESIDUAL_TIME).min(self.deadline);
            let r = complete::search(self.p, demand, avail, self.ub - fixed_cost, slice);
            if let Some(rest) = r.improved {
                self.offer_partial(&rest, fixed_cost);
            }
            if r.finished {
                return;
            }
        }
        let child_hint: Vec<Pattern> = out.columns.iter().map(|(p, _)| p.clone()).collect();
        let moves = moves(self.p, out.columns);
        let tries = if disc > 0 { BREADTH } else { 1 };
        for (i, mv) in moves.into_iter().take(tries).enumerate() {
            let next_disc = if i == 0 { disc } else { disc - 1 };
            let mark = self.fixed.len();
            let mut cost = fixed_cost;
            for (pat, copies) in mv {
                for _ in 0..copies {
                    if avail[pat.model] == 0 {
                        break;
                    }
                    let items: Vec<(u32, u32)> = pat
                        .items
                        .iter()
                        .map(|&(t, c)| (t, c.min(demand[t as usize])))
                        .filter(|&(_, c)| c > 0)
                        .collect();
                    if items.is_empty() {
                        break;
                    }
                    for &(t, c) in &items {
                        demand[t as usize] -= c;
                    }
                    avail[pat.model] -= 1;
                    cost += self.p.models[pat.model].cost;
                    self.fixed.push(Pattern {
                        model: pat.model,
                        items,
                    });
                }
            }
            if self.fixed.len() > mark {
                self.dive(demand, avail, cost, next_disc, Some(&child_hint));
            }
            for pat in self.fixed.drain(mark..) {
                for &(t, c) in &pat.items {
                    demand[t as usize] += c;
                }
                avail[pat.model] += 1;
            }
            if self.done() {
                return;
            }
        }
    }
}

/// Dive moves from an LP solution: first fix the largest column once (ties: the fuller
/// device); the alternatives fix every column at its integer part, or one other
/// fractional column once, largest value first.
fn moves(p: &Problem, mut cols: Vec<(Pattern, f64)>) -> Vec<Move> {
    let fill = |pat: &Pattern| -> f64 {
        let m = &p.models[pat.model];
        let used: u64 = pat
            .items
            .iter()
            .map(|&(t, c)| p.size(t as usize, pat.model) * u64::from(c))
            .sum();
        used as f64 / m.cap.max(1) as f64
    };
    cols.sort_by(|a, b| {
        let (xa, xb) = ((a.1 * 1e4).round(), (b.1 * 1e4).round());
        xb.total_cmp(&xa).then(fill(&b.0).total_cmp(&fill(&a.0)))
    });
    let whole: Move = cols
        .iter()
        .filter(|(_, x)| *x >= 1.0 - 1e-6)
        .map(|(pat, x)| (pat.clone(), (x + 1e-6).floor() as u32))
        .collect();
    let mut out: Vec<Move> = Vec::new();
    if let Some((pat, _)) = cols.first() {
        out.push(vec![(pat.clone(), 1)]);
    }
    if whole.len() > 1 {
        out.push(whole);
    }
    out.extend(
        cols.into_iter()
            .skip(1)
            .filter(|(_, x)| x - (x + 1e-6).floor() > 1e-6)
            .map(|(pat, _)| vec![(pat, 1)]),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{Device, DeviceKind, Instance, VnfInstance};
    use std::time::Duration;

    /// One device (cost 5, capacity 10, throughput 10) hosts a resource-heavy and a
    /// throughput-heavy instance together: every bound must stay ≤ 5.
    #[test]
    fn bounds_stay_valid_when_dimensions_complement() {
        let vnf = |id: &str, need, thr| VnfInstance {
            id: id.into(),
            function: "fw".into(),
            tcam_need: need,
            cpu_need: need,
            latency_bound_us: 9,
            throughput_gbps: thr,
        };
        let inst = Instance {
            name: "complement".into(),
            functions: vec!["fw".into()],
            devices: (0..2)
                .map(|i| Device {
                    id: format!("d{i}"),
                    model: String::new(),
                    kind: DeviceKind::Hardware,
                    functions: vec!["fw".into()],
                    cost: 5,
                    tcam_capacity: Some(10),
                    cpu_capacity: None,
                    latency_us: 1,
                    throughput_gbps: 10,
                })
                .collect(),
            vnf_instances: vec![vnf("a", 9, 1), vnf("b", 1, 9)],
        };
        let p = Problem::new(&inst);
        assert!(quick_bound(&p) <= 5);
        let r = solve(&p, None, Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!((r.cost, r.bound), (5, 5));
        let c = complete::search(
            &p,
            &p.demands(),
            &p.counts(),
            u64::MAX,
            Instant::now() + Duration::from_secs(5),
        );
        assert!(c.finished);
        assert_eq!(c.improved.map(|pats| p.cost(&pats)), Some(5));
    }
}
