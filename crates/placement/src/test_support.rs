//! Helpers the bin-packing searches' unit tests share: a far deadline, a packing
//! checker and a brute-force minimum number of bins.

use std::time::{Duration, Instant};

/// A deadline no small test reaches.
pub(crate) fn far() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// Checks that `bins` (item type, count) use at most `k` bins of capacity `cap` and
/// hold exactly the demands of `items` (weight, demand).
pub(crate) fn check(items: &[(u64, u32)], cap: u64, k: u64, bins: &[Vec<(usize, u32)>]) {
    assert!(bins.len() as u64 <= k);
    let mut used = vec![0u32; items.len()];
    for bin in bins {
        let load: u64 = bin.iter().map(|&(i, c)| items[i].0 * u64::from(c)).sum();
        assert!(load <= cap);
        for &(i, c) in bin {
            used[i] += c;
        }
    }
    assert_eq!(used, items.iter().map(|i| i.1).collect::<Vec<_>>());
}

/// Smallest number of bins by exhaustive search over item-to-bin assignments.
pub(crate) fn brute_min_bins(weights: &[u64], cap: u64) -> u64 {
    fn rec(ws: &[u64], i: usize, loads: &mut Vec<u64>, cap: u64, best: &mut u64) {
        if loads.len() as u64 >= *best {
            return;
        }
        if i == ws.len() {
            *best = loads.len() as u64;
            return;
        }
        for b in 0..loads.len() {
            if loads[b] + ws[i] <= cap {
                loads[b] += ws[i];
                rec(ws, i + 1, loads, cap, best);
                loads[b] -= ws[i];
            }
        }
        loads.push(ws[i]);
        rec(ws, i + 1, loads, cap, best);
        loads.pop();
    }
    let mut best = weights.len() as u64;
    rec(weights, 0, &mut Vec::new(), cap, &mut best);
    best
}

/// Item types (weight, count) of `weights`, in order of first appearance.
pub(crate) fn item_types(weights: &[u64]) -> Vec<(u64, u32)> {
    let mut items: Vec<(u64, u32)> = Vec::new();
    for &w in weights {
        match items.iter_mut().find(|(x, _)| *x == w) {
            Some((_, c)) => *c += 1,
            None => items.push((w, 1)),
        }
    }
    items
}
