//! The controller's power manager (`nfx up --power-manager`): for every service, the
//! energy crate's [`PowerManager`] (the energy paper's probing loop, poll-mode choice and
//! consolidation) over the workers that run only that service's instances. Its inputs
//! are the agents' heartbeat reports: each worker's ports as the kernel counts them
//! (offered = what arrived on them; delivered = offered − what the kernel dropped before
//! the worker read it, both at the ports and over the interval between the two readings)
//! and the CPU time the agent metered. The ports' counters move when a frame arrives,
//! whatever the worker's CPU limit, so a steady stream reads as a steady load; the
//! worker's own counters (bursty under a limit: it reads a quota period's worth at a
//! time) are used only where the kernel's are not readable. Its SLA is the service
//! descriptor's: `min_throughput_gbps` (capped by what is offered, 95 % of it must be
//! delivered) and `max_latency_us` (the knob never goes below the level whose worst-case
//! wait for CPU, `(1 − level) ×` the limit's period of 20 ms, exceeds it). Headroom: the
//! limit never settles below 1.5 × the CPU the worker used at the lowest level that held
//! its delivery (scaled by the offered load), nor below [`MIN_SPEED`]. Each change it
//! decides becomes a knob call on the worker's agent and an operation record of kind
//! `power` with its reason; a knob the agent refuses, or whose read-back differs from
//! what was asked, is recorded as refused and the service's manager starts over.

use crate::agents::Agents;
use crate::controller::{Controller, ServiceRow};
use crate::energy::HostFigures;
use crate::hostagent::knobs::KnobAnswer;
use crate::hostagent::knobs::{KnobRequest, KnobSetting};
use crate::hostagent::power::{WireTraffic, WorkerPower, WorkerTraffic};
use crate::mediator::InstanceRow;
use nfx_energy::manager::{Action, BoxSample, BoxSpec, PowerManager, ServicePolicy, Setting};
use nfx_energy::probe::{ProbeConfig, Sample, Sla};
use nfx_model::{Infrastructure, Tier};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the manager decides (the agents meter once a second).
pub const MANAGE_EVERY: Duration = Duration::from_secs(1);
/// Lowest CPU limit the manager sets, as a fraction of the worker's cores (the lowest
/// probe level: a 5 ms quota in each 100 ms period).
pub const MIN_SPEED: f64 = 0.05;

/// Share of the offered load a service must deliver (its SLA's delivery floor).
pub const MIN_DELIVERY: f64 = 0.95;
/// Packet rate above which a worker busy-polls (adaptive again below half of it), unless
/// [`Tuning`] says otherwise.
pub const BUSY_ABOVE_PPS: f64 = 100_000.0;
/// CPU (cores) below which a service's workers on one host share its first core, unless
/// [`Tuning`] says otherwise.
pub const CONSOLIDATE_BELOW_CORES: f64 = 0.5;

/// The load thresholds of every service's policy (`nfx up --power-busy-above-pps`,
/// `--power-consolidate-below-cores`): a host whose NICs carry less than the default
/// rate, or a test, sets where busy polling starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Packet rate (frames/s at the worker's ports) above which a worker busy-polls;
    /// below half of it, adaptive again.
    pub busy_above_pps: f64,
    /// Service CPU need (cores) below which its workers on one host share its first
    /// core; spread again above 1.5 × it.
    pub consolidate_below_cores: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            busy_above_pps: BUSY_ABOVE_PPS,
            consolidate_below_cores: CONSOLIDATE_BELOW_CORES,
        }
    }
}

impl Tuning {
    /// Refuses thresholds that are not finite and positive, naming the field.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("busy_above_pps", self.busy_above_pps),
            ("consolidate_below_cores", self.consolidate_below_cores),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name}: {v} is not a finite number above 0"));
            }
        }
        Ok(())
    }
}

/// A worker the manager has knobs on.
#[derive(Debug, Clone, PartialEq)]
struct Worker {
    host: String,
    device: String,
    cores: u32,
}

/// One service under management.
struct Managed {
    workers: Vec<Worker>,
    pm: PowerManager,
    /// Last report of each worker's counters.
    last: BTreeMap<String, Counters>,
    /// The latency figure each worker's last sample carried (named in the reasons).
    latency: BTreeMap<String, LatencyFigure>,
    /// A knob of it was refused: replaced by a new manager next round.
    refused: bool,
}

/// A decision to carry out: a knob call on `host`'s agent and its operation record.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Service it is for.
    pub service: String,
    /// Host whose agent applies it.
    pub host: String,
    /// The knob call.
    pub request: KnobRequest,
    /// Why (for the operation record).
    pub reason: String,
}

/// The knob setting the manager has put on a worker (for `/metrics`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSetting {
    /// Service.
    pub service: String,
    /// Host.
    pub host: String,
    /// Device (worker).
    pub device: String,
    /// Fraction of full speed (1 = no limit).
    pub speed: f64,
    /// Whether its probe settled and held the level for
    /// [`nfx_energy::manager::STEADY_ROUNDS`] rounds (what to wait for before measuring).
    pub settled: bool,
    /// Windows the last completed probe took to settle.
    pub probe_steps: Option<u32>,
}

/// The managers of every service (or only of the services named).
#[derive(Default)]
pub struct PowerManagers {
    services: BTreeMap<String, Managed>,
    only: Vec<String>,
    tuning: Tuning,
}

impl PowerManagers {
    /// Managers for the services named in `only` (every service when empty).
    pub fn new(only: Vec<String>) -> Self {
        Self {
            services: BTreeMap::new(),
            only,
            tuning: Tuning::default(),
        }
    }

    /// The same managers with the load thresholds of `tuning`.
    pub fn with_tuning(self, tuning: Tuning) -> Self {
        Self { tuning, ..self }
    }

