//! The controller: orchestrator requests in, operations out. It plans through the
//! mediator, journals every operation and step in the state database before acting, runs
//! operations one at a time on an executor thread, and after a restart reconciles with the
//! agents and finishes or rolls back whatever was in flight.

use crate::mediator::{InstanceRow, Mediator, PathRow, PlacementRecord, Plan, PlanError};
use crate::ops::{OpKind, OpState, Operation, Step, StepStatus};
use crate::store::{EventRecord, Store, StoreError, Table, Write};
use crate::vnfm::{InstanceState, VnfmError};
use nfx_model::service::{ChainFunction, Service};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// A service as recorded: the request, its status and the operation that last acted on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRow {
    /// The request as submitted.
    pub service: Service,
    /// `deploying`, `active`, `destroying` or `failed`.
    pub status: String,
    /// Last operation id.
    pub operation: String,
}

/// `GET /api/v1/services/{id}`: the service's record and its chained path (none while it
/// is not placed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// The record, its fields inline.
    #[serde(flatten)]
    pub row: ServiceRow,
    /// Its path and what it reserved on each hop.
    pub path: Option<PathRow>,
}

/// `GET /api/v1/instances/{id}`: the instance's record, why it was placed there, which
/// kind of VNFM serves it, and its live state — or why its VNFM could not give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// The record, its fields inline.
    #[serde(flatten)]
    pub row: InstanceRow,
    /// The placement decision (none for an instance recorded before placements were).
    pub placement: Option<PlacementRecord>,
    /// `remote` (an agent's real workers) or `simulated`.
    pub vnfm: String,
    /// Identity, configuration generation and counters from its VNFM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<InstanceState>,
    /// Why the VNFM did not answer with the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_error: Option<String>,
}

/// Errors of controller calls, mapped onto HTTP statuses by the API.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Bad input (400).
    #[error("{0}")]
    BadRequest(String),
    /// Unknown id (404).
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with the current state (409).
    #[error("{0}")]
    Conflict(String),
    /// Infrastructure or database failure (503/500).
    #[error("{0}")]
    Internal(String),
}

impl From<PlanError> for CtlError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::NotFound(m) => CtlError::NotFound(m),
            PlanError::Conflict(m) => CtlError::Conflict(m),
            PlanError::Invalid(m) => CtlError::BadRequest(m),
        }
    }
}

impl From<StoreError> for CtlError {
    fn from(e: StoreError) -> Self {
        CtlError::Internal(e.to_string())
    }
}

/// The controller core (shared by the REST handlers and the executor thread).
pub struct Controller {
    store: Store,
    med: Mutex<Mediator>,
    queue: Mutex<Option<mpsc::Sender<String>>>,
    seq: AtomicU64,
    /// Each agent's latest energy figures (from its heartbeat).
    energy: Mutex<BTreeMap<String, crate::energy::HostFigures>>,
    /// The power manager's knob setting per worker (empty when it is off).
    power: Mutex<Vec<crate::power_manager::WorkerSetting>>,
}

fn rows_json<T: Serialize>(rows: &[(String, Option<T>)]) -> serde_json::Value {
    serde_json::to_value(rows).unwrap_or_default()
}

impl Controller {
    /// Loads the state database into the mediator (no operation is resumed yet: call
    /// [`Controller::recover`]).
    pub fn open(store: Store, mut med: Mediator) -> Result<Arc<Self>, CtlError> {
        let instances: Vec<InstanceRow> = store.list(Table::Instances)?;
        let paths: Vec<PathRow> = store.list(Table::Paths)?;
        let instances: BTreeMap<String, InstanceRow> = instances
            .into_iter()
            .map(|r| (r.spec.id.clone(), r))
            .collect();
        let paths: BTreeMap<String, PathRow> =
            paths.into_iter().map(|p| (p.service.clone(), p)).collect();
        for p in paths.values() {
            med.enforcer().load(&p.service, &p.hops, p.ends.as_ref());
        }
        med.load(instances, paths)?;
        let ops: Vec<Operation> = store.list(Table::Operations)?;
        let seq = ops
            .iter()
            .filter_map(|o| o.id.strip_prefix("op-").and_then(|n| n.parse::<u64>().ok()))
            .max()
            .unwrap_or(0);
        Ok(Arc::new(Controller {
            store,
            med: Mutex::new(med),
            queue: Mutex::new(None),
            seq: AtomicU64::new(seq),
            energy: Mutex::default(),
            power: Mutex::default(),
        }))
    }

    /// The state database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn med(&self) -> std::sync::MutexGuard<'_, Mediator> {
        self.med.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with the mediator locked (read access for status and tests).
    pub fn with_mediator<T>(&self, f: impl FnOnce(&Mediator) -> T) -> T {
        f(&self.med())
    }

    /// Starts the executor thread; operations submitted before run synchronously.
    pub fn start_executor(self: &Arc<Self>) {
        let (tx, rx) = mpsc::channel::<String>();
        *self.queue.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let me = Arc::downgrade(self);
        std::thread::spawn(move || {
            while let Ok(id) = rx.recv() {
                let Some(c) = me.upgrade() else { break };
                if let Err(e) = c.run(&id) {
                    log::error!("operation {id}: {e}");
                }
            }
        });
    }

