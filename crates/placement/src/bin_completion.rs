//! Bin completion (Korf; Martello–Toth's dominance) for one-dimensional bin packing
//! with a fixed number of bins K: the waste budget W = K·C − Σw is shared by all bins,
//! each bin is built around the largest remaining item and completed by a maximal
//! subset of the remaining items (no remaining item fits in what is left), fullest
//! first. Subtrees that failed are remembered by their remaining multiset. Used as the
//! primal heuristic that finds ⌈LP⌉-bin packings (with a node budget and random tie
//! order per restart) and, when a search runs to its end, as a proof that K bins are
//! too few.

use std::collections::HashSet;
use std::time::Instant;

/// Largest number of completions enumerated for one bin; beyond it the search is
/// no longer complete.
const MAX_COMPLETIONS: usize = 512;

/// Outcome of one bin-completion search.
#[derive(Debug, Clone, Default)]
pub struct BcResult {
    /// A packing into at most K bins: per bin, (item index, count) pairs.
    pub packing: Option<Vec<Vec<(usize, u32)>>>,
    /// The search ran to its end without finding a packing: K bins are too few.
    pub exhausted: bool,
}

/// Safety margin on reduced-cost budgets against floating-point error.
const RC_MARGIN: f64 = 1e-6;

/// Limits on one bin's completion: room left, least fill, least dual value.
struct Bounds {
    rem: u64,
    lo: u64,
    vlo: f64,
}

/// One candidate completion of a bin: fill, dual value, content, random tie-break.
struct Completion {
    sum: u64,
    value: f64,
    items: Vec<(usize, u32)>,
    tie: u64,
}

struct Bc {
    /// Weights in decreasing order and the caller's index of each.
    w: Vec<u64>,
    /// Dual value of one item of each type (0 without duals).
    vals: Vec<f64>,
    idx: Vec<usize>,
    cnt: Vec<u32>,
    cap: u64,
    bins: Vec<Vec<(usize, u32)>>,
    failed: HashSet<Vec<u32>>,
    nodes: u64,
    node_limit: u64,
    deadline: Instant,
    aborted: bool,
    /// Some enumeration was cut short, so failing is no proof.
    partial: bool,
    rng: u64,
}

/// Searches for a packing of `items` (weight, count) into `k` bins of capacity `cap`
/// within `node_limit` nodes and the deadline; `seed` varies the order of ties.
pub fn pack_into(
    items: &[(u64, u32)],
    cap: u64,
    k: u64,
    duals: Option<&[f64]>,
    seed: u64,
    node_limit: u64,
    deadline: Instant,
) -> BcResult {
    let total: u128 = items
        .iter()
        .map(|&(w, c)| u128::from(w) * u128::from(c))
        .sum();
    if items.iter().any(|&(w, c)| c > 0 && w > cap) || total > u128::from(k) * u128::from(cap) {
        return BcResult {
            packing: None,
            exhausted: true,
        };
    }
    let waste = (u128::from(k) * u128::from(cap) - total).min(u128::from(u64::MAX)) as u64;
    let mut order: Vec<usize> = (0..items.len()).filter(|&i| items[i].1 > 0).collect();
    order.sort_by(|&a, &b| items[b].0.cmp(&items[a].0));
    let vals: Vec<f64> = order
        .iter()
        .map(|&i| duals.map_or(0.0, |d| d[i].max(0.0)))
        .collect();
    // With dual-feasible values, every bin's reduced cost 1 − Σπ is ≥ 0 and they sum
    // to K − Σπ·d over any K-bin packing: that sum is the budget.
    let budget = match duals {
        Some(_) => {
            k as f64
                - order
                    .iter()
                    .zip(&vals)
                    .map(|(&i, v)| v * f64::from(items[i].1))
                    .sum::<f64>()
        }
        None => f64::INFINITY,
    };
    if budget < -RC_MARGIN {
        return BcResult {
            packing: None,
            exhausted: true,
        };
    }
    let mut bc = Bc {
        w: order.iter().map(|&i| items[i].0).collect(),
        vals,
        cnt: order.iter().map(|&i| items[i].1).collect(),
        idx: order,
        cap,
        bins: Vec::new(),
        failed: HashSet::new(),
        nodes: 0,
        node_limit,
        deadline,
        aborted: false,
        partial: false,
        rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
    };
    if bc.dfs(k, waste, budget) {
        let packing = bc
            .bins
            .iter()
            .map(|bin| bin.iter().map(|&(j, c)| (bc.idx[j], c)).collect())
            .collect();
        return BcResult {
            packing: Some(packing),
            exhausted: false,
        };
    }
    BcResult {
        packing: None,
        exhausted: !bc.aborted && !bc.partial,
    }
}

