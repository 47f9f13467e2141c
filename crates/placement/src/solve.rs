//! One entry point for all three algorithms, producing the `nfx place` answer.

use crate::error::{PlacementError, Result};
use crate::exact::{self, quick_bound};
use crate::instance::Instance;
use crate::problem::Problem;
use crate::{ffd, online, validate};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Which placement algorithm to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Minimum cost, proven optimal or with a reported gap.
    Exact,
    /// HYPER's enhanced first-fit-decreasing baseline.
    Ffd,
    /// HYPER's online best fit, in arrival order.
    Online,
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "exact" => Ok(Algorithm::Exact),
            "ffd" => Ok(Algorithm::Ffd),
            "online" => Ok(Algorithm::Online),
            _ => Err(format!("unknown algorithm `{s}` (exact, ffd or online)")),
        }
    }
}

/// The answer printed by `nfx place --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// Total cost of the devices used.
    pub objective: u64,
    /// Whether `objective` equals the proven lower bound.
    pub proven_optimal: bool,
    /// Proven lower bound on the optimum.
    pub bound: u64,
    /// Wall-clock seconds spent.
    pub seconds: f64,
    /// VNF instance id → device id.
    pub assignment: BTreeMap<String, String>,
    /// Device index per VNF instance (for callers that work with indexes).
    #[serde(skip)]
    pub device_of: Vec<usize>,
}

/// Share of the time limit kept back from the exact search: its parts check the
/// clock between steps of up to a few tens of milliseconds under load (a pricing
/// knapsack, a bin-completion node), dropping a large branch-and-price tree takes time
/// in proportion to the run (≈ 0.3 % of it), and the answer is mapped and validated
/// afterwards, so the whole call ends within the limit.
const RESERVE_SHARE: f64 = 0.01;

/// The time the exact search may use out of `time_limit`.
fn search_time(time_limit: Duration) -> Duration {
    time_limit - time_limit.mul_f64(RESERVE_SHARE)
}

/// Places `inst` (already validated) with `alg`; the exact solver stops at `time_limit`.
pub fn place(inst: &Instance, alg: Algorithm, time_limit: Duration) -> Result<Placement> {
    let start = Instant::now();
    let p = Problem::new(inst);
    let (device_of, bound) = match alg {
        Algorithm::Ffd => (ffd::ffd(inst)?, quick_bound(&p)),
        Algorithm::Online => (online::best_fit(inst)?, quick_bound(&p)),
        Algorithm::Exact => {
            let incumbent = ffd::ffd(inst).ok().map(|a| p.patterns_of(&a));
            let r =
                exact::solve(&p, incumbent, start + search_time(time_limit)).map_err(|proven| {
                    PlacementError::NoPlacement(if proven {
                        "the devices cannot host all instances together".into()
                    } else {
                        format!(
                            "none found within the time limit of {:.1} s",
                            time_limit.as_secs_f64()
                        )
                    })
                })?;
            let a = p
                .to_assignment(&r.patterns, inst.vnf_instances.len())
                .ok_or_else(|| {
                    PlacementError::NoPlacement(
                        "internal: solution does not map onto devices".into(),
                    )
                })?;
            (a, r.bound)
        }
    };
    let objective = validate::check(inst, &device_of)
        .map_err(|e| PlacementError::NoPlacement(format!("internal: invalid placement: {e}")))?;
    let bound = bound.min(objective);
    let assignment = device_of
        .iter()
        .enumerate()
        .map(|(m, &h)| (inst.vnf_instances[m].id.clone(), inst.devices[h].id.clone()))
        .collect();
    Ok(Placement {
        objective,
        proven_optimal: objective == bound,
        bound,
        seconds: start.elapsed().as_secs_f64(),
        assignment,
        device_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_stops_before_the_limit() {
        assert_eq!(
            search_time(Duration::from_secs(10)),
            Duration::from_millis(9_900)
        );
        assert_eq!(
            search_time(Duration::from_secs(60)),
            Duration::from_millis(59_400)
        );
        assert_eq!(
            search_time(Duration::from_secs(1)),
            Duration::from_millis(990)
        );
        assert_eq!(search_time(Duration::ZERO), Duration::ZERO);
    }
}
