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
//!
//! Every instance is recorded in `tables/<id>.json` ([`super::record`]: its spec and
//! configuration version). A restarted agent reloads the records (each checked against
//! the device's entries again); the chains come back when the controller sends the
//! host's paths again, as a restarted agent's paths always do. The chain's maps live in
//! the agent's process and its tc links are owned by it, so a killed agent's programs
//! are detached by the kernel and its tables (connection tracking, NAT mappings,
//! elephant counters) are gone: flows through a table-tier NAT get new mappings after
//! an agent restart. Any program still found on a table device's port at start (none
//! of this agent's) is removed with the port ([`clear_leftovers`]).

use super::record;
use super::stages::Stage;
use super::steering::{HostPath, HostTools, SteerError};
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

/// What the agent keeps of a table-tier instance to bring it back after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableRecord {
    spec: InstanceSpec,
    config_version: u64,
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
    /// Where each instance's record is kept.
    records: PathBuf,
    inner: Mutex<Inner>,
}

/// The VNF configuration of an instance.
fn node_spec(function: &str, config: &serde_json::Value) -> Result<NodeSpec, VnfmError> {
    NodeSpec::from_function(function, config)
        .map_err(|e| VnfmError::Invalid(format!("{function}: {e}")))
}

impl Tables {
    /// The table devices `devices`, attached by `stages` (same order), with the
    /// instances recorded in `records` reloaded. Returns those that could not be, as
    /// `(instance, device, reason)`: a damaged record (set aside into
    /// `records/damaged/`), a device the configuration no longer has, a configuration
    /// that no longer fits.
    pub fn new(
        devices: Vec<(TableDevice, Stage)>,
        base_dir: PathBuf,
        records: PathBuf,
    ) -> anyhow::Result<(Self, Vec<record::NotRestored>)> {
        std::fs::create_dir_all(&records)
            .map_err(|e| anyhow::anyhow!("{}: {e}", records.display()))?;
        let t = Tables {
            devices: devices
                .into_iter()
                .map(|(d, s)| (d.id.clone(), (d, s)))
                .collect(),
            base_dir,
            records,
            inner: Mutex::new(Inner::default()),
        };
        let mut lost = Vec::new();
        for file in record::files_in(&t.records) {
            let id = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            match record::load::<TableRecord>(&file) {
                Ok(r) => {
                    if let Err(e) = t.reload(&id, r.clone()) {
                        let _ = std::fs::remove_file(&file);
                        log::warn!("table instance {id}: not reloaded: {e}");
                        lost.push((id, r.spec.device, format!("not restored: {e}")));
                    }
                }
                Err(e) => {
                    let aside = record::set_aside(&t.records, &file);
                    log::error!(
                        "table instance {id}: {e} (set aside as {})",
                        aside.display()
                    );
                    lost.push((id, "unknown".into(), format!("damaged record: {e}")));
                }
            }
        }
        Ok((t, lost))
    }

    /// Takes back recorded instance `id`, checked as a deploy is.
    fn reload(&self, id: &str, r: TableRecord) -> Result<(), String> {
        if r.spec.id != id {
            return Err(format!("its record names instance {:?}", r.spec.id));
        }
        if !self.has_device(&r.spec.device) {
            return Err(format!(
                "{} is no longer a table device of this host",
                r.spec.device
            ));
        }
        let node = node_spec(&r.spec.function, &r.spec.config).map_err(|e| e.to_string())?;
        let mut g = self.inner();
        let free = self.free(&g, &r.spec.device, id);
        let need = check(&node, free, &self.base_dir).map_err(|e| e.to_string())?;
        g.instances.insert(
            id.to_string(),
            Deployed {
                spec: r.spec,
                node,
                entries: need.entries,
                version: r.config_version,
            },
        );
        Ok(())
    }

