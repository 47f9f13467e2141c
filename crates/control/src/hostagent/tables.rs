//! The host's table-tier devices (HYPER's hardware VNFs): each runs one service's
//! functions placed on it as one `nfx_fastpath::table::TableChain` (firewall, NAT,
//! elephant detection in eBPF over bounded maps).
//!
//! A table device is attached to the host exactly like a software device — its two veth
//! pairs ([`super::stages::Stage`]) — and the steering routes a service's packets into
//! it the same way; where a software device has a worker reading its ports, a table
//! device has the chain on them: tc ingress on the inside port runs the forward chain
//! and redirects to the outside port (towards the kernel end, next-hop MACs set),
//! ingress on the outside port runs the reverse chain back (NAT un-rewrite, connection
//! tracking of replies).
//!
//! Instances are recorded at deploy, checked against the device's free entries with
//! `nfx_fastpath::table::check` (capacity = entries; a refusal carries its reason); the
//! chain is loaded, filled and attached when a path names the instances of a stage, in
//! the path's order, and detached (its maps freed) when the path leaves the device or
//! one of its instances is destroyed.

use super::stages::Stage;
use super::steering::{HostPath, SteerError};
use crate::vnfm::{InstanceSpec, InstanceState, VnfmError};
use nfx_fastpath::table::{check, Placement, PortSpec, TableChain, TableStats};
use nfx_vnf::NodeSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// A table-tier device of the host (agent configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDevice {
    /// Device id (as in the infrastructure).
    pub id: String,
    /// Table entries it holds (its capacity: rules + flow rows of its functions).
    pub entries: u64,
}

/// One recorded instance.
struct Deployed {
    spec: InstanceSpec,
    node: NodeSpec,
    entries: u64,
    version: u64,
}

/// The chain a device runs for one service.
struct Running {
    service: String,
    instances: Vec<String>,
    chain: TableChain,
}

#[derive(Default)]
struct Inner {
    instances: BTreeMap<String, Deployed>,
    chains: BTreeMap<String, Running>,
}

/// The host's table devices and what runs on them.
pub struct Tables {
    devices: BTreeMap<String, (TableDevice, Stage)>,
    /// Where relative file names in a configuration (a rules file) are taken from.
    base_dir: PathBuf,
    inner: Mutex<Inner>,
}

/// The VNF configuration of an instance.
fn node_spec(function: &str, config: &serde_json::Value) -> Result<NodeSpec, VnfmError> {
    NodeSpec::from_function(function, config)
        .map_err(|e| VnfmError::Invalid(format!("{function}: {e}")))
}

