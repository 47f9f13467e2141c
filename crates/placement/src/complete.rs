//! Complete depth-first search over item-to-device assignments, the last phase of the
//! exact solver when the LP bound leaves a gap (or no placement is known yet): items
//! by decreasing size go into an open device (devices in an identical state are tried
//! once) or a newly opened device of each model; a node is pruned when the cost of
//! its open devices plus a share-of-cost bound on the remaining items cannot beat the
//! incumbent. Finishing the search proves the incumbent optimal (or none exists).

use crate::problem::{Pattern, Problem};
use std::time::Instant;

struct Bin {
    model: usize,
    rem: u64,
    rem_thr: u64,
}

struct Dfs<'a> {
    p: &'a Problem,
    items: Vec<usize>,
    /// Suffix sums of each item's cheapest share of cost, per dimension
    /// (resource, throughput).
    tail: Vec<[f64; 2]>,
    bins: Vec<Bin>,
    placed: Vec<usize>,
    avail: Vec<u32>,
    best: Option<(u64, Vec<usize>, Vec<usize>)>,
    ub: u64,
    deadline: Instant,
    nodes: u64,
    timed_out: bool,
}

/// Outcome of the complete search.
pub struct CompleteResult {
    /// Best placement found below the given bound (patterns), if any.
    pub improved: Option<Vec<Pattern>>,
    /// Whether the search finished (so the result is optimal, or nothing beats `ub`).
    pub finished: bool,
}

fn share(x: u64, cap: u64) -> f64 {
    if cap == 0 {
        0.0
    } else {
        x as f64 / cap as f64
    }
}

/// Searches for a placement of `demand` items on `avail` devices cheaper than `ub`
/// until `deadline`.
pub fn search(
    p: &Problem,
    demand: &[u32],
    avail: &[u32],
    ub: u64,
    deadline: Instant,
) -> CompleteResult {
    let mut items: Vec<usize> = Vec::new();
    let sizes: Vec<f64> = (0..p.types.len()).map(|t| p.rel_size(t)).collect();
    let mut order: Vec<usize> = (0..p.types.len()).collect();
    order.sort_by(|&a, &b| sizes[b].total_cmp(&sizes[a]));
    for t in order {
        items.extend(std::iter::repeat_n(t, demand[t] as usize));
    }
    let min_share: Vec<[f64; 2]> = (0..p.types.len())
        .map(|t| {
            let per_dim = |dim: usize| {
                (0..p.models.len())
                    .filter(|&k| p.compat(t, k))
                    .map(|k| {
                        let m = &p.models[k];
                        let s = if dim == 0 {
                            share(p.size(t, k), m.cap)
                        } else {
                            share(p.types[t].thr, m.thr_cap)
                        };
                        m.cost as f64 * s
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            [per_dim(0), per_dim(1)]
        })
        .collect();
    let mut tail = vec![[0.0; 2]; items.len() + 1];
    for i in (0..items.len()).rev() {
        tail[i] = [
            tail[i + 1][0] + min_share[items[i]][0],
            tail[i + 1][1] + min_share[items[i]][1],
        ];
    }
    let mut d = Dfs {
        p,
        tail,
        bins: Vec::new(),
        placed: vec![usize::MAX; items.len()],
        items,
        avail: avail.to_vec(),
        best: None,
        ub,
        deadline,
        nodes: 0,
        timed_out: false,
    };
    d.go(0, 0);
    let improved = d.best.take().map(|(_, placed, models)| {
        let mut pats: Vec<Pattern> = models
            .iter()
            .map(|&model| Pattern {
                model,
                items: Vec::new(),
            })
            .collect();
        for (i, &b) in placed.iter().enumerate() {
            let t = d.items[i] as u32;
            let its = &mut pats[b].items;
            match its.iter_mut().find(|(x, _)| *x == t) {
                Some((_, c)) => *c += 1,
                None => its.push((t, 1)),
            }
        }
        for pat in &mut pats {
            pat.items.sort_unstable();
        }
        pats
    });
    CompleteResult {
        improved,
        finished: !d.timed_out,
    }
}

impl Dfs<'_> {
    fn go(&mut self, i: usize, cost: u64) {
        self.nodes += 1;
        if self.nodes.is_multiple_of(256) && Instant::now() >= self.deadline {
            self.timed_out = true;
        }
        if self.timed_out || cost >= self.ub {
            return;
        }
        if i == self.items.len() {
            self.ub = cost;
            self.best = Some((
                cost,
                self.placed.clone(),
                self.bins.iter().map(|b| b.model).collect(),
            ));
            return;
        }
        let mut absorb = [0.0f64; 2];
        for b in &self.bins {
            let m = &self.p.models[b.model];
            absorb[0] += m.cost as f64 * share(b.rem, m.cap);
            absorb[1] += m.cost as f64 * share(b.rem_thr, m.thr_cap);
        }
        let need = (self.tail[i][0] - absorb[0]).max(self.tail[i][1] - absorb[1]);
        let extra = (need - 1e-9).ceil().max(0.0) as u64;
        if cost + extra >= self.ub {
            return;
        }
        let t = self.items[i];
        let thr = self.p.types[t].thr;
        for b in 0..self.bins.len() {
            let (k, rem, rem_thr) = (self.bins[b].model, self.bins[b].rem, self.bins[b].rem_thr);
            let s = self.p.size(t, k);
            if !self.p.compat(t, k) || s > rem || thr > rem_thr {
                continue;
            }
            if self.bins[..b]
                .iter()
                .any(|o| o.model == k && o.rem == rem && o.rem_thr == rem_thr)
            {
                continue;
            }
            self.bins[b].rem -= s;
            self.bins[b].rem_thr -= thr;
            self.placed[i] = b;
            self.go(i + 1, cost);
            self.bins[b].rem += s;
            self.bins[b].rem_thr += thr;
            if self.timed_out {
                return;
            }
        }
        for k in 0..self.p.models.len() {
            if self.avail[k] == 0 || !self.p.compat(t, k) {
                continue;
            }
            let m = &self.p.models[k];
            self.avail[k] -= 1;
            self.bins.push(Bin {
                model: k,
                rem: m.cap - self.p.size(t, k),
                rem_thr: m.thr_cap - thr,
            });
            self.placed[i] = self.bins.len() - 1;
            self.go(i + 1, cost + m.cost);
            self.bins.pop();
            self.avail[k] += 1;
            if self.timed_out {
                return;
            }
        }
    }
}
