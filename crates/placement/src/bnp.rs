//! Branch and price over individual VNF instances: the column-generation LP bound at
//! the root is often not enough (hard28 instances whose optimum is ⌈LP⌉ + 1, hybrid
//! instances with a few expensive devices), so nodes branch and re-price.
//!
//! The master is an exact cover of the node's *groups* of instances by device contents
//! (one row per group, equality) with one row per device model capping its count.
//! Branching (Ryan–Foster, generalised to several models):
//! - a pair of groups fractionally together: *together* merges them into one group,
//!   *apart* forbids them in the same device (a conflict in the pricing knapsack);
//! - when every pair is integral but a group's model is fractional: *only* that model
//!   or *not* that model.
//!
//! Pricing is a knapsack with conflicts and two capacities, solved exactly by depth-first
//! branch and bound with a surrogate Dantzig bound (a node budget turns it into a valid
//! upper bound). Nodes are processed best bound first in time slices, so the search can
//! be interleaved with the other heuristics and the smallest open bound is always a
//! proven lower bound.

use crate::complete;
use crate::count_refute::{candidates, Refuter, Verdict};
use crate::greedy::best_greedy;
use crate::problem::{Pattern, Problem};
use crate::simplex::{LpStatus, Master};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::rc::Rc;
use std::time::Instant;

/// Node budget of one pricing knapsack.
const PRICE_NODES: u64 = 200_000;
/// Node budget of the first, cheaper attempt of a pricing knapsack.
const PRICE_FIRST_NODES: u64 = 5_000;
/// Improving patterns kept per pricing call.
const PRICE_COLUMNS: usize = 8;
/// Newest pool columns added to the starting columns of a non-root node.
const RECENT_COLUMNS: usize = 300;
/// Best-first nodes between two plunges on hybrid instances ...
const PLUNGE_EVERY: u64 = 4;
/// ... and on one-model problems.
const PLUNGE_EVERY_1D: u64 = 8;
/// A plunge goes on only while its node's bound is at most the best open bound plus
/// this share of the gap to the incumbent: a plunge into a subtree whose bound is
/// near the incumbent can only find placements about as costly (hybrid n120 seed 5:
/// 60-node plunges under a bound of 840 with 820 open).
const PLUNGE_GAP_SHARE: f64 = 0.25;
/// On hybrid instances a rounding whose residual has at most this many instances,
/// and at most a quarter of all, completes it with the complete search
/// (`complete.rs`) for at most [`COMPLETE_TIME`] instead of greedily (on small
/// instances every rest is small, and searching each one slows the proofs).
const COMPLETE_ITEMS: usize = 30;
const COMPLETE_TIME: std::time::Duration = std::time::Duration::from_millis(10);
/// Count vectors enumerated for the refutation (more: the node keeps its bound) ...
const REFUTE_CANDIDATES: usize = 2_000;
/// ... new probing runs per node, and the time of one.
const REFUTE_PER_NODE: u32 = 1;
const REFUTE_TIME: std::time::Duration = std::time::Duration::from_millis(100);
/// Values closer than this to an integer count as integral.
const EPS: f64 = 1e-6;
/// Subset-row cuts added per separation round, in all, and separation rounds at the
/// root.
const CUTS_PER_ROUND: usize = 40;
const MAX_CUTS: usize = 120;
const MAX_CUT_ROUNDS: u32 = 8;
/// Least violation of a separated subset-row cut.
const CUT_VIOLATION: f64 = 0.01;
/// Least rise of the root LP value for the cuts to stay in the tree.
const CUT_GAIN: f64 = 1e-4;

/// A branching decision on instances (indexes into the expanded item list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// The two instances share a device.
    Together(u32, u32),
    /// The two instances are on different devices.
    Apart(u32, u32),
    /// The instance is on a device of this model.
    Only(u32, u32),
    /// The instance is not on a device of this model.
    Ban(u32, u32),
    /// At most this many devices of the model are used.
    AtMost(u32, u32),
    /// At least this many devices of the model are used.
    AtLeast(u32, u32),
}

/// An open node: its decisions and the best bound known for it (from its parent).
#[derive(Debug, Clone)]
struct Node {
    bound: f64,
    /// Creation order: among equal bounds and depths the newest goes first.
    seq: u64,
    decisions: Vec<Decision>,
    /// The parent's LP columns with a positive value: with the newest pool columns,
    /// the starting columns of this node (the root starts from the whole pool).
    hint: Option<Rc<Vec<Col>>>,
}

impl PartialEq for Node {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Node {}
impl PartialOrd for Node {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Node {
    /// Max-heap order: the smallest bound first, then the deepest node.
    fn cmp(&self, o: &Self) -> Ordering {
        o.bound
            .total_cmp(&self.bound)
            .then(self.decisions.len().cmp(&o.decisions.len()))
            .then(self.seq.cmp(&o.seq))
    }
}

/// A device content over instances: model and sorted instance indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Col {
    model: u32,
    items: Vec<u32>,
}

/// The node's groups of instances and what each group may do.
struct Groups {
    /// Instances of each group.
    members: Vec<Vec<u32>>,
    /// Group of each instance.
    of: Vec<u32>,
    /// Row-major `n × n` conflict matrix between groups.
    conflict: Vec<bool>,
    /// Row-major `n × models`: the group fits a device of the model on its own and no
    /// decision forbids it.
    allowed: Vec<bool>,
    /// Resource need of each group on each model (`n × models`).
    size: Vec<u64>,
    /// Throughput of each group.
    thr: Vec<u64>,
}

impl Groups {
    /// The instances of groups `gs`, sorted: the items of a column.
    fn items_of(&self, gs: &[u32]) -> Vec<u32> {
        let mut v: Vec<u32> = gs
            .iter()
            .flat_map(|&x| self.members[x as usize].iter().copied())
            .collect();
        v.sort_unstable();
        v
    }
}

/// What processing one node found.
enum NodeOutcome {
    /// The time slice ended first; the node is still open.
    Interrupted,
    /// Cuts were added at the root: process it again, with this bound.
    Again(f64),
    /// Pruned (infeasible, bound ≥ incumbent, or solved).
    Closed,
    /// Two children with this bound.
    Branch(f64, Decision, Decision),
    /// Neither solved nor branchable (inexact pricing with nothing left to branch on):
    /// dropped, but its bound caps the proven bound.
    Stuck(f64),
}

/// Branch-and-price state, kept between time slices.
pub struct BranchPrice<'a> {
    p: &'a Problem,
    /// Type of each expanded instance.
    item_type: Vec<u32>,
    pool: Vec<Col>,
    seen: HashSet<Col>,
    open: BinaryHeap<Node>,
    seq: u64,
    /// Smallest bound of a node that had to be dropped undecided.
    stuck: Option<f64>,
    /// Positive LP columns of the node processed last (the children's hint).
    last_columns: Vec<Col>,
    /// The plunge under way when the last time slice ended: the next slice goes on
    /// with it, so that a plunge (often 50–70 nodes deep on hybrid n120 instances,
    /// placements are found at its leaves) is not lost at every slice end.
    plunge: Option<Node>,
    /// Nodes processed so far.
    pub nodes: u64,
    /// Best placement found by this search and its cost.
    found: Option<(u64, Vec<Pattern>)>,
    /// Subset-row cuts (three instances, at most one device may hold two of them),
    /// separated at the root on one-model problems and kept in every node, unless
    /// they left the root LP value unchanged (then only the root uses them).
    cuts: Vec<[u32; 3]>,
    /// The cuts each instance is in.
    item_cuts: Vec<Vec<u32>>,
    /// Separation rounds done at the root.
    cut_rounds: u32,
    /// Device-count vectors refuted so far (valid in every node).
    refuter: Refuter,
    /// Root LP value before the first cut.
    uncut_value: Option<f64>,
    /// Separation at the root has ended (no violated triple or the round limit).
    cuts_settled: bool,
    /// The cuts did not raise the root LP: the next node clears them.
    drop_cuts: bool,
}

impl<'a> BranchPrice<'a> {
    /// A search for `p` whose root starts with bound `lb` and the columns of `seed`
    /// (e.g. the root LP's and the incumbent's patterns).
    pub fn new(p: &'a Problem, lb: f64, seed: &[Pattern]) -> BranchPrice<'a> {
        let item_type: Vec<u32> = p
            .types
            .iter()
            .enumerate()
            .flat_map(|(t, ty)| std::iter::repeat_n(t as u32, ty.members.len()))
            .collect();
        let mut s = BranchPrice {
            p,
            item_type,
            pool: Vec::new(),
            seen: HashSet::new(),
            open: BinaryHeap::new(),
            seq: 0,
            stuck: None,
            last_columns: Vec::new(),
            plunge: None,
            nodes: 0,
            found: None,
            cuts: Vec::new(),
            item_cuts: Vec::new(),
            cut_rounds: 0,
            refuter: Refuter::default(),
            uncut_value: None,
            cuts_settled: false,
            drop_cuts: false,
        };
        s.item_cuts = vec![Vec::new(); s.item_type.len()];
        let first: Vec<u32> = {
            let mut acc = 0u32;
            p.types
                .iter()
                .map(|ty| {
                    let f = acc;
                    acc += ty.members.len() as u32;
                    f
                })
                .collect()
        };
        for pat in seed {
            let mut items = Vec::new();
            for &(t, c) in &pat.items {
                let t = t as usize;
                let c = c.min(p.types[t].members.len() as u32);
                items.extend(first[t]..first[t] + c);
            }
            s.add_col(Col {
                model: pat.model as u32,
                items,
            });
        }
        s.open.push(Node {
            bound: lb,
            seq: 0,
            decisions: Vec::new(),
            hint: None,
        });
        s
    }

    fn add_col(&mut self, c: Col) {
        if !c.items.is_empty() && self.seen.insert(c.clone()) {
            self.pool.push(c);
        }
    }

    /// The columns generated so far as device contents by item type (duplicates
    /// merged), for the restricted-master heuristic of `restricted.rs`.
    pub fn patterns(&self) -> Vec<Pattern> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for c in &self.pool {
            let mut items: Vec<(u32, u32)> = Vec::new();
            for &i in &c.items {
                let t = self.item_type[i as usize];
                match items.iter_mut().find(|e| e.0 == t) {
                    Some(e) => e.1 += 1,
                    None => items.push((t, 1)),
                }
            }
            items.sort_unstable();
            let pat = Pattern {
                model: c.model as usize,
                items,
            };
            if seen.insert(pat.clone()) {
                out.push(pat);
            }
        }
        out
    }

