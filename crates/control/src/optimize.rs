//! The offline optimum from the controller (`nfx plan --optimize`, `nfx deploy
//! --optimize`, `GET|POST /api/v1/optimize`): every recorded instance is re-placed with
//! the exact solver of `nfx-placement` over the live infrastructure, within what a
//! loss-free `nfx migrate` may do (same host, no slower device); the answer is the cost
//! now, the optimal cost with its proven bound, and the migrations that reach it, in an
//! order in which each finds room. Carrying them out is one journaled migrate operation
//! per move, stopping at the first that does not complete.

use crate::controller::{Controller, CtlError};
use crate::mediator::{is_down, InstanceRow, Mediator, PlanError};
use crate::ops::{OpState, Operation};
use crate::projection::{cap, device, kind_of, need, Units};
use nfx_placement::{place, Algorithm, DeviceKind, Instance, VnfInstance};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Longest a carried-out migration may take before the run stops.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// One move of the optimal placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Migration {
    /// Instance moved.
    pub instance: String,
    /// Its function.
    pub function: String,
    /// Its host (a migration stays on its host).
    pub host: String,
    /// Device it runs on now.
    pub from: String,
    /// Device it goes to.
    pub to: String,
}

/// What `nfx plan --optimize` prints and `GET /api/v1/optimize` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizePlan {
    /// Sum of the costs of the devices hosting an instance now (descriptor's unit).
    pub cost_now: f64,
    /// The same after the migrations.
    pub cost_optimal: f64,
    /// Proven lower bound on any placement's cost with these constraints.
    pub bound: f64,
    /// `cost_optimal - bound`: how far the answer may be from the optimum (0: proven).
    pub gap: f64,
    /// Whether `cost_optimal` equals `bound`.
    pub proven_optimal: bool,
    /// `cost_now - cost_optimal`.
    pub saved: f64,
    /// Seconds the exact solver took.
    pub seconds: f64,
    /// Instances the solver could move.
    pub movable: usize,
    /// Instances held where they are (not running, tunnel endpoints, down hosts); those
    /// on accelerators count in both costs as they are.
    pub pinned: usize,
    /// The moves, in an order in which each target has room when its turn comes.
    pub migrations: Vec<Migration>,
    /// Moves no order can make room for (devices that would have to swap instances);
    /// left out of `cost_optimal`'s migrations, which then does not fully hold.
    pub blocked: Vec<Migration>,
}

/// What `nfx deploy --optimize` prints and `POST /api/v1/optimize` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizeRun {
    /// The plan carried out.
    pub plan: OptimizePlan,
    /// One migrate operation per move started, in order, in its final state.
    pub operations: Vec<Operation>,
    /// Why the run stopped early (`None`: every move completed).
    pub error: Option<String>,
}

/// An instance of the problem and where it is.
struct Item {
    row: InstanceRow,
    movable: bool,
}

/// Whether `row` may move: running, on a host that is up, not an accelerator's, and not
/// a tunnel endpoint (`nfx migrate` refuses those).
fn movable(m: &Mediator, row: &InstanceRow, endpoints: &BTreeSet<String>) -> bool {
    row.status == "running"
        && kind_of(row.tier).is_some()
        && !endpoints.contains(&row.spec.id)
        && !is_down(&m.down_hosts(), &row.host)
}

/// The problem's function name for a movable instance: the devices that may take it are
/// exactly those of its host running its function no slower than its device now.
fn class(row: &InstanceRow) -> String {
    format!("{}@{}<={}us", row.spec.function, row.host, row.latency_us)
}

/// The offline problem of the recorded state.
struct Problem {
    /// Every recorded instance on software and table devices.
    inst: Instance,
    /// The factors of its integers.
    units: Units,
    /// Its instances' rows, in its order.
    items: Vec<Item>,
    /// The current device index of each instance.
    current: Vec<usize>,
    /// The cost of the accelerator devices in use (outside the problem, unchanged by it).
    accel_cost: f64,
}

