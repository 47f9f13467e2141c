//! The host agent (`nfx agent --config FILE`): runs inside one host (a testbed
//! namespace), serves the five VNFM calls for the host's software devices with real
//! `nfx run` workers, programs the host's part of every service path (nftables and policy
//! routes, [`steering`]), watches its workers and reports those that died, and answers the
//! controller's heartbeat. Its accelerator devices run the host's ESP tunnel endpoints
//! (`esp` instances, [`tunnels`]); its table-tier devices run the table-tier functions
//! placed on them as eBPF chains ([`tables`]). A `transcode` instance on a software
//! device is a process of its own ([`transcoders`]). It listens on the host's management
//! address over mutual TLS. A restarted agent brings back what the earlier one ran:
//! its workers (reloaded), its tunnel endpoints (adopted or started again) and its
//! table-tier instances (reloaded; their chains attached again when the controller
//! re-sends the host's paths), see docs/architecture.md.

pub mod api;
pub mod knobs;
pub mod leftovers;
pub mod metrics;
pub mod power;
pub mod record;
pub mod stages;
pub mod steering;
pub mod tablepins;
pub mod tables;
pub mod transcoders;
pub mod tunnels;

use crate::api::metrics::ApiMetrics;
use crate::tls::TlsFiles;
use crate::vnfm::local::{LocalConfig, LocalVnfm, WorkerTemplate};
use crate::vnfm::{
    FlowImport, FlowState, InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError,
};
use anyhow::Context;
use nfx_dataplane::services::{PortSpec, ProtoSpec, SelectorConfig};
use nfx_dataplane::ServiceConfig;
use nfx_model::Selector;
use nfx_proto::run_config::{IoMode, KernelStack};
use serde::{Deserialize, Serialize};
use stages::Stage;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};
use steering::{HostPath, NeighborLink, Restored, SteerError, Steering, SystemTools};

/// How often the agent looks for dead workers and ended drains.
const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// Receive ring slots per port of an agent's workers: 8,192 MTU slots of 2 KiB
/// (`io: ring-copy`, 16 MiB, which the kernel allocates and zeroes on the new worker's
/// start-up path). 256 GSO slots of 68 KiB took 18 MiB and held only ~26 ms of a 10,000
/// datagram/s stream while the worker was away; on a loaded host the workers' rings
/// overflowed and a migration lost datagrams (docs/benchmarks/control.md). GSO
/// super-packets are read from the socket queue instead (docs/dataplane.md, "Receive ring").
const WORKER_RING_SLOTS: usize = 8192;

/// Most lost-instance reports kept until the controller acts on them.
const MAX_LOST: usize = 1024;

/// The agent's configuration file (YAML, written by `nfx testbed up --hosts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The host id (as in the infrastructure).
    pub host: String,
    /// Address to listen on (the host's management address).
    pub listen: SocketAddr,
    /// Server TLS material; absent: plain HTTP (only for loopback tests).
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// File holding the bearer token the controller must send.
    pub token_file: PathBuf,
    /// Directory for worker configs, sockets, logs and state.
    pub run_dir: PathBuf,
    /// The `nfx` binary workers run (default: the running executable).
    #[serde(default)]
    pub nfx_bin: Option<PathBuf>,
    /// Software devices: each gets its worker, attached by two veth pairs.
    #[serde(default)]
    pub software: Vec<SoftwareDevice>,
    /// Neighbor hosts: the interface towards each and its next-hop address.
    #[serde(default)]
    pub neighbors: BTreeMap<String, NeighborLink>,
    /// File written with the bound address once the agent listens.
    #[serde(default)]
    pub ready_file: Option<PathBuf>,
    /// Absolute directories the host's workers may read files from that a VNF
    /// configuration names (e.g. `/etc/nfx/dpi` for DPI pattern files).
    #[serde(default)]
    pub allowed_dirs: Vec<PathBuf>,
    /// The host's power model (`hosts[].power` of the infrastructure descriptor): what
    /// the power agent meters with where the host has no RAPL counters. Absent on such
    /// a host: energy is not metered and the agent's energy report says why.
    #[serde(default)]
    pub power: Option<nfx_model::PowerModel>,
    /// Lookaside accelerator devices: each runs the tunnel endpoints placed on it.
    #[serde(default)]
    pub accelerators: Vec<tunnels::AcceleratorDevice>,
    /// Table-tier devices: each runs the table-tier functions of one service in eBPF,
    /// attached by two veth pairs like a software device (needs root, kernel ≥ 6.6).
    #[serde(default)]
    pub tables: Vec<tables::TableDevice>,
}

