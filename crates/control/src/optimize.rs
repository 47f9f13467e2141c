//! The offline optimum from the controller (`nfx plan --optimize`, `nfx deploy
//! --optimize`, `GET|POST /api/v1/optimize`): every recorded instance is re-placed with
//! the exact solver of `nfx-placement` over the live infrastructure, within what a
//! loss-free `nfx migrate` may do: on its host, a device no slower than its own; for a
//! function that may move across hosts ([`CROSS_HOST_FUNCTIONS`]), also a software
//! device of another host when that move alone keeps every service path through it
//! valid (no host visited twice, no host down, within the service's latency bound). The
//! answer is the cost now, the optimal cost with its proven bound, and the migrations
//! that reach it, in an order in which each finds room. Carrying them out is one
//! journaled migrate operation per move, stopping at the first that does not complete.
//!
//! Moves of two instances of one path that each keep its bound alone can break it
//! together. The solver sees per-instance allowed devices, not paths, so the plan is
//! checked path by path after it is solved, move by move in the order they are carried
//! out (each migrate re-checks the paths it changes against the state the earlier moves
//! left); the move at which a path first breaks has its instance held on its host and
//! the problem is solved again, at most [`MAX_SOLVES`] times, the last with every
//! instance on its host (same-host moves never lengthen a path). Linearising path
//! latency into the solver would make the joint check exact but changes the placement
//! model every other caller shares; a re-solve is exact whenever no path breaks, which is
//! the common case, and otherwise the reported bound (the first, least restricted
//! solve's) says how far the answer may be from the optimum.

use crate::controller::{Controller, CtlError};
use crate::mediator::crosshost::CROSS_HOST_FUNCTIONS;
use crate::mediator::{is_down, InstanceRow, Mediator, PlanError};
use crate::ops::{OpState, Operation};
use crate::projection::{cap, device, kind_of, need, Units};
use nfx_model::{DeviceModel, Tier};
use nfx_placement::{place, Algorithm, DeviceKind, Instance, VnfInstance};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Longest a carried-out migration may take before the run stops.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Most exact solves of one plan (see the module doc): each after the first holds one
/// more instance on its host, the last every one.
const MAX_SOLVES: usize = 6;

/// Least time a re-solve is given when the first solves used up the time limit.
const MIN_SOLVE: Duration = Duration::from_millis(200);

/// One move of the optimal placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Migration {
    /// Instance moved.
    pub instance: String,
    /// Its function.
    pub function: String,
    /// Its host before the move.
    pub host: String,
    /// Its host after the move: another host only for a function that may move across
    /// hosts, on a path that stays valid.
    pub to_host: String,
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
    /// Devices the solver may put it on (its own when it is pinned).
    allowed: BTreeSet<String>,
    /// Whether `allowed` holds devices of another host.
    across: bool,
}

impl Item {
    /// The problem's function name: the instances of one class may take exactly the
    /// same devices.
    fn class(&self) -> String {
        if !self.movable {
            return format!("pinned:{}", self.row.spec.id);
        }
        let r = &self.row;
        let mut name = format!("{}@{}<={}us", r.spec.function, r.host, r.latency_us);
        if self.across {
            let others: Vec<&str> = self.allowed.iter().map(String::as_str).collect();
            name = format!("{name}|{}", others.join(","));
        }
        name
    }
}

/// Whether `row` may move: running, on a host that is up, not an accelerator's, and not
/// a tunnel endpoint (`nfx migrate` refuses those).
fn movable(m: &Mediator, row: &InstanceRow, endpoints: &BTreeSet<String>) -> bool {
    row.status == "running"
        && kind_of(row.tier).is_some()
        && !endpoints.contains(&row.spec.id)
        && !is_down(&m.down_hosts(), &row.host)
}

