//! Reduced-cost pattern enumeration for one-dimensional bin packing with a fixed number
//! of bins K (the idea of Baldacci et al.'s route enumeration, as used for bin packing
//! by Pessoa et al.): with dual-feasible item values π (no bin is worth more than 1),
//! every bin's reduced cost 1 − Σπ is ≥ 0 and the bins of any packing into at most K
//! bins have reduced costs summing to at most K − Σπ·d. When the LP is tight that
//! budget is tiny (hard28: ≤ 0.01), so only few patterns — every pattern, not only
//! maximal ones — can occur in such a packing, and each also wastes at most
//! W = K·C − Σw. They are all enumerated, then an exact cover by at most K of them is
//! searched depth first: branch on the item type with the fewest usable patterns
//! (Knuth's rule), one child per pattern that covers it, and each later sibling
//! excludes the patterns tried before it (so no packing is visited twice and none is
//! missed). Every node also solves the LP of its remaining demand over the patterns it
//! may still use (`cover_lp`): it cuts the node when more bins than are left are
//! needed, fixes out the patterns whose LP reduced cost exceeds the gap to the bins
//! left (in a subtree whose LP is integral-valued that is nearly all of them), and
//! orders the children by LP value. A search that ends without a packing proves K
//! bins impossible, which is how a non-IRUP instance's bound rises above ⌈LP⌉.

use crate::cover_lp::min_cover;
use std::collections::HashMap;
use std::time::Instant;

/// Safety margin on reduced-cost budgets against floating-point error (as in bin
/// completion: values are sums of at most a few hundred doubles).
const RC_MARGIN: f64 = 1e-6;
/// Failed states remembered at most (a key is one byte or word per item type).
const MEMO_LIMIT: usize = 400_000;
/// Cells of the suffix knapsack table used to prune the enumeration; larger problems
/// use the ratio bound instead.
const DP_CELLS: usize = 4_000_000;
/// Every node of the cover search with at most this many patterns solves the LP of
/// its remaining demand (a bound, reduced-cost fixing and the order of its children);
/// beyond, an LP per node costs more than it saves.
const LP_MAX_PATTERNS: usize = 20_000;
/// Margin on that LP's value against floating-point error before a node is cut.
const LP_MARGIN: f64 = 1e-6;

/// Outcome of one enumeration search.
#[derive(Debug, Clone, Default)]
pub struct EnumResult {
    /// A packing into at most K bins: per bin, (item index, count) pairs.
    pub packing: Option<Vec<Vec<(usize, u32)>>>,
    /// The search ran to its end without a packing: K bins are too few.
    pub exhausted: bool,
    /// Patterns enumerated (0 if the enumeration was cut at its limit).
    pub patterns: usize,
    /// Search nodes.
    pub nodes: u64,
}

/// One enumerated pattern: (internal type, count) pairs, reduced cost, waste.
struct Pat {
    items: Vec<(usize, u32)>,
    rc: f64,
    waste: u64,
    /// Value of the pattern in a guiding LP solution (0 if absent); tried first.
    x: f64,
    /// Reduced cost per unit of dual value, waste per unit of fill (0 if empty).
    rc_per_value: f64,
    waste_per_fill: f64,
}

/// Items in decreasing weight with their values: what enumeration and search share.
struct Items {
    w: Vec<u64>,
    cnt: Vec<u32>,
    val: Vec<f64>,
    idx: Vec<usize>,
}

/// Searches for a packing of `items` (weight, count) into `k` bins of capacity `cap`
/// using only patterns whose reduced cost under `duals` fits the budget. `duals` must
/// be dual feasible (every pattern worth at most 1, up to rounding); the enumeration
/// gives up (neither packing nor proof) beyond `max_patterns` patterns, and so does
/// the search at `deadline`.
pub fn pack_into(
    items: &[(u64, u32)],
    cap: u64,
    k: u64,
    duals: &[f64],
    max_patterns: usize,
    deadline: Instant,
) -> EnumResult {
    match RcSearch::new(items, cap, k, duals, max_patterns, deadline) {
        Ok(mut s) => s.search(0, u64::MAX, deadline),
        Err(r) => r,
    }
}