    /// Whether every node has been closed: the best placement found (or the incumbent
    /// passed to [`BranchPrice::run`]) is optimal, or none exists.
    pub fn finished(&self) -> bool {
        self.exhausted() && self.stuck.is_none()
    }

    /// Whether no node is left to process (finished, or stopped on an undecidable one).
    pub fn exhausted(&self) -> bool {
        self.open.is_empty() && self.plunge.is_none()
    }

    /// A proven lower bound given incumbent cost `ub`: the smallest open bound.
    pub fn bound(&self, ub: u64) -> u64 {
        let open = self.open.peek().map_or(ub, |n| ceil_bound(n.bound));
        let plunge = self.plunge.as_ref().map_or(ub, |n| ceil_bound(n.bound));
        let stuck = self.stuck.map_or(ub, ceil_bound);
        open.min(plunge).min(stuck).min(ub)
    }

    /// Processes nodes until `until`, until every node is closed or until it finds a
    /// cheaper placement, pruning against incumbent cost `ub`. Returns a cheaper
    /// placement if one was found.
    pub fn run(&mut self, mut ub: u64, until: Instant) -> Option<(u64, Vec<Pattern>)> {
        let start_found = self.found.as_ref().map(|f| f.0);
        if let Some((c, _)) = &self.found {
            ub = ub.min(*c);
        }
        let mut plunge: Option<Node> = self.plunge.take();
        loop {
            let plunging = plunge.is_some();
            let Some(node) = plunge.take().or_else(|| self.open.pop()) else {
                break;
            };
            if ceil_bound(node.bound) >= ub {
                if plunging {
                    continue;
                }
                // Every other open node has a bound at least as large.
                self.open.clear();
                break;
            }
            if Instant::now() >= until {
                self.keep(node, plunging);
                break;
            }
            self.nodes += 1;
            match self.process(&node, &mut ub, until, plunging) {
                NodeOutcome::Interrupted => {
                    self.keep(node, plunging);
                    break;
                }
                NodeOutcome::Closed => {}
                NodeOutcome::Again(b) => {
                    self.open.push(Node {
                        bound: b.max(node.bound),
                        ..node
                    });
                }
                NodeOutcome::Stuck(b) => {
                    self.stuck = Some(self.stuck.map_or(b, |s| s.min(b)));
                }
                NodeOutcome::Branch(b, d1, d2) => {
                    let hint = Some(Rc::new(std::mem::take(&mut self.last_columns)));
                    // A plunge (every PLUNGE_EVERY nodes, then down to a leaf) takes
                    // the first child at once: depth first finds placements sooner.
                    let every = if self.p.models.len() > 1 {
                        PLUNGE_EVERY
                    } else {
                        PLUNGE_EVERY_1D
                    };
                    let best = self.open.peek().map_or(b, |n| n.bound).min(b);
                    let near = b <= best + PLUNGE_GAP_SHARE * (ub as f64 - best);
                    let dive = near && (plunging || self.nodes.is_multiple_of(every));
                    for d in [d2, d1] {
                        let mut decisions = node.decisions.clone();
                        decisions.push(d);
                        self.seq += 1;
                        let child = Node {
                            bound: b.max(node.bound),
                            seq: self.seq,
                            decisions,
                            hint: hint.clone(),
                        };
                        if dive && d == d1 {
                            plunge = Some(child);
                        } else {
                            self.open.push(child);
                        }
                    }
                }
            }
            // A cheaper placement is returned at once, so that the caller can
            // improve it locally; the plunge goes on in the next call.
            if self.found.as_ref().map(|f| f.0) != start_found {
                self.plunge = plunge.take();
                break;
            }
        }
        match (&self.found, start_found) {
            (Some((c, pats)), s) if s != Some(*c) => Some((*c, pats.clone())),
            _ => None,
        }
    }

    /// Keeps a node that a slice end left unprocessed: as the plunge to resume, or
    /// open.
    fn keep(&mut self, node: Node, plunging: bool) {
        if plunging {
            self.plunge = Some(node);
        } else {
            self.open.push(node);
        }
    }

    fn record(&mut self, ub: &mut u64, pats: Vec<Pattern>) {
        let c = self.p.cost(&pats);
        if c < *ub {
            *ub = c;
            self.found = Some((c, pats));
        }
    }

    /// Builds the node's groups from its decisions; `None` if they contradict.
    fn groups(&self, decisions: &[Decision]) -> Option<Groups> {
        let p = self.p;
        let n = self.item_type.len();
        let nm = p.models.len();
        let mut parent: Vec<u32> = (0..n as u32).collect();
        fn find(parent: &mut [u32], mut x: u32) -> u32 {
            while parent[x as usize] != x {
                parent[x as usize] = parent[parent[x as usize] as usize];
                x = parent[x as usize];
            }
            x
        }
        for d in decisions {
            if let Decision::Together(a, b) = *d {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                parent[ra.max(rb) as usize] = ra.min(rb);
            }
        }
        let mut of = vec![u32::MAX; n];
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut gid = vec![u32::MAX; n];
        for i in 0..n as u32 {
            let r = find(&mut parent, i) as usize;
            if gid[r] == u32::MAX {
                gid[r] = members.len() as u32;
                members.push(Vec::new());
            }
            of[i as usize] = gid[r];
            members[gid[r] as usize].push(i);
        }
        let ng = members.len();
        let mut conflict = vec![false; ng * ng];
        let mut allowed = vec![true; ng * nm];
        for d in decisions {
            match *d {
                Decision::Apart(a, b) => {
                    let (ga, gb) = (of[a as usize] as usize, of[b as usize] as usize);
                    if ga == gb {
                        return None;
                    }
                    conflict[ga * ng + gb] = true;
                    conflict[gb * ng + ga] = true;
                }
                Decision::Only(a, k) => {
                    let g = of[a as usize] as usize;
                    for kk in (0..nm).filter(|&kk| kk != k as usize) {
                        allowed[g * nm + kk] = false;
                    }
                }
                Decision::Ban(a, k) => allowed[of[a as usize] as usize * nm + k as usize] = false,
                Decision::Together(..) | Decision::AtMost(..) | Decision::AtLeast(..) => {}
            }
        }
        let mut size = vec![0u64; ng * nm];
        let mut thr = vec![0u64; ng];
        for (g, mem) in members.iter().enumerate() {
            for &i in mem {
                let t = self.item_type[i as usize] as usize;
                thr[g] = thr[g].saturating_add(p.types[t].thr);
                for k in 0..nm {
                    size[g * nm + k] = size[g * nm + k].saturating_add(p.size(t, k));
                    if !p.compat(t, k) {
                        allowed[g * nm + k] = false;
                    }
                }
            }
            for k in 0..nm {
                let m = &p.models[k];
                if size[g * nm + k] > m.cap || thr[g] > m.thr_cap || m.devices.is_empty() {
                    allowed[g * nm + k] = false;
                }
            }
            if !(0..nm).any(|k| allowed[g * nm + k]) {
                return None;
            }
        }
        Some(Groups {
            members,
            of,
            conflict,
            allowed,
            size,
            thr,
        })
    }

    /// The column over groups that `c` is at this node, if it respects the decisions.
    fn node_col(&self, g: &Groups, c: &Col) -> Option<Vec<u32>> {
        let nm = self.p.models.len();
        let ng = g.members.len();
        let mut gs: Vec<u32> = c.items.iter().map(|&i| g.of[i as usize]).collect();
        gs.sort_unstable();
        let mut out = Vec::new();
        let mut i = 0;
        while i < gs.len() {
            let grp = gs[i];
            let mut j = i;
            while j < gs.len() && gs[j] == grp {
                j += 1;
            }
            if j - i != g.members[grp as usize].len()
                || !g.allowed[grp as usize * nm + c.model as usize]
            {
                return None;
            }
            out.push(grp);
            i = j;
        }
        for (a, &x) in out.iter().enumerate() {
            if out[a + 1..]
                .iter()
                .any(|&y| g.conflict[x as usize * ng + y as usize])
            {
                return None;
            }
        }
        Some(out)
    }

