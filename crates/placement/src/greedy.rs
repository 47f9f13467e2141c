//! Fast greedy packings on the grouped problem (residual demands and device counts),
//! used by the exact solver for its first incumbent and to complete every dive node:
//! first fit and best fit decreasing, opening either the cheapest device or the one
//! with the lowest cost per capacity, and a device-by-device fill that opens the model
//! whose fresh device holds the most item value per unit of cost.

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
    if let Some(pats) = fill_by_value(p, &order, demand, avail) {
        let c = p.cost(&pats);
        if best.as_ref().is_none_or(|(b, _)| c < *b) {
            best = Some((c, pats));
        }
    }
    best.map(|(_, pats)| pats)
}

/// A model-independent value of one item of type `t`: the least cost of the share of a
/// device it takes (its larger share of resource or throughput, on the model where
/// that costs least).
fn item_value(p: &Problem, t: usize) -> f64 {
    let share = |x: u64, cap: u64| if cap == 0 { 1.0 } else { x as f64 / cap as f64 };
    (0..p.models.len())
        .filter(|&k| p.compat(t, k))
        .map(|k| {
            let m = &p.models[k];
            m.cost as f64 * share(p.size(t, k), m.cap).max(share(p.types[t].thr, m.thr_cap))
        })
        .fold(f64::INFINITY, f64::min)
}

/// Fills a fresh device of `model` first fit with the items left, in `order`; the
/// items it takes as (type, count), sorted by type.
fn fill(p: &Problem, model: usize, order: &[usize], left: &[u32]) -> Vec<(u32, u32)> {
    let m = &p.models[model];
    let (mut rem, mut rem_thr) = (m.cap, m.thr_cap);
    let mut items = Vec::new();
    for &t in order {
        if left[t] == 0 || !p.compat(t, model) {
            continue;
        }
        let (s, thr) = (p.size(t, model), p.types[t].thr);
        let by_need = rem.checked_div(s).unwrap_or(u64::MAX);
        let by_thr = rem_thr.checked_div(thr).unwrap_or(u64::MAX);
        let c = by_need.min(by_thr).min(u64::from(left[t])) as u32;
        if c > 0 {
            rem -= s * u64::from(c);
            rem_thr -= thr * u64::from(c);
            items.push((t as u32, c));
        }
    }
    items.sort_unstable();
    items
}

/// Device-by-device greedy for many models: for the largest item left, fills a fresh
/// device of every model that can host it (first fit over the items in decreasing
/// order) and keeps the one with the most item value per unit of cost. Opening by cost
/// or cost per capacity alone ignores which items a model can host and its throughput.
fn fill_by_value(
    p: &Problem,
    order: &[usize],
    demand: &[u32],
    avail: &[u32],
) -> Option<Vec<Pattern>> {
    let value: Vec<f64> = (0..p.types.len()).map(|t| item_value(p, t)).collect();
    let mut left = demand.to_vec();
    let mut devices = avail.to_vec();
    let mut pats = Vec::new();
    while let Some(pos) = order.iter().position(|&t| left[t] > 0) {
        let first = order[pos];
        let mut best: Option<(f64, Pattern)> = None;
        for k in (0..p.models.len()).filter(|&k| devices[k] > 0 && p.compat(first, k)) {
            // The largest item goes in first, so that every device makes progress.
            let items = fill(p, k, &order[pos..], &left);
            if !items.iter().any(|&(t, _)| t as usize == first) {
                continue;
            }
            let v: f64 = items
                .iter()
                .map(|&(t, c)| value[t as usize] * f64::from(c))
                .sum();
            let score = v / p.models[k].cost.max(1) as f64;
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, Pattern { model: k, items }));
            }
        }
        let (_, pat) = best?;
        for &(t, c) in &pat.items {
            left[t as usize] -= c;
        }
        devices[pat.model] -= 1;
        pats.push(pat);
    }
    Some(pats)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::Family;

    #[test]
    fn the_value_fill_is_feasible_and_best_greedy_keeps_the_cheapest() {
        let mut filled = 0;
        for f in Family::ALL {
            for seed in 0..4 {
                let p = Problem::new(&f.generate(60, seed));
                let (demand, avail) = (p.demands(), p.counts());
                let mut order: Vec<usize> = (0..p.types.len()).collect();
                order.sort_by(|&a, &b| p.rel_size(b).total_cmp(&p.rel_size(a)));
                // With binding device counts (few-expensive) it may run out of devices.
                let Some(pats) = fill_by_value(&p, &order, &demand, &avail) else {
                    continue;
                };
                filled += 1;
                let mut covered = vec![0u32; demand.len()];
                let mut used = vec![0u32; avail.len()];
                for pat in &pats {
                    assert!(p.fits(pat), "{} {seed}", f.name());
                    used[pat.model] += 1;
                    for &(t, c) in &pat.items {
                        covered[t as usize] += c;
                    }
                }
                assert_eq!(covered, demand);
                assert!(used.iter().zip(&avail).all(|(u, a)| u <= a));
                let best = best_greedy(&p, &demand, &avail).unwrap();
                assert!(p.cost(&best) <= p.cost(&pats));
            }
        }
        assert!(filled >= 20, "{filled} of 24");
    }
}
