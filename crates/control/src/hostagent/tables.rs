//! The host's table-tier devices (HYPER's hardware VNFs): each runs, for every service
//! whose path crosses it, that service's functions placed on it as one
//! `nfx_fastpath::table::TableChain` (firewall, NAT, elephant detection in eBPF over
//! bounded maps). The chains of one device are separate tcx programs on its ports, each
//! with its own tables, and each takes only its service's frames
//! ([`TableChain::select`]: the same selector expressions the steering routes the
//! service into the device by, [`selection_of`]); adding, changing or removing one
//! service's chain leaves the others' programs and flow state alone.
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
//! configuration version). A chain is pinned in the host's BPF file system
//! ([`super::tablepins`]: its tables and tcx links, one directory per chain under the
//! agent's own) with a manifest (`tables/chains/<device>@<service>.json`: the service,
//! its instances and their configuration versions, the tables' sizes, the ports, the
//! frames it takes), so it
//! outlives the agent: while a killed agent is down, frames keep running the chain with
//! its connection tracking, NAT mappings and counters. A restarted agent reloads the
//! records (each checked against the device's entries again), then takes back each
//! pinned chain whose manifest matches them ([`nfx_fastpath::table::TableChain::adopt`]:
//! programs loaded over the pinned tables and swapped onto the pinned links
//! atomically); a chain whose manifest is damaged or disagrees (another configuration
//! version, an instance no longer recorded, a device no longer configured), and any
//! pin no manifest names, is unpinned, which detaches it, and is loaded anew when the
//! controller sends the host's paths again. Paths re-sent for a chain a device runs
//! already leave it alone; a path that changes a device's chain switches to the new
//! one with [`nfx_fastpath::table::TableChain::take_over`] (atomic per hook; the
//! instances both chains hold carry their flow state across, copied before and after
//! the switch); a path
//! leaving the device, or a destroyed instance, detaches and unpins it (a path's chain
//! only once the steering has switched away from it). An instance migrated to another
//! table device takes the old one's flow state with the steering ([`moves`]). Where the host
//! has no bpffs to pin in (and none can be mounted), chains live with the agent's
//! process, as its maps and links then do. Programs found at start on a table device's
//! port with no pinned chain (none of this agent's) are removed with the port
//! ([`clear_leftovers`]). A configuration's files (a firewall's `rules_file`) are read
//! within the same scope as a software worker's: the workers' configuration directory
//! and the agent's `allowed_dirs`.

mod moves;

use super::record;
use super::stages::Stage;
use super::steering::{HostPath, HostTools, SteerError};
use super::tablepins::{self, Manifest};
use crate::vnfm::{InstanceSpec, InstanceState, VnfmError};
use nfx_fastpath::table::{
    check, FrameMatch, Placement, PortSpec, Selection, TableChain, TableStats,
};
use nfx_io::FileScope;
use nfx_model::{Cidr, PortRange, Proto};
use nfx_vnf::NodeSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// Subdirectory of the records holding the pinned chains' manifests.
const CHAINS: &str = "chains";

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
    /// The frames it takes on the device's ports.
    selection: Selection,
    chain: TableChain,
    /// Taken back from the pins of an earlier agent (not loaded by this one).
    adopted: bool,
}

/// A running chain's key: (device, service).
type ChainKey = (String, String);

/// What a device must run for one service: its instances in order, and its frames.
type Want = (Vec<String>, Selection);

#[derive(Default)]
struct Inner {
    instances: BTreeMap<String, Deployed>,
    chains: BTreeMap<ChainKey, Running>,
    /// Migrations under way, by the instance taking the state ([`moves`]).
    moves: BTreeMap<String, moves::Move>,
    /// What the finished migrations carried, by the instance that took the state.
    moved: BTreeMap<String, moves::Moved>,
}

impl Inner {
    /// The key of the chain instance `id` runs in, if it runs.
    fn chain_of(&self, id: &str) -> Option<ChainKey> {
        let device = &self.instances.get(id)?.spec.device;
        self.chains
            .iter()
            .find(|((d, _), r)| d == device && r.instances.iter().any(|i| i == id))
            .map(|(k, _)| k.clone())
    }
}

