//! A dense revised primal simplex for the column-generation master problem
//! `min c·x  s.t.  A_cover x ≥ d,  A_count x ≤ n,  x ≥ 0`. Columns are only ever added,
//! so the current basis stays primal feasible and each re-solve is warm. The basis
//! inverse is kept explicitly (the masters have at most a few hundred rows) and
//! refactorised periodically for accuracy.

use std::time::Instant;

/// Pivot tolerance on the entering column.
const PIVOT_TOL: f64 = 1e-9;
/// Reduced-cost tolerance for optimality.
const RC_TOL: f64 = 1e-9;
/// Pivots between refactorisations of the basis inverse.
const REFACTOR_EVERY: usize = 64;
/// Degenerate pivots in a row after which Bland's rule takes over (no cycling).
const BLAND_AFTER: usize = 50;
/// Degenerate pivots in a row (plus per row) after which even Bland's rule is deemed
/// stuck in a numerical cycle and the basis is refactorised.
const STALL_BASE: usize = 1_000;
const STALL_PER_ROW: usize = 20;
/// Refactorisations for a stall before the solve gives up.
const MAX_STALLS: u32 = 3;
/// Fallbacks to the all-slack basis (singular or infeasible refactorisation) before
/// the solve gives up.
const MAX_RESETS: u32 = 3;
/// Pivots (plus per row) after which a solve gives up: far more than any healthy
/// solve needs, so that a numerical loop cannot run until the deadline.
const MAX_ITER_BASE: usize = 20_000;
const MAX_ITER_PER_ROW: usize = 100;
/// Objective decrease below which a pivot counts as degenerate (costs are integers).
const PROGRESS_TOL: f64 = 1e-11;
/// Relative tolerance of the residual check before optimality is reported.
const CHECK_TOL: f64 = 1e-6;
/// Reduced cost below which a column, priced at duals computed afresh when the solve
/// would end, counts as a real violation (the pivoting tolerance is [`RC_TOL`]).
const VERIFY_TOL: f64 = 1e-7;

/// One sparse column.
#[derive(Debug, Clone)]
struct Column {
    cost: f64,
    rows: Vec<u32>,
    vals: Vec<f64>,
}

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LpStatus {
    /// No column has a negative reduced cost.
    Optimal,
    /// The deadline passed first.
    TimeLimit,
    /// Numerical trouble that refactorising did not cure, or no progress within the
    /// iteration limit: the basis is primal feasible, but its objective and duals are
    /// not proven optimal, so they must not be used as a bound.
    Failed,
}

/// The master LP with its current basis.
pub struct Master {
    m: usize,
    n_ge: usize,
    rhs: Vec<f64>,
    cols: Vec<Column>,
    first_structural: usize,
    basis: Vec<usize>,
    pos: Vec<usize>,
    binv: Vec<f64>,
    xb: Vec<f64>,
    since_refactor: usize,
    y: Vec<f64>,
    d: Vec<f64>,
    nz: Vec<usize>,
    /// Copy of the pivot row of the basis inverse (scratch).
    prow: Vec<f64>,
}

impl Master {
    /// Creates the master with covering rows `rhs_ge` (artificial columns of cost
    /// `big_m` make the start feasible) and count rows `rhs_le` (with slacks).
    pub fn new(rhs_ge: &[f64], rhs_le: &[f64], big_m: f64) -> Master {
        Master::with_rows(rhs_ge, rhs_le, big_m, true)
    }

