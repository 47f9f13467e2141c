//! Pricing for column generation: the most valuable content of one device, i.e. a
//! bounded knapsack with up to two capacity constraints (resource and throughput).
//! One active constraint with a small capacity: exact dynamic programming over the
//! capacity with binary splitting of multiplicities. Otherwise: depth-first branch and
//! bound with the Dantzig bound, suffix dynamic-programming bounds (per capacity and
//! for both together, capacities scaled down: a relaxation) and a node budget; if the
//! budget runs out, the answer is the best pattern found plus a valid upper bound, so
//! the LP bound stays proven.

use std::time::Instant;

/// Largest capacity × chunk count solved by dynamic programming.
const DP_LIMIT: u64 = 64_000_000;
/// Node budget of the branch and bound.
const NODE_LIMIT: u64 = 400_000;
/// Cell updates of the two-capacity dynamic program worth one branch-and-bound node.
const DP2_NODE_COST: u64 = 32;
/// Node budget of the first search, without the suffix tables.
const QUICK_NODES: u64 = 1_000;
/// Largest table (entries) of one suffix bound of the branch and bound.
const SUFFIX_ENTRIES: usize = 1 << 19;
/// Extra patterns returned by the dynamic program per call.
const MORE_PATTERNS: usize = 6;

/// One candidate item type for the knapsack.
#[derive(Debug, Clone, Copy)]
pub struct KItem {
    /// Item type index (echoed in the answer).
    pub t: u32,
    /// Resource need.
    pub w1: u64,
    /// Throughput need.
    pub w2: u64,
    /// Dual value (profit) of one copy.
    pub v: f64,
    /// Maximum number of copies.
    pub copies: u32,
}

/// The pricing answer.
#[derive(Debug, Clone, Default)]
pub struct KAnswer {
    /// Profit of the best pattern found.
    pub value: f64,
    /// Its content as (type, count).
    pub items: Vec<(u32, u32)>,
    /// A proven upper bound on the best profit (equal to `value` when exact).
    pub upper: f64,
    /// Other good patterns, as (profit, content): the best ones of the next smaller
    /// exact fills (dynamic programming) or the earlier best ones of the branch and
    /// bound.
    pub more: Vec<(f64, Vec<(u32, u32)>)>,
}

/// Reusable buffers so that pricing allocates nothing in steady state.
#[derive(Default)]
pub struct Pricer {
    dp: Vec<f64>,
    keep: Vec<u64>,
    chunks: Vec<(usize, u64, f64, u32)>,
    order: Vec<KItem>,
    cur: Vec<u32>,
    best: Vec<u32>,
    /// Earlier best patterns of the branch and bound (value, counts in `order`).
    runners_up: Vec<(f64, Vec<u32>)>,
    /// Suffix maxima of the per-copy value and suffix minima of the positive
    /// primary weight, for the cardinality bound.
    max_v: Vec<f64>,
    min_w: Vec<u64>,
    /// Suffix bounds of the branch and bound: the primary capacity alone, the
    /// secondary alone, both together.
    suffix: [SuffixTable; 3],
    /// Skips the quick search without suffix tables (tests reach the tables so).
    no_quick: bool,
    /// The branch and bound stops here as if out of nodes (its answer is then not
    /// exact, its upper bound still valid).
    deadline: Option<Instant>,
    /// Capacities (primary, secondary) whose last branch and bound ran out of nodes,
    /// with how many more solves go straight to the exact two-capacity program.
    dp2_first: Vec<((u64, u64), u32)>,
}

/// Solves that skip the branch and bound after it ran out of nodes on the same
/// capacities (then it is tried again: the duals may have made it easy).
const DP2_FIRST_SOLVES: u32 = 4;

