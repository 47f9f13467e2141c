//! Property tests: the exact solver is feasible, never worse than FFD, matches a
//! brute-force optimum on tiny instances, and its bound is valid; the online best fit
//! equals a brute-force best fit recomputed from scratch.

use nfx_placement::families::Family;
use nfx_placement::instance::host_reject;
use nfx_placement::online::Fitness;
use nfx_placement::{place, validate, Algorithm, Device, DeviceKind, Instance, VnfInstance};
use proptest::prelude::*;
use std::cmp::Ordering;
use std::time::Duration;

const FUNCS: [&str; 2] = ["fw", "nat"];

/// Raw device: (kind hw?, function mask 1..3, cost, capacity, latency, throughput).
type RawDev = (bool, u8, u64, u64, u64, u64);
/// Raw vnf: (function, tcam, cpu, latency bound, throughput).
type RawVnf = (usize, u64, u64, u64, u64);

fn build(devs: &[RawDev], vnfs: &[RawVnf]) -> Instance {
    Instance {
        name: "prop".into(),
        functions: FUNCS.iter().map(|f| f.to_string()).collect(),
        devices: devs
            .iter()
            .enumerate()
            .map(|(i, &(hw, mask, cost, cap, lat, thr))| Device {
                id: format!("d{i}"),
                model: String::new(),
                kind: if hw {
                    DeviceKind::Hardware
                } else {
                    DeviceKind::Software
                },
                functions: FUNCS
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| mask >> j & 1 == 1)
                    .map(|(_, f)| f.to_string())
                    .collect(),
                cost,
                tcam_capacity: hw.then_some(cap),
                cpu_capacity: (!hw).then_some(cap),
                latency_us: lat,
                throughput_gbps: thr,
            })
            .collect(),
        vnf_instances: vnfs
            .iter()
            .enumerate()
            .map(|(i, &(f, tcam, cpu, lat, thr))| VnfInstance {
                id: format!("v{i}"),
                function: FUNCS[f].to_string(),
                tcam_need: tcam,
                cpu_need: cpu,
                latency_bound_us: lat,
                throughput_gbps: thr,
            })
            .collect(),
    }
}

fn raw_dev() -> impl Strategy<Value = RawDev> {
    (any::<bool>(), 1u8..4, 1u64..10, 4u64..20, 0u64..4, 2u64..12)
}

fn raw_vnf() -> impl Strategy<Value = RawVnf> {
    (0usize..2, 1u64..12, 1u64..12, 0u64..5, 0u64..6)
}

/// Minimum cost over all assignments (None if none is feasible).
fn brute_optimum(inst: &Instance) -> Option<u64> {
    let n = inst.vnf_instances.len();
    let nd = inst.devices.len();
    let mut a = vec![0usize; n];
    let mut best = None;
    loop {
        if let Ok(c) = validate::check(inst, &a) {
            best = Some(best.map_or(c, |b: u64| b.min(c)));
        }
        let mut i = 0;
        loop {
            if i == n {
                return best;
            }
            a[i] += 1;
            if a[i] < nd {
                break;
            }
            a[i] = 0;
            i += 1;
        }
    }
}

/// Best fit recomputed from scratch at every arrival: loads from the assignment so
/// far, every device scored, the maximum taken with the documented tie rule.
fn brute_best_fit(inst: &Instance) -> Option<Vec<usize>> {
    let mut assign: Vec<usize> = Vec::new();
    for v in &inst.vnf_instances {
        let mut cands: Vec<(usize, Fitness, bool)> = Vec::new();
        for (h, d) in inst.devices.iter().enumerate() {
            let on: Vec<usize> = (0..assign.len()).filter(|&m| assign[m] == h).collect();
            let used_need: u64 = on
                .iter()
                .map(|&m| inst.vnf_instances[m].need_on(d.kind))
                .sum();
            let used_thr: u64 = on
                .iter()
                .map(|&m| inst.vnf_instances[m].throughput_gbps)
                .sum();
            let free = d.capacity() - used_need;
            let free_thr = d.throughput_gbps - used_thr;
            if host_reject(d, v).is_none()
                && v.need_on(d.kind) <= free
                && v.throughput_gbps <= free_thr
            {
                cands.push((
                    h,
                    Fitness::new(v.need_on(d.kind), free, v.throughput_gbps, free_thr),
                    !on.is_empty(),
                ));
            }
        }
        cands.sort_by(|a, b| {
            b.1.cmp_exact(&a.1)
                .then(b.2.cmp(&a.2))
                .then(inst.devices[a.0].cost.cmp(&inst.devices[b.0].cost))
                .then(a.0.cmp(&b.0))
        });
        assign.push(cands.first()?.0);
    }
    Some(assign)
}