impl Tables {
    /// The table devices `devices`, attached by `stages` (same order).
    pub fn new(devices: Vec<(TableDevice, Stage)>, base_dir: PathBuf) -> Self {
        Tables {
            devices: devices
                .into_iter()
                .map(|(d, s)| (d.id.clone(), (d, s)))
                .collect(),
            base_dir,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when `device` is one of this host's table devices.
    pub fn has_device(&self, device: &str) -> bool {
        self.devices.contains_key(device)
    }

    /// True when instance `id` is recorded here.
    pub fn holds(&self, id: &str) -> bool {
        self.inner().instances.contains_key(id)
    }

    /// Every recorded instance.
    pub fn ids(&self) -> Vec<String> {
        self.inner().instances.keys().cloned().collect()
    }

    /// Entries of `device` free for `id` (the other instances' entries taken off).
    fn free(&self, g: &Inner, device: &str, id: &str) -> u64 {
        let taken: u64 = g
            .instances
            .values()
            .filter(|d| d.spec.device == device && d.spec.id != id)
            .map(|d| d.entries)
            .sum();
        self.devices[device].0.entries.saturating_sub(taken)
    }

    /// Records an instance: its configuration must run on the table tier and fit the
    /// device's free entries (the refusal says why not). Idempotent for the same spec.
    pub fn deploy(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        let mut g = self.inner();
        if let Some(d) = g.instances.get(&spec.id) {
            if d.spec != *spec {
                return Err(VnfmError::Conflict(format!(
                    "instance {:?} exists with another spec",
                    spec.id
                )));
            }
        } else {
            let node = node_spec(&spec.function, &spec.config)?;
            let free = self.free(&g, &spec.device, &spec.id);
            let need = check(&node, free, &self.base_dir)
                .map_err(|e| VnfmError::Invalid(format!("device {}: {e}", spec.device)))?;
            g.instances.insert(
                spec.id.clone(),
                Deployed {
                    spec: spec.clone(),
                    node,
                    entries: need.entries,
                    version: 1,
                },
            );
        }
        Ok(state_of(&g, &spec.id))
    }

    /// New configuration for instance `id`: checked like a deploy, then written into
    /// its running chain (map updates and one flip, no reload), if it runs.
    pub fn configure(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        let mut g = self.inner();
        let d = g
            .instances
            .get(id)
            .ok_or_else(|| VnfmError::NotFound(id.to_string()))?;
        if d.spec.config == *config {
            return Ok(state_of(&g, id));
        }
        let device = d.spec.device.clone();
        let node = node_spec(&d.spec.function, config)?;
        let free = self.free(&g, &device, id);
        let need = check(&node, free, &self.base_dir)
            .map_err(|e| VnfmError::Invalid(format!("device {device}: {e}")))?;
        if let Some(r) = g.chains.get_mut(&device) {
            if let Some(k) = r.instances.iter().position(|i| i == id) {
                r.chain
                    .configure(k, &node, &self.base_dir)
                    .map_err(|e| VnfmError::Invalid(e.to_string()))?;
            }
        }
        if let Some(d) = g.instances.get_mut(id) {
            d.spec.config = config.clone();
            d.node = node;
            d.entries = need.entries;
            d.version += 1;
        }
        Ok(state_of(&g, id))
    }

    /// Forgets instance `id`; the chain it is part of is detached and its maps freed.
    pub fn destruct(&self, id: &str) -> Result<(), VnfmError> {
        let mut g = self.inner();
        let d = g
            .instances
            .remove(id)
            .ok_or_else(|| VnfmError::NotFound(id.to_string()))?;
        if g.chains
            .get(&d.spec.device)
            .is_some_and(|r| r.instances.iter().any(|i| i == id))
        {
            g.chains.remove(&d.spec.device);
            log::info!("table device {}: chain detached", d.spec.device);
        }
        Ok(())
    }

    /// The live state of instance `id`: its node's counters and table figures from the
    /// running chain.
    pub fn state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let g = self.inner();
        if !g.instances.contains_key(id) {
            return Err(VnfmError::NotFound(id.to_string()));
        }
        Ok(state_of(&g, id))
    }

    /// Makes the table devices run exactly the chains `paths` name: a device whose
    /// stage lists instances gets their chain (loaded, filled and attached, unless it
    /// runs that chain already); every other chain is detached.
    pub fn reconcile(&self, paths: &BTreeMap<String, HostPath>) -> Result<(), SteerError> {
        let want = self.wanted(paths)?;
        let mut g = self.inner();
        for (device, (service, ids)) in &want {
            for id in ids {
                match g.instances.get(id) {
                    Some(d) if d.spec.device == *device => {}
                    _ => {
                        return Err(SteerError::Invalid(format!(
                            "path of {service}: instance {id:?} is not deployed on table device {device}"
                        )))
                    }
                }
            }
        }
        g.chains.retain(|device, r| {
            let keep = want
                .get(device)
                .is_some_and(|(s, ids)| *s == r.service && *ids == r.instances);
            if !keep {
                log::info!("table device {device}: chain of {} detached", r.service);
            }
            keep
        });
        for (device, (service, ids)) in want {
            if g.chains.contains_key(&device) {
                continue;
            }
            let chain = self.start(&g, &device, &ids).map_err(|e| {
                SteerError::Failed(format!("table device {device}, service {service}: {e}"))
            })?;
            log::info!("table device {device}: chain {ids:?} of {service} attached");
            g.chains.insert(
                device,
                Running {
                    service,
                    instances: ids,
                    chain,
                },
            );
        }
        Ok(())
    }

    /// The chain each table device must run: (service, instances in order).
    fn wanted(
        &self,
        paths: &BTreeMap<String, HostPath>,
    ) -> Result<BTreeMap<String, (String, Vec<String>)>, SteerError> {
        let mut want: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for (svc, p) in paths {
            for device in p.stages.iter().filter(|d| self.has_device(d)) {
                let ids = p.chain_of(svc, device)?;
                if let Some((other, _)) = want.get(device) {
                    return Err(SteerError::Invalid(format!(
                        "table device {device} runs the chain of {other}; one service per \
                         table device"
                    )));
                }
                want.insert(device.clone(), (svc.clone(), ids.clone()));
            }
        }
        Ok(want)
    }

    /// Loads, fills and attaches the chain of `ids` on `device`'s ports.
    fn start(&self, g: &Inner, device: &str, ids: &[String]) -> Result<TableChain, String> {
        let functions: Vec<(String, NodeSpec)> = ids
            .iter()
            .map(|id| (id.clone(), g.instances[id].node.clone()))
            .collect();
        let stage = &self.devices[device].1;
        let port = |iface: &str, kernel: &str| -> Result<PortSpec, String> {
            Ok(PortSpec {
                iface: iface.to_string(),
                peer_mac: nfx_io::sys::iface_mac(kernel).map_err(|e| format!("{kernel}: {e}"))?,
            })
        };
        let placement = Placement::Alone {
            inside: port(&stage.worker_in, &stage.kernel_in)?,
            outside: port(&stage.worker_out, &stage.kernel_out)?,
        };
        let mut chain =
            TableChain::deploy(&functions, &self.base_dir).map_err(|e| e.to_string())?;
        chain.attach(&placement).map_err(|e| e.to_string())?;
        Ok(chain)
    }
}

/// The state of a recorded instance (`g` holds it).
fn state_of(g: &Inner, id: &str) -> InstanceState {
    let d = &g.instances[id];
    let running = g
        .chains
        .get(&d.spec.device)
        .filter(|r| r.instances.iter().any(|i| i == id));
    let stats: Option<TableStats> = running.and_then(|r| r.chain.stats().ok());
    let node = stats
        .as_ref()
        .and_then(|s| s.nodes.iter().find(|n| n.name == id));
    let function = stats
        .as_ref()
        .and_then(|s| s.functions.iter().find(|f| f.name == id));
    InstanceState {
        id: id.to_string(),
        function: d.spec.function.clone(),
        device: d.spec.device.clone(),
        status: "running".into(),
        config_version: d.version,
        flows: function.map_or(0, |f| f.flows),
        packets: node.map_or(0, |n| n.packets),
        cpu_pct: 0.0,
        detail: serde_json::json!({
            "tier": "table",
            "entries": d.entries,
            "attached": running.is_some_and(|r| r.chain.is_attached()),
            "service": running.map(|r| r.service.clone()),
            "node": node,
            "table": function,
        }),
    }
}