/// The enumerated patterns of one (items, K, duals) problem, searched in restarts
/// with node limits and random tie orders; failed remaining demands are remembered
/// across restarts (they are facts about the problem, not about one search).
pub struct RcSearch {
    cover: Cover,
    idx: Vec<usize>,
    k: u64,
    budget: f64,
    waste: u64,
}

impl RcSearch {
    /// Enumerates the patterns; `Err` carries the answer when there is nothing to
    /// search (a proof, the empty packing, or — not exhausted — too many patterns or
    /// the deadline).
    pub fn new(
        items: &[(u64, u32)],
        cap: u64,
        k: u64,
        duals: &[f64],
        max_patterns: usize,
        deadline: Instant,
    ) -> Result<RcSearch, EnumResult> {
        let proof = EnumResult {
            exhausted: true,
            ..EnumResult::default()
        };
        let total: u128 = items
            .iter()
            .map(|&(w, c)| u128::from(w) * u128::from(c))
            .sum();
        if items.iter().any(|&(w, c)| c > 0 && w > cap) || total > u128::from(k) * u128::from(cap) {
            return Err(proof);
        }
        let waste = (u128::from(k) * u128::from(cap) - total).min(u128::from(u64::MAX)) as u64;
        let mut order: Vec<usize> = (0..items.len()).filter(|&i| items[i].1 > 0).collect();
        if order.is_empty() {
            return Err(EnumResult {
                packing: Some(Vec::new()),
                ..EnumResult::default()
            });
        }
        order.sort_by(|&a, &b| items[b].0.cmp(&items[a].0));
        let it = Items {
            w: order.iter().map(|&i| items[i].0).collect(),
            cnt: order.iter().map(|&i| items[i].1).collect(),
            val: order.iter().map(|&i| duals[i].max(0.0)).collect(),
            idx: order,
        };
        let budget = k as f64
            - it.val
                .iter()
                .zip(&it.cnt)
                .map(|(v, &c)| v * f64::from(c))
                .sum::<f64>();
        if budget < -RC_MARGIN {
            return Err(proof);
        }
        let Some(pats) = enumerate(&it, cap, waste, budget, max_patterns, deadline) else {
            return Err(EnumResult::default());
        };
        let mut cover = Cover {
            w: it.w.clone(),
            val: it.val.clone(),
            by_type: vec![Vec::new(); it.w.len()],
            banned: vec![false; pats.len()],
            over: vec![0; pats.len()],
            d: it.cnt.clone(),
            left: it.cnt.iter().map(|&c| u64::from(c)).sum(),
            path: Vec::new(),
            nodes: 0,
            node_limit: u64::MAX,
            deadline,
            aborted: false,
            failed: HashMap::new(),
            rng: 1,
            node_lp: pats.len() <= LP_MAX_PATTERNS,
            pats,
        };
        for (p, pat) in cover.pats.iter().enumerate() {
            for &(j, c) in &pat.items {
                cover.by_type[j].push((p as u32, c));
            }
        }
        Ok(RcSearch {
            cover,
            idx: it.idx,
            k,
            budget,
            waste,
        })
    }

    /// Makes the search try the patterns of a guiding solution first (e.g. the root
    /// LP's), largest value first: `(pattern as (item index, count) pairs, value)`.
    pub fn prefer(&mut self, guide: &[(Vec<(usize, u32)>, f64)]) {
        let mut pos = vec![usize::MAX; self.idx.iter().max().map_or(0, |&m| m + 1)];
        for (j, &i) in self.idx.iter().enumerate() {
            pos[i] = j;
        }
        let mut value: HashMap<Vec<(usize, u32)>, f64> = HashMap::new();
        for (items, x) in guide {
            let mut key: Vec<(usize, u32)> = Vec::new();
            for &(i, c) in items {
                match pos.get(i) {
                    Some(&j) if j != usize::MAX && c > 0 => key.push((j, c)),
                    _ => continue,
                }
            }
            key.sort_unstable();
            *value.entry(key).or_insert(0.0) += x;
        }
        for pat in &mut self.cover.pats {
            pat.x = value.get(&pat.items).copied().unwrap_or(0.0);
        }
    }

    /// Turns the LP at every node on or off (default on; it stays off beyond
    /// [`LP_MAX_PATTERNS`] patterns). The search is exact either way (tests check both).
    pub fn set_node_lp(&mut self, on: bool) {
        self.cover.node_lp = on && self.cover.pats.len() <= LP_MAX_PATTERNS;
    }

