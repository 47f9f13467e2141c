//! Energy in the controller: the latest figures of every host's power agent (carried by
//! the heartbeat) and their aggregation per host and per service. An instance's energy
//! counts for every service whose path uses it, split evenly among them; each figure
//! keeps its source (`rapl` or `model`), and a service whose instances mix sources says
//! `rapl+model`. Beside each service's figures: its SLA and, for each of its workers
//! under a CPU limit (the power manager's knob), the longest wait for CPU that limit
//! allows — a bound computed from the limit the agent read back, not a measured delay —
//! so the two can be read side by side.

use crate::hostagent::power::{EnergyReport, WorkerPower};
use crate::mediator::InstanceRow;
use nfx_energy::Source;
use nfx_model::Sla;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the controller last heard of a host's energy.
#[derive(Debug, Clone, PartialEq)]
pub enum HostFigures {
    /// The agent's latest report.
    Report(EnergyReport),
    /// Why the agent does not meter (no power model and no RAPL, ...).
    Unmetered(String),
}

/// A host's figures (`GET /api/v1/energy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEnergy {
    /// Host id.
    pub host: String,
    /// `rapl` or `model`; absent when the host is not metered.
    pub source: Option<Source>,
    /// Average power over the agent's last interval, W.
    pub power_w: f64,
    /// Energy since the agent started metering, J.
    pub energy_j: f64,
    /// When the agent sampled, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// Why there are no figures.
    pub error: Option<String>,
    /// Its worker processes: CPU, power and their threads' poll mode, affinity and CPU
    /// limit as the agent read them back.
    pub workers: Vec<WorkerPower>,
}

/// One instance's part in a service's energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceShare {
    /// Instance id.
    pub instance: String,
    /// Its host.
    pub host: String,
    /// Its device.
    pub device: String,
    /// Its power counted for this service, W.
    pub power_w: f64,
    /// Its energy counted for this service, J.
    pub energy_j: f64,
    /// CPU cores attributed to it (its whole figure, not the service's share).
    pub cpu_cores: f64,
    /// Services sharing it (its figures are divided by this).
    pub shared_by: usize,
    /// `rapl` or `model`.
    pub source: Source,
}

/// A service's energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceEnergy {
    /// Service id.
    pub service: String,
    /// `model`, `rapl`, `rapl+model`, or `none` when no instance of it is metered.
    pub source: String,
    /// Sum of its instances' shares, W.
    pub power_w: f64,
    /// Sum of its instances' shares, J (since each was first metered).
    pub energy_j: f64,
    /// Per instance.
    pub instances: Vec<InstanceShare>,
    /// Its instances with no figures (host not metered, or not reported yet).
    pub unmetered: Vec<String>,
    /// Its SLA (absent when the service is not recorded, e.g. being destroyed).
    #[serde(default)]
    pub sla: Option<Sla>,
    /// Its workers running under a CPU limit, with the latency bound the limit implies.
    #[serde(default)]
    pub limited_workers: Vec<LimitedWorker>,
}

/// A worker of a service under a CPU limit, as its host's agent read it back from the
/// kernel: the bound its limit puts on a packet's wait for CPU, to compare with the
/// service's latency SLA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitedWorker {
    /// Its host.
    pub host: String,
    /// Its device.
    pub device: String,
    /// The limit, cores (the tightest of its threads').
    pub cpu_max_cores: f64,
    /// The longest a thread can wait for CPU under the limit, µs: computed from the
    /// limit (period − quota), not measured.
    pub cpu_wait_bound_us: f64,
}

/// The limit and wait bound of `device`'s worker in `report`, when it has a CPU limit.
fn limited(host: &str, device: &str, report: &EnergyReport) -> Option<LimitedWorker> {
    let w = report.workers.iter().find(|w| w.device == device)?;
    let cores = w
        .threads
        .iter()
        .filter_map(|t| t.cpu_max_cores)
        .min_by(f64::total_cmp)?;
    Some(LimitedWorker {
        host: host.to_string(),
        device: device.to_string(),
        cpu_max_cores: cores,
        cpu_wait_bound_us: w.cpu_wait_bound_us.unwrap_or_else(|| {
            w.threads
                .iter()
                .map(|t| t.cpu_wait_bound_us)
                .fold(0.0, f64::max)
        }),
    })
}

/// Energy per host and per service (`GET /api/v1/energy`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergySummary {
    /// Whether any host reported figures.
    pub reported: bool,
    /// Hosts that reported (figures or why not), by id.
    pub hosts: Vec<HostEnergy>,
    /// Services that have instances, by id.
    pub services: Vec<ServiceEnergy>,
}