    /// Adds the most violated subset-row cuts Σ ⌊|p ∩ T| / 2⌋ x_p ≤ 1 over triples T
    /// of instances that share positive columns of the LP solution `xs`; returns
    /// whether any was added.
    fn separate(&mut self, g: &Groups, cols: &[(u32, Vec<u32>)], xs: &[f64]) -> bool {
        let room = MAX_CUTS.saturating_sub(self.cuts.len()).min(CUTS_PER_ROUND);
        if room == 0 {
            return false;
        }
        let pos: Vec<(f64, Vec<u32>)> = xs
            .iter()
            .zip(cols)
            .filter(|(&x, _)| x > EPS)
            .map(|(&x, (_, gs))| {
                let mut items: Vec<u32> = gs
                    .iter()
                    .flat_map(|&x| g.members[x as usize].iter().copied())
                    .collect();
                items.sort_unstable();
                (x, items)
            })
            .collect();
        let mut of_item: Vec<Vec<u32>> = vec![Vec::new(); self.item_type.len()];
        for (ci, (_, items)) in pos.iter().enumerate() {
            for &i in items {
                of_item[i as usize].push(ci as u32);
            }
        }
        let mut cand: HashSet<[u32; 3]> = HashSet::new();
        for (_, items) in &pos {
            for (ai, &a) in items.iter().enumerate() {
                for &b in &items[ai + 1..] {
                    for &cj in of_item[a as usize].iter().chain(&of_item[b as usize]) {
                        for &c in &pos[cj as usize].1 {
                            if c != a && c != b {
                                let mut t = [a, b, c];
                                t.sort_unstable();
                                cand.insert(t);
                            }
                        }
                    }
                }
            }
        }
        let known: HashSet<[u32; 3]> = self.cuts.iter().copied().collect();
        let mut violated: Vec<(f64, [u32; 3])> = Vec::new();
        let mut seen: Vec<u32> = Vec::new();
        for t in cand {
            if known.contains(&t) {
                continue;
            }
            seen.clear();
            let mut lhs = 0.0;
            for &i in &t {
                for &cj in &of_item[i as usize] {
                    if seen.contains(&cj) {
                        continue;
                    }
                    seen.push(cj);
                    let (x, items) = &pos[cj as usize];
                    let inside = t.iter().filter(|z| items.binary_search(z).is_ok()).count();
                    if inside >= 2 {
                        lhs += x;
                    }
                }
            }
            if lhs > 1.0 + CUT_VIOLATION {
                violated.push((lhs, t));
            }
        }
        violated.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let added = violated.len().min(room);
        for (_, t) in violated.into_iter().take(added) {
            let id = self.cuts.len() as u32;
            self.cuts.push(t);
            for &i in &t {
                self.item_cuts[i as usize].push(id);
            }
        }
        added > 0
    }

    /// The least cost of a device-count vector that the node's duals allow (see
    /// [`count_bound`]) and that [`Refuter`] cannot refute, at least `from`; `ub` if
    /// every vector cheaper than `ub` is refuted. Stops at `from`-or-above on the
    /// first vector it cannot decide within [`REFUTE_PER_NODE`] new probing runs.
    #[allow(clippy::too_many_arguments)]
    fn refuted_bound(
        &mut self,
        upper: &[f64],
        lo: &[u32],
        hi: &[u32],
        dual_sum: f64,
        from: u64,
        ub: u64,
        until: Instant,
    ) -> u64 {
        let costs: Vec<u64> = self.p.models.iter().map(|m| m.cost).collect();
        let need = dual_sum - 1e-7 * dual_sum.abs().max(1.0);
        let Some(cands) = candidates(&costs, upper, lo, hi, need, ub, REFUTE_CANDIDATES) else {
            return from;
        };
        let mut runs_left = REFUTE_PER_NODE;
        for (c, z) in cands.into_iter().filter(|(c, _)| *c >= from) {
            let verdict = match self.refuter.known(&z) {
                Some(v) => v,
                None if runs_left > 0 => {
                    runs_left -= 1;
                    let deadline = (Instant::now() + REFUTE_TIME).min(until);
                    self.refuter.check(self.p, &z, deadline)
                }
                None => Verdict::Unknown,
            };
            if verdict != Verdict::Refuted {
                return c;
            }
        }
        ub
    }

    /// Column generation at one node, then pruning or a branching decision.
    fn process(
        &mut self,
        node: &Node,
        ub: &mut u64,
        until: Instant,
        plunging: bool,
    ) -> NodeOutcome {
        if std::mem::take(&mut self.drop_cuts) {
            self.cuts.clear();
            self.item_cuts.iter_mut().for_each(Vec::clear);
        }
        let nm = self.p.models.len();
        let Some(g) = self.groups(&node.decisions) else {
            return NodeOutcome::Closed;
        };
        let Some((lo, hi)) = self.count_limits(&node.decisions) else {
            return NodeOutcome::Closed;
        };
        let models: Vec<usize> = (0..nm).filter(|&k| hi[k] > 0).collect();
        if (0..g.members.len()).any(|x| !models.iter().any(|&k| g.allowed[x * nm + k])) {
            return NodeOutcome::Closed;
        }
        let mut m = self.node_master(node, &g, &models, &lo, &hi);
        let priced = match self.generate(&mut m, &g, &models, (&lo, &hi), node.bound, *ub, until) {
            Ok(priced) => priced,
            Err(outcome) => return outcome,
        };
        let (mut bound, converged) = (priced.bound, priced.converged);
        if converged && m.lp.artificial() > 1e-3 {
            return NodeOutcome::Closed;
        }
        if let Some((uppers, dy)) = priced.last_duals.filter(|_| ceil_bound(bound) < *ub) {
            let lifted = self.refuted_bound(&uppers, &lo, &hi, dy, ceil_bound(bound), *ub, until);
            bound = bound.max(lifted as f64);
        }
        if ceil_bound(bound) >= *ub {
            return NodeOutcome::Closed;
        }
        let xs: Vec<f64> = (0..m.cols.len()).map(|i| m.lp.value(m.first + i)).collect();
        if nm == 1 && node.decisions.is_empty() && !self.cuts_settled && m.lp.artificial() < EPS {
            let value = m.lp.objective();
            let uncut = *self.uncut_value.get_or_insert(value);
            if self.cut_rounds < MAX_CUT_ROUNDS {
                self.cut_rounds += 1;
                if self.separate(&g, &m.cols, &xs) {
                    return NodeOutcome::Again(bound);
                }
            }
            self.cuts_settled = true;
            // Cuts that left the root LP where it was only slow the tree down (hard28
            // BPP175: 34 nodes with them, 10–11 without, ≈ 0.2 s each); the root still
            // rounds and branches on the LP solution they gave, its children go
            // without them.
            self.drop_cuts = value < uncut + CUT_GAIN;
        }
        self.last_columns = xs
            .iter()
            .zip(&m.cols)
            .filter(|(&x, _)| x > EPS)
            .map(|(_, (k, gs))| Col {
                model: *k,
                items: g.items_of(gs),
            })
            .collect();
        if self.primal(&g, &m.cols, &xs, ub, until) && converged {
            return NodeOutcome::Closed;
        }
        if ceil_bound(bound) >= *ub {
            return NodeOutcome::Closed;
        }
        if let Some((a, b)) = self.branch_on(&g, &m.cols, &xs, plunging) {
            return NodeOutcome::Branch(bound, a, b);
        }
        // Integral in every pair and model: the LP solution is one placement. If the
        // pricing was exact it is the node's optimum; otherwise branch on any pair of
        // groups that could still share a device, so that the search progresses.
        if converged {
            return NodeOutcome::Closed;
        }
        match any_pair(&g, &models, nm) {
            Some((a, b)) => NodeOutcome::Branch(bound, a, b),
            None => NodeOutcome::Stuck(bound),
        }
    }

    /// The node's device-count limits per model (at least, at most) from its decisions;
    /// `None` when they contradict.
    fn count_limits(&self, decisions: &[Decision]) -> Option<(Vec<u32>, Vec<u32>)> {
        let mut lo = vec![0u32; self.p.models.len()];
        let mut hi: Vec<u32> = self.p.counts();
        for d in decisions {
            match *d {
                Decision::AtMost(k, n) => hi[k as usize] = hi[k as usize].min(n),
                Decision::AtLeast(k, n) => lo[k as usize] = lo[k as usize].max(n),
                _ => {}
            }
        }
        lo.iter().zip(&hi).all(|(l, h)| l <= h).then_some((lo, hi))
    }

