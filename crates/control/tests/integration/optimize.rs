//! The `nfx place`/`nfx chain` projections and the offline optimum, through the
//! controller on the simulated VNFM (operations run synchronously here): the exported
//! inputs parse with the tools' own parsers and agree with the controller's plans; a
//! best-fit placement that packs the dear devices is re-placed on the cheap one with the
//! expected migrations; a migration that fails stops the run with the state consistent.

use nfx_control::controller::Controller;
use nfx_control::enforcer::Enforcer;
use nfx_control::mediator::{Mediator, VnfmMap};
use nfx_control::ops::OpState;
use nfx_control::store::Store;
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_control::vnfm::{InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError};
use nfx_model::service::Service;
use nfx_model::Infrastructure;
use nfx_placement::{place, Algorithm, Instance};
use std::sync::Arc;
use std::time::Duration;

/// One host, two small dear devices (listed first) and one big cheap one: best fit fills
/// the tightest device first, so the greedy placement pays for the two small ones.
const INFRA: &str = "
hosts: [{ id: h, cores: 16 }, { id: g, cores: 2 }]
devices:
  - { id: a, host: h, tier: software, functions: [f1, f2, f3, f4], latency_us: 30, throughput_gbps: 10, cpu_cores: 2, cost: 5 }
  - { id: b, host: h, tier: software, functions: [f1, f2, f3, f4], latency_us: 30, throughput_gbps: 10, cpu_cores: 2, cost: 5 }
  - { id: big, host: h, tier: software, functions: [f1, f2, f3, f4], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 3 }
  - { id: slow, host: h, tier: software, functions: [f1, f2, f3, f4], latency_us: 90, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
  - { id: far, host: g, tier: software, functions: [f1, f2, f3, f4], latency_us: 30, throughput_gbps: 10, cpu_cores: 2, cost: 1 }
links: [{ a: h, b: g, latency_us: 20 }]
";

/// The simulator, failing the deploy of new instances of one function (a migration's
/// first step) when told to.
struct Flaky {
    sim: SimVnfm,
    fail_new: Option<&'static str>,
}

impl Vnfm for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }
    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        if self.fail_new == Some(spec.function.as_str()) && spec.id.contains("-m") {
            return Err(VnfmError::Unavailable("device on fire".into()));
        }
        self.sim.deploy_instance(spec)
    }
    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        self.sim.destruct_instance(id)
    }
    fn configure_instance(
        &self,
        id: &str,
        c: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        self.sim.configure_instance(id, c)
    }
    fn migrate_instance(&self, o: &str, n: &str, f: &[String]) -> Result<MigrateReport, VnfmError> {
        self.sim.migrate_instance(o, n, f)
    }
    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        self.sim.get_instance_state(id)
    }
    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        self.sim.list_instances()
    }
}

fn setup(fail_new: Option<&'static str>) -> (Arc<Controller>, Arc<Enforcer>) {
    let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
    let enforcer = Arc::new(Enforcer::default());
    let vnfm = Arc::new(Flaky {
        sim: SimVnfm::new(&infra, SimConfig::default()).unwrap(),
        fail_new,
    });
    let med = Mediator::new(infra, VnfmMap::new(vnfm), enforcer.clone()).unwrap();
    let store = Store::open(std::path::Path::new(":memory:")).unwrap();
    (Controller::open(store, med).unwrap(), enforcer)
}

/// A service on host `h` through `functions` (no configs), 1 core and 1 Gbit/s each.
fn svc(id: &str, functions: &[&str]) -> Service {
    let chain: Vec<_> = functions
        .iter()
        .map(|f| serde_json::json!({"function": f}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "id": id, "tenant": "acme", "ingress": "h", "egress": "h", "chain": chain,
        "sla": {"max_latency_us": 500.0, "min_throughput_gbps": 1.0}
    }))
    .unwrap()
}

/// Where each recorded instance runs.
fn devices(ctl: &Controller) -> Vec<(String, String)> {
    let mut v: Vec<_> = ctl
        .instances()
        .unwrap()
        .into_iter()
        .map(|r| (r.spec.id, r.spec.device))
        .collect();
    v.sort();
    v
}

