//! The `nfx place` and `nfx chain` inputs as projections of what the controller runs on
//! (`nfx plan --export-placement F --export-chaining F`, `POST /api/v1/projection`): the
//! infrastructure descriptor's devices with the live resource model, the recorded
//! instances, and the services' chains and SLAs. docs/descriptors.md ("Projections")
//! states every mapping; the exported files are read by the same parsers as the tools'.

use crate::controller::{Controller, CtlError};
use crate::mediator::{chain_spec, is_down, Mediator, PlanError, UNREACHABLE_US};
use crate::topology::transfer_matrix;
use nfx_chaining::from_model::sla_for_service;
use nfx_chaining::{Id, Workload};
use nfx_model::service::Service;
use nfx_model::{DeviceModel, Tier};
use nfx_placement::{Device, DeviceKind, Instance, VnfInstance};
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// Rounding tolerance when a scaled amount is taken as an integer.
const EPS: f64 = 1e-6;

/// `nfx place` reads integers: the factor each kind of amount was multiplied by (1, 10,
/// 100 or 1000, the least that makes every amount of that kind whole).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Units {
    /// `throughput_gbps` = Gbit/s × this.
    pub throughput: f64,
    /// `cpu_capacity`/`cpu_need` = cores × this.
    pub cpu: f64,
    /// `tcam_capacity`/`tcam_need` = table entries × this.
    pub tcam: f64,
    /// `cost` = the descriptor's cost × this.
    pub cost: f64,
}

impl Units {
    /// The factors for the given amounts of each kind.
    pub fn fit(
        throughput: impl IntoIterator<Item = f64>,
        cpu: impl IntoIterator<Item = f64>,
        tcam: impl IntoIterator<Item = f64>,
        cost: impl IntoIterator<Item = f64>,
    ) -> Self {
        Units {
            throughput: factor(throughput),
            cpu: factor(cpu),
            tcam: factor(tcam),
            cost: factor(cost),
        }
    }

    /// A short statement of the factors, for the instance's `name`.
    pub fn describe(&self) -> String {
        format!(
            "throughput_gbps x{}, cpu x{}, tcam x{}, cost x{}; latencies in whole µs",
            self.throughput, self.cpu, self.tcam, self.cost
        )
    }
}

/// The least of 1, 10, 100, 1000 making every value whole (1000 if none does: the
/// amounts are then rounded, needs up and capacities down).
fn factor(values: impl IntoIterator<Item = f64>) -> f64 {
    let vals: Vec<f64> = values.into_iter().collect();
    [1.0, 10.0, 100.0]
        .into_iter()
        .find(|s| vals.iter().all(|v| ((v * s) - (v * s).round()).abs() < EPS))
        .unwrap_or(1000.0)
}

/// A need scaled by `f`, rounded up.
pub(crate) fn need(v: f64, f: f64) -> u64 {
    (v.max(0.0) * f - EPS).ceil().max(0.0) as u64
}

/// A capacity scaled by `f`, rounded down.
pub(crate) fn cap(v: f64, f: f64) -> u64 {
    (v.max(0.0) * f + EPS).floor() as u64
}

/// Both projections of a set of services, as `POST /api/v1/projection` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// The `nfx place` instance: where the services' functions could go.
    pub placement: Instance,
    /// The factors of the placement instance's integers.
    pub units: Units,
    /// The `nfx chain` workload: the services' SLAs over the running instances.
    pub chaining: Workload,
}

/// Body of `POST /api/v1/projection`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectionRequest {
    /// The services to project (not deployed, nothing is reserved).
    pub services: Vec<Service>,
}

/// The placement tier of a device, or `None` for an accelerator (the offline problem has
/// software and table devices only; the accelerator tier holds tunnel endpoints).
pub(crate) fn kind_of(tier: Tier) -> Option<DeviceKind> {
    match tier {
        Tier::Software => Some(DeviceKind::Software),
        Tier::Table => Some(DeviceKind::Hardware),
        Tier::Accelerator => None,
    }
}

/// An offline-problem device for `d` with `functions`, `capacity`/`throughput` in the
/// device's own units (scaled by `u` here) and `cost` already scaled.
pub(crate) fn device(
    d: &DeviceModel,
    functions: Vec<String>,
    capacity: f64,
    throughput: f64,
    cost: u64,
    u: &Units,
) -> Option<Device> {
    let kind = kind_of(d.tier)?;
    let (tcam, cpu) = match kind {
        DeviceKind::Hardware => (Some(cap(capacity, u.tcam)), None),
        DeviceKind::Software => (None, Some(cap(capacity, u.cpu))),
    };
    Some(Device {
        id: d.id.clone(),
        model: d.tier.as_str().into(),
        kind,
        functions,
        cost,
        tcam_capacity: tcam,
        cpu_capacity: cpu,
        latency_us: d.latency_us.max(0.0).ceil() as u64,
        throughput_gbps: cap(throughput, u.throughput),
    })
}

/// Whether `d` may take new instances: a software or table device on a host that is up.
fn usable(m: &Mediator, d: &DeviceModel) -> bool {
    kind_of(d.tier).is_some() && !is_down(&m.down_hosts(), &d.host)
}

