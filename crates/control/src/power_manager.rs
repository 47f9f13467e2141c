//! The controller's power manager (`nfx up --power-manager`): for every service, the
//! energy crate's [`PowerManager`] (the energy paper's probing loop, poll-mode choice and
//! consolidation) over the workers that run only that service's instances. Its inputs
//! are the agents' heartbeat reports: each worker's cumulative port counters (offered =
//! frames received + frames the kernel dropped before the worker read them; delivered =
//! frames sent, both in bit/s over the interval between two reports) and the CPU time
//! the agent metered. Its SLA is the service descriptor's: `min_throughput_gbps` (capped
//! by what is offered, 95 % of it must be delivered) and `max_latency_us` (latency is not
//! measured by the agents; instead the knob never goes below the level whose worst-case
//! wait for CPU, `(1 − level) × the CFS period` of 100 ms, exceeds it). Each change it
//! decides becomes a knob call on the worker's agent and an operation record of kind
//! `power` with its reason.

use crate::agents::Agents;
use crate::controller::{Controller, ServiceRow};
use crate::energy::HostFigures;
use crate::hostagent::knobs::{KnobRequest, KnobSetting};
use crate::hostagent::power::{WorkerPower, WorkerTraffic};
use crate::mediator::InstanceRow;
use nfx_energy::manager::{Action, BoxSample, BoxSpec, PowerManager, ServicePolicy, Setting};
use nfx_energy::probe::{ProbeConfig, Sample, Sla};
use nfx_model::{Infrastructure, Tier};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the manager decides (the agents meter once a second).
pub const MANAGE_EVERY: Duration = Duration::from_secs(1);
/// A relative change of offered load that starts a new probe. The load is counted at the
/// worker, where a CPU limit turns a steady stream into bursts (one quota period's worth
/// at a time), so a one-second sample moves by up to a tenth either way with no change
/// at the source: the standalone prober's 20 % would re-probe on that noise alone.
const LOAD_CHANGE: f64 = 0.35;

/// Share of the offered load a service must deliver (its SLA's delivery floor).
pub const MIN_DELIVERY: f64 = 0.95;
/// Packet rate above which a worker busy-polls (adaptive again below half of it).
pub const BUSY_ABOVE_PPS: f64 = 100_000.0;
/// CPU (cores) below which a service's workers on one host share its first core.
pub const CONSOLIDATE_BELOW_CORES: f64 = 0.5;

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
    /// Last report of each worker: (sampled at, ms; its counters).
    last: BTreeMap<String, (u64, WorkerTraffic)>,
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
}

/// The managers of every service (or only of the services named).
#[derive(Default)]
pub struct PowerManagers {
    services: BTreeMap<String, Managed>,
    only: Vec<String>,
}