/// A software device of the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftwareDevice {
    /// Device id (as in the infrastructure).
    pub id: String,
    /// CPU cores it owns (its capacity).
    pub cores: u32,
}

impl AgentConfig {
    /// Reads the YAML file; errors name the file and the field.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let c: AgentConfig = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: invalid agent config", path.display()))?;
        if c.software.len() + c.tables.len() > stages::MAX_DEVICES {
            anyhow::bail!(
                "{}: software + tables: at most {} devices per agent",
                path.display(),
                stages::MAX_DEVICES
            );
        }
        if let Some(p) = &c.power {
            p.check(&path.display().to_string(), "power")?;
        }
        Ok(c)
    }
}

/// An instance whose worker died, as reported in the heartbeat until the controller
/// destroys it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LostInstance {
    /// Instance id.
    pub instance: String,
    /// Its device.
    pub device: String,
    /// What happened.
    pub reason: String,
    /// When the agent noticed, ms since the Unix epoch.
    pub at_unix_ms: u64,
}

/// The heartbeat answer (`GET /agent/v1/health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Host id.
    pub host: String,
    /// The agent's process id.
    pub pid: u32,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Instances lost since they were deployed.
    pub lost: Vec<LostInstance>,
    /// Services with a path through this host.
    pub paths: usize,
    /// The power agent's latest figures (absent until its second sample, or when the
    /// host is not metered).
    #[serde(default)]
    pub energy: Option<power::EnergyReport>,
    /// Why the host is not metered (no RAPL and no power model).
    #[serde(default)]
    pub energy_error: Option<String>,
}

/// One host's agent.
pub struct HostAgent {
    host: String,
    local: LocalVnfm,
    steering: Mutex<Steering>,
    /// The number of paths the heartbeat last read from `steering`.
    paths_seen: AtomicU64,
    lost: Mutex<Vec<LostInstance>>,
    started: Instant,
    /// Workers that ended without the agent stopping them.
    exits: AtomicU64,
    /// The agent's API requests.
    api: ApiMetrics,
    /// Energy per instance and the power knobs' read-back.
    power: power::PowerAgent,
    /// The power knobs (CPU limits live as long as the agent).
    knobs: Mutex<nfx_energy::knobs::Actuator>,
    /// Tunnel endpoints and the accelerator devices they run on.
    tunnels: tunnels::Tunnels,
    /// Table-tier devices and their chains.
    tables: tables::Tables,
    /// The transcoders on the host's software devices.
    transcoders: transcoders::Transcoders,
}

impl HostAgent {
    /// Attaches the software devices, reloads the workers recorded in `run_dir`, keeps
    /// the paths an earlier agent recorded there (or closes the host: every earlier path
    /// removed until the controller sends its paths), and starts watching the workers.
    pub fn start(cfg: &AgentConfig) -> anyhow::Result<Arc<Self>> {
        let mut tools = SystemTools;
        let mut stages = BTreeMap::new();
        let mut workers = BTreeMap::new();
        for (k, d) in cfg.software.iter().enumerate() {
            let st = Stage::new(&d.id, k);
            let ports = st
                .ensure(&mut tools)
                .map_err(|e| anyhow::anyhow!("attaching device {}: {e}", d.id))?;
            workers.insert(
                d.id.clone(),
                WorkerTemplate {
                    netns: None,
                    ports,
                    vector: None,
                    poll: Some(nfx_io::PollMode::Adaptive),
                    ring_slots: Some(WORKER_RING_SLOTS),
                    nice: Some(nfx_io::priority::DATAPLANE_NICE),
                    fanout: None,
                    fast_path: None,
                    allowed_dirs: cfg.allowed_dirs.clone(),
                    kernel_stack: Some(KernelStack::External),
                    io: Some(IoMode::RingCopy),
                },
            );
            stages.insert(d.id.clone(), st);
        }
        // The worker ports are closed to the host's IP stack from here on, worker or not,
        // and no worker runs `nft` on its start-up path.
        let ports: Vec<&str> = stages
            .values()
            .flat_map(|st| [st.worker_in.as_str(), st.worker_out.as_str()])
            .collect();
        if !ports.is_empty() {
            nfx_io::isolate::install_standing(&ports)
                .map_err(|e| anyhow::anyhow!("isolating the worker ports from the kernel: {e}"))?;
        }
        let mut table_devices = Vec::new();
        let pins = if cfg.tables.is_empty() {
            None
        } else {
            tablepins::prepare_root(&cfg.host, &cfg.run_dir)
        };
        // A device whose chain an earlier agent left pinned keeps its programs: the
        // chain is taken back, or unpinned, by the tables.
        let pinned = match pins {
            Some(_) => tables::Tables::pinned_devices(&cfg.run_dir.join("tables")),
            None => Vec::new(),
        };
        for (j, d) in cfg.tables.iter().enumerate() {
            let st = Stage::new(&d.id, cfg.software.len() + j);
            st.ensure(&mut tools)
                .map_err(|e| anyhow::anyhow!("attaching device {}: {e}", d.id))?;
            if !pinned.contains(&d.id) {
                let left = tables::clear_leftovers(&st, &mut tools)
                    .map_err(|e| anyhow::anyhow!("clearing device {}: {e}", d.id))?;
                if left > 0 {
                    log::warn!("table device {}: {left} leftover program(s) removed", d.id);
                }
            }
            stages.insert(d.id.clone(), st.clone());
            table_devices.push((d.clone(), st));
        }
        let agent = Self::assemble(
            cfg,
            Box::new(SystemTools),
            stages,
            workers,
            (table_devices, pins),
        )?;
        let weak = Arc::downgrade(&agent);
        std::thread::Builder::new()
            .name("agent-housekeeping".into())
            .spawn(move || housekeeping(weak))?;
        let weak = Arc::downgrade(&agent);
        std::thread::Builder::new()
            .name("agent-power".into())
            .spawn(move || metering(weak))?;
        Ok(agent)
    }

