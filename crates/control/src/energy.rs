//! Energy in the controller: the latest figures of every host's power agent (carried by
//! the heartbeat) and their aggregation per host and per service. An instance's energy
//! counts for every service whose path uses it, split evenly among them; each figure
//! keeps its source (`rapl` or `model`), and a service whose instances mix sources says
//! `rapl+model`.

use crate::hostagent::power::{EnergyReport, WorkerPower};
use crate::mediator::InstanceRow;
use nfx_energy::Source;
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

/// Aggregates the hosts' latest figures over the recorded instances.
pub fn aggregate(hosts: &BTreeMap<String, HostFigures>, rows: &[InstanceRow]) -> EnergySummary {
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
        let found = match hosts.get(&row.host) {
            Some(HostFigures::Report(r)) => r.instances.iter().find(|i| i.instance == row.spec.id),
            _ => None,
        };
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
                });
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
        let s = aggregate(&hosts, &rows);
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

    #[test]
    fn nothing_reported_is_said() {
        let s = aggregate(&BTreeMap::new(), &[row("fw", "h1", &["a"])]);
        assert!(!s.reported);
        assert_eq!(s.services[0].source, "none");
        assert_eq!(s.services[0].unmetered, ["fw"]);
    }
}