    /// Like [`Master::new`], but with `surplus == false` the covering rows are
    /// equalities (exact cover).
    pub fn with_rows(rhs_ge: &[f64], rhs_le: &[f64], big_m: f64, surplus: bool) -> Master {
        let n_ge = rhs_ge.len();
        let m = n_ge + rhs_le.len();
        let mut cols = Vec::with_capacity(2 * m + 64);
        for r in 0..n_ge {
            cols.push(Column {
                cost: big_m,
                rows: vec![r as u32],
                vals: vec![1.0],
            });
        }
        for r in n_ge..m {
            cols.push(Column {
                cost: 0.0,
                rows: vec![r as u32],
                vals: vec![1.0],
            });
        }
        for r in 0..n_ge {
            if surplus {
                cols.push(Column {
                    cost: 0.0,
                    rows: vec![r as u32],
                    vals: vec![-1.0],
                });
            }
        }
        let first_structural = cols.len();
        let mut rhs = rhs_ge.to_vec();
        rhs.extend_from_slice(rhs_le);
        let mut binv = vec![0.0; m * m];
        for r in 0..m {
            binv[r * m + r] = 1.0;
        }
        let mut pos = vec![usize::MAX; cols.len()];
        for (r, p) in pos.iter_mut().enumerate().take(m) {
            *p = r;
        }
        Master {
            m,
            n_ge,
            xb: rhs.clone(),
            rhs,
            cols,
            first_structural,
            basis: (0..m).collect(),
            pos,
            binv,
            since_refactor: 0,
            y: vec![0.0; m],
            d: vec![0.0; m],
            nz: Vec::with_capacity(m),
            prow: Vec::with_capacity(m),
        }
    }

    /// Adds a structural column; returns its handle for [`Master::value`].
    pub fn add_column(&mut self, cost: f64, entries: &[(usize, f64)]) -> usize {
        self.cols.push(Column {
            cost,
            rows: entries.iter().map(|&(r, _)| r as u32).collect(),
            vals: entries.iter().map(|&(_, v)| v).collect(),
        });
        self.pos.push(usize::MAX);
        self.cols.len() - 1
    }

    /// Handle of the first structural column (handles are consecutive from here).
    pub fn first_structural(&self) -> usize {
        self.first_structural
    }

    /// Value of a column in the current basic solution.
    pub fn value(&self, col: usize) -> f64 {
        match self.pos[col] {
            usize::MAX => 0.0,
            r => self.xb[r].max(0.0),
        }
    }

    /// Sum of the artificial columns' values (positive means covering is infeasible
    /// with the current columns).
    pub fn artificial(&self) -> f64 {
        (0..self.n_ge).map(|c| self.value(c)).sum()
    }

    /// Objective value of the current basic solution.
    pub fn objective(&self) -> f64 {
        self.basis
            .iter()
            .zip(&self.xb)
            .map(|(&c, &x)| self.cols[c].cost * x.max(0.0))
            .sum()
    }

    /// Dual values of all rows for the current basis (covering rows ≥ 0, count rows ≤ 0).
    pub fn duals(&mut self) -> &[f64] {
        self.compute_duals();
        &self.y
    }

    fn compute_duals(&mut self) {
        let m = self.m;
        self.y.iter_mut().for_each(|v| *v = 0.0);
        for r in 0..m {
            let cb = self.cols[self.basis[r]].cost;
            if cb != 0.0 {
                let row = &self.binv[r * m..(r + 1) * m];
                for (yj, &b) in self.y.iter_mut().zip(row) {
                    *yj += cb * b;
                }
            }
        }
    }

    fn reduced_cost(&self, c: usize) -> f64 {
        let col = &self.cols[c];
        let mut rc = col.cost;
        for (&r, &v) in col.rows.iter().zip(&col.vals) {
            rc -= self.y[r as usize] * v;
        }
        rc
    }

