//! LP bound for the exact-cover search of `rc_enum`: the fewest bins (fractionally)
//! that cover the remaining demand exactly with the patterns still usable, within the
//! waste still allowed. When even that exceeds the bins left, no completion exists —
//! a bound that sees conflicts between patterns which per-item shares miss. Its duals
//! also fix patterns out of the node's subtree (reduced-cost fixing), and its solution
//! orders the children (a dive guided by the node's own LP).

use crate::simplex::{LpStatus, Master};
use std::time::Instant;

/// Cost of an artificial unit of cover. The big-M problem relaxes the exact-cover LP
/// for any M, so the bound stays valid; a large M makes it as strong as the LP.
const BIG_M: f64 = 1e4;

/// The LP solution of one node.
pub struct CoverLp {
    /// LP value (fewest bins, fractionally; with artificial cover at `BIG_M`).
    pub value: f64,
    /// Value of each given pattern, in the order given.
    pub x: Vec<f64>,
    /// Reduced cost 1 − y·p of each given pattern at the final duals y (all ≥ 0 up
    /// to the simplex's tolerance).
    pub rc: Vec<f64>,
    /// The dual objective y·demand + y_waste·waste_left (≤ 0 waste dual): a lower
    /// bound on Σx for any cover whose Σ over patterns of x·rc is 0.
    pub dual_value: f64,
}

/// Most columns that enter the master per pricing round.
const ENTER_PER_ROUND: usize = 40;

/// Solves min Σx over `pats` (each: (type, count) pairs, waste) subject to covering
/// `demand` exactly and Σ waste·x ≤ `waste_left`; `None` at the deadline. The master
/// starts from the patterns marked in `start` (e.g. the parent node's LP support) and
/// takes the others in by pricing, so that a large pool costs a scan, not a large LP.
pub fn min_cover(
    demand: &[u32],
    pats: &[(&[(usize, u32)], u64)],
    start: &[bool],
    waste_left: u64,
    deadline: Instant,
) -> Option<CoverLp> {
    let mut row = vec![usize::MAX; demand.len()];
    let mut rhs = Vec::new();
    for (j, &d) in demand.iter().enumerate() {
        if d > 0 {
            row[j] = rhs.len();
            rhs.push(f64::from(d));
        }
    }
    let waste_row = rhs.len();
    let mut lp = Master::with_rows(&rhs, &[waste_left as f64], BIG_M, false);
    let first = lp.first_structural();
    let mut in_lp: Vec<usize> = Vec::new();
    let mut taken = vec![false; pats.len()];
    let mut entries = Vec::new();
    let mut add = |lp: &mut Master, i: usize| {
        let (items, waste) = pats[i];
        entries.clear();
        entries.extend(items.iter().map(|&(j, c)| (row[j], f64::from(c))));
        if waste > 0 {
            entries.push((waste_row, waste as f64));
        }
        lp.add_column(1.0, &entries);
    };
    for i in (0..pats.len()).filter(|&i| start[i]) {
        add(&mut lp, i);
        in_lp.push(i);
        taken[i] = true;
    }
    let mut rc = vec![0.0; pats.len()];
    let mut dual_value;
    loop {
        if lp.solve(deadline) != LpStatus::Optimal {
            return None;
        }
        let duals = lp.duals();
        let y_waste = duals[waste_row].min(0.0);
        dual_value =
            rhs.iter().zip(duals).map(|(d, y)| d * y).sum::<f64>() + y_waste * waste_left as f64;
        for (i, &(items, waste)) in pats.iter().enumerate() {
            rc[i] = 1.0
                - items
                    .iter()
                    .map(|&(j, c)| duals[row[j]] * f64::from(c))
                    .sum::<f64>()
                - y_waste * waste as f64;
        }
        let mut enter: Vec<usize> = (0..pats.len())
            .filter(|&i| !taken[i] && rc[i] < -1e-9)
            .collect();
        if enter.is_empty() {
            break;
        }
        enter.sort_by(|&a, &b| rc[a].total_cmp(&rc[b]));
        for &i in enter.iter().take(ENTER_PER_ROUND) {
            add(&mut lp, i);
            in_lp.push(i);
            taken[i] = true;
        }
    }
    let mut x = vec![0.0; pats.len()];
    for (k, &i) in in_lp.iter().enumerate() {
        x[i] = lp.value(first + k);
    }
    Some(CoverLp {
        value: lp.objective(),
        x,
        rc,
        dual_value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn exact_cover_value_and_infeasibility() {
        // Types 0, 1, 2 with demand 1 each; patterns {0,1}, {1,2}, {0,2}: the LP takes
        // each at ½ (1.5 bins), although no integer cover exists.
        let pats: [(Vec<(usize, u32)>, u64); 3] = [
            (vec![(0, 1), (1, 1)], 0),
            (vec![(1, 1), (2, 1)], 0),
            (vec![(0, 1), (2, 1)], 0),
        ];
        let it: Vec<(&[(usize, u32)], u64)> =
            pats.iter().map(|(p, w)| (p.as_slice(), *w)).collect();
        let lp = min_cover(&[1, 1, 1], &it, &[false, true, false], 0, far()).unwrap();
        assert!((lp.value - 1.5).abs() < 1e-9);
        assert!(lp.x.iter().all(|&x| (x - 0.5).abs() < 1e-9));
        // Type 2 cannot be covered by the first pattern alone: the value is huge.
        let lp = min_cover(&[1, 1, 1], &it[..1], &[false], 0, far()).unwrap();
        assert!(lp.value > 100.0);
        // A waste limit that excludes what is needed.
        let wasteful: [(Vec<(usize, u32)>, u64); 1] = [(vec![(0, 1)], 3)];
        let lp = min_cover(&[1], &[(wasteful[0].0.as_slice(), 3)], &[true], 2, far());
        assert!(lp.unwrap().value > 1.0 + 1e-6);
    }
}
