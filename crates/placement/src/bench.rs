//! The placement benchmark behind `nfx bench placement`: exact, FFD and online on the
//! public bin-packing sets (against their known optima) and on generated HYPER-style
//! instances, with per-instance rows and per-set summaries.

use crate::error::Result;
use crate::instance::Instance;
use crate::solve::{place, Algorithm};
use serde::Serialize;
use std::time::Duration;

/// One algorithm's result on one instance.
#[derive(Debug, Clone, Serialize)]
pub struct AlgoResult {
    /// Total cost of the used devices.
    pub objective: u64,
    /// Seconds spent.
    pub seconds: f64,
}

/// All algorithms on one instance.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Set name.
    pub set: String,
    /// Instance name.
    pub name: String,
    /// Number of VNF instances (items).
    pub n: usize,
    /// Known optimum, for the public sets.
    pub known_optimum: Option<u64>,
    /// Exact solver result.
    pub exact: AlgoResult,
    /// Exact solver's proven lower bound.
    pub exact_bound: u64,
    /// Whether the exact solver proved optimality.
    pub exact_proven: bool,
    /// Enhanced FFD result.
    pub ffd: AlgoResult,
    /// Online best-fit result; `None` when it found no placement (it cannot move an
    /// instance once placed, so it can run out of devices where the others do not).
    pub online: Option<AlgoResult>,
}

/// Runs the three algorithms on one instance.
pub fn run_instance(
    set: &str,
    inst: &Instance,
    known: Option<u64>,
    limit: Duration,
) -> Result<BenchRow> {
    let e = place(inst, Algorithm::Exact, limit)?;
    let f = place(inst, Algorithm::Ffd, limit)?;
    let o = place(inst, Algorithm::Online, limit).ok();
    Ok(BenchRow {
        set: set.to_string(),
        name: inst.name.clone(),
        n: inst.vnf_instances.len(),
        known_optimum: known,
        exact: AlgoResult {
            objective: e.objective,
            seconds: e.seconds,
        },
        exact_bound: e.bound,
        exact_proven: e.proven_optimal,
        ffd: AlgoResult {
            objective: f.objective,
            seconds: f.seconds,
        },
        online: o.map(|o| AlgoResult {
            objective: o.objective,
            seconds: o.seconds,
        }),
    })
}

/// Aggregates of one set.
#[derive(Debug, Clone, Serialize)]
pub struct SetSummary {
    /// Set name.
    pub set: String,
    /// Instances run.
    pub instances: usize,
    /// Instances where the exact solver proved optimality.
    pub proven_optimal: usize,
    /// Instances where the exact objective equals the known optimum (public sets).
    pub reached_known_optimum: Option<usize>,
    /// Mean exact seconds.
    pub exact_mean_seconds: f64,
    /// Max exact seconds.
    pub exact_max_seconds: f64,
    /// Total cost (devices) of exact, FFD and online over the set.
    pub exact_total: u64,
    /// Total cost of FFD.
    pub ffd_total: u64,
    /// Total cost of online best fit, over the instances where it found a placement.
    pub online_total: u64,
    /// Instances where online best fit found no placement.
    pub online_failed: usize,
    /// Mean of (FFD − exact) / exact, in percent.
    pub ffd_over_exact_pct: f64,
    /// Mean of (online − exact) / exact, in percent, where online found a placement.
    pub online_over_exact_pct: f64,
    /// Mean of (exact − bound) / bound, in percent.
    pub exact_gap_mean_pct: f64,
    /// Max of (exact − bound) / bound, in percent.
    pub exact_gap_max_pct: f64,
    /// Instances where exact is worse than FFD (must be 0).
    pub exact_worse_than_ffd: usize,
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * (a as f64 - b as f64) / b as f64
    }
}