    /// Reconciles after a (re)start: resumes unfinished operations, then compares the
    /// recorded instances with what the agents hold (orphans are destroyed, missing ones
    /// reported). Returns a summary.
    pub fn recover(&self) -> Result<serde_json::Value, CtlError> {
        let ops: Vec<Operation> = self.store.list(Table::Operations)?;
        let mut resumed = Vec::new();
        for mut op in ops.into_iter().filter(|o| !o.state.is_final()) {
            op.recovered = true;
            self.store.batch(&[
                Write::Put(
                    Table::Operations,
                    op.id.clone(),
                    serde_json::to_value(&op).unwrap_or_default(),
                ),
                Write::Event(
                    "operation.recovered".into(),
                    serde_json::json!({"operation": op.id, "state": op.state.as_str()}),
                ),
            ])?;
            self.run(&op.id)?;
            resumed.push(op.id);
        }
        let (vnfms, recorded) = {
            let m = self.med();
            (m.vnfms().all(), m.instances().clone())
        };
        let mut orphans = Vec::new();
        let mut seen = Vec::new();
        let mut unreachable = Vec::new();
        for v in vnfms {
            let ids = match v.list_instances() {
                Ok(ids) => ids,
                // A host agent that is down is handled by the heartbeat monitor.
                Err(VnfmError::Unavailable(e)) if v.kind() == "remote" => {
                    unreachable.push(e);
                    continue;
                }
                Err(e) => return Err(CtlError::Internal(e.to_string())),
            };
            for id in ids {
                if recorded.contains_key(&id) {
                    seen.push(id);
                } else {
                    v.destruct_instance(&id)
                        .map_err(|e| CtlError::Internal(e.to_string()))?;
                    orphans.push(id);
                }
            }
        }
        let missing: Vec<String> = recorded
            .iter()
            .filter(|(id, r)| r.status == "running" && !seen.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        let summary = serde_json::json!({
            "resumed_operations": resumed,
            "orphans_destroyed": orphans,
            "missing_instances": missing,
            "unreachable_agents": unreachable,
        });
        self.store.batch(&[Write::Event(
            "controller.reconciled".into(),
            summary.clone(),
        )])?;
        Ok(summary)
    }

    fn next_op_id(&self) -> String {
        format!("op-{}", self.seq.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Dry run: the plan a deploy would carry out (nothing is reserved or recorded).
    pub fn plan(&self, svc: &Service) -> Result<Plan, CtlError> {
        check_service(svc)?;
        let mut m = self.med();
        let before = (m.instances().clone(), m.paths().clone());
        let plan = m.plan_deploy(svc);
        m.load(before.0, before.1)?;
        Ok(plan?)
    }

    /// Accepts a service: plans it and journals the operation; returns the operation.
    pub fn deploy(&self, svc: Service) -> Result<Operation, CtlError> {
        check_service(&svc)?;
        if self
            .store
            .get::<ServiceRow>(Table::Services, &svc.id)?
            .is_some()
        {
            return Err(CtlError::Conflict(format!(
                "service {:?} already exists",
                svc.id
            )));
        }
        let mut m = self.med();
        let plan = m.plan_deploy(&svc)?;
        let op = self.journal(&mut m, OpKind::Deploy, &svc.id, plan, |op| {
            vec![Write::Put(
                Table::Services,
                svc.id.clone(),
                serde_json::to_value(ServiceRow {
                    service: svc.clone(),
                    status: "deploying".into(),
                    operation: op.id.clone(),
                })
                .unwrap_or_default(),
            )]
        })?;
        drop(m);
        self.enqueue(&op.id)?;
        Ok(op)
    }

    /// Destroys a service: steer away, then destruct its instances.
    pub fn destroy(&self, service: &str) -> Result<Operation, CtlError> {
        let mut row: ServiceRow = self
            .store
            .get(Table::Services, service)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown service {service:?}")))?;
        if row.status != "active" && row.status != "failed" {
            return Err(CtlError::Conflict(format!(
                "service {service} is {} (operation {})",
                row.status, row.operation
            )));
        }
        let mut m = self.med();
        if row.status == "failed" && !m.paths().contains_key(service) {
            self.store.batch(&[
                Write::Delete(Table::Services, service.to_string()),
                Write::Event(
                    "service.removed".into(),
                    serde_json::json!({"service": service}),
                ),
            ])?;
            let mut op = Operation::new(self.next_op_id(), OpKind::Destroy, service.into(), vec![]);
            op.go(OpState::Processing)
                .and_then(|_| op.go(OpState::Completed))
                .map_err(|e| CtlError::Internal(e.to_string()))?;
            self.store.put(Table::Operations, &op.id, &op)?;
            return Ok(op);
        }
        let plan = m.plan_destroy(service)?;
        let op = self.journal(&mut m, OpKind::Destroy, service, plan, |op| {
            row.status = "destroying".into();
            row.operation = op.id.clone();
            vec![Write::Put(
                Table::Services,
                service.to_string(),
                serde_json::to_value(&row).unwrap_or_default(),
            )]
        })?;
        drop(m);
        self.enqueue(&op.id)?;
        Ok(op)
    }

    /// Migrates an instance to `device` (or the best device on its host).
    pub fn migrate(&self, instance: &str, device: Option<&str>) -> Result<Operation, CtlError> {
        let mut m = self.med();
        let busy = self
            .store
            .list::<Operation>(Table::Operations)?
            .into_iter()
            .find(|o| {
                !o.state.is_final() && o.steps.iter().any(|s| step_touches(&s.step, instance))
            });
        if let Some(o) = busy {
            return Err(CtlError::Conflict(format!(
                "instance {instance} is in operation {} ({})",
                o.id,
                o.state.as_str()
            )));
        }
        let plan = m.plan_migrate(instance, device)?;
        let op = self.journal(&mut m, OpKind::Migrate, instance, plan, |_| Vec::new())?;
        drop(m);
        self.enqueue(&op.id)?;
        Ok(op)
    }

    /// Places `service` again (its instances were lost or a host on its path is down):
    /// chain and place it on what is left, re-steer, destroy what it no longer uses.
    pub fn replace(&self, service: &str) -> Result<Operation, CtlError> {
        let mut row: ServiceRow = self
            .store
            .get(Table::Services, service)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown service {service:?}")))?;
        if row.status != "active" {
            return Err(CtlError::Conflict(format!(
                "service {service} is {} (operation {})",
                row.status, row.operation
            )));
        }
        let mut m = self.med();
        let plan = m.plan_replace(&row.service)?;
        let op = self.journal(&mut m, OpKind::Replace, service, plan, |op| {
            row.status = "replacing".into();
            row.operation = op.id.clone();
            vec![Write::Put(
                Table::Services,
                service.to_string(),
                serde_json::to_value(&row).unwrap_or_default(),
            )]
        })?;
        drop(m);
        self.enqueue(&op.id)?;
        Ok(op)
    }

    /// Marks `instances` (on `host`) lost, with `reason`; returns those newly marked.
    pub fn mark_lost(
        &self,
        host: &str,
        instances: &[String],
        reason: &str,
    ) -> Result<Vec<String>, CtlError> {
        let mut m = self.med();
        let mut rows = Vec::new();
        for id in instances {
            let Some(r) = m.instances().get(id) else {
                continue;
            };
            if r.host != host || r.status != "running" {
                continue;
            }
            let mut r = r.clone();
            r.status = "lost".into();
            rows.push((id.clone(), Some(r)));
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = rows.iter().map(|(id, _)| id.clone()).collect();
        let mut w = row_writes(&rows, &[]);
        w.push(Write::Event(
            "instance.lost".into(),
            serde_json::json!({"host": host, "instances": ids, "reason": reason}),
        ));
        self.store.batch(&w)?;
        m.apply_rows(&rows, &[])?;
        log::warn!("instances lost on {host}: {ids:?} ({reason})");
        Ok(ids)
    }

    /// Re-places every active service that uses a lost instance or whose path crosses a
    /// host that is down, unless an operation on it or on an instance of its path (a
    /// migration) is under way: the next call retries. Returns the operations started.
    pub fn heal(&self) -> Result<Vec<Operation>, CtlError> {
        let broken: BTreeMap<String, Vec<String>> = {
            let m = self.med();
            let down = m.down_hosts();
            let down = down.read().map(|d| d.clone()).unwrap_or_default();
            let through = m.enforcer().all();
            m.paths()
                .values()
                .filter(|p| {
                    p.hops.iter().any(|h| {
                        down.contains(&h.host)
                            || m.instances()
                                .get(&h.instance)
                                .is_some_and(|r| r.status == "lost")
                    }) || through
                        .get(&p.service)
                        .is_some_and(|s| s.hosts.iter().any(|h| down.contains(h)))
                })
                .map(|p| {
                    let on_path = p.hops.iter().map(|h| h.instance.clone()).collect();
                    (p.service.clone(), on_path)
                })
                .collect()
        };
        let mut started = Vec::new();
        for (svc, on_path) in broken {
            let ops = self.store.list::<Operation>(Table::Operations)?;
            if under_way(&ops, &svc, &on_path) {
                continue;
            }
            match self.replace(&svc) {
                Ok(op) => started.push(op),
                Err(CtlError::Conflict(e))
                | Err(CtlError::BadRequest(e))
                | Err(CtlError::NotFound(e)) => {
                    log::warn!("re-placing {svc}: {e}")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(started)
    }

    /// Records plan + operation in one transaction and applies the plan's rows.
    fn journal(
        &self,
        m: &mut Mediator,
        kind: OpKind,
        target: &str,
        plan: Plan,
        extra: impl FnOnce(&Operation) -> Vec<Write>,
    ) -> Result<Operation, CtlError> {
        let mut op = Operation::new(self.next_op_id(), kind, target.into(), plan.steps.clone());
        let restore_i: Vec<(String, Option<InstanceRow>)> = plan
            .instances
            .iter()
            .map(|(id, _)| (id.clone(), m.instances().get(id).cloned()))
            .collect();
        let restore_p: Vec<(String, Option<PathRow>)> = plan
            .paths
            .iter()
            .map(|(id, _)| (id.clone(), m.paths().get(id).cloned()))
            .collect();
        op.restore =
            serde_json::json!({"instances": rows_json(&restore_i), "paths": rows_json(&restore_p)});
        let mut w = vec![Write::Put(
            Table::Operations,
            op.id.clone(),
            serde_json::to_value(&op).unwrap_or_default(),
        )];
        w.extend(row_writes(&plan.instances, &plan.paths));
        for p in &plan.placements {
            w.push(Write::Put(
                Table::Placements,
                p.instance.clone(),
                serde_json::to_value(p).unwrap_or_default(),
            ));
        }
        w.extend(extra(&op));
        w.push(Write::Event(
            "operation.accepted".into(),
            serde_json::json!({"operation": op.id, "kind": kind, "target": target,
                               "steps": op.steps.iter().map(|s| s.step.label()).collect::<Vec<_>>()}),
        ));
        m.apply_rows(&plan.instances, &plan.paths)?;
        if let Err(e) = self.store.batch(&w) {
            m.apply_rows(&restore_i, &restore_p)?;
            return Err(e.into());
        }
        Ok(op)
    }

    fn enqueue(&self, id: &str) -> Result<(), CtlError> {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match q {
            Some(tx) if tx.send(id.to_string()).is_ok() => Ok(()),
            _ => self.run(id),
        }
    }

    fn save_op(&self, op: &Operation, extra: Vec<Write>) -> Result<(), CtlError> {
        let mut w = vec![Write::Put(
            Table::Operations,
            op.id.clone(),
            serde_json::to_value(op).unwrap_or_default(),
        )];
        w.extend(extra);
        Ok(self.store.batch(&w)?)
    }

    /// Runs (or resumes) operation `id` to a final state.
    pub fn run(&self, id: &str) -> Result<(), CtlError> {
        let mut op: Operation = self
            .store
            .get(Table::Operations, id)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown operation {id:?}")))?;
        let bad = |e: crate::ops::TransitionError| CtlError::Internal(e.to_string());
        if op.state == OpState::Starting {
            op.go(OpState::Processing).map_err(bad)?;
            self.save_op(&op, vec![])?;
        }
        if op.state == OpState::Processing {
            for i in 0..op.steps.len() {
                if op.steps[i].status == StepStatus::Done {
                    continue;
                }
                op.steps[i].status = StepStatus::Started;
                self.save_op(&op, vec![])?;
                let step = op.steps[i].step.clone();
                let res = self.med().apply(&step);
                match res {
                    Ok(answer) => {
                        op.steps[i].status = StepStatus::Done;
                        let mut w = self.step_rows(&step);
                        w.push(Write::Event(
                            "step.done".into(),
                            serde_json::json!({"operation": op.id, "step": step.label(), "answer": answer}),
                        ));
                        self.save_op(&op, w)?;
                    }
                    Err(e) => {
                        op.error = Some(format!("{}: {e}", step.label()));
                        op.go(OpState::FailedTemp).map_err(bad)?;
                        self.save_op(
                            &op,
                            vec![Write::Event(
                                "operation.failed_temp".into(),
                                serde_json::json!({"operation": op.id, "error": op.error}),
                            )],
                        )?;
                        break;
                    }
                }
            }
            if op.state == OpState::Processing {
                op.go(OpState::Completed).map_err(bad)?;
                let w = self.finish_rows(&op, true)?;
                self.save_op(&op, w)?;
                return Ok(());
            }
        }
        if op.state == OpState::FailedTemp {
            op.go(OpState::RollingBack).map_err(bad)?;
            self.save_op(&op, vec![])?;
        }
        if op.state == OpState::RollingBack {
            let mut stuck = None;
            for i in (0..op.steps.len()).rev() {
                if !matches!(op.steps[i].status, StepStatus::Done | StepStatus::Started) {
                    continue;
                }
                let step = op.steps[i].step.clone();
                let res = self.med().undo(&step);
                match res {
                    Ok(true) => {
                        op.steps[i].status = StepStatus::Undone;
                        self.save_op(&op, vec![])?;
                    }
                    Ok(false) => {
                        stuck = Some(format!("{} cannot be undone", step.label()));
                        break;
                    }
                    Err(e) => {
                        stuck = Some(format!("undo {}: {e}", step.label()));
                        break;
                    }
                }
            }
            match stuck {
                Some(why) => {
                    op.error = Some(format!(
                        "{}; rollback: {why}",
                        op.error.clone().unwrap_or_default()
                    ));
                    op.go(OpState::Failed).map_err(bad)?;
                    self.save_op(
                        &op,
                        vec![Write::Event(
                            "operation.failed".into(),
                            serde_json::json!({"operation": op.id, "error": op.error}),
                        )],
                    )?;
                }
                None => {
                    op.go(OpState::RolledBack).map_err(bad)?;
                    let w = self.finish_rows(&op, false)?;
                    self.save_op(&op, w)?;
                }
            }
        }
        Ok(())
    }

    /// Rows changed by a done step (instance status, removal).
    fn step_rows(&self, step: &Step) -> Vec<Write> {
        let m = self.med();
        match step {
            Step::Deploy { spec } => match m.instances().get(&spec.id) {
                Some(r) => vec![Write::Put(
                    Table::Instances,
                    spec.id.clone(),
                    serde_json::to_value(r).unwrap_or_default(),
                )],
                None => vec![],
            },
            Step::Destruct { instance } => vec![
                Write::Delete(Table::Instances, instance.clone()),
                Write::Delete(Table::Placements, instance.clone()),
            ],
            _ => vec![],
        }
    }

    /// Final rows of an operation: service status on success; restored rows on rollback.
    fn finish_rows(&self, op: &Operation, ok: bool) -> Result<Vec<Write>, CtlError> {
        let mut w = Vec::new();
        if !ok {
            let ri: Vec<(String, Option<InstanceRow>)> =
                serde_json::from_value(op.restore["instances"].clone()).unwrap_or_default();
            let rp: Vec<(String, Option<PathRow>)> =
                serde_json::from_value(op.restore["paths"].clone()).unwrap_or_default();
            self.med().apply_rows(&ri, &rp)?;
            w.extend(row_writes(&ri, &rp));
            for (id, r) in &ri {
                if r.is_none() {
                    w.push(Write::Delete(Table::Placements, id.clone()));
                }
            }
        }
        if op.kind != OpKind::Migrate {
            if let Some(mut row) = self.store.get::<ServiceRow>(Table::Services, &op.target)? {
                match (op.kind, ok) {
                    (OpKind::Destroy, true) => {
                        w.push(Write::Delete(Table::Services, op.target.clone()));
                    }
                    (OpKind::Deploy | OpKind::Replace, true) | (OpKind::Destroy, false) => {
                        row.status = "active".into();
                        w.push(Write::Put(
                            Table::Services,
                            op.target.clone(),
                            serde_json::to_value(&row).unwrap_or_default(),
                        ));
                    }
                    _ => {
                        row.status = "failed".into();
                        w.push(Write::Put(
                            Table::Services,
                            op.target.clone(),
                            serde_json::to_value(&row).unwrap_or_default(),
                        ));
                    }
                }
            }
        }
        w.push(Write::Event(
            format!("operation.{}", op.state.as_str().to_lowercase()),
            serde_json::json!({"operation": op.id, "kind": op.kind, "target": op.target}),
        ));
        Ok(w)
    }

    /// One operation record.
    pub fn operation(&self, id: &str) -> Result<Operation, CtlError> {
        self.store
            .get(Table::Operations, id)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown operation {id:?}")))
    }

    /// Every operation.
    pub fn operations(&self) -> Result<Vec<Operation>, CtlError> {
        Ok(self.store.list(Table::Operations)?)
    }

    /// Every service.
    pub fn services(&self) -> Result<Vec<ServiceRow>, CtlError> {
        Ok(self.store.list(Table::Services)?)
    }

    /// One service with its path.
    pub fn service(&self, id: &str) -> Result<ServiceStatus, CtlError> {
        let row: ServiceRow = self
            .store
            .get(Table::Services, id)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown service {id:?}")))?;
        let path: Option<PathRow> = self.store.get(Table::Paths, id)?;
        Ok(ServiceStatus { row, path })
    }

    /// Each agent's latest energy figures, by host.
    pub fn energy_figures(&self) -> BTreeMap<String, crate::energy::HostFigures> {
        self.energy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records a power manager decision on `service` as a final operation of kind
    /// `power` with its `reason`: `COMPLETED` with what the agent read back, or
    /// `ROLLED_BACK` with why the agent refused (nothing was changed).
    pub fn record_power_decision(
        &self,
        service: &str,
        reason: &str,
        outcome: Result<String, String>,
    ) -> Result<Operation, CtlError> {
        self.record_decision(OpKind::Power, ("service", service), reason, outcome)
    }

    /// Records an SSM decision on tunnel endpoint `instance` (kind `grant` or `revoke`)
    /// as a final operation, like [`Controller::record_power_decision`].
    pub fn record_ssm_decision(
        &self,
        kind: OpKind,
        instance: &str,
        reason: &str,
        outcome: Result<String, String>,
    ) -> Result<Operation, CtlError> {
        self.record_decision(kind, ("instance", instance), reason, outcome)
    }

    /// A decision taken outside any operation on `target` (its name in the event, its
    /// id), recorded as a final operation of `kind` with no steps: `COMPLETED` with what
    /// was read back, or `ROLLED_BACK` with why it was refused (nothing was changed); and
    /// as a `power.decision` or `ssm.decision` event.
    fn record_decision(
        &self,
        kind: OpKind,
        (key, target): (&str, &str),
        reason: &str,
        outcome: Result<String, String>,
    ) -> Result<Operation, CtlError> {
        let event = kind
            .decision_event()
            .ok_or_else(|| CtlError::Internal(format!("{kind:?} is not a one-shot decision")))?;
        let mut op = Operation::new(self.next_op_id(), kind, target.into(), vec![]);
        let bad = |e: crate::ops::TransitionError| CtlError::Internal(e.to_string());
        op.go(OpState::Processing).map_err(bad)?;
        let detail = match outcome {
            Ok(readback) => {
                op.go(OpState::Completed).map_err(bad)?;
                op.reason = Some(format!("{reason}; {readback}"));
                serde_json::json!({"operation": op.id, key: target, "reason": reason, "read_back": readback})
            }
            Err(e) => {
                op.reason = Some(reason.to_string());
                op.error = Some(e.clone());
                for s in [
                    OpState::FailedTemp,
                    OpState::RollingBack,
                    OpState::RolledBack,
                ] {
                    op.go(s).map_err(bad)?;
                }
                serde_json::json!({"operation": op.id, key: target, "reason": reason, "error": e})
            }
        };
        self.save_op(&op, vec![Write::Event(event.into(), detail)])?;
        Ok(op)
    }

    /// Records whether tunnel endpoint `instance` holds a queue pair of its device (its
    /// capacity, 1 or 0), in the resource model and the state database, so that status
    /// and placement follow the SSM. Taking a queue pair fails when the model has none
    /// free on the device (nothing is changed then).
    pub fn set_queue_pair(&self, instance: &str, holds: bool) -> Result<(), CtlError> {
        let mut m = self.med();
        let old = m
            .instances()
            .get(instance)
            .cloned()
            .ok_or_else(|| CtlError::NotFound(format!("unknown instance {instance:?}")))?;
        let mut row = old.clone();
        row.spec.capacity = if holds {
            crate::mediator::tunnel::ENDPOINT_QUEUE_PAIRS
        } else {
            0.0
        };
        if row == old {
            return Ok(());
        }
        let device = row.spec.device.clone();
        let rows = [(instance.to_string(), Some(row))];
        if let Err(e) = m.apply_rows(&rows, &[]) {
            m.apply_rows(&[(instance.to_string(), Some(old))], &[])?;
            return Err(CtlError::Conflict(format!(
                "{instance}: no free queue pair on {device} ({e})"
            )));
        }
        self.store.batch(&row_writes(&rows, &[]))?;
        Ok(())
    }

    /// Sets the power manager's knob settings (for `/metrics`).
    pub fn set_power_settings(&self, s: Vec<crate::power_manager::WorkerSetting>) {
        *self.power.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// The power manager's knob setting per worker.
    pub fn power_settings(&self) -> Vec<crate::power_manager::WorkerSetting> {
        self.power.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every recorded instance.
    pub fn instances(&self) -> Result<Vec<InstanceRow>, CtlError> {
        Ok(self.store.list(Table::Instances)?)
    }

    /// Status branch: one instance's record, placement and live state from its VNFM.
    pub fn instance(&self, id: &str) -> Result<InstanceStatus, CtlError> {
        let row: InstanceRow = self
            .store
            .get(Table::Instances, id)?
            .ok_or_else(|| CtlError::NotFound(format!("unknown instance {id:?}")))?;
        let placement: Option<PlacementRecord> = self.store.get(Table::Placements, id)?;
        let vnfm = self.med().vnfms().get(&row.host).clone();
        let (state, state_error) = match vnfm.get_instance_state(id) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(InstanceStatus {
            row,
            placement,
            vnfm: vnfm.kind().to_string(),
            state,
            state_error,
        })
    }

    /// Records an event (failures are logged: an event is not worth failing for).
    pub fn event(&self, kind: &str, detail: serde_json::Value) {
        if let Err(e) = self.store.batch(&[Write::Event(kind.into(), detail)]) {
            log::warn!("recording event {kind}: {e}");
        }
    }

    /// Destroys the instances `host`'s VNFM holds that the database does not know — what
    /// was left on a host whose agent was down while its services were re-placed.
    pub fn remove_orphans(&self, host: &str) {
        let (vnfm, recorded) = {
            let m = self.med();
            (m.vnfms().get(host).clone(), m.instances().clone())
        };
        let ids = match vnfm.list_instances() {
            Ok(ids) => ids,
            Err(e) => {
                log::warn!("listing the instances of {host}: {e}");
                return;
            }
        };
        for id in ids.into_iter().filter(|id| !recorded.contains_key(id)) {
            match vnfm.destruct_instance(&id) {
                Ok(()) => self.event(
                    "instance.orphan_destroyed",
                    serde_json::json!({"host": host, "instance": id}),
                ),
                Err(e) => log::warn!("destroying orphan {id} on {host}: {e}"),
            }
        }
    }

    /// Records what `host`'s agent reported of its energy (`None`: forget it, e.g. the
    /// agent is down and its figures are no longer live).
    pub fn record_energy(&self, host: &str, figures: Option<crate::energy::HostFigures>) {
        let mut g = self.energy.lock().unwrap_or_else(|e| e.into_inner());
        match figures {
            Some(f) => g.insert(host.to_string(), f),
            None => g.remove(host),
        };
    }

    /// Energy per host and per service from the agents' latest figures.
    pub fn energy(&self) -> Result<crate::energy::EnergySummary, CtlError> {
        let rows = self.instances()?;
        let slas = self
            .services()?
            .into_iter()
            .map(|r| (r.service.id, r.service.sla))
            .collect();
        let hosts = self
            .energy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(crate::energy::aggregate(&hosts, &rows, &slas))
    }

    /// The last `limit` events.
    pub fn events(&self, limit: usize) -> Result<Vec<EventRecord>, CtlError> {
        Ok(self.store.events(limit)?)
    }
}

fn row_writes(
    instances: &[(String, Option<InstanceRow>)],
    paths: &[(String, Option<PathRow>)],
) -> Vec<Write> {
    let mut w = Vec::new();
    for (id, r) in instances {
        w.push(match r {
            Some(r) => Write::Put(
                Table::Instances,
                id.clone(),
                serde_json::to_value(r).unwrap_or_default(),
            ),
            None => Write::Delete(Table::Instances, id.clone()),
        });
    }
    for (id, r) in paths {
        w.push(match r {
            Some(r) => Write::Put(
                Table::Paths,
                id.clone(),
                serde_json::to_value(r).unwrap_or_default(),
            ),
            None => Write::Delete(Table::Paths, id.clone()),
        });
    }
    w
}

/// True when one of `ops` is under way on `service` or on one of the instances of its
/// path (`on_path`): a migration's target is its instance, and a re-placement started
/// beside it would plan from rows that operation is still changing.
fn under_way(ops: &[Operation], service: &str, on_path: &[String]) -> bool {
    ops.iter().filter(|o| !o.state.is_final()).any(|o| {
        o.target == service
            || on_path
                .iter()
                .any(|i| o.target == *i || o.steps.iter().any(|s| step_touches(&s.step, i)))
    })
}

fn step_touches(step: &Step, instance: &str) -> bool {
    match step {
        Step::Deploy { spec } => spec.id == instance,
        Step::Configure { instance: i, .. } | Step::Destruct { instance: i } => i == instance,
        Step::Migrate { old, new, .. } | Step::CopyState { old, new } => {
            old == instance || new == instance
        }
        Step::Steer { hops, .. } | Step::Unsteer { hops, .. } => {
            hops.iter().any(|h| h.instance == instance)
        }
    }
}

/// Request checks the descriptor's YAML validation would make (ids, SLA ranges).
/// Checks the configuration of a function nfx's workers run (firewall, NAT, DPI,
/// elephant) against that VNF's schema — field names, types, enum values — so that a
/// wrong descriptor is refused when it is planned, not by a worker after placement.
/// Values that need the worker (files it reads, addresses against its ports) are
/// still checked there. A `transcode` function's configuration is checked as `nfx
/// transcode --config` checks its file. Other functions' configurations stay opaque.
fn check_vnf_config(k: usize, c: &ChainFunction) -> Result<(), CtlError> {
    if c.function == nfx_vnf::transcode::FUNCTION {
        let config = serde_json::to_value(&c.config).map_err(|e| {
            CtlError::BadRequest(format!("chain[{k}].config: not representable: {e}"))
        })?;
        return nfx_vnf::transcode::TranscodeConfig::from_function_config(&config)
            .map(drop)
            .map_err(|e| CtlError::BadRequest(format!("chain[{k}].config: {e}")));
    }
    if !nfx_vnf::NodeSpec::KINDS.contains(&c.function.as_str()) {
        return Ok(());
    }
    let config = serde_json::to_value(&c.config)
        .map_err(|e| CtlError::BadRequest(format!("chain[{k}].config: not representable: {e}")))?;
    nfx_vnf::NodeSpec::from_function(&c.function, &config)
        .map(drop)
        .map_err(|e| {
            CtlError::BadRequest(format!(
                "chain[{k}].config: not a valid {} configuration: {e}",
                c.function
            ))
        })
}

fn check_service(s: &Service) -> Result<(), CtlError> {
    let ident = |f: &str, v: &str| {
        if v.is_empty()
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            Err(CtlError::BadRequest(format!(
                "{f}: {v:?} must be non-empty and use only letters, digits, '-', '_', '.'"
            )))
        } else {
            Ok(())
        }
    };
    ident("id", &s.id)?;
    ident("tenant", &s.tenant)?;
    for (k, c) in s.chain.iter().enumerate() {
        ident(&format!("chain[{k}].function"), &c.function)?;
        if c.function == "esp" {
            return Err(CtlError::BadRequest(format!(
                "chain[{k}].function: `esp` is not a chain step: a service's ESP tunnel is its \
                 `tunnel:` block (from, to, alg), whose two endpoints the controller places on \
                 the accelerator tier (docs/descriptors.md, \"Tunnels\")"
            )));
        }
        if let Some(j) = s.chain[..k].iter().position(|p| p.function == c.function) {
            return Err(CtlError::BadRequest(format!(
                "chain[{k}].function: `{}` is already chain[{j}]; a chain holds each function once \
                 (its instances, configuration and tier are looked up by function)",
                c.function
            )));
        }
        if !(c.capacity_need.is_finite() && c.capacity_need >= 0.0) {
            return Err(CtlError::BadRequest(format!(
                "chain[{k}].capacity_need: must be finite and >= 0"
            )));
        }
        check_vnf_config(k, c)?;
    }
    if !(s.sla.max_latency_us.is_finite() && s.sla.max_latency_us > 0.0) {
        return Err(CtlError::BadRequest(
            "sla.max_latency_us: must be > 0".into(),
        ));
    }
    if !(s.sla.min_throughput_gbps.is_finite() && s.sla.min_throughput_gbps > 0.0) {
        return Err(CtlError::BadRequest(
            "sla.min_throughput_gbps: must be > 0".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_model::{Infrastructure, ServiceSet};
    use std::path::PathBuf;

    fn example(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/examples")
            .join(name)
    }

    #[test]
    fn a_service_is_not_re_placed_while_an_operation_acts_on_it_or_its_instances() {
        let on_path = ["fw-1".to_string(), "nat-1".to_string()];
        let migrate = |target: &str, new: &str| {
            Operation::new(
                "op-1".into(),
                OpKind::Migrate,
                target.into(),
                vec![Step::Migrate {
                    old: target.into(),
                    new: new.into(),
                    flows: Vec::new(),
                }],
            )
        };
        let mut op = migrate("nat-1", "nat-1-m");
        assert!(under_way(std::slice::from_ref(&op), "web", &on_path));
        assert!(!under_way(std::slice::from_ref(&op), "web", &on_path[..1]));
        op.state = OpState::Completed;
        assert!(!under_way(&[op], "web", &on_path), "a final one is over");
        let mut steered = migrate("x-1", "x-2");
        steered.steps.push(crate::ops::StepRecord {
            step: Step::Destruct {
                instance: "fw-1".into(),
            },
            status: StepStatus::Pending,
        });
        assert!(under_way(&[steered], "web", &on_path), "a step on fw-1");
        let deploy = Operation::new("op-2".into(), OpKind::Deploy, "web".into(), Vec::new());
        assert!(under_way(&[deploy], "web", &[]));
    }

    #[test]
    fn shipped_example_services_pass_the_vnf_checks() {
        let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
        let set = ServiceSet::load(&example("services.yaml"), &infra).unwrap();
        for s in &set.services {
            check_service(s).unwrap_or_else(|e| panic!("{}: {e}", s.id));
        }
    }

    #[test]
    fn vnf_configs_the_workers_would_reject_are_refused_with_the_field() {
        let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
        let mut s = ServiceSet::load(&example("services.yaml"), &infra)
            .unwrap()
            .services
            .remove(0);
        let cases = [
            (1, "{ public: 10.200.2.100 }", "unknown field `public`"),
            (0, "{ default: drop }", "unknown variant `drop`"),
            (2, "{ patterns: [a, b] }", "invalid type"),
            (2, "{}", "missing field `patterns`"),
        ];
        for (k, yaml, why) in cases {
            let mut bad = s.clone();
            bad.chain[k].config = serde_yaml_ng::from_str(yaml).unwrap();
            let e = check_service(&bad).unwrap_err().to_string();
            assert!(e.contains(&format!("chain[{k}].config")), "{e}");
            assert!(e.contains(why), "{yaml}: {e}");
        }
        // Functions the workers do not run keep an opaque configuration.
        s.chain[0].function = "lb".into();
        s.chain[0].config = serde_yaml_ng::from_str("{ anything: 1 }").unwrap();
        check_service(&s).unwrap();
    }

    #[test]
    fn a_transcode_config_is_checked_at_plan_time_as_nfx_transcode_checks_it() {
        let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
        let s = ServiceSet::load(&example("transcode.yaml"), &infra)
            .unwrap()
            .services
            .remove(0);
        assert_eq!(s.chain[0].function, nfx_vnf::transcode::FUNCTION);
        check_service(&s).unwrap();
        for (yaml, why) in [
            (
                "{ listen_port: 5000, output: 10.200.3.2:6000, bitrate_kbps: 5 }",
                "transcode.field `bitrate_kbps`",
            ),
            (
                "{ listen_port: 5000, output: 10.200.3.2, bitrate_kbps: 300 }",
                "invalid",
            ),
            (
                "{ listen_port: 5000, output: 10.200.3.2:6000, bitrate_kbps: 300, fps: 5 }",
                "unknown field `fps`",
            ),
            (
                "{ listen_port: 5000, output: 10.200.3.2:6000, bitrate_kbps: 300, netns: x }",
                "transcode.netns",
            ),
        ] {
            let mut bad = s.clone();
            bad.chain[0].config = serde_yaml_ng::from_str(yaml).unwrap();
            let e = check_service(&bad).unwrap_err().to_string();
            assert!(
                e.contains("chain[0].config: ") && e.contains(why),
                "{yaml}: {e}"
            );
        }
    }

    #[test]
    fn a_chain_naming_one_function_twice_is_refused() {
        let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
        let mut s = ServiceSet::load(&example("services.yaml"), &infra)
            .unwrap()
            .services
            .remove(0);
        let again = s.chain[0].clone();
        s.chain.push(again);
        let k = s.chain.len() - 1;
        let e = check_service(&s).unwrap_err().to_string();
        assert!(
            e.contains(&format!("chain[{k}].function")) && e.contains("already chain[0]"),
            "{e}"
        );
    }

    #[test]
    fn an_esp_chain_step_is_refused_naming_the_tunnel_block() {
        let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
        let mut s = ServiceSet::load(&example("services.yaml"), &infra)
            .unwrap()
            .services
            .remove(1);
        let mut esp = s.chain[0].clone();
        esp.function = "esp".into();
        esp.config = serde_yaml_ng::from_str("{ alg: aes-128-gcm }").unwrap();
        s.chain.push(esp);
        let e = check_service(&s).unwrap_err().to_string();
        assert!(
            e.contains("chain[1].function") && e.contains("`tunnel:` block"),
            "{e}"
        );
    }
}