impl Pricer {
    /// Makes later branch-and-bound solves stop at `deadline` (`None`: node limit only),
    /// so that one pricing round cannot run far past a time limit.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Maximises Σ v·a subject to Σ w1·a ≤ cap1, Σ w2·a ≤ cap2, 0 ≤ a ≤ copies.
    pub fn solve(&mut self, items: &[KItem], cap1: u64, cap2: u64) -> KAnswer {
        let mut its: Vec<KItem> = items
            .iter()
            .filter(|i| i.v > 1e-12 && i.copies > 0)
            .map(|i| {
                let mut c = i.copies;
                if let Some(q) = cap1.checked_div(i.w1) {
                    c = c.min(q.min(u64::from(u32::MAX)) as u32);
                }
                if let Some(q) = cap2.checked_div(i.w2) {
                    c = c.min(q.min(u64::from(u32::MAX)) as u32);
                }
                KItem { copies: c, ..*i }
            })
            .filter(|i| i.copies > 0)
            .collect();
        let load1: u128 = its
            .iter()
            .map(|i| u128::from(i.w1) * u128::from(i.copies))
            .sum();
        let load2: u128 = its
            .iter()
            .map(|i| u128::from(i.w2) * u128::from(i.copies))
            .sum();
        let tight1 = load1 > u128::from(cap1);
        let tight2 = load2 > u128::from(cap2);
        if !tight1 && !tight2 {
            let value = its.iter().map(|i| i.v * f64::from(i.copies)).sum();
            let items = its.iter().map(|i| (i.t, i.copies)).collect();
            return KAnswer {
                value,
                items,
                upper: value,
                more: Vec::new(),
            };
        }
        if tight1 != tight2 {
            let (cap, second) = if tight1 { (cap1, false) } else { (cap2, true) };
            let chunks: u64 = its
                .iter()
                .map(|i| u64::from(32 - i.copies.leading_zeros()))
                .sum();
            if cap.saturating_mul(chunks.max(1)) <= DP_LIMIT {
                if second {
                    for i in &mut its {
                        std::mem::swap(&mut i.w1, &mut i.w2);
                    }
                }
                return self.dp(&its, cap as usize);
            }
        }
        // Branch on the tighter dimension's ratio order.
        let r1 = load1 as f64 / cap1.max(1) as f64;
        let r2 = load2 as f64 / cap2.max(1) as f64;
        let (cap_a, cap_b) = if r1 >= r2 { (cap1, cap2) } else { (cap2, cap1) };
        if r1 < r2 {
            for i in &mut its {
                std::mem::swap(&mut i.w1, &mut i.w2);
            }
        }
        self.branch_and_bound(its, cap_a, cap_b)
    }

    /// Splits each item's copies into chunks of 1, 2, 4, … copies (binary splitting),
    /// so a 0/1 dynamic program over the chunks covers every multiplicity.
    fn split_chunks(&mut self, its: &[KItem]) {
        self.chunks.clear();
        for (idx, i) in its.iter().enumerate() {
            let mut left = i.copies;
            let mut k = 1u32;
            while left > 0 {
                let take = k.min(left);
                self.chunks
                    .push((idx, i.w1 * u64::from(take), i.v * f64::from(take), take));
                left -= take;
                k = k.saturating_mul(2);
            }
        }
    }

    fn dp(&mut self, its: &[KItem], cap: usize) -> KAnswer {
        self.split_chunks(its);
        let width = cap + 1;
        let words = width.div_ceil(64);
        self.dp.clear();
        self.dp.resize(width, 0.0);
        self.keep.clear();
        self.keep.resize(words * self.chunks.len(), 0);
        for (ci, &(_, w, v, _)) in self.chunks.iter().enumerate() {
            let w = w as usize;
            if w > cap {
                continue;
            }
            let keep = &mut self.keep[ci * words..(ci + 1) * words];
            if w < 64 {
                for c in (w..=cap).rev() {
                    let cand = self.dp[c - w] + v;
                    if cand > self.dp[c] + 1e-12 {
                        self.dp[c] = cand;
                        keep[c / 64] |= 1 << (c % 64);
                    }
                }
                continue;
            }
            // Word-sized blocks from the top: a block's sources lie below it (w ≥ 64)
            // and are not updated yet, so each block is a branch-free, vectorisable
            // loop over two disjoint slices.
            let mut hi = cap + 1;
            while hi > w {
                let lo = ((hi - 1) / 64 * 64).max(w);
                let (below, above) = self.dp.split_at_mut(lo);
                let src = &below[lo - w..hi - w];
                let dst = &mut above[..hi - lo];
                let mut bits = 0u64;
                for (k, (d, &s)) in dst.iter_mut().zip(src).enumerate() {
                    let cand = s + v;
                    let take = cand > *d + 1e-12;
                    *d = if take { cand } else { *d };
                    bits |= u64::from(take) << ((lo + k) % 64);
                }
                keep[lo / 64] |= bits;
                hi = lo;
            }
        }
        let value = self.dp[cap];
        let items = self.trace(its, cap, words);
        let mut more = Vec::new();
        let mut c = cap;
        while more.len() < MORE_PATTERNS && c > 0 {
            // The best pattern of weight ≤ c - 1 differs from the one at c only where
            // the profit drops.
            if self.dp[c - 1] + 1e-12 < self.dp[c] {
                if c < cap && self.dp[c] > 1e-12 {
                    more.push((self.dp[c], self.trace(its, c, words)));
                }
                if self.dp[c] < 0.5 * value {
                    break;
                }
            }
            c -= 1;
        }
        KAnswer {
            value,
            items,
            upper: value,
            more,
        }
    }