    /// The node's master LP with its starting columns: the pool's (or the node's hint
    /// and the most recent ones) that fit the node, and the cheapest single-group column
    /// of every group.
    fn node_master(
        &self,
        node: &Node,
        g: &Groups,
        models: &[usize],
        lo: &[u32],
        hi: &[u32],
    ) -> NodeMaster {
        let p = self.p;
        let (nm, ng) = (p.models.len(), g.members.len());
        let lo_models: Vec<usize> = models.iter().copied().filter(|&k| lo[k] > 0).collect();
        let mut row_of_lo = vec![usize::MAX; nm];
        for (i, &k) in lo_models.iter().enumerate() {
            row_of_lo[k] = ng + i;
        }
        let n_ge = ng + lo_models.len();
        let mut row_of_model = vec![usize::MAX; nm];
        for (i, &k) in models.iter().enumerate() {
            row_of_model[k] = n_ge + i;
        }
        let max_cost = p.models.iter().map(|md| md.cost).max().unwrap_or(1) as f64;
        let big_m = (max_cost * ng as f64 + 1.0).min(1e9);
        let mut rhs_le: Vec<f64> = models.iter().map(|&k| f64::from(hi[k])).collect();
        rhs_le.extend(self.cuts.iter().map(|_| 1.0));
        let mut group_cuts: Vec<Vec<(u32, u32)>> = vec![Vec::new(); ng];
        for (x, mem) in g.members.iter().enumerate() {
            for &i in mem {
                for &c in &self.item_cuts[i as usize] {
                    match group_cuts[x].iter_mut().find(|(cc, _)| *cc == c) {
                        Some((_, m)) => *m += 1,
                        None => group_cuts[x].push((c, 1)),
                    }
                }
            }
        }
        let mut rhs_ge = vec![1.0; ng];
        rhs_ge.extend(lo_models.iter().map(|&k| f64::from(lo[k])));
        let mut lp = Master::with_rows(&rhs_ge, &rhs_le, big_m, false);
        for &k in &lo_models {
            lp.add_column(0.0, &[(row_of_lo[k], -1.0)]);
        }
        let first = lp.first_structural() + lo_models.len();
        let mut m = NodeMaster {
            lp,
            cols: Vec::new(),
            first,
            costs: p.models.iter().map(|md| md.cost as f64).collect(),
            seen: HashSet::new(),
            row_of_lo,
            row_of_model,
            lo_models,
            cut_row0: n_ge + models.len(),
            group_cuts,
            entries: Vec::new(),
            cut_count: Vec::new(),
        };
        let start: Vec<&Col> = match &node.hint {
            None => self.pool.iter().collect(),
            Some(h) => h
                .iter()
                .chain(&self.pool[self.pool.len().saturating_sub(RECENT_COLUMNS)..])
                .collect(),
        };
        for c in start.into_iter().filter(|c| hi[c.model as usize] > 0) {
            if let Some(gs) = self.node_col(g, c) {
                m.add(c.model, gs);
            }
        }
        for grp in 0..ng {
            if let Some(&k) = models
                .iter()
                .filter(|&&k| g.allowed[grp * nm + k])
                .min_by_key(|&&k| p.models[k].cost)
            {
                m.add(k as u32, vec![grp as u32]);
            }
        }
        m
    }

    /// Column generation on the node's master LP until pricing finds no improving column
    /// (or the LP's bound already meets its objective), raising `bound` by the
    /// Lagrangian, Farley and device-count bounds of every round. `Err` when the node is
    /// closed, interrupted or stuck on the way.
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &mut self,
        m: &mut NodeMaster,
        g: &Groups,
        models: &[usize],
        (lo, hi): (&[u32], &[u32]),
        mut bound: f64,
        ub: u64,
        until: Instant,
    ) -> Result<Priced, NodeOutcome> {
        let p = self.p;
        let (nm, ng) = (p.models.len(), g.members.len());
        let mut knap = Knapsack::default();
        let mut last_duals = None;
        loop {
            match m.lp.solve(until) {
                LpStatus::Optimal => {}
                LpStatus::TimeLimit => return Err(NodeOutcome::Interrupted),
                // The LP could not be solved reliably: the node keeps its bound.
                LpStatus::Failed => return Err(NodeOutcome::Stuck(bound)),
            }
            let y = m.lp.duals().to_vec();
            let obj = m.lp.objective();
            let nu = |k: usize| match m.row_of_lo[k] {
                usize::MAX => 0.0,
                r => y[r].max(0.0),
            };
            // Cut duals are ≤ 0: a pattern holding two instances of a cut pays −y.
            let sigma: Vec<f64> = y[m.cut_row0..m.cut_row0 + self.cuts.len()]
                .iter()
                .map(|&v| (-v).max(0.0))
                .collect();
            let dy: f64 = y[..ng].iter().sum::<f64>()
                + m.lo_models
                    .iter()
                    .map(|&k| nu(k) * f64::from(lo[k]))
                    .sum::<f64>()
                - sigma.iter().sum::<f64>();
            let mut lagr = dy;
            let mut theta = 1.0f64;
            // Farley's bound assumes covering rows only.
            let mut farley_ok = sigma.iter().all(|&v| v <= 1e-12);
            let mut new_cols: Vec<(u32, Vec<u32>)> = Vec::new();
            let mut exact = true;
            let mut uppers = vec![0.0f64; nm];
            for &k in models {
                let model = &p.models[k];
                let cost = model.cost as f64;
                let mu = y[m.row_of_model[k]].min(0.0) + nu(k);
                knap.load(g, k, nm, &y[..ng], model.cap, model.thr_cap);
                knap.set_cuts(&m.group_cuts, &sigma);
                let ans = knap.solve(&g.conflict, ng, cost - mu, Some(until));
                exact &= ans.exact;
                let upper = ans.upper + nu(k);
                uppers[k] = upper;
                if upper > cost {
                    lagr += f64::from(hi[k]) * (cost - upper);
                    if cost > 0.0 {
                        theta = theta.min(cost / upper);
                    } else {
                        farley_ok = false;
                    }
                }
                for (v, gs) in ans.columns {
                    if cost - mu - v < -1e-9 {
                        new_cols.push((k as u32, gs));
                    }
                }
            }
            let farley = if farley_ok && dy > 0.0 {
                theta * dy
            } else {
                lagr
            };
            bound = bound.max(lagr.max(farley));
            if ceil_bound(bound) < ub {
                let costs: Vec<u64> = p.models.iter().map(|md| md.cost).collect();
                let counts = count_bound(&costs, &uppers, lo, hi, dy, ub);
                bound = bound.max(counts as f64);
                last_duals = Some((uppers, dy));
            }
            if ceil_bound(bound) >= ub {
                return Err(NodeOutcome::Closed);
            }
            // Pricing can take long (two binding capacities): keep to the time slice.
            if Instant::now() >= until {
                return Err(NodeOutcome::Interrupted);
            }
            if new_cols.is_empty() {
                if exact {
                    return Ok(Priced {
                        bound: bound.max(obj),
                        converged: true,
                        last_duals,
                    });
                }
                break;
            }
            let integral = m.lp.artificial() < EPS
                && (0..m.cols.len()).all(|i| !(EPS..=1.0 - EPS).contains(&m.lp.value(m.first + i)));
            if !integral && m.lp.artificial() < EPS && ceil_bound(bound) >= ceil_bound(obj) {
                break;
            }
            let mut added = false;
            for (k, gs) in new_cols {
                let items = g.items_of(&gs);
                if m.add(k, gs) {
                    self.add_col(Col { model: k, items });
                    added = true;
                }
            }
            if !added {
                break;
            }
        }
        Ok(Priced {
            bound,
            converged: false,
            last_duals,
        })
    }

    /// Placements from the node's LP solution `xs`, each recorded when it beats `ub`:
    /// the columns at one, completed greedily; when they leave demand, also roundings of
    /// the fractional columns by decreasing value (those at one, ≥ ½, then all), clipped
    /// to what is still needed, the rest greedily — or, on hybrid instances with a small
    /// rest, by the complete search. True when the columns at one alone place everything.
    fn primal(
        &mut self,
        g: &Groups,
        cols: &[(u32, Vec<u32>)],
        xs: &[f64],
        ub: &mut u64,
        until: Instant,
    ) -> bool {
        let p = self.p;
        let nm = p.models.len();
        let to_pattern = |k: u32, gs: &[u32]| -> Pattern {
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &x in gs {
                for &i in &g.members[x as usize] {
                    *counts.entry(self.item_type[i as usize]).or_default() += 1;
                }
            }
            let mut items: Vec<(u32, u32)> = counts.into_iter().collect();
            items.sort_unstable();
            Pattern {
                model: k as usize,
                items,
            }
        };
        let mut demand = p.demands();
        let mut avail = p.counts();
        let mut fixed: Vec<Pattern> = Vec::new();
        for (i, &x) in xs.iter().enumerate() {
            if x > 1.0 - EPS {
                let pat = to_pattern(cols[i].0, &cols[i].1);
                let items = pat.clipped(&demand);
                if avail[pat.model] == 0 || items.is_empty() {
                    continue;
                }
                avail[pat.model] -= 1;
                for &(t, c) in &items {
                    demand[t as usize] -= c;
                }
                fixed.push(Pattern {
                    model: pat.model,
                    items,
                });
            }
        }
        if demand.iter().all(|&d| d == 0) {
            self.record(ub, fixed);
            return true;
        }
        let mut order: Vec<usize> = (0..xs.len()).filter(|&i| xs[i] > EPS).collect();
        order.sort_by(|&a, &b| xs[b].total_cmp(&xs[a]));
        let mut found = Vec::new();
        let total = self.item_type.len();
        for min_x in [1.0, 0.5, 0.0] {
            let (mut d, mut a, mut f) = (demand.clone(), avail.clone(), fixed.clone());
            for &i in order
                .iter()
                .filter(|&&i| xs[i] < 1.0 - EPS && xs[i] >= min_x)
            {
                let pat = to_pattern(cols[i].0, &cols[i].1);
                let items = pat.clipped(&d);
                if a[pat.model] == 0 || items.is_empty() {
                    continue;
                }
                a[pat.model] -= 1;
                for &(t, c) in &items {
                    d[t as usize] -= c;
                }
                f.push(Pattern {
                    model: pat.model,
                    items,
                });
            }
            if d.iter().any(|&x| x > 0) {
                let Some(mut rest) = best_greedy(p, &d, &a) else {
                    continue;
                };
                let left: usize = d.iter().map(|&x| x as usize).sum();
                let fixed_cost = p.cost(&f);
                if nm > 1 && left <= COMPLETE_ITEMS.min(total / 4) && fixed_cost < *ub {
                    let slice = (Instant::now() + COMPLETE_TIME).min(until);
                    let limit = (*ub - fixed_cost).min(p.cost(&rest));
                    if let Some(better) = complete::search(p, &d, &a, limit, slice).improved {
                        rest = better;
                    }
                }
                f.extend(rest);
            }
            found.push(f);
        }
        for f in found {
            self.record(ub, f);
        }
        false
    }

    /// The branching decision on a fractional LP solution `xs`, if it has one: a
    /// model's fractional device count (the most expensive model first), then
    /// Ryan–Foster on a fractional pair of groups, then a group on a model.
    fn branch_on(
        &self,
        g: &Groups,
        cols: &[(u32, Vec<u32>)],
        xs: &[f64],
        plunging: bool,
    ) -> Option<(Decision, Decision)> {
        let p = self.p;
        let nm = p.models.len();
        let mut together: HashMap<(u32, u32), f64> = HashMap::new();
        let mut on_model: HashMap<(u32, u32), f64> = HashMap::new();
        for (i, &x) in xs.iter().enumerate() {
            if x < EPS {
                continue;
            }
            let (k, gs) = &cols[i];
            for (a, &ga) in gs.iter().enumerate() {
                *on_model.entry((ga, *k)).or_default() += x;
                for &gb in &gs[a + 1..] {
                    *together.entry((ga, gb)).or_default() += x;
                }
            }
        }
        let frac = |s: f64| s.min(1.0 - s);
        // Branching takes the most fractional pair (or instance and model), which splits
        // the bound best — except in a plunge on hybrid instances, which takes the
        // largest fractional one: its *together* child, the one the plunge follows,
        // changes the LP least, so plunges reach their leaves (where placements are
        // found) in fewer and cheaper nodes (n120 seed 6: ≈ 340 instead of ≈ 200
        // nodes in the first 4.4 s slice).
        let least = plunging && nm > 1;
        let pick = |m: &HashMap<(u32, u32), f64>| {
            let key = |s: f64| if least { s } else { frac(s) };
            m.iter()
                .filter(|(_, &s)| frac(s) > EPS)
                .max_by(|a, b| key(*a.1).total_cmp(&key(*b.1)).then(b.0.cmp(a.0)))
                .map(|(&key, _)| key)
        };
        let lead = |x: u32| g.members[x as usize][0];
        let mut per_model = vec![0.0f64; nm];
        for (i, &x) in xs.iter().enumerate() {
            per_model[cols[i].0 as usize] += x;
        }
        if let Some(k) = (0..nm)
            .filter(|&k| frac(per_model[k] - per_model[k].floor()) > EPS)
            .max_by(|&a, &b| p.models[a].cost.cmp(&p.models[b].cost).then(b.cmp(&a)))
        {
            let v = per_model[k];
            return Some((
                Decision::AtLeast(k as u32, v.ceil() as u32),
                Decision::AtMost(k as u32, v.floor() as u32),
            ));
        }
        if let Some((ga, gb)) = pick(&together) {
            let (a, b) = (lead(ga), lead(gb));
            return Some((Decision::Together(a, b), Decision::Apart(a, b)));
        }
        pick(&on_model).map(|(ga, k)| {
            let a = lead(ga);
            (Decision::Only(a, k), Decision::Ban(a, k))
        })
    }
}

