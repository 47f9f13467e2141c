//! Column generation for the LP relaxation of the placement problem (Gilmore–Gomory
//! for bin packing, generalised): columns are feasible device contents with the
//! device's cost, rows cover item-type demands and cap the number of devices of each
//! model. Pricing is a knapsack per model (see `pricing`). Every iteration yields a
//! proven lower bound (Farley and Lagrangian), so a time limit or an early stop still
//! leaves a valid bound, and generation stops as soon as the rounded-up bound meets the
//! rounded-up LP value (costs are integers).

use crate::pricing::{KItem, Pricer};
use crate::problem::{Pattern, Problem};
use crate::simplex::{LpStatus, Master};
use std::collections::HashSet;
use std::time::Instant;

/// Result of one LP solve on a residual problem.
#[derive(Debug, Clone, Default)]
pub struct LpOutcome {
    /// A proven lower bound on the cost of any placement of the residual problem.
    pub bound: f64,
    /// The LP is infeasible (not enough devices), so the residual problem is too.
    pub infeasible: bool,
    /// Columns with positive value in the last master solution.
    pub columns: Vec<(Pattern, f64)>,
    /// Per item type, the covering dual of the best bound found (0 for types without
    /// demand): guidance for primal heuristics and reduced-cost budgets.
    pub duals: Vec<f64>,
}

/// Column pool and reusable pricing buffers, shared by all nodes of a search.
pub struct ColGen<'a> {
    p: &'a Problem,
    pool: Vec<Pattern>,
    seen: HashSet<Pattern>,
    pricer: Pricer,
    kitems: Vec<KItem>,
    /// Largest LP value − bound at which a `full` solve may stop early.
    full_gap: f64,
    /// Relative LP value − bound at which a solve that is not `full` stops (0: off),
    /// and from when on.
    tail_gap: f64,
    tail_from: Option<Instant>,
}