    /// The content of the dynamic program's best pattern of weight at most `cap`.
    fn trace(&self, its: &[KItem], cap: usize, words: usize) -> Vec<(u32, u32)> {
        let mut counts = vec![0u32; its.len()];
        let mut c = cap;
        for ci in (0..self.chunks.len()).rev() {
            if self.keep[ci * words + c / 64] >> (c % 64) & 1 == 1 {
                let (idx, w, _, take) = self.chunks[ci];
                counts[idx] += take;
                c -= w as usize;
            }
        }
        its.iter()
            .zip(&counts)
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i.t, n))
            .collect()
    }

    fn branch_and_bound(&mut self, mut its: Vec<KItem>, cap_a: u64, cap_b: u64) -> KAnswer {
        let ratio = |i: &KItem| {
            if i.w1 == 0 {
                f64::INFINITY
            } else {
                i.v / i.w1 as f64
            }
        };
        its.sort_by(|a, b| ratio(b).total_cmp(&ratio(a)));
        self.order = its;
        self.cur.clear();
        self.cur.resize(self.order.len(), 0);
        self.best.clear();
        self.best.resize(self.order.len(), 0);
        let n = self.order.len();
        self.max_v.clear();
        self.max_v.resize(n + 1, 0.0);
        self.min_w.clear();
        self.min_w.resize(n + 1, u64::MAX);
        for k in (0..n).rev() {
            let it = self.order[k];
            self.max_v[k] = self.max_v[k + 1].max(it.v);
            self.min_w[k] = if it.w1 > 0 {
                self.min_w[k + 1].min(it.w1)
            } else {
                self.min_w[k + 1]
            };
        }
        let load_b: u128 = self
            .order
            .iter()
            .map(|i| u128::from(i.w2) * u128::from(i.copies))
            .sum();
        let binds_b = load_b > u128::from(cap_b);
        // The exact two-capacity dynamic program takes over when the search needs more
        // nodes than about its work (cells × chunks) / DP2_NODE_COST.
        let chunks: u64 = self
            .order
            .iter()
            .map(|i| u64::from(32 - i.copies.leading_zeros()))
            .sum();
        let dp2_work = (cap_a.saturating_add(1))
            .saturating_mul(cap_b.saturating_add(1))
            .saturating_mul(chunks);
        let limit = if dp2_work <= DP_LIMIT {
            (dp2_work / DP2_NODE_COST).clamp(QUICK_NODES, NODE_LIMIT)
        } else {
            NODE_LIMIT
        };
        // Where the search ran out of nodes on these capacities last time, it most
        // likely does again: the exact program at once.
        if dp2_work <= DP_LIMIT && self.take_dp2_first(cap_a, cap_b) {
            let order = std::mem::take(&mut self.order);
            let ans = self.dp2(&order, cap_a as usize, cap_b as usize);
            self.order = order;
            return ans;
        }
        // A quick search with the Dantzig bound alone first; the suffix tables are
        // built only if it does not finish.
        for t in &mut self.suffix {
            t.on = false;
        }
        let mut st = BbState {
            best_value: 0.0,
            nodes: 0,
            limit: if self.no_quick { 0 } else { QUICK_NODES },
        };
        self.runners_up.clear();
        self.dfs(0, cap_a, cap_b, 0.0, &mut st);
        let mut root_bound = self.dantzig(0, cap_a, cap_b, 0.0);
        if st.nodes >= st.limit {
            let mut suffix = std::mem::take(&mut self.suffix);
            let both = if binds_b { SUFFIX_ENTRIES } else { 0 };
            suffix[0].build(&self.order, cap_a, u64::MAX, SUFFIX_ENTRIES);
            suffix[1].build(&self.order, u64::MAX, cap_b, both);
            suffix[2].build(&self.order, cap_a, cap_b, both);
            self.suffix = suffix;
            root_bound = root_bound.min(self.table_bound(0, cap_a, cap_b, 0.0));
            // The best pattern found so far stays the one to beat.
            st.nodes = 0;
            st.limit = limit;
            self.dfs(0, cap_a, cap_b, 0.0, &mut st);
        }
        let content = |counts: &[u32]| -> Vec<(u32, u32)> {
            self.order
                .iter()
                .zip(counts)
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| (i.t, n))
                .collect()
        };
        let items = content(&self.best);
        let more = self
            .runners_up
            .iter()
            .rev()
            .map(|(v, counts)| (*v, content(counts)))
            .collect();
        let exact = st.nodes < st.limit;
        if !exact && dp2_work <= DP_LIMIT && self.deadline.is_none_or(|d| Instant::now() < d) {
            // Out of nodes: the exact two-capacity dynamic program.
            self.dp2_first.retain(|&(c, _)| c != (cap_a, cap_b));
            self.dp2_first.push(((cap_a, cap_b), DP2_FIRST_SOLVES));
            let order = std::mem::take(&mut self.order);
            let ans = self.dp2(&order, cap_a as usize, cap_b as usize);
            self.order = order;
            return ans;
        }
        KAnswer {
            value: st.best_value,
            items,
            upper: if exact {
                st.best_value
            } else {
                root_bound.max(st.best_value)
            },
            more,
        }
    }

    /// Whether this solve on capacities (`cap_a`, `cap_b`) goes straight to the exact
    /// program (see [`DP2_FIRST_SOLVES`]); counts the solve.
    fn take_dp2_first(&mut self, cap_a: u64, cap_b: u64) -> bool {
        let Some(i) = self
            .dp2_first
            .iter()
            .position(|&(c, _)| c == (cap_a, cap_b))
        else {
            return false;
        };
        self.dp2_first[i].1 -= 1;
        if self.dp2_first[i].1 == 0 {
            self.dp2_first.swap_remove(i);
        }
        true
    }

    /// Exact dynamic program over both capacities (`cap1 + 1` × `cap2 + 1` cells,
    /// multiplicities by binary splitting, one bit per chunk and cell to trace back;
    /// the inner loop runs in blocks of 64 cells so that it vectorises).
    fn dp2(&mut self, its: &[KItem], cap1: usize, cap2: usize) -> KAnswer {
        self.split_chunks(its);
        let (c1, c2) = (cap1 + 1, cap2 + 1);
        // Keep bits: per chunk, per line r1, `wpr` words over r2.
        let wpr = c2.div_ceil(64);
        let plane = c1 * wpr;
        self.dp.clear();
        self.dp.resize(c1 * c2, 0.0);
        self.keep.clear();
        self.keep.resize(plane * self.chunks.len(), 0);
        for (ci, &(idx, w, v, take)) in self.chunks.iter().enumerate() {
            let a = w as usize;
            let b = (its[idx].w2 * u64::from(take)) as usize;
            if a > cap1 || b > cap2 {
                continue;
            }
            let keep = &mut self.keep[ci * plane..(ci + 1) * plane];
            // Descending in r1 (and in r2 on the same line): every cell reads one not
            // updated by this chunk yet.
            for r1 in (a..c1).rev() {
                let kw = &mut keep[r1 * wpr..(r1 + 1) * wpr];
                if a == 0 {
                    let line = &mut self.dp[r1 * c2..(r1 + 1) * c2];
                    for r2 in (b..c2).rev() {
                        let cand = line[r2 - b] + v;
                        if cand > line[r2] + 1e-12 {
                            line[r2] = cand;
                            kw[r2 / 64] |= 1 << (r2 % 64);
                        }
                    }
                    continue;
                }
                let (lo, hi) = self.dp.split_at_mut(r1 * c2);
                let src = &lo[(r1 - a) * c2..(r1 - a) * c2 + c2 - b];
                let dst = &mut hi[b..c2];
                for (blk, (d64, s64)) in dst.chunks_mut(64).zip(src.chunks(64)).enumerate() {
                    let mut bits = 0u64;
                    for (j, (d, &x)) in d64.iter_mut().zip(s64).enumerate() {
                        let cand = x + v;
                        let better = cand > *d + 1e-12;
                        *d = if better { cand } else { *d };
                        bits |= u64::from(better) << j;
                    }
                    let pos = b + blk * 64;
                    let (word, shift) = (pos / 64, pos % 64);
                    kw[word] |= bits << shift;
                    if shift > 0 && word + 1 < wpr {
                        kw[word + 1] |= bits >> (64 - shift);
                    }
                }
            }
        }
        let value = self.dp[c1 * c2 - 1];
        let mut counts = vec![0u32; its.len()];
        let (mut r1, mut r2) = (cap1, cap2);
        for ci in (0..self.chunks.len()).rev() {
            if self.keep[ci * plane + r1 * wpr + r2 / 64] >> (r2 % 64) & 1 == 1 {
                let (idx, w, _, take) = self.chunks[ci];
                counts[idx] += take;
                r1 -= w as usize;
                r2 -= (its[idx].w2 * u64::from(take)) as usize;
            }
        }
        let items = its
            .iter()
            .zip(&counts)
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i.t, n))
            .collect();
        KAnswer {
            value,
            items,
            upper: value,
            more: Vec::new(),
        }
    }

    /// Fractional (LP) bound of items from `k` on with the remaining capacities.
    fn dantzig(&self, k: usize, mut rem_a: u64, rem_b: u64, cur: f64) -> f64 {
        let card = if self.order[k..].iter().all(|i| i.w1 > 0) && self.min_w[k] != u64::MAX {
            cur + (rem_a / self.min_w[k]) as f64 * self.max_v[k]
        } else {
            f64::INFINITY
        };
        let mut bound = cur;
        for i in &self.order[k..] {
            if i.w2 > rem_b {
                continue;
            }
            if i.w1 == 0 {
                bound += i.v * f64::from(i.copies);
                continue;
            }
            let full = u64::from(i.copies) * i.w1;
            if full <= rem_a {
                bound += i.v * f64::from(i.copies);
                rem_a -= full;
            } else {
                bound += i.v * rem_a as f64 / i.w1 as f64;
                break;
            }
        }
        bound.min(card)
    }

    fn dfs(&mut self, k: usize, rem_a: u64, rem_b: u64, cur: f64, st: &mut BbState) {
        st.nodes += 1;
        if st.nodes.is_multiple_of(1024) && self.deadline.is_some_and(|d| Instant::now() >= d) {
            st.nodes = st.limit;
        }
        if cur > st.best_value + 1e-12 {
            if st.best_value > 0.0 {
                // The pattern it replaces is kept as an extra column candidate.
                if self.runners_up.len() == MORE_PATTERNS {
                    self.runners_up.remove(0);
                }
                self.runners_up.push((st.best_value, self.best.clone()));
            }
            st.best_value = cur;
            self.best.copy_from_slice(&self.cur);
        }
        if k == self.order.len() || st.nodes >= st.limit {
            return;
        }
        if self.table_bound(k, rem_a, rem_b, cur) <= st.best_value + 1e-12
            || self.dantzig(k, rem_a, rem_b, cur) <= st.best_value + 1e-12
        {
            return;
        }
        let it = self.order[k];
        let mut max = it.copies;
        if let Some(q) = rem_a.checked_div(it.w1) {
            max = max.min(q.min(u64::from(u32::MAX)) as u32);
        }
        if let Some(q) = rem_b.checked_div(it.w2) {
            max = max.min(q.min(u64::from(u32::MAX)) as u32);
        }
        for n in (0..=max).rev() {
            self.cur[k] = n;
            let n64 = u64::from(n);
            self.dfs(
                k + 1,
                rem_a - n64 * it.w1,
                rem_b - n64 * it.w2,
                cur + it.v * f64::from(n),
                st,
            );
            if st.nodes >= st.limit {
                break;
            }
        }
        self.cur[k] = 0;
    }
}