    /// Runs primal simplex from the current basis to optimality or the deadline.
    ///
    /// `Optimal` is only reported after a check with duals computed afresh from the
    /// basis inverse and small residuals `B·x_B = b` and `c_B = y·B` (else the basis is
    /// refactorised and the solve goes on), so callers may take the objective as the
    /// LP value. Numerical trouble is retried from a fresh factorisation; what that does
    /// not cure ends the solve with [`LpStatus::Failed`] instead of looping or claiming
    /// optimality.
    pub fn solve(&mut self, deadline: Instant) -> LpStatus {
        let m = self.m;
        let max_iter = MAX_ITER_BASE + MAX_ITER_PER_ROW * m;
        let stall_limit = STALL_BASE + STALL_PER_ROW * m;
        let mut degenerate = 0usize;
        let mut no_progress = 0usize;
        let mut stalls = 0u32;
        let mut resets = 0u32;
        let mut banned: Vec<usize> = Vec::new();
        let mut retry_banned = true;
        let mut may_restart = true;
        // Whether `y` was computed from the basis inverse since the last pivot.
        let mut fresh = false;
        for iter in 1..=max_iter {
            if iter.is_multiple_of(32) && Instant::now() >= deadline {
                return LpStatus::TimeLimit;
            }
            if self.since_refactor >= REFACTOR_EVERY.max(m) {
                resets += u32::from(self.refactor());
                fresh = false;
            }
            if !fresh && (iter == 1 || self.since_refactor.is_multiple_of(REFACTOR_EVERY)) {
                self.compute_duals();
                fresh = true;
            }
            if resets > MAX_RESETS {
                return LpStatus::Failed;
            }
            let bland = degenerate > BLAND_AFTER;
            let Some((enter, rc)) = self.entering(bland, &banned, RC_TOL) else {
                if !fresh {
                    // The incrementally updated duals may have drifted: with duals
                    // computed afresh, a column that clearly prices out resumes the
                    // solve (rounding-level ones do not, so healthy solves end as
                    // before).
                    self.compute_duals();
                    fresh = true;
                    if self.entering(bland, &banned, VERIFY_TOL).is_some() {
                        continue;
                    }
                }
                if self.since_refactor > 0 && (!banned.is_empty() || !self.residuals_small()) {
                    // Banned columns get one more chance in the new basis.
                    if std::mem::take(&mut retry_banned) {
                        banned.clear();
                    }
                    resets += u32::from(self.refactor());
                    self.compute_duals();
                    continue;
                }
                if banned.is_empty() {
                    return LpStatus::Optimal;
                }
                // Columns set aside for want of a pivot may still price out: once, the
                // solve starts over from the slack basis.
                if std::mem::take(&mut may_restart) {
                    self.reset_basis();
                    self.compute_duals();
                    banned.clear();
                    (degenerate, no_progress, stalls) = (0, 0, 0);
                    continue;
                }
                return LpStatus::Failed;
            };
            self.ftran(enter);
            let Some(leave) = self.ratio_test(bland) else {
                // With non-negative costs the LP is bounded, so a column with a
                // negative reduced cost and no pivot is numerical noise: retry with a
                // fresh factorisation, then set the column aside for this solve.
                if self.since_refactor > 0 {
                    resets += u32::from(self.refactor());
                    self.compute_duals();
                    fresh = true;
                } else {
                    banned.push(enter);
                }
                continue;
            };
            let theta = (self.xb[leave] / self.d[leave]).max(0.0);
            if theta <= 1e-12 {
                degenerate += 1;
            } else {
                degenerate = 0;
            }
            // Pivots that move the objective by a rounding error count towards a
            // stall too: with the tolerant ratio test, basic values of ±1e-10 make
            // "non-degenerate" steps that can cycle as well.
            if -rc * theta <= PROGRESS_TOL {
                no_progress += 1;
                if no_progress > stall_limit {
                    // No progress for this long, with Bland's rule or steps too small
                    // to count (rounding errors can defeat it): go on from a fresh
                    // factorisation under Bland's rule, a few times.
                    stalls += 1;
                    if stalls > MAX_STALLS {
                        if !std::mem::take(&mut may_restart) {
                            return LpStatus::Failed;
                        }
                        // Once, the solve starts over from the slack basis (still
                        // with Bland's rule).
                        self.reset_basis();
                        stalls = 0;
                        banned.clear();
                    }
                    resets += u32::from(self.refactor());
                    self.compute_duals();
                    fresh = true;
                    degenerate = BLAND_AFTER + 1;
                    no_progress = 0;
                    continue;
                }
            } else {
                no_progress = 0;
            }
            self.pivot(enter, leave, theta);
            // y' = y + c̄_q · (row `leave` of the new basis inverse).
            let row = &self.binv[leave * m..(leave + 1) * m];
            for (yj, &b) in self.y.iter_mut().zip(row) {
                *yj += rc * b;
            }
            fresh = false;
        }
        LpStatus::Failed
    }

    /// The entering column and its reduced cost at the current duals: the most
    /// negative one (Dantzig), or with `bland` the first negative one; `banned`
    /// columns are skipped. `None` if every reduced cost is ≥ −`tol`.
    fn entering(&self, bland: bool, banned: &[usize], tol: f64) -> Option<(usize, f64)> {
        let mut enter = None;
        let mut best = -tol;
        for c in 0..self.cols.len() {
            if self.pos[c] != usize::MAX || (!banned.is_empty() && banned.contains(&c)) {
                continue;
            }
            let rc = self.reduced_cost(c);
            if rc < best {
                enter = Some((c, rc));
                best = rc;
                if bland {
                    break;
                }
            }
        }
        enter
    }

