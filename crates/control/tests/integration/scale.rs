//! The scale workload as a correctness test (its timing is `nfx bench control`): on 200
//! simulated hosts, mixed 6-function services are planned and committed one after the
//! other (with some destroyed on the way); every path's latency is recomputed from the
//! infrastructure and meets its bound, refusals carry the chaining explanation, and the
//! resource model kept by the commits equals one a fresh mediator rebuilds from the rows.

use nfx_control::enforcer::Enforcer;
use nfx_control::mediator::{InstanceRow, Mediator, PlanError, VnfmMap};
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

/// A star of 200 hosts around h0 (spoke i is i µs away) with two running firewalls: a
/// slow one (1,000 µs) on spoke 1 and a fast one (1 µs) on spoke 150. Under a 500 µs
/// bound the 128 hosts nearest h0 hold no chain (only the slow firewall, and placing
/// more there cannot help); hosts left out may cost as little as 129 + 129 + 1 µs, so
/// that answer is not certified, and the planner widens and answers with the fast
/// firewall through spoke 150 (301 µs), as the unrestricted planner does.
#[test]
fn an_uncertified_capped_answer_widens_to_the_exact_one() {
    let mut y = String::from("hosts:\n");
    for i in 0..=200 {
        y.push_str(&format!("  - {{ id: h{i}, cores: 16 }}\n"));
    }
    y.push_str("devices:\n");
    y.push_str("  - { id: slow, host: h1, tier: software, functions: [firewall], latency_us: 1000, throughput_gbps: 20, cpu_cores: 16, cost: 1 }\n");
    y.push_str("  - { id: fast, host: h150, tier: software, functions: [firewall], latency_us: 1, throughput_gbps: 20, cpu_cores: 16, cost: 1 }\n");
    y.push_str("links:\n");
    for i in 1..=200 {
        y.push_str(&format!("  - {{ a: h0, b: h{i}, latency_us: {i} }}\n"));
    }
    let infra = Infrastructure::from_yaml("<star>", &y).unwrap();
    let svc: nfx_model::service::Service = serde_yaml_ng::from_str(
        "{ id: s, tenant: t, ingress: h0, egress: h0, chain: [{ function: firewall }], sla: { max_latency_us: 500, min_throughput_gbps: 1 } }",
    )
    .unwrap();
    let config = serde_json::to_value(&svc.chain[0].config).unwrap();
    let row = |id: &str, device: &str, host: &str, latency_us: f64| {
        let spec = nfx_control::vnfm::InstanceSpec {
            id: id.into(),
            function: "firewall".into(),
            device: device.into(),
            config: config.clone(),
            throughput_gbps: 1.0,
            capacity: 1.0,
        };
        let r = InstanceRow {
            spec,
            host: host.into(),
            tier: Tier::Software,
            latency_us,
            status: "running".into(),
            users: Vec::new(),
        };
        (id.to_string(), r)
    };
    let mut med = mediator(&infra);
    let rows = [
        row("fw-slow", "slow", "h1", 1000.0),
        row("fw-fast", "fast", "h150", 1.0),
    ];
    med.load(rows.into_iter().collect(), Default::default())
        .unwrap();
    let capped = med.plan_deploy_within(&svc, 128).unwrap_err().to_string();
    assert!(capped.contains("no chain meets the SLA"), "{capped}");
    assert_eq!(med.widenings(), 0);
    let exact = med.plan_deploy(&svc).unwrap();
    assert_eq!(exact.latency_us, Some(301.0));
    assert_eq!(
        exact.paths[0].1.as_ref().unwrap().hops[0].instance,
        "fw-fast"
    );
    assert_eq!(med.widenings(), 1);
    let unrestricted = med.plan_deploy_within(&svc, usize::MAX).unwrap();
    assert_eq!(unrestricted.latency_us, exact.latency_us);
}

/// Hosts the cap leaves out cannot beat an answer no slower than their floor: the
/// capped answer is certified and no widening happens.
#[test]
fn a_certified_capped_answer_is_kept() {
    let infra = synthetic_infra(1000).unwrap();
    let mut med = mediator(&infra);
    let svc = scale_service(0, 1000, false).unwrap();
    let capped = med.plan_deploy_within(&svc, nfx_control::mediator::MAX_CHAIN_NODES);
    let planned = med.plan_deploy(&svc);
    let unrestricted = med.plan_deploy_within(&svc, usize::MAX);
    let lat = |r: &Result<nfx_control::mediator::Plan, PlanError>| {
        r.as_ref().ok().and_then(|p| p.latency_us)
    };
    assert_eq!(lat(&planned), lat(&unrestricted));
    if med.widenings() == 0 {
        assert_eq!(lat(&planned), lat(&capped));
    }
}