impl<'a> ColGen<'a> {
    /// An empty pool for problem `p`.
    pub fn new(p: &'a Problem) -> ColGen<'a> {
        ColGen {
            p,
            pool: Vec::new(),
            seen: HashSet::new(),
            pricer: Pricer::default(),
            kitems: Vec::new(),
            full_gap: FULL_GAP,
            tail_gap: 0.0,
            tail_from: None,
        }
    }

    /// Adds known good patterns (e.g. of a heuristic solution) to the pool.
    pub fn add_patterns(&mut self, pats: &[Pattern]) {
        for pat in pats {
            if self.seen.insert(pat.clone()) {
                self.pool.push(pat.clone());
            }
        }
    }

    /// The patterns generated so far (e.g. to seed another column generation).
    pub fn patterns(&self) -> &[Pattern] {
        &self.pool
    }

    /// Sets how close a `full` solve must get (LP value − bound) before it may stop
    /// early (default 0.01); smaller values give near-optimal duals.
    pub fn set_full_gap(&mut self, gap: f64) {
        self.full_gap = gap;
    }

    /// Makes solves that are not `full` stop once LP value − bound ≤ `rel` × LP value,
    /// if it is `from` or later (`None`: at once): on hybrid instances the last rounds
    /// of a slow root, one column each with pricing at its slowest, take most of its
    /// time and move the bound by a fraction of a cost unit that branch and price
    /// recovers anyway. `rel = 0` turns it off.
    pub fn set_tail_gap(&mut self, rel: f64, from: Option<Instant>) {
        self.tail_gap = rel;
        self.tail_from = from;
    }

    /// Number of patterns generated so far.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }

    /// Solves the LP of the residual problem (`demand` per type, `avail` per model);
    /// stops early once the bound reaches `stop_at` or once the rounded-up bound meets
    /// the rounded-up LP value (with `full`, only when they are also within
    /// [`FULL_GAP`], so that the duals are near optimal).
    /// `hint`, if given, replaces the whole pool as the starting columns (a dive node
    /// starts from its parent's LP columns; pricing regenerates anything missing).
    pub fn solve(
        &mut self,
        demand: &[u32],
        avail: &[u32],
        hint: Option<&[Pattern]>,
        stop_at: f64,
        full: bool,
        deadline: Instant,
    ) -> LpOutcome {
        let p = self.p;
        self.pricer.set_deadline(Some(deadline));
        let types: Vec<usize> = (0..p.types.len()).filter(|&t| demand[t] > 0).collect();
        let mut row_of_type = vec![usize::MAX; p.types.len()];
        for (r, &t) in types.iter().enumerate() {
            row_of_type[t] = r;
        }
        let models: Vec<usize> = (0..p.models.len())
            .filter(|&k| avail[k] > 0 && types.iter().any(|&t| p.compat(t, k)))
            .collect();
        let mut row_of_model = vec![usize::MAX; p.models.len()];
        for (i, &k) in models.iter().enumerate() {
            row_of_model[k] = types.len() + i;
        }
        let ctx = PriceCtx {
            types: &types,
            models: &models,
            row_of_type: &row_of_type,
            row_of_model: &row_of_model,
            demand,
            avail,
        };
        let mut m = self.residual_lp(&ctx, hint);
        let mut bound = 0.0f64;
        let mut converged = false;
        // Wentges smoothing: price at a mix of the best-bound duals (the stability
        // centre) and the master's duals; a round whose columns do not price out at
        // the master's duals (a mis-pricing) is repeated at the master's duals.
        let mut center: Option<Vec<f64>> = None;
        loop {
            // On a time limit or numerical failure the bound proven so far stands.
            if m.lp.solve(deadline) != LpStatus::Optimal {
                break;
            }
            let y: Vec<f64> = m.lp.duals().to_vec();
            let obj = m.lp.objective();
            let mut new_cols: Vec<Pattern> = Vec::new();
            let mut exhausted = false;
            for smoothed in [true, false] {
                let pi: Vec<f64> = match (&center, smoothed) {
                    (Some(c), true) => c
                        .iter()
                        .zip(&y)
                        .map(|(a, b)| SMOOTHING * a + (1.0 - SMOOTHING) * b)
                        .collect(),
                    (None, true) => continue,
                    (_, false) => y.clone(),
                };
                let round = self.price(&ctx, &pi);
                if round.bound > bound || center.is_none() {
                    bound = bound.max(round.bound);
                    center = Some(pi.clone());
                }
                new_cols = round
                    .columns
                    .into_iter()
                    .filter(|pat| reduced_cost(p, &ctx, &y, pat) < -1e-9)
                    .collect();
                if !new_cols.is_empty() {
                    break;
                }
                if !smoothed {
                    exhausted = round.proven;
                }
            }
            if new_cols.is_empty() {
                if exhausted {
                    if obj > bound {
                        bound = obj;
                        center = Some(y);
                    }
                    converged = true;
                }
                break;
            }
            if bound >= stop_at - 1e-6
                || (!full
                    && obj - bound <= self.tail_gap * obj
                    && self.tail_from.is_none_or(|t| Instant::now() >= t))
                || ((!full || obj - bound <= self.full_gap)
                    && (bound - 1e-6).ceil() >= (obj - 1e-6).ceil())
            {
                break;
            }
            let mut added = false;
            for pat in new_cols {
                if m.add(p, &ctx, pat.clone()) {
                    if self.seen.insert(pat.clone()) {
                        self.pool.push(pat);
                    }
                    added = true;
                }
            }
            if !added || Instant::now() >= deadline {
                break;
            }
        }
        let first = m.lp.first_structural() + m.exchanges;
        let columns = m
            .local
            .iter()
            .enumerate()
            .map(|(i, pat)| (pat, m.lp.value(first + i)))
            .filter(|(_, x)| *x > 1e-9)
            .map(|(pat, x)| (pat.clone(), x))
            .collect();
        let mut duals = vec![0.0; p.types.len()];
        if let Some(c) = &center {
            for &t in &types {
                duals[t] = c[row_of_type[t]].max(0.0);
            }
        }
        LpOutcome {
            bound,
            infeasible: converged && m.lp.artificial() > 1e-3,
            columns,
            duals,
        }
    }

    /// The residual problem's master LP with its starting columns: the pool's (or the
    /// hint's), clipped to the demand, and the cheapest single-item column of every type.
    fn residual_lp(&self, ctx: &PriceCtx, hint: Option<&[Pattern]>) -> ResidualLp {
        let p = self.p;
        let rhs_ge: Vec<f64> = ctx
            .types
            .iter()
            .map(|&t| f64::from(ctx.demand[t]))
            .collect();
        let rhs_le: Vec<f64> = ctx
            .models
            .iter()
            .map(|&k| f64::from(ctx.avail[k]))
            .collect();
        let big_m = big_m(p, ctx.models, ctx.avail);
        let mut lp = Master::new(&rhs_ge, &rhs_le, big_m);
        // Dual-optimal inequalities π_a ≥ π_b when type a dominates type b (b fits
        // wherever a does, needing no more): as primal columns "cover b with a's
        // surplus". They leave the LP value unchanged and cut tailing-off.
        let mut by_size = ctx.types.to_vec();
        by_size.sort_by(|&a, &b| p.rel_size(b).total_cmp(&p.rel_size(a)).then(a.cmp(&b)));
        let mut exchanges = 0;
        for w in by_size.windows(2) {
            if dominates(p, w[0], w[1]) {
                lp.add_column(
                    0.0,
                    &[(ctx.row_of_type[w[1]], 1.0), (ctx.row_of_type[w[0]], -1.0)],
                );
                exchanges += 1;
            }
        }
        let singletons = ctx.types.iter().filter_map(|&t| {
            ctx.models
                .iter()
                .copied()
                .filter(|&k| p.compat(t, k))
                .min_by_key(|&k| p.models[k].cost)
                .map(|k| Pattern {
                    model: k,
                    items: vec![(t as u32, 1)],
                })
        });
        let start: &[Pattern] = hint.unwrap_or(&self.pool);
        let clipped: Vec<Pattern> = start
            .iter()
            .filter(|pat| ctx.row_of_model[pat.model] != usize::MAX)
            .filter_map(|pat| {
                let items = pat.clipped(ctx.demand);
                (!items.is_empty()).then_some(Pattern {
                    model: pat.model,
                    items,
                })
            })
            .chain(singletons)
            .collect();
        let mut m = ResidualLp {
            lp,
            local: Vec::new(),
            seen: HashSet::new(),
            exchanges,
            entries: Vec::new(),
        };
        for pat in clipped {
            m.add(p, ctx, pat);
        }
        m
    }

    /// Prices every model at duals `pi`: the best pattern per model, and the bound
    /// (Farley and Lagrangian) that `pi` proves.
    fn price(&mut self, ctx: &PriceCtx, pi: &[f64]) -> PriceRound {
        let p = self.p;
        let dy: f64 = ctx
            .types
            .iter()
            .enumerate()
            .map(|(r, &t)| f64::from(ctx.demand[t]) * pi[r].max(0.0))
            .sum();
        let mut theta = 1.0f64;
        let mut lagr = dy;
        let mut columns = Vec::new();
        let mut proven = true;
        for &k in ctx.models {
            let m = &p.models[k];
            self.kitems.clear();
            for &t in ctx.types {
                if p.compat(t, k) {
                    self.kitems.push(KItem {
                        t: t as u32,
                        w1: p.size(t, k),
                        w2: p.types[t].thr,
                        v: pi[ctx.row_of_type[t]].max(0.0),
                        copies: ctx.demand[t],
                    });
                }
            }
            let ans = self.pricer.solve(&self.kitems, m.cap, m.thr_cap);
            let cost = m.cost as f64;
            if ans.upper > cost {
                theta = theta.min(cost / ans.upper);
                lagr += f64::from(ctx.avail[k]) * (cost - ans.upper);
            }
            let mu = pi[ctx.row_of_model[k]].min(0.0);
            if cost - mu - ans.value < -1e-9 && !ans.items.is_empty() {
                let mut items = ans.items;
                items.sort_unstable();
                columns.push(Pattern { model: k, items });
                for (value, mut items) in ans.more {
                    if cost - mu - value < -1e-9 {
                        items.sort_unstable();
                        columns.push(Pattern { model: k, items });
                    }
                }
            } else if cost - mu - ans.upper < -1e-9 {
                proven = false;
            }
        }
        PriceRound {
            bound: (theta * dy).max(lagr),
            columns,
            proven,
        }
    }
}

/// Largest LP value − bound at which a `full` solve may still stop early.
const FULL_GAP: f64 = 0.01;

/// Smoothing weight of the stability centre (Wentges).
const SMOOTHING: f64 = 0.5;

/// Row maps and right-hand sides of one residual LP, for pricing.
struct PriceCtx<'c> {
    types: &'c [usize],
    models: &'c [usize],
    row_of_type: &'c [usize],
    row_of_model: &'c [usize],
    demand: &'c [u32],
    avail: &'c [u32],
}