impl Pricer {
    /// The smallest of the suffix-table bounds on the best value of items `k..` within
    /// the rooms, plus `cur`.
    fn table_bound(&self, k: usize, rem_a: u64, rem_b: u64, cur: f64) -> f64 {
        self.suffix
            .iter()
            .map(|t| t.get(k, rem_a, rem_b))
            .fold(f64::INFINITY, f64::min)
            + cur
    }
}

/// Upper bounds on the best value of the knapsack items `k..` (in branch-and-bound
/// order) within two rooms: a dynamic program over both capacities scaled down (each
/// weight and room divided by the scale and rounded down: any feasible set stays
/// feasible, so it is a relaxation). A capacity of `u64::MAX` is ignored.
#[derive(Default)]
struct SuffixTable {
    on: bool,
    s1: u64,
    s2: u64,
    c1: usize,
    c2: usize,
    /// `table[k][r1][r2]`, row-major.
    table: Vec<f64>,
}

impl SuffixTable {
    /// Builds the table for `items` within `cap1`, `cap2` and at most `entries`
    /// entries (0: off, every bound infinite).
    fn build(&mut self, items: &[KItem], cap1: u64, cap2: u64, entries: usize) {
        let n = items.len();
        self.on = entries > 0;
        if !self.on {
            return;
        }
        let plane = (entries / (n + 1)).max(1);
        // The secondary capacity gets up to 64 steps when both count, else the plane.
        let (s1, s2) = match (cap1 == u64::MAX, cap2 == u64::MAX) {
            (false, true) => (cap1.div_ceil(plane as u64 - 1).max(1), u64::MAX),
            (true, false) => (u64::MAX, cap2.div_ceil(plane as u64 - 1).max(1)),
            _ => {
                let s2 = cap2.div_ceil(64).max(1);
                let c2 = (cap2 / s2) as usize + 1;
                let per = ((plane / c2).max(2) - 1) as u64;
                (cap1.div_ceil(per).max(1), s2)
            }
        };
        let width = |cap: u64, s: u64| {
            if cap == u64::MAX {
                1
            } else {
                (cap / s) as usize + 1
            }
        };
        self.s1 = s1;
        self.s2 = s2;
        self.c1 = width(cap1, s1);
        self.c2 = width(cap2, s2);
        let size = self.c1 * self.c2;
        // Every row but the last (no items: 0) is overwritten below.
        self.table.resize((n + 1) * size, 0.0);
        self.table[n * size..].fill(0.0);
        for k in (0..n).rev() {
            let it = items[k];
            let (head, tail) = self.table.split_at_mut((k + 1) * size);
            let row = &mut head[k * size..];
            row.copy_from_slice(&tail[..size]);
            let w1 = if s1 == u64::MAX {
                0
            } else {
                (it.w1 / s1) as usize
            };
            let w2 = if s2 == u64::MAX {
                0
            } else {
                (it.w2 / s2) as usize
            };
            if w1 >= self.c1 || w2 >= self.c2 {
                continue;
            }
            // Binary splitting of the copies, each chunk a 0-1 item.
            let mut left = it.copies;
            let mut take = 1u32;
            while left > 0 {
                let n_take = take.min(left);
                left -= n_take;
                take = take.saturating_mul(2);
                let (a, b) = (w1 * n_take as usize, w2 * n_take as usize);
                if a >= self.c1 || b >= self.c2 {
                    break;
                }
                let v = it.v * f64::from(n_take);
                let c2 = self.c2;
                for r1 in (a..self.c1).rev() {
                    if a == 0 {
                        // Same line: descending, so each cell reads a not yet updated one.
                        let line = &mut row[r1 * c2..(r1 + 1) * c2];
                        for r2 in (b..c2).rev() {
                            line[r2] = line[r2].max(line[r2 - b] + v);
                        }
                    } else {
                        let (lo, hi) = row.split_at_mut(r1 * c2);
                        let src = &lo[(r1 - a) * c2..(r1 - a) * c2 + c2 - b];
                        for (d, &x) in hi[b..c2].iter_mut().zip(src) {
                            *d = d.max(x + v);
                        }
                    }
                }
            }
        }
    }