/// Most bitset words (items × ⌈(capacity + 1) / 64⌉) one fill computation may use.
const FILL_WORDS: usize = 1 << 22;

/// Well-filled bins to seed a column generation with: for every item type and each of
/// `rounds` random orders of the items, one bin holding an item of that type and a
/// subset of the other items that fills it as far as possible (exact 0/1 subset sum
/// over the individual items, with bitsets). Bins wasting more than `waste` are left
/// out, and so is everything when the bitsets would exceed [`FILL_WORDS`]. Per bin,
/// (item index, count) pairs.
pub fn fill_patterns(
    items: &[(u64, u32)],
    cap: u64,
    waste: u64,
    rounds: u64,
) -> Vec<Vec<(usize, u32)>> {
    let copies: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].0 <= cap)
        .flat_map(|i| std::iter::repeat_n(i, items[i].1 as usize))
        .collect();
    let words = (cap as usize + 1).div_ceil(64);
    if copies.is_empty() || copies.len().saturating_mul(words) > FILL_WORDS {
        return Vec::new();
    }
    let mut out: Vec<Vec<(usize, u32)>> = Vec::new();
    let mut seen: HashSet<Vec<(usize, u32)>> = HashSet::new();
    let mut reach = vec![0u64; (copies.len() + 1) * words];
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..rounds {
        let mut order = copies.clone();
        for i in (1..order.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(i, (rng % (i as u64 + 1)) as usize);
        }
        for base in (0..items.len()).filter(|&i| items[i].1 > 0 && items[i].0 <= cap) {
            let skip = order.iter().position(|&i| i == base);
            let rest: Vec<usize> = order
                .iter()
                .enumerate()
                .filter(|&(q, _)| Some(q) != skip)
                .map(|(_, &i)| i)
                .collect();
            // reach[j] = the sums reachable with the first j items of `rest`.
            reach[..words].fill(0);
            reach[0] = 1;
            for (j, &i) in rest.iter().enumerate() {
                let (prev, next) = reach[j * words..(j + 2) * words].split_at_mut(words);
                next.copy_from_slice(prev);
                let w = items[i].0 as usize;
                let (ws, bs) = (w / 64, w % 64);
                for k in (ws..words).rev() {
                    let lo = prev[k - ws] << bs;
                    let hi = if bs > 0 && k > ws {
                        prev[k - ws - 1] >> (64 - bs)
                    } else {
                        0
                    };
                    next[k] |= lo | hi;
                }
            }
            let room = cap - items[base].0;
            let last = &reach[rest.len() * words..(rest.len() + 1) * words];
            let Some(mut c) = (0..=room)
                .rev()
                .find(|&c| last[c as usize / 64] >> (c % 64) & 1 == 1)
            else {
                continue;
            };
            if room - c > waste {
                continue;
            }
            let mut bin: Vec<(usize, u32)> = vec![(base, 1)];
            for j in (0..rest.len()).rev() {
                let before = &reach[j * words..(j + 1) * words];
                if before[c as usize / 64] >> (c % 64) & 1 == 1 {
                    continue;
                }
                let i = rest[j];
                c -= items[i].0;
                match bin.iter_mut().find(|(t, _)| *t == i) {
                    Some((_, n)) => *n += 1,
                    None => bin.push((i, 1)),
                }
            }
            bin.sort_unstable();
            if seen.insert(bin.clone()) {
                out.push(bin);
            }
        }
    }
    out
}

