//! The mediator's decision tree on the simulated VNFM, through the controller (operations
//! run synchronously here): software when it meets the SLA, the faster tier otherwise;
//! destroy withdraws the steering before any instance is destroyed; migrate calls the
//! VNFM in the order deploy, configure, migrate, (re-steer), destruct; a failing deploy
//! rolls back.

use crate::common::INFRA;
use nfx_control::controller::Controller;
use nfx_control::enforcer::Enforcer;
use nfx_control::mediator::{Mediator, VnfmMap};
use nfx_control::ops::OpState;
use nfx_control::store::Store;
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_control::vnfm::{InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError};
use nfx_model::service::Service;
use nfx_model::Infrastructure;
use std::sync::{Arc, Mutex};

/// Wraps the simulator, logs every call with the steering in force at that moment, and
/// can be told to fail deploys of one function.
struct Recorder {
    sim: SimVnfm,
    enforcer: Arc<Enforcer>,
    log: Mutex<Vec<String>>,
    fail_function: Option<String>,
}

impl Recorder {
    fn note(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
}

impl Vnfm for Recorder {
    fn kind(&self) -> &'static str {
        "recorder"
    }
    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        self.note(format!("deploy {}", spec.id));
        if self.fail_function.as_deref() == Some(spec.function.as_str()) {
            return Err(VnfmError::Unavailable("device on fire".into()));
        }
        self.sim.deploy_instance(spec)
    }
    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        let users = self.enforcer.services_using(id);
        self.note(format!("destruct {id} (steered by {users:?})"));
        self.sim.destruct_instance(id)
    }
    fn configure_instance(
        &self,
        id: &str,
        c: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        self.note(format!("configure {id}"));
        self.sim.configure_instance(id, c)
    }
    fn migrate_instance(&self, o: &str, n: &str, f: &[String]) -> Result<MigrateReport, VnfmError> {
        self.note(format!("migrate {o} -> {n}"));
        self.sim.migrate_instance(o, n, f)
    }
    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        self.sim.get_instance_state(id)
    }
    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        self.sim.list_instances()
    }
}

fn setup(fail: Option<&str>) -> (Arc<Controller>, Arc<Recorder>, Arc<Enforcer>) {
    let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
    let enforcer = Arc::new(Enforcer::default());
    let rec = Arc::new(Recorder {
        sim: SimVnfm::new(&infra, SimConfig::default()).unwrap(),
        enforcer: enforcer.clone(),
        log: Mutex::new(Vec::new()),
        fail_function: fail.map(String::from),
    });
    let med = Mediator::new(infra, VnfmMap::new(rec.clone()), enforcer.clone()).unwrap();
    let ctl =
        Controller::open(Store::open(std::path::Path::new(":memory:")).unwrap(), med).unwrap();
    (ctl, rec, enforcer)
}

fn svc(id: &str, ingress: &str, egress: &str, bound: f64) -> Service {
    serde_json::from_value(crate::common::service(id, ingress, egress, bound)).unwrap()
}

#[test]
fn software_when_it_meets_the_sla_table_tier_otherwise() {
    let (ctl, _, _) = setup(None);
    let plan = ctl.plan(&svc("slow", "edge", "cloud", 500.0)).unwrap();
    assert!(
        plan.placements
            .iter()
            .all(|p| p.tier == nfx_model::Tier::Software),
        "{plan:?}"
    );
    assert!(plan.placements[0]
        .reason
        .contains("software tier meets the SLA"));
    let plan = ctl.plan(&svc("fast", "edge", "edge", 20.0)).unwrap();
    assert_eq!(plan.placements.len(), 2);
    for p in &plan.placements {
        assert_eq!(p.device, "tt-edge");
        assert!(p.reason.contains("no software device"), "{}", p.reason);
    }
    assert!(plan.latency_us.unwrap() <= 20.0);
    assert!(ctl.instances().unwrap().is_empty(), "plan must not reserve");
}

/// A function that falls back to the table tier (no software device meets the budget)
/// takes its table entries there, as a pinned one does, not its `capacity_need`; a
/// configuration the table tier cannot hold is kept off it.
#[test]
fn a_table_fallback_reserves_the_functions_entries() {
    let (ctl, _, _) = setup(None);
    let op = ctl.deploy(svc("fast", "edge", "edge", 20.0)).unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    // firewall: 1 rule + 262,144 flows; NAT: 2 × 262,144 mappings.
    let used = |ctl: &Controller| {
        ctl.with_mediator(|m| {
            let d = m
                .model()
                .devices()
                .iter()
                .find(|d| d.id == "tt-edge")
                .unwrap();
            d.capacity.used
        })
    };
    assert_eq!(used(&ctl), 262_145.0 + 524_288.0);
    let again = ctl.plan(&svc("fast2", "edge", "edge", 20.0)).unwrap_err();
    assert!(
        again.to_string().contains("no chain meets the SLA"),
        "{again}"
    );
    let mut big: Service = svc("big", "edge", "edge", 20.0);
    big.chain[0].config = serde_yaml_ng::from_str("{ max_flows_per_source: 5 }").unwrap();
    let e = ctl.plan(&big).unwrap_err();
    assert!(e.to_string().contains("no chain meets the SLA"), "{e}");
    ctl.destroy("fast").unwrap();
    assert_eq!(used(&ctl), 0.0);
}