    /// Whether every node solves its LP (off beyond [`LP_MAX_PATTERNS`] patterns):
    /// without it the search is unguided and rarely ends.
    pub fn guided(&self) -> bool {
        self.cover.node_lp
    }

    /// Number of enumerated patterns.
    pub fn patterns(&self) -> usize {
        self.cover.pats.len()
    }

    /// One search with at most `node_limit` nodes until `deadline`; `seed` orders
    /// patterns of equal reduced cost and waste.
    pub fn search(&mut self, seed: u64, node_limit: u64, deadline: Instant) -> EnumResult {
        let s = &mut self.cover;
        s.nodes = 0;
        s.node_limit = node_limit;
        s.deadline = deadline;
        s.aborted = false;
        s.rng = if seed == 0 {
            1
        } else {
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
        };
        s.path.clear();
        let found = s.dfs(self.k, self.budget, self.waste, None);
        let mut r = EnumResult {
            patterns: s.pats.len(),
            nodes: s.nodes,
            exhausted: !found && !s.aborted,
            packing: None,
        };
        if found {
            r.packing = Some(
                s.path
                    .iter()
                    .map(|&p| {
                        s.pats[p as usize]
                            .items
                            .iter()
                            .map(|&(j, c)| (self.idx[j], c))
                            .collect()
                    })
                    .collect(),
            );
            // Give the patterns back, so that the next search starts from scratch.
            for p in std::mem::take(&mut s.path).into_iter().rev() {
                s.take(p, false);
            }
        }
        r
    }
}

/// All non-empty patterns with value ≥ 1 − budget (reduced cost within the budget)
/// and waste ≤ `waste`; `None` beyond `max` patterns or at the deadline.
fn enumerate(
    it: &Items,
    cap: u64,
    waste: u64,
    budget: f64,
    max: usize,
    deadline: Instant,
) -> Option<Vec<Pat>> {
    let n = it.w.len();
    // Suffix bounds: total weight, and best value within a capacity (exact bounded
    // knapsack table when small enough, else the best value-per-weight ratio).
    let mut suf_w = vec![0u64; n + 1];
    let mut ratio = vec![0.0f64; n + 1];
    let mut suf_v = vec![0.0f64; n + 1];
    for j in (0..n).rev() {
        suf_w[j] = suf_w[j + 1].saturating_add(it.w[j] * u64::from(it.cnt[j]));
        ratio[j] = ratio[j + 1].max(it.val[j] / it.w[j].max(1) as f64);
        suf_v[j] = suf_v[j + 1] + it.val[j] * f64::from(it.cnt[j]);
    }
    let width = cap as usize + 1;
    let table = if (n + 1).saturating_mul(width) <= DP_CELLS {
        let mut dp = vec![0.0f64; (n + 1) * width];
        for j in (0..n).rev() {
            let (w, v) = (it.w[j] as usize, it.val[j]);
            for r in 0..width {
                let mut best = dp[(j + 1) * width + r];
                let mut m = 1usize;
                while m <= it.cnt[j] as usize && m * w <= r {
                    best = best.max(dp[(j + 1) * width + r - m * w] + m as f64 * v);
                    m += 1;
                }
                dp[j * width + r] = best;
            }
        }
        Some(dp)
    } else {
        None
    };
    let e = Enum {
        it,
        cap,
        need: 1.0 - budget - RC_MARGIN,
        min_fill: cap.saturating_sub(waste),
        suf_w,
        ratio,
        suf_v,
        table,
        width,
        max,
        deadline,
    };
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut steps = 0u64;
    e.rec(0, 0, 0.0, &mut cur, &mut out, &mut steps)
        .then_some(out)
}

struct Enum<'a> {
    it: &'a Items,
    cap: u64,
    need: f64,
    min_fill: u64,
    suf_w: Vec<u64>,
    ratio: Vec<f64>,
    suf_v: Vec<f64>,
    table: Option<Vec<f64>>,
    width: usize,
    max: usize,
    deadline: Instant,
}

