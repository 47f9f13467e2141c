//! The SSM inside the controller (the SSH-tunnel paper's service-specific manager over
//! real hosts): one [`nfx_ssm::Ssm`] per accelerator device that carries live tunnel
//! endpoints, with the same policy and runner as the standalone `nfx ssm`. Its fleet is
//! the device's running `esp` instances; it reads their engine and load from their
//! host's agent (which reads the endpoint's element manager) and has the agent switch an
//! endpoint live between a queue pair of the device and its CPU engine
//! (`POST /agent/v1/tunnels/{id}/engine`). Every grant and revoke moves the instance's
//! queue pair in the resource model and the state database (a grant first reserves it, so
//! placement never hands the same queue pair out twice) and is journaled as an operation
//! of kind `grant` or `revoke`.

use crate::agents::Agents;
use crate::controller::Controller;
use crate::hostagent::tunnels::EngineRequest;
use crate::mediator::InstanceRow;
use crate::ops::OpKind;
use crate::vnfm::remote::RemoteVnfm;
use crate::vnfm::Vnfm;
use nfx_model::{Infrastructure, Tier};
use nfx_ssm::{Calibration, Decision, Fleet, Kind, Observation, Policy, PolicyConfig, Sample, Ssm};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The controller SSM's settings (`nfx up --ssm ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct SsmSettings {
    /// Time between decision rounds.
    pub period: Duration,
    /// CPU % of an endpoint above which it wants a queue pair.
    pub upper: f64,
    /// CPU % below which a holder gives its queue pair back.
    pub lower: f64,
    /// Consecutive rounds needed on either side.
    pub samples: usize,
    /// Rounds after a change during which an endpoint is left alone.
    pub cooldown: Duration,
    /// Measured engine figures (`nfx up --ssm-calibration`): a grant whose lookaside
    /// throughput does not beat the endpoint's current engine is vetoed, as in `nfx ssm
    /// --calibration`. `None`: no veto.
    pub calibration: Option<Calibration>,
}

impl Default for SsmSettings {
    fn default() -> Self {
        SsmSettings {
            period: Duration::from_millis(500),
            upper: 50.0,
            lower: 10.0,
            samples: 3,
            cooldown: Duration::from_secs(2),
            calibration: None,
        }
    }
}

impl SsmSettings {
    /// The policy configuration for a device of `queue_pairs`; the error names the field.
    pub fn policy(&self, queue_pairs: usize) -> Result<PolicyConfig, String> {
        let cfg = PolicyConfig {
            upper: self.upper,
            lower: self.lower,
            samples: self.samples,
            cooldown_ns: u64::try_from(self.cooldown.as_nanos()).unwrap_or(u64::MAX),
            queue_pairs,
            min_gain: 1.0,
        };
        cfg.validate()?;
        if self.period.is_zero() {
            return Err("period: must be positive".into());
        }
        Ok(cfg)
    }
}

/// The running `esp` instances on accelerator device `device`.
fn endpoints_on(rows: &[InstanceRow], device: &str) -> Vec<String> {
    rows.iter()
        .filter(|r| r.spec.function == "esp" && r.spec.device == device && r.status == "running")
        .map(|r| r.spec.id.clone())
        .collect()
}

/// The tunnel endpoints of one accelerator device, reached through its host's agent.
struct AgentFleet {
    ctl: Weak<Controller>,
    agent: Arc<RemoteVnfm>,
    device: String,
}

impl AgentFleet {
    fn ctl(&self) -> Result<Arc<Controller>, String> {
        self.ctl
            .upgrade()
            .ok_or_else(|| "the controller stopped".to_string())
    }

    fn switch(&self, name: &str, lookaside: bool) -> Result<u64, String> {
        self.agent
            .set_tunnel_engine(name, EngineRequest { lookaside })
            .map(|s| s.switch_us)
            .map_err(|e| e.to_string())
    }
}

impl Fleet for AgentFleet {
    fn names(&self) -> Vec<String> {
        let rows = self
            .ctl()
            .and_then(|c| c.instances().map_err(|e| e.to_string()));
        rows.map(|r| endpoints_on(&r, &self.device))
            .unwrap_or_default()
    }

    fn observe(&self, name: &str) -> Observation {
        match self.agent.get_instance_state(name) {
            Ok(s) => {
                let d = &s.detail;
                let num = |k: &str| d[k].as_u64().unwrap_or(0);
                let packets = num("tx_packets") + num("rx_packets");
                let bytes = num("tx_bytes") + num("rx_bytes");
                Observation::Sample(Sample {
                    engine: d["engine"].as_str().unwrap_or_default().to_string(),
                    alg: d["alg"].as_str().unwrap_or_default().to_string(),
                    cpu_pct: s.cpu_pct,
                    mean_packet_bytes: if packets == 0 {
                        0.0
                    } else {
                        bytes as f64 / packets as f64
                    },
                })
            }
            Err(e) => Observation::Unreachable(e.to_string()),
        }
    }