impl Bc {
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Packs the remaining items into `bins_left` bins wasting at most `slack` in total,
    /// with reduced costs summing to at most `budget`.
    fn dfs(&mut self, bins_left: u64, slack: u64, budget: f64) -> bool {
        let Some(first) = self.cnt.iter().position(|&c| c > 0) else {
            return true;
        };
        if bins_left == 0 || self.aborted {
            return false;
        }
        self.nodes += 1;
        if self.nodes >= self.node_limit
            || (self.nodes.is_multiple_of(16) && Instant::now() >= self.deadline)
        {
            self.aborted = true;
            return false;
        }
        let key = self.state_key(bins_left);
        if self.failed.contains(&key) {
            return false;
        }
        self.cnt[first] -= 1;
        let rem = self.cap - self.w[first];
        let lo = rem.saturating_sub(slack);
        let vlo = 1.0 - self.vals[first] - budget - RC_MARGIN;
        let mut comps: Vec<Completion> = Vec::new();
        let mut cur: Vec<(usize, u32)> = Vec::new();
        let bounds = Bounds { rem, lo, vlo };
        let complete = self.completions(first, &bounds, (0, 0.0), &mut cur, &mut comps);
        for c in &mut comps {
            c.tie = self.next_random();
        }
        comps.sort_unstable_by(|a, b| {
            b.value
                .total_cmp(&a.value)
                .then(b.sum.cmp(&a.sum))
                .then(a.tie.cmp(&b.tie))
        });
        let mut found = false;
        for Completion {
            sum,
            value,
            items: comp,
            ..
        } in comps
        {
            let rc = 1.0 - self.vals[first] - value;
            for &(j, c) in &comp {
                self.cnt[j] -= c;
            }
            let mut bin = comp.clone();
            bin.push((first, 1));
            self.bins.push(bin);
            found = self.dfs(bins_left - 1, slack - (rem - sum), budget - rc);
            if found {
                break;
            }
            self.bins.pop();
            for &(j, c) in &comp {
                self.cnt[j] += c;
            }
            if self.aborted {
                break;
            }
        }
        self.cnt[first] += 1;
        if !found && !self.aborted {
            if complete {
                self.failed.insert(key);
            } else {
                self.partial = true;
            }
        }
        found
    }

    /// The remaining multiset and the number of bins left: what a subtree depends on.
    fn state_key(&self, bins_left: u64) -> Vec<u32> {
        let mut key = self.cnt.clone();
        key.push(bins_left.min(u64::from(u32::MAX)) as u32);
        key
    }

    /// Enumerates maximal subsets of the remaining items from index `j` on with a sum
    /// in `[lo, rem]` and a dual value of at least `vlo`; `false` if the enumeration was
    /// cut at [`MAX_COMPLETIONS`].
    fn completions(
        &self,
        j: usize,
        b: &Bounds,
        (sum, value): (u64, f64),
        cur: &mut Vec<(usize, u32)>,
        out: &mut Vec<Completion>,
    ) -> bool {
        if out.len() >= MAX_COMPLETIONS {
            return false;
        }
        let (mut reach_w, mut reach_v) = (0u64, 0.0f64);
        for k in j..self.w.len() {
            let c = self.cnt[k].min(((b.rem - sum) / self.w[k]) as u32);
            reach_w += u64::from(c) * self.w[k];
            reach_v += f64::from(c) * self.vals[k];
        }
        if sum + reach_w < b.lo || value + reach_v < b.vlo {
            return true;
        }
        let Some(k) = (j..self.w.len()).find(|&k| self.cnt[k] > 0 && self.w[k] <= b.rem - sum)
        else {
            // Nothing more fits: maximal iff no remaining (untaken) item fits.
            if sum >= b.lo && value >= b.vlo && self.is_maximal(b.rem - sum, cur) {
                out.push(Completion {
                    sum,
                    value,
                    items: cur.clone(),
                    tie: 0,
                });
            }
            return true;
        };
        let max = self.cnt[k].min(((b.rem - sum) / self.w[k]) as u32);
        for c in (0..=max).rev() {
            if c > 0 {
                cur.push((k, c));
            }
            let next = (
                sum + u64::from(c) * self.w[k],
                value + f64::from(c) * self.vals[k],
            );
            let ok = self.completions(k + 1, b, next, cur, out);
            if c > 0 {
                cur.pop();
            }
            if !ok {
                return false;
            }
        }
        true
    }

