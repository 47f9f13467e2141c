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
}

/// Column pool and reusable pricing buffers, shared by all nodes of a search.
pub struct ColGen<'a> {
    p: &'a Problem,
    pool: Vec<Pattern>,
    seen: HashSet<Pattern>,
    pricer: Pricer,
}

impl<'a> ColGen<'a> {
    /// An empty pool for problem `p`.
    pub fn new(p: &'a Problem) -> ColGen<'a> {
        ColGen {
            p,
            pool: Vec::new(),
            seen: HashSet::new(),
            pricer: Pricer::default(),
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

    /// Number of patterns generated so far.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }

    /// Solves the LP of the residual problem (`demand` per type, `avail` per model);
    /// stops early once the bound reaches `stop_at`.
    /// `hint`, if given, replaces the whole pool as the starting columns (a dive node
    /// starts from its parent's LP columns; pricing regenerates anything missing).
    pub fn solve(
        &mut self,
        demand: &[u32],
        avail: &[u32],
        hint: Option<&[Pattern]>,
        stop_at: f64,
        deadline: Instant,
    ) -> LpOutcome {
        let p = self.p;
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
        let rhs_ge: Vec<f64> = types.iter().map(|&t| f64::from(demand[t])).collect();
        let rhs_le: Vec<f64> = models.iter().map(|&k| f64::from(avail[k])).collect();
        let big_m = (models
            .iter()
            .map(|&k| p.models[k].cost as f64 * f64::from(avail[k]))
            .sum::<f64>()
            + 1.0)
            .min(1e9);
        let mut lp = Master::new(&rhs_ge, &rhs_le, big_m);
        let mut local: Vec<Pattern> = Vec::new();
        let mut local_seen: HashSet<Pattern> = HashSet::new();
        let mut entries: Vec<(usize, f64)> = Vec::new();
        let add = |lp: &mut Master,
                   local: &mut Vec<Pattern>,
                   entries: &mut Vec<(usize, f64)>,
                   pat: Pattern| {
            entries.clear();
            for &(t, c) in &pat.items {
                entries.push((row_of_type[t as usize], f64::from(c)));
            }
            entries.push((row_of_model[pat.model], 1.0));
            lp.add_column(p.models[pat.model].cost as f64, entries);
            local.push(pat);
        };
        let singletons = types.iter().filter_map(|&t| {
            models
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
            .filter(|pat| row_of_model[pat.model] != usize::MAX)
            .filter_map(|pat| {
                let items: Vec<(u32, u32)> = pat
                    .items
                    .iter()
                    .filter(|&&(t, _)| demand[t as usize] > 0)
                    .map(|&(t, c)| (t, c.min(demand[t as usize])))
                    .collect();
                (!items.is_empty()).then_some(Pattern {
                    model: pat.model,
                    items,
                })
            })
            .chain(singletons)
            .collect();
        for pat in clipped {
            if local_seen.insert(pat.clone()) {
                add(&mut lp, &mut local, &mut entries, pat);
            }
        }
        let mut bound = 0.0f64;
        let mut kitems: Vec<KItem> = Vec::new();
        let mut converged = false;
        loop {
            if lp.solve(deadline) == LpStatus::TimeLimit {
                break;
            }
            let y: Vec<f64> = lp.duals().to_vec();
            let dy: f64 = types
                .iter()
                .enumerate()
                .map(|(r, &t)| f64::from(demand[t]) * y[r].max(0.0))
                .sum();
            let mut theta = 1.0f64;
            let mut lagr = dy;
            let mut new_cols: Vec<Pattern> = Vec::new();
            let mut proven = true;
            for &k in &models {
                let m = &p.models[k];
                kitems.clear();
                for &t in &types {
                    if p.compat(t, k) {
                        kitems.push(KItem {
                            t: t as u32,
                            w1: p.size(t, k),
                            w2: p.types[t].thr,
                            v: y[row_of_type[t]].max(0.0),
                            copies: demand[t],
                        });
                    }
                }
                let ans = self.pricer.solve(&kitems, m.cap, m.thr_cap);
                let cost = m.cost as f64;
                if ans.upper > cost {
                    theta = theta.min(cost / ans.upper);
                    lagr += f64::from(avail[k]) * (cost - ans.upper);
                }
                let mu = y[row_of_model[k]].min(0.0);
                if cost - mu - ans.value < -1e-9 && !ans.items.is_empty() {
                    let mut items = ans.items;
                    items.sort_unstable();
                    new_cols.push(Pattern { model: k, items });
                } else if cost - mu - ans.upper < -1e-9 {
                    proven = false;
                }
            }
            bound = bound.max(theta * dy).max(lagr);
            let obj = lp.objective();
            if new_cols.is_empty() {
                if proven {
                    bound = bound.max(obj);
                    converged = true;
                }
                break;
            }
            if bound >= stop_at - 1e-6 || (bound - 1e-6).ceil() >= (obj - 1e-6).ceil() {
                break;
            }
            let mut added = false;
            for pat in new_cols {
                if local_seen.insert(pat.clone()) {
                    if self.seen.insert(pat.clone()) {
                        self.pool.push(pat.clone());
                    }
                    add(&mut lp, &mut local, &mut entries, pat);
                    added = true;
                }
            }
            if !added || Instant::now() >= deadline {
                break;
            }
        }
        let first = lp.first_structural();
        let columns = local
            .iter()
            .enumerate()
            .map(|(i, pat)| (pat, lp.value(first + i)))
            .filter(|(_, x)| *x > 1e-9)
            .map(|(pat, x)| (pat.clone(), x))
            .collect();
        LpOutcome {
            bound,
            infeasible: converged && lp.artificial() > 1e-3,
            columns,
        }
    }
}