impl Enum<'_> {
    /// Best value reachable from type `j` on within `rem` capacity (an upper bound).
    fn reach(&self, j: usize, rem: u64) -> f64 {
        match &self.table {
            Some(dp) => dp[j * self.width + rem as usize],
            None => self.suf_v[j].min(self.ratio[j] * rem as f64),
        }
    }

    /// Extends the pattern `cur` (fill `fill`, value `val`) with types `j..`; `false`
    /// when the limit or the deadline cut the enumeration.
    fn rec(
        &self,
        j: usize,
        fill: u64,
        val: f64,
        cur: &mut Vec<(usize, u32)>,
        out: &mut Vec<Pat>,
        steps: &mut u64,
    ) -> bool {
        *steps += 1;
        if steps.is_multiple_of(4096) && Instant::now() >= self.deadline {
            return false;
        }
        let rem = self.cap - fill;
        if val + self.reach(j, rem) < self.need || fill + rem.min(self.suf_w[j]) < self.min_fill {
            return true;
        }
        if j == self.it.w.len() {
            if !cur.is_empty() {
                if out.len() >= self.max {
                    return false;
                }
                let rc = 1.0 - val;
                out.push(Pat {
                    items: cur.clone(),
                    rc,
                    waste: rem,
                    x: 0.0,
                    rc_per_value: if val > 1e-9 { rc / val } else { 0.0 },
                    waste_per_fill: if fill > 0 {
                        rem as f64 / fill as f64
                    } else {
                        0.0
                    },
                });
            }
            return true;
        }
        let w = self.it.w[j];
        let most = u64::from(self.it.cnt[j]).min(rem / w) as u32;
        for m in (0..=most).rev() {
            if m > 0 {
                cur.push((j, m));
            }
            let ok = self.rec(
                j + 1,
                fill + u64::from(m) * w,
                val + f64::from(m) * self.it.val[j],
                cur,
                out,
                steps,
            );
            if m > 0 {
                cur.pop();
            }
            if !ok {
                return false;
            }
        }
        true
    }
}

/// What the LP of a cover-search node says.
enum NodeLp {
    /// No completion exists.
    Cut,
    /// LP values per pattern (a guide) and the patterns no completion uses.
    Guide { x: Vec<f64>, fixed: Vec<usize> },
    /// No LP (turned off, or stopped by the deadline).
    Unsolved,
}

/// The exact-cover search over the enumerated patterns.
struct Cover {
    pats: Vec<Pat>,
    /// Weight and dual value per type.
    w: Vec<u64>,
    val: Vec<f64>,
    /// Per type, the patterns holding it and how many copies.
    by_type: Vec<Vec<(u32, u32)>>,
    /// Per pattern, how many of its types it holds more copies of than remain
    /// (kept up to date as patterns are taken and given back).
    over: Vec<u32>,
    banned: Vec<bool>,
    /// Remaining demand per type and in total.
    d: Vec<u32>,
    left: u64,
    path: Vec<u32>,
    nodes: u64,
    node_limit: u64,
    deadline: Instant,
    aborted: bool,
    rng: u64,
    /// Remaining demands proven impossible, with the most bins they were tried with.
    failed: HashMap<Vec<u8>, u64>,
    /// Whether nodes solve their LP (see [`min_cover`]).
    node_lp: bool,
}