/// A residual problem's master LP and its columns.
struct ResidualLp {
    lp: Master,
    /// The columns in LP order, from the first structural variable after the exchanges.
    local: Vec<Pattern>,
    /// The columns added, so that none is added twice.
    seen: HashSet<Pattern>,
    /// Dominance exchange columns, before the patterns.
    exchanges: usize,
    /// Scratch: one column's entries.
    entries: Vec<(usize, f64)>,
}

impl ResidualLp {
    /// Adds `pat` unless the LP has it already; returns whether it was added.
    fn add(&mut self, p: &Problem, ctx: &PriceCtx, pat: Pattern) -> bool {
        if !self.seen.insert(pat.clone()) {
            return false;
        }
        self.entries.clear();
        for &(t, c) in &pat.items {
            self.entries
                .push((ctx.row_of_type[t as usize], f64::from(c)));
        }
        self.entries.push((ctx.row_of_model[pat.model], 1.0));
        self.lp
            .add_column(p.models[pat.model].cost as f64, &self.entries);
        self.local.push(pat);
        true
    }
}

/// What one pricing round at some duals found.
struct PriceRound {
    /// The lower bound these duals prove.
    bound: f64,
    /// The best patterns of each model whose reduced cost at these duals is negative.
    columns: Vec<Pattern>,
    /// Whether the pricing was exact, so that no column means none exists.
    proven: bool,
}