/// Summarises rows of one set.
pub fn summarize(set: &str, rows: &[BenchRow]) -> SetSummary {
    let n = rows.len().max(1) as f64;
    let known = rows.iter().all(|r| r.known_optimum.is_some()) && !rows.is_empty();
    let online: Vec<(u64, u64)> = rows
        .iter()
        .filter_map(|r| Some((r.online.as_ref()?.objective, r.exact.objective)))
        .collect();
    SetSummary {
        set: set.to_string(),
        instances: rows.len(),
        proven_optimal: rows.iter().filter(|r| r.exact_proven).count(),
        reached_known_optimum: known.then(|| {
            rows.iter()
                .filter(|r| r.known_optimum == Some(r.exact.objective))
                .count()
        }),
        exact_mean_seconds: rows.iter().map(|r| r.exact.seconds).sum::<f64>() / n,
        exact_max_seconds: rows.iter().map(|r| r.exact.seconds).fold(0.0, f64::max),
        exact_total: rows.iter().map(|r| r.exact.objective).sum(),
        ffd_total: rows.iter().map(|r| r.ffd.objective).sum(),
        online_total: online.iter().map(|(o, _)| o).sum(),
        online_failed: rows.len() - online.len(),
        ffd_over_exact_pct: rows
            .iter()
            .map(|r| pct(r.ffd.objective, r.exact.objective))
            .sum::<f64>()
            / n,
        online_over_exact_pct: online.iter().map(|&(o, e)| pct(o, e)).sum::<f64>()
            / online.len().max(1) as f64,
        exact_gap_mean_pct: rows
            .iter()
            .map(|r| pct(r.exact.objective, r.exact_bound))
            .sum::<f64>()
            / n,
        exact_gap_max_pct: rows
            .iter()
            .map(|r| pct(r.exact.objective, r.exact_bound))
            .fold(0.0, f64::max),
        exact_worse_than_ffd: rows
            .iter()
            .filter(|r| r.exact.objective > r.ffd.objective)
            .count(),
    }
}

/// Runs the first `max` (0 = all) instances of a public set listed in `optima`.
pub fn public_set_rows(
    optima: &[crate::bpp::OptimumEntry],
    set: &str,
    max: usize,
    limit: Duration,
) -> Result<Vec<BenchRow>> {
    let mut entries: Vec<_> = optima.iter().filter(|e| e.set == set).collect();
    if max > 0 {
        entries.truncate(max);
    }
    let mut rows = Vec::with_capacity(entries.len());
    for e in entries {
        let b = crate::bpp::read_bpp(&e.file)?;
        rows.push(run_instance(set, &b.to_instance(), Some(e.optimum), limit)?);
    }
    Ok(rows)
}

/// Aggregates of one instance family (`nfx bench placement --families`).
#[derive(Debug, Clone, Serialize)]
pub struct FamilySummary {
    /// Family name.
    pub family: String,
    /// Instances run.
    pub instances: usize,
    /// Instances where the exact solver proved optimality.
    pub proven: usize,
    /// Instances whose exact objective is within 1 % of the proven bound.
    pub within_1pct: usize,
    /// Max of (exact − bound) / bound, in percent.
    pub max_gap_pct: f64,
    /// Mean of (exact − bound) / bound, in percent.
    pub mean_gap_pct: f64,
    /// Max exact seconds.
    pub max_seconds: f64,
    /// Instances where exact is worse than FFD (must be 0).
    pub worse_than_ffd: usize,
    /// Max of (exact − FFD) / FFD, in percent: ≤ 0 when the exact solver is never worse
    /// than FFD (−20 means it beat FFD by at least 20 % on every instance).
    pub vs_ffd_worst: f64,
}

/// Summarises the rows of one family.
pub fn summarize_family(family: &str, rows: &[BenchRow]) -> FamilySummary {
    let s = summarize(family, rows);
    FamilySummary {
        family: family.to_string(),
        instances: rows.len(),
        proven: s.proven_optimal,
        within_1pct: rows
            .iter()
            .filter(|r| pct(r.exact.objective, r.exact_bound) <= 1.0)
            .count(),
        max_gap_pct: s.exact_gap_max_pct,
        mean_gap_pct: s.exact_gap_mean_pct,
        max_seconds: s.exact_max_seconds,
        worse_than_ffd: s.exact_worse_than_ffd,
        vs_ffd_worst: rows
            .iter()
            .map(|r| pct(r.exact.objective, r.ffd.objective))
            .reduce(f64::max)
            .unwrap_or(0.0),
    }
}

/// Sizes of the family instances: instance `i` of a family has `FAMILY_SIZES[i % 3]`
/// VNF instances and seed `i / 3`.
pub const FAMILY_SIZES: [usize; 3] = [30, 60, 120];

/// The `i`-th benchmark instance of `family`.
pub fn family_instance(family: crate::families::Family, i: usize) -> Instance {
    family.generate(
        FAMILY_SIZES[i % FAMILY_SIZES.len()],
        (i / FAMILY_SIZES.len()) as u64,
    )
}

/// Runs `count` generated HYPER-style instances with `n` VNF instances (seeds 0..count).
pub fn generated_rows(n: usize, count: usize, limit: Duration) -> Result<Vec<BenchRow>> {
    (0..count as u64)
        .map(|seed| {
            run_instance(
                &format!("hyper_n{n}"),
                &crate::generator::generate(n, seed),
                None,
                limit,
            )
        })
        .collect()
}
