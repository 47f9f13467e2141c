//! Combinatorial lower bounds for one-dimensional bin packing: L1 (total size) and
//! Martello–Toth's L2, cheap enough to settle most classical instances before any LP.

/// L2 of Martello & Toth for items `(weight, count)` and bin capacity `cap`.
pub fn l2(items: &[(u64, u64)], cap: u64) -> u64 {
    let mut ks: Vec<u64> = items
        .iter()
        .map(|&(w, _)| w)
        .filter(|&w| 2 * w <= cap)
        .collect();
    ks.push(0);
    ks.sort_unstable();
    ks.dedup();
    let mut best = l1(items, cap);
    for k in ks {
        let (mut n1, mut n2, mut s2, mut s3) = (0u128, 0u128, 0u128, 0u128);
        for &(w, c) in items {
            let (w, c) = (u128::from(w), u128::from(c));
            let (cap, k) = (u128::from(cap), u128::from(k));
            if w > cap - k {
                n1 += c;
            } else if 2 * w > cap {
                n2 += c;
                s2 += w * c;
            } else if w >= k {
                s3 += w * c;
            }
        }
        let free2 = n2 * u128::from(cap) - s2;
        let extra = if s3 > free2 {
            (s3 - free2).div_ceil(u128::from(cap.max(1)))
        } else {
            0
        };
        best = best.max((n1 + n2 + extra) as u64);
    }
    best
}

/// L1: total size over capacity, rounded up.
pub fn l1(items: &[(u64, u64)], cap: u64) -> u64 {
    let total: u128 = items
        .iter()
        .map(|&(w, c)| u128::from(w) * u128::from(c))
        .sum();
    total.div_ceil(u128::from(cap.max(1))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l1_rounds_up() {
        assert_eq!(l1(&[(3, 3)], 10), 1);
        assert_eq!(l1(&[(6, 2)], 10), 2);
    }

    #[test]
    fn l2_sees_big_items_that_l1_misses() {
        // Three items of 6 with capacity 10: L1 = 2, but no two fit together.
        assert_eq!(l1(&[(6, 3)], 10), 2);
        assert_eq!(l2(&[(6, 3)], 10), 3);
        // The 40 fits with neither 70: L1 = 2, L2 = 3.
        assert_eq!(l1(&[(70, 2), (40, 1)], 100), 2);
        assert_eq!(l2(&[(70, 2), (40, 1)], 100), 3);
    }

    #[test]
    fn l2_is_never_above_a_known_packing() {
        // {7,3},{7,3},{5,5}: 3 bins of 10 are enough.
        assert!(l2(&[(7, 2), (3, 2), (5, 2)], 10) <= 3);
    }
}