/// The `nfx place` instance of `services`: one VNF instance per chain function (CPU need =
/// its `capacity_need`, table need = its table entries as the mediator counts them, else
/// its `capacity_need`; throughput = the SLA's, latency bound = the SLA's whole bound),
/// on the usable devices' free capacity and throughput; a device that already hosts an
/// instance costs nothing more.
pub fn placement(m: &Mediator, services: &[Service]) -> Result<(Instance, Units), PlanError> {
    let model = m.model();
    let devs: Vec<&DeviceModel> = model.devices().iter().filter(|d| usable(m, d)).collect();
    let mut entries: Vec<Vec<f64>> = Vec::new();
    for s in services {
        let pins = crate::mediator::pins::pins(s, m.infra())?;
        entries.push(
            s.chain
                .iter()
                .map(|c| pins[&c.function].capacity(Tier::Table, c.capacity_need))
                .collect(),
        );
    }
    let stages = || {
        services
            .iter()
            .flat_map(|s| s.chain.iter().map(move |c| (s, c)))
    };
    let of = |t: Tier| {
        let d = devs.iter().filter(move |d| d.tier == t);
        let needs: Vec<f64> = match t {
            Tier::Table => entries.iter().flatten().copied().collect(),
            _ => stages().map(|(_, c)| c.capacity_need).collect(),
        };
        d.map(|d| d.capacity.free()).chain(needs)
    };
    let units = Units::fit(
        devs.iter()
            .map(|d| d.throughput_gbps.free())
            .chain(services.iter().map(|s| s.sla.min_throughput_gbps)),
        of(Tier::Software),
        of(Tier::Table),
        devs.iter().map(|d| d.cost),
    );
    let mut functions: Vec<String> = devs.iter().flat_map(|d| d.functions.clone()).collect();
    functions.extend(stages().map(|(_, c)| c.function.clone()));
    functions.sort();
    functions.dedup();
    let devices = devs
        .iter()
        .filter_map(|d| {
            let used = model.instances().iter().any(|i| i.device == d.id);
            let cost = if used { 0 } else { cap(d.cost, units.cost) };
            let (c, t) = (d.capacity.free(), d.throughput_gbps.free());
            device(d, d.functions.clone(), c, t, cost, &units)
        })
        .collect();
    let vnf_instances = services
        .iter()
        .zip(&entries)
        .flat_map(|(s, e)| {
            s.chain
                .iter()
                .enumerate()
                .map(move |(k, c)| (s, e[k], k, c))
        })
        .map(|(s, table_entries, k, c)| VnfInstance {
            id: format!("{}-{k}-{}", s.id, c.function),
            function: c.function.clone(),
            tcam_need: need(table_entries, units.tcam),
            cpu_need: need(c.capacity_need, units.cpu),
            latency_bound_us: (s.sla.max_latency_us + EPS).floor().max(0.0) as u64,
            throughput_gbps: need(s.sla.min_throughput_gbps, units.throughput),
        })
        .collect();
    let names: Vec<&str> = services.iter().map(|s| s.id.as_str()).collect();
    let inst = Instance {
        name: format!(
            "placement projection of {} ({})",
            names.join(", "),
            units.describe()
        ),
        functions,
        devices,
        vnf_instances,
    };
    inst.validate("placement projection")
        .map_err(|e| PlanError::Conflict(e.to_string()))?;
    Ok((inst, units))
}

/// The chaining function id of `function` with `config`: the function's name alone for
/// no config, else the name and a hash of the config, so that `nfx chain` reuses only
/// instances whose configuration is the stage's, as the controller does.
pub fn function_key(function: &str, config: &serde_json::Value) -> String {
    if config.is_null() {
        return function.to_string();
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    config.to_string().hash(&mut h);
    format!("{function}#{:016x}", h.finish())
}

/// The `nfx chain` workload of `services`: the hosts and their shortest transfer
/// latencies, every recorded instance a new path may use (not being destroyed, not lost,
/// on a host that is up) with its live throughput and capacity, and one SLA per service.
pub fn chaining(m: &Mediator, services: &[Service]) -> Result<Workload, PlanError> {
    let infra = m.infra();
    let down = m.down_hosts();
    let mut instances = Vec::new();
    for (id, r) in m.instances() {
        if matches!(r.status.as_str(), "destroying" | "lost") || is_down(&down, &r.host) {
            continue;
        }
        let im = m.model().instance(id).ok_or_else(|| {
            PlanError::Conflict(format!("instance {id} missing from the resource model"))
        })?;
        let function = function_key(&r.spec.function, &r.spec.config);
        instances.push(chain_spec(r, &function, im));
    }
    let mut slas = Vec::new();
    for s in services {
        let mut sla = sla_for_service(s);
        for (f, c) in sla.chain.iter_mut().zip(&s.chain) {
            let config = serde_json::to_value(&c.config)
                .map_err(|e| PlanError::Invalid(format!("service {}: {e}", s.id)))?;
            *f = Id::from(function_key(&c.function, &config));
        }
        slas.push(sla);
    }
    Ok(Workload {
        nodes: infra
            .hosts
            .iter()
            .map(|h| Id::from(h.id.as_str()))
            .collect(),
        transfer_latency_us: transfer_matrix(infra, UNREACHABLE_US),
        instances,
        slas,
    })
}

/// Both projections of `services` over `m`'s current state.
pub fn project(m: &Mediator, services: &[Service]) -> Result<Projection, PlanError> {
    if services.is_empty() {
        return Err(PlanError::Invalid("services: give at least one".into()));
    }
    let (placement, units) = placement(m, services)?;
    Ok(Projection {
        placement,
        units,
        chaining: chaining(m, services)?,
    })
}

impl Controller {
    /// Both projections of `services` over the live state (nothing is reserved).
    pub fn projection(&self, services: &[Service]) -> Result<Projection, CtlError> {
        Ok(self.with_mediator(|m| project(m, services))?)
    }
}