#[test]
fn destroy_steers_away_before_destroying() {
    let (ctl, rec, enforcer) = setup(None);
    let op = ctl.deploy(svc("web", "edge", "cloud", 500.0)).unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    assert!(enforcer.path("web").is_some());
    let op = ctl.destroy("web").unwrap();
    assert_eq!(ctl.operation(&op.id).unwrap().state, OpState::Completed);
    let log = rec.log.lock().unwrap().clone();
    let destructs: Vec<&String> = log.iter().filter(|l| l.starts_with("destruct")).collect();
    assert_eq!(destructs.len(), 2, "{log:?}");
    for d in destructs {
        assert!(
            d.ends_with("(steered by [])"),
            "destroyed while still steered: {d}"
        );
    }
    assert!(enforcer.log().last().unwrap().starts_with("withdraw web"));
    assert!(rec.list_instances().unwrap().is_empty());
}

#[test]
fn migrate_order_deploy_configure_move_resteer_destroy() {
    let (ctl, rec, enforcer) = setup(None);
    ctl.deploy(svc("web", "edge", "edge", 500.0)).unwrap();
    let old = enforcer.path("web").unwrap()[0].instance.clone();
    rec.sim.inject_flows(&old, 1000).unwrap();
    rec.log.lock().unwrap().clear();
    let op = ctl.migrate(&old, Some("sw-edge2")).unwrap();
    let op = ctl.operation(&op.id).unwrap();
    assert_eq!(op.state, OpState::Completed, "{op:?}");
    let new = enforcer.path("web").unwrap()[0].instance.clone();
    assert_ne!(new, old);
    let log = rec.log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec![
            format!("deploy {new}"),
            format!("configure {new}"),
            format!("migrate {old} -> {new}"),
            format!("destruct {old} (steered by [])"),
        ]
    );
    assert_eq!(rec.sim.get_instance_state(&new).unwrap().flows, 1000);
    assert_eq!(rec.sim.get_instance_state(&new).unwrap().device, "sw-edge2");
    let e = ctl.migrate("nope", None).unwrap_err();
    assert!(e.to_string().contains("unknown instance"));
    let e = ctl.migrate(&new, Some("tt-edge")).unwrap_err();
    assert!(e.to_string().contains("moves within one tier"), "{e}");
}