fn deploy_four(ctl: &Controller) {
    for (i, f) in ["f1", "f2", "f3", "f4"].iter().enumerate() {
        let op = ctl.deploy(svc(&format!("s{}", i + 1), &[f])).unwrap();
        assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    }
}

#[test]
fn the_exported_placement_parses_and_the_controllers_plan_is_one_of_its_solutions() {
    let (ctl, _) = setup(None);
    let s = svc("web", &["f1", "f2"]);
    let p = ctl.projection(std::slice::from_ref(&s)).unwrap();
    let text = serde_json::to_string_pretty(&p.placement).unwrap();
    let inst = Instance::from_json(&text, "exported.json").unwrap();
    assert_eq!(inst, p.placement);
    assert_eq!(inst.vnf_instances.len(), 2);
    assert_eq!(inst.vnf_instances[0].latency_bound_us, 500);
    assert_eq!(inst.vnf_instances[1].cpu_need, 1);
    assert_eq!(p.units.cpu, 1.0);
    let plan = ctl.plan(&s).unwrap();
    let greedy: Vec<usize> = plan
        .placements
        .iter()
        .map(|r| inst.devices.iter().position(|d| d.id == r.device).unwrap())
        .collect();
    assert_eq!(greedy.len(), 2, "{plan:?}");
    let greedy_cost = nfx_placement::validate::check(&inst, &greedy)
        .expect("the controller's placement is a solution of the projection");
    assert_eq!(greedy_cost, 5, "best fit packs both on device a");
    let exact = place(&inst, Algorithm::Exact, Duration::from_secs(5)).unwrap();
    assert!(exact.proven_optimal);
    assert_eq!(exact.objective, 1, "both fit on the cheapest device");
    assert!(exact.objective <= greedy_cost);
    deploy_four(&ctl);
    let p = ctl.projection(std::slice::from_ref(&s)).unwrap();
    let a = p.placement.devices.iter().find(|d| d.id == "a").unwrap();
    assert_eq!(
        (a.cost, a.cpu_capacity),
        (0, Some(0)),
        "a is full and paid for"
    );
    let mut tiny = svc("tiny", &["f1"]);
    tiny.chain[0].capacity_need = 0.5;
    let p = ctl.projection(&[tiny]).unwrap();
    assert_eq!(p.units.cpu, 10.0);
    assert_eq!(p.placement.vnf_instances[0].cpu_need, 5);
    let b = p.placement.devices.iter().find(|d| d.id == "big").unwrap();
    assert_eq!(b.cpu_capacity, Some(40));
    let mut bad = svc("bad", &["f9"]);
    bad.chain[0].capacity_need = 1.0;
    let e = ctl.projection(&[bad]).unwrap_err().to_string();
    assert!(e.contains("bad-0-f9"), "{e}");
}

/// An instance is sized to its first service, so a second service finds no room on
/// running instances: `nfx chain` on the export answers `infeasible_resources` and the
/// controller places every stage anew; with the instances the controller placed added,
/// `nfx chain` finds the controller's path and latency.
#[test]
fn the_exported_chaining_gives_the_controllers_path() {
    let (ctl, _) = setup(None);
    let op = ctl.deploy(svc("first", &["f1", "f2"])).unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    let second = svc("second", &["f1", "f2"]);
    let w = ctl
        .projection(std::slice::from_ref(&second))
        .unwrap()
        .chaining;
    let text = serde_json::to_string(&w).unwrap();
    let mut parsed: nfx_chaining::Workload = nfx_model::parse_json("exported.json", &text).unwrap();
    assert_eq!(parsed, w);
    assert_eq!(parsed.instances.len(), 2);
    let full = nfx_chaining::answer_workload("exported.json", &parsed).unwrap();
    assert_eq!(
        full.answers[0].status,
        nfx_chaining::Status::InfeasibleResources
    );
    let plan = ctl.plan(&second).unwrap();
    assert_eq!(plan.placements.len(), 2, "{plan:?}");
    for (_, row) in &plan.instances {
        let r = row.as_ref().unwrap();
        parsed.instances.push(nfx_chaining::InstanceSpec {
            id: r.spec.id.as_str().into(),
            function: r.spec.function.as_str().into(),
            node: r.host.as_str().into(),
            kind: r.tier.as_str().into(),
            processing_latency_us: r.latency_us,
            throughput_total_gbps: r.spec.throughput_gbps,
            throughput_used_gbps: 0.0,
            capacity_total: r.spec.capacity,
            capacity_used: 0.0,
        });
    }
    let report = nfx_chaining::answer_workload("exported.json", &parsed).unwrap();
    let ans = &report.answers[0];
    assert_eq!(ans.status, nfx_chaining::Status::Ok, "{ans:?}");
    let hops: Vec<String> = plan.paths[0]
        .1
        .as_ref()
        .unwrap()
        .hops
        .iter()
        .map(|h| h.instance.clone())
        .collect();
    let path: Vec<String> = ans.path.iter().map(|i| i.to_string()).collect();
    assert_eq!(path, hops);
    assert_eq!(ans.latency_us, plan.latency_us);
}

