//! What the dashboard shows, as typed records (the payload of its server-sent events and
//! of `GET /api/v1/dashboard`), and how one is read from the controller: topology from
//! the infrastructure, chains from the recorded paths, tiers and reservations from the
//! resource model, counters from each instance's VNFM (`get_instance_state`), rates from
//! the difference with the previous sample.

use crate::controller::{Controller, CtlError};
use crate::energy::{HostEnergy, ServiceEnergy};
use crate::mediator::is_down;
use crate::ops::{Operation, StepStatus};
use crate::vnfm::{InstanceState, Vnfm};
use nfx_model::Tier;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Instances whose VNFM is asked for live counters in one sample; the others are listed
/// without counters (a sample must stay cheap with thousands of simulated instances).
pub const MAX_LIVE: usize = 256;
/// Operations a snapshot carries (the newest).
pub const MAX_OPERATIONS: usize = 30;

/// One picture of the platform.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Sample number (0: nothing sampled yet).
    pub seq: u64,
    /// When it was taken, ms since the epoch.
    pub at_unix_ms: u64,
    /// Hosts of the infrastructure.
    pub hosts: Vec<HostView>,
    /// Links between hosts.
    pub links: Vec<LinkView>,
    /// Devices with their reservations.
    pub devices: Vec<DeviceView>,
    /// Services with their chains across hosts.
    pub services: Vec<ServiceView>,
    /// Every recorded instance with its live counters.
    pub instances: Vec<InstanceView>,
    /// Energy per service.
    pub energy: EnergyView,
    /// The newest operations, newest first.
    pub operations: Vec<OperationView>,
}

/// A host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    /// Host id.
    pub id: String,
    /// Cores.
    pub cores: u32,
    /// The VNFM serving it (`simulated`, `local`, `remote`, `agent`).
    pub vnfm: String,
    /// Whether its VNFM is the simulated one (modelled, no packets).
    pub simulated: bool,
    /// Whether its agent is down.
    pub down: bool,
}

/// A link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkView {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// One-way latency, µs.
    pub latency_us: f64,
}

/// A device and what the controller reserved on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    /// Device id.
    pub id: String,
    /// Host.
    pub host: String,
    /// Tier.
    pub tier: Tier,
    /// Capacity (cores, table entries or queue pairs).
    pub capacity_total: f64,
    /// Capacity granted to instances.
    pub capacity_used: f64,
    /// Instances on it.
    pub instances: usize,
}

/// A service and its chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceView {
    /// Service id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// `deploying`, `active`, ...
    pub status: String,
    /// Ingress host.
    pub ingress: String,
    /// Egress host.
    pub egress: String,
    /// Hops in order (empty until placed).
    pub hops: Vec<HopView>,
}

/// One hop of a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopView {
    /// Function.
    pub function: String,
    /// Instance id.
    pub instance: String,
    /// Device.
    pub device: String,
    /// Host.
    pub host: String,
}

/// An instance with its live counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceView {
    /// Instance id.
    pub id: String,
    /// Function.
    pub function: String,
    /// Device.
    pub device: String,
    /// Host.
    pub host: String,
    /// Tier of its device.
    pub tier: Tier,
    /// `planned`, `running`, `destroying`, `lost`.
    pub status: String,
    /// The VNFM that runs it.
    pub vnfm: String,
    /// Whether that VNFM is the simulated one: its counters are modelled, not packets.
    pub simulated: bool,
    /// Counters, when its VNFM answered.
    pub live: Option<LiveCounters>,
    /// Why there are no counters.
    pub live_error: Option<String>,
}

/// An instance's counters from its VNFM, with rates over the previous sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveCounters {
    /// Packets processed.
    pub packets: u64,
    /// Bytes processed, where the VNFM reports them.
    pub bytes: Option<u64>,
    /// Packets dropped (every reason), where the VNFM reports them.
    pub drops: Option<u64>,
    /// Drops by reason.
    pub drops_by_reason: BTreeMap<String, u64>,
    /// Flow-state entries.
    pub flows: u64,
    /// CPU of its worker, percent.
    pub cpu_pct: f64,
    /// Packets per second since the previous sample.
    pub pps: Option<f64>,
    /// Drops per second since the previous sample.
    pub drops_per_s: Option<f64>,
}

/// Energy per service and per host from the agents' power agents, or why there is none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyView {
    /// Whether the controller has energy figures.
    pub reported: bool,
    /// Why not, when it has none.
    pub reason: String,
    /// Per service, each with its source.
    pub services: Vec<ServiceEnergy>,
    /// Per host, each with its source or why it is not metered.
    pub hosts: Vec<HostEnergy>,
}

/// An operation of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationView {
    /// Operation id.
    pub id: String,
    /// `deploy`, `destroy`, `migrate`, `replace`.
    pub kind: String,
    /// Service or instance.
    pub target: String,
    /// SOL003 state.
    pub state: String,
    /// Steps done.
    pub steps_done: usize,
    /// Steps in all.
    pub steps: usize,
    /// Why it failed.
    pub error: Option<String>,
    /// Last change, ms since the epoch.
    pub updated_ms: i64,
}

/// The node counters the local VNFM puts in `detail.node` (a worker's stats node).
#[derive(Default, Deserialize)]
struct NodeDetail {
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    drops: Option<BTreeMap<String, u64>>,
}

#[derive(Default, Deserialize)]
struct Detail {
    #[serde(default)]
    node: Option<NodeDetail>,
}

/// Counters of the previous sample, for rates.
#[derive(Default)]
pub struct Previous {
    at: HashMap<String, (Instant, u64, Option<u64>)>,
}

const ENERGY_REASON: &str = "not reported: no host agent has sent energy figures (hosts without an agent, or agents not metering)";