/// The host's table devices and what runs on them.
pub struct Tables {
    devices: BTreeMap<String, (TableDevice, Stage)>,
    /// Where the files a configuration names (a rules file) may be read from: the
    /// software workers' configuration directory and the agent's allowed directories.
    files: FileScope,
    /// Where each instance's record is kept.
    records: PathBuf,
    /// Where the chains are pinned ([`tablepins`]); none: they live with the agent.
    pins: Option<PathBuf>,
    inner: Mutex<Inner>,
}

/// The VNF configuration of an instance.
fn node_spec(function: &str, config: &serde_json::Value) -> Result<NodeSpec, VnfmError> {
    NodeSpec::from_function(function, config)
        .map_err(|e| VnfmError::Invalid(format!("{function}: {e}")))
}

impl Tables {
    /// The table devices `devices`, attached by `stages` (same order), with the
    /// instances recorded in `records` reloaded, and the chains pinned under `pins` that
    /// still match them taken back ([`Tables::adopt_pinned`]). Returns the instances
    /// that could not be reloaded, as `(instance, device, reason)`: a damaged record
    /// (set aside into `records/damaged/`), a device the configuration no longer has,
    /// a configuration that no longer fits.
    pub fn new(
        devices: Vec<(TableDevice, Stage)>,
        files: FileScope,
        records: PathBuf,
        pins: Option<PathBuf>,
    ) -> anyhow::Result<(Self, Vec<record::NotRestored>)> {
        std::fs::create_dir_all(records.join(CHAINS))
            .map_err(|e| anyhow::anyhow!("{}: {e}", records.display()))?;
        let t = Tables {
            devices: devices
                .into_iter()
                .map(|(d, s)| (d.id.clone(), (d, s)))
                .collect(),
            files,
            records,
            pins,
            inner: Mutex::new(Inner::default()),
        };
        let mut lost = Vec::new();
        for (id, file) in record::named_in(&t.records) {
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
        t.adopt_pinned();
        Ok((t, lost))
    }

    /// Devices whose chain an earlier agent left pinned, per their manifests in
    /// `records` (not yet checked): those whose ports must not be cleared at start.
    pub fn pinned_devices(records: &Path) -> Vec<String> {
        let mut devices: Vec<String> = record::named_in(&records.join(CHAINS))
            .into_iter()
            .map(|(name, _)| tablepins::device_of(&name).to_string())
            .collect();
        devices.sort();
        devices.dedup();
        devices
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
        let need = check(&node, free, self.files.clone()).map_err(|e| e.to_string())?;
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
            let need = check(&node, free, self.files.clone())
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
        let need = check(&node, free, self.files.clone())
            .map_err(|e| VnfmError::Invalid(format!("device {device}: {e}")))?;
        let key = g.chain_of(id);
        if let Some(r) = key.as_ref().and_then(|k| g.chains.get_mut(k)) {
            if let Some(k) = r.instances.iter().position(|i| i == id) {
                r.chain
                    .configure(k, &node, self.files.clone())
                    .map_err(|e| VnfmError::Invalid(format!("device {device}: {e}")))?;
            }
        }
        if let Some(d) = g.instances.get_mut(id) {
            d.spec.config = config.clone();
            d.node = node;
            d.entries = need.entries;
            d.version += 1;
        }
        self.save(&g, id)?;
        if let Some(r) = key.as_ref().and_then(|k| g.chains.get(k)) {
            self.save_manifest(&g, &device, r);
        }
        Ok(state_of(&g, id))
    }

    /// Forgets instance `id`; the chain it is part of is detached and its maps freed
    /// (the other services' chains on its device run on untouched).
    pub fn destruct(&self, id: &str) -> Result<(), VnfmError> {
        let mut g = self.inner();
        let key = g.chain_of(id);
        g.instances
            .remove(id)
            .ok_or_else(|| VnfmError::NotFound(id.to_string()))?;
        g.forget_moves(id);
        let _ = std::fs::remove_file(record::file_of(&self.records, id));
        if let Some((device, service)) = key {
            if let Some(r) = g.chains.remove(&(device.clone(), service)) {
                self.stop(&device, r);
            }
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

    /// Makes the table devices run exactly the chains `paths` name: for every service
    /// whose path lists instances on a device, their chain, taking only that service's
    /// frames ([`selection_of`]) — loaded, filled, selected and attached beside the
    /// device's other chains; a service's chain whose instances changed is switched to
    /// the new one atomically ([`TableChain::take_over`]), the instances it keeps
    /// taking their flow state along ([`moves::kept`]); one whose frames alone
    /// changed is selected anew in place; one that runs already, adopted or not, is
    /// left as it is — and so are the other services' chains. A chain taking a migrated
    /// instance's state gets it before it is attached ([`moves`]). Every other chain is
    /// detached and unpinned, unless `keep` (make-before-break: the host's steering
    /// still sends frames to it; call again without `keep` once it has switched), after
    /// the final copy of the state migrated out of it.
    pub fn reconcile(
        &self,
        paths: &BTreeMap<String, HostPath>,
        keep: bool,
    ) -> Result<(), SteerError> {
        let want = self.wanted(paths)?;
        let mut g = self.inner();
        for ((device, service), (ids, _)) in &want {
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
        let gone: Vec<ChainKey> = g
            .chains
            .keys()
            .filter(|k| !want.contains_key(*k))
            .cloned()
            .collect();
        // Chains taking a migrated instance's state first: they copy it while the chain
        // it comes from still runs it, even where that chain is switched in place too.
        let mut want: Vec<(ChainKey, Want)> = want.into_iter().collect();
        want.sort_by_key(|(_, (ids, _))| !ids.iter().any(|i| g.moves.contains_key(i)));
        for (key, (ids, selection)) in want {
            if let Some(r) = g.chains.get_mut(&key).filter(|r| r.instances == ids) {
                if r.selection != selection {
                    // Two map writes in place: the chain keeps its flow state.
                    r.chain
                        .select(Some(&selection))
                        .map_err(|e| SteerError::Failed(format!("table device {}: {e}", key.0)))?;
                    r.selection = selection;
                    let r = &g.chains[&key];
                    self.save_manifest(&g, &key.0, r);
                }
                continue;
            }
            let r = self.start(&mut g, &key, ids, selection)?;
            self.save_manifest(&g, &key.0, &r);
            g.chains.insert(key, r);
        }
        for key in gone.into_iter().filter(|_| !keep) {
            if let Some(r) = g.chains.remove(&key) {
                g.finish_moves_out_of(&r);
                self.stop(&key.0, r);
            }
        }
        Ok(())
    }

    /// Loads `key`'s chain of `ids` taking `selection`'s frames, and puts it on the
    /// device: in place of the service's running chain (taken out of `g`, put back on
    /// an error), or attached beside the device's other chains.
    fn start(
        &self,
        g: &mut Inner,
        key: &ChainKey,
        ids: Vec<String>,
        selection: Selection,
    ) -> Result<Running, SteerError> {
        let (device, service) = key;
        let fail = |e: String| {
            SteerError::Failed(format!("table device {device}, service {service}: {e}"))
        };
        let mut chain = self.load(g, device, &ids).map_err(fail)?;
        if let Err(e) = chain.select(Some(&selection)) {
            chain.detach();
            return Err(fail(e.to_string()));
        }
        if let Err(e) = g.copy_moves_into(&mut chain, &ids) {
            chain.detach();
            return Err(fail(e));
        }
        match g.chains.remove(key) {
            Some(mut old) => {
                let kept = moves::kept(&old.instances, &ids);
                let taken = moves::copy_kept(&old, &mut chain, &kept)
                    .and_then(|_| chain.take_over(&mut old.chain).map_err(|e| e.to_string()));
                if let Err(e) = taken {
                    chain.detach();
                    g.chains.insert(key.clone(), old);
                    return Err(fail(e));
                }
                log::info!(
                    "table device {device}: chain {ids:?} of {service} took over from {:?}",
                    old.instances
                );
                moves::finish_kept(&old, &mut chain, &kept);
                g.finish_moves(&old, &mut chain, &ids);
                g.finish_moves_out_of(&old);
                old.chain.detach();
            }
            None => {
                let placement = self.placement(device).map_err(fail)?;
                if let Err(e) = chain.attach(&placement) {
                    chain.detach();
                    return Err(fail(e.to_string()));
                }
                log::info!("table device {device}: chain {ids:?} of {service} attached");
            }
        }
        Ok(Running {
            service: service.clone(),
            instances: ids,
            selection,
            chain,
            adopted: false,
        })
    }

    /// Detaches `device`'s chain `r` (unpinned, its manifest removed; the agent's pin
    /// directory too once no chain is left in it, so a host whose services are gone
    /// keeps nothing of this agent's on its bpffs — the next pinned chain creates it).
    fn stop(&self, device: &str, mut r: Running) {
        r.chain.detach();
        if let Some(root) = &self.pins {
            let _ = std::fs::remove_dir(root);
        }
        let dir = self.records.join(CHAINS);
        let _ = std::fs::remove_file(tablepins::file_of(&dir, device, &r.service));
        log::info!("table device {device}: chain of {} detached", r.service);
    }

    /// Writes the manifest of `device`'s chain `r` (a pinned chain only). Without it a
    /// restarted agent does not take the chain back: it unpins it and loads it anew.
    fn save_manifest(&self, g: &Inner, device: &str, r: &Running) {
        let Some(pins) = r.chain.pinned_at() else {
            return;
        };
        let stage = &self.devices[device].1;
        let m = Manifest {
            device: device.to_string(),
            service: r.service.clone(),
            instances: r
                .instances
                .iter()
                .map(|i| (i.clone(), g.instances.get(i).map_or(0, |d| d.version)))
                .collect(),
            shape: r.chain.shape(),
            pins: pins.to_path_buf(),
            ports: (stage.worker_in.clone(), stage.worker_out.clone()),
            selection: Some(r.selection),
        };
        let file = tablepins::file_of(&self.records.join(CHAINS), device, &r.service);
        if let Err(e) = record::save(&file, &m) {
            log::error!("table device {device}: {e}: its chain will not survive a restart");
        }
    }

    /// Takes back every chain an earlier agent left pinned whose manifest matches the
    /// recorded instances (same instances, same configuration versions, same ports):
    /// packets never stopped and its flow state is kept. Every other pin directory of
    /// the agent's (damaged or mismatched manifest, a device no longer configured, a
    /// chain that could not be taken back, pins no manifest names) is unpinned, which
    /// detaches its chain.
    fn adopt_pinned(&self) {
        let dir = self.records.join(CHAINS);
        let mut kept = Vec::new();
        for (name, file) in record::named_in(&dir) {
            let device = tablepins::device_of(&name);
            match self.adopt(&file, device) {
                Ok(pins) => kept.push(pins),
                Err(e) => {
                    log::warn!("table device {device}: pinned chain not taken back: {e}");
                    let _ = std::fs::remove_file(&file);
                }
            }
        }
        let Some(root) = &self.pins else { return };
        for pins in tablepins::pin_dirs(root) {
            if !kept.contains(&pins) {
                log::info!("{}: pinned by no recorded chain, removed", pins.display());
                if let Err(e) = nfx_fastpath::table::unpin(&pins) {
                    log::error!("{}: {e}", pins.display());
                }
            }
        }
        // Kept only while it holds a chain: a pinned chain creates it again.
        let _ = std::fs::remove_dir(root);
    }

    /// Takes back the chain whose manifest is `file`; returns its pin directory (which
    /// the caller unpins on an error).
    fn adopt(&self, file: &Path, device: &str) -> Result<PathBuf, String> {
        let root = self.pins.as_deref().ok_or("this agent pins nothing")?;
        let m: Manifest = record::load(file)?;
        let stage = &self
            .devices
            .get(device)
            .ok_or_else(|| format!("{device} is no longer a table device of this host"))?
            .1;
        let mut g = self.inner();
        let why = m.mismatch(root, device, (&stage.worker_in, &stage.worker_out), |id| {
            g.instances
                .get(id)
                .map(|d| (d.spec.device.clone(), d.version))
        });
        if let Some(why) = why {
            return Err(why);
        }
        let key = (device.to_string(), m.service.clone());
        if g.chains.contains_key(&key) {
            return Err(format!("a chain of {} runs on {device} already", m.service));
        }
        if file != tablepins::file_of(&self.records.join(CHAINS), device, &m.service) {
            return Err(format!("{} names another chain", file.display()));
        }
        let ids = m.ids();
        let adopted = self.placement(device).and_then(|placement| {
            let mut chain = TableChain::adopt(
                &functions_of(&g, &ids),
                self.files.clone(),
                m.shape,
                &m.pins,
                &placement,
            )
            .map_err(|e| e.to_string())?;
            chain
                .select(m.selection.as_ref())
                .map_err(|e| e.to_string())?;
            Ok(chain)
        });
        let chain = adopted?;
        log::info!(
            "table device {device}: chain {ids:?} of {} taken back from {}",
            m.service,
            m.pins.display()
        );
        g.chains.insert(
            key,
            Running {
                service: m.service,
                instances: ids,
                // A chain of an agent that took every frame is replaced by the next
                // reconcile, with its service's selection.
                selection: m.selection.unwrap_or_default(),
                chain,
                adopted: true,
            },
        );
        Ok(m.pins)
    }

    /// The chains the table devices must run: per (device, service), the service's
    /// instances on the device in order and the frames its chain takes there.
    fn wanted(
        &self,
        paths: &BTreeMap<String, HostPath>,
    ) -> Result<BTreeMap<ChainKey, Want>, SteerError> {
        let mut want = BTreeMap::new();
        for (svc, p) in paths {
            for (j, device) in p.stages.iter().enumerate() {
                if !self.has_device(device) {
                    continue;
                }
                let ids = p.chain_of(svc, device)?;
                let selection = selection_of(p, j).map_err(|e| {
                    SteerError::Invalid(format!("path of {svc}: table device {device}: {e}"))
                })?;
                want.insert((device.clone(), svc.clone()), (ids.clone(), selection));
            }
        }
        Ok(want)
    }

    /// Loads and fills the chain of `ids` for `device` (pinned in a new directory of
    /// the agent's, when it pins), not attached yet.
    fn load(&self, g: &Inner, device: &str, ids: &[String]) -> Result<TableChain, String> {
        let functions = functions_of(g, ids);
        match &self.pins {
            Some(root) => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let dir = root.join(format!("{device}-{stamp}"));
                TableChain::deploy_pinned(&functions, self.files.clone(), &dir)
            }
            None => TableChain::deploy(&functions, self.files.clone()),
        }
        .map_err(|e| e.to_string())
    }

    /// Where `device`'s chain runs: alone between its two ports, towards the kernel
    /// ends' MACs.
    fn placement(&self, device: &str) -> Result<Placement, String> {
        let stage = &self.devices[device].1;
        let port = |iface: &str, kernel: &str| -> Result<PortSpec, String> {
            Ok(PortSpec {
                iface: iface.to_string(),
                peer_mac: nfx_io::sys::iface_mac(kernel).map_err(|e| format!("{kernel}: {e}"))?,
            })
        };
        Ok(Placement::Alone {
            inside: port(&stage.worker_in, &stage.kernel_in)?,
            outside: port(&stage.worker_out, &stage.kernel_out)?,
        })
    }
}

/// The frames of `path`'s service that the chain on its stage `j` takes: forward, what
/// the steering routes into the stage (the whole selector into the first stage of a
/// path whose frames no NAT has rewritten yet, the destination side after that);
/// reverse, the replies (source = the selector's destination side), which the steering
/// routes back into the stage's outside port.
pub fn selection_of(path: &HostPath, j: usize) -> Result<Selection, String> {
    let sel = &path.selector;
    sel.validate()?;
    let rewritten = j > 0
        || path.nat_before
        || path
            .stages
            .get(j)
            .is_some_and(|d| path.after_nat.contains(d));
    let net = |c: &Option<Cidr>| c.map(|c| (c.addr, c.len));
    let range = |r: &Option<PortRange>| r.map(|r| (r.lo, r.hi));
    let proto = sel.proto.map(|p| match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
        Proto::Icmp => 1,
        Proto::Number(n) => n,
    });
    let forward = FrameMatch {
        src: if rewritten { None } else { net(&sel.src) },
        dst: net(&sel.dst),
        proto,
        sport: if rewritten { None } else { range(&sel.sport) },
        dport: range(&sel.dport),
    };
    let reverse = FrameMatch {
        src: net(&sel.dst),
        dst: None,
        proto,
        sport: range(&sel.dport),
        dport: None,
    };
    Ok(Selection { forward, reverse })
}

/// The functions of instances `ids` (recorded in `g`), in order.
fn functions_of(g: &Inner, ids: &[String]) -> Vec<(String, NodeSpec)> {
    ids.iter()
        .filter_map(|id| g.instances.get(id).map(|d| (id.clone(), d.node.clone())))
        .collect()
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
    let running = g.chain_of(id).and_then(|k| g.chains.get(&k));
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
            "pinned": running.is_some_and(|r| r.chain.pinned_at().is_some()),
            "adopted": running.is_some_and(|r| r.adopted),
            "service": running.map(|r| r.service.clone()),
            "node": node,
            "table": function,
            "migrated": g.moved.get(id),
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

    fn path(stages: &[&str], nat_before: bool, after_nat: &[&str]) -> HostPath {
        serde_json::from_value(serde_json::json!({
            "selector": {"src": "10.0.0.1/32", "dst": "10.0.1.0/24", "proto": "tcp",
                         "sport": "1000-2000", "dport": "5201"},
            "stages": stages,
            "nat_before": nat_before,
            "after_nat": after_nat,
        }))
        .unwrap()
    }

    #[test]
    fn a_chain_takes_what_the_steering_routes_into_its_stage_and_the_replies() {
        let full = selection_of(&path(&["tt0", "sw0"], false, &[]), 0).unwrap();
        let f = full.forward;
        assert_eq!(f.src, Some(("10.0.0.1".parse().unwrap(), 32)));
        assert_eq!(f.dst, Some(("10.0.1.0".parse().unwrap(), 24)));
        assert_eq!(
            (f.proto, f.sport, f.dport),
            (Some(6), Some((1000, 2000)), Some((5201, 5201)))
        );
        let r = full.reverse;
        assert_eq!(r.src, f.dst, "replies come from the destination side");
        assert_eq!((r.dst, r.sport, r.dport), (None, Some((5201, 5201)), None));
        // Behind another stage, or a NAT: the destination side only, as the steering.
        for (p, j) in [
            (path(&["sw0", "tt0"], false, &[]), 1),
            (path(&["tt0"], true, &[]), 0),
            (path(&["tt0"], false, &["tt0"]), 0),
        ] {
            let f = selection_of(&p, j).unwrap().forward;
            assert_eq!((f.src, f.sport), (None, None), "{p:?}");
            assert_eq!(f.dport, Some((5201, 5201)));
        }
        let mut bad = path(&["tt0"], false, &[]);
        bad.selector.proto = None;
        assert!(selection_of(&bad, 0).is_err(), "ports without tcp/udp");
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
        let (t, lost) =
            Tables::new(devices(), FileScope::new(&dir), records.clone(), None).unwrap();
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

        let (t, mut lost) =
            Tables::new(devices(), FileScope::new(&dir), records.clone(), None).unwrap();
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