#[test]
fn optimize_moves_the_greedy_placement_onto_the_cheap_device() {
    let (ctl, enforcer) = setup(None);
    deploy_four(&ctl);
    let before = devices(&ctl);
    let on: Vec<&str> = before.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(on, ["a", "a", "b", "b"], "best fit packs a, then b");
    let plan = ctl.optimize_plan(Duration::from_secs(5)).unwrap();
    assert_eq!(plan.cost_now, 10.0);
    assert_eq!(plan.cost_optimal, 3.0);
    assert_eq!((plan.bound, plan.gap, plan.saved), (3.0, 0.0, 7.0));
    assert!(plan.proven_optimal);
    assert_eq!((plan.movable, plan.pinned), (4, 0));
    let moves: Vec<(String, String, String)> = plan
        .migrations
        .iter()
        .map(|m| (m.instance.clone(), m.from.clone(), m.to.clone()))
        .collect();
    let want: Vec<(String, String, String)> = before
        .iter()
        .map(|(i, d)| (i.clone(), d.clone(), "big".to_string()))
        .collect();
    assert_eq!(moves, want, "slow is too slow and far is another host");
    assert!(plan.blocked.is_empty());
    assert_eq!(devices(&ctl), before, "the dry run changes nothing");
    let run = ctl.optimize(Duration::from_secs(5)).unwrap();
    assert_eq!(run.error, None);
    assert_eq!(run.operations.len(), 4);
    assert!(run
        .operations
        .iter()
        .all(|o| o.state == OpState::Completed && o.target.starts_with('s')));
    let after = devices(&ctl);
    assert!(after.iter().all(|(_, d)| d == "big"), "{after:?}");
    for s in ["s1", "s2", "s3", "s4"] {
        let hops = enforcer.path(s).unwrap();
        assert_eq!(
            hops[0].device, "big",
            "{s} is steered through its new instance"
        );
    }
    let again = ctl.optimize_plan(Duration::from_secs(5)).unwrap();
    assert_eq!((again.cost_now, again.cost_optimal), (3.0, 3.0));
    assert!(again.migrations.is_empty());
}

#[test]
fn a_failed_migration_stops_the_run_with_the_state_consistent() {
    let (ctl, enforcer) = setup(Some("f3"));
    deploy_four(&ctl);
    let before = devices(&ctl);
    let run = ctl.optimize(Duration::from_secs(5)).unwrap();
    let err = run.error.clone().unwrap();
    assert!(
        err.contains("s3-f3-1") && err.contains("device on fire"),
        "{err}"
    );
    let states: Vec<OpState> = run.operations.iter().map(|o| o.state).collect();
    assert_eq!(
        states,
        [OpState::Completed, OpState::Completed, OpState::RolledBack],
        "the fourth move is not tried"
    );
    let after = devices(&ctl);
    let on: Vec<&str> = after.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(on, ["big", "big", "b", "b"], "{after:?}");
    assert_eq!(after[2].0, before[2].0, "s3 keeps its instance");
    assert!(ctl
        .instances()
        .unwrap()
        .iter()
        .all(|r| r.status == "running"));
    assert_eq!(enforcer.path("s3").unwrap()[0].device, "b");
    let plan = ctl.optimize_plan(Duration::from_secs(5)).unwrap();
    assert_eq!(plan.cost_now, 8.0);
    assert_eq!(plan.migrations.len(), 2, "what is left: {plan:?}");
}