    /// The agent of the `agent_api` fuzz target (feature `fuzzing`) and of the API's
    /// unit tests: `cfg`'s run
    /// directory, neighbors and power model, steering through [`steering::Unplugged`]
    /// tools, no housekeeping or metering thread. A configuration with a software or an
    /// accelerator device is refused, so every deploy is refused before it could start
    /// a process and no call reaches the host's interfaces.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn unplugged(cfg: &AgentConfig) -> anyhow::Result<Arc<Self>> {
        anyhow::ensure!(
            cfg.software.is_empty() && cfg.accelerators.is_empty() && cfg.tables.is_empty(),
            "an unplugged agent has no software, accelerator or table device"
        );
        Self::assemble(
            cfg,
            Box::new(steering::Unplugged),
            BTreeMap::new(),
            BTreeMap::new(),
            (Vec::new(), None),
        )
    }

    /// The agent over its attached `stages` and their worker templates: reloads the
    /// workers recorded in `run_dir` and restores its recorded paths (or closes the host)
    /// through `tools`.
    fn assemble(
        cfg: &AgentConfig,
        tools: Box<dyn steering::HostTools>,
        stages: BTreeMap<String, Stage>,
        workers: BTreeMap<String, WorkerTemplate>,
        (table_devices, pins): (Vec<(tables::TableDevice, Stage)>, Option<PathBuf>),
    ) -> anyhow::Result<Arc<Self>> {
        // A rules file is read as the software workers read theirs: from their
        // configuration directory or an allowed directory.
        let files = nfx_io::FileScope::new(cfg.run_dir.join("workers"))
            .with_allowed(cfg.allowed_dirs.iter().cloned());
        let (tables, mut lost) =
            tables::Tables::new(table_devices, files, cfg.run_dir.join("tables"), pins)?;
        let local = LocalVnfm::new(LocalConfig {
            run_dir: cfg.run_dir.join("workers"),
            nfx_bin: cfg.nfx_bin.clone(),
            workers,
        })?
        .with_services();
        let (tunnels, lost_tunnels) = tunnels::Tunnels::new(
            &cfg.host,
            cfg.run_dir.join("tunnels"),
            cfg.nfx_bin.clone(),
            &cfg.accelerators,
            cfg.neighbors.clone(),
        )?;
        lost.extend(lost_tunnels);
        let (transcoders, lost_transcoders) = transcoders::Transcoders::new(
            cfg.run_dir.join("transcode"),
            cfg.nfx_bin.clone(),
            cfg.software.iter().map(|d| d.id.clone()).collect(),
        )?;
        lost.extend(lost_transcoders);
        let mut steering = Steering::new(tools, cfg.neighbors.clone(), stages)
            .with_record(cfg.run_dir.join("steering.json"));
        for (id, link) in tunnels.links() {
            steering.set_tunnel(&id, link);
        }
        match steering
            .restore()
            .map_err(|e| anyhow::anyhow!("closing the host: {e}"))?
        {
            Restored::Paths(n) => log::info!("steering: {n} recorded path(s) kept"),
            Restored::Refused(why) => log::warn!("steering: host closed ({why})"),
            Restored::Closed => {}
        }
        let now_ms = unix_ms();
        let lost = lost
            .into_iter()
            .map(|(instance, device, reason)| LostInstance {
                instance,
                device,
                reason,
                at_unix_ms: now_ms,
            })
            .collect();
        Ok(Arc::new(HostAgent {
            host: cfg.host.clone(),
            local,
            steering: Mutex::new(steering),
            paths_seen: AtomicU64::new(0),
            lost: Mutex::new(lost),
            started: Instant::now(),
            exits: AtomicU64::new(0),
            api: ApiMetrics::default(),
            power: power::PowerAgent::new(
                &cfg.host,
                cfg.software
                    .iter()
                    .map(|d| (d.id.clone(), d.cores))
                    .collect(),
                cfg.power.clone(),
            ),
            knobs: Mutex::new(nfx_energy::knobs::Actuator::new()),
            tunnels,
            tables,
            transcoders,
        }))
    }

    fn steering(&self) -> std::sync::MutexGuard<'_, Steering> {
        self.steering.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lost(&self) -> std::sync::MutexGuard<'_, Vec<LostInstance>> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The heartbeat answer.
    pub fn health(&self) -> Health {
        let (energy, energy_error) = match self.power.report() {
            Ok(r) => (r, None),
            Err(e) => (None, Some(e)),
        };
        Health {
            host: self.host.clone(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            lost: self.lost().clone(),
            paths: read_or_last(&self.steering, &self.paths_seen, |st| {
                st.paths().len() as u64
            }) as usize,
            energy,
            energy_error,
        }
    }

    /// The power agent's latest figures (`None` before its second sample); `Err` says
    /// why the host is not metered.
    pub fn energy(&self) -> Result<Option<power::EnergyReport>, String> {
        self.power.report()
    }

    /// Sets one worker's power knob and reads it back (`POST /agent/v1/knobs`).
    pub fn set_knob(
        &self,
        req: &knobs::KnobRequest,
    ) -> Result<knobs::KnobAnswer, knobs::KnobError> {
        let mut act = self.knobs.lock().unwrap_or_else(|e| e.into_inner());
        let r = knobs::apply(
            &mut act,
            &self.local.worker_processes(),
            self.power.cores(),
            req,
        );
        match &r {
            Ok(_) => log::info!("knob {}: {}", req.device, req.setting.label()),
            Err(e) => log::warn!("knob {}: {e}", req.device),
        }
        r
    }

    /// Switches tunnel endpoint `id` live onto its device's queue pair or to its CPU
    /// engine (`POST /agent/v1/tunnels/{id}/engine`, the controller's SSM).
    pub fn switch_tunnel_engine(
        &self,
        id: &str,
        req: tunnels::EngineRequest,
    ) -> Result<tunnels::EngineSwitch, crate::vnfm::VnfmError> {
        let r = self.tunnels.switch_engine(id, req);
        match &r {
            Ok(s) => log::info!("tunnel {id}: engine {} ({} µs)", s.engine, s.switch_us),
            Err(e) => log::warn!("tunnel {id}: engine switch refused: {e}"),
        }
        r
    }

    /// Programs the host's part of `service`'s path, make-before-break: the workers of
    /// the new path classify the service's frames into its chain before the one
    /// nftables transaction sends the frames to them; a worker the path left keeps the
    /// service until its instance goes or the path's drain ends, so frames still inside
    /// it are carried on. A table device's chain is loaded (with the flow state of the
    /// instances migrated into it) and attached before the switch; a chain the path
    /// left runs until the switch, then hands over its migrated state and is detached.
    pub fn program(&self, service: &str, path: &HostPath) -> Result<(), SteerError> {
        let mut st = self.steering();
        self.restore_sources(&mut st, path)?;
        let path = &self.without_transcoders(path);
        let mut paths = st.paths();
        paths.insert(service.to_string(), path.clone());
        self.reconcile_workers(&paths, true)?;
        self.tables.reconcile(&paths, true)?;
        st.program(service, path)?;
        self.tables.reconcile(&paths, false)
    }

    /// Gives the transcoders `path` names on this host the original source of their
    /// stream: the selector's `src` when it is one IPv4 address (their output is
    /// source-NATed to it), else none.
    fn restore_sources(&self, st: &mut Steering, path: &HostPath) -> Result<(), SteerError> {
        let source = path.selector.src.and_then(|c| match c.addr {
            std::net::IpAddr::V4(a) if c.len == 32 => Some(a),
            _ => None,
        });
        for id in path.instances.values().flatten() {
            if self.transcoders.holds(id) {
                st.set_redirect_source(id, source)?;
            }
        }
        Ok(())
    }

    /// `path` without its transcoders: a transcoder is an L4 endpoint that receives the
    /// stream addressed to it and sends its own, so no frame is steered into it; a
    /// stage left with no instance is no stage of the host's path.
    fn without_transcoders(&self, path: &HostPath) -> HostPath {
        let mut p = path.clone();
        for chain in p.instances.values_mut() {
            chain.retain(|i| !self.transcoders.holds(i));
        }
        let instances = &p.instances;
        p.stages
            .retain(|d| instances.get(d).is_none_or(|c| !c.is_empty()));
        p.instances.retain(|_, c| !c.is_empty());
        p
    }

    /// Removes `service`'s path from this host, then its chains from the workers.
    pub fn withdraw(&self, service: &str) -> Result<(), SteerError> {
        let mut st = self.steering();
        st.withdraw(service)?;
        let paths = st.paths();
        self.tables.reconcile(&paths, false)?;
        self.reconcile_workers(&paths, false)
    }

    /// Makes the host's paths exactly `paths` (workers gain services before the switch
    /// and lose the others after it).
    pub fn sync(&self, paths: &BTreeMap<String, HostPath>) -> Result<(), SteerError> {
        let mut st = self.steering();
        for p in paths.values() {
            self.restore_sources(&mut st, p)?;
        }
        let paths: &BTreeMap<String, HostPath> = &paths
            .iter()
            .map(|(s, p)| (s.clone(), self.without_transcoders(p)))
            .collect();
        self.reconcile_workers(paths, true)?;
        self.tables.reconcile(paths, true)?;
        st.sync(paths)?;
        self.tables.reconcile(paths, false)?;
        self.reconcile_workers(paths, false)
    }

    /// Gives every worker the services `paths` send through it: with `keep`, services
    /// it runs that `paths` do not name stay (a path that just left it drains); without,
    /// it runs exactly those of `paths`. Checks every worker first: a path through a
    /// device that runs no instance changes nothing.
    fn reconcile_workers(
        &self,
        paths: &BTreeMap<String, HostPath>,
        keep: bool,
    ) -> Result<(), SteerError> {
        let want = services_by_device(paths, |d| self.tables.has_device(d))?;
        let have = self.local.worker_services();
        if let Some(d) = want.keys().find(|d| !have.contains_key(*d)) {
            return Err(SteerError::Invalid(format!(
                "device {d:?} runs no instance on this host"
            )));
        }
        for (device, now) in have {
            let mut next = if keep { now.clone() } else { Vec::new() };
            for s in want.get(&device).into_iter().flatten() {
                match next.iter_mut().find(|x| x.id == s.id) {
                    Some(x) => *x = s.clone(),
                    None => next.push(s.clone()),
                }
            }
            next.sort_by(|a, b| a.id.cmp(&b.id));
            if next != now {
                self.local
                    .set_services(&device, next)
                    .map_err(|e| SteerError::Failed(format!("worker of {device}: {e}")))?;
            }
        }
        Ok(())
    }

    /// The programmed paths.
    pub fn paths(&self) -> BTreeMap<String, HostPath> {
        self.steering().paths()
    }

    /// Keeps a lost-instance report (at most [`MAX_LOST`], the oldest dropped).
    fn record_lost(&self, l: LostInstance) {
        let mut lost = self.lost();
        if lost.len() >= MAX_LOST {
            lost.remove(0);
        }
        lost.push(l);
    }

    /// One housekeeping round: dead workers and tunnel endpoints become lost
    /// instances; drains end.
    fn tick(&self) {
        let now_ms = unix_ms();
        for (instance, device, reason) in self.transcoders.reap_dead() {
            self.exits.fetch_add(1, Ordering::Relaxed);
            log::warn!("{reason}; lost: {instance}");
            self.record_lost(LostInstance {
                instance,
                device,
                reason,
                at_unix_ms: now_ms,
            });
        }
        for (instance, device, reason) in self.tunnels.reap_dead() {
            self.exits.fetch_add(1, Ordering::Relaxed);
            log::warn!("{reason}; lost: {instance}");
            self.steering().remove_tunnel(&instance);
            self.record_lost(LostInstance {
                instance,
                device,
                reason,
                at_unix_ms: now_ms,
            });
        }
        for w in self.local.reap_dead() {
            self.exits.fetch_add(1, Ordering::Relaxed);
            let reason = format!(
                "worker of {} (pid {}) ended: {}",
                w.device,
                w.pid,
                w.exit.as_deref().unwrap_or("not by the agent")
            );
            log::warn!("{reason}; lost: {:?}", w.instances);
            for i in w.instances {
                self.record_lost(LostInstance {
                    instance: i,
                    device: w.device.clone(),
                    reason: reason.clone(),
                    at_unix_ms: now_ms,
                });
            }
        }
        let mut st = self.steering();
        match st.expire_drains(Instant::now()) {
            Ok(true) => {
                if let Err(e) = self.reconcile_workers(&st.paths(), false) {
                    log::warn!("removing drained services from workers: {e}");
                }
            }
            Ok(false) => {}
            Err(e) => log::warn!("ending drains: {e}"),
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The services each device's worker runs for `paths`, by device, in service id order
/// (stages on a device for which `table` holds run no worker: [`tables`]).
fn services_by_device(
    paths: &BTreeMap<String, HostPath>,
    table: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, Vec<ServiceConfig>>, SteerError> {
    let mut out: BTreeMap<String, Vec<ServiceConfig>> = BTreeMap::new();
    for (svc, p) in paths {
        for device in p.stages.iter().filter(|d| !table(d)) {
            let chain = p.chain_of(svc, device)?;
            let mut selector = p.selector.clone();
            if p.after_nat.contains(device) {
                selector.src = None;
                selector.sport = None;
            }
            out.entry(device.clone()).or_default().push(ServiceConfig {
                id: svc.clone(),
                selector: selector_config(&selector),
                chain: chain.clone(),
            });
        }
    }
    Ok(out)
}

/// A service's selector in the worker's run-config form.
fn selector_config(s: &Selector) -> SelectorConfig {
    SelectorConfig {
        src: s.src.map(|c| c.to_string()),
        dst: s.dst.map(|c| c.to_string()),
        proto: s.proto.map(|p| ProtoSpec::Name(p.to_string())),
        sport: s.sport.map(|p| PortSpec::Range(p.to_string())),
        dport: s.dport.map(|p| PortSpec::Range(p.to_string())),
    }
}

fn metering(agent: Weak<HostAgent>) {
    while let Some(a) = agent.upgrade() {
        a.power
            .sample(&a.local.worker_processes(), &a.transcoders.processes());
        drop(a);
        std::thread::sleep(power::METER_EVERY);
    }
}

fn housekeeping(agent: Weak<HostAgent>) {
    while let Some(a) = agent.upgrade() {
        a.tick();
        drop(a);
        std::thread::sleep(HOUSEKEEPING);
    }
}

impl HostAgent {
    /// Takes transcoder `id`'s stream in transparently: UDP arriving at the host for its
    /// `output` goes to its `listen_port` (docs/descriptors.md, "The transcode function").
    fn redirect(&self, id: &str, config: &serde_json::Value) -> Result<(), VnfmError> {
        let mut st = self.steering();
        let r = Self::redirect_of(&st, id, config)?;
        st.set_redirect(id, Some(r))
            .map_err(|e| redirect_error(id, e))
    }

    /// The redirect transcoder `id` with `config` asks for, refused when it clashes
    /// with another transcoder of the host (checked before its process starts).
    fn redirect_of(
        st: &Steering,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<steering::Redirect, VnfmError> {
        let cfg = nfx_vnf::transcode::TranscodeConfig::from_function_config(config)
            .map_err(|e| VnfmError::Invalid(format!("{id}: config: {e}")))?;
        let r = steering::Redirect {
            output: cfg.output,
            listen_port: cfg.listen_port,
            source: st.redirect(id).and_then(|r| r.source),
        };
        st.check_redirect(id, &r)
            .map_err(|e| redirect_error(id, e))?;
        Ok(r)
    }
}

/// A steering error of transcoder `id`'s redirect as a VNFM error: a clash is the
/// caller's conflict, a failed rule load the host's.
fn redirect_error(id: &str, e: SteerError) -> VnfmError {
    match e {
        SteerError::Invalid(m) => VnfmError::Conflict(format!("{id}: {m}")),
        SteerError::Failed(m) => VnfmError::Unavailable(format!("{id}: redirect: {m}")),
    }
}

impl Vnfm for HostAgent {
    fn kind(&self) -> &'static str {
        "agent"
    }

    /// Deploys through the local VNFM; the answer's `detail.agent_ms` is how long the
    /// agent took (a new worker process included when one was started).
    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        let t = Instant::now();
        let mut st = if spec.function == nfx_vnf::transcode::FUNCTION {
            Self::redirect_of(&self.steering(), &spec.id, &spec.config)?;
            let st = self.transcoders.deploy(spec)?;
            if let Err(e) = self.redirect(&spec.id, &spec.config) {
                let _ = self.transcoders.destruct(&spec.id);
                return Err(e);
            }
            st
        } else if spec.function == "esp" {
            let (st, tun) = self.tunnels.deploy(spec)?;
            self.steering().set_tunnel(&spec.id, tun);
            st
        } else if self.tables.has_device(&spec.device) {
            self.tables.deploy(spec)?
        } else {
            self.local.deploy_instance(spec)?
        };
        if let Some(d) = st.detail.as_object_mut() {
            d.insert("agent_ms".into(), (t.elapsed().as_secs_f64() * 1e3).into());
        }
        Ok(st)
    }

    /// Destroys the instance; for a lost one, forgets the report (the worker is gone).
    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        let was_lost = {
            let mut lost = self.lost();
            let n = lost.len();
            lost.retain(|l| l.instance != id);
            lost.len() != n
        };
        if self.tunnels.holds(id) {
            self.steering().remove_tunnel(id);
            self.tunnels.destruct(id);
            return Ok(());
        }
        if self.transcoders.holds(id) {
            self.steering()
                .set_redirect(id, None)
                .map_err(|e| VnfmError::Unavailable(format!("{id}: redirect: {e}")))?;
            return self.transcoders.destruct(id);
        }
        if self.tables.holds(id) {
            return self.tables.destruct(id);
        }
        match self.local.destruct_instance(id) {
            Err(VnfmError::NotFound(_)) if was_lost => Ok(()),
            r => r,
        }
    }

    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        if self.tunnels.holds(id) {
            let st = self.tunnels.state(id)?;
            return match self.tunnels.config_of(id) {
                Some(c) if c == *config => Ok(st),
                _ => Err(VnfmError::Invalid(format!(
                    "tunnel endpoint {id}: its configuration comes from the service's tunnel; \
                     destroy and deploy the service to change it"
                ))),
            };
        }
        if self.tables.holds(id) {
            return self.tables.configure(id, config);
        }
        if self.transcoders.holds(id) {
            let st = self.transcoders.configure(id, config)?;
            self.redirect(id, config)?;
            return Ok(st);
        }
        self.local.configure_instance(id, config)
    }

    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        if self.transcoders.holds(old) || self.transcoders.holds(new) {
            return Err(VnfmError::Invalid(format!(
                "{old} → {new}: a transcoder holds no flow state to migrate; deploy the new \
                 one and destroy the old"
            )));
        }
        match (self.tables.holds(old), self.tables.holds(new)) {
            (true, true) => return self.tables.migrate(old, new),
            (false, false) => {}
            _ => {
                return Err(VnfmError::Invalid(format!(
                    "{old} → {new}: a table-tier instance's state moves to another table \
                     device of its host"
                )))
            }
        }
        self.local.migrate_instance(old, new, flows)
    }

    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        if self.tunnels.holds(id) {
            return self.tunnels.state(id);
        }
        if self.tables.holds(id) {
            return self.tables.state(id);
        }
        if self.transcoders.holds(id) {
            return self.transcoders.state(id);
        }
        self.local.get_instance_state(id)
    }

    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        let mut ids = self.local.list_instances()?;
        ids.extend(self.tunnels.ids());
        ids.extend(self.tables.ids());
        ids.extend(self.transcoders.ids());
        Ok(ids)
    }

    fn provision_tunnel_key(&self, id: &str, psk: &[u8]) -> Result<(), VnfmError> {
        self.tunnels.set_key(id, psk)
    }

    /// A software worker's instance only: its records name no host (firewall, elephant
    /// detector); a table-tier chain, a tunnel endpoint or a transcoder is not moved to
    /// another host.
    fn export_state(&self, id: &str) -> Result<FlowState, VnfmError> {
        self.software_only(id)?;
        self.local.export_state(id)
    }

    fn import_state(&self, id: &str, state: &FlowState) -> Result<FlowImport, VnfmError> {
        self.software_only(id)?;
        self.local.import_state(id, state)
    }
}