    /// Whether the basic solution and the duals satisfy `B·x_B = b` and `y·B = c_B`
    /// to within [`CHECK_TOL`] (relative), and `x_B` is non-negative to within it.
    fn residuals_small(&self) -> bool {
        let mut bx = vec![0.0; self.m];
        for (r, &c) in self.basis.iter().enumerate() {
            let col = &self.cols[c];
            for (&i, &v) in col.rows.iter().zip(&col.vals) {
                bx[i as usize] += v * self.xb[r];
            }
        }
        let primal = bx
            .iter()
            .zip(&self.rhs)
            .all(|(a, b)| (a - b).abs() <= CHECK_TOL * (1.0 + b.abs()));
        let dual = self
            .basis
            .iter()
            .all(|&c| self.reduced_cost(c).abs() <= CHECK_TOL * (1.0 + self.cols[c].cost.abs()));
        primal && dual && self.xb.iter().all(|&x| x >= -CHECK_TOL)
    }

    fn ftran(&mut self, c: usize) {
        let m = self.m;
        self.d.iter_mut().for_each(|v| *v = 0.0);
        let col = &self.cols[c];
        for (&r, &v) in col.rows.iter().zip(&col.vals) {
            let r = r as usize;
            for i in 0..m {
                self.d[i] += self.binv[i * m + r] * v;
            }
        }
    }

    fn ratio_test(&self, bland: bool) -> Option<usize> {
        let mut theta_max = f64::INFINITY;
        for (i, &di) in self.d.iter().enumerate() {
            if di > PIVOT_TOL {
                theta_max = theta_max.min((self.xb[i].max(0.0) + 1e-9) / di);
            }
        }
        if !theta_max.is_finite() {
            return None;
        }
        let mut leave = None;
        let mut best = 0.0;
        for (i, &di) in self.d.iter().enumerate() {
            if di > PIVOT_TOL && self.xb[i].max(0.0) / di <= theta_max {
                let better = match leave {
                    None => true,
                    Some(l) if bland => self.basis[i] < self.basis[l],
                    Some(_) => di > best,
                };
                if better {
                    leave = Some(i);
                    best = di;
                }
            }
        }
        leave
    }

    fn pivot(&mut self, enter: usize, leave: usize, theta: f64) {
        let m = self.m;
        let dp = self.d[leave];
        for i in 0..m {
            self.xb[i] -= theta * self.d[i];
        }
        self.xb[leave] = theta;
        let mut nz = std::mem::take(&mut self.nz);
        nz.clear();
        {
            let prow = &mut self.binv[leave * m..(leave + 1) * m];
            for (j, v) in prow.iter_mut().enumerate() {
                if *v != 0.0 {
                    *v /= dp;
                    nz.push(j);
                }
            }
        }
        let mut prow = std::mem::take(&mut self.prow);
        prow.clear();
        prow.extend_from_slice(&self.binv[leave * m..(leave + 1) * m]);
        let dense = 4 * nz.len() > m;
        for (i, row) in self.binv.chunks_exact_mut(m).enumerate() {
            let f = self.d[i];
            if i == leave || f == 0.0 {
                continue;
            }
            if dense {
                for (a, &b) in row.iter_mut().zip(&prow) {
                    *a -= f * b;
                }
            } else {
                for &j in &nz {
                    row[j] -= f * prow[j];
                }
            }
        }
        self.prow = prow;
        self.nz = nz;
        self.pos[self.basis[leave]] = usize::MAX;
        self.basis[leave] = enter;
        self.pos[enter] = leave;
        self.since_refactor += 1;
    }

