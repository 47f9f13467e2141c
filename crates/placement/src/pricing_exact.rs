//! Knapsack over exact fills: the best pattern (items `(weight, count)` with values
//! `y`, which may be negative) whose total weight lies in `[lo, cap]`, by dynamic
//! programming over exact weights with binary splitting of multiplicities.

/// Best (value, pattern as (item index, count)) with fill in `[lo, cap]`, or `None`.
pub fn max_in_fill_range(
    items: &[(u64, u32)],
    y: &[f64],
    cap: u64,
    lo: u64,
) -> Option<(f64, Vec<(usize, u32)>)> {
    let cap_u = usize::try_from(cap).ok()?;
    let mut chunks: Vec<(usize, usize, f64, u32)> = Vec::new();
    for (i, &(w, c)) in items.iter().enumerate() {
        let w = usize::try_from(w).ok()?;
        let mut left = c.min(
            cap_u
                .checked_div(w)
                .map_or(c, |q| q.min(u32::MAX as usize) as u32),
        );
        let mut k = 1u32;
        while left > 0 {
            let take = k.min(left);
            chunks.push((i, w * take as usize, y[i] * f64::from(take), take));
            left -= take;
            k = k.saturating_mul(2);
        }
    }
    let width = cap_u + 1;
    let words = width.div_ceil(64);
    let mut dp = vec![f64::NEG_INFINITY; width];
    dp[0] = 0.0;
    let mut keep = vec![0u64; words * chunks.len()];
    for (ci, &(_, w, v, _)) in chunks.iter().enumerate() {
        if w > cap_u {
            continue;
        }
        let kp = &mut keep[ci * words..(ci + 1) * words];
        for c in (w..=cap_u).rev() {
            let from = dp[c - w];
            if from > f64::NEG_INFINITY && from + v > dp[c] + 1e-12 {
                dp[c] = from + v;
                kp[c / 64] |= 1 << (c % 64);
            }
        }
    }
    let lo_u = usize::try_from(lo).ok()?.min(width);
    let (best_c, best_v) = (lo_u..width)
        .map(|c| (c, dp[c]))
        .filter(|(_, v)| v.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let mut counts = vec![0u32; items.len()];
    let mut c = best_c;
    for ci in (0..chunks.len()).rev() {
        if keep[ci * words + c / 64] >> (c % 64) & 1 == 1 {
            let (i, w, _, take) = chunks[ci];
            counts[i] += take;
            c -= w;
        }
    }
    let pattern = counts
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, &n)| (i, n))
        .collect();
    Some((best_v, pattern))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respects_the_fill_range_and_negative_values() {
        let items = [(6, 2), (4, 1), (3, 1)];
        // Values favour the 3 alone, but fill must be ≥ 9: best is 6+3 (9) or 6+4 (10).
        let (v, p) = max_in_fill_range(&items, &[1.0, 0.5, 2.0], 10, 9).unwrap();
        assert_eq!(p, vec![(0, 1), (2, 1)]);
        assert!((v - 3.0).abs() < 1e-9);
        // Negative values may be forced in to reach the minimum fill.
        let (v, p) = max_in_fill_range(&items, &[-1.0, -1.0, 0.0], 10, 10).unwrap();
        assert_eq!(p, vec![(0, 1), (1, 1)]);
        assert!((v + 2.0).abs() < 1e-9);
        assert!(max_in_fill_range(&[(7, 1)], &[1.0], 10, 8).is_none());
    }
}