impl Cover {
    /// The remaining demand as a key (with wide counts as four bytes each).
    fn key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.d.len());
        for &c in &self.d {
            if c < 255 {
                k.push(c as u8);
            } else {
                k.push(255);
                k.extend_from_slice(&c.to_le_bytes());
            }
        }
        k
    }

    fn usable(&self, p: usize, budget: f64, waste: u64) -> bool {
        let pat = &self.pats[p];
        self.over[p] == 0 && !self.banned[p] && pat.rc <= budget + RC_MARGIN && pat.waste <= waste
    }

    /// Covers the remaining demand with at most `bins` patterns whose reduced costs
    /// sum to at most `budget` and wastes to at most `waste`.
    fn dfs(&mut self, bins: u64, budget: f64, waste: u64, parent: Option<&[f64]>) -> bool {
        if self.left == 0 {
            return true;
        }
        if bins == 0 || self.aborted {
            return false;
        }
        self.nodes += 1;
        if self.nodes >= self.node_limit
            || ((self.node_lp || self.nodes.is_multiple_of(256)) && Instant::now() >= self.deadline)
        {
            self.aborted = true;
            return false;
        }
        // The remaining demand and the bins left determine the rest of the budget and
        // of the waste, so a demand that failed with at least as many bins fails again.
        // This holds despite the exclusions: a solution of this node using an excluded
        // pattern would extend an earlier sibling's path, whose search found none, or
        // contradict the LP of the ancestor that fixed the pattern out.
        let key = self.key();
        if self.failed.get(&key).is_some_and(|&b| b >= bins) {
            return false;
        }
        // Patterns fixed out by the node LP are banned in the subtree; a memo entry
        // stays valid, as no completion avoiding the other bans uses them.
        let lp = if self.node_lp {
            self.solve_node_lp(bins, budget, waste, parent)
        } else {
            NodeLp::Unsolved
        };
        let (guide, fixed) = match lp {
            NodeLp::Cut => {
                self.remember(key, bins);
                return false;
            }
            NodeLp::Guide { x, fixed } => (Some(x), fixed),
            NodeLp::Unsolved => (None, Vec::new()),
        };
        for &p in &fixed {
            self.banned[p] = true;
        }
        let found = self.branch(bins, budget, waste, guide.as_deref());
        for &p in &fixed {
            self.banned[p] = false;
        }
        if !found && !self.aborted {
            self.remember(key, bins);
        }
        found
    }

    fn remember(&mut self, key: Vec<u8>, bins: u64) {
        if self.failed.len() < MEMO_LIMIT {
            let b = self.failed.entry(key).or_insert(0);
            *b = (*b).max(bins);
        }
    }

    /// The LP of the remaining demand over the usable patterns (see [`min_cover`]).
    /// With its duals y (waste dual y_w ≤ 0), every usable pattern has reduced cost
    /// r_p = 1 − y·p − y_w·waste_p ≥ −ε (ε: the simplex's tolerance, measured), and a
    /// completion into at most `bins` bins, wasting at most `waste`, has
    /// Σ r ≤ g = bins − (y·D + y_w·waste): if g < −ε·bins none exists (`Cut`), else a
    /// pattern with r_p > g + ε·(bins − 1) is in none (`fixed`).
    fn solve_node_lp(&self, bins: u64, budget: f64, waste: u64, parent: Option<&[f64]>) -> NodeLp {
        let usable: Vec<usize> = (0..self.pats.len())
            .filter(|&p| self.usable(p, budget, waste))
            .collect();
        let pats: Vec<(&[(usize, u32)], u64)> = usable
            .iter()
            .map(|&p| (self.pats[p].items.as_slice(), self.pats[p].waste))
            .collect();
        let start: Vec<bool> = usable
            .iter()
            .map(|&p| parent.map_or(self.pats[p].x, |x| x[p]) > 1e-9)
            .collect();
        let Some(lp) = min_cover(&self.d, &pats, &start, waste, self.deadline) else {
            return NodeLp::Unsolved;
        };
        let gap = bins as f64 - lp.dual_value;
        let eps = lp.rc.iter().fold(0.0f64, |e, &r| e.max(-r));
        if gap < -eps * bins as f64 - LP_MARGIN {
            return NodeLp::Cut;
        }
        let limit = gap + eps * bins.saturating_sub(1) as f64 + LP_MARGIN;
        let mut x = vec![0.0; self.pats.len()];
        let mut fixed = Vec::new();
        for ((&p, &v), &r) in usable.iter().zip(&lp.x).zip(&lp.rc) {
            x[p] = v;
            if r > limit {
                fixed.push(p);
            }
        }
        NodeLp::Guide { x, fixed }
    }

    fn branch(&mut self, bins: u64, budget: f64, waste: u64, guide: Option<&[f64]>) -> bool {
        // The type with the fewest usable patterns (ties: the heaviest). On the way,
        // lower bounds on the reduced cost and the waste still to come: share each
        // pattern's reduced cost among its items by dual value and its waste by weight;
        // an item then costs at least its type's smallest share over usable patterns.
        let mut pick = None;
        let mut fewest = usize::MAX;
        let (mut need_rc, mut need_waste) = (0.0f64, 0.0f64);
        for j in 0..self.d.len() {
            if self.d[j] == 0 {
                continue;
            }
            let mut n = 0;
            let (mut rc_share, mut waste_share) = (f64::INFINITY, f64::INFINITY);
            for &(p, _) in &self.by_type[j] {
                if self.usable(p as usize, budget, waste) {
                    n += 1;
                    let pat = &self.pats[p as usize];
                    rc_share = rc_share.min(pat.rc_per_value);
                    waste_share = waste_share.min(pat.waste_per_fill);
                }
            }
            if n == 0 {
                return false;
            }
            let dj = f64::from(self.d[j]);
            need_rc += dj * self.val[j] * rc_share.max(0.0);
            need_waste += dj * self.w[j] as f64 * waste_share;
            if n < fewest {
                fewest = n;
                pick = Some(j);
            }
        }
        if need_rc > budget + RC_MARGIN || need_waste > waste as f64 + 1e-6 {
            return false;
        }
        let Some(t) = pick else {
            return false;
        };
        let mut options: Vec<(u32, u64)> = Vec::new();
        for i in 0..self.by_type[t].len() {
            let p = self.by_type[t][i].0;
            if self.usable(p as usize, budget, waste) {
                let tie = if self.rng == 1 { 0 } else { self.next_random() };
                options.push((p, tie));
            }
        }
        let node_x = |p: u32| guide.map_or(0.0, |x| x[p as usize]);
        options.sort_by(|&(a, ta), &(b, tb)| {
            let (pa, pb) = (&self.pats[a as usize], &self.pats[b as usize]);
            node_x(b)
                .total_cmp(&node_x(a))
                .then(pb.x.total_cmp(&pa.x))
                .then(pa.rc.total_cmp(&pb.rc))
                .then(pa.waste.cmp(&pb.waste))
                .then(ta.cmp(&tb))
        });
        let mut found = false;
        for (i, &(p, _)) in options.iter().enumerate() {
            let (rc, w) = (self.pats[p as usize].rc, self.pats[p as usize].waste);
            self.take(p, true);
            self.path.push(p);
            found = self.dfs(bins - 1, budget - rc, waste - w, guide);
            if found {
                break;
            }
            self.path.pop();
            self.take(p, false);
            if self.aborted {
                break;
            }
            // Later siblings do without the patterns tried before them.
            self.banned[options[i].0 as usize] = true;
        }
        for &(p, _) in &options {
            self.banned[p as usize] = false;
        }
        found
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn take(&mut self, p: u32, on: bool) {
        for i in 0..self.pats[p as usize].items.len() {
            let (j, c) = self.pats[p as usize].items[i];
            let before = self.d[j];
            let after = if on { before - c } else { before + c };
            self.d[j] = after;
            if on {
                self.left -= u64::from(c);
            } else {
                self.left += u64::from(c);
            }
            for &(q, cq) in &self.by_type[j] {
                match (cq > before, cq > after) {
                    (false, true) => self.over[q as usize] += 1,
                    (true, false) => self.over[q as usize] -= 1,
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{brute_min_bins, check, far, item_types};
    use proptest::prelude::*;

    #[test]
    fn packs_and_refutes_small_cases() {
        let items = [(6, 2), (5, 2), (4, 2)];
        let duals = [0.6, 0.5, 0.4];
        let r = pack_into(&items, 10, 3, &duals, 1000, far());
        check(&items, 10, 3, r.packing.as_ref().unwrap());
        let r = pack_into(&items, 10, 2, &duals, 1000, far());
        assert!(r.packing.is_none() && r.exhausted);
        // 7,7,6 (Σ 20): no two bins, although L1 = 2.
        let r = pack_into(&[(7, 2), (6, 1)], 10, 2, &[0.5, 0.5], 1000, far());
        assert!(r.packing.is_none() && r.exhausted);
    }

    #[test]
    fn a_pattern_or_node_limit_is_not_a_proof() {
        // K = 3 with zero values: {6,4} and {5,5} fill exactly, two patterns > 1.
        let items = [(6, 2), (5, 2), (4, 2)];
        let r = pack_into(&items, 10, 3, &[0.0; 3], 1, far());
        assert!(r.packing.is_none() && !r.exhausted);
        let r = pack_into(&items, 10, 3, &[0.0; 3], 2, far());
        check(&items, 10, 3, r.packing.as_ref().unwrap());
        // 7,7,6 in 2 bins: no pattern at all, but one node is not enough to say so.
        let mut s = RcSearch::new(&[(7, 2), (6, 1)], 10, 2, &[0.5, 0.5], 100, far()).ok();
        let s = s.as_mut().expect("there is something to search");
        let r = s.search(0, 1, far());
        assert!(r.packing.is_none() && !r.exhausted);
        let r = s.search(0, u64::MAX, far());
        assert!(r.packing.is_none() && r.exhausted);
    }

    #[test]
    fn guidance_and_restarts_keep_the_search_exact() {
        let items = [(6, 2), (5, 2), (4, 2), (3, 2)];
        let duals = [0.6, 0.5, 0.4, 0.3];
        let mut s = RcSearch::new(&items, 10, 4, &duals, 1000, far())
            .ok()
            .unwrap();
        s.prefer(&[(vec![(0, 1), (3, 1)], 2.0), (vec![(1, 2)], 1.0)]);
        for seed in 0..4 {
            let r = s.search(seed, u64::MAX, far());
            check(&items, 10, 4, r.packing.as_ref().unwrap());
        }
        // Σ = 36 into 3 bins of 12 ({6,6}, {5,4,3} twice), with tiny node limits
        // first: they neither find nor refute, and what they remember is sound.
        let w12: Vec<f64> = items.iter().map(|&(w, _)| w as f64 / 12.0).collect();
        let mut s = RcSearch::new(&items, 12, 3, &w12, 1000, far())
            .ok()
            .unwrap();
        for seed in 0..3 {
            let r = s.search(seed, 1 + seed, far());
            assert!(!r.exhausted);
            if let Some(bins) = &r.packing {
                check(&items, 12, 3, bins);
            }
        }
        let r = s.search(7, u64::MAX, far());
        check(&items, 12, 3, r.packing.as_ref().unwrap());
    }

    proptest! {
        /// Against brute force, with two kinds of dual-feasible values: weight over
        /// capacity, and the same with every third value zeroed (any feasible values
        /// keep the search exact; tighter ones prune more).
        #[test]
        fn matches_brute_force_on_small_instances(
            weights in proptest::collection::vec(1u64..20, 1..12),
            cap in 20u64..30,
            zero in 0usize..3,
            seed in 0u64..100,
        ) {
            let opt = brute_min_bins(&weights, cap);
            let items = item_types(&weights);
            let by_weight: Vec<f64> = items.iter().map(|&(w, _)| w as f64 / cap as f64).collect();
            // Some zero values too (still feasible): patterns then differ only in them.
            let sparse: Vec<f64> = by_weight
                .iter()
                .enumerate()
                .map(|(i, &v)| if i % 3 == zero { 0.0 } else { v })
                .collect();
            for d in [by_weight, sparse] {
                let r = pack_into(&items, cap, opt, &d, 1_000_000, far());
                let bins = r.packing.expect("optimum must be found");
                check(&items, cap, opt, &bins);
                let r = pack_into(&items, cap, opt - 1, &d, 1_000_000, far());
                prop_assert!(r.packing.is_none() && r.exhausted);
                // Restarts with tiny node limits first (what they remember must not
                // hide the packing), guided by the packing found, with and without the
                // node LP (its cuts and fixings are remembered too).
                let guide: Vec<(Vec<(usize, u32)>, f64)> =
                    bins.iter().map(|b| (b.clone(), 1.0)).collect();
                for (k, node_lp) in [(opt, false), (opt, true), (opt - 1, false), (opt - 1, true)] {
                    let Ok(mut s) = RcSearch::new(&items, cap, k, &d, 1_000_000, far()) else {
                        prop_assert!(k < opt);
                        continue;
                    };
                    s.set_node_lp(node_lp);
                    s.prefer(&guide[guide.len() / 2..]);
                    for limit in [2, 5, 9] {
                        let r = s.search(seed + limit, limit, far());
                        if let Some(b) = &r.packing {
                            check(&items, cap, k, b);
                        }
                    }
                    let r = s.search(seed, u64::MAX, far());
                    prop_assert_eq!(r.packing.is_some(), k == opt);
                    prop_assert!(r.packing.is_some() || r.exhausted);
                }
            }
        }
    }
}