/// A branching pair for an integral LP solution whose pricing was not exact: the first
/// two groups that could still share a device.
fn any_pair(g: &Groups, models: &[usize], nm: usize) -> Option<(Decision, Decision)> {
    let ng = g.members.len();
    let (ga, gb) = (0..ng).find_map(|a| {
        (a + 1..ng)
            .find(|&b| {
                !g.conflict[a * ng + b]
                    && models
                        .iter()
                        .any(|&k| g.allowed[a * nm + k] && g.allowed[b * nm + k])
            })
            .map(|b| (a, b))
    })?;
    let (a, b) = (g.members[ga][0], g.members[gb][0]);
    Some((Decision::Together(a, b), Decision::Apart(a, b)))
}

/// What column generation at a node ended with.
struct Priced {
    /// The node's lower bound.
    bound: f64,
    /// Pricing was exact and found no improving column: the LP is the node's optimum.
    converged: bool,
    /// The last round's pricing bounds per model and dual sum, for the refutation.
    last_duals: Option<(Vec<f64>, f64)>,
}

/// A node's restricted master LP and its columns. Rows: the groups (exact cover), an
/// "at least" row per model with a lower count (with a surplus column each), an "at
/// most" row per usable model, then one row per subset-row cut.
struct NodeMaster {
    lp: Master,
    /// The columns in LP order from `first`: a model and the groups it covers.
    cols: Vec<(u32, Vec<u32>)>,
    /// The LP variable of the first column.
    first: usize,
    /// Cost of each model.
    costs: Vec<f64>,
    /// The columns added, so that none is added twice.
    seen: HashSet<(u32, Vec<u32>)>,
    /// Row of each model's "at least" row (`usize::MAX`: none).
    row_of_lo: Vec<usize>,
    /// Row of each model's "at most" row (`usize::MAX`: the model is not usable).
    row_of_model: Vec<usize>,
    /// The models with an "at least" row.
    lo_models: Vec<usize>,
    /// Row of the first cut.
    cut_row0: usize,
    /// Per group, the cuts it is in and how many of its instances each holds.
    group_cuts: Vec<Vec<(u32, u32)>>,
    /// Scratch: one column's entries.
    entries: Vec<(usize, f64)>,
    /// Scratch: one column's instances per cut.
    cut_count: Vec<(u32, u32)>,
}

impl NodeMaster {
    /// Adds a device of model `k` covering groups `gs`, unless the node has that column;
    /// returns whether it was added.
    fn add(&mut self, k: u32, gs: Vec<u32>) -> bool {
        if !self.seen.insert((k, gs.clone())) {
            return false;
        }
        self.entries.clear();
        self.entries.extend(gs.iter().map(|&x| (x as usize, 1.0)));
        self.entries.push((self.row_of_model[k as usize], 1.0));
        self.cut_count.clear();
        for &x in &gs {
            for &(c, m) in &self.group_cuts[x as usize] {
                match self.cut_count.iter_mut().find(|(cc, _)| *cc == c) {
                    Some((_, n)) => *n += m,
                    None => self.cut_count.push((c, m)),
                }
            }
        }
        let cut_row0 = self.cut_row0;
        self.entries.extend(
            self.cut_count
                .iter()
                .filter(|&&(_, n)| n >= 2)
                .map(|&(c, _)| (cut_row0 + c as usize, 1.0)),
        );
        if self.row_of_lo[k as usize] != usize::MAX {
            self.entries.push((self.row_of_lo[k as usize], 1.0));
        }
        self.lp.add_column(self.costs[k as usize], &self.entries);
        self.cols.push((k, gs));
        true
    }
}

/// Integer device-count bound. With the node's duals, every placement that uses `z_k`
/// devices of model `k` costs at least `dual_sum + Σ z_k·(cost_k − upper_k)`, where
/// `upper_k` bounds the dual value of one device of model `k` (the Lagrangian bound
/// with the counts left free); its cost is exactly `Σ z_k·cost_k`, so the two together
/// need `Σ z_k·upper_k ≥ dual_sum`. Returns the least `Σ z_k·cost_k` over integer
/// counts `lo ≤ z ≤ hi` that meet this, or `limit` if none costs less than `limit`
/// (also when the table over the costs would be too large).
fn count_bound(
    costs: &[u64],
    upper: &[f64],
    lo: &[u32],
    hi: &[u32],
    dual_sum: f64,
    limit: u64,
) -> u64 {
    const MAX_TABLE: u64 = 1 << 20;
    let need = dual_sum - 1e-7 * dual_sum.abs().max(1.0);
    let mut base_cost = 0u64;
    let mut base_val = 0.0f64;
    // Copies of each model beyond `lo`, by binary splitting: (cost, value).
    let mut parts: Vec<(u64, f64)> = Vec::new();
    for k in 0..costs.len() {
        if lo[k] > hi[k] {
            return limit;
        }
        base_cost += costs[k] * u64::from(lo[k]);
        base_val += upper[k] * f64::from(lo[k]);
        let free = hi[k] - lo[k];
        if upper[k] <= 0.0 || free == 0 {
            continue;
        }
        if costs[k] == 0 {
            base_val += upper[k] * f64::from(free);
            continue;
        }
        let mut left = free;
        let mut chunk = 1u32;
        while left > 0 {
            let c = chunk.min(left);
            parts.push((costs[k] * u64::from(c), upper[k] * f64::from(c)));
            left -= c;
            chunk *= 2;
        }
    }
    if base_val >= need {
        return base_cost.min(limit);
    }
    if base_cost >= limit || limit - base_cost > MAX_TABLE {
        return base_cost.min(limit);
    }
    // best[c]: the largest value of the extra devices costing at most c.
    let room = (limit - base_cost) as usize;
    let mut best = vec![0.0f64; room];
    for &(c, v) in &parts {
        let c = c as usize;
        for r in (c..room).rev() {
            let w = best[r - c] + v;
            if w > best[r] {
                best[r] = w;
            }
        }
    }
    best.iter()
        .position(|&v| base_val + v >= need)
        .map_or(limit, |r| base_cost + r as u64)
}

