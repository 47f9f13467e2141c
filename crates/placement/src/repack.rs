//! Large neighbourhood search for placements: frees the contents of a few devices of
//! the incumbent and re-places them exactly (the complete search of `complete.rs`) on
//! those devices plus the devices nobody uses, keeping any cheaper result. It finds
//! the local improvements the LP-guided dives miss on hybrid instances (two servers
//! replaced by one larger, instances moved so that a device closes).

use crate::complete;
use crate::problem::{Pattern, Problem};
use std::time::{Duration, Instant};

/// Time limit of one sub-problem search.
const SUB_TIME: Duration = Duration::from_millis(10);
/// Sub-problems with more instances than this are skipped.
const SUB_ITEMS: usize = 40;
/// Tries in a row without an improvement after which the search gives up (the
/// incumbent is then locally optimal for practical purposes).
const MAX_FAILS: u32 = 40;
/// Fewest and most devices freed at once.
const MIN_FREED: usize = 2;
const MAX_FREED: usize = 5;

/// Re-solves the contents of 2–5 devices of `pats` (a placement of every instance) at a
/// time until `deadline`; the first device of each try is drawn with a weight of its
/// unused cost share, so nearly empty devices are freed most often; it stops early
/// after [`MAX_FAILS`] tries in a row without an improvement. `seed` varies the
/// draws. Returns a cheaper placement if one was found.
pub fn improve(
    p: &Problem,
    pats: &[Pattern],
    seed: u64,
    deadline: Instant,
) -> Option<Vec<Pattern>> {
    let mut cur = pats.to_vec();
    let mut improved = false;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let counts = p.counts();
    let mut round = 0usize;
    let mut fails = 0u32;
    while cur.len() >= MIN_FREED && fails < MAX_FAILS && Instant::now() < deadline {
        let freed = (MIN_FREED + round % (MAX_FREED - MIN_FREED + 1)).min(cur.len());
        round += 1;
        let waste: Vec<u64> = cur.iter().map(|pat| unused_cost(p, pat) + 1).collect();
        let total: u64 = waste.iter().sum();
        let mut pick = next() % total;
        let mut chosen = vec![waste.len() - 1];
        for (i, &w) in waste.iter().enumerate() {
            if pick < w {
                chosen[0] = i;
                break;
            }
            pick -= w;
        }
        while chosen.len() < freed {
            let i = (next() % cur.len() as u64) as usize;
            if !chosen.contains(&i) {
                chosen.push(i);
            }
        }
        let mut avail = counts.clone();
        for pat in &cur {
            avail[pat.model] -= 1;
        }
        let mut demand = vec![0u32; p.types.len()];
        let mut ub = 0u64;
        for &i in &chosen {
            avail[cur[i].model] += 1;
            ub += p.models[cur[i].model].cost;
            for &(t, c) in &cur[i].items {
                demand[t as usize] += c;
            }
        }
        fails += 1;
        if demand.iter().map(|&d| d as usize).sum::<usize>() > SUB_ITEMS {
            continue;
        }
        let until = (Instant::now() + SUB_TIME).min(deadline);
        if let Some(better) = complete::search(p, &demand, &avail, ub, until).improved {
            chosen.sort_unstable_by(|a, b| b.cmp(a));
            for i in chosen {
                cur.swap_remove(i);
            }
            cur.extend(better);
            improved = true;
            fails = 0;
        }
    }
    improved.then_some(cur)
}

/// The cost of a device times its unused share (the larger of resource and
/// throughput fill counts as used).
fn unused_cost(p: &Problem, pat: &Pattern) -> u64 {
    let m = &p.models[pat.model];
    let (mut need, mut thr) = (0u64, 0u64);
    for &(t, c) in &pat.items {
        need += p.size(t as usize, pat.model) * u64::from(c);
        thr += p.types[t as usize].thr * u64::from(c);
    }
    let fill = |x: u64, cap: u64| if cap == 0 { 1.0 } else { x as f64 / cap as f64 };
    let used = fill(need, m.cap).max(fill(thr, m.thr_cap)).min(1.0);
    (m.cost as f64 * (1.0 - used)).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator;
    use crate::greedy::best_greedy;
    use crate::validate;

    /// On generated hybrid instances the search never returns a placement that is
    /// invalid or not cheaper, and improves FFD-like greedy placements on most.
    #[test]
    fn improves_greedy_placements_validly() {
        let mut better = 0;
        for seed in 0..6 {
            let inst = generator::generate(30, seed);
            let p = Problem::new(&inst);
            let start = best_greedy(&p, &p.demands(), &p.counts()).unwrap();
            let deadline = Instant::now() + Duration::from_millis(300);
            if let Some(pats) = improve(&p, &start, seed, deadline) {
                assert!(p.cost(&pats) < p.cost(&start));
                let assign = p.to_assignment(&pats, inst.vnf_instances.len()).unwrap();
                assert_eq!(validate::check(&inst, &assign), Ok(p.cost(&pats)));
                better += 1;
            }
        }
        assert!(better >= 3, "only {better} of 6 greedy placements improved");
    }
}