/// Reduced cost of a pattern at the master's duals `y`.
fn reduced_cost(p: &Problem, ctx: &PriceCtx, y: &[f64], pat: &Pattern) -> f64 {
    let mut rc = p.models[pat.model].cost as f64 - y[ctx.row_of_model[pat.model]].min(0.0);
    for &(t, c) in &pat.items {
        rc -= y[ctx.row_of_type[t as usize]].max(0.0) * f64::from(c);
    }
    rc
}

/// Whether type `a` dominates type `b`: every model that hosts `a` hosts `b`, with a
/// need and a throughput no larger, so `b` can take `a`'s place in any pattern.
fn dominates(p: &Problem, a: usize, b: usize) -> bool {
    p.types[b].thr <= p.types[a].thr
        && (0..p.models.len())
            .filter(|&k| p.compat(a, k))
            .all(|k| p.compat(b, k) && p.size(b, k) <= p.size(a, k))
}

/// The cost of the master's artificial columns: more than every available device of
/// `models` together (capped), so an optimal LP uses none while a real cover exists.
pub(crate) fn big_m(p: &Problem, models: &[usize], avail: &[u32]) -> f64 {
    (models
        .iter()
        .map(|&k| p.models[k].cost as f64 * f64::from(avail[k]))
        .sum::<f64>()
        + 1.0)
        .min(1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator;
    use std::time::Duration;

    /// With a tail gap the root stops early, yet its bound stays below the converged
    /// LP value and within the gap of it.
    #[test]
    fn tail_gap_keeps_a_valid_close_bound() {
        for seed in 0..3 {
            let p = Problem::new(&generator::generate(30, seed));
            let (d, a) = (p.demands(), p.counts());
            let far = Instant::now() + Duration::from_secs(20);
            let mut full = ColGen::new(&p);
            full.set_full_gap(1e-7);
            let lp = full.solve(&d, &a, None, f64::INFINITY, true, far).bound;
            let mut tail = ColGen::new(&p);
            tail.set_tail_gap(0.002, None);
            let b = tail.solve(&d, &a, None, f64::INFINITY, false, far).bound;
            assert!(b <= lp + 1e-6, "seed {seed}: {b} > LP {lp}");
            assert!(b >= lp * (1.0 - 0.002) - 1e-6, "seed {seed}: {b} ≪ LP {lp}");
        }
    }
}