/// Rounds a floating lower bound on an integer cost up, with a tolerance.
fn ceil_bound(b: f64) -> u64 {
    (b - EPS).ceil().max(0.0) as u64
}

/// One knapsack candidate: a group with its value and needs.
#[derive(Debug, Clone, Copy)]
struct KGroup {
    g: u32,
    v: f64,
    w1: u64,
    w2: u64,
    /// Surrogate weight: the sum of the shares of both capacities that bind.
    s: f64,
}

/// Largest scaled capacity of a suffix dynamic program.
const DP_CAP: u64 = 2048;

/// Upper bounds for the knapsack's remaining items under one capacity alone: best value
/// of items `j..` within a room, by dynamic programming over the capacity scaled down
/// to at most [`DP_CAP`] (weights rounded down, room rounded down: a relaxation).
#[derive(Default)]
struct SuffixDp {
    /// Whether the capacity binds (otherwise `get` is unbounded).
    on: bool,
    scale: u64,
    width: usize,
    /// Row-major `(n + 1) × width`.
    table: Vec<f64>,
}

impl SuffixDp {
    fn build(&mut self, w: &[u64], v: &[f64], cap: u64, on: bool) {
        self.on = on;
        if !on {
            return;
        }
        self.scale = cap.div_ceil(DP_CAP).max(1);
        let c = (cap / self.scale) as usize;
        self.width = c + 1;
        let n = w.len();
        self.table.clear();
        self.table.resize((n + 1) * self.width, 0.0);
        for j in (0..n).rev() {
            let wj = (w[j] / self.scale) as usize;
            let (head, tail) = self.table.split_at_mut((j + 1) * self.width);
            let next = &tail[..self.width];
            let row = &mut head[j * self.width..];
            for r in 0..self.width {
                row[r] = if wj <= r {
                    next[r].max(next[r - wj] + v[j])
                } else {
                    next[r]
                };
            }
        }
    }

    /// Best value of items `from..` within `room` (relaxed); infinite when off.
    fn get(&self, from: usize, room: u64) -> f64 {
        if !self.on {
            return f64::INFINITY;
        }
        let r = ((room / self.scale) as usize).min(self.width - 1);
        self.table[from * self.width + r]
    }
}

/// Largest table of a two-capacity suffix dynamic program (entries).
const DP2_ENTRIES: usize = 1 << 21;

/// Like [`SuffixDp`] for both capacities together: `table[j][r1][r2]` bounds the best
/// value of items `j..` within rooms `r1`, `r2`, both scaled down to fit
/// [`DP2_ENTRIES`].
#[derive(Default)]
struct SuffixDp2 {
    on: bool,
    s1: u64,
    s2: u64,
    c1: usize,
    c2: usize,
    table: Vec<f64>,
}

impl SuffixDp2 {
    fn build(&mut self, w1: &[u64], w2: &[u64], v: &[f64], cap1: u64, cap2: u64, on: bool) {
        let n = w1.len();
        self.on = on && n > 0;
        if !self.on {
            return;
        }
        self.s2 = cap2.div_ceil(64).max(1);
        self.c2 = (cap2 / self.s2) as usize + 1;
        let per_row = (DP2_ENTRIES / (n + 1) / self.c2).max(2);
        self.s1 = cap1.div_ceil(per_row as u64 - 1).max(1);
        self.c1 = (cap1 / self.s1) as usize + 1;
        let plane = self.c1 * self.c2;
        self.table.clear();
        self.table.resize((n + 1) * plane, 0.0);
        for j in (0..n).rev() {
            let (a, b) = ((w1[j] / self.s1) as usize, (w2[j] / self.s2) as usize);
            let (head, tail) = self.table.split_at_mut((j + 1) * plane);
            let next = &tail[..plane];
            let row = &mut head[j * plane..];
            for r1 in 0..self.c1 {
                for r2 in 0..self.c2 {
                    let keep = next[r1 * self.c2 + r2];
                    row[r1 * self.c2 + r2] = if a <= r1 && b <= r2 {
                        keep.max(next[(r1 - a) * self.c2 + r2 - b] + v[j])
                    } else {
                        keep
                    };
                }
            }
        }
    }

    /// Best value of items `from..` within the rooms (relaxed); infinite when off.
    fn get(&self, from: usize, r1: u64, r2: u64) -> f64 {
        if !self.on {
            return f64::INFINITY;
        }
        let a = ((r1 / self.s1) as usize).min(self.c1 - 1);
        let b = ((r2 / self.s2) as usize).min(self.c2 - 1);
        self.table[(from * self.c1 + a) * self.c2 + b]
    }
}

/// The pricing answer for one model.
struct KAnswer {
    /// Improving patterns found (value, groups), best last.
    columns: Vec<(f64, Vec<u32>)>,
    /// A proven upper bound on the best value.
    upper: f64,
    /// Whether the search finished (upper is the exact optimum).
    exact: bool,
}

/// Depth-first branch and bound for the knapsack with conflicts, with reusable buffers.
#[derive(Default)]
struct Knapsack {
    items: Vec<KGroup>,
    cap1: u64,
    cap2: u64,
    inv1: f64,
    inv2: f64,
    /// Positions (in `items`) sorted by value per unit of resource and of throughput.
    by1: Vec<u32>,
    by2: Vec<u32>,
    /// Suffix dynamic programs per binding capacity (see [`SuffixDp`]).
    dp1: SuffixDp,
    dp2: SuffixDp,
    dp12: SuffixDp2,
    chosen: Vec<u32>,
    best: f64,
    threshold: f64,
    /// Node budget of the current search.
    limit: u64,
    /// The search stops here as if out of nodes (its answer is then not exact).
    deadline: Option<Instant>,
    found: Vec<(f64, Vec<u32>)>,
    nodes: u64,
    /// Per candidate (position in `items`): the subset-row cuts with a positive
    /// penalty it is in, with its number of instances in each.
    cut_of: Vec<Vec<(u32, u32)>>,
    /// Penalty of each cut (minus its dual), paid once a pattern holds two of its
    /// instances.
    sigma: Vec<f64>,
    /// Instances of each cut in the current partial pattern.
    cut_cnt: Vec<u32>,
}

impl Knapsack {
    /// Candidates of model `k`: allowed groups with a positive dual.
    fn load(&mut self, g: &Groups, k: usize, nm: usize, pi: &[f64], cap1: u64, cap2: u64) {
        self.items.clear();
        for (x, &v) in pi.iter().enumerate() {
            if v > 1e-9 && g.allowed[x * nm + k] {
                self.items.push(KGroup {
                    g: x as u32,
                    v,
                    w1: g.size[x * nm + k],
                    w2: g.thr[x],
                    s: 0.0,
                });
            }
        }
        let tot1: u128 = self.items.iter().map(|i| u128::from(i.w1)).sum();
        let tot2: u128 = self.items.iter().map(|i| u128::from(i.w2)).sum();
        self.cap1 = cap1;
        self.cap2 = cap2;
        self.inv1 = if tot1 > u128::from(cap1) && cap1 > 0 {
            1.0 / cap1 as f64
        } else {
            0.0
        };
        self.inv2 = if tot2 > u128::from(cap2) && cap2 > 0 {
            1.0 / cap2 as f64
        } else {
            0.0
        };
        let (i1, i2) = (self.inv1, self.inv2);
        for it in &mut self.items {
            it.s = it.w1 as f64 * i1 + it.w2 as f64 * i2;
        }
        let ratio = |v: f64, w: f64| if w > 0.0 { v / w } else { f64::INFINITY };
        self.items.sort_by(|a, b| {
            ratio(b.v, b.s)
                .total_cmp(&ratio(a.v, a.s))
                .then(a.g.cmp(&b.g))
        });
        let items = &self.items;
        let by = |out: &mut Vec<u32>, w: fn(&KGroup) -> u64| {
            out.clear();
            out.extend(0..items.len() as u32);
            out.sort_by(|&a, &b| {
                let (a, b) = (&items[a as usize], &items[b as usize]);
                ratio(b.v, w(b) as f64)
                    .total_cmp(&ratio(a.v, w(a) as f64))
                    .then(a.g.cmp(&b.g))
            });
        };
        by(&mut self.by1, |i| i.w1);
        by(&mut self.by2, |i| i.w2);
        let (w1, w2): (Vec<u64>, Vec<u64>) = self.items.iter().map(|i| (i.w1, i.w2)).unzip();
        let v: Vec<f64> = self.items.iter().map(|i| i.v).collect();
        self.dp1.build(&w1, &v, cap1, self.inv1 > 0.0);
        self.dp2.build(&w2, &v, cap2, self.inv2 > 0.0);
        self.dp12.on = false;
        self.cut_of.clear();
        self.cut_of.resize(self.items.len(), Vec::new());
    }