impl PowerManagers {
    /// Managers for the services named in `only` (every service when empty).
    pub fn new(only: Vec<String>) -> Self {
        Self {
            services: BTreeMap::new(),
            only,
        }
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
                Some(m) if m.workers == workers => m,
                _ => {
                    renewed.push(svc.id.clone());
                    let m = managed(row, workers, host_cores);
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
                if let Some(d) = to_decision(&svc.id, &m.workers, a) {
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

    /// The speed each managed worker runs at.
    pub fn settings(&self) -> Vec<WorkerSetting> {
        let mut v = Vec::new();
        for (svc, m) in &self.services {
            for (w, (_, speed)) in m.workers.iter().zip(m.pm.speeds()) {
                v.push(WorkerSetting {
                    service: svc.clone(),
                    host: w.host.clone(),
                    device: w.device.clone(),
                    speed,
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
fn managed(row: &ServiceRow, workers: Vec<Worker>, host_cores: &BTreeMap<String, u32>) -> Managed {
    let sla = &row.service.sla;
    let mut probe = ProbeConfig {
        load_change: LOAD_CHANGE,
        ..ProbeConfig::default()
    };
    let floor = latency_floor(sla.max_latency_us);
    probe.levels.retain(|&l| l >= floor);
    let policy = ServicePolicy {
        sla: Sla {
            min_bps: sla.min_throughput_gbps * 1e9,
            max_latency_us: sla.max_latency_us,
            min_delivery: MIN_DELIVERY,
        },
        probe,
        busy_above_pps: BUSY_ABOVE_PPS,
        consolidate_below_cores: CONSOLIDATE_BELOW_CORES,
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
    }
}

/// The lowest speed whose worst-case wait for CPU under the CPU limit, `(1 − level) ×`
/// [`nfx_io::cgroup::CORES_PERIOD`], stays within `max_latency_us`.
pub fn latency_floor(max_latency_us: f64) -> f64 {
    let period_us = nfx_io::cgroup::CORES_PERIOD.as_secs_f64() * 1e6;
    (1.0 - max_latency_us / period_us).clamp(0.0, 1.0)
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

/// The worker's sample over the interval since its previous report (`None` before the
/// second report, or when no new report arrived).
fn sample(
    m: &mut Managed,
    w: &Worker,
    figures: &BTreeMap<String, HostFigures>,
    speed: f64,
) -> Option<BoxSample> {
    let (at, wp) = report_of(figures, w)?;
    let prev = m.last.insert(w.device.clone(), (at, wp.traffic));
    let (at0, t0) = prev?;
    if at <= at0 {
        m.last.insert(w.device.clone(), (at0, t0));
        return None;
    }
    let dt = (at - at0) as f64 / 1000.0;
    let spins = wp.threads.iter().any(|t| t.poll != "interrupt");
    Some(traffic_sample(
        &t0,
        &wp.traffic,
        dt,
        wp.cpu_cores,
        speed * f64::from(w.cores),
        spins,
    ))
}

/// Offered and delivered throughput between two counter readings `dt` seconds apart,
/// and the share of the `allowed` cores the worker used — only for a worker that sleeps
/// when it has nothing to do (`interrupt`): a busy or adaptive poller spins on whatever
/// it is given (adaptive: 200 µs after every packet), so for them only lost throughput
/// marks the knee.
pub fn traffic_sample(
    a: &WorkerTraffic,
    b: &WorkerTraffic,
    dt: f64,
    cpu_cores: f64,
    allowed: f64,
    spins: bool,
) -> BoxSample {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
    let (rx_p, rx_b) = (d(a.rx_packets, b.rx_packets), d(a.rx_bytes, b.rx_bytes));
    let drops = d(a.socket_drops, b.socket_drops);
    let frame = if rx_p > 0.0 { rx_b / rx_p } else { 0.0 };
    let dt = dt.max(1e-3);
    BoxSample {
        sample: Sample {
            offered_bps: (rx_b + drops * frame) * 8.0 / dt,
            delivered_bps: d(a.tx_bytes, b.tx_bytes) * 8.0 / dt,
            latency_us: None,
            utilization: (!spins && allowed > 0.0).then(|| (cpu_cores / allowed).min(1.0)),
        },
        pps: (rx_p + drops) / dt,
        cpu_cores,
    }
}

/// The knob call for one of the manager's actions on `workers`.
fn to_decision(service: &str, workers: &[Worker], a: Action) -> Option<Decision> {
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
        reason: format!("{}: {}: {}", w.device, setting.label(), a.reason),
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
            let mut pm = PowerManagers::new(only);
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
                    apply(&ctl, &agents, d);
                }
                ctl.set_power_settings(pm.settings());
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the power manager: {e}");
    }
}

/// Has the agent apply `d` and records it.
fn apply(ctl: &Controller, agents: &Agents, d: Decision) {
    let outcome = match agents.clients().get(&d.host) {
        Some(c) => c
            .set_knob(&d.request)
            .map(|a| {
                let limit = a.cpu_limit.unwrap_or_else(|| "no cgroup".into());
                let polls: Vec<&str> = a.threads.iter().map(|t| t.poll.as_str()).collect();
                format!("read back: {limit}, poll {polls:?}")
            })
            .map_err(|e| e.to_string()),
        None => Err(format!("host {} has no agent", d.host)),
    };
    log::info!("power {}: {} ({outcome:?})", d.service, d.reason);
    if let Err(e) = ctl.record_power_decision(&d.service, &d.reason, outcome) {
        log::warn!("recording a power decision of {}: {e}", d.service);
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
    /// (the rest are dropped by the kernel) and uses `min(limit, need)` cores.
    struct Box1 {
        at_ms: u64,
        t: WorkerTraffic,
        limit: f64,
    }

    impl Box1 {
        fn second(&mut self, need: f64, offered_bps: f64) -> BTreeMap<String, HostFigures> {
            let frames = (offered_bps / 8000.0) as u64;
            let done = (frames as f64 * (self.limit / need).min(1.0)) as u64;
            self.at_ms += 1000;
            self.t.rx_packets += done;
            self.t.rx_bytes += done * 1000;
            self.t.socket_drops += frames - done;
            self.t.tx_packets += done;
            self.t.tx_bytes += done * 1000;
            let w = WorkerPower {
                device: "h1-sw0".into(),
                pid: 1,
                cpu_cores: need.min(self.limit),
                power_w: 0.0,
                energy_j: 0.0,
                traffic: self.t,
                threads: vec![ThreadKnobs {
                    worker: 0,
                    tid: 1,
                    poll: "adaptive".into(),
                    affinity: vec![0],
                    cpu_max_cores: None,
                }],
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
            let svc = [service("s")];
            let rows = [row("fw", "h1-sw0", Tier::Software, &["s"])];
            let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
            let hosts = BTreeMap::from([("h1".to_string(), 2)]);
            let mut all = Vec::new();
            for _ in 0..secs {
                let f = self.second(need, offered);
                for d in pm.decide(&svc, &rows, &f, &cores, &hosts) {
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
        let mut b = Box1 {
            at_ms: 0,
            t: WorkerTraffic::default(),
            limit: 1.0,
        };
        // 40 Mbit/s needing 0.3 core: down to 0.35 core, where it uses 86 % of its
        // limit; the next level (0.25) would saturate it, so it stays there.
        let d = b.run(&mut pm, 12, 0.3, 40e6);
        assert_eq!(
            cpu_max(&d),
            [Some(0.7), Some(0.5), Some(0.35), Some(0.25), Some(0.35)],
            "{d:#?}"
        );
        assert!(d
            .iter()
            .all(|d| d.host == "h1" && d.reason.starts_with("h1-sw0: cpu.max")));
        assert!(d[3].reason.contains("0.25"), "{}", d[3].reason);
        assert_eq!(b.limit, 0.35);
        // Settled: nothing more while the load holds, and the SLA (95 % delivered) is kept.
        let before = b.t;
        assert!(b.run(&mut pm, 5, 0.3, 40e6).is_empty());
        let (sent, lost) = (
            b.t.tx_packets - before.tx_packets,
            b.t.socket_drops - before.socket_drops,
        );
        assert!(sent > 0 && lost == 0, "{sent} sent, {lost} lost");
        // The load doubles: back to no limit at once, then a new probe settles at 0.7.
        let d = b.run(&mut pm, 12, 0.6, 80e6);
        let c = cpu_max(&d);
        assert_eq!(c[0], None, "{d:#?}");
        assert!(d[0].reason.contains("rose"), "{}", d[0].reason);
        assert_eq!(b.limit, 0.7, "{d:#?}");
        assert!(c.len() <= 10);
        // The speed is exported for /metrics.
        let s = pm.settings();
        assert_eq!((s[0].device.as_str(), s[0].speed), ("h1-sw0", 0.7));
        // Another service's instance lands on the worker: its limit is lifted once.
        let rows = [
            row("fw", "h1-sw0", Tier::Software, &["s"]),
            row("nat", "h1-sw0", Tier::Software, &["u"]),
        ];
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
        let hosts = BTreeMap::from([("h1".to_string(), 2)]);
        let f = b.second(0.6, 80e6);
        let d = pm.decide(&[service("s"), service("u")], &rows, &f, &cores, &hosts);
        assert_eq!(cpu_max(&d), [None], "{d:#?}");
        assert!(d[0].reason.contains("no longer managed"), "{}", d[0].reason);
        let f = b.second(0.6, 80e6);
        assert!(pm
            .decide(&[service("s"), service("u")], &rows, &f, &cores, &hosts)
            .is_empty());
    }

    #[test]
    fn a_tight_latency_sla_keeps_the_worker_unlimited_and_unnamed_services_are_left_alone() {
        assert_eq!(latency_floor(100_000.0), 0.0);
        assert!((latency_floor(1_000.0) - 0.99).abs() < 1e-12);
        assert!((latency_floor(50_000.0) - 0.5).abs() < 1e-12);
        let rows = [row("fw", "h1-sw0", Tier::Software, &["s"])];
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
        let hosts = BTreeMap::from([("h1".to_string(), 2)]);
        for (mut pm, svc) in [
            (PowerManagers::default(), service_with("s", 1_000.0)),
            (PowerManagers::new(vec!["other".into()]), service("s")),
        ] {
            let mut b = Box1 {
                at_ms: 0,
                t: WorkerTraffic::default(),
                limit: 1.0,
            };
            for _ in 0..12 {
                let f = b.second(0.3, 40e6);
                let d = pm.decide(std::slice::from_ref(&svc), &rows, &f, &cores, &hosts);
                assert!(d.is_empty(), "{d:?}");
            }
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
    fn dropped_frames_count_as_offered_and_busy_pollers_have_no_utilisation() {
        let a = WorkerTraffic::default();
        let b = WorkerTraffic {
            rx_packets: 900,
            rx_bytes: 900_000,
            socket_drops: 100,
            tx_packets: 900,
            tx_bytes: 900_000,
        };
        let s = traffic_sample(&a, &b, 2.0, 0.2, 0.5, false);
        assert_eq!(s.sample.offered_bps, 4e6);
        assert_eq!(s.sample.delivered_bps, 3.6e6);
        assert_eq!((s.pps, s.sample.utilization), (500.0, Some(0.4)));
        assert_eq!(
            traffic_sample(&a, &b, 2.0, 0.5, 0.5, true)
                .sample
                .utilization,
            None
        );
        // Counters that went back (a restarted worker) give zero, not a wrap.
        assert_eq!(
            traffic_sample(&b, &a, 1.0, 0.0, 1.0, false)
                .sample
                .offered_bps,
            0.0
        );
    }
}