/// The offline problem of every recorded instance on software and table devices.
fn problem(m: &Mediator) -> Result<Problem, PlanError> {
    let endpoints: BTreeSet<String> = m
        .paths()
        .values()
        .filter_map(|p| p.ends.as_ref().and_then(|e| e.tunnel.as_ref()))
        .flat_map(|t| [t.from_instance.clone(), t.to_instance.clone()])
        .collect();
    let model = m.model();
    let mut items = Vec::new();
    let mut accel_used = BTreeSet::new();
    for row in m.instances().values() {
        if kind_of(row.tier).is_none() {
            accel_used.insert(row.spec.device.clone());
            continue;
        }
        let can_move = movable(m, row, &endpoints);
        items.push(Item {
            row: row.clone(),
            movable: can_move,
        });
    }
    let accel_cost = accel_used
        .iter()
        .filter_map(|d| model.device(d))
        .map(|d| d.cost)
        .sum::<f64>();
    let devs: Vec<_> = model
        .devices()
        .iter()
        .filter(|d| kind_of(d.tier).is_some())
        .collect();
    let needs = |k: DeviceKind| {
        let it = items.iter().map(|i| i.row.spec.capacity);
        let caps = devs.iter().filter(move |d| kind_of(d.tier) == Some(k));
        caps.map(|d| d.capacity.total).chain(it).collect::<Vec<_>>()
    };
    let units = Units::fit(
        devs.iter()
            .map(|d| d.throughput_gbps.total)
            .chain(items.iter().map(|i| i.row.spec.throughput_gbps)),
        needs(DeviceKind::Software),
        needs(DeviceKind::Hardware),
        devs.iter().map(|d| d.cost),
    );
    let name = |i: &Item| {
        if i.movable {
            class(&i.row)
        } else {
            format!("pinned:{}", i.row.spec.id)
        }
    };
    let mut devices = Vec::new();
    for d in &devs {
        let mut fs: Vec<String> = items
            .iter()
            .filter(|i| {
                if !i.movable {
                    return i.row.spec.device == d.id;
                }
                i.row.host == d.host
                    && d.functions.contains(&i.row.spec.function)
                    && d.latency_us <= i.row.latency_us
            })
            .map(name)
            .collect();
        fs.sort();
        fs.dedup();
        if fs.is_empty() {
            continue;
        }
        let (c, t) = (d.capacity.total, d.throughput_gbps.total);
        devices.extend(device(d, fs, c, t, cap(d.cost, units.cost), &units));
    }
    let mut functions: Vec<String> = items.iter().map(name).collect();
    functions.sort();
    functions.dedup();
    let vnf_instances = items
        .iter()
        .map(|i| VnfInstance {
            id: i.row.spec.id.clone(),
            function: name(i),
            tcam_need: need(i.row.spec.capacity, units.tcam),
            cpu_need: need(i.row.spec.capacity, units.cpu),
            latency_bound_us: i.row.latency_us.max(0.0).ceil() as u64,
            throughput_gbps: need(i.row.spec.throughput_gbps, units.throughput),
        })
        .collect();
    let inst = Instance {
        name: format!(
            "re-placement of the recorded instances ({})",
            units.describe()
        ),
        functions,
        devices,
        vnf_instances,
    };
    let current = items
        .iter()
        .map(|i| {
            inst.devices
                .iter()
                .position(|d| d.id == i.row.spec.device)
                .ok_or_else(|| {
                    PlanError::Conflict(format!(
                        "instance {} is on device {}, which the problem lacks",
                        i.row.spec.id, i.row.spec.device
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Problem {
        inst,
        units,
        items,
        current,
        accel_cost,
    })
}

/// Per device, the scaled capacity and throughput `assign` leaves free.
fn free_after(inst: &Instance, assign: &[usize]) -> Vec<(i128, i128)> {
    let mut free: Vec<(i128, i128)> = inst
        .devices
        .iter()
        .map(|d| (i128::from(d.capacity()), i128::from(d.throughput_gbps)))
        .collect();
    for (m, &h) in assign.iter().enumerate() {
        let v = &inst.vnf_instances[m];
        free[h].0 -= i128::from(v.need_on(inst.devices[h].kind));
        free[h].1 -= i128::from(v.throughput_gbps);
    }
    free
}

/// Puts back every moved instance whose device stays in use and still has room for it:
/// the cost is the same and a migration is saved.
fn keep_in_place(inst: &Instance, current: &[usize], target: &mut [usize]) {
    loop {
        let used: BTreeSet<usize> = target.iter().copied().collect();
        let free = free_after(inst, target);
        let back = (0..target.len()).find(|&m| {
            let (now, was) = (target[m], current[m]);
            let v = &inst.vnf_instances[m];
            now != was
                && used.contains(&was)
                && free[was].0 >= i128::from(v.need_on(inst.devices[was].kind))
                && free[was].1 >= i128::from(v.throughput_gbps)
        });
        match back {
            Some(m) => target[m] = current[m],
            None => return,
        }
    }
}

/// The moves from `current` to `target` in an order where each target has room when its
/// turn comes (the old instance leaves only after the new one runs); the rest blocked.
fn order(inst: &Instance, current: &[usize], target: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut free = free_after(inst, current);
    let mut pending: Vec<usize> = (0..current.len())
        .filter(|&m| current[m] != target[m])
        .collect();
    let mut done = Vec::new();
    while let Some(k) = pending.iter().position(|&m| {
        let (v, to) = (&inst.vnf_instances[m], target[m]);
        free[to].0 >= i128::from(v.need_on(inst.devices[to].kind))
            && free[to].1 >= i128::from(v.throughput_gbps)
    }) {
        let m = pending.remove(k);
        let v = &inst.vnf_instances[m];
        let (from, to) = (current[m], target[m]);
        free[to].0 -= i128::from(v.need_on(inst.devices[to].kind));
        free[to].1 -= i128::from(v.throughput_gbps);
        free[from].0 += i128::from(v.need_on(inst.devices[from].kind));
        free[from].1 += i128::from(v.throughput_gbps);
        done.push(m);
    }
    (done, pending)
}

/// The optimize plan over `m`'s recorded state; the exact solver stops at `time_limit`
/// (its answer then carries the gap it could prove).
pub fn plan_optimize(m: &Mediator, time_limit: Duration) -> Result<OptimizePlan, PlanError> {
    let Problem {
        inst,
        units,
        items,
        current,
        accel_cost,
    } = problem(m)?;
    let unscale = |c: u64| c as f64 / units.cost + accel_cost;
    let movable = items.iter().filter(|i| i.movable).count();
    let plan = |now: u64, best: u64, bound: u64, seconds, moves, blocked| OptimizePlan {
        cost_now: unscale(now),
        cost_optimal: unscale(best),
        bound: unscale(bound),
        gap: unscale(best) - unscale(bound),
        proven_optimal: best == bound,
        saved: unscale(now) - unscale(best),
        seconds,
        movable,
        pinned: m.instances().len() - movable,
        migrations: moves,
        blocked,
    };
    if items.is_empty() {
        return Ok(plan(0, 0, 0, 0.0, Vec::new(), Vec::new()));
    }
    let now = nfx_placement::validate::check(&inst, &current).map_err(|e| {
        PlanError::Conflict(format!(
            "the recorded placement does not fit its own projection: {e}"
        ))
    })?;
    inst.validate("re-placement")
        .map_err(|e| PlanError::Conflict(e.to_string()))?;
    let p = place(&inst, Algorithm::Exact, time_limit)
        .map_err(|e| PlanError::Conflict(format!("exact re-placement: {e}")))?;
    if p.objective >= now {
        return Ok(plan(now, now, p.bound.min(now), p.seconds, vec![], vec![]));
    }
    let mut target = p.device_of.clone();
    keep_in_place(&inst, &current, &mut target);
    let best = nfx_placement::validate::check(&inst, &target)
        .map_err(|e| PlanError::Conflict(format!("internal: kept placement invalid: {e}")))?;
    let (done, blocked) = order(&inst, &current, &target);
    let mv = |k: usize| Migration {
        instance: items[k].row.spec.id.clone(),
        function: items[k].row.spec.function.clone(),
        host: items[k].row.host.clone(),
        from: inst.devices[current[k]].id.clone(),
        to: inst.devices[target[k]].id.clone(),
    };
    let moves: Vec<Migration> = done.into_iter().map(mv).collect();
    let blocked: Vec<Migration> = blocked.into_iter().map(mv).collect();
    Ok(plan(
        now,
        best,
        p.bound.min(best),
        p.seconds,
        moves,
        blocked,
    ))
}

impl Controller {
    /// Dry run of the optimize plan (nothing changes).
    pub fn optimize_plan(&self, time_limit: Duration) -> Result<OptimizePlan, CtlError> {
        Ok(self.with_mediator(|m| plan_optimize(m, time_limit))?)
    }

    /// Plans the optimum and carries out its migrations one journaled migrate operation
    /// at a time (each as `nfx migrate` would), stopping at the first that is refused or
    /// does not complete: every operation ends in a final state, so the recorded state
    /// stays consistent whatever happens.
    pub fn optimize(&self, time_limit: Duration) -> Result<OptimizeRun, CtlError> {
        let plan = self.optimize_plan(time_limit)?;
        let mut run = OptimizeRun {
            plan,
            operations: Vec::new(),
            error: None,
        };
        for mv in run.plan.migrations.clone() {
            let what = format!("migrate {} {} -> {}", mv.instance, mv.from, mv.to);
            let op = match self
                .migrate(&mv.instance, Some(&mv.to))
                .and_then(|op| self.finished(&op.id))
            {
                Ok(op) => op,
                Err(e) => {
                    run.error = Some(format!("{what}: {e}"));
                    break;
                }
            };
            let ok = op.state == OpState::Completed;
            if !ok {
                run.error = Some(format!(
                    "{what}: operation {} ended {}: {}",
                    op.id,
                    op.state.as_str(),
                    op.error.as_deref().unwrap_or("no error recorded")
                ));
            }
            run.operations.push(op);
            if !ok {
                break;
            }
        }
        Ok(run)
    }

    /// Operation `id` once it is in a final state.
    fn finished(&self, id: &str) -> Result<Operation, CtlError> {
        let start = Instant::now();
        loop {
            let op = self.operation(id)?;
            if op.state.is_final() {
                return Ok(op);
            }
            if start.elapsed() > MIGRATION_TIMEOUT {
                return Err(CtlError::Internal(format!(
                    "operation {id} still {} after {MIGRATION_TIMEOUT:?}",
                    op.state.as_str()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
