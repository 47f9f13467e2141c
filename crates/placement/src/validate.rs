//! Independent checker of a placement: recomputes every constraint (2)–(6) of HYPER
//! from the instance alone, so solver bugs cannot hide behind solver data structures.

use crate::instance::{host_reject, Instance};

/// Checks that `assign[m]` (a device index per VNF instance) satisfies compatibility,
/// latency, resource and throughput constraints; returns the total cost of used devices.
pub fn check(inst: &Instance, assign: &[usize]) -> Result<u64, String> {
    if assign.len() != inst.vnf_instances.len() {
        return Err(format!(
            "assignment has {} entries for {} instances",
            assign.len(),
            inst.vnf_instances.len()
        ));
    }
    let nd = inst.devices.len();
    let mut need = vec![0u128; nd];
    let mut thr = vec![0u128; nd];
    let mut used = vec![false; nd];
    for (m, &h) in assign.iter().enumerate() {
        let v = &inst.vnf_instances[m];
        let d = inst
            .devices
            .get(h)
            .ok_or_else(|| format!("`{}` on device {h}", v.id))?;
        if let Some(why) = host_reject(d, v) {
            return Err(format!("`{}` on `{}`: {why}", v.id, d.id));
        }
        need[h] += u128::from(v.need_on(d.kind));
        thr[h] += u128::from(v.throughput_gbps);
        used[h] = true;
    }
    let mut cost = 0u64;
    for (h, d) in inst.devices.iter().enumerate() {
        if need[h] > u128::from(d.capacity()) {
            return Err(format!("`{}` over resource capacity", d.id));
        }
        if thr[h] > u128::from(d.throughput_gbps) {
            return Err(format!("`{}` over throughput", d.id));
        }
        if used[h] {
            cost = cost.saturating_add(d.cost);
        }
    }
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{Device, DeviceKind, VnfInstance};

    fn inst() -> Instance {
        let dev = |id: &str, cost| Device {
            id: id.into(),
            model: "m".into(),
            kind: DeviceKind::Hardware,
            functions: vec!["fw".into()],
            cost,
            tcam_capacity: Some(10),
            cpu_capacity: None,
            latency_us: 5,
            throughput_gbps: 10,
        };
        let vnf = |id: &str, need, thr| VnfInstance {
            id: id.into(),
            function: "fw".into(),
            tcam_need: need,
            cpu_need: 100,
            latency_bound_us: 5,
            throughput_gbps: thr,
        };
        Instance {
            name: "t".into(),
            functions: vec!["fw".into()],
            devices: vec![dev("a", 3), dev("b", 4)],
            vnf_instances: vec![vnf("x", 6, 2), vnf("y", 4, 8), vnf("z", 5, 1)],
        }
    }

    #[test]
    fn accepts_feasible_and_sums_cost() {
        assert_eq!(check(&inst(), &[0, 0, 1]), Ok(7));
    }

    #[test]
    fn rejects_over_capacity_throughput_and_length() {
        assert!(check(&inst(), &[0, 0, 0]).unwrap_err().contains("capacity"));
        let mut i = inst();
        i.vnf_instances[2].throughput_gbps = 9;
        assert!(check(&i, &[1, 0, 0]).unwrap_err().contains("throughput"));
        assert!(check(&inst(), &[0]).is_err());
        assert!(check(&inst(), &[0, 0, 7]).is_err());
    }

    #[test]
    fn rejects_latency_and_function() {
        let mut i = inst();
        i.vnf_instances[0].latency_bound_us = 4;
        assert!(check(&i, &[0, 1, 1]).unwrap_err().contains("latency"));
        i.vnf_instances[0].latency_bound_us = 5;
        i.vnf_instances[0].function = "nat".into();
        assert!(check(&i, &[0, 1, 1]).unwrap_err().contains("function"));
    }
}