    /// Subset-row penalties for the loaded candidates: `group_cuts[g]` lists the cuts
    /// of group g with its instance counts, `sigma` each cut's penalty. The bounds
    /// ignore penalties, which only lower values, so they stay valid.
    fn set_cuts(&mut self, group_cuts: &[Vec<(u32, u32)>], sigma: &[f64]) {
        self.sigma.clear();
        self.sigma.extend_from_slice(sigma);
        self.cut_cnt.clear();
        self.cut_cnt.resize(sigma.len(), 0);
        for (pos, it) in self.items.iter().enumerate() {
            self.cut_of[pos].clear();
            self.cut_of[pos].extend(
                group_cuts[it.g as usize]
                    .iter()
                    .filter(|&&(c, _)| sigma[c as usize] > 1e-12),
            );
        }
    }

    /// Maximises the value over conflict-free subsets within both capacities; keeps
    /// the patterns worth more than `threshold`.
    /// A first search runs with the cheap bounds and a small budget; if it does not
    /// finish and both capacities bind, the two-capacity table is built and the search
    /// repeated with the full budget.
    /// At `deadline` the search stops as if out of nodes.
    fn solve(
        &mut self,
        conflict: &[bool],
        ng: usize,
        threshold: f64,
        deadline: Option<Instant>,
    ) -> KAnswer {
        self.threshold = threshold;
        self.deadline = deadline;
        self.limit = PRICE_FIRST_NODES;
        self.search(conflict, ng);
        if self.nodes > self.limit
            && self.inv1 > 0.0
            && self.inv2 > 0.0
            && deadline.is_none_or(|d| Instant::now() < d)
        {
            let w1: Vec<u64> = self.items.iter().map(|i| i.w1).collect();
            let w2: Vec<u64> = self.items.iter().map(|i| i.w2).collect();
            let v: Vec<f64> = self.items.iter().map(|i| i.v).collect();
            self.dp12.build(&w1, &w2, &v, self.cap1, self.cap2, true);
            self.limit = PRICE_NODES;
            self.search(conflict, ng);
        }
        let root = self.bound(0, 0.0, self.cap1, self.cap2, f64::NEG_INFINITY);
        let exact = self.nodes <= self.limit;
        let mut columns = std::mem::take(&mut self.found);
        if columns.len() > PRICE_COLUMNS {
            columns.drain(..columns.len() - PRICE_COLUMNS);
        }
        KAnswer {
            columns,
            upper: if exact {
                self.best
            } else {
                root.max(self.best)
            },
            exact,
        }
    }

    /// The smallest of the surrogate Dantzig bound and the Dantzig bounds of each
    /// binding capacity alone, for items `from..` on top of `val` with room `r1`, `r2`;
    /// stops early once a bound is at most `enough`.
    fn bound(&self, from: usize, val: f64, r1: u64, r2: u64, enough: f64) -> f64 {
        let mut b = val
            + self
                .dp1
                .get(from, r1)
                .min(self.dp2.get(from, r2))
                .min(self.dp12.get(from, r1, r2));
        if b <= enough {
            return b;
        }
        b = b.min(self.dantzig(from, val, r1, r2));
        for (dim, inv, order) in [(0, self.inv1, &self.by1), (1, self.inv2, &self.by2)] {
            if b <= enough || inv == 0.0 {
                continue;
            }
            let mut d = val;
            let mut room = if dim == 0 { r1 } else { r2 };
            for &pos in order {
                let it = &self.items[pos as usize];
                if (pos as usize) < from || it.w1 > r1 || it.w2 > r2 {
                    continue;
                }
                let w = if dim == 0 { it.w1 } else { it.w2 };
                if w <= room {
                    d += it.v;
                    room -= w;
                } else {
                    d += it.v * room as f64 / w as f64;
                    break;
                }
            }
            b = b.min(d);
        }
        b
    }

    /// Surrogate Dantzig bound of items `from..` on top of `val` with room `r1`, `r2`.
    fn dantzig(&self, from: usize, val: f64, r1: u64, r2: u64) -> f64 {
        let mut b = val;
        let mut room = r1 as f64 * self.inv1 + r2 as f64 * self.inv2;
        for it in &self.items[from..] {
            if it.w1 > r1 || it.w2 > r2 {
                continue;
            }
            if it.s <= room {
                b += it.v;
                room -= it.s;
            } else {
                b += it.v * room / it.s;
                break;
            }
        }
        b
    }

    fn search(&mut self, conflict: &[bool], ng: usize) {
        self.chosen.clear();
        self.found.clear();
        self.best = 0.0;
        self.nodes = 0;
        self.dfs(conflict, ng, 0, 0.0, self.cap1, self.cap2);
    }