/// The devices movable `row` may take: those of its host running its function no slower
/// than its device now; unless it is held `home`, also the software devices of other
/// hosts that `nfx migrate` would move it to, on which every path through it stays valid
/// with only this instance moved.
fn allowed(m: &Mediator, row: &InstanceRow, devs: &[&DeviceModel], home: bool) -> BTreeSet<String> {
    let runs = |d: &DeviceModel| d.functions.contains(&row.spec.function);
    let mut out: BTreeSet<String> = devs
        .iter()
        .filter(|d| d.host == row.host && runs(d) && d.latency_us <= row.latency_us)
        .map(|d| d.id.clone())
        .collect();
    let can_cross =
        CROSS_HOST_FUNCTIONS.contains(&row.spec.function.as_str()) && row.tier == Tier::Software;
    if home || !can_cross {
        return out;
    }
    let id = &row.spec.id;
    let paths: Vec<_> = m
        .paths()
        .iter()
        .filter(|(_, p)| p.hops.iter().any(|h| &h.instance == id))
        .collect();
    for d in devs.iter().filter(|d| d.host != row.host && runs(d)) {
        let moves = BTreeMap::from([(id.clone(), *d)]);
        let ok = m.check_cross_host(row, id, d).is_ok()
            && paths
                .iter()
                .all(|(svc, p)| m.moved_path_latency(svc, p, &moves).is_ok());
        if ok {
            out.insert(d.id.clone());
        }
    }
    out
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

/// The offline problem of every recorded instance on software and table devices, those
/// in `home` held on their host.
fn problem(m: &Mediator, home: &BTreeSet<String>) -> Result<Problem, PlanError> {
    let endpoints: BTreeSet<String> = m
        .paths()
        .values()
        .filter_map(|p| p.ends.as_ref().and_then(|e| e.tunnel.as_ref()))
        .flat_map(|t| [t.from_instance.clone(), t.to_instance.clone()])
        .collect();
    let model = m.model();
    let devs: Vec<&DeviceModel> = model
        .devices()
        .iter()
        .filter(|d| kind_of(d.tier).is_some())
        .collect();
    let mut items = Vec::new();
    let mut accel_used = BTreeSet::new();
    for row in m.instances().values() {
        if kind_of(row.tier).is_none() {
            accel_used.insert(row.spec.device.clone());
            continue;
        }
        let can_move = movable(m, row, &endpoints);
        let allowed = if can_move {
            allowed(m, row, &devs, home.contains(&row.spec.id))
        } else {
            BTreeSet::from([row.spec.device.clone()])
        };
        let across = allowed
            .iter()
            .any(|d| model.device(d).is_some_and(|d| d.host != row.host));
        items.push(Item {
            row: row.clone(),
            movable: can_move,
            allowed,
            across,
        });
    }
    let accel_cost = accel_used
        .iter()
        .filter_map(|d| model.device(d))
        .map(|d| d.cost)
        .sum::<f64>();
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
    let mut devices = Vec::new();
    for d in &devs {
        let mut fs: Vec<String> = items
            .iter()
            .filter(|i| i.allowed.contains(&d.id))
            .map(Item::class)
            .collect();
        fs.sort();
        fs.dedup();
        if fs.is_empty() {
            continue;
        }
        let (c, t) = (d.capacity.total, d.throughput_gbps.total);
        devices.extend(device(d, fs, c, t, cap(d.cost, units.cost), &units));
    }
    let mut functions: Vec<String> = items.iter().map(Item::class).collect();
    functions.sort();
    functions.dedup();
    // The latency bound admits every allowed device: which ones keep the paths' bounds
    // is decided above, per device.
    let slowest = |i: &Item| {
        i.allowed
            .iter()
            .filter_map(|d| model.device(d))
            .map(|d| d.latency_us)
            .fold(i.row.latency_us, f64::max)
    };
    let vnf_instances = items
        .iter()
        .map(|i| VnfInstance {
            id: i.row.spec.id.clone(),
            function: i.class(),
            tcam_need: need(i.row.spec.capacity, units.tcam),
            cpu_need: need(i.row.spec.capacity, units.cpu),
            latency_bound_us: slowest(i).max(0.0).ceil() as u64,
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

/// Puts every group of instances the solve put together on a device none of them is on
/// now onto the current device of one of them, when that device may take them all with
/// room and costs no more: the cost does not grow and at least one migration is saved
/// (among optima of equal cost the solver may pick any device, another host's too).
fn prefer_current(inst: &Instance, current: &[usize], target: &mut [usize]) {
    for t in 0..inst.devices.len() {
        let group: Vec<usize> = (0..target.len()).filter(|&m| target[m] == t).collect();
        if group.is_empty() || group.iter().any(|&m| current[m] == t) {
            continue;
        }
        let free = free_after(inst, target);
        let others_on = |c: usize| (0..target.len()).any(|m| target[m] == c);
        let fits = |c: usize| {
            let d = &inst.devices[c];
            let vs = group.iter().map(|&m| &inst.vnf_instances[m]);
            let need: i128 = vs.clone().map(|v| i128::from(v.need_on(d.kind))).sum();
            let tp: i128 = vs.clone().map(|v| i128::from(v.throughput_gbps)).sum();
            vs.clone().all(|v| d.functions.contains(&v.function))
                && free[c].0 >= need
                && free[c].1 >= tp
                && (others_on(c) || d.cost <= inst.devices[t].cost)
        };
        if let Some(c) = group.iter().map(|&m| current[m]).find(|&c| fits(c)) {
            for &m in &group {
                target[m] = c;
            }
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

/// One exact solve of a [`Problem`]: the cost now, the solver's best and bound, and
/// the target placement with its moves in order (`None` target: nothing to gain).
struct Solved {
    now: u64,
    best: u64,
    bound: u64,
    seconds: f64,
    target: Vec<usize>,
    done: Vec<usize>,
    blocked: Vec<usize>,
}

/// Solves `p` within `limit`, keeps in place what may stay, and orders the moves.
fn solve(p: &Problem, limit: Duration) -> Result<Solved, PlanError> {
    let inst = &p.inst;
    let now = nfx_placement::validate::check(inst, &p.current).map_err(|e| {
        PlanError::Conflict(format!(
            "the recorded placement does not fit its own projection: {e}"
        ))
    })?;
    inst.validate("re-placement")
        .map_err(|e| PlanError::Conflict(e.to_string()))?;
    let sol = place(inst, Algorithm::Exact, limit)
        .map_err(|e| PlanError::Conflict(format!("exact re-placement: {e}")))?;
    if sol.objective >= now {
        return Ok(Solved {
            now,
            best: now,
            bound: sol.bound.min(now),
            seconds: sol.seconds,
            target: p.current.clone(),
            done: Vec::new(),
            blocked: Vec::new(),
        });
    }
    let mut target = sol.device_of.clone();
    prefer_current(inst, &p.current, &mut target);
    keep_in_place(inst, &p.current, &mut target);
    let best = nfx_placement::validate::check(inst, &target)
        .map_err(|e| PlanError::Conflict(format!("internal: kept placement invalid: {e}")))?;
    let (done, blocked) = order(inst, &p.current, &target);
    Ok(Solved {
        now,
        best,
        bound: sol.bound.min(best),
        seconds: sol.seconds,
        target,
        done,
        blocked,
    })
}

/// The first move of `s.done`, carried out in order, after which a path it changes
/// (moved to another host) is no longer valid: the index of its item.
fn first_break(m: &Mediator, p: &Problem, s: &Solved) -> Option<usize> {
    let mut moves: BTreeMap<String, &DeviceModel> = BTreeMap::new();
    for &k in &s.done {
        let row = &p.items[k].row;
        let to = m.model().device(&p.inst.devices[s.target[k]].id)?;
        moves.insert(row.spec.id.clone(), to);
        if to.host == row.host {
            continue;
        }
        let broken = m.paths().iter().any(|(svc, path)| {
            path.hops.iter().any(|h| h.instance == row.spec.id)
                && m.moved_path_latency(svc, path, &moves).is_err()
        });
        if broken {
            return Some(k);
        }
    }
    None
}

/// The optimize plan over `m`'s recorded state; the exact solver stops at `time_limit`
/// over all its solves (each at least [`MIN_SOLVE`]; the answer then carries the gap it
/// could prove).
pub fn plan_optimize(m: &Mediator, time_limit: Duration) -> Result<OptimizePlan, PlanError> {
    let start = Instant::now();
    let mut home: BTreeSet<String> = BTreeSet::new();
    let mut first_bound: Option<u64> = None;
    let mut seconds = 0.0;
    for solves in 1..=MAX_SOLVES {
        let p = problem(m, &home)?;
        if p.items.is_empty() {
            let none = Solved {
                now: 0,
                best: 0,
                bound: 0,
                seconds: 0.0,
                target: Vec::new(),
                done: Vec::new(),
                blocked: Vec::new(),
            };
            return Ok(answer(m, &p, &none, 0, 0.0));
        }
        let limit = time_limit.saturating_sub(start.elapsed()).max(MIN_SOLVE);
        let s = solve(&p, limit)?;
        seconds += s.seconds;
        let bound = *first_bound.get_or_insert(s.bound);
        let Some(k) = first_break(m, &p, &s) else {
            return Ok(answer(m, &p, &s, bound.min(s.best), seconds));
        };
        let id = p.items[k].row.spec.id.clone();
        if solves + 1 < MAX_SOLVES {
            log::info!("optimize: a path breaks once {id} moves to another host; held home");
            home.insert(id);
        } else {
            home.extend(
                p.items
                    .iter()
                    .filter(|i| i.across)
                    .map(|i| i.row.spec.id.clone()),
            );
        }
    }
    Err(PlanError::Conflict(format!(
        "internal: a path still breaks after {MAX_SOLVES} solves, the last with every \
         instance on its host"
    )))
}

/// The plan of solve `s` of `p`, with the lower `bound` the least restricted solve
/// proved and the `seconds` all solves took.
fn answer(m: &Mediator, p: &Problem, s: &Solved, bound: u64, seconds: f64) -> OptimizePlan {
    let unscale = |c: u64| c as f64 / p.units.cost + p.accel_cost;
    let movable = p.items.iter().filter(|i| i.movable).count();
    let mv = |k: &usize| {
        let k = *k;
        let to = &p.inst.devices[s.target[k]].id;
        let row = &p.items[k].row;
        Migration {
            instance: row.spec.id.clone(),
            function: row.spec.function.clone(),
            host: row.host.clone(),
            to_host: m
                .model()
                .device(to)
                .map_or_else(|| row.host.clone(), |d| d.host.clone()),
            from: p.inst.devices[p.current[k]].id.clone(),
            to: to.clone(),
        }
    };
    let (now, best) = (s.now, s.best);
    OptimizePlan {
        cost_now: unscale(now),
        cost_optimal: unscale(best),
        bound: unscale(bound),
        gap: unscale(best) - unscale(bound),
        proven_optimal: best == bound,
        saved: unscale(now) - unscale(best),
        seconds,
        movable,
        pinned: m.instances().len() - movable,
        migrations: s.done.iter().map(mv).collect(),
        blocked: s.blocked.iter().map(mv).collect(),
    }
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