    /// Whether no item left after taking `taken` fits into `left`.
    fn is_maximal(&self, left: u64, taken: &[(usize, u32)]) -> bool {
        !(0..self.w.len()).rev().any(|k| {
            let used = taken.iter().find(|&&(j, _)| j == k).map_or(0, |&(_, c)| c);
            self.cnt[k] > used && self.w[k] <= left
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{brute_min_bins, check, far, item_types};
    use proptest::prelude::*;

    #[test]
    fn finds_the_perfect_packing_and_refutes_one_bin_less() {
        let items = [(6, 2), (5, 2), (4, 2)];
        let r = pack_into(&items, 10, 3, None, 1, u64::MAX, far());
        check(&items, 10, 3, r.packing.as_ref().unwrap());
        // Σ = 30 fits 3 bins only exactly: {6,4},{6,4},{5,5}.
        let r = pack_into(&items, 10, 2, None, 1, u64::MAX, far());
        assert!(r.packing.is_none() && r.exhausted);
        // 7,7,6: no pair fills 10, so 2 bins are impossible even though Σ = 20.
        let r = pack_into(&[(7, 2), (6, 1)], 10, 2, None, 1, u64::MAX, far());
        assert!(r.packing.is_none() && r.exhausted);
    }

    #[test]
    fn a_reduced_cost_budget_below_zero_is_a_proof() {
        // Duals 0.6/0.5/0.4 are feasible (best bin {6,4} or {5,5} is worth 1); they
        // price the items at 3 bins, so 2 bins are refuted before any search.
        let items = [(6, 2), (5, 2), (4, 2)];
        let duals = [0.6, 0.5, 0.4];
        let r = pack_into(&items, 10, 2, Some(&duals), 1, 1, far());
        assert!(r.packing.is_none() && r.exhausted);
        let r = pack_into(&items, 10, 3, Some(&duals), 1, u64::MAX, far());
        check(&items, 10, 3, r.packing.as_ref().unwrap());
    }

    #[test]
    fn a_node_budget_is_not_a_proof() {
        let items = [(7, 2), (6, 1)];
        let r = pack_into(&items, 10, 2, None, 1, 1, far());
        assert!(r.packing.is_none() && !r.exhausted);
    }

    proptest! {
        #[test]
        fn matches_brute_force_on_small_instances(
            weights in proptest::collection::vec(1u64..20, 1..9),
            cap in 20u64..30,
            seed in 0u64..1000,
        ) {
            let opt = brute_min_bins(&weights, cap);
            let items = item_types(&weights);
            // Weight over capacity is dual feasible: no bin is worth more than 1.
            let duals: Vec<f64> = items.iter().map(|&(w, _)| w as f64 / cap as f64).collect();
            for d in [None, Some(duals.as_slice())] {
                let r = pack_into(&items, cap, opt, d, seed, u64::MAX, far());
                let bins = r.packing.expect("optimum must be found");
                check(&items, cap, opt, &bins);
                let r = pack_into(&items, cap, opt - 1, d, seed, u64::MAX, far());
                prop_assert!(r.packing.is_none() && r.exhausted);
            }
        }

        /// Every seed bin fits, takes no more items than there are and wastes at most
        /// the limit; per item type, one is as full as the best bin around that type
        /// (brute force over subsets of the other items) whenever that one is within
        /// the limit.
        #[test]
        fn fill_patterns_are_feasible_and_fullest(
            weights in proptest::collection::vec(1u64..70, 1..12),
            cap in 60u64..100,
            waste in 0u64..30,
        ) {
            let items = item_types(&weights);
            let bins = fill_patterns(&items, cap, waste, 2);
            let load = |bin: &[(usize, u32)]| -> u64 {
                bin.iter().map(|&(i, c)| items[i].0 * u64::from(c)).sum()
            };
            for bin in &bins {
                prop_assert!(load(bin) <= cap && cap - load(bin) <= waste);
                prop_assert!(bin.iter().all(|&(i, c)| c >= 1 && c <= items[i].1));
            }
            for (t, &(wt, _)) in items.iter().enumerate() {
                let base = weights.iter().position(|&w| w == wt).unwrap();
                let others: Vec<u64> = weights
                    .iter()
                    .enumerate()
                    .filter(|&(q, _)| q != base)
                    .map(|(_, &w)| w)
                    .collect();
                let room = cap.saturating_sub(wt);
                let best = (0u32..1 << others.len())
                    .map(|m| {
                        (0..others.len())
                            .filter(|&q| m >> q & 1 == 1)
                            .map(|q| others[q])
                            .sum::<u64>()
                    })
                    .filter(|&s| s <= room)
                    .max()
                    .unwrap_or(0);
                let fullest = bins
                    .iter()
                    .filter(|bin| bin.iter().any(|&(i, _)| i == t))
                    .map(|bin| load(bin))
                    .max();
                if wt <= cap && room - best <= waste {
                    prop_assert_eq!(fullest, Some(wt + best));
                }
            }
        }
    }
}
