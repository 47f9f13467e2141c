//! Simulated VNFM: device models taken from the infrastructure descriptor (capacity,
//! throughput, latency, deploy latency), so the control plane can be exercised with
//! thousands of devices. Its state can live in a file, like a real agent that outlives a
//! controller crash.

use super::{InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError};
use nfx_model::{Infrastructure, Tier};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Tunables of the simulation.
#[derive(Debug, Clone, Default)]
pub struct SimConfig {
    /// Time a deploy takes on the simulated device (models the device's install latency).
    pub deploy_delay: Duration,
    /// File holding the simulated devices' instances across controller restarts.
    pub state_file: Option<PathBuf>,
}

/// One simulated device's fixed figures.
#[derive(Debug, Clone)]
struct SimDevice {
    tier: Tier,
    functions: Vec<String>,
    latency_us: f64,
    throughput_gbps: f64,
    capacity: f64,
}

/// One simulated instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SimInstance {
    spec: InstanceSpec,
    config_version: u64,
    flows: u64,
    packets: u64,
}

/// The simulated VNFM.
pub struct SimVnfm {
    devices: HashMap<String, SimDevice>,
    cfg: SimConfig,
    instances: Mutex<BTreeMap<String, SimInstance>>,
}

impl SimVnfm {
    /// Models every device of `infra`; loads earlier instances from the state file if any.
    pub fn new(infra: &Infrastructure, cfg: SimConfig) -> anyhow::Result<Self> {
        let devices = infra
            .devices
            .iter()
            .map(|d| {
                (
                    d.id.clone(),
                    SimDevice {
                        tier: d.tier,
                        functions: d.functions.clone(),
                        latency_us: d.latency_us,
                        throughput_gbps: d.throughput_gbps,
                        capacity: d.capacity(),
                    },
                )
            })
            .collect();
        let instances = match &cfg.state_file {
            Some(p) if p.exists() => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                serde_json::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("{}: not a simulator state: {e}", p.display()))?
            }
            _ => BTreeMap::new(),
        };
        Ok(SimVnfm {
            devices,
            cfg,
            instances: Mutex::new(instances),
        })
    }

    /// Adds `n` simulated flow entries (and packets) to an instance, as traffic would.
    pub fn inject_flows(&self, id: &str, n: u64) -> Result<(), VnfmError> {
        let mut g = self.lock();
        let i = g.get_mut(id).ok_or_else(|| not_found(id))?;
        i.flows += n;
        i.packets += n;
        self.save(&g)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SimInstance>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self, g: &BTreeMap<String, SimInstance>) -> Result<(), VnfmError> {
        let Some(p) = &self.cfg.state_file else {
            return Ok(());
        };
        let tmp = p.with_extension("tmp");
        let text = serde_json::to_vec(g).map_err(|e| VnfmError::Unavailable(e.to_string()))?;
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, p))
            .map_err(|e| VnfmError::Unavailable(format!("{}: {e}", p.display())))
    }

    fn state(&self, i: &SimInstance) -> InstanceState {
        let d = self.devices.get(&i.spec.device);
        InstanceState {
            id: i.spec.id.clone(),
            function: i.spec.function.clone(),
            device: i.spec.device.clone(),
            status: "running".into(),
            config_version: i.config_version,
            flows: i.flows,
            packets: i.packets,
            cpu_pct: 0.0,
            detail: serde_json::json!({
                "tier": d.map(|d| d.tier.as_str()),
                "latency_us": d.map(|d| d.latency_us),
                "throughput_gbps": i.spec.throughput_gbps,
                "capacity": i.spec.capacity,
            }),
        }
    }
}

fn not_found(id: &str) -> VnfmError {
    VnfmError::NotFound(format!("instance {id:?}"))
}