/// Fewest bins of capacity `cap` for `weights`, by trying every item in every open bin.
fn brute_bins(weights: &[u64], cap: u64) -> u64 {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn exact_is_optimal_on_tiny_instances(
        devs in proptest::collection::vec(raw_dev(), 1..5),
        vnfs in proptest::collection::vec(raw_vnf(), 1..6),
    ) {
        let inst = build(&devs, &vnfs);
        prop_assume!(inst.validate("prop").is_ok());
        let brute = brute_optimum(&inst);
        match place(&inst, Algorithm::Exact, Duration::from_secs(5)) {
            Ok(p) => {
                let cost = validate::check(&inst, &p.device_of);
                prop_assert_eq!(cost, Ok(p.objective));
                let opt = brute.expect("solver found a placement brute force did not");
                prop_assert!(p.bound <= opt, "bound {} above optimum {}", p.bound, opt);
                prop_assert_eq!(p.objective, opt);
                prop_assert!(p.proven_optimal);
                if let Ok(f) = place(&inst, Algorithm::Ffd, Duration::from_secs(1)) {
                    prop_assert!(p.objective <= f.objective);
                }
            }
            Err(_) => prop_assert!(brute.is_none() || place(&inst, Algorithm::Ffd, Duration::from_secs(1)).is_err()),
        }
    }

    #[test]
    fn exact_bin_packing_matches_brute_force(
        weights in proptest::collection::vec(1u64..=100, 1..9),
        cap in 100u64..=160,
    ) {
        let inst = nfx_placement::bpp::BppInstance { name: "prop".into(), capacity: cap, weights: weights.clone() }
            .to_instance();
        let opt = brute_bins(&weights, cap);
        let p = place(&inst, Algorithm::Exact, Duration::from_secs(5)).unwrap();
        prop_assert_eq!(validate::check(&inst, &p.device_of), Ok(p.objective));
        prop_assert!(p.bound <= opt, "bound {} above optimum {}", p.bound, opt);
        prop_assert_eq!(p.objective, opt);
        prop_assert!(p.proven_optimal);
    }

    #[test]
    fn online_equals_brute_force_best_fit(
        devs in proptest::collection::vec(raw_dev(), 1..6),
        vnfs in proptest::collection::vec(raw_vnf(), 1..10),
    ) {
        let inst = build(&devs, &vnfs);
        prop_assume!(inst.validate("prop").is_ok());
        let fast = place(&inst, Algorithm::Online, Duration::from_secs(1)).ok().map(|p| p.device_of);
        prop_assert_eq!(&fast, &brute_best_fit(&inst));
        if let Some(a) = fast {
            prop_assert!(validate::check(&inst, &a).is_ok());
        }
    }

    #[test]
    fn ffd_and_online_are_feasible_on_generated_instances(seed in 0u64..1000, n in 5usize..60) {
        let inst = nfx_placement::generator::generate(n, seed);
        for alg in [Algorithm::Ffd, Algorithm::Online] {
            let p = place(&inst, alg, Duration::from_secs(1)).unwrap();
            prop_assert_eq!(validate::check(&inst, &p.device_of), Ok(p.objective));
            prop_assert!(p.bound <= p.objective);
        }
    }
}

/// The instance without the devices that can host none of its VNF instances (they are
/// never used), so that brute force over the rest stays small.
fn hosting_devices_only(mut inst: Instance) -> Instance {
    let vnfs = inst.vnf_instances.clone();
    inst.devices
        .retain(|d| vnfs.iter().any(|v| host_reject(d, v).is_none()));
    inst
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    #[test]
    fn exact_is_optimal_on_tiny_family_instances(f in 0usize..6, seed in 0u64..10_000, n in 1usize..=4) {
        let inst = hosting_devices_only(Family::ALL[f].generate(n, seed));
        inst.validate("family").unwrap();
        let opt = brute_optimum(&inst).expect("generated instances are feasible");
        let p = place(&inst, Algorithm::Exact, Duration::from_secs(5)).unwrap();
        prop_assert_eq!(validate::check(&inst, &p.device_of), Ok(p.objective));
        prop_assert!(p.bound <= opt, "{}: bound {} above optimum {}", inst.name, p.bound, opt);
        prop_assert_eq!(p.objective, opt, "{}", inst.name);
        prop_assert!(p.proven_optimal);
    }
}

#[test]
fn exact_is_feasible_bounded_and_never_worse_than_ffd_on_every_family() {
    for f in Family::ALL {
        for seed in 0..2 {
            let inst = f.generate(24, seed);
            let e = place(&inst, Algorithm::Exact, Duration::from_secs(1)).unwrap();
            let ffd = place(&inst, Algorithm::Ffd, Duration::from_secs(1)).unwrap();
            assert_eq!(validate::check(&inst, &e.device_of), Ok(e.objective));
            assert!(e.objective <= ffd.objective, "{}", inst.name);
            assert!(e.bound <= e.objective, "{}", inst.name);
        }
    }
}

#[test]
fn exact_never_worse_than_ffd_on_generated_instances() {
    for seed in 0..4 {
        let inst = nfx_placement::generator::generate(30, seed);
        let e = place(&inst, Algorithm::Exact, Duration::from_secs(3)).unwrap();
        let f = place(&inst, Algorithm::Ffd, Duration::from_secs(1)).unwrap();
        assert_eq!(validate::check(&inst, &e.device_of), Ok(e.objective));
        assert!(
            e.objective <= f.objective,
            "seed {seed}: {} > {}",
            e.objective,
            f.objective
        );
        assert!(e.bound <= e.objective);
        assert_eq!(
            e.proven_optimal,
            e.bound == e.objective,
            "proven flag must match the bound"
        );
    }
}

#[test]
fn tie_rule_prefers_used_then_cheaper_devices() {
    // Both vnfs need nothing on the used dimension: fitness ties everywhere.
    let inst = build(
        &[
            (true, 1, 5, 10, 0, 10),
            (true, 1, 3, 10, 0, 10),
            (true, 1, 3, 10, 0, 10),
        ],
        &[(0, 0, 1, 9, 0), (0, 0, 1, 9, 0)],
    );
    let p = place(&inst, Algorithm::Online, Duration::from_secs(1)).unwrap();
    assert_eq!(p.device_of, vec![1, 1]);
    assert_eq!(
        Fitness::new(0, 3, 0, 2).cmp_exact(&Fitness::new(0, 9, 0, 9)),
        Ordering::Equal
    );
}