/// Aggregates the hosts' latest figures over the recorded instances; `slas` are the
/// recorded services' SLAs, by id.
pub fn aggregate(
    hosts: &BTreeMap<String, HostFigures>,
    rows: &[InstanceRow],
    slas: &BTreeMap<String, Sla>,
) -> EnergySummary {
    let host_views = hosts
        .iter()
        .map(|(id, f)| match f {
            HostFigures::Report(r) => HostEnergy {
                host: id.clone(),
                source: Some(r.source),
                power_w: r.power_w,
                energy_j: r.energy_j,
                at_unix_ms: r.at_unix_ms,
                error: None,
                workers: r.workers.clone(),
            },
            HostFigures::Unmetered(e) => HostEnergy {
                host: id.clone(),
                source: None,
                power_w: 0.0,
                energy_j: 0.0,
                at_unix_ms: 0,
                error: Some(e.clone()),
                workers: Vec::new(),
            },
        })
        .collect::<Vec<_>>();
    let mut services: BTreeMap<String, ServiceEnergy> = BTreeMap::new();
    for row in rows {
        let report = match hosts.get(&row.host) {
            Some(HostFigures::Report(r)) => Some(r),
            _ => None,
        };
        let found = report.and_then(|r| r.instances.iter().find(|i| i.instance == row.spec.id));
        let limit = report.and_then(|r| limited(&row.host, &row.spec.device, r));
        let n = row.users.len().max(1);
        for svc in &row.users {
            let s = services
                .entry(svc.clone())
                .or_insert_with(|| ServiceEnergy {
                    service: svc.clone(),
                    source: String::new(),
                    power_w: 0.0,
                    energy_j: 0.0,
                    instances: Vec::new(),
                    unmetered: Vec::new(),
                    sla: slas.get(svc).copied(),
                    limited_workers: Vec::new(),
                });
            if let Some(l) = &limit {
                if !s
                    .limited_workers
                    .iter()
                    .any(|x| x.host == l.host && x.device == l.device)
                {
                    s.limited_workers.push(l.clone());
                }
            }
            let Some(i) = found else {
                s.unmetered.push(row.spec.id.clone());
                continue;
            };
            let share = InstanceShare {
                instance: i.instance.clone(),
                host: row.host.clone(),
                device: i.device.clone(),
                power_w: i.power_w / n as f64,
                energy_j: i.energy_j / n as f64,
                cpu_cores: i.cpu_cores,
                shared_by: n,
                source: i.source,
            };
            s.power_w += share.power_w;
            s.energy_j += share.energy_j;
            s.instances.push(share);
        }
    }
    for s in services.values_mut() {
        s.source = source_of(s.instances.iter().map(|i| i.source));
    }
    EnergySummary {
        reported: host_views.iter().any(|h| h.source.is_some()),
        hosts: host_views,
        services: services.into_values().collect(),
    }
}