    fn dfs(&mut self, conflict: &[bool], ng: usize, idx: usize, val: f64, r1: u64, r2: u64) {
        self.nodes += 1;
        if self.nodes.is_multiple_of(1024) && self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.nodes = self.limit + 1;
        }
        if self.nodes > self.limit {
            return;
        }
        if val > self.best + 1e-12 {
            self.best = val;
            if val > self.threshold + 1e-9 {
                self.found.push((val, self.chosen.clone()));
            }
        }
        if idx >= self.items.len()
            || self.bound(idx, val, r1, r2, self.best + 1e-9) <= self.best + 1e-9
        {
            return;
        }
        let it = self.items[idx];
        let free = it.w1 <= r1
            && it.w2 <= r2
            && self
                .chosen
                .iter()
                .all(|&c| !conflict[c as usize * ng + it.g as usize]);
        if free {
            let mut penalty = 0.0;
            for &(c, m) in &self.cut_of[idx] {
                let before = self.cut_cnt[c as usize];
                if before < 2 && before + m >= 2 {
                    penalty += self.sigma[c as usize];
                }
                self.cut_cnt[c as usize] = before + m;
            }
            self.chosen.push(it.g);
            let next = val + it.v - penalty;
            self.dfs(conflict, ng, idx + 1, next, r1 - it.w1, r2 - it.w2);
            self.chosen.pop();
            for &(c, m) in &self.cut_of[idx] {
                self.cut_cnt[c as usize] -= m;
            }
        }
        self.dfs(conflict, ng, idx + 1, val, r1, r2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{Device, DeviceKind, Instance, VnfInstance};
    use crate::validate;
    use proptest::prelude::*;
    use std::time::Duration;

    /// Runs branch and price alone to the end; returns (finished, best cost).
    fn run_alone(inst: &Instance) -> (bool, Option<u64>) {
        let p = Problem::new(inst);
        let mut b = BranchPrice::new(&p, 0.0, &[]);
        let until = Instant::now() + Duration::from_secs(20);
        // Each call returns at a cheaper placement; the search goes on to the end.
        while b.run(u64::MAX, until).is_some() {}
        let best = b.found.as_ref().map(|(c, pats)| {
            let a = p
                .to_assignment(pats, inst.vnf_instances.len())
                .expect("patterns map onto devices");
            assert_eq!(validate::check(inst, &a), Ok(*c));
            *c
        });
        (b.finished(), best)
    }

    /// On small generated hybrid instances the roundings complete their smallest
    /// rests by the complete search: the placements found are valid (checked in
    /// `run_alone`) and the search still finishes with the exact solver's optimum.
    #[test]
    fn complete_roundings_give_valid_optimal_placements() {
        for seed in 0..3 {
            let inst = crate::generator::generate(16, seed);
            let (finished, best) = run_alone(&inst);
            assert!(finished);
            let p = Problem::new(&inst);
            let exact = crate::exact::solve(&p, None, Instant::now() + Duration::from_secs(20));
            let exact = exact.expect("a placement exists");
            assert_eq!(exact.cost, exact.bound);
            assert_eq!(best, Some(exact.cost));
        }
    }

    /// Minimum cost over all assignments (None if none is feasible).
    fn brute(inst: &Instance) -> Option<u64> {
        let (n, nd) = (inst.vnf_instances.len(), inst.devices.len());
        let mut a = vec![0usize; n];
        let mut best: Option<u64> = None;
        loop {
            if let Ok(c) = validate::check(inst, &a) {
                best = Some(best.map_or(c, |b| b.min(c)));
            }
            let mut i = 0;
            loop {
                if i == n {
                    return best;
                }
                a[i] += 1;
                if a[i] < nd {
                    break;
                }
                a[i] = 0;
                i += 1;
            }
        }
    }

    fn device(i: usize, hw: bool, cost: u64, cap: u64, lat: u64, thr: u64) -> Device {
        Device {
            id: format!("d{i}"),
            model: String::new(),
            kind: if hw {
                DeviceKind::Hardware
            } else {
                DeviceKind::Software
            },
            functions: vec!["fw".into()],
            cost,
            tcam_capacity: hw.then_some(cap),
            cpu_capacity: (!hw).then_some(cap),
            latency_us: lat,
            throughput_gbps: thr,
        }
    }

    fn vnf(i: usize, tcam: u64, cpu: u64, lat: u64, thr: u64) -> VnfInstance {
        VnfInstance {
            id: format!("v{i}"),
            function: "fw".into(),
            tcam_need: tcam,
            cpu_need: cpu,
            latency_bound_us: lat,
            throughput_gbps: thr,
        }
    }

    /// The root LP bound is 4.5 but the optimum is 7: only branching proves it.
    #[test]
    fn proves_an_optimum_above_the_rounded_lp_bound() {
        let inst = Instance {
            name: "gap".into(),
            functions: vec!["fw".into()],
            devices: vec![device(0, true, 2, 11, 0, 5), device(1, false, 5, 9, 0, 6)],
            vnf_instances: vec![vnf(0, 4, 7, 2, 1), vnf(1, 1, 9, 1, 0), vnf(2, 8, 1, 2, 5)],
        };
        let p = Problem::new(&inst);
        let root = crate::colgen::ColGen::new(&p).solve(
            &p.demands(),
            &p.counts(),
            None,
            f64::INFINITY,
            true,
            Instant::now() + Duration::from_secs(5),
        );
        assert!(ceil_bound(root.bound) + 1 < 7, "root bound {}", root.bound);
        assert_eq!(brute(&inst), Some(7));
        assert_eq!(run_alone(&inst), (true, Some(7)));
    }

    #[test]
    fn knapsack_with_conflicts_matches_brute_force() {
        let mut rng = 7u64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for _ in 0..300 {
            let ng = 1 + next(9) as usize;
            let nm = 1;
            let (cap1, cap2) = (5 + next(20), 3 + next(10));
            let g = Groups {
                members: (0..ng as u32).map(|i| vec![i]).collect(),
                of: (0..ng as u32).collect(),
                conflict: (0..ng * ng).map(|_| next(5) == 0).collect(),
                allowed: (0..ng).map(|_| next(6) != 0).collect(),
                size: (0..ng).map(|_| next(12)).collect(),
                thr: (0..ng).map(|_| next(6)).collect(),
            };
            let conflict: Vec<bool> = (0..ng * ng)
                .map(|i| g.conflict[i] || g.conflict[(i % ng) * ng + i / ng])
                .collect();
            let pi: Vec<f64> = (0..ng).map(|_| next(10) as f64 - 2.0).collect();
            let mut k = Knapsack::default();
            k.load(&g, 0, nm, &pi, cap1, cap2);
            let ans = k.solve(&conflict, ng, -1.0, None);
            let mut best = 0.0f64;
            for mask in 0u32..1 << ng {
                let set: Vec<usize> = (0..ng).filter(|&x| mask >> x & 1 == 1).collect();
                let ok = set.iter().all(|&x| g.allowed[x])
                    && set.iter().map(|&x| g.size[x]).sum::<u64>() <= cap1
                    && set.iter().map(|&x| g.thr[x]).sum::<u64>() <= cap2
                    && set
                        .iter()
                        .all(|&a| set.iter().all(|&b| a == b || !conflict[a * ng + b]));
                if ok {
                    best = best.max(set.iter().map(|&x| pi[x].max(0.0)).sum());
                }
            }
            assert!(ans.exact);
            assert!((ans.upper - best).abs() < 1e-9, "{} vs {best}", ans.upper);
            let (v, set) = ans.columns.last().cloned().unwrap_or((0.0, Vec::new()));
            assert!((v - best).abs() < 1e-9);
            assert!(set.iter().all(|&a| set
                .iter()
                .all(|&b| a == b || !conflict[a as usize * ng + b as usize])));
        }
    }

    /// Subset-row penalties: the pricing optimum equals brute force over subsets,
    /// each paying a cut's penalty once it holds two of the cut's instances.
    #[test]
    fn knapsack_with_cut_penalties_matches_brute_force() {
        let mut rng = 11u64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for _ in 0..300 {
            let ng = 1 + next(9) as usize;
            let (cap1, cap2) = (5 + next(20), 3 + next(10));
            let g = Groups {
                members: (0..ng as u32).map(|i| vec![i]).collect(),
                of: (0..ng as u32).collect(),
                conflict: vec![false; ng * ng],
                allowed: vec![true; ng],
                size: (0..ng).map(|_| next(12)).collect(),
                thr: (0..ng).map(|_| next(6)).collect(),
            };
            let n_cuts = next(4) as usize;
            let mut group_cuts: Vec<Vec<(u32, u32)>> = vec![Vec::new(); ng];
            for c in 0..n_cuts as u32 {
                for cuts in group_cuts.iter_mut() {
                    if next(3) == 0 {
                        cuts.push((c, 1 + next(2) as u32));
                    }
                }
            }
            let sigma: Vec<f64> = (0..n_cuts).map(|_| next(4) as f64 * 0.5).collect();
            let pi: Vec<f64> = (0..ng).map(|_| next(10) as f64 - 2.0).collect();
            let mut k = Knapsack::default();
            k.load(&g, 0, 1, &pi, cap1, cap2);
            k.set_cuts(&group_cuts, &sigma);
            let ans = k.solve(&g.conflict, ng, -1.0, None);
            let mut best = 0.0f64;
            for mask in 0u32..1 << ng {
                let set: Vec<usize> = (0..ng).filter(|&x| (mask >> x) & 1 == 1).collect();
                let ok = set.iter().all(|&x| pi[x] > 1e-9)
                    && set.iter().map(|&x| g.size[x]).sum::<u64>() <= cap1
                    && set.iter().map(|&x| g.thr[x]).sum::<u64>() <= cap2;
                if !ok {
                    continue;
                }
                let mut v: f64 = set.iter().map(|&x| pi[x]).sum();
                for (c, &pen) in sigma.iter().enumerate() {
                    let held: u32 = set
                        .iter()
                        .flat_map(|&x| group_cuts[x].iter())
                        .filter(|&&(cc, _)| cc as usize == c)
                        .map(|&(_, m)| m)
                        .sum();
                    if held >= 2 {
                        v -= pen;
                    }
                }
                best = best.max(v);
            }
            assert!(ans.exact);
            assert!((ans.upper - best).abs() < 1e-9, "{} vs {best}", ans.upper);
        }
    }

    proptest! {
        /// The device-count bound is the least cost of integer counts in the box whose
        /// dual capacity covers the dual sum (brute force over every count vector).
        #[test]
        fn count_bound_matches_brute_force(
            models in proptest::collection::vec((0u64..12, 0.0f64..15.0, 0u32..3, 0u32..4), 1..4),
            dual_sum in -5.0f64..60.0,
            limit in 0u64..80,
        ) {
            let costs: Vec<u64> = models.iter().map(|m| m.0).collect();
            let upper: Vec<f64> = models.iter().map(|m| m.1).collect();
            let lo: Vec<u32> = models.iter().map(|m| m.2).collect();
            let hi: Vec<u32> = models.iter().map(|m| m.2 + m.3).collect();
            let mut best = limit;
            let mut z = lo.clone();
            loop {
                let cost: u64 = z.iter().zip(&costs).map(|(&n, &c)| u64::from(n) * c).sum();
                let val: f64 = z.iter().zip(&upper).map(|(&n, &u)| f64::from(n) * u).sum();
                if val >= dual_sum - 1e-7 * dual_sum.abs().max(1.0) {
                    best = best.min(cost);
                }
                let Some(k) = (0..z.len()).find(|&k| z[k] < hi[k]) else {
                    break;
                };
                z[k] += 1;
                z[..k].copy_from_slice(&lo[..k]);
            }
            prop_assert_eq!(count_bound(&costs, &upper, &lo, &hi, dual_sum, limit), best);
        }
    }

    /// A cut that raises the root LP (three items of 4 in bins of 10: 1.5 → 2) stays in
    /// the tree (useless ones are dropped; the proptest below runs that path too).
    #[test]
    fn keeps_only_cuts_that_raise_the_root() {
        let bpp = |weights: Vec<u64>| {
            crate::bpp::BppInstance {
                name: "cuts".into(),
                capacity: 10,
                weights,
            }
            .to_instance()
        };
        let inst = bpp(vec![4, 4, 4]);
        let p = Problem::new(&inst);
        let mut b = BranchPrice::new(&p, 0.0, &[]);
        let until = Instant::now() + Duration::from_secs(20);
        // Each call returns at a cheaper placement; the search goes on to the end.
        while b.run(u64::MAX, until).is_some() {}
        assert!(b.finished());
        assert_eq!(b.found.as_ref().map(|f| f.0), Some(2));
        assert!(!b.cuts.is_empty() && !b.drop_cuts);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// Branch and price alone finishes with the brute-force optimum on tiny
        /// multi-model instances (or finds nothing when none exists).
        #[test]
        fn branch_and_price_equals_brute_force(
            devs in proptest::collection::vec(
                (any::<bool>(), 1u64..10, 4u64..20, 0u64..4, 2u64..12), 1..5),
            vnfs in proptest::collection::vec(
                (1u64..12, 1u64..12, 0u64..5, 0u64..6), 1..6),
        ) {
            let inst = Instance {
                name: "prop".into(),
                functions: vec!["fw".into()],
                devices: devs
                    .iter()
                    .enumerate()
                    .map(|(i, &(hw, c, cap, lat, thr))| device(i, hw, c, cap, lat, thr))
                    .collect(),
                vnf_instances: vnfs
                    .iter()
                    .enumerate()
                    .map(|(i, &(t, c, lat, thr))| vnf(i, t, c, lat, thr))
                    .collect(),
            };
            prop_assume!(inst.validate("prop").is_ok());
            prop_assert_eq!(run_alone(&inst), (true, brute(&inst)));
        }

        /// Classical bin packing: branch and price alone equals brute force.
        #[test]
        fn branch_and_price_bin_packing_equals_brute_force(
            weights in proptest::collection::vec(1u64..=100, 1..8),
            cap in 100u64..=160,
        ) {
            let inst = crate::bpp::BppInstance { name: "prop".into(), capacity: cap, weights }
                .to_instance();
            let (finished, best) = run_alone(&inst);
            prop_assert!(finished);
            prop_assert_eq!(best, brute(&inst));
        }
    }
}