    /// Writes instance `id`'s record (`g` holds it).
    fn save(&self, g: &Inner, id: &str) -> Result<(), VnfmError> {
        let d = &g.instances[id];
        let r = TableRecord {
            spec: d.spec.clone(),
            config_version: d.version,
        };
        record::save(&record::file_of(&self.records, id), &r)
            .map_err(|e| VnfmError::Unavailable(format!("recording instance {id}: {e}")))
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
            if let Err(e) = self.save(&g, &spec.id) {
                g.instances.remove(&spec.id);
                return Err(e);
            }
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
        self.save(&g, id)?;
        Ok(state_of(&g, id))
    }

    /// Forgets instance `id`; the chain it is part of is detached and its maps freed.
    pub fn destruct(&self, id: &str) -> Result<(), VnfmError> {
        let mut g = self.inner();
        let d = g
            .instances
            .remove(id)
            .ok_or_else(|| VnfmError::NotFound(id.to_string()))?;
        let _ = std::fs::remove_file(record::file_of(&self.records, id));
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

/// Removes every tc program found on `stage`'s ports (a fresh agent holds none: they
/// belong to no recorded instance) by deleting the ports' veth pairs and attaching
/// them again; returns how many there were.
pub fn clear_leftovers(stage: &Stage, tools: &mut dyn HostTools) -> Result<usize, String> {
    let mut found = 0;
    for (kernel, port) in [
        (&stage.kernel_in, &stage.worker_in),
        (&stage.kernel_out, &stage.worker_out),
    ] {
        let n = nfx_fastpath::table::tcx_programs(port).unwrap_or(0);
        if n > 0 {
            found += n;
            tools.ip(&["link", "del", kernel])?;
        }
    }
    if found > 0 {
        stage.ensure(tools)?;
    }
    Ok(found)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, device: &str, max_flows: u64) -> InstanceSpec {
        InstanceSpec {
            id: id.into(),
            function: "firewall".into(),
            device: device.into(),
            config: serde_json::json!({"default": "allow", "max_flows": max_flows}),
            throughput_gbps: 1.0,
            capacity: 16.0,
        }
    }

    #[test]
    fn instances_are_reloaded_from_their_records_and_damaged_ones_set_aside() {
        let dir = std::env::temp_dir().join(format!("nfx-tables-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let records = dir.join("tables");
        let devices = || {
            vec![(
                TableDevice {
                    id: "tt0".into(),
                    entries: 1000,
                },
                Stage::new("tt0", 0),
            )]
        };
        let (t, lost) = Tables::new(devices(), dir.clone(), records.clone()).unwrap();
        assert!(lost.is_empty());
        t.deploy(&spec("fw1", "tt0", 16)).unwrap();
        let cfg = serde_json::json!({"default": "deny", "max_flows": 32});
        assert_eq!(t.configure("fw1", &cfg).unwrap().config_version, 2);
        drop(t);
        // Beside it: a damaged record, and one on a device the agent no longer has.
        std::fs::write(
            records.join("bad.json"),
            b"{\"version\": 1, \"record\": {\"spec\"",
        )
        .unwrap();
        let stale = TableRecord {
            spec: spec("old", "tt9", 16),
            config_version: 1,
        };
        record::save(&record::file_of(&records, "old"), &stale).unwrap();

        let (t, mut lost) = Tables::new(devices(), dir.clone(), records.clone()).unwrap();
        assert_eq!(t.ids(), ["fw1"]);
        let st = t.state("fw1").unwrap();
        assert_eq!(st.config_version, 2);
        assert!(
            t.holds("fw1") && t.deploy(&spec("fw1", "tt0", 16)).is_err(),
            "reloaded with its new config"
        );
        lost.sort();
        assert_eq!(lost.len(), 2, "{lost:?}");
        assert_eq!(lost[0].0, "bad");
        assert!(lost[0].2.contains("bad.json: not a record"), "{lost:?}");
        assert!(records.join("damaged").join("bad.json").exists());
        assert_eq!(lost[1].0, "old");
        assert!(
            lost[1].2.contains("tt9 is no longer a table device"),
            "{lost:?}"
        );
        t.destruct("fw1").unwrap();
        assert!(record::files_in(&records).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