    /// Recomputes the basis inverse and basic values from scratch (Gauss–Jordan with
    /// partial pivoting); falls back to the all-slack basis if the basis is singular or
    /// its values infeasible, and then returns true.
    fn refactor(&mut self) -> bool {
        self.since_refactor = 0;
        let m = self.m;
        let mut a = vec![0.0; m * m];
        for (j, &c) in self.basis.iter().enumerate() {
            let col = &self.cols[c];
            for (&r, &v) in col.rows.iter().zip(&col.vals) {
                a[r as usize * m + j] = v;
            }
        }
        let mut inv = vec![0.0; m * m];
        for r in 0..m {
            inv[r * m + r] = 1.0;
        }
        for k in 0..m {
            let mut p = k;
            for i in k + 1..m {
                if a[i * m + k].abs() > a[p * m + k].abs() {
                    p = i;
                }
            }
            if a[p * m + k].abs() < 1e-12 {
                self.reset_basis();
                return true;
            }
            if p != k {
                for j in 0..m {
                    a.swap(p * m + j, k * m + j);
                    inv.swap(p * m + j, k * m + j);
                }
            }
            let piv = a[k * m + k];
            let mut nz_a = Vec::new();
            let mut nz_i = Vec::new();
            for j in 0..m {
                if a[k * m + j] != 0.0 {
                    a[k * m + j] /= piv;
                    nz_a.push(j);
                }
                if inv[k * m + j] != 0.0 {
                    inv[k * m + j] /= piv;
                    nz_i.push(j);
                }
            }
            let row_a = a[k * m..(k + 1) * m].to_vec();
            let row_i = inv[k * m..(k + 1) * m].to_vec();
            let dense = 4 * (nz_a.len() + nz_i.len()) > 2 * m;
            for (i, (ra, ri)) in a
                .chunks_exact_mut(m)
                .zip(inv.chunks_exact_mut(m))
                .enumerate()
            {
                let f = ra[k];
                if i == k || f == 0.0 {
                    continue;
                }
                if dense {
                    for (x, &y) in ra.iter_mut().zip(&row_a) {
                        *x -= f * y;
                    }
                    for (x, &y) in ri.iter_mut().zip(&row_i) {
                        *x -= f * y;
                    }
                } else {
                    for &j in &nz_a {
                        ra[j] -= f * row_a[j];
                    }
                    for &j in &nz_i {
                        ri[j] -= f * row_i[j];
                    }
                }
            }
        }
        // `inv` is B^-1 with rows in basis order (row swaps act on the equations, not
        // on the basic variables, because B's columns are the basic variables).
        self.binv = inv;
        for i in 0..m {
            let row = &self.binv[i * m..(i + 1) * m];
            self.xb[i] = row.iter().zip(&self.rhs).map(|(a, b)| a * b).sum();
        }
        if self.xb.iter().any(|&x| x < -1e-6) {
            self.reset_basis();
            return true;
        }
        false
    }