impl HostAgent {
    /// Refuses a flow-state move across hosts for what no software worker runs.
    fn software_only(&self, id: &str) -> Result<(), VnfmError> {
        if self.tunnels.holds(id) || self.tables.holds(id) || self.transcoders.holds(id) {
            return Err(VnfmError::Invalid(format!(
                "{id}: only a software worker's flow state moves to another host"
            )));
        }
        Ok(())
    }
}

/// `f` of the value in `m`, or what it gave the last time (`last`) while another thread
/// holds `m`: the heartbeat must not wait for a steering change, which holds the lock
/// while workers start and table chains load (seconds on a loaded host), or the
/// controller takes a busy agent for a dead one and re-places its services.
fn read_or_last<T>(m: &Mutex<T>, last: &AtomicU64, f: impl Fn(&T) -> u64) -> u64 {
    match m.try_lock() {
        Ok(g) => {
            let v = f(&g);
            last.store(v, Ordering::Relaxed);
            v
        }
        Err(std::sync::TryLockError::Poisoned(e)) => f(&e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => last.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(stages: &[(&str, &[&str])], dport: u16) -> HostPath {
        HostPath {
            after_nat: Vec::new(),
            nat_before: false,
            selector: serde_json::from_value(serde_json::json!(
                {"src": "10.9.1.2/32", "dst": "10.9.2.2/32", "proto": "udp", "dport": dport}
            ))
            .unwrap(),
            prev: None,
            next: None,
            stages: stages.iter().map(|(d, _)| d.to_string()).collect(),
            instances: stages
                .iter()
                .map(|(d, c)| (d.to_string(), c.iter().map(|i| i.to_string()).collect()))
                .collect(),
            tunnel_next: None,
            tunnel_prev: None,
        }
    }

    #[test]
    fn the_heartbeat_reads_the_last_path_count_while_steering_is_busy() {
        let (m, last) = (Mutex::new(vec![1, 2, 3]), AtomicU64::new(0));
        let len = |v: &Vec<i32>| v.len() as u64;
        assert_eq!(read_or_last(&m, &last, len), 3);
        let mut busy = m.lock().unwrap();
        busy.push(4);
        assert_eq!(read_or_last(&m, &last, len), 3, "held: the last count");
        drop(busy);
        assert_eq!(read_or_last(&m, &last, len), 4);
    }

    #[test]
    fn a_bad_power_model_is_refused_with_its_field() {
        let dir = std::env::temp_dir().join(format!("nfx-agent-power-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("agent.yaml");
        let base = "host: h1\nlisten: 127.0.0.1:0\ntoken_file: /t\nrun_dir: /r\n";
        std::fs::write(&file, format!("{base}power: {{ idle_w: 40, max_w: 20 }}\n")).unwrap();
        let e = format!("{:#}", AgentConfig::load(&file).unwrap_err());
        assert!(
            e.contains("power.max_w") || e.contains("power.idle_w"),
            "{e}"
        );
        std::fs::write(
            &file,
            format!("{base}power: {{ idle_w: 6.2, max_w: 37.4 }}\n"),
        )
        .unwrap();
        assert_eq!(AgentConfig::load(&file).unwrap().power.unwrap().max_w, 37.4);
        // Absent: the agent starts and says the host is not metered (power::tests).
        std::fs::write(&file, base).unwrap();
        assert_eq!(AgentConfig::load(&file).unwrap().power, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_service_gets_its_own_chain_and_selector_on_a_shared_worker() {
        let paths = BTreeMap::from([
            ("b-svc".to_string(), path(&[("sw0", &["fw-b"])], 5201)),
            (
                "a-svc".to_string(),
                path(&[("sw0", &["fw-a", "nat-a"]), ("sw1", &["dpi-a"])], 9000),
            ),
        ]);
        let by = services_by_device(&paths, |_| false).unwrap();
        let sw0: Vec<(&str, &[String])> = by["sw0"]
            .iter()
            .map(|s| (s.id.as_str(), s.chain.as_slice()))
            .collect();
        assert_eq!(
            sw0,
            [
                ("a-svc", &["fw-a".to_string(), "nat-a".to_string()][..]),
                ("b-svc", &["fw-b".to_string()][..])
            ]
        );
        assert_eq!(by["sw1"][0].chain, ["dpi-a"]);
        let sel = serde_json::to_value(&by["sw0"][1].selector).unwrap();
        assert_eq!(
            sel,
            serde_json::json!({"src": "10.9.1.2/32", "dst": "10.9.2.2/32", "proto": "udp", "dport": "5201"})
        );
        // A stage without its instance list is refused (its worker would run nothing
        // or, worse, every instance).
        let mut bad = path(&[("sw0", &["fw-a"])], 1);
        bad.instances.clear();
        let e =
            services_by_device(&BTreeMap::from([("s".to_string(), bad)]), |_| false).unwrap_err();
        assert!(e.to_string().contains("no chain for stage"), "{e}");
    }
}
