//! The scale workload as a correctness test (its timing is `nfx bench control`): on 200
//! simulated hosts, mixed 6-function services are planned and committed one after the
//! other (with some destroyed on the way); every path's latency is recomputed from the
//! infrastructure and meets its bound, refusals carry the chaining explanation, and the
//! resource model kept by the commits equals one a fresh mediator rebuilds from the rows.

use nfx_control::enforcer::Enforcer;
use nfx_control::mediator::{Mediator, PlanError, VnfmMap};
use nfx_control::scale::{run, scale_service, synthetic_infra, ScaleOptions};
use nfx_control::topology::transfer_matrix;
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_model::{Infrastructure, Tier};
use std::sync::Arc;

fn mediator(infra: &Infrastructure) -> Mediator {
    let sim = Arc::new(SimVnfm::new(infra, SimConfig::default()).unwrap());
    Mediator::new(
        infra.clone(),
        VnfmMap::new(sim),
        Arc::new(Enforcer::default()),
    )
    .unwrap()
}

#[test]
fn paths_meet_bounds_and_commits_equal_a_rebuild() {
    const HOSTS: usize = 200;
    let infra = synthetic_infra(HOSTS).unwrap();
    let transfer = transfer_matrix(&infra, f64::INFINITY);
    let host = |h: &str| infra.host_index(h).unwrap();
    let mut med = mediator(&infra);
    let (mut ok, mut refused, mut destroyed) = (0, 0, 0);
    let mut tiers = std::collections::HashSet::new();
    for s in 0..90 {
        let svc = scale_service(s, HOSTS, true).unwrap();
        match med.plan_deploy(&svc) {
            Ok(plan) => {
                let path = plan.paths[0].1.as_ref().unwrap();
                let mut at = host(&svc.ingress);
                let mut lat = 0.0;
                for (hop, f) in path.hops.iter().zip(&svc.chain) {
                    assert_eq!(hop.function, f.function);
                    let row = plan
                        .instances
                        .iter()
                        .find(|(id, _)| *id == hop.instance)
                        .and_then(|(_, r)| r.clone())
                        .unwrap();
                    lat += transfer[at][host(&row.host)] + row.latency_us;
                    at = host(&row.host);
                    tiers.insert(row.tier);
                }
                lat += transfer[at][host(&svc.egress)];
                let told = plan.latency_us.unwrap();
                assert!((lat - told).abs() < 1e-6, "{}: {lat} vs {told}", svc.id);
                assert!(told <= svc.sla.max_latency_us, "{}", svc.id);
                med.apply_rows(&plan.instances, &plan.paths).unwrap();
                ok += 1;
            }
            Err(PlanError::Conflict(why)) => {
                assert!(why.contains("no chain meets the SLA"), "{why}");
                refused += 1;
            }
            Err(e) => panic!("{}: {e}", svc.id),
        }
        if s % 9 == 8 {
            let victim = med.paths().keys().next().cloned().unwrap();
            let plan = med.plan_destroy(&victim).unwrap();
            med.apply_rows(&plan.instances, &plan.paths).unwrap();
            destroyed += 1;
        }
    }
    assert!(ok > 20 && refused > 5 && destroyed == 10, "{ok} {refused}");
    assert!(tiers.contains(&Tier::Table), "{tiers:?}");
    let mut fresh = mediator(&infra);
    fresh
        .load(med.instances().clone(), med.paths().clone())
        .unwrap();
    assert_eq!(med.model().devices(), fresh.model().devices());
    let sorted = |m: &Mediator| {
        let mut v = m.model().instances().to_vec();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    };
    assert_eq!(sorted(&med), sorted(&fresh));
}

#[test]
fn capped_and_unrestricted_planners_agree_when_the_cap_does_not_bind() {
    let opts = ScaleOptions {
        hosts: 100,
        services: 30,
        mixed: true,
        baseline: true,
    };
    let r = run(&opts).unwrap();
    assert_eq!(r.feasible + r.infeasible, 30);
    assert!(r.feasible > 0 && r.infeasible > 0, "{r:?}");
    let a = r.agreement.unwrap();
    assert_eq!(a.same, 30, "{a:?}");
}