    /// Bound on items `k..` within rooms `r1`, `r2` (infinite when off).
    fn get(&self, k: usize, r1: u64, r2: u64) -> f64 {
        if !self.on {
            return f64::INFINITY;
        }
        let i1 = if self.s1 == u64::MAX {
            0
        } else {
            ((r1 / self.s1) as usize).min(self.c1 - 1)
        };
        let i2 = if self.s2 == u64::MAX {
            0
        } else {
            ((r2 / self.s2) as usize).min(self.c2 - 1)
        };
        self.table[k * self.c1 * self.c2 + i1 * self.c2 + i2]
    }
}

struct BbState {
    best_value: f64,
    nodes: u64,
    /// Node budget of this search.
    limit: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute(items: &[KItem], cap1: u64, cap2: u64) -> f64 {
        fn rec(items: &[KItem], k: usize, r1: u64, r2: u64) -> f64 {
            if k == items.len() {
                return 0.0;
            }
            let it = items[k];
            let mut best = 0.0f64;
            for n in 0..=it.copies {
                let (a, b) = (it.w1 * u64::from(n), it.w2 * u64::from(n));
                if a > r1 || b > r2 {
                    break;
                }
                best = best.max(it.v.max(0.0) * f64::from(n) + rec(items, k + 1, r1 - a, r2 - b));
            }
            best
        }
        rec(items, 0, cap1, cap2)
    }

