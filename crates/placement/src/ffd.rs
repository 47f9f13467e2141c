//! HYPER's enhanced first-fit-decreasing (§VII-D): instances by decreasing size, each
//! into the first opened device that can host it with respect to both performance and
//! resources, else into a newly opened device. The baseline every other result is
//! compared with.

use crate::error::{PlacementError, Result};
use crate::instance::{host_reject, Instance};

/// Size used for the decreasing order: the largest share of a compatible device's
/// resource or throughput capacity that the instance takes.
pub fn instance_size(inst: &Instance, m: usize) -> f64 {
    let v = &inst.vnf_instances[m];
    let share = |x: u64, cap: u64| if cap == 0 { 0.0 } else { x as f64 / cap as f64 };
    inst.devices
        .iter()
        .filter(|d| host_reject(d, v).is_none())
        .map(|d| {
            share(v.need_on(d.kind), d.capacity()).max(share(v.throughput_gbps, d.throughput_gbps))
        })
        .fold(0.0, f64::max)
}

/// Runs enhanced FFD; returns a device index per VNF instance.
pub fn ffd(inst: &Instance) -> Result<Vec<usize>> {
    let n = inst.vnf_instances.len();
    let sizes: Vec<f64> = (0..n).map(|m| instance_size(inst, m)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| sizes[b].total_cmp(&sizes[a]));
    let nd = inst.devices.len();
    let mut free = vec![0u64; nd];
    let mut free_thr = vec![0u64; nd];
    let mut opened: Vec<usize> = Vec::new();
    let mut is_open = vec![false; nd];
    let mut assign = vec![0usize; n];
    for m in order {
        let v = &inst.vnf_instances[m];
        let fits = |h: usize, free: &[u64], free_thr: &[u64]| {
            let d = &inst.devices[h];
            d.functions.contains(&v.function)
                && d.latency_us <= v.latency_bound_us
                && v.need_on(d.kind) <= free[h]
                && v.throughput_gbps <= free_thr[h]
        };
        let h = match opened.iter().copied().find(|&h| fits(h, &free, &free_thr)) {
            Some(h) => h,
            None => {
                let h = (0..nd)
                    .find(|&h| !is_open[h] && host_reject(&inst.devices[h], v).is_none())
                    .ok_or_else(|| {
                        PlacementError::NoPlacement(format!(
                            "ffd: no device left for vnf instance `{}`",
                            v.id
                        ))
                    })?;
                is_open[h] = true;
                opened.push(h);
                free[h] = inst.devices[h].capacity();
                free_thr[h] = inst.devices[h].throughput_gbps;
                h
            }
        };
        free[h] -= v.need_on(inst.devices[h].kind);
        free_thr[h] -= v.throughput_gbps;
        assign[m] = h;
    }
    Ok(assign)
}
