//! HYPER's online best fit (§V-B): each arriving instance goes to the device with the
//! largest fitness (α/ε_f)·(γ/η_f) among devices with adequate performance and free
//! resources, in O(devices) per arrival. A dimension the instance does not use
//! (need 0) contributes a factor 1; ties go to a device already in use, then the
//! cheaper, then the earlier one.

use crate::error::{PlacementError, Result};
use crate::instance::Instance;
use std::cmp::Ordering;

/// Fitness of one device for one instance as an exact fraction `num / den`.
#[derive(Debug, Clone, Copy)]
pub struct Fitness {
    /// Numerator: product of the needs (1 for an unused dimension).
    pub num: u128,
    /// Denominator: product of the free amounts (1 for an unused dimension).
    pub den: u128,
}

impl Fitness {
    /// Fitness of an instance needing (`need`, `thr`) on a device with (`free`, `free_thr`).
    pub fn new(need: u64, free: u64, thr: u64, free_thr: u64) -> Fitness {
        let (a, f) = if need == 0 { (1, 1) } else { (need, free) };
        let (b, g) = if thr == 0 { (1, 1) } else { (thr, free_thr) };
        Fitness {
            num: u128::from(a) * u128::from(b),
            den: u128::from(f) * u128::from(g),
        }
    }

    /// Exact comparison of two fractions (256-bit cross products).
    pub fn cmp_exact(&self, o: &Fitness) -> Ordering {
        mul_wide(self.num, o.den).cmp(&mul_wide(o.num, self.den))
    }
}

/// Full 256-bit product of two u128 values as (high, low).
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    let mask = u128::from(u64::MAX);
    let (a1, a0) = (a >> 64, a & mask);
    let (b1, b0) = (b >> 64, b & mask);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 64) + (p01 & mask) + (p10 & mask);
    let lo = (p00 & mask) | (mid << 64);
    let hi = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (hi, lo)
}

/// Places instances one by one in `vnf_instances` order; a device index per instance.
pub fn best_fit(inst: &Instance) -> Result<Vec<usize>> {
    let nd = inst.devices.len();
    let mut free: Vec<u64> = inst.devices.iter().map(|d| d.capacity()).collect();
    let mut free_thr: Vec<u64> = inst.devices.iter().map(|d| d.throughput_gbps).collect();
    let mut used = vec![false; nd];
    let mut assign = Vec::with_capacity(inst.vnf_instances.len());
    for v in &inst.vnf_instances {
        let mut best: Option<(usize, Fitness)> = None;
        for (h, d) in inst.devices.iter().enumerate() {
            let need = v.need_on(d.kind);
            if d.latency_us > v.latency_bound_us
                || need > free[h]
                || v.throughput_gbps > free_thr[h]
                || !d.functions.contains(&v.function)
            {
                continue;
            }
            let fit = Fitness::new(need, free[h], v.throughput_gbps, free_thr[h]);
            let better = match &best {
                None => true,
                Some((b, bf)) => match fit.cmp_exact(bf) {
                    Ordering::Greater => true,
                    Ordering::Less => false,
                    Ordering::Equal => {
                        (used[h], std::cmp::Reverse(d.cost))
                            > (used[*b], std::cmp::Reverse(inst.devices[*b].cost))
                    }
                },
            };
            if better {
                best = Some((h, fit));
            }
        }
        let (h, _) = best.ok_or_else(|| {
            PlacementError::NoPlacement(format!(
                "online: no device has room for vnf instance `{}` at its arrival",
                v.id
            ))
        })?;
        free[h] -= v.need_on(inst.devices[h].kind);
        free_thr[h] -= v.throughput_gbps;
        used[h] = true;
        assign.push(h);
    }
    Ok(assign)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_product_matches_small_cases() {
        assert_eq!(mul_wide(3, 5), (0, 15));
        assert_eq!(mul_wide(u128::MAX, 2), (1, u128::MAX - 1));
        assert_eq!(mul_wide(u128::MAX, u128::MAX), (u128::MAX - 1, 1));
    }

    #[test]
    fn fitness_orders_fractions_exactly() {
        let a = Fitness::new(3, 4, 0, 0);
        let b = Fitness::new(2, 3, 0, 0);
        assert_eq!(a.cmp_exact(&b), Ordering::Greater);
        let c = Fitness::new(6, 8, 5, 5);
        assert_eq!(a.cmp_exact(&c), Ordering::Equal);
        let big = Fitness::new(u64::MAX, u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(big.cmp_exact(&Fitness::new(1, 1, 0, 0)), Ordering::Equal);
    }
}