/// The energy part of a snapshot.
fn energy_view(ctl: &Controller) -> Result<EnergyView, CtlError> {
    let e = ctl.energy()?;
    Ok(EnergyView {
        reported: e.reported,
        reason: if e.reported {
            String::new()
        } else {
            ENERGY_REASON.into()
        },
        services: e.services,
        hosts: e.hosts,
    })
}

/// Reads one snapshot (blocking: store reads and VNFM calls); `prev` turns counters into
/// rates and is updated.
pub fn take(ctl: &Controller, seq: u64, prev: &mut Previous) -> Result<Snapshot, CtlError> {
    let services = ctl.services()?;
    let rows = ctl.instances()?;
    let mut ops = ctl.operations()?;
    let (hosts, links, devices, paths, vnfms) = ctl.with_mediator(|m| {
        let down = m.down_hosts();
        let hosts: Vec<HostView> = m
            .infra()
            .hosts
            .iter()
            .map(|h| {
                let kind = m.vnfms().get(&h.id).kind();
                HostView {
                    id: h.id.clone(),
                    cores: h.cores,
                    vnfm: kind.into(),
                    simulated: kind == "simulated",
                    down: is_down(&down, &h.id),
                }
            })
            .collect();
        let links = m
            .infra()
            .links
            .iter()
            .map(|l| LinkView {
                a: l.a.clone(),
                b: l.b.clone(),
                latency_us: l.latency_us,
            })
            .collect();
        let devices = m
            .model()
            .devices()
            .iter()
            .map(|d| DeviceView {
                id: d.id.clone(),
                host: d.host.clone(),
                tier: d.tier,
                capacity_total: d.capacity.total,
                capacity_used: d.capacity.used,
                instances: m
                    .model()
                    .instances()
                    .iter()
                    .filter(|i| i.device == d.id)
                    .count(),
            })
            .collect();
        let vnfms: HashMap<String, Arc<dyn Vnfm>> = m
            .infra()
            .hosts
            .iter()
            .map(|h| (h.id.clone(), m.vnfms().get(&h.id).clone()))
            .collect();
        (hosts, links, devices, m.paths().clone(), vnfms)
    });
    let services = services
        .into_iter()
        .map(|s| ServiceView {
            hops: paths
                .get(&s.service.id)
                .map(|p| {
                    p.hops
                        .iter()
                        .map(|h| HopView {
                            function: h.function.clone(),
                            instance: h.instance.clone(),
                            device: h.device.clone(),
                            host: h.host.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            id: s.service.id,
            tenant: s.service.tenant,
            status: s.status,
            ingress: s.service.ingress,
            egress: s.service.egress,
        })
        .collect();
    let now = Instant::now();
    let mut seen = HashMap::new();
    let instances = rows
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let vnfm = vnfms.get(&r.host);
            let kind = vnfm.map(|v| v.kind()).unwrap_or("none");
            let (live, live_error) = match vnfm {
                Some(_) if i >= MAX_LIVE => (
                    None,
                    Some(format!("not sampled (over {MAX_LIVE} instances)")),
                ),
                Some(v) => match v.get_instance_state(&r.spec.id) {
                    Ok(s) => (
                        Some(counters(&s, now, prev.at.get(&r.spec.id), &mut seen)),
                        None,
                    ),
                    Err(e) => (None, Some(e.to_string())),
                },
                None => (None, Some(format!("no VNFM serves host {}", r.host))),
            };
            InstanceView {
                id: r.spec.id,
                function: r.spec.function,
                device: r.spec.device,
                host: r.host,
                tier: r.tier,
                status: r.status,
                vnfm: kind.into(),
                simulated: kind == "simulated",
                live,
                live_error,
            }
        })
        .collect();
    prev.at = seen;
    ops.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
    ops.truncate(MAX_OPERATIONS);
    Ok(Snapshot {
        seq,
        at_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        hosts,
        links,
        devices,
        services,
        instances,
        energy: energy_view(ctl)?,
        operations: ops.iter().map(operation_view).collect(),
    })
}

/// An instance's counters from its state, with rates against `before`; records this
/// sample in `seen`.
fn counters(
    s: &InstanceState,
    now: Instant,
    before: Option<&(Instant, u64, Option<u64>)>,
    seen: &mut HashMap<String, (Instant, u64, Option<u64>)>,
) -> LiveCounters {
    let node = serde_json::from_value::<Detail>(s.detail.clone())
        .ok()
        .and_then(|d| d.node)
        .unwrap_or_default();
    let drops = node.drops.as_ref().map(|d| d.values().sum::<u64>());
    let rate = |now_v: u64, then_v: u64, then: Instant| {
        let dt = now.duration_since(then).as_secs_f64();
        (dt > 0.0 && now_v >= then_v).then(|| (now_v - then_v) as f64 / dt)
    };
    let (pps, drops_per_s) = match before {
        Some(&(t, p, d)) => (
            rate(s.packets, p, t),
            drops.zip(d).and_then(|(n, o)| rate(n, o, t)),
        ),
        None => (None, None),
    };
    seen.insert(s.id.clone(), (now, s.packets, drops));
    LiveCounters {
        packets: s.packets,
        bytes: node.bytes,
        drops,
        drops_by_reason: node.drops.unwrap_or_default(),
        flows: s.flows,
        cpu_pct: s.cpu_pct,
        pps,
        drops_per_s,
    }
}

fn operation_view(o: &Operation) -> OperationView {
    OperationView {
        id: o.id.clone(),
        kind: serde_json::to_value(o.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        target: o.target.clone(),
        state: o.state.as_str().into(),
        steps_done: o
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Done)
            .count(),
        steps: o.steps.len(),
        error: o.error.clone(),
        updated_ms: o.updated_ms,
    }
}