/// The source of a sum of figures: the one source, `rapl+model` when mixed, `none`
/// when empty.
fn source_of(sources: impl Iterator<Item = Source>) -> String {
    let (mut rapl, mut model) = (false, false);
    for s in sources {
        match s {
            Source::Rapl => rapl = true,
            Source::Model => model = true,
        }
    }
    match (rapl, model) {
        (true, true) => "rapl+model",
        (true, false) => "rapl",
        (false, true) => "model",
        (false, false) => "none",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostagent::power::InstanceEnergy;
    use crate::vnfm::InstanceSpec;
    use nfx_model::Tier;

    fn row(id: &str, host: &str, users: &[&str]) -> InstanceRow {
        InstanceRow {
            spec: InstanceSpec {
                id: id.into(),
                function: "nat".into(),
                device: format!("{host}-sw0"),
                config: serde_json::Value::Null,
                throughput_gbps: 0.0,
                capacity: 0.0,
            },
            host: host.into(),
            tier: Tier::Software,
            latency_us: 0.0,
            status: "running".into(),
            users: users.iter().map(|u| u.to_string()).collect(),
        }
    }

    fn inst(id: &str, w: f64, j: f64, source: Source) -> InstanceEnergy {
        InstanceEnergy {
            instance: id.into(),
            device: "d".into(),
            power_w: w,
            energy_j: j,
            cpu_cores: 0.1,
            source,
        }
    }

    fn report(host: &str, source: Source, instances: Vec<InstanceEnergy>) -> HostFigures {
        HostFigures::Report(EnergyReport {
            host: host.into(),
            source,
            at_unix_ms: 1,
            interval_s: 1.0,
            power_w: 20.0,
            energy_j: 200.0,
            idle_w: 6.2,
            busy_cores: 0.5,
            instances,
            workers: vec![],
        })
    }

    #[test]
    fn services_sum_their_instances_and_share_common_ones() {
        let hosts = BTreeMap::from([
            (
                "h1".to_string(),
                report(
                    "h1",
                    Source::Model,
                    vec![
                        inst("fw", 4.0, 40.0, Source::Model),
                        inst("nat", 2.0, 10.0, Source::Model),
                    ],
                ),
            ),
            (
                "h2".to_string(),
                report(
                    "h2",
                    Source::Rapl,
                    vec![inst("dpi", 6.0, 60.0, Source::Rapl)],
                ),
            ),
            ("h3".to_string(), HostFigures::Unmetered("no model".into())),
        ]);
        let rows = [
            row("fw", "h1", &["a"]),
            row("nat", "h1", &["a", "b"]),
            row("dpi", "h2", &["b"]),
            row("ids", "h3", &["b"]),
            row("idle", "h1", &[]),
        ];
        let s = aggregate(&hosts, &rows, &BTreeMap::new());
        assert!(s.reported);
        assert_eq!(s.hosts.len(), 3);
        assert_eq!(s.hosts[2].error.as_deref(), Some("no model"));
        let a = &s.services[0];
        // a: fw 4 W / 40 J + half of nat (1 W / 5 J).
        assert_eq!(
            (a.service.as_str(), a.power_w, a.energy_j),
            ("a", 5.0, 45.0)
        );
        assert_eq!(a.source, "model");
        let b = &s.services[1];
        // b: half of nat (1 W / 5 J) + dpi 6 W / 60 J; ids is not metered.
        assert_eq!((b.power_w, b.energy_j), (7.0, 65.0));
        assert_eq!(b.source, "rapl+model");
        assert_eq!(b.unmetered, ["ids"]);
        assert_eq!(b.instances[0].shared_by, 2);
        assert_eq!(
            s.services.len(),
            2,
            "an instance with no service counts nowhere"
        );
    }

    fn worker(device: &str, limit: Option<f64>, bound_us: Option<f64>) -> WorkerPower {
        let thread = |tid| crate::hostagent::power::ThreadKnobs {
            worker: 0,
            tid,
            poll: "adaptive".into(),
            affinity: vec![0],
            cpu_max_cores: limit,
            cpu_wait_bound_us: bound_us.unwrap_or(0.0),
        };
        WorkerPower {
            device: device.into(),
            pid: 1,
            cpu_cores: 0.2,
            power_w: 5.0,
            energy_j: 50.0,
            traffic: Default::default(),
            wire: None,
            threads: vec![thread(1), thread(2)],
            wait_cores: 0.0,
            cpu_wait_bound_us: bound_us,
            latency: None,
        }
    }

    #[test]
    fn a_services_limited_workers_carry_their_bound_beside_its_sla() {
        let HostFigures::Report(mut r) = report(
            "h1",
            Source::Model,
            vec![
                inst("fw", 4.0, 40.0, Source::Model),
                inst("nat", 2.0, 10.0, Source::Model),
            ],
        ) else {
            unreachable!("report() builds a report")
        };
        r.workers = vec![
            worker("h1-sw0", Some(0.35), Some(13_000.0)),
            worker("h1-sw1", None, Some(0.0)),
        ];
        let hosts = BTreeMap::from([("h1".to_string(), HostFigures::Report(r))]);
        let mut nat = row("nat", "h1", &["a", "b"]);
        nat.spec.device = "h1-sw1".into();
        let rows = [row("fw", "h1", &["a"]), row("fw2", "h1", &["a"]), nat];
        let sla = Sla {
            max_latency_us: 100_000.0,
            min_throughput_gbps: 1.0,
        };
        let s = aggregate(&hosts, &rows, &BTreeMap::from([("a".to_string(), sla)]));
        let a = &s.services[0];
        assert_eq!(a.sla, Some(sla));
        // Two instances on the limited worker: it is listed once.
        assert_eq!(
            a.limited_workers,
            [LimitedWorker {
                host: "h1".into(),
                device: "h1-sw0".into(),
                cpu_max_cores: 0.35,
                cpu_wait_bound_us: 13_000.0,
            }]
        );
        // b: only on the unlimited worker, and not recorded (no SLA).
        let b = &s.services[1];
        assert!(b.limited_workers.is_empty() && b.sla.is_none(), "{b:?}");
        // The fields round-trip, and a summary without them (an older controller)
        // still parses.
        let back: EnergySummary =
            serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let mut old = serde_json::to_value(&s).unwrap();
        for svc in old["services"].as_array_mut().unwrap() {
            let o = svc.as_object_mut().unwrap();
            o.remove("sla");
            o.remove("limited_workers");
        }
        let old: EnergySummary = serde_json::from_value(old).unwrap();
        assert!(old.services[0].limited_workers.is_empty());
    }

    #[test]
    fn nothing_reported_is_said() {
        let s = aggregate(
            &BTreeMap::new(),
            &[row("fw", "h1", &["a"])],
            &BTreeMap::new(),
        );
        assert!(!s.reported);
        assert_eq!(s.services[0].source, "none");
        assert_eq!(s.services[0].unmetered, ["fw"]);
    }
}