    /// One round: from the recorded `services` and `instances`, each host's latest
    /// `figures` and each host's cores, the knob changes to make.
    pub fn decide(
        &mut self,
        services: &[ServiceRow],
        instances: &[InstanceRow],
        figures: &BTreeMap<String, HostFigures>,
        device_cores: &BTreeMap<String, u32>,
        host_cores: &BTreeMap<String, u32>,
    ) -> Vec<Decision> {
        let limited: Vec<WorkerSetting> = self
            .settings()
            .into_iter()
            .filter(|s| s.speed < 1.0)
            .collect();
        let mut renewed = Vec::new();
        let mut out = Vec::new();
        self.services
            .retain(|id, _| services.iter().any(|s| &s.service.id == id));
        let wanted = |id: &String| self.only.is_empty() || self.only.contains(id);
        let active: Vec<&ServiceRow> = services
            .iter()
            .filter(|s| s.status == "active" && wanted(&s.service.id))
            .collect();
        for row in active {
            let svc = &row.service;
            let workers = exclusive_workers(&svc.id, instances, device_cores);
            if workers.is_empty() {
                self.services.remove(&svc.id);
                continue;
            }
            let m = match self.services.get_mut(&svc.id) {
                Some(m) if m.workers == workers && !m.refused => m,
                _ => {
                    renewed.push(svc.id.clone());
                    let m = managed(row, workers, host_cores, &self.tuning);
                    self.services.insert(svc.id.clone(), m);
                    self.services.get_mut(&svc.id).expect("inserted above")
                }
            };
            let samples: Vec<Option<BoxSample>> = m
                .workers
                .clone()
                .iter()
                .zip(m.pm.speeds())
                .map(|(w, (_, speed))| sample(m, w, figures, speed))
                .collect();
            for a in m.pm.step(&samples) {
                if let Some(d) = to_decision(&svc.id, &m.workers, a, &m.latency) {
                    out.push(d);
                }
            }
        }
        let mut lifts = self.lift(limited, &renewed, figures);
        lifts.append(&mut out);
        lifts
    }

    /// Lifts the limit of each worker in `limited` that no manager holds any more (its
    /// service gone, not active, or sharing it), or whose service's manager was
    /// `renewed` (its workers changed; the new one starts at full speed), while the
    /// worker still runs.
    fn lift(
        &self,
        limited: Vec<WorkerSetting>,
        renewed: &[String],
        figures: &BTreeMap<String, HostFigures>,
    ) -> Vec<Decision> {
        let held = self.settings();
        limited
            .into_iter()
            .filter(|l| {
                renewed.contains(&l.service)
                    || !held
                        .iter()
                        .any(|h| h.host == l.host && h.device == l.device)
            })
            .filter(|l| {
                let w = Worker {
                    host: l.host.clone(),
                    device: l.device.clone(),
                    cores: 0,
                };
                report_of(figures, &w).is_some()
            })
            .map(|l| Decision {
                reason: format!(
                    "{}: cpu.max unlimited: no longer managed for {} (its workers changed, it stopped, or the worker is shared)",
                    l.device, l.service
                ),
                request: KnobRequest {
                    device: l.device.clone(),
                    setting: KnobSetting::CpuMax(None),
                },
                service: l.service,
                host: l.host,
            })
            .collect()
    }

    /// Drops `service`'s manager (a knob of it was refused, so its speeds are not what
    /// the kernel has): the next round starts a new one, which lifts the limit first.
    pub fn forget(&mut self, service: &str) {
        if let Some(m) = self.services.get_mut(service) {
            m.refused = true;
        }
    }

    /// The speed each managed worker runs at.
    pub fn settings(&self) -> Vec<WorkerSetting> {
        let mut v = Vec::new();
        for (svc, m) in &self.services {
            let figures =
                m.pm.speeds()
                    .into_iter()
                    .zip(m.pm.steady())
                    .zip(m.pm.settle_steps());
            for (w, (((_, speed), (_, settled)), (_, probe_steps))) in m.workers.iter().zip(figures)
            {
                v.push(WorkerSetting {
                    service: svc.clone(),
                    host: w.host.clone(),
                    device: w.device.clone(),
                    speed,
                    settled,
                    probe_steps,
                });
            }
        }
        v
    }
}

/// The software workers (host, device) that run instances of `service` and of no other
/// service: a knob on a shared worker would act on the others too.
fn exclusive_workers(
    service: &str,
    rows: &[InstanceRow],
    device_cores: &BTreeMap<String, u32>,
) -> Vec<Worker> {
    let soft = || rows.iter().filter(|r| r.tier == Tier::Software);
    let exclusive = |host: &str, device: &str| {
        soft()
            .filter(|r| r.host == host && r.spec.device == device)
            .all(|r| r.users.iter().all(|u| u == service))
    };
    let mut v: Vec<Worker> = Vec::new();
    for r in soft().filter(|r| r.users.iter().any(|u| u == service)) {
        let w = Worker {
            host: r.host.clone(),
            device: r.spec.device.clone(),
            cores: device_cores.get(&r.spec.device).copied().unwrap_or(1),
        };
        if exclusive(&w.host, &w.device) && !v.contains(&w) {
            v.push(w);
        }
    }
    v
}

/// A manager for `row`'s service over `workers`, from its SLA.
fn managed(
    row: &ServiceRow,
    workers: Vec<Worker>,
    host_cores: &BTreeMap<String, u32>,
    tuning: &Tuning,
) -> Managed {
    let sla = &row.service.sla;
    let mut probe = ProbeConfig::default();
    let cores = workers.iter().map(|w| w.cores).min().unwrap_or(1);
    probe
        .levels
        .retain(|&l| l >= MIN_SPEED - 1e-9 && keeps_latency(l, cores, sla.max_latency_us));
    let policy = ServicePolicy {
        sla: Sla {
            min_bps: sla.min_throughput_gbps * 1e9,
            max_latency_us: sla.max_latency_us,
            min_delivery: MIN_DELIVERY,
        },
        probe,
        busy_above_pps: tuning.busy_above_pps,
        consolidate_below_cores: tuning.consolidate_below_cores,
    };
    // Consolidation pins onto the host's first core: only when every worker of the
    // service shares one host.
    let one_host = workers.windows(2).all(|w| w[0].host == w[1].host);
    let cpus = match (workers.len() > 1 && one_host, workers.first()) {
        (true, Some(w)) => (0..host_cores.get(&w.host).copied().unwrap_or(1) as usize).collect(),
        _ => Vec::new(),
    };
    let boxes = workers
        .iter()
        .map(|w| BoxSpec {
            name: w.device.clone(),
            dataplane: true,
        })
        .collect();
    Managed {
        pm: PowerManager::new(policy, boxes, cpus),
        workers,
        last: BTreeMap::new(),
        latency: BTreeMap::new(),
        refused: false,
    }
}