    /// Knapsack items from (w1, w2, value, copies), values divided by `div`.
    fn two_dim(raw: &[(u64, u64, u32, u32)], div: f64) -> Vec<KItem> {
        raw.iter()
            .enumerate()
            .map(|(t, &(w1, w2, v, c))| KItem {
                t: t as u32,
                w1,
                w2,
                v: f64::from(v) / div,
                copies: c,
            })
            .collect()
    }

    fn check(items: &[KItem], cap1: u64, cap2: u64, ans: &KAnswer) {
        let (mut a, mut b, mut v) = (0, 0, 0.0);
        for &(t, n) in &ans.items {
            let it = items.iter().find(|i| i.t == t).unwrap();
            assert!(n <= it.copies);
            a += it.w1 * u64::from(n);
            b += it.w2 * u64::from(n);
            v += it.v * f64::from(n);
        }
        assert!(a <= cap1 && b <= cap2);
        assert!((v - ans.value).abs() < 1e-6);
    }

    proptest! {
        #[test]
        fn pricing_matches_brute_force(
            raw in proptest::collection::vec((0u64..12, 0u64..6, 0u32..40, 1u32..4), 1..7),
            cap1 in 0u64..30,
            cap2 in 0u64..12,
        ) {
            let items = two_dim(&raw, 7.0);
            for no_quick in [false, true] {
                let ans = Pricer { no_quick, ..Pricer::default() }.solve(&items, cap1, cap2);
                check(&items, cap1, cap2, &ans);
                let want = brute(&items, cap1, cap2);
                prop_assert!((ans.value - want).abs() < 1e-6, "{} vs {}", ans.value, want);
                prop_assert!(ans.upper + 1e-9 >= want);
            }
        }

        #[test]
        fn branch_and_bound_with_scaled_suffix_bounds_matches_brute_force(
            raw in proptest::collection::vec((30u64..900, 1u64..25, 1u32..60, 1u32..3), 1..9),
            cap1 in 500u64..3000,
            cap2 in 10u64..100,
        ) {
            let items = two_dim(&raw, 3.0);
            let ans = Pricer { no_quick: true, ..Pricer::default() }.solve(&items, cap1, cap2);
            check(&items, cap1, cap2, &ans);
            let want = brute(&items, cap1, cap2);
            prop_assert!((ans.value - want).abs() < 1e-6, "{} vs {}", ans.value, want);
            prop_assert!(ans.upper + 1e-9 >= want);
            for (value, content) in &ans.more {
                let extra = KAnswer { value: *value, items: content.clone(), ..KAnswer::default() };
                check(&items, cap1, cap2, &extra);
                prop_assert!(*value <= ans.value + 1e-9);
            }
        }

        /// A solve sent straight to the exact two-capacity program (the branch and
        /// bound ran out of nodes on these capacities before) stays exact, and the
        /// skip is used up after its solves.
        #[test]
        fn solves_after_an_out_of_nodes_search_match_brute_force(
            raw in proptest::collection::vec((1u64..40, 1u64..30, 1u32..60, 1u32..4), 2..8),
            cap1 in 20u64..120,
            cap2 in 10u64..80,
        ) {
            let items = two_dim(&raw, 3.0);
            let mut pricer = Pricer::default();
            for caps in [(cap1, cap2), (cap2, cap1)] {
                pricer.dp2_first.push((caps, DP2_FIRST_SOLVES));
            }
            let want = brute(&items, cap1, cap2);
            for _ in 0..=DP2_FIRST_SOLVES {
                let ans = pricer.solve(&items, cap1, cap2);
                check(&items, cap1, cap2, &ans);
                prop_assert!((ans.value - want).abs() < 1e-6, "{} vs {}", ans.value, want);
            }
            // Loads as `solve` sees them: copies cut to what fits alone.
            let fit = |i: &KItem| u64::from(i.copies).min(cap1 / i.w1).min(cap2 / i.w2);
            let load = |w: fn(&KItem) -> u64| items.iter().map(|i| w(i) * fit(i)).sum::<u64>();
            if load(|i| i.w1) > cap1 && load(|i| i.w2) > cap2 {
                // Both capacities bind: the branch and bound's order was skipped
                // DP2_FIRST_SOLVES times, then searched (and finished) again.
                prop_assert_eq!(pricer.dp2_first.len(), 1);
            }
        }

        #[test]
        fn two_capacity_dp_matches_brute_force(
            raw in proptest::collection::vec((0u64..40, 0u64..90, 1u32..60, 1u32..4), 1..8),
            cap1 in 0u64..120,
            cap2 in 0u64..260,
        ) {
            let items = two_dim(&raw, 3.0);
            let ans = Pricer::default().dp2(&items, cap1 as usize, cap2 as usize);
            check(&items, cap1, cap2, &ans);
            prop_assert!((ans.value - brute(&items, cap1, cap2)).abs() < 1e-6);
        }

        #[test]
        fn blocked_dp_for_large_weights_matches_brute_force(
            raw in proptest::collection::vec((60u64..400, 1u32..50, 1u32..4), 1..7),
            cap in 60u64..1200,
        ) {
            let items: Vec<KItem> = raw.iter().enumerate().map(|(t, &(w1, v, c))| KItem {
                t: t as u32, w1, w2: 0, v: f64::from(v), copies: c,
            }).collect();
            let ans = Pricer::default().solve(&items, cap, 0);
            check(&items, cap, 0, &ans);
            prop_assert!((ans.value - brute(&items, cap, 0)).abs() < 1e-6);
            for (value, content) in &ans.more {
                let extra = KAnswer { value: *value, items: content.clone(), ..KAnswer::default() };
                check(&items, cap, 0, &extra);
                prop_assert!(*value <= ans.value + 1e-9);
            }
        }

        #[test]
        fn one_dimensional_dp_matches_brute_force(
            raw in proptest::collection::vec((1u64..40, 1u32..50, 1u32..5), 1..8),
            cap in 1u64..100,
        ) {
            let items: Vec<KItem> = raw.iter().enumerate().map(|(t, &(w1, v, c))| KItem {
                t: t as u32, w1, w2: 0, v: f64::from(v), copies: c,
            }).collect();
            let ans = Pricer::default().solve(&items, cap, 0);
            check(&items, cap, 0, &ans);
            prop_assert!((ans.value - brute(&items, cap, 0)).abs() < 1e-6);
        }
    }
}