/// The firewall of an edge → edge service moves to the cloud host: the path is
/// re-steered through it (its latency recomputed, 100 µs within the bound of 500) and
/// the flows are copied twice, before the re-steer and after it (the final copy); a
/// bound the new path would break is refused naming the service; a NAT is refused.
#[test]
fn a_migration_to_another_host_checks_the_sla_and_copies_after_the_resteer() {
    let (ctl, rec, enforcer) = setup(None);
    ctl.deploy(svc("web", "edge", "edge", 500.0)).unwrap();
    let path = enforcer.path("web").unwrap();
    let (old, nat) = (path[0].instance.clone(), path[1].instance.clone());
    assert_eq!(ctl.with_mediator(|m| m.paths()["web"].latency_us), 60.0);
    rec.sim.inject_flows(&old, 1000).unwrap();
    rec.log.lock().unwrap().clear();
    let op = ctl.migrate(&old, Some("sw-cloud")).unwrap();
    let op = ctl.operation(&op.id).unwrap();
    assert_eq!(op.state, OpState::Completed, "{op:?}");
    let path = enforcer.path("web").unwrap();
    let new = path[0].instance.clone();
    assert_eq!(
        (path[0].host.as_str(), path[0].device.as_str()),
        ("cloud", "sw-cloud")
    );
    assert_eq!(
        rec.log.lock().unwrap().clone(),
        vec![
            format!("deploy {new}"),
            format!("configure {new}"),
            format!("migrate {old} -> {new}"),
            format!("migrate {old} -> {new}"),
            format!("destruct {old} (steered by [])"),
        ]
    );
    let labels: Vec<String> = op.steps.iter().map(|s| s.step.label()).collect();
    assert!(
        labels.contains(&format!("final copy {old} -> {new}")),
        "{labels:?}"
    );
    assert_eq!(rec.sim.get_instance_state(&new).unwrap().flows, 1000);
    // edge → cloud 20, firewall 30, cloud → edge 20, NAT 30.
    assert_eq!(ctl.with_mediator(|m| m.paths()["web"].latency_us), 100.0);
    let e = ctl.migrate(&nat, Some("sw-cloud")).unwrap_err().to_string();
    assert!(
        e.contains("is a NAT") && e.contains("public address"),
        "{e}"
    );

    ctl.deploy(svc("tight", "edge", "edge", 90.0)).unwrap();
    let fw = enforcer.path("tight").unwrap()[0].clone();
    assert_eq!(fw.host, "edge");
    let e = ctl
        .migrate(&fw.instance, Some("sw-cloud"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("would break the SLA of service tight") && e.contains("100.000 µs"),
        "{e}"
    );
    assert_eq!(enforcer.path("tight").unwrap()[0], fw);
}

/// Two hosts served by two VNFMs: the flows travel by export and import, which the
/// simulator does not offer, so the move fails at its first copy and rolls back: the
/// new instance is destroyed, the old one keeps serving the unchanged path.
#[test]
fn a_failed_move_to_another_host_leaves_the_old_instance_serving() {
    let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
    let enforcer = Arc::new(Enforcer::default());
    let edge = Arc::new(SimVnfm::new(&infra, SimConfig::default()).unwrap());
    let cloud = Arc::new(SimVnfm::new(&infra, SimConfig::default()).unwrap());
    let mut map = VnfmMap::new(edge.clone());
    map.set("cloud", cloud.clone());
    let med = Mediator::new(infra, map, enforcer.clone()).unwrap();
    let ctl =
        Controller::open(Store::open(std::path::Path::new(":memory:")).unwrap(), med).unwrap();
    ctl.deploy(svc("web", "edge", "edge", 500.0)).unwrap();
    let before = enforcer.path("web").unwrap();
    let old = before[0].instance.clone();
    let op = ctl.migrate(&old, Some("sw-cloud")).unwrap();
    let op = ctl.operation(&op.id).unwrap();
    assert_eq!(op.state, OpState::RolledBack, "{op:?}");
    assert!(
        op.error
            .as_deref()
            .unwrap()
            .contains("exports no flow state"),
        "{op:?}"
    );
    assert_eq!(enforcer.path("web").unwrap(), before);
    assert_eq!(edge.get_instance_state(&old).unwrap().status, "running");
    assert!(cloud.list_instances().unwrap().is_empty());
    let rows = ctl.instances().unwrap();
    assert!(
        rows.iter()
            .any(|r| r.spec.id == old && r.status == "running"),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
}

#[test]
fn failed_deploy_rolls_back_everything() {
    let (ctl, rec, enforcer) = setup(Some("nat"));
    let op = ctl.deploy(svc("web", "edge", "cloud", 500.0)).unwrap();
    let op = ctl.operation(&op.id).unwrap();
    assert_eq!(op.state, OpState::RolledBack, "{op:?}");
    assert!(op.error.as_deref().unwrap().contains("device on fire"));
    assert!(rec.list_instances().unwrap().is_empty());
    assert!(ctl.instances().unwrap().is_empty());
    assert!(enforcer.path("web").is_none());
    assert_eq!(ctl.services().unwrap()[0].status, "failed");
    ctl.with_mediator(|m| {
        assert!(m.model().instances().is_empty());
        assert!(m.model().devices().iter().all(|d| d.capacity.used == 0.0));
    });
    let op = ctl.destroy("web").unwrap();
    assert_eq!(op.state, OpState::Completed);
    assert!(ctl.services().unwrap().is_empty());
}

/// Each function of a chain reserves its own `capacity_need`, in its own tier's units:
/// the shipped example's firewall takes its table entries (2 rules + 4,000 flows) on the
/// edge's table tier, its NAT and DPI one core each, on the shipped infrastructure whose
/// software devices have one core. With one need applied to every hop (the largest), no
/// software device could take the NAT or the DPI and the service did not plan.
#[test]
fn shipped_examples_plan_with_a_capacity_need_per_function() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/examples");
    let infra = Infrastructure::load(&dir.join("infrastructure.yaml")).unwrap();
    let set = nfx_model::ServiceSet::load(&dir.join("services.yaml"), &infra).unwrap();
    let sim = Arc::new(SimVnfm::new(&infra, SimConfig::default()).unwrap());
    let med = Mediator::new(infra, VnfmMap::new(sim), Arc::new(Enforcer::default())).unwrap();
    let ctl =
        Controller::open(Store::open(std::path::Path::new(":memory:")).unwrap(), med).unwrap();
    for s in &set.services {
        let plan = ctl.plan(s).unwrap_or_else(|e| panic!("{}: {e}", s.id));
        let path = plan.paths[0].1.as_ref().unwrap();
        let want: Vec<f64> = s.chain.iter().map(|c| c.capacity_need).collect();
        assert_eq!(path.capacities, want, "{}", s.id);
    }
    let web = set.services.iter().find(|s| s.id == "web-acme").unwrap();
    let plan = ctl.plan(web).unwrap();
    let tier = |f: &str| {
        plan.placements
            .iter()
            .find(|p| p.function == f)
            .map(|p| p.tier)
            .unwrap()
    };
    assert_eq!(tier("firewall"), nfx_model::Tier::Table, "{plan:?}");
    assert_eq!(tier("nat"), nfx_model::Tier::Software, "{plan:?}");
}