/// Whether a worker of `cores` cores limited to `level` of them keeps a latency bound of
/// `max_latency_us`: its worst-case wait for CPU under the limit
/// ([`nfx_io::cgroup::worst_wait`], `(1 − level) ×` the limit's period) stays within it.
pub fn keeps_latency(level: f64, cores: u32, max_latency_us: f64) -> bool {
    level >= 1.0
        || nfx_io::cgroup::worst_wait(level * f64::from(cores)).as_secs_f64() * 1e6
            <= max_latency_us
}

/// `w`'s worker in the host's latest report.
fn report_of<'a>(
    figures: &'a BTreeMap<String, HostFigures>,
    w: &Worker,
) -> Option<(u64, &'a WorkerPower)> {
    match figures.get(&w.host)? {
        HostFigures::Report(r) => r
            .workers
            .iter()
            .find(|x| x.device == w.device)
            .map(|x| (r.at_unix_ms, x)),
        HostFigures::Unmetered(_) => None,
    }
}

/// One report's counters of a worker.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// When the report was sampled, ms since the Unix epoch.
    pub at_ms: u64,
    /// The worker's own port counters (zero when it did not answer).
    pub worker: WorkerTraffic,
    /// Its ports as the kernel counts them, when the agent read them.
    pub wire: Option<WireTraffic>,
}

/// How a worker used its CPU over an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuUse {
    /// Cores it used.
    pub cores: f64,
    /// Cores its limit allowed.
    pub allowed: f64,
    /// Cores of its device (full speed).
    pub device_cores: f64,
    /// Whether it polls (busy or adaptive): it then spins on what it is given.
    pub spins: bool,
    /// Cores' worth of time it waited for a CPU (not counted under its own limit).
    pub waited: f64,
}

/// The worker's sample over the interval since its previous report (`None` before the
/// second report, or when no new report arrived).
fn sample(
    m: &mut Managed,
    w: &Worker,
    figures: &BTreeMap<String, HostFigures>,
    speed: f64,
) -> Option<BoxSample> {
    let (at, wp) = report_of(figures, w)?;
    let now = Counters {
        at_ms: at,
        worker: wp.traffic,
        wire: wp.wire,
    };
    let prev = m.last.insert(w.device.clone(), now)?;
    if at <= prev.at_ms {
        m.last.insert(w.device.clone(), prev);
        return None;
    }
    let cpu = CpuUse {
        cores: wp.cpu_cores,
        allowed: speed * f64::from(w.cores),
        device_cores: f64::from(w.cores.max(1)),
        spins: wp.threads.iter().any(|t| t.poll != "interrupt"),
        // Under a limit the worker waits by design: that is not CPU it lacks.
        waited: if speed < 1.0 { 0.0 } else { wp.wait_cores },
    };
    let mut s = traffic_sample(&prev, &now, &cpu);
    let figure = LatencyFigure::of(wp);
    s.sample.latency_us = figure.map(LatencyFigure::us);
    match figure {
        Some(f) => m.latency.insert(w.device.clone(), f),
        None => m.latency.remove(&w.device),
    };
    Some(s)
}

/// The latency a worker's SLA is checked against, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencyFigure {
    /// The 99th percentile of its packets' measured time in the worker, µs, over
    /// `packets` packets (the worker's last one to two seconds).
    Measured {
        /// The p99, µs.
        p99_us: f64,
        /// Packets measured.
        packets: u64,
    },
    /// No packet measured: the longest wait for CPU its limit allows, µs (computed
    /// from the limit the kernel has, not measured).
    Bound(f64),
}

impl LatencyFigure {
    /// The worker's measured p99 where it counted packets, else its limit's bound;
    /// `None` with neither.
    pub fn of(wp: &WorkerPower) -> Option<Self> {
        match wp.latency {
            Some(l) if l.packets > 0 => Some(Self::Measured {
                p99_us: l.p99_us,
                packets: l.packets,
            }),
            _ => wp.cpu_wait_bound_us.map(Self::Bound),
        }
    }

    /// The figure, µs.
    pub fn us(self) -> f64 {
        match self {
            Self::Measured { p99_us, .. } => p99_us,
            Self::Bound(us) => us,
        }
    }

    /// How the operation record names it.
    pub fn describe(self) -> String {
        match self {
            Self::Measured { p99_us, packets } => {
                format!("latency p99 {p99_us:.0} µs measured over {packets} packets")
            }
            Self::Bound(us) => {
                format!("latency ≤ {us:.0} µs bound from the CPU limit (no packet measured)")
            }
        }
    }
}

