//! Fast greedy packings on the grouped problem (residual demands and device counts),
//! used by the exact solver for its first incumbent and to complete every dive node:
//! first fit and best fit decreasing, opening either the cheapest device or the one
//! with the lowest cost per capacity.

use crate::problem::{Pattern, Problem};

struct Bin {
    model: usize,
    rem: u64,
    rem_thr: u64,
    items: Vec<(u32, u32)>,
}

/// How a greedy pass chooses among open devices and which model it opens.
#[derive(Debug, Clone, Copy)]
struct Rule {
    best_fit: bool,
    cost_per_capacity: bool,
}

/// Best of the greedy variants; `None` if some item cannot be placed.
pub fn best_greedy(p: &Problem, demand: &[u32], avail: &[u32]) -> Option<Vec<Pattern>> {
    let mut order: Vec<usize> = (0..p.types.len()).filter(|&t| demand[t] > 0).collect();
    let sizes: Vec<f64> = (0..p.types.len()).map(|t| p.rel_size(t)).collect();
    order.sort_by(|&a, &b| sizes[b].total_cmp(&sizes[a]));
    let mut best: Option<(u64, Vec<Pattern>)> = None;
    for best_fit in [true, false] {
        for cost_per_capacity in [false, true] {
            let rule = Rule {
                best_fit,
                cost_per_capacity,
            };
            if let Some(pats) = pack(p, &order, demand, avail, rule) {
                let c = p.cost(&pats);
                if best.as_ref().is_none_or(|(b, _)| c < *b) {
                    best = Some((c, pats));
                }
            }
        }
    }
    best.map(|(_, pats)| pats)
}

fn pack(
    p: &Problem,
    order: &[usize],
    demand: &[u32],
    avail: &[u32],
    rule: Rule,
) -> Option<Vec<Pattern>> {
    let mut left = avail.to_vec();
    let mut bins: Vec<Bin> = Vec::new();
    for &t in order {
        let thr = p.types[t].thr;
        for _ in 0..demand[t] {
            let mut chosen: Option<usize> = None;
            let mut best_slack = f64::INFINITY;
            for (b, bin) in bins.iter().enumerate() {
                let k = bin.model;
                let s = p.size(t, k);
                if !p.compat(t, k) || s > bin.rem || thr > bin.rem_thr {
                    continue;
                }
                if !rule.best_fit {
                    chosen = Some(b);
                    break;
                }
                let m = &p.models[k];
                let slack = (bin.rem - s) as f64 / m.cap.max(1) as f64
                    + (bin.rem_thr - thr) as f64 / m.thr_cap.max(1) as f64;
                if slack < best_slack {
                    best_slack = slack;
                    chosen = Some(b);
                }
            }
            let b = match chosen {
                Some(b) => b,
                None => {
                    let k = (0..p.models.len())
                        .filter(|&k| left[k] > 0 && p.compat(t, k))
                        .min_by(|&a, &b| {
                            let key = |k: usize| {
                                let m = &p.models[k];
                                let c = m.cost as f64;
                                if rule.cost_per_capacity {
                                    c / (m.cap.max(1) as f64)
                                } else {
                                    c
                                }
                            };
                            key(a)
                                .total_cmp(&key(b))
                                .then(p.models[b].cap.cmp(&p.models[a].cap))
                        })?;
                    left[k] -= 1;
                    bins.push(Bin {
                        model: k,
                        rem: p.models[k].cap,
                        rem_thr: p.models[k].thr_cap,
                        items: Vec::new(),
                    });
                    bins.len() - 1
                }
            };
            let bin = &mut bins[b];
            bin.rem -= p.size(t, bin.model);
            bin.rem_thr -= thr;
            match bin.items.last_mut() {
                Some((lt, c)) if *lt == t as u32 => *c += 1,
                _ => bin.items.push((t as u32, 1)),
            }
        }
    }
    Some(
        bins.into_iter()
            .map(|b| {
                let mut items = b.items;
                items.sort_unstable();
                Pattern {
                    model: b.model,
                    items,
                }
            })
            .collect(),
    )
}