    fn reset_basis(&mut self) {
        let m = self.m;
        for c in &self.basis {
            self.pos[*c] = usize::MAX;
        }
        self.basis = (0..m).collect();
        for r in 0..m {
            self.pos[r] = r;
        }
        self.binv.iter_mut().for_each(|v| *v = 0.0);
        for r in 0..m {
            self.binv[r * m + r] = 1.0;
        }
        self.xb = self.rhs.clone();
        self.since_refactor = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// Objective value of the current basic solution.
    fn basis_value(lp: &Master) -> f64 {
        lp.basis
            .iter()
            .zip(&lp.xb)
            .map(|(&c, &x)| lp.cols[c].cost * x)
            .sum()
    }

    #[test]
    fn solves_small_covering_lp() {
        // min x1 + x2 + x3 with patterns covering demands (2, 3): classic 1D cutting
        // stock with weights (6, 4) capacity 10: patterns {1,1}, {0,2}, {1,0}.
        let mut lp = Master::new(&[2.0, 3.0], &[], 100.0);
        let a = lp.add_column(1.0, &[(0, 1.0), (1, 1.0)]);
        let b = lp.add_column(1.0, &[(1, 2.0)]);
        let c = lp.add_column(1.0, &[(0, 1.0)]);
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        assert!((lp.objective() - 2.5).abs() < 1e-9, "{}", lp.objective());
        assert!((lp.value(a) - 2.0).abs() < 1e-9);
        assert!((lp.value(b) - 0.5).abs() < 1e-9);
        assert!(lp.value(c).abs() < 1e-9);
        assert!(lp.artificial() < 1e-9);
        let y = lp.duals().to_vec();
        assert!((y[0] * 2.0 + y[1] * 3.0 - 2.5).abs() < 1e-9);
    }

    #[test]
    fn count_rows_bind_and_refactor_keeps_solution() {
        // Two models: cheap (cost 1, at most 1 device) and dear (cost 3).
        let mut lp = Master::new(&[2.0], &[1.0, 5.0], 50.0);
        let cheap = lp.add_column(1.0, &[(0, 1.0), (1, 1.0)]);
        let dear = lp.add_column(3.0, &[(0, 1.0), (2, 1.0)]);
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        assert!((lp.objective() - 4.0).abs() < 1e-9);
        lp.refactor();
        assert!((lp.value(cheap) - 1.0).abs() < 1e-9);
        assert!((lp.value(dear) - 1.0).abs() < 1e-9);
        assert!(lp.duals()[1] <= 1e-9);
    }

    #[test]
    fn beales_cycling_example_reaches_the_optimum() {
        // Beale (1955): Dantzig's rule with lowest-index ties cycles from the slack
        // basis. min −¾x₁ + 150x₂ − x₃/50 + 6x₄ s.t. ¼x₁ − 60x₂ − x₃/25 + 9x₄ ≤ 0,
        // ½x₁ − 90x₂ − x₃/50 + 3x₄ ≤ 0, x₃ ≤ 1; optimum −1/20.
        let mut lp = Master::new(&[], &[0.0, 0.0, 1.0], 10.0);
        let x1 = lp.add_column(-0.75, &[(0, 0.25), (1, 0.5)]);
        lp.add_column(150.0, &[(0, -60.0), (1, -90.0)]);
        let x3 = lp.add_column(-0.02, &[(0, -0.04), (1, -0.02), (2, 1.0)]);
        lp.add_column(6.0, &[(0, 9.0), (1, 3.0)]);
        assert_eq!(basis_value(&lp), 0.0);
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        let value = basis_value(&lp);
        assert!((value + 0.05).abs() < 1e-9, "{value}");
        assert!((lp.value(x1) - 0.04).abs() < 1e-9);
        assert!((lp.value(x3) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn no_pivot_is_a_failure_not_optimality() {
        // A column with a negative reduced cost and no positive entry in B⁻¹a (here an
        // empty one): the ratio test finds no pivot. That is a ray; in the masters,
        // whose costs are non-negative, only numerical noise does this. It used to end
        // in `Optimal`.
        let mut lp = Master::new(&[2.0, 3.0], &[], 100.0);
        let a = lp.add_column(1.0, &[(0, 1.0), (1, 1.0)]);
        lp.add_column(1.0, &[(1, 2.0)]);
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        let ray = lp.add_column(-1.0, &[]);
        assert_eq!(lp.solve(far()), LpStatus::Failed);
        // The basis stays primal feasible and usable.
        assert!(lp.artificial() < 1e-9);
        assert!(lp.value(ray).abs() < 1e-12);
        assert!((lp.value(a) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn highly_degenerate_covering_lp_terminates_at_the_optimum() {
        // Items covered by pairs (cost 2 if i + j ≡ 0 mod 3, else 3, each pair twice)
        // or alone (cost 2): every basis is degenerate.
        let n = 30;
        let mut lp = Master::new(&vec![1.0; n], &[n as f64], 1_000.0);
        for i in 0..n {
            for j in i + 1..n {
                let cost = if (i + j) % 3 == 0 { 2.0 } else { 3.0 };
                lp.add_column(cost, &[(i, 1.0), (j, 1.0), (n, 1.0)]);
                lp.add_column(cost, &[(i, 1.0), (j, 1.0), (n, 1.0)]);
            }
            lp.add_column(2.0, &[(i, 1.0), (n, 1.0)]);
        }
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        // Cost-2 pairs hold perfect matchings (residue 0 among itself, 1 with 2): n.
        let value = lp.objective();
        assert!((value - n as f64).abs() < 1e-6, "{value}");
        assert!(lp.residuals_small());
    }

    #[test]
    fn artificial_stays_when_uncoverable() {
        let mut lp = Master::new(&[1.0, 1.0], &[], 10.0);
        lp.add_column(1.0, &[(0, 1.0)]);
        assert_eq!(lp.solve(far()), LpStatus::Optimal);
        assert!((lp.artificial() - 1.0).abs() < 1e-9);
    }
}