/// Offered and delivered throughput between two readings, the CPU the worker used as a
/// fraction of full speed, and the share of the allowed cores it used — only for a
/// worker that sleeps when it has nothing to do (`interrupt`): a busy or adaptive poller
/// spins on whatever it is given (adaptive: 200 µs after every packet), so for them only
/// lost throughput marks the knee.
///
/// With the kernel's port counters on both readings: offered = what arrived on the
/// ports (plus what the kernel dropped on arrival), delivered = offered − the frames the
/// kernel dropped, at the ports or in the worker's sockets (counted only when the
/// worker answered both times), over the interval between the two readings. Otherwise
/// the worker's own counters: received + socket drops, and sent.
pub fn traffic_sample(a: &Counters, b: &Counters, cpu: &CpuUse) -> BoxSample {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
    let (wa, wb) = (&a.worker, &b.worker);
    let answered = *wb != WorkerTraffic::default() && wb.rx_packets >= wa.rx_packets;
    let sock_drops = if answered {
        d(wa.socket_drops, wb.socket_drops)
    } else {
        0.0
    };
    let (dt, frames, bytes, delivered_b) = match (a.wire, b.wire) {
        (Some(x), Some(y)) if y.at_unix_ms > x.at_unix_ms => {
            let (rx_p, rx_b) = (d(x.rx_packets, y.rx_packets), d(x.rx_bytes, y.rx_bytes));
            let dropped = d(x.rx_dropped, y.rx_dropped);
            let frame = if rx_p > 0.0 { rx_b / rx_p } else { 0.0 };
            let offered_b = rx_b + dropped * frame;
            let lost = (dropped + sock_drops).min(rx_p + dropped);
            let dt = (y.at_unix_ms - x.at_unix_ms) as f64 / 1000.0;
            (dt, rx_p + dropped, offered_b, offered_b - lost * frame)
        }
        _ => {
            let (rx_p, rx_b) = (d(wa.rx_packets, wb.rx_packets), d(wa.rx_bytes, wb.rx_bytes));
            let frame = if rx_p > 0.0 { rx_b / rx_p } else { 0.0 };
            let dt = b.at_ms.saturating_sub(a.at_ms) as f64 / 1000.0;
            let sent = d(wa.tx_bytes, wb.tx_bytes);
            (dt, rx_p + sock_drops, rx_b + sock_drops * frame, sent)
        }
    };
    let dt = dt.max(1e-3);
    BoxSample {
        sample: Sample {
            offered_bps: bytes * 8.0 / dt,
            delivered_bps: delivered_b.max(0.0) * 8.0 / dt,
            latency_us: None,
            utilization: (!cpu.spins && cpu.allowed > 0.0)
                .then(|| (cpu.cores / cpu.allowed).min(1.0)),
            used: Some(cpu.cores / cpu.device_cores),
        },
        pps: frames / dt,
        cpu_cores: cpu.cores,
        wait_cores: cpu.waited,
    }
}

/// The knob call for one of the manager's actions on `workers`; its reason names the
/// latency figure the worker's last sample carried (`latency`, by device).
fn to_decision(
    service: &str,
    workers: &[Worker],
    a: Action,
    latency: &BTreeMap<String, LatencyFigure>,
) -> Option<Decision> {
    let w = workers.iter().find(|w| w.device == a.target)?;
    let setting = match a.setting {
        Setting::Speed(f) if f >= 1.0 => KnobSetting::CpuMax(None),
        Setting::Speed(f) => KnobSetting::CpuMax(Some(
            (f * f64::from(w.cores)).max(crate::hostagent::knobs::MIN_CPU_CORES),
        )),
        Setting::Poll(p) => KnobSetting::Poll(p),
        Setting::Affinity(c) => KnobSetting::Affinity(c),
    };
    Some(Decision {
        service: service.to_string(),
        host: w.host.clone(),
        reason: match latency.get(&w.device) {
            Some(l) => format!(
                "{}: {}: {} ({})",
                w.device,
                setting.label(),
                a.reason,
                l.describe()
            ),
            None => format!("{}: {}: {}", w.device, setting.label(), a.reason),
        },
        request: KnobRequest {
            device: w.device.clone(),
            setting,
        },
    })
}

