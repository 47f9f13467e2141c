//! The exact solver: bounds first (L2 for one device model, then the column-generation
//! LP bound), greedy incumbents, then column-generation diving with limited
//! discrepancy search — each node fixes the columns the LP already uses integrally (or
//! its largest fractional column), re-solves the residual LP with the shared column
//! pool, prunes by the residual bound and completes greedily. Passes with a growing
//! discrepancy budget alternate with time slices of branch and price (`bnp`), which
//! raises the bound above the root LP's and finds placements of its own, until the
//! incumbent meets the bound (proven optimal) or the deadline passes (the gap is then
//! reported).

use crate::bin_completion;
use crate::bnp::BranchPrice;
use crate::bounds;
use crate::colgen::ColGen;
use crate::complete;
use crate::greedy::best_greedy;
use crate::pricing::{KItem, Pricer};
use crate::problem::{Pattern, Problem};
use crate::rc_enum::RcSearch;
use crate::repack;
use crate::restricted;
use crate::waste;
use std::collections::HashSet;
use std::time::Instant;

/// Largest discrepancy budget tried (passes run 0, 1, ..., this).
const MAX_DISCREPANCY: u32 = 12;
/// Residual problems with at most this many items are searched completely.
const RESIDUAL_ITEMS: usize = 40;
/// Time slice of one complete residual search.
const RESIDUAL_TIME: std::time::Duration = std::time::Duration::from_millis(30);
/// Alternatives tried at a node that still has discrepancy budget.
const BREADTH: usize = 3;
/// Node budget of the first bin-completion restart (doubled at every restart).
const BC_FIRST_NODES: u64 = 2_000;
/// Node budget of the bin completion of a dive node's residual problem.
const BC_DIVE_NODES: u64 = 200;
/// Dive nodes with at most this many items left try bin completion.
const BC_DIVE_ITEMS: usize = 80;
/// The large neighbourhood search on hybrid instances gets `1/REPACK_FIRST_PARTS` of
/// the time before the root LP and `1/REPACK_PARTS` of the remaining time per round of
/// the main loop.
const REPACK_FIRST_PARTS: u32 = 10;
const REPACK_PARTS: u32 = 8;
/// Hybrid instances: share (`1/RESTRICTED_PARTS` of the remaining time) of each round
/// of the main loop given to the restricted-master heuristic (`restricted.rs`).
const RESTRICTED_PARTS: u32 = 8;
/// On hybrid instances the root's column generation, once it has taken
/// `1/HYBRID_TAIL_PARTS` of the remaining time, stops as soon as LP value − bound ≤
/// `HYBRID_TAIL_GAP` × LP value (see [`ColGen::set_tail_gap`]); quick roots and the
/// dives, which fix columns by their LP values, converge to ⌈bound⌉ = ⌈LP value⌉.
const HYBRID_TAIL_GAP: f64 = 0.002;
const HYBRID_TAIL_PARTS: u32 = 10;
/// A reduced-cost enumeration search gets at most `1/RC_PARTS` of the remaining time.
const RC_PARTS: u32 = 3;
/// An unguided one (too many patterns for an LP at every node, see
/// [`RcSearch::guided`]) gets `1/RC_UNGUIDED_PARTS` in its first round and twice as
/// much in each later one, up to `1/RC_PARTS`: such searches rarely end, and the dives
/// close those instances sooner (Falkenauer u120_07, Scholl 1 N3C3W2_B: 3.4 → 0.3 s).
const RC_UNGUIDED_PARTS: u32 = 64;
/// LP value − bound to which the root is re-solved for the enumeration's duals.
const RC_ROOT_GAP: f64 = 1e-5;
/// Most patterns the reduced-cost enumeration keeps before it gives up.
const RC_MAX_PATTERNS: usize = 200_000;
/// Random item orders of the root LP's seed columns (see [`OneDim::fill_patterns`]).
const FILL_ROUNDS: u64 = 2;
/// Residual-rounding attempts per round of the main loop.
const ROUNDING_TRIES: u64 = 5;
/// A dive pass on a hybrid instance gets at most `1/DIVE_PARTS` of the remaining time.
const DIVE_PARTS: u32 = 4;
/// Branch and price gets `1/BNP_PARTS` of the remaining time per round of the main loop
/// on hybrid instances, whose gaps are mostly on the bound side ...
const BNP_PARTS: u32 = 2;
/// ... and `1/BNP_PARTS_1D` on classical bin packing, where most gaps are closed by the
/// primal search (IRUP instances) and dives run unbounded.
const BNP_PARTS_1D: u32 = 5;

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
    one: Option<OneDim>,
    /// Dual-feasible item values from the root LP (classical bin packing only).
    duals: Option<Vec<f64>>,
    /// The current dive pass fixes whole integer parts first (see [`moves`]).
    whole_first: bool,
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
        one: one_dim(p),
        duals: None,
        whole_first: false,
    };
    if let Some(g) = best_greedy(p, &demand, &avail) {
        s.offer_partial(&g, 0);
    }
    // On hybrid instances the greedy incumbent is improved locally first: the root LP
    // can take most of the time on large ones.
    if s.one.is_none() && s.lb < s.ub {
        s.try_repack(u64::MAX, REPACK_FIRST_PARTS);
    }
    s.cg.add_patterns(&s.best.clone());
    if s.one.is_none() {
        let from = s.slice(HYBRID_TAIL_PARTS);
        s.cg.set_tail_gap(HYBRID_TAIL_GAP, Some(from));
    }
    if let Some(one) = s.one.as_ref().filter(|_| s.lb < s.ub) {
        s.cg.add_patterns(&one.fill_patterns(s.ub / one.cost - 1));
    }
    if s.lb < s.ub {
        let root = s.cg.solve(
            &demand,
            &avail,
            None,
            f64::INFINITY,
            s.one.is_some(),
            deadline,
        );
        s.cg.set_tail_gap(0.0, None);
        s.lb = s.lb.max(ceil_bound(root.bound));
        let one = one_dim(p);
        if let Some(one) = &one {
            s.duals = Some(one.feasible_duals(&root.duals));
        }
        let seed: Vec<Pattern> = s.cg.patterns().iter().chain(&s.best).cloned().collect();
        let mut bnp = BranchPrice::new(p, root.bound, &seed);
        let mut disc = 0;
        let mut budget = BC_FIRST_NODES;
        let mut seed = 0;
        let mut rc = RcState::default();
        while s.lb < s.ub && Instant::now() < deadline {
            if let Some(one) = &one {
                for _ in 0..ROUNDING_TRIES {
                    if s.lb >= s.ub {
                        break;
                    }
                    s.try_residual_rounding(one, &root.columns, seed);
                    seed += 1;
                }
                if s.lb < s.ub {
                    s.try_bin_completion(one, seed, budget);
                    budget = budget.saturating_mul(2);
                }
                // The cheap heuristics above find most ⌈LP⌉ packings at once; the
                // enumeration search comes next.
                rc.step(&mut s, one, &demand, &avail);
            }
            if one.is_none() && s.lb < s.ub {
                s.try_restricted(&bnp, seed);
            }
            if s.lb >= s.ub {
                break;
            }
            if disc <= MAX_DISCREPANCY {
                let (mut d, mut a) = (demand.clone(), avail.clone());
                // A dive pass gets a bounded share of the time, so that branch and
                // price always runs too.
                if one.is_none() {
                    s.deadline = s.slice(DIVE_PARTS);
                }
                s.dive(&mut d, &mut a, 0, disc, None);
                s.deadline = deadline;
                // The waste proof (0.5–1.8 s on hard28, where it has proven nothing
                // since the cover search) waits for both dive styles of the first
                // pass: the second one often closes IRUP instances sooner.
                if disc == 0 && s.whole_first && s.lb < s.ub {
                    s.try_waste_proof();
                }
                // Each discrepancy budget runs twice: one copy at a time, then whole
                // integer parts first.
                s.whole_first = !s.whole_first;
                if !s.whole_first {
                    disc += 1;
                }
            }
            if one.is_none() && s.lb < s.ub {
                s.try_repack(seed, REPACK_PARTS);
                seed += 1;
            }
            if s.lb >= s.ub {
                break;
            }
            let until = s.slice(if one.is_some() {
                BNP_PARTS_1D
            } else {
                BNP_PARTS
            });
            s.branch_and_price(&mut bnp, until);
            if bnp.exhausted() && disc > MAX_DISCREPANCY && one.is_none() {
                break;
            }
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

/// The reduced-cost enumeration of classical bin packing across the passes of
/// [`solve`]: the duals and guide it got from a tighter re-solve of the root, and its
/// search for a packing into the current lower bound's bins.
struct RcState {
    /// Dual-feasible values of the tighter root (`None` until the first step).
    duals: Option<Vec<f64>>,
    /// The tighter root's columns, to guide the enumeration.
    guide: Vec<(Vec<(usize, u32)>, f64)>,
    /// The search and the bin count it is for.
    search: Option<(u64, RcSearch)>,
    /// Time parts of an unguided search's next slice (halved each time).
    parts: u32,
}

impl Default for RcState {
    fn default() -> Self {
        RcState {
            duals: None,
            guide: Vec::new(),
            search: None,
            parts: RC_UNGUIDED_PARTS,
        }
    }
}

impl RcState {
    /// One slice of the enumeration. It wants the LP's own gap K − LP: the first time,
    /// the root is re-solved (from its columns, on a separate pool so that the dives
    /// are unaffected) until LP value − bound ≤ 10⁻⁵, and its duals and columns are
    /// used. A packing found is offered; an exhausted search raises the bound by a bin
    /// and starts over for the next count.
    fn step(&mut self, s: &mut Search, one: &OneDim, demand: &[u32], avail: &[u32]) {
        if self.duals.is_none() && s.lb < s.ub {
            let mut cg = ColGen::new(s.p);
            cg.add_patterns(s.cg.patterns());
            cg.set_full_gap(RC_ROOT_GAP);
            let exact = cg.solve(demand, avail, None, f64::INFINITY, true, s.slice(4));
            let duals = one.feasible_duals(&exact.duals);
            self.guide = exact
                .columns
                .iter()
                .map(|(pat, x)| {
                    let items = pat.items.iter().map(|&(t, c)| (t as usize, c)).collect();
                    (items, *x)
                })
                .collect();
            self.search = s.rc_search(one, &duals, &self.guide);
            self.duals = Some(duals);
        }
        let Some((k, search)) = &mut self.search else {
            return;
        };
        if *k * one.cost != s.lb || s.lb >= s.ub {
            self.search = None;
            return;
        }
        let parts = if search.guided() {
            RC_PARTS
        } else {
            self.parts
        };
        self.parts = (self.parts / 2).max(RC_PARTS);
        let r = search.search(0, u64::MAX, s.slice(parts));
        if let Some(bins) = r.packing {
            let pats = one.patterns(bins);
            s.offer_partial(&pats, 0);
        } else if r.exhausted {
            s.lb = s.lb.max((*k + 1) * one.cost);
            self.search = self
                .duals
                .as_deref()
                .and_then(|d| s.rc_search(one, d, &self.guide));
        }
    }
}

/// A classical bin-packing view of a problem: one device model, throughput that can
/// never bind, every item fits.
struct OneDim {
    /// (size, count) per item type, indexed like the problem's types.
    items: Vec<(u64, u32)>,
    /// Device capacity.
    cap: u64,
    /// Device cost.
    cost: u64,
}

impl OneDim {
    /// `pi` scaled down by the best pattern's value, so that no pattern is worth more
    /// than one bin (dual feasible).
    fn feasible_duals(&self, pi: &[f64]) -> Vec<f64> {
        let kitems: Vec<KItem> = self
            .items
            .iter()
            .enumerate()
            .map(|(t, &(w, c))| KItem {
                t: t as u32,
                w1: w,
                w2: 0,
                v: pi[t].max(0.0),
                copies: c,
            })
            .collect();
        let best = Pricer::default().solve(&kitems, self.cap, 0).upper.max(1.0);
        pi.iter().map(|v| v.max(0.0) / best).collect()
    }

    /// Well-filled bins ([`bin_completion::fill_patterns`]) that a packing into `k` bins
    /// could use, as seed columns of the root LP: without them its column generation
    /// tails off on Scholl 2's N4W1B3 instances (≈ 450 pricing rounds, 3–7 s).
    fn fill_patterns(&self, k: u64) -> Vec<Pattern> {
        let total: u128 = self
            .items
            .iter()
            .map(|&(w, c)| u128::from(w) * u128::from(c))
            .sum();
        let Some(waste) = (u128::from(k) * u128::from(self.cap)).checked_sub(total) else {
            return Vec::new();
        };
        let waste = waste.min(u128::from(u64::MAX)) as u64;
        self.patterns(bin_completion::fill_patterns(
            &self.items,
            self.cap,
            waste,
            FILL_ROUNDS,
        ))
    }

    /// Bins of (type, count) as patterns of the one model.
    fn patterns(&self, bins: Vec<Vec<(usize, u32)>>) -> Vec<Pattern> {
        bins.into_iter()
            .map(|bin| {
                let mut items: Vec<(u32, u32)> =
                    bin.into_iter().map(|(t, c)| (t as u32, c)).collect();
                items.sort_unstable();
                Pattern { model: 0, items }
            })
            .collect()
    }
}

fn one_dim(p: &Problem) -> Option<OneDim> {
    let [m] = p.models.as_slice() else {
        return None;
    };
    let thr: u128 = p
        .types
        .iter()
        .map(|t| u128::from(t.thr) * t.members.len() as u128)
        .sum();
    if m.cost == 0
        || thr > u128::from(m.thr_cap)
        || (0..p.types.len()).any(|t| !p.compat(t, 0) || p.size(t, 0) > m.cap)
    {
        return None;
    }
    Some(OneDim {
        items: (0..p.types.len())
            .map(|t| (p.size(t, 0), p.types[t].members.len() as u32))
            .collect(),
        cap: m.cap,
        cost: m.cost,
    })
}

/// Rounds a floating lower bound on an integer cost up, with a tolerance.
fn ceil_bound(b: f64) -> u64 {
    (b - 1e-6).ceil().max(0.0) as u64
}

/// One dive move: copies of patterns to fix.
type Move = Vec<(Pattern, u32)>;

impl Search<'_> {
    /// For classical bin packing: raises the bound to the incumbent if no packing with
    /// one device fewer exists.
    fn try_waste_proof(&mut self) {
        let Some(one) = one_dim(self.p) else {
            return;
        };
        let k = self.ub / one.cost - 1;
        if self.lb <= k * one.cost && waste::no_packing_in(&one.items, one.cap, k, self.deadline) {
            self.lb = self.ub;
        }
    }

    /// For classical bin packing: the reduced-cost pattern enumeration for a packing
    /// into ⌈lb⌉ bins with dual-feasible `duals`, guided by LP columns; `None` when
    /// there are too many patterns or nothing to search (a packing or a proof is then
    /// taken here).
    fn rc_search(
        &mut self,
        one: &OneDim,
        duals: &[f64],
        guide: &[(Vec<(usize, u32)>, f64)],
    ) -> Option<(u64, RcSearch)> {
        let k = self.lb.div_ceil(one.cost);
        if k * one.cost >= self.ub || !self.fixed.is_empty() {
            return None;
        }
        let deadline = self.slice(4);
        match RcSearch::new(&one.items, one.cap, k, duals, RC_MAX_PATTERNS, deadline) {
            Ok(mut search) => {
                search.prefer(guide);
                Some((k, search))
            }
            Err(r) => {
                if let Some(bins) = r.packing {
                    let pats = one.patterns(bins);
                    self.offer_partial(&pats, 0);
                } else if r.exhausted {
                    self.lb = self.lb.max((k + 1) * one.cost);
                }
                None
            }
        }
    }

    /// For classical bin packing: bin completion into ⌈lb⌉ bins; a packing found
    /// closes the gap from above, a finished search raises the bound by one bin.
    fn try_bin_completion(&mut self, one: &OneDim, seed: u64, nodes: u64) {
        let k = self.lb.div_ceil(one.cost);
        if k * one.cost >= self.ub {
            return;
        }
        let r = bin_completion::pack_into(
            &one.items,
            one.cap,
            k,
            self.duals.as_deref(),
            seed,
            nodes,
            self.slice(8),
        );
        if let Some(bins) = r.packing {
            let pats = one.patterns(bins);
            let mark = std::mem::take(&mut self.fixed);
            self.offer_partial(&pats, 0);
            self.fixed = mark;
        } else if r.exhausted {
            self.lb = self.lb.max((k + 1) * one.cost);
        }
    }

    /// For classical bin packing, randomised residual rounding: fixes every root LP
    /// column at its integer part and once more with a probability of its fractional
    /// part (scaled down as `seed` grows), then packs the rest of the items by bin
    /// completion into the bins that ⌈lb⌉ leaves.
    fn try_residual_rounding(&mut self, one: &OneDim, cols: &[(Pattern, f64)], seed: u64) {
        let target = self.lb.div_ceil(one.cost);
        if target * one.cost >= self.ub {
            return;
        }
        let keep = 1.0 - 0.05 * (seed % 10) as f64;
        let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut demand: Vec<u32> = one.items.iter().map(|&(_, c)| c).collect();
        let mut fixed: Vec<Pattern> = Vec::new();
        for (pat, x) in cols {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let whole = (x + 1e-6).floor();
            let extra = ((rng % 1_000_000) as f64) < (x - whole) * keep * 1e6;
            let copies = whole as u32 + u32::from(extra);
            for copy in 0..copies {
                let fits = pat.items.iter().all(|&(t, c)| c <= demand[t as usize]);
                if !fits && copy >= whole as u32 {
                    break;
                }
                let items = pat.clipped(&demand);
                if items.is_empty() {
                    break;
                }
                for &(t, c) in &items {
                    demand[t as usize] -= c;
                }
                fixed.push(Pattern { model: 0, items });
            }
        }
        let Some(k) = target.checked_sub(fixed.len() as u64) else {
            return;
        };
        let items: Vec<(u64, u32)> = one
            .items
            .iter()
            .zip(&demand)
            .map(|(&(w, _), &d)| (w, d))
            .collect();
        let r = bin_completion::pack_into(
            &items,
            one.cap,
            k,
            self.duals.as_deref(),
            seed,
            BC_DIVE_NODES,
            self.slice(50),
        );
        if let Some(bins) = r.packing {
            fixed.extend(one.patterns(bins));
            let mark = std::mem::take(&mut self.fixed);
            self.offer_partial(&fixed, 0);
            self.fixed = mark;
        }
    }

    /// On hybrid instances: large neighbourhood search from the incumbent for
    /// `1/parts` of the remaining time.
    fn try_repack(&mut self, seed: u64, parts: u32) {
        if self.best.is_empty() {
            return;
        }
        let until = self.slice(parts);
        if let Some(pats) = repack::improve(self.p, &self.best, seed, until) {
            let mark = std::mem::take(&mut self.fixed);
            self.offer_partial(&pats, 0);
            self.fixed = mark;
        }
    }

    /// Searches the columns generated so far (root and dives, branch and price) for a
    /// cheaper placement with the restricted-master heuristic, for
    /// `1/RESTRICTED_PARTS` of the remaining time; improves what it finds locally.
    fn try_restricted(&mut self, bnp: &BranchPrice, seed: u64) {
        let mut cols: Vec<Pattern> = self.cg.patterns().to_vec();
        let mut seen: HashSet<Pattern> = cols.iter().cloned().collect();
        for pat in bnp.patterns().into_iter().chain(self.best.iter().cloned()) {
            if seen.insert(pat.clone()) {
                cols.push(pat);
            }
        }
        let until = self.slice(RESTRICTED_PARTS);
        if let Some(pats) = restricted::search(self.p, &cols, self.ub, until) {
            let mark = std::mem::take(&mut self.fixed);
            self.offer_partial(&pats, 0);
            self.fixed = mark;
            self.try_repack(seed, REPACK_PARTS);
        }
    }

    /// Runs branch and price until `until`; takes the cheaper placements it finds and
    /// the bound it proves. On hybrid instances each placement it finds is improved by
    /// the large neighbourhood search at once: its plunges end in placements a few
    /// local moves from cheaper ones.
    fn branch_and_price(&mut self, bnp: &mut BranchPrice, until: Instant) {
        while let Some((_, pats)) = bnp.run(self.ub, until) {
            let mark = std::mem::take(&mut self.fixed);
            self.offer_partial(&pats, 0);
            self.fixed = mark;
            self.lb = self.lb.max(bnp.bound(self.ub));
            if self.one.is_none() && self.lb < self.ub {
                self.try_repack(bnp.nodes, REPACK_PARTS);
            }
            if self.lb >= self.ub {
                break;
            }
        }
        self.lb = self.lb.max(bnp.bound(self.ub));
    }

    /// A deadline `1/parts` of the remaining time away, for one heuristic call.
    fn slice(&self, parts: u32) -> Instant {
        let now = Instant::now();
        now + self.deadline.saturating_duration_since(now) / parts
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
        let out = self
            .cg
            .solve(demand, avail, hint, room, false, self.deadline);
        if out.infeasible || fixed_cost + ceil_bound(out.bound) >= self.ub {
            return;
        }
        let left: usize = demand.iter().map(|&d| d as usize).sum();
        if let Some(one) = self.one.as_ref().filter(|_| left <= BC_DIVE_ITEMS) {
            let k = ceil_bound(out.bound).div_ceil(one.cost);
            if fixed_cost + k * one.cost < self.ub {
                let items: Vec<(u64, u32)> = one
                    .items
                    .iter()
                    .zip(demand.iter())
                    .map(|(&(w, _), &d)| (w, d))
                    .collect();
                let seed = self.fixed.len() as u64;
                let r = bin_completion::pack_into(
                    &items,
                    one.cap,
                    k,
                    self.duals.as_deref(),
                    seed,
                    BC_DIVE_NODES,
                    self.slice(100),
                );
                if let Some(bins) = r.packing {
                    let pats = one.patterns(bins);
                    self.offer_partial(&pats, fixed_cost);
                    return;
                }
            }
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
        let moves = moves(self.p, out.columns, self.whole_first);
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
                    let items = pat.clipped(demand);
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
/// device), then every column at its integer part — or, with `whole_first` (residual
/// rounding), the integer parts first; the alternatives fix one other fractional
/// column once, largest value first.
fn moves(p: &Problem, mut cols: Vec<(Pattern, f64)>, whole_first: bool) -> Vec<Move> {
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
    let whole_first = whole_first && !whole.is_empty();
    if whole_first {
        out.push(whole);
    } else if let Some((pat, _)) = cols.first() {
        out.push(vec![(pat.clone(), 1)]);
        if whole.len() > 1 {
            out.push(whole);
        }
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