    fn grant(&self, name: &str) -> Result<u64, String> {
        let ctl = self.ctl()?;
        ctl.set_queue_pair(name, true)
            .map_err(|e| format!("the controller's model has no queue pair for it: {e}"))?;
        self.switch(name, true).inspect_err(|_| {
            if let Err(e) = ctl.set_queue_pair(name, false) {
                log::warn!("ssm: releasing the reservation of {name}: {e}");
            }
        })
    }

    fn revoke(&self, name: &str) -> Result<(), String> {
        self.switch(name, false)?;
        self.ctl()?
            .set_queue_pair(name, false)
            .map_err(|e| e.to_string())
    }
}

/// Journals a round's grants and revokes (and the ones that failed) as operations.
fn journal(ctl: &Controller, device: &str, decisions: &[Decision]) {
    for d in decisions {
        let failed = |prefix: &str| d.reason.starts_with(prefix);
        let (kind, outcome) = match d.decision {
            Kind::Grant => (
                OpKind::Grant,
                Ok(format!(
                    "engine lookaside on {device} (live switch {} µs)",
                    d.switch_us.unwrap_or(0)
                )),
            ),
            Kind::Revoke => (OpKind::Revoke, Ok("engine cpu".to_string())),
            Kind::Deny if failed("grant failed") => (OpKind::Grant, Err(d.reason.clone())),
            Kind::Noop if failed("revoke failed") => (OpKind::Revoke, Err(d.reason.clone())),
            _ => continue,
        };
        if let Err(e) = ctl.record_ssm_decision(kind, &d.vnf, &d.reason, outcome) {
            log::warn!("recording an SSM decision on {}: {e}", d.vnf);
        }
    }
}

/// Runs the SSM every `settings.period` until `ctl` is dropped: one [`Ssm`] per
/// accelerator-tier device of `infra` with live tunnel endpoints.
pub fn start(
    ctl: &Arc<Controller>,
    agents: &Arc<Agents>,
    infra: &Infrastructure,
    settings: SsmSettings,
) -> Result<(), String> {
    let mut devices: BTreeMap<String, (String, PolicyConfig)> = BTreeMap::new();
    for d in infra.devices.iter().filter(|d| d.tier == Tier::Accelerator) {
        let qps = d.capacity().max(0.0) as usize;
        let cfg = settings.policy(qps)?;
        devices.insert(d.id.clone(), (d.host.clone(), cfg));
    }
    let period = settings.period;
    let cal = settings.calibration;
    let clients: BTreeMap<String, Arc<RemoteVnfm>> = agents.clients().clone();
    let weak = Arc::downgrade(ctl);
    let spawned = std::thread::Builder::new()
        .name("ssm".into())
        .spawn(move || run(weak, clients, devices, cal, period));
    spawned.map(|_| ()).map_err(|e| e.to_string())
}

fn run(
    weak: Weak<Controller>,
    clients: BTreeMap<String, Arc<RemoteVnfm>>,
    devices: BTreeMap<String, (String, PolicyConfig)>,
    cal: Option<Calibration>,
    period: Duration,
) {
    let t0 = Instant::now();
    let clock = move || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut ssms: BTreeMap<String, Ssm> = BTreeMap::new();
    loop {
        std::thread::sleep(period);
        let Some(ctl) = weak.upgrade() else { return };
        let Ok(rows) = ctl.instances() else { continue };
        ssms.retain(|dev, _| !endpoints_on(&rows, dev).is_empty());
        for (dev, (host, cfg)) in &devices {
            if endpoints_on(&rows, dev).is_empty() {
                continue;
            }
            let Some(agent) = clients.get(host) else {
                continue;
            };
            let ssm = ssms.entry(dev.clone()).or_insert_with(|| {
                let fleet = AgentFleet {
                    ctl: weak.clone(),
                    agent: agent.clone(),
                    device: dev.clone(),
                };
                Ssm::with_fleet(Policy::new(cfg.clone(), cal.clone()), Box::new(fleet), dev)
            });
            let decisions = ssm.tick(clock(), &clock);
            journal(&ctl, dev, &decisions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_with_the_field_named() {
        assert!(SsmSettings::default().policy(1).is_ok());
        let bad = SsmSettings {
            lower: 60.0,
            ..SsmSettings::default()
        };
        assert!(bad.policy(1).unwrap_err().starts_with("lower"));
        let bad = SsmSettings {
            period: Duration::ZERO,
            ..SsmSettings::default()
        };
        assert!(bad.policy(1).unwrap_err().starts_with("period"));
    }

    #[test]
    fn only_running_esp_instances_of_the_device_are_its_fleet() {
        let row = |id: &str, function: &str, device: &str, status: &str| InstanceRow {
            spec: crate::vnfm::InstanceSpec {
                id: id.into(),
                function: function.into(),
                device: device.into(),
                config: serde_json::Value::Null,
                throughput_gbps: 1.0,
                capacity: 0.0,
            },
            host: "h1".into(),
            tier: Tier::Accelerator,
            latency_us: 1.0,
            status: status.into(),
            users: vec![],
        };
        let rows = [
            row("a", "esp", "acc", "running"),
            row("b", "esp", "acc", "planned"),
            row("c", "esp", "acc2", "running"),
            row("d", "firewall", "acc", "running"),
        ];
        assert_eq!(endpoints_on(&rows, "acc"), vec!["a".to_string()]);
    }
}