impl Vnfm for SimVnfm {
    fn kind(&self) -> &'static str {
        "simulated"
    }

    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        let dev = self
            .devices
            .get(&spec.device)
            .ok_or_else(|| VnfmError::NotFound(format!("device {:?}", spec.device)))?;
        if !dev.functions.contains(&spec.function) {
            return Err(VnfmError::Invalid(format!(
                "device {:?} does not run function {:?}",
                spec.device, spec.function
            )));
        }
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !valid(spec.throughput_gbps) || !valid(spec.capacity) {
            return Err(VnfmError::Invalid(
                "throughput_gbps and capacity must be finite and >= 0".into(),
            ));
        }
        {
            let g = self.lock();
            if let Some(existing) = g.get(&spec.id) {
                return if existing.spec == *spec {
                    Ok(self.state(existing))
                } else {
                    Err(VnfmError::Conflict(format!(
                        "instance {:?} exists with another spec",
                        spec.id
                    )))
                };
            }
            let (thr, cap) = g
                .values()
                .filter(|i| i.spec.device == spec.device)
                .fold((0.0, 0.0), |(t, c), i| {
                    (t + i.spec.throughput_gbps, c + i.spec.capacity)
                });
            if thr + spec.throughput_gbps > dev.throughput_gbps + 1e-9
                || cap + spec.capacity > dev.capacity + 1e-9
            {
                return Err(VnfmError::Conflict(format!(
                    "device {:?} has no room (throughput {thr}/{}, capacity {cap}/{})",
                    spec.device, dev.throughput_gbps, dev.capacity
                )));
            }
        }
        if !self.cfg.deploy_delay.is_zero() {
            std::thread::sleep(self.cfg.deploy_delay);
        }
        let mut g = self.lock();
        let inst = SimInstance {
            spec: spec.clone(),
            config_version: 1,
            flows: 0,
            packets: 0,
        };
        let st = self.state(&inst);
        g.insert(spec.id.clone(), inst);
        self.save(&g)?;
        Ok(st)
    }

    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        let mut g = self.lock();
        g.remove(id).ok_or_else(|| not_found(id))?;
        self.save(&g)
    }

    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        let mut g = self.lock();
        let i = g.get_mut(id).ok_or_else(|| not_found(id))?;
        i.spec.config = config.clone();
        i.config_version += 1;
        let st = self.state(i);
        self.save(&g)?;
        Ok(st)
    }

    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        let mut g = self.lock();
        let (of, nf) = match (g.get(old), g.get(new)) {
            (Some(o), Some(n)) => (o.spec.function.clone(), n.spec.function.clone()),
            (None, _) => return Err(not_found(old)),
            (_, None) => return Err(not_found(new)),
        };
        if of != nf {
            return Err(VnfmError::Invalid(format!(
                "cannot move {of} state into a {nf} instance"
            )));
        }
        let have = g[old].flows;
        let moved = if flows.is_empty() {
            have
        } else {
            have.min(flows.len() as u64)
        };
        if let Some(o) = g.get_mut(old) {
            o.flows -= moved;
        }
        if let Some(n) = g.get_mut(new) {
            n.flows += moved;
        }
        self.save(&g)?;
        Ok(MigrateReport {
            flows: moved,
            bytes: moved * 32,
            held_ms: None,
        })
    }

    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let g = self.lock();
        g.get(id)
            .map(|i| self.state(i))
            .ok_or_else(|| not_found(id))
    }

    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        Ok(self.lock().keys().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const INFRA: &str = "
hosts: [{ id: edge, cores: 8 }]
devices:
  - { id: sw, host: edge, tier: software, functions: [firewall, nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 4 }
  - { id: tt, host: edge, tier: table, functions: [firewall], latency_us: 2, throughput_gbps: 100, table_entries: 64 }
";

    fn sim(state: Option<PathBuf>) -> SimVnfm {
        let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
        SimVnfm::new(
            &infra,
            SimConfig {
                deploy_delay: Duration::ZERO,
                state_file: state,
            },
        )
        .unwrap()
    }

    fn spec(id: &str, device: &str, thr: f64) -> InstanceSpec {
        InstanceSpec {
            id: id.into(),
            function: "firewall".into(),
            device: device.into(),
            config: serde_json::json!({"rules": []}),
            throughput_gbps: thr,
            capacity: 1.0,
        }
    }

    #[test]
    fn deploy_is_idempotent_and_checks_room() {
        let v = sim(None);
        v.deploy_instance(&spec("a", "sw", 6.0)).unwrap();
        v.deploy_instance(&spec("a", "sw", 6.0)).unwrap();
        assert_eq!(v.list_instances().unwrap(), vec!["a".to_string()]);
        let e = v.deploy_instance(&spec("a", "sw", 5.0)).unwrap_err();
        assert!(matches!(e, VnfmError::Conflict(_)), "{e}");
        let e = v.deploy_instance(&spec("b", "sw", 5.0)).unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
        let e = v.deploy_instance(&spec("c", "nope", 1.0)).unwrap_err();
        assert!(matches!(e, VnfmError::NotFound(_)));
        let mut s = spec("d", "tt", 1.0);
        s.function = "nat".into();
        assert!(matches!(
            v.deploy_instance(&s).unwrap_err(),
            VnfmError::Invalid(_)
        ));
    }

    #[test]
    fn configure_migrate_destruct() {
        let v = sim(None);
        v.deploy_instance(&spec("a", "sw", 1.0)).unwrap();
        v.deploy_instance(&spec("b", "tt", 1.0)).unwrap();
        let st = v
            .configure_instance("a", &serde_json::json!({"x": 1}))
            .unwrap();
        assert_eq!(st.config_version, 2);
        v.inject_flows("a", 10).unwrap();
        let r = v
            .migrate_instance("a", "b", &["k1".into(), "k2".into()])
            .unwrap();
        assert_eq!(r.flows, 2);
        let r = v.migrate_instance("a", "b", &[]).unwrap();
        assert_eq!(r.flows, 8);
        assert_eq!(v.get_instance_state("b").unwrap().flows, 10);
        assert_eq!(v.get_instance_state("a").unwrap().flows, 0);
        v.destruct_instance("a").unwrap();
        assert!(matches!(
            v.destruct_instance("a").unwrap_err(),
            VnfmError::NotFound(_)
        ));
        assert!(v.get_instance_state("a").is_err());
        assert!(v.migrate_instance("b", "zz", &[]).is_err());
    }

    #[test]
    fn state_file_survives_a_new_vnfm() {
        let dir = std::env::temp_dir().join(format!("nfx-sim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("sim.json");
        let _ = std::fs::remove_file(&f);
        sim(Some(f.clone()))
            .deploy_instance(&spec("a", "sw", 1.0))
            .unwrap();
        let again = sim(Some(f.clone()));
        assert_eq!(again.list_instances().unwrap(), vec!["a".to_string()]);
        std::fs::write(&f, "garbage").unwrap();
        let infra = Infrastructure::from_yaml("i", INFRA).unwrap();
        let e = SimVnfm::new(
            &infra,
            SimConfig {
                deploy_delay: Duration::ZERO,
                state_file: Some(f.clone()),
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("sim.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