/// Runs the managers every [`MANAGE_EVERY`] until `ctl` is dropped: decides from the
/// heartbeats' reports, has each host's agent apply the knob, and records every decision
/// (applied or refused) as an operation.
pub fn start(
    ctl: &Arc<Controller>,
    agents: &Arc<Agents>,
    infra: &Infrastructure,
    only: Vec<String>,
    tuning: Tuning,
) {
    let device_cores: BTreeMap<String, u32> = infra
        .devices
        .iter()
        .filter(|d| d.tier == Tier::Software)
        .map(|d| (d.id.clone(), d.cpu_cores.unwrap_or(1)))
        .collect();
    let host_cores: BTreeMap<String, u32> = infra
        .hosts
        .iter()
        .map(|h| (h.id.clone(), h.cores))
        .collect();
    let (ctl, agents) = (Arc::downgrade(ctl), Arc::downgrade(agents));
    let spawned = std::thread::Builder::new()
        .name("power-manager".into())
        .spawn(move || {
            let mut pm = PowerManagers::new(only).with_tuning(tuning);
            loop {
                std::thread::sleep(MANAGE_EVERY);
                let (Some(ctl), Some(agents)) = (ctl.upgrade(), agents.upgrade()) else {
                    return;
                };
                let (Ok(services), Ok(instances)) = (ctl.services(), ctl.instances()) else {
                    continue;
                };
                let figures = ctl.energy_figures();
                for d in pm.decide(&services, &instances, &figures, &device_cores, &host_cores) {
                    let service = d.service.clone();
                    if !apply(&ctl, &agents, d) {
                        pm.forget(&service);
                    }
                }
                ctl.set_power_settings(pm.settings());
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the power manager: {e}");
    }
}

/// Has the agent apply `d` and records it; whether it was applied (the agent accepted
/// it and the kernel reads back what was asked).
fn apply(ctl: &Controller, agents: &Agents, d: Decision) -> bool {
    let outcome = match agents.clients().get(&d.host) {
        Some(c) => c
            .set_knob(&d.request)
            .map_err(|e| format!("refused by the agent: {e}"))
            .and_then(|a| read_back(&d.request.setting, &a)),
        None => Err(format!("refused: host {} has no agent", d.host)),
    };
    log::info!("power {}: {} ({outcome:?})", d.service, d.reason);
    let applied = outcome.is_ok();
    if let Err(e) = ctl.record_power_decision(&d.service, &d.reason, outcome) {
        log::warn!("recording a power decision of {}: {e}", d.service);
    }
    applied
}

/// The agent's answer as the operation's read-back text when every dataplane thread
/// shows `setting`; a refusal naming what the kernel reads back otherwise.
pub fn read_back(setting: &KnobSetting, a: &KnobAnswer) -> Result<String, String> {
    let limit = a.cpu_limit.clone().unwrap_or_else(|| "no cgroup".into());
    let polls: Vec<&str> = a.threads.iter().map(|t| t.poll.as_str()).collect();
    let text = format!("read back: {limit}, poll {polls:?}");
    let holds = |t: &crate::hostagent::power::ThreadKnobs| match setting {
        KnobSetting::CpuMax(want) => match (want, t.cpu_max_cores) {
            (Some(w), Some(got)) => (w - got).abs() <= 1e-3 * w.max(1.0),
            (None, None) => true,
            _ => false,
        },
        KnobSetting::Poll(m) => t.poll == m.as_str(),
        KnobSetting::Affinity(cpus) => {
            let mut want = cpus.clone();
            want.sort_unstable();
            want.dedup();
            t.affinity == want
        }
    };
    if !a.threads.is_empty() && a.threads.iter().all(holds) {
        Ok(text)
    } else {
        Err(format!(
            "refused: asked {}, the kernel reads back {text} on {} thread(s)",
            setting.label(),
            a.threads.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostagent::power::{EnergyReport, ThreadKnobs};
    use crate::vnfm::InstanceSpec;
    use nfx_energy::Source;

    /// A service whose SLA allows the CPU limit's wait (100 ms latency: a buffered
    /// video stream's) unless `max_latency_us` says otherwise.
    fn service(id: &str) -> ServiceRow {
        service_with(id, 100_000.0)
    }

    fn service_with(id: &str, max_latency_us: f64) -> ServiceRow {
        ServiceRow {
            service: serde_yaml_ng::from_str(&format!(
                "{{ id: {id}, tenant: t, ingress: h1, egress: h1, chain: [{{ function: firewall }}],
                   sla: {{ max_latency_us: {max_latency_us}, min_throughput_gbps: 1 }} }}"
            ))
            .unwrap(),
            status: "active".into(),
            operation: "op-1".into(),
        }
    }

    fn row(id: &str, device: &str, tier: Tier, users: &[&str]) -> InstanceRow {
        InstanceRow {
            spec: InstanceSpec {
                id: id.into(),
                function: "firewall".into(),
                device: device.into(),
                config: serde_json::Value::Null,
                throughput_gbps: 0.0,
                capacity: 0.0,
            },
            host: "h1".into(),
            tier,
            latency_us: 0.0,
            status: "running".into(),
            users: users.iter().map(|u| u.to_string()).collect(),
        }
    }

    /// A CPU-bound worker on one core: it needs `need` cores for `offered` bit/s of
    /// 1000-byte frames; under a limit of `limit` cores it delivers `limit/need` of them
    /// (the rest are dropped by the kernel) and uses `min(limit, need)` cores. The
    /// kernel counts the frames on its ports as they arrive (`wire`); the worker's own
    /// counters move by `1 ± jitter` of that, alternately (it reads in bursts under a
    /// CPU limit). Its agent reports `latency(limit)` µs as the latency figure: by
    /// default the bound the agent computes (the limit's worst-case wait).
    struct Box1 {
        at_ms: u64,
        t: WorkerTraffic,
        wire: WireTraffic,
        limit: f64,
        jitter: f64,
        latency: fn(f64) -> f64,
        /// The p99 the worker measures at a limit, µs (`None`: it measures nothing).
        measured: Option<fn(f64) -> f64>,
    }

    /// The agent's latency figure for a limit of `cores` (one-core worker).
    fn bound_us(cores: f64) -> f64 {
        if cores >= 1.0 {
            0.0
        } else {
            nfx_io::cgroup::worst_wait(cores).as_secs_f64() * 1e6
        }
    }

    impl Box1 {
        fn new(jitter: f64) -> Self {
            Box1 {
                at_ms: 0,
                t: WorkerTraffic::default(),
                wire: WireTraffic::default(),
                limit: 1.0,
                jitter,
                latency: bound_us,
                measured: None,
            }
        }

        fn second(&mut self, need: f64, offered_bps: f64) -> BTreeMap<String, HostFigures> {
            let frames = (offered_bps / 8000.0) as u64;
            let done = (frames as f64 * (self.limit / need).min(1.0)) as u64;
            self.at_ms += 1000;
            let sign = if (self.at_ms / 1000).is_multiple_of(2) {
                1.0
            } else {
                -1.0
            };
            let read = (done as f64 * (1.0 + sign * self.jitter)) as u64;
            self.t.rx_packets += read;
            self.t.rx_bytes += read * 1000;
            self.t.socket_drops += frames - done;
            self.t.tx_packets += read;
            self.t.tx_bytes += read * 1000;
            self.wire.at_unix_ms = self.at_ms;
            self.wire.rx_packets += frames;
            self.wire.rx_bytes += frames * 1000;
            self.wire.tx_packets += done;
            self.wire.tx_bytes += done * 1000;
            let w = WorkerPower {
                device: "h1-sw0".into(),
                pid: 1,
                cpu_cores: need.min(self.limit),
                power_w: 0.0,
                energy_j: 0.0,
                traffic: self.t,
                wire: Some(self.wire),
                threads: vec![ThreadKnobs {
                    worker: 0,
                    tid: 1,
                    poll: "adaptive".into(),
                    affinity: vec![0],
                    cpu_max_cores: None,
                    cpu_wait_bound_us: 0.0,
                }],
                wait_cores: 0.0,
                cpu_wait_bound_us: Some((self.latency)(self.limit)),
                latency: self.measured.map(|p99| nfx_proto::stats::LatencyStats {
                    window_s: 1.5,
                    packets: read,
                    p50_us: p99(self.limit) / 2.0,
                    p99_us: p99(self.limit),
                    max_us: p99(self.limit),
                    unstamped: 0,
                }),
            };
            let r = EnergyReport {
                host: "h1".into(),
                source: Source::Model,
                at_unix_ms: self.at_ms,
                interval_s: 1.0,
                power_w: 0.0,
                energy_j: 0.0,
                idle_w: 0.0,
                busy_cores: 0.0,
                instances: vec![],
                workers: vec![w],
            };
            BTreeMap::from([("h1".to_string(), HostFigures::Report(r))])
        }

        /// Runs `secs` rounds; applies the knob decisions as the agent would.
        fn run(
            &mut self,
            pm: &mut PowerManagers,
            secs: usize,
            need: f64,
            offered: f64,
        ) -> Vec<Decision> {
            self.run_for(&service("s"), pm, secs, need, offered)
        }

        /// [`Box1::run`] for the service `svc`.
        fn run_for(
            &mut self,
            svc: &ServiceRow,
            pm: &mut PowerManagers,
            secs: usize,
            need: f64,
            offered: f64,
        ) -> Vec<Decision> {
            let svc = std::slice::from_ref(svc);
            let rows = [row("fw", "h1-sw0", Tier::Software, &["s"])];
            let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
            let hosts = BTreeMap::from([("h1".to_string(), 2)]);
            let mut all = Vec::new();
            for _ in 0..secs {
                let f = self.second(need, offered);
                for d in pm.decide(svc, &rows, &f, &cores, &hosts) {
                    if let KnobSetting::CpuMax(c) = d.request.setting {
                        self.limit = c.unwrap_or(1.0);
                    }
                    all.push(d);
                }
            }
            all
        }
    }

    fn cpu_max(d: &[Decision]) -> Vec<Option<f64>> {
        d.iter()
            .filter_map(|d| match d.request.setting {
                KnobSetting::CpuMax(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn probes_the_cpu_limit_down_to_the_knee_and_re_probes_on_a_load_change() {
        let mut pm = PowerManagers::default();
        // The worker's own counters jitter by a tenth either way: the load is read from
        // the kernel's port counters, so that is no load change.
        let mut b = Box1::new(0.1);
        // 40 Mbit/s needing 0.3 core: 0.7 is skipped (it leaves 1.5 × the 0.3 core used
        // at full speed), 0.35 core holds, 0.25 loses frames; the limit settles at 1.5 ×
        // the 0.3 core it used at 0.35 (headroom): 0.45 → 0.5.
        let d = b.run(&mut pm, 12, 0.3, 40e6);
        assert_eq!(
            cpu_max(&d),
            [Some(0.5), Some(0.35), Some(0.25), Some(0.5)],
            "{d:#?}"
        );
        assert!(d
            .iter()
            .all(|d| d.host == "h1" && d.reason.starts_with("h1-sw0: cpu.max")));
        assert!(d[2].reason.contains("0.25"), "{}", d[2].reason);
        assert!(d[3].reason.contains("headroom"), "{}", d[3].reason);
        assert_eq!(b.limit, 0.5);
        // Settled: nothing more while the load holds, and the SLA (95 % delivered) is kept.
        let before = b.t;
        assert!(b.run(&mut pm, 10, 0.3, 40e6).is_empty());
        let (sent, lost) = (
            b.t.tx_packets - before.tx_packets,
            b.t.socket_drops - before.socket_drops,
        );
        assert!(sent > 0 && lost == 0, "{sent} sent, {lost} lost");
        // The load grows by half: back to no limit at once, then a new probe finds 0.5
        // holds (0.45 core used) and 0.35 does not, and settles at 0.7 (≥ 1.5 × 0.45).
        let d = b.run(&mut pm, 12, 0.45, 60e6);
        let c = cpu_max(&d);
        assert_eq!(c[0], None, "{d:#?}");
        assert!(d[0].reason.contains("rose"), "{}", d[0].reason);
        assert_eq!(b.limit, 0.7, "{d:#?}");
        assert!(c.len() <= 10);
        // The speed is exported for /metrics, settled once it held for a few rounds.
        let s = pm.settings();
        assert_eq!((s[0].device.as_str(), s[0].speed), ("h1-sw0", 0.7));
        assert!(
            s[0].settled && s[0].probe_steps.is_some_and(|n| n <= 10),
            "{s:?}"
        );
        // Another service's instance lands on the worker: its limit is lifted once.
        let rows = [
            row("fw", "h1-sw0", Tier::Software, &["s"]),
            row("nat", "h1-sw0", Tier::Software, &["u"]),
        ];
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
        let hosts = BTreeMap::from([("h1".to_string(), 2)]);
        let f = b.second(0.45, 60e6);
        let d = pm.decide(&[service("s"), service("u")], &rows, &f, &cores, &hosts);
        assert_eq!(cpu_max(&d), [None], "{d:#?}");
        assert!(d[0].reason.contains("no longer managed"), "{}", d[0].reason);
        let f = b.second(0.45, 60e6);
        assert!(pm
            .decide(&[service("s"), service("u")], &rows, &f, &cores, &hosts)
            .is_empty());
    }

    #[test]
    fn a_tight_latency_sla_keeps_the_worker_unlimited_and_unnamed_services_are_left_alone() {
        // The limit's period is 20 ms: at 5 % a packet may wait 19 ms, at 50 % 10 ms.
        assert!(keeps_latency(0.05, 1, 100_000.0));
        assert!(!keeps_latency(0.05, 1, 18_000.0));
        assert!(keeps_latency(0.5, 1, 10_000.0) && !keeps_latency(0.35, 1, 10_000.0));
        assert!(keeps_latency(0.35, 4, 1.0) && keeps_latency(1.0, 1, 0.0));
        let rows = [row("fw", "h1-sw0", Tier::Software, &["s"])];
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
        let hosts = BTreeMap::from([("h1".to_string(), 2)]);
        for (mut pm, svc) in [
            (PowerManagers::default(), service_with("s", 1_000.0)),
            (PowerManagers::new(vec!["other".into()]), service("s")),
        ] {
            let mut b = Box1::new(0.0);
            for _ in 0..12 {
                let f = b.second(0.3, 40e6);
                let d = pm.decide(std::slice::from_ref(&svc), &rows, &f, &cores, &hosts);
                assert!(d.is_empty(), "{d:?}");
            }
        }
    }

    #[test]
    fn the_poll_mode_follows_the_load_at_the_tuned_threshold() {
        let tuning = Tuning {
            busy_above_pps: 1_000.0,
            ..Tuning::default()
        };
        assert_eq!(tuning.check(), Ok(()));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let t = Tuning {
                busy_above_pps: bad,
                ..tuning
            };
            assert!(t.check().unwrap_err().starts_with("busy_above_pps: "));
        }
        // A 1 ms SLA keeps the worker unlimited: the poll mode is the only knob.
        let svc = service_with("s", 1_000.0);
        let polls = |d: &[Decision]| -> Vec<(nfx_io::PollMode, String)> {
            d.iter()
                .filter_map(|d| match d.request.setting {
                    KnobSetting::Poll(m) => Some((m, d.reason.clone())),
                    _ => None,
                })
                .collect()
        };
        // 5,000 frames/s at the default threshold (100,000): no change.
        let mut b = Box1::new(0.0);
        let d = b.run_for(&svc, &mut PowerManagers::default(), 4, 0.3, 40e6);
        assert!(d.is_empty(), "{d:#?}");
        // Tuned to 1,000: busy polling once, with its reason; held at that load.
        let mut pm = PowerManagers::default().with_tuning(tuning);
        let mut b = Box1::new(0.0);
        let d = b.run_for(&svc, &mut pm, 4, 0.3, 40e6);
        let p = polls(&d);
        assert_eq!(p.len(), 1, "{d:#?}");
        assert_eq!(p[0].0, nfx_io::PollMode::Busy);
        assert!(
            p[0].1
                .starts_with("h1-sw0: poll busy: 5000 pps > 1000: busy polling"),
            "{}",
            p[0].1
        );
        // 750 frames/s (above half the threshold): stays busy. None: adaptive again.
        assert!(b.run_for(&svc, &mut pm, 3, 0.1, 6e6).is_empty());
        let d = b.run_for(&svc, &mut pm, 3, 0.1, 0.0);
        let p = polls(&d);
        assert_eq!(p.len(), 1, "{d:#?}");
        assert_eq!(p[0].0, nfx_io::PollMode::Adaptive);
        assert!(
            p[0].1.contains("0 pps < 500: adaptive polling"),
            "{}",
            p[0].1
        );
    }

    #[test]
    fn a_level_whose_reported_latency_breaks_the_sla_is_never_settled_at() {
        // A 15 ms SLA admits the levels whose limit's wait is ≤ 15 ms (0.25 core and up).
        // With the agent reporting that bound, the worker (0.1 core needed) settles at
        // 0.25 core, where the bound is exactly 15 ms.
        let svc = service_with("s", 15_000.0);
        let mut pm = PowerManagers::default();
        let mut b = Box1::new(0.0);
        b.run_for(&svc, &mut pm, 14, 0.1, 40e6);
        assert_eq!(b.limit, 0.25);
        assert!(pm.settings()[0].settled, "{:?}", pm.settings());
        // A worker whose reported latency is twice that bound (40 ms × (1 − level): its
        // kernel's period is longer, or packets queue behind others): 0.25, 0.35 and 0.5
        // break the SLA by what the agent reports. The probe leaves them and settles at
        // 0.7 core (12 ms); once settled, the latency it reports holds.
        let mut pm = PowerManagers::default();
        let mut b = Box1::new(0.0);
        b.latency = |l| if l >= 1.0 { 0.0 } else { 40_000.0 * (1.0 - l) };
        let d = b.run_for(&svc, &mut pm, 16, 0.1, 40e6);
        assert_eq!(b.limit, 0.7, "{d:#?}");
        assert!(
            d.iter().any(|d| d.reason.contains("the SLA broke")),
            "{d:#?}"
        );
        for _ in 0..10 {
            let d = b.run_for(&svc, &mut pm, 1, 0.1, 40e6);
            assert!(d.is_empty(), "{d:#?}");
            assert!(pm.settings()[0].settled);
            assert!((b.latency)(b.limit) <= 15_000.0);
        }
    }

    #[test]
    fn measured_latency_decides_where_packets_were_measured_and_the_bound_otherwise() {
        let svc = service_with("s", 15_000.0);
        // The worker measures twice the bound (packets queue behind the throttled
        // ones): as in the test above, 0.25 to 0.5 core break the SLA, now by what was
        // measured, and the reasons say so.
        let mut pm = PowerManagers::default();
        let mut b = Box1::new(0.0);
        b.measured = Some(|l| if l >= 1.0 { 80.0 } else { 40_000.0 * (1.0 - l) });
        let d = b.run_for(&svc, &mut pm, 16, 0.1, 40e6);
        assert_eq!(b.limit, 0.7, "{d:#?}");
        let broke = d
            .iter()
            .find(|d| d.reason.contains("the SLA broke"))
            .unwrap();
        assert!(
            broke.reason.contains("µs measured over") && !broke.reason.contains("bound"),
            "{broke:#?}"
        );
        // Measured well within the SLA while the bound alone would break it (a bound
        // of 40 ms × (1 − level)): the measurement wins, the probe settles at 0.25 core,
        // the lowest level the SLA's pre-filter admits.
        let mut pm = PowerManagers::default();
        let mut b = Box1::new(0.0);
        b.latency = |l| if l >= 1.0 { 0.0 } else { 40_000.0 * (1.0 - l) };
        b.measured = Some(|_| 900.0);
        let d = b.run_for(&svc, &mut pm, 14, 0.1, 40e6);
        assert_eq!(b.limit, 0.25, "{d:#?}");
        assert!(
            !d.iter().any(|d| d.reason.contains("the SLA broke")),
            "{d:#?}"
        );
        assert!(
            d.iter()
                .all(|d| d.reason.contains("latency p99 900 µs measured")),
            "{d:#?}"
        );
        // Nothing measured (no packet in the window): the bound decides, and says so.
        let mut pm = PowerManagers::default();
        let mut b = Box1::new(0.0);
        b.latency = |l| if l >= 1.0 { 0.0 } else { 40_000.0 * (1.0 - l) };
        b.measured = Some(|_| 900.0);
        let mut fig = WorkerPower {
            latency: Some(nfx_proto::stats::LatencyStats::default()),
            ..worker_power_with_bound(5_000.0)
        };
        assert_eq!(LatencyFigure::of(&fig), Some(LatencyFigure::Bound(5_000.0)));
        fig.latency = None;
        assert_eq!(LatencyFigure::of(&fig), Some(LatencyFigure::Bound(5_000.0)));
        fig.cpu_wait_bound_us = None;
        assert_eq!(LatencyFigure::of(&fig), None);
        b.measured = None;
        let d = b.run_for(&svc, &mut pm, 16, 0.1, 40e6);
        assert_eq!(b.limit, 0.7, "{d:#?}");
        assert!(
            d.iter().any(|d| d.reason.contains("the SLA broke")
                && d.reason
                    .contains("bound from the CPU limit (no packet measured)")),
            "{d:#?}"
        );
    }

    /// A worker's report with latency bound `us` and nothing else.
    fn worker_power_with_bound(us: f64) -> WorkerPower {
        WorkerPower {
            device: "d".into(),
            pid: 1,
            cpu_cores: 0.0,
            power_w: 0.0,
            energy_j: 0.0,
            traffic: WorkerTraffic::default(),
            wire: None,
            threads: Vec::new(),
            wait_cores: 0.0,
            cpu_wait_bound_us: Some(us),
            latency: None,
        }
    }

    #[test]
    fn only_software_workers_of_one_service_are_managed() {
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1), ("h1-sw1".to_string(), 2)]);
        let rows = [
            row("a", "h1-sw0", Tier::Software, &["s"]),
            row("b", "h1-sw1", Tier::Software, &["s"]),
            row("c", "h1-sw1", Tier::Software, &["t"]),
            row("d", "h1-acc", Tier::Accelerator, &["s"]),
        ];
        let w = exclusive_workers("s", &rows, &cores);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].device.as_str(), w[0].cores), ("h1-sw0", 1));
        assert!(exclusive_workers("t", &rows, &cores).is_empty());
    }

    #[test]
    fn offered_load_is_counted_at_the_ports_and_losses_at_the_kernel() {
        let cpu = |cores, spins| CpuUse {
            cores,
            allowed: 0.5,
            device_cores: 1.0,
            spins,
            waited: 0.0,
        };
        let wire = |at, rx: u64, dropped| WireTraffic {
            at_unix_ms: at,
            rx_packets: rx,
            rx_bytes: rx * 1000,
            rx_dropped: dropped,
            tx_packets: 0,
            tx_bytes: 0,
        };
        let a = Counters {
            at_ms: 1_000,
            worker: WorkerTraffic::default(),
            wire: Some(wire(1_000, 0, 0)),
        };
        // 2 s apart by the wire readings (the report's own time is later): 1,000 frames
        // arrived, 10 dropped on arrival, 40 in the worker's sockets; the worker read
        // only 500 so far (a burst still waits in its ring).
        let b = Counters {
            at_ms: 3_500,
            worker: WorkerTraffic {
                rx_packets: 500,
                rx_bytes: 500_000,
                socket_drops: 40,
                tx_packets: 500,
                tx_bytes: 500_000,
            },
            wire: Some(wire(3_000, 1_000, 10)),
        };
        let s = traffic_sample(&a, &b, &cpu(0.2, false));
        assert_eq!(s.sample.offered_bps, 1_010_000.0 * 8.0 / 2.0);
        assert_eq!(s.sample.delivered_bps, 960_000.0 * 8.0 / 2.0);
        assert_eq!(s.pps, 505.0);
        assert_eq!(s.sample.utilization, Some(0.4));
        assert_eq!(s.sample.used, Some(0.2));
        // A worker that did not answer (its counters read zero): no socket drops.
        let mut silent = b;
        silent.worker = WorkerTraffic::default();
        let s = traffic_sample(&a, &silent, &cpu(0.2, true));
        assert_eq!(s.sample.delivered_bps, 1_000_000.0 * 8.0 / 2.0);
        assert_eq!(s.sample.utilization, None);
    }

    #[test]
    fn without_port_counters_the_workers_own_are_used() {
        let cpu = CpuUse {
            cores: 0.2,
            allowed: 0.5,
            device_cores: 1.0,
            spins: false,
            waited: 0.0,
        };
        let a = Counters {
            at_ms: 0,
            ..Counters::default()
        };
        let b = Counters {
            at_ms: 2_000,
            worker: WorkerTraffic {
                rx_packets: 900,
                rx_bytes: 900_000,
                socket_drops: 100,
                tx_packets: 900,
                tx_bytes: 900_000,
            },
            wire: None,
        };
        let s = traffic_sample(&a, &b, &cpu);
        assert_eq!(s.sample.offered_bps, 4e6);
        assert_eq!(s.sample.delivered_bps, 3.6e6);
        assert_eq!((s.pps, s.sample.utilization), (500.0, Some(0.4)));
        // Counters that went back (a restarted worker) give zero, not a wrap.
        let back = Counters { at_ms: 3_000, ..a };
        assert_eq!(traffic_sample(&b, &back, &cpu).sample.offered_bps, 0.0);
    }

    #[test]
    fn a_knob_the_kernel_does_not_show_is_refused() {
        use crate::hostagent::power::ThreadKnobs;
        let answer = |limit: Option<f64>, poll: &str| KnobAnswer {
            device: "h1-sw0".into(),
            pid: 1,
            cgroup: None,
            cpu_limit: limit.map(|l| format!("cfs_quota_us={}", l * 1e5)),
            threads: vec![ThreadKnobs {
                worker: 0,
                tid: 1,
                poll: poll.into(),
                affinity: vec![0, 1],
                cpu_max_cores: limit,
                cpu_wait_bound_us: 0.0,
            }],
        };
        let ok = read_back(
            &KnobSetting::CpuMax(Some(0.35)),
            &answer(Some(0.35), "adaptive"),
        );
        assert!(ok.unwrap().starts_with("read back"));
        let e = read_back(
            &KnobSetting::CpuMax(Some(0.35)),
            &answer(Some(0.5), "adaptive"),
        )
        .unwrap_err();
        assert!(e.starts_with("refused") && e.contains("0.35"), "{e}");
        assert!(read_back(&KnobSetting::CpuMax(None), &answer(Some(0.5), "busy")).is_err());
        assert!(read_back(&KnobSetting::CpuMax(None), &answer(None, "busy")).is_ok());
        assert!(read_back(
            &KnobSetting::Poll(nfx_io::PollMode::Busy),
            &answer(None, "busy")
        )
        .is_ok());
        assert!(read_back(&KnobSetting::Affinity(vec![1, 0]), &answer(None, "busy")).is_ok());
        assert!(read_back(&KnobSetting::Affinity(vec![0]), &answer(None, "busy")).is_err());
        let mut none = answer(None, "busy");
        none.threads.clear();
        assert!(read_back(&KnobSetting::CpuMax(None), &none).is_err());
    }
}
