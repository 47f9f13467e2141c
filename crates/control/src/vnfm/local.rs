//! Local VNFM: drives real `nfx run` workers on this machine through their control
//! sockets. One worker per device runs the chain of that device's instances (in deploy
//! order), or with [`LocalVnfm::with_services`] one chain per service chosen by the
//! service's selector; deploy/destruct/configure rewrite that chain with `reconfigure`
//! (no restart),
//! migrate moves flow state with `export_state`/`import_state`, state comes from `stats`.
//! Workers whose templates name the same fanout group share their interfaces: the
//! second one starts as a standby, and migrating between them is a loss-free traffic
//! handoff (steer → drain → move state → release, see docs/migration.md).
//! What runs where is kept in a file so a restarted controller finds its workers again.

use super::state_file::{recorded_pids, StateFile};
use super::{
    FlowImport, FlowState, InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError,
    MAX_STATE_B64,
};
use nfx_proto::run_config::{FastPathConfig, IoMode, KernelStack, Ports};
use nfx_proto::{
    Client, ClientError, FanoutConfig, InstanceConfig, Reconfigure, Request, Role, RunConfig,
    ServiceConfig, ServiceSet, Stats,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a control-socket exchange or a worker start may take.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

/// The local agent's configuration file (YAML): which devices are workers and how to run them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalConfig {
    /// Directory for worker configs, sockets and the agent's state file.
    pub run_dir: PathBuf,
    /// The `nfx` binary that runs workers (default: the running executable).
    #[serde(default)]
    pub nfx_bin: Option<PathBuf>,
    /// Device id → how to start its worker.
    pub workers: BTreeMap<String, WorkerTemplate>,
}

/// Everything of an `nfx run` config except the name, socket and chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerTemplate {
    /// Network namespace the worker enters.
    #[serde(default)]
    pub netns: Option<String>,
    /// The `ports:` block of the run config (inside/outside iface and peer_mac).
    pub ports: Ports,
    /// Vector size (default: the dataplane's).
    #[serde(default)]
    pub vector: Option<usize>,
    /// Poll mode (`busy`, `interrupt`, `adaptive`; default: the dataplane's).
    #[serde(default)]
    pub poll: Option<nfx_io::PollMode>,
    /// PACKET_FANOUT group shared with other workers on the same interfaces (inside
    /// port: this id, outside: the next). At most two workers of a group run at once.
    #[serde(default)]
    pub fanout: Option<u16>,
    /// Receive ring slots per port (the run config's `ring_slots`; default: the
    /// dataplane's).
    #[serde(default)]
    pub ring_slots: Option<usize>,
    /// A table-tier device: the worker runs the kernel fast path with this many flow
    /// entries beside its chain (the run config's `fast_path.capacity`), so its settled
    /// flows are forwarded from the table and its capacity is counted in entries.
    #[serde(default)]
    pub fast_path: Option<u32>,
    /// Absolute directories the worker may read files from that a VNF configuration
    /// names (DPI `patterns`, a firewall's `rules_file`), besides its run directory:
    /// the run config's `allowed_dirs`.
    #[serde(default)]
    pub allowed_dirs: Vec<PathBuf>,
    /// Nice value the worker process starts at (e.g. [`nfx_io::priority::DATAPLANE_NICE`]
    /// so that it wins the CPU over ordinary processes sharing its cores); default: the
    /// agent's own.
    #[serde(default)]
    pub nice: Option<i32>,
    /// The run config's `kernel_stack` (default: the dataplane's, `isolate`):
    /// `external` where the agent holds standing isolation tables on the ports.
    #[serde(default)]
    pub kernel_stack: Option<KernelStack>,
    /// The run config's `io` (default: the dataplane's, `ring`): `ring-copy` gives the
    /// receive ring MTU slots, so the same memory holds far more small frames while the
    /// worker is away.
    #[serde(default)]
    pub io: Option<IoMode>,
}

impl LocalConfig {
    /// Reads the YAML file; errors name the file and the field.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        serde_yaml_ng::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: invalid local agent config: {e}", path.display()))
    }
}

/// Instances of one device's worker, in chain order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Worker {
    instances: Vec<InstanceSpec>,
    /// Dataplane node name of each instance (as `reconfigure` answered).
    nodes: Vec<String>,
    config_versions: Vec<u64>,
    pid: Option<u32>,
    /// Order in which workers joined their fanout group (larger = later).
    #[serde(default)]
    joined: u64,
    /// The worker this one handed its traffic to (it is drained and holds).
    #[serde(default)]
    handed_to: Option<String>,
    /// Flows and bytes each of its instances moved in that handoff.
    #[serde(default)]
    moved: BTreeMap<String, MigrateReport>,
    /// The services it classifies into (with [`LocalVnfm::with_services`]).
    #[serde(default)]
    services: Vec<ServiceConfig>,
}

/// What a traffic handoff between two workers did, phase by phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HandoffReport {
    /// Flow entries moved over all nodes.
    pub flows: u64,
    /// Bytes of exported state over all nodes.
    pub bytes: u64,
    /// Frames the old worker processed while draining.
    pub drained_packets: u64,
    /// Time to point the fanout groups at the new worker, ms.
    pub steer_ms: f64,
    /// Time for the old worker to empty its sockets, ms.
    pub drain_ms: f64,
    /// Time to export from the old and import into the new worker, ms.
    pub state_ms: f64,
    /// Time to release the new worker, ms.
    pub release_ms: f64,
    /// Whole handoff, ms (how long the new worker held traffic).
    pub total_ms: f64,
    /// Per old instance: what its node moved.
    pub per_instance: BTreeMap<String, MigrateReport>,
}

/// A worker whose process ended without being stopped (see [`LocalVnfm::reap_dead`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadWorker {
    /// Its device.
    pub device: String,
    /// Its process id.
    pub pid: u32,
    /// The instances it ran (now lost).
    pub instances: Vec<String>,
    /// How it ended, when this VNFM started it (`signal: 9 (SIGKILL)`, ...).
    pub exit: Option<String>,
}

/// A running worker process (see [`LocalVnfm::worker_processes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerProcess {
    /// Its device.
    pub device: String,
    /// Its process id.
    pub pid: u32,
    /// Its control socket.
    pub socket: PathBuf,
    /// Its instances: `(instance id, dataplane node name)`, in chain order.
    pub instances: Vec<(String, String)>,
}

/// The local VNFM.
pub struct LocalVnfm {
    cfg: LocalConfig,
    workers: Mutex<BTreeMap<String, Worker>>,
    /// Exit status of every worker this VNFM started, by pid, once it ended.
    exits: std::sync::Arc<Mutex<BTreeMap<u32, String>>>,
    /// Where `workers` is recorded, so that a restarted agent finds its workers.
    state: Mutex<StateFile>,
    /// Workers run the services form (a classifier in front of per-service chains, set
    /// by [`LocalVnfm::set_services`]) instead of one chain of every instance.
    classify: bool,
    /// The open control connection to each worker, by device (see `ask_kept`).
    kept: Mutex<BTreeMap<String, Client>>,
}

impl LocalVnfm {
    /// Prepares the run directory and reloads the workers recorded there.
    pub fn new(cfg: LocalConfig) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&cfg.run_dir)
            .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.run_dir.display()))?;
        let (state, workers) = StateFile::open_checked(&cfg.run_dir, check_workers);
        Ok(LocalVnfm {
            cfg,
            workers: Mutex::new(workers.unwrap_or_default()),
            exits: Default::default(),
            state: Mutex::new(state),
            classify: false,
            kept: Mutex::default(),
        })
    }

    /// Workers run the services form: each worker classifies frames by the selectors of
    /// the services [`LocalVnfm::set_services`] gives it and runs each service's own
    /// chain, so services sharing a device never cross each other's functions; a
    /// worker with no service forwards nothing. Without it (a VNFM with no steering)
    /// each worker runs all its instances as one chain on every frame.
    pub fn with_services(mut self) -> Self {
        self.classify = true;
        self
    }

    /// Makes `services` the services worker `device` classifies into (services form; a
    /// service whose chain names an instance the worker does not run is left out, so it
    /// forwards nothing). Unchanged services keep their state and counters.
    pub fn set_services(
        &self,
        device: &str,
        services: Vec<ServiceConfig>,
    ) -> Result<(), VnfmError> {
        let mut g = self.lock();
        let Some(mut w) = g.get(device).cloned() else {
            return if services.is_empty() {
                Ok(())
            } else {
                Err(VnfmError::NotFound(format!(
                    "device {device:?} runs no instance for services {:?}",
                    services.iter().map(|s| &s.id).collect::<Vec<_>>()
                )))
            };
        };
        if w.services == services {
            return Ok(());
        }
        w.services = services;
        self.push_chain(device, &mut w, &g)?;
        g.insert(device.to_string(), w);
        self.save(&g)
    }

    /// The services every running worker classifies into, by device.
    pub fn worker_services(&self) -> BTreeMap<String, Vec<ServiceConfig>> {
        self.lock()
            .iter()
            .filter(|(_, w)| w.pid.is_some())
            .map(|(d, w)| (d.clone(), w.services.clone()))
            .collect()
    }

    /// What a worker runs, as the run config's and `reconfigure`'s fields: `chain`, or
    /// (services form) `services` and `instances`.
    fn worker_body(&self, w: &Worker) -> Reconfigure {
        let config = |i: &InstanceSpec| InstanceConfig::new(&i.function, &i.config);
        if !self.classify {
            let chain = w.instances.iter().map(|i| config(i).chain_entry());
            return Reconfigure::chain(chain.collect());
        }
        let instances: BTreeMap<String, InstanceConfig> = w
            .instances
            .iter()
            .map(|i| (i.id.clone(), config(i)))
            .collect();
        let services: Vec<ServiceConfig> = w
            .services
            .iter()
            .filter(|s| s.chain.iter().all(|i| instances.contains_key(i.as_str())))
            .cloned()
            .collect();
        Reconfigure::services(ServiceSet {
            services,
            instances,
        })
    }

    /// Finds the workers whose process has ended although nobody stopped it (killed,
    /// crashed): forgets them, removes what they left behind — the kernel-isolation
    /// tables of their ports (nftables, in the worker's namespace) and their control
    /// socket — and returns them with the instances they ran, which are lost.
    pub fn reap_dead(&self) -> Vec<DeadWorker> {
        let mut g = self.lock();
        let dead: Vec<(String, u32)> = g
            .iter()
            .filter_map(|(d, w)| w.pid.filter(|p| !alive(*p)).map(|p| (d.clone(), p)))
            .collect();
        if dead.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (device, pid) in dead {
            let Some(w) = g.remove(&device) else { continue };
            let _ = std::fs::remove_file(self.socket(&device));
            let netns = self.cfg.workers.get(&device).and_then(|t| t.netns.clone());
            let cleaned = std::thread::spawn(move || -> std::io::Result<()> {
                if let Some(ns) = netns {
                    nfx_io::netns::enter_netns(&ns)?;
                }
                nfx_io::isolate::remove_stale()
            })
            .join();
            if let Ok(Err(e)) = cleaned {
                log::warn!("worker {device} (pid {pid}) ended; removing its isolation tables: {e}");
            }
            let exit = self
                .exits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&pid);
            out.push(DeadWorker {
                device,
                pid,
                instances: w.instances.iter().map(|i| i.id.clone()).collect(),
                exit,
            });
        }
        if let Err(e) = self.save(&g) {
            log::warn!("recording dead workers: {e}");
        }
        out
    }

    /// The running workers: each one's device and control socket.
    pub fn running_workers(&self) -> Vec<(String, PathBuf)> {
        self.lock()
            .iter()
            .filter(|(_, w)| w.pid.is_some())
            .map(|(d, _)| (d.clone(), self.socket(d)))
            .collect()
    }

    /// The running workers' processes: device, pid, control socket and, per instance,
    /// its id and its dataplane node name (what the power agent meters and splits).
    pub fn worker_processes(&self) -> Vec<WorkerProcess> {
        self.lock()
            .iter()
            .filter_map(|(d, w)| {
                let pid = w.pid?;
                let instances = w
                    .instances
                    .iter()
                    .enumerate()
                    .map(|(k, i)| {
                        let node = w.nodes.get(k).cloned().unwrap_or_else(|| i.id.clone());
                        (i.id.clone(), node)
                    })
                    .collect();
                Some(WorkerProcess {
                    device: d.clone(),
                    pid,
                    socket: self.socket(d),
                    instances,
                })
            })
            .collect()
    }

    /// One exchange with `device`'s worker on the client kept from the last one (the
    /// worker serves any number of requests per connection): a deploy on a running
    /// worker then costs no connect, accept and serving thread. The client replaces a
    /// connection whose worker has gone; a client that could not reach its worker is
    /// not kept.
    fn ask_kept<T: DeserializeOwned>(&self, device: &str, req: &Request) -> Result<T, VnfmError> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut client = kept
            .remove(device)
            .unwrap_or_else(|| worker_client(&self.socket(device)));
        let answer = client.call(req);
        if !matches!(&answer, Err(e) if !e.is_refusal()) {
            kept.insert(device.to_string(), client);
        }
        answer.map_err(vnfm_error)
    }

    fn socket(&self, device: &str) -> PathBuf {
        self.cfg.run_dir.join(format!("{device}.sock"))
    }

    fn save(&self, w: &BTreeMap<String, Worker>) -> Result<(), VnfmError> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .save(w)
            .map_err(|e| VnfmError::Unavailable(format!("{}: {e}", self.cfg.run_dir.display())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Worker>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Running workers (other than `device`) in the fanout group of `device`'s template,
    /// oldest first.
    fn group_peers(&self, w: &BTreeMap<String, Worker>, device: &str) -> Vec<String> {
        let group = self.cfg.workers.get(device).and_then(|t| t.fanout);
        let mut peers: Vec<(u64, String)> = w
            .iter()
            .filter(|(d, wk)| {
                group.is_some()
                    && d.as_str() != device
                    && wk.pid.is_some()
                    && self.cfg.workers.get(d.as_str()).and_then(|t| t.fanout) == group
            })
            .map(|(d, wk)| (wk.joined, d.clone()))
            .collect();
        peers.sort();
        peers.into_iter().map(|(_, d)| d).collect()
    }

    /// Starts the device's worker with `chain` and waits until its socket answers. In a
    /// fanout group that already has a running worker it starts as a standby, after the
    /// group's program was pinned to that worker (member 0), so joining moves nothing.
    fn start_worker(
        &self,
        device: &str,
        body: Reconfigure,
        peers: &[String],
    ) -> Result<u32, VnfmError> {
        let t = self.cfg.workers.get(device).ok_or_else(|| {
            VnfmError::NotFound(format!("device {device:?} is not a local worker"))
        })?;
        let sock = self.socket(device);
        let _ = std::fs::remove_file(&sock);
        let mut rc = RunConfig::new(device, t.ports.clone()).running(body);
        rc.control_socket = Some(sock.clone());
        rc.netns = t.netns.clone();
        rc.vector = t.vector.unwrap_or(rc.vector);
        rc.poll = t.poll.unwrap_or(rc.poll);
        rc.ring_slots = t.ring_slots;
        rc.kernel_stack = t.kernel_stack.unwrap_or(rc.kernel_stack);
        rc.io = t.io.unwrap_or(rc.io);
        rc.fast_path = t.fast_path.map(|capacity| FastPathConfig { capacity });
        rc.allowed_dirs = t.allowed_dirs.clone();
        rc.fanout = t.fanout.map(|group| FanoutConfig {
            group,
            role: Role::Active,
        });
        let file = self.cfg.run_dir.join(format!("{device}.yaml"));
        rc.validate(&file.display().to_string())
            .map_err(|e| VnfmError::Invalid(e.to_string()))?;
        if let Some(f) = &mut rc.fanout {
            if peers.len() >= 2 {
                return Err(VnfmError::Conflict(format!(
                    "fanout group {} already has two workers ({}); destroy one first",
                    f.group,
                    peers.join(", ")
                )));
            }
            if let Some(active) = peers.first() {
                ask(&self.socket(active), |c| c.steer(0))?;
                f.role = Role::Standby;
            }
        }
        let yaml = serde_yaml_ng::to_string(&rc).map_err(unavailable)?;
        std::fs::write(&file, yaml).map_err(unavailable)?;
        let bin = match &self.cfg.nfx_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(unavailable)?,
        };
        let log = std::fs::File::create(self.cfg.run_dir.join(format!("{device}.log")))
            .map_err(unavailable)?;
        // The worker says when it is ready (sd_notify's `READY=1` once its control
        // socket answers); a run directory whose path is too long for a socket address
        // falls back to probing the control socket.
        let notify =
            nfx_io::notify::ReadyListener::bind(&self.cfg.run_dir.join(format!("{device}.ready")))
                .inspect_err(|e| {
                    log::debug!("worker for {device}: no readiness socket ({e}); probing")
                })
                .ok();
        let mut cmd = std::process::Command::new(&bin);
        match &notify {
            Some(n) => cmd.env(nfx_io::notify::NOTIFY_SOCKET, n.path()),
            None => cmd.env_remove(nfx_io::notify::NOTIFY_SOCKET),
        };
        cmd.arg("run")
            .arg("--config")
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(unavailable)?)
            .stderr(log);
        if let Some(n) = t.nice {
            nfx_io::priority::start_at_nice(&mut cmd, n);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| VnfmError::Unavailable(format!("{}: {e}", bin.display())))?;
        if let Some(n) = t.nice {
            if let Err(e) = nfx_io::priority::check_nice(child.id(), n) {
                log::warn!("worker for {device} {e}");
            }
        }
        let start = Instant::now();
        loop {
            let ready = match &notify {
                // Short slices: a worker that exits early is noticed within one.
                Some(n) => n
                    .wait(Duration::from_millis(20))
                    .unwrap_or_else(|_| probe(&sock)),
                None => probe(&sock),
            };
            if ready {
                let pid = child.id();
                let exits = self.exits.clone();
                std::thread::spawn(move || {
                    if let Ok(st) = child.wait() {
                        let mut e = exits.lock().unwrap_or_else(|e| e.into_inner());
                        // Bounded: entries are taken by `reap_dead`; stopped workers' stay.
                        if e.len() >= 1024 {
                            e.pop_first();
                        }
                        e.insert(pid, st.to_string());
                    }
                });
                return Ok(pid);
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(VnfmError::Unavailable(format!(
                    "worker for {device} exited with {status}; see {}",
                    self.cfg.run_dir.join(format!("{device}.log")).display()
                )));
            }
            if start.elapsed() > SOCKET_TIMEOUT {
                let _ = child.kill();
                return Err(VnfmError::Unavailable(format!(
                    "worker for {device} did not open {} within {SOCKET_TIMEOUT:?}",
                    sock.display()
                )));
            }
        }
    }

    /// Pushes the worker's chain (starting the worker if needed; `all` is every worker,
    /// for its fanout peers); records the node names the dataplane gave and returns
    /// what the worker reported right after the change: on a running worker the
    /// instances the change built, on a new one every node.
    fn push_chain(
        &self,
        device: &str,
        w: &mut Worker,
        all: &BTreeMap<String, Worker>,
    ) -> Result<WorkerReport, VnfmError> {
        let body = self.worker_body(w);
        let ids = || w.instances.iter().map(|i| i.id.clone()).collect();
        if w.pid.is_none() {
            let peers = self.group_peers(all, device);
            w.pid = Some(self.start_worker(device, body, &peers)?);
            w.joined = all.values().map(|x| x.joined).max().unwrap_or(0) + 1;
            let r: Stats = self.ask_kept(device, &Request::Stats {})?;
            w.nodes = if self.classify {
                ids()
            } else {
                vnf_node_names(&r, w.instances.len())
            };
            return Ok(WorkerReport::from(r));
        }
        let r: nfx_proto::Reconfigured = self.ask_kept(device, &Request::Reconfigure(body))?;
        w.nodes = if self.classify { ids() } else { r.nodes };
        Ok(WorkerReport {
            name: r.name,
            cpu_pct: r.cpu_pct,
            nodes: r.built,
        })
    }

    /// `report` when it has node `node`; otherwise (a configuration that changed
    /// nothing rebuilds no node) the worker's whole stats document.
    fn with_node(
        &self,
        device: &str,
        report: WorkerReport,
        node: Option<&String>,
    ) -> Result<WorkerReport, VnfmError> {
        if node.is_none_or(|n| report.nodes.iter().any(|x| &x.name == n)) {
            return Ok(report);
        }
        let r: Stats = self.ask_kept(device, &Request::Stats {})?;
        Ok(WorkerReport::from(r))
    }

    /// Copies the flow state of node `onode` of worker `od` into node `nnode` of worker
    /// `nd`; returns (flows added, bytes).
    fn move_state(
        &self,
        od: &str,
        onode: &str,
        nd: &str,
        nnode: &str,
    ) -> Result<(u64, u64), VnfmError> {
        let out = ask(&self.socket(od), |c| c.export_state_b64(onode))?;
        let flows = ask(&self.socket(nd), |c| {
            c.import_state_b64(nnode, out.data_b64)
        })?;
        Ok((flows, out.bytes))
    }

    /// Loss-free traffic handoff from worker `od` to the standby worker `nd` of the same
    /// fanout group (OpenNF's loss-free move): steer the group to `nd`, which holds what
    /// it receives; `od` drains its sockets and stops; the state of every node moves
    /// (all or nothing per node); `nd` releases and processes the held frames in order.
    /// Both workers must run the same functions in the same order. If a step after the
    /// steer fails, traffic is steered back to `od`, which resumes.
    pub fn handoff(&self, od: &str, nd: &str) -> Result<HandoffReport, VnfmError> {
        let mut g = self.lock();
        let (ow, nw) = match (g.get(od), g.get(nd)) {
            (Some(o), Some(n)) => (o.clone(), n.clone()),
            _ => return Err(VnfmError::NotFound(format!("worker {od:?} or {nd:?}"))),
        };
        let funcs = |w: &Worker| -> Vec<String> {
            w.instances.iter().map(|i| i.function.clone()).collect()
        };
        if funcs(&ow) != funcs(&nw)
            || ow.nodes.len() != ow.instances.len()
            || nw.nodes.len() != nw.instances.len()
        {
            return Err(VnfmError::Invalid(format!(
                "a handoff moves all traffic of worker {od} ({:?}) to {nd} ({:?}): deploy the same functions in the same order on {nd} first",
                funcs(&ow),
                funcs(&nw)
            )));
        }
        if ow.handed_to.is_some() {
            return Err(VnfmError::Conflict(format!(
                "worker {od} already handed its traffic off"
            )));
        }
        let peers = self.group_peers(&g, nd);
        let member = peers
            .iter()
            .filter(|p| g[p.as_str()].joined < nw.joined)
            .count();
        let (osock, nsock) = (self.socket(od), self.socket(nd));
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let start = Instant::now();
        let mut r = HandoffReport::default();
        let member = u32::try_from(member)
            .map_err(|_| VnfmError::Invalid(format!("fanout member {member} out of range")))?;
        ask(&nsock, Client::hold)?;
        ask(&nsock, |c| c.steer(member))?;
        r.steer_ms = ms(start);
        let moved = (|| -> Result<(), VnfmError> {
            let t = Instant::now();
            r.drained_packets = ask(&osock, Client::drain)?.packets;
            r.drain_ms = ms(t);
            let t = Instant::now();
            for (i, inst) in ow.instances.iter().enumerate() {
                let (flows, bytes) = self.move_state(od, &ow.nodes[i], nd, &nw.nodes[i])?;
                r.flows += flows;
                r.bytes += bytes;
                r.per_instance.insert(
                    inst.id.clone(),
                    MigrateReport {
                        flows,
                        bytes,
                        held_ms: None,
                    },
                );
            }
            r.state_ms = ms(t);
            Ok(())
        })();
        if let Err(e) = moved {
            let back = ask(&nsock, |c| c.steer(1 - member.min(1)))
                .and_then(|_| ask(&osock, Client::release));
            return Err(VnfmError::Unavailable(format!(
                "handoff {od} -> {nd} failed ({e}); traffic {}",
                match back {
                    Ok(_) => format!("steered back to {od}"),
                    Err(b) => format!("could not be steered back: {b}"),
                }
            )));
        }
        let t = Instant::now();
        ask(&nsock, Client::release)?;
        r.release_ms = ms(t);
        r.total_ms = ms(start);
        if let Some(w) = g.get_mut(od) {
            w.handed_to = Some(nd.to_string());
            w.moved = r.per_instance.clone();
        }
        // The new worker carries traffic now (also when this handoff undoes an earlier
        // one in the other direction): it may hand off again later.
        if let Some(w) = g.get_mut(nd) {
            w.handed_to = None;
            w.moved.clear();
        }
        self.save(&g)?;
        Ok(r)
    }

    fn find(w: &BTreeMap<String, Worker>, id: &str) -> Result<(String, usize), VnfmError> {
        w.iter()
            .find_map(|(d, wk)| {
                wk.instances
                    .iter()
                    .position(|i| i.id == id)
                    .map(|p| (d.clone(), p))
            })
            .ok_or_else(|| VnfmError::NotFound(format!("instance {id:?}")))
    }
}

/// Whether a recorded set of workers holds together: each device a plain file name (its
/// control socket is `run_dir/<device>.sock`), per worker one configuration version per
/// instance and at most one node name per instance (what every lookup by instance
/// position relies on).
fn check_workers(workers: &BTreeMap<String, Worker>) -> Result<(), String> {
    for (device, w) in workers {
        if device.is_empty() || device.starts_with('.') || device.contains(['/', '\0']) {
            return Err(format!("worker {device:?}: not a device name"));
        }
        if w.config_versions.len() != w.instances.len() || w.nodes.len() > w.instances.len() {
            return Err(format!(
                "worker {device:?}: {} instances, {} configuration versions, {} node names",
                w.instances.len(),
                w.config_versions.len(),
                w.nodes.len()
            ));
        }
    }
    Ok(())
}

/// VNF node names from a stats answer: every node except the built-in `parse` and `output`.
fn vnf_node_names(stats: &Stats, n: usize) -> Vec<String> {
    stats
        .nodes
        .iter()
        .map(|x| x.name.as_str())
        .filter(|s| *s != "parse" && *s != "output")
        .take(n)
        .map(String::from)
        .collect()
}

fn unavailable(e: impl std::fmt::Display) -> VnfmError {
    VnfmError::Unavailable(e.to_string())
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.starts_with(" Z"))
        })
        .unwrap_or(false)
}

/// Stops every worker recorded in `run_dir`: asks each to shut down, waits up to 3 s,
/// then kills what is left. For tools and tests that must leave no dataplane process
/// behind when the agent did not get to destroy its instances.
pub fn stop_recorded_workers(run_dir: &Path) {
    let pids = recorded_pids(run_dir);
    for (dev, _) in &pids {
        let _ = ask(&run_dir.join(format!("{dev}.sock")), Client::shutdown);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while pids.iter().any(|(_, p)| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, pid) in pids {
        if alive(pid) {
            if let Ok(p) = libc::pid_t::try_from(pid) {
                // SAFETY: kill(2) on a pid this agent started, with a valid signal.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
    }
}

/// What an instance's state is taken from: its worker's name and CPU and the counters
/// of some of its nodes (a `reconfigure` answer's built nodes, or every node of a stats
/// document).
struct WorkerReport {
    name: String,
    cpu_pct: f64,
    nodes: Vec<nfx_proto::NodeStats>,
}

impl From<Stats> for WorkerReport {
    fn from(s: Stats) -> Self {
        WorkerReport {
            cpu_pct: s.workers.iter().map(|w| w.cpu_pct).sum(),
            name: s.name,
            nodes: s.nodes,
        }
    }
}

/// An instance's state from its worker's report (`node`: its node's name there).
fn instance_state(
    spec: &InstanceSpec,
    node: Option<&String>,
    version: u64,
    stats: &WorkerReport,
) -> InstanceState {
    let name = node.map(String::as_str).unwrap_or_default();
    let n = stats
        .nodes
        .iter()
        .find(|x| !name.is_empty() && x.name == name);
    let flows = ["flows", "entries", "connections", "mappings"]
        .iter()
        .find_map(|k| n.and_then(|n| n.stats[k].as_u64()))
        .unwrap_or(0);
    InstanceState {
        id: spec.id.clone(),
        function: spec.function.clone(),
        device: spec.device.clone(),
        status: "running".into(),
        config_version: version,
        flows,
        packets: n.map_or(0, |n| n.packets),
        cpu_pct: stats.cpu_pct,
        detail: serde_json::json!({ "node": n, "worker": stats.name }),
    }
}

/// Whether a starting worker's control socket answers, after a short pause (a worker's
/// start is on the deploy's critical path).
fn probe(sock: &Path) -> bool {
    std::thread::sleep(Duration::from_millis(2));
    ask(sock, Client::stats).is_ok()
}

/// A client of a worker's control socket, with the exchange timeouts set.
fn worker_client(sock: &Path) -> Client {
    Client::lazy(sock).with_timeout(SOCKET_TIMEOUT)
}

/// A worker's refusal is the request's fault (`Invalid`); anything else means the
/// worker could not be reached or did not answer properly (`Unavailable`).
fn vnfm_error(e: ClientError) -> VnfmError {
    match e {
        ClientError::Refused { socket, message } => {
            VnfmError::Invalid(format!("worker {}: {message}", socket.display()))
        }
        other => VnfmError::Unavailable(other.to_string()),
    }
}

/// One exchange `call` with a worker's control socket, on a new connection.
fn ask<T>(
    sock: &Path,
    call: impl FnOnce(&mut Client) -> Result<T, ClientError>,
) -> Result<T, VnfmError> {
    call(&mut worker_client(sock)).map_err(vnfm_error)
}

impl Vnfm for LocalVnfm {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        if !self.cfg.workers.contains_key(&spec.device) {
            return Err(VnfmError::NotFound(format!(
                "device {:?} is not a local worker",
                spec.device
            )));
        }
        let mut g = self.lock();
        if let Ok((d, p)) = Self::find(&g, &spec.id) {
            return if g[&d].instances[p] == *spec {
                drop(g);
                self.get_instance_state(&spec.id)
            } else {
                Err(VnfmError::Conflict(format!(
                    "instance {:?} exists with another spec",
                    spec.id
                )))
            };
        }
        let mut w = g.get(&spec.device).cloned().unwrap_or_default();
        w.instances.push(spec.clone());
        w.config_versions.push(1);
        let stats = self.push_chain(&spec.device, &mut w, &g)?;
        let state = instance_state(spec, w.nodes.last(), 1, &stats);
        g.insert(spec.device.clone(), w);
        self.save(&g)?;
        Ok(state)
    }

    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        let mut g = self.lock();
        let (d, p) = Self::find(&g, id)?;
        let mut w = g[&d].clone();
        w.instances.remove(p);
        w.config_versions.remove(p);
        if w.instances.is_empty() {
            let sock = self.socket(&d);
            self.kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&d);
            if ask(&sock, Client::shutdown).is_ok() {
                // Until the process has ended, not only its control socket: it removes
                // its ports' isolation tables on the way out, and a worker started next
                // on the same interfaces would find them held by a live process.
                let running = || match w.pid {
                    Some(pid) => alive(pid),
                    None => ask(&sock, Client::stats).is_ok(),
                };
                let start = Instant::now();
                while running() && start.elapsed() < SOCKET_TIMEOUT {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            g.remove(&d);
        } else {
            self.push_chain(&d, &mut w, &g)?;
            g.insert(d, w);
        }
        self.save(&g)
    }

    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        let mut g = self.lock();
        let (d, p) = Self::find(&g, id)?;
        let mut w = g[&d].clone();
        w.instances[p].config = config.clone();
        w.config_versions[p] = w.config_versions[p].saturating_add(1);
        let report = self.push_chain(&d, &mut w, &g)?;
        let stats = self.with_node(&d, report, w.nodes.get(p))?;
        let state = instance_state(
            &w.instances[p],
            w.nodes.get(p),
            w.config_versions[p],
            &stats,
        );
        g.insert(d, w);
        self.save(&g)?;
        Ok(state)
    }

    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        if !flows.is_empty() {
            return Err(VnfmError::Invalid(
                "the local dataplane migrates a node's whole flow table; pass no flow list".into(),
            ));
        }
        let g = self.lock();
        let (od, op) = Self::find(&g, old)?;
        let (nd, np) = Self::find(&g, new)?;
        if let Some(done) = g[&od].moved.get(old) {
            if g[&od].handed_to.as_deref() == Some(nd.as_str()) {
                return Ok(*done);
            }
        }
        let group = |d: &str| self.cfg.workers.get(d).and_then(|t| t.fanout);
        if od != nd && group(&od).is_some() && group(&od) == group(&nd) {
            drop(g);
            let r = self.handoff(&od, &nd)?;
            log::info!("handoff {od} -> {nd}: {r:?}");
            let moved = r.per_instance.get(old).copied().ok_or_else(|| {
                VnfmError::Unavailable(format!("handoff {od} -> {nd} moved nothing for {old}"))
            })?;
            return Ok(MigrateReport {
                held_ms: Some(r.total_ms),
                ..moved
            });
        }
        let (onode, nnode) = (
            g[&od].nodes.get(op).cloned().unwrap_or_default(),
            g[&nd].nodes.get(np).cloned().unwrap_or_default(),
        );
        drop(g);
        let (flows, bytes) = self.move_state(&od, &onode, &nd, &nnode)?;
        Ok(MigrateReport {
            flows,
            bytes,
            held_ms: None,
        })
    }

    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let g = self.lock();
        let (d, p) = Self::find(&g, id)?;
        let w = &g[&d];
        let spec = w.instances[p].clone();
        let node = w.nodes.get(p).cloned();
        let version = w.config_versions[p];
        drop(g);
        let stats = ask(&self.socket(&d), Client::stats)?;
        Ok(instance_state(&spec, node.as_ref(), version, &stats.into()))
    }

    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        Ok(self
            .lock()
            .values()
            .flat_map(|w| w.instances.iter().map(|i| i.id.clone()))
            .collect())
    }

    /// The `export_state` of the instance's node in its worker (refused above
    /// [`MAX_STATE_B64`]).
    fn export_state(&self, id: &str) -> Result<FlowState, VnfmError> {
        let (device, node, function) = self.node_of(id)?;
        let out = ask(&self.socket(&device), |c| c.export_state_b64(&node))?;
        if out.data_b64.len() > MAX_STATE_B64 {
            return Err(VnfmError::Conflict(format!(
                "{id}: its flow state ({} bytes) is larger than a move across hosts carries \
                 ({MAX_STATE_B64} base64 characters)",
                out.bytes
            )));
        }
        Ok(FlowState {
            instance: id.to_string(),
            function,
            bytes: out.bytes,
            data_b64: out.data_b64,
        })
    }

    /// `import_state` into the instance's node; the worker checks every record against
    /// the node's own configuration and skips the flows it holds already.
    fn import_state(&self, id: &str, state: &FlowState) -> Result<FlowImport, VnfmError> {
        let (device, node, function) = self.node_of(id)?;
        if function != state.function {
            return Err(VnfmError::Invalid(format!(
                "cannot move {} state of {} into {id}, a {function} instance",
                state.function, state.instance
            )));
        }
        if state.data_b64.len() > MAX_STATE_B64 {
            return Err(VnfmError::Invalid(format!(
                "flow state of {} is larger than {MAX_STATE_B64} base64 characters",
                state.instance
            )));
        }
        let data_b64 = if function == "firewall" {
            windows_behind(&state.data_b64)?
        } else {
            state.data_b64.clone()
        };
        let flows = ask(&self.socket(&device), |c| {
            c.import_state_b64(&node, data_b64)
        })?;
        Ok(FlowImport { flows })
    }
}

/// A firewall's exported blob with its TCP connections marked as fallen behind
/// ([`nfx_vnf::firewall::mark_windows_behind`]): a copy from another host is taken while
/// the old instance still forwards, so the windows it holds lag behind the connections
/// by the time their segments reach this one, and would drop them as out of window.
fn windows_behind(data_b64: &str) -> Result<String, VnfmError> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut blob = b64
        .decode(data_b64)
        .map_err(|e| VnfmError::Invalid(format!("flow state is not base64: {e}")))?;
    nfx_vnf::firewall::mark_windows_behind(&mut blob)
        .map_err(|e| VnfmError::Invalid(format!("flow state: {e}")))?;
    Ok(b64.encode(blob))
}

impl LocalVnfm {
    /// The device, worker node name and function of instance `id`.
    fn node_of(&self, id: &str) -> Result<(String, String, String), VnfmError> {
        let g = self.lock();
        let (d, p) = Self::find(&g, id)?;
        let w = &g[&d];
        let node = w.nodes.get(p).cloned().ok_or_else(|| {
            VnfmError::Unavailable(format!("{id}: its worker on {d} names no node for it"))
        })?;
        Ok((d, node, w.instances[p].function.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    #[test]
    fn node_specs_and_names() {
        let s = InstanceSpec {
            id: "i".into(),
            function: "nat".into(),
            device: "d".into(),
            config: serde_json::Value::Null,
            throughput_gbps: 0.0,
            capacity: 0.0,
        };
        assert_eq!(
            InstanceConfig::new(&s.function, &s.config).chain_entry(),
            serde_json::json!({"nat": {}})
        );
        let st = Stats {
            nodes: ["parse", "firewall", "nat", "output"]
                .map(|name| nfx_proto::NodeStats {
                    name: name.into(),
                    ..Default::default()
                })
                .into(),
            ..Stats::default()
        };
        assert_eq!(vnf_node_names(&st, 2), vec!["firewall", "nat"]);
    }

    /// A worker's two ports, as a local agent config writes them.
    const PORTS: &str = "{ inside: { iface: a, peer_mac: '02:00:00:00:00:01' }, outside: { iface: b, peer_mac: '02:00:00:00:00:02' } }";

    fn vnfm_with(dir: &Path, state: serde_json::Value) -> LocalVnfm {
        std::fs::create_dir_all(dir).unwrap();
        StateFile::open::<serde_json::Value>(dir)
            .0
            .save(&state)
            .unwrap();
        let cfg: LocalConfig = serde_yaml_ng::from_str(&format!(
            "run_dir: {}\nworkers:\n  w0: {{ ports: {PORTS}, fanout: 7 }}\n  w1: {{ ports: {PORTS}, fanout: 7 }}\n  w2: {{ ports: {PORTS}, fanout: 7 }}\n  x: {{ ports: {PORTS} }}\n",
            dir.display()
        ))
        .unwrap();
        LocalVnfm::new(cfg).unwrap()
    }

    fn inst(id: &str, function: &str, device: &str) -> serde_json::Value {
        serde_json::json!({"id": id, "function": function, "device": device})
    }

    /// A whole record with fewer configuration versions than instances (or more node
    /// names), or one naming a device that is a path, counts as a broken slot: the other
    /// slot's record holds, and no lookup by instance position indexes past the record
    /// (the `agent_state` fuzz target's inputs).
    #[test]
    fn a_record_that_does_not_hold_together_is_skipped_for_the_older_one() {
        let dir = std::env::temp_dir().join(format!("nfx-local-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let good = serde_json::json!({"x": {"instances": [inst("keep", "nat", "x")], "nodes": ["nat"], "config_versions": [1], "pid": null}});
        for bad in [
            serde_json::json!({"x": {"instances": [inst("a", "nat", "x"), inst("b", "nat", "x")], "nodes": [], "config_versions": [1], "pid": null}}),
            serde_json::json!({"x": {"instances": [inst("a", "nat", "x")], "nodes": ["n", "m"], "config_versions": [1], "pid": null}}),
            serde_json::json!({"/run/x": {"instances": [inst("a", "nat", "x")], "nodes": [], "config_versions": [1], "pid": 1}}),
        ] {
            let v = vnfm_with(&dir, good.clone());
            v.state.lock().unwrap().save(&bad).unwrap();
            drop(v);
            let v = LocalVnfm::new(LocalConfig {
                run_dir: dir.clone(),
                nfx_bin: None,
                workers: BTreeMap::new(),
            })
            .unwrap();
            assert_eq!(v.list_instances().unwrap(), ["keep"], "{bad}");
            assert!(v.get_instance_state("keep").is_err());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn fanout_peers_are_running_workers_of_the_group_oldest_first() {
        let dir = std::env::temp_dir().join(format!("nfx-local-peers-{}", std::process::id()));
        let v = vnfm_with(
            &dir,
            serde_json::json!({
                "w1": {"instances": [inst("b", "nat", "w1")], "nodes": ["nat"], "config_versions": [1], "pid": 11, "joined": 2},
                "w0": {"instances": [inst("a", "nat", "w0")], "nodes": ["nat"], "config_versions": [1], "pid": 10, "joined": 1},
                "w2": {"instances": [], "nodes": [], "config_versions": [], "pid": null, "joined": 3},
                "x": {"instances": [inst("c", "nat", "x")], "nodes": ["nat"], "config_versions": [1], "pid": 12, "joined": 4}
            }),
        );
        let g = v.lock();
        assert_eq!(v.group_peers(&g, "w2"), ["w0", "w1"]);
        assert_eq!(v.group_peers(&g, "w0"), ["w1"]);
        assert!(v.group_peers(&g, "x").is_empty(), "x has no fanout group");
        drop(g);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn handoff_checks_workers_before_touching_traffic() {
        let dir = std::env::temp_dir().join(format!("nfx-local-handoff-{}", std::process::id()));
        let v = vnfm_with(
            &dir,
            serde_json::json!({
                "w0": {"instances": [inst("a", "firewall", "w0"), inst("a2", "nat", "w0")], "nodes": ["firewall", "nat"], "config_versions": [1, 1], "pid": 10, "joined": 1},
                "w1": {"instances": [inst("b", "nat", "w1")], "nodes": ["nat"], "config_versions": [1], "pid": 11, "joined": 2},
                "w2": {"instances": [inst("c", "firewall", "w2"), inst("c2", "nat", "w2")], "nodes": ["firewall", "nat"], "config_versions": [1, 1], "pid": 12, "joined": 3, "handed_to": "w0"}
            }),
        );
        assert!(matches!(
            v.handoff("w0", "nope").unwrap_err(),
            VnfmError::NotFound(_)
        ));
        let e = v.handoff("w0", "w1").unwrap_err();
        assert!(
            matches!(&e, VnfmError::Invalid(m) if m.contains("same functions")),
            "{e}"
        );
        assert!(matches!(
            v.handoff("w2", "w0").unwrap_err(),
            VnfmError::Conflict(_)
        ));
        // No socket answers: the first step fails as unavailable, and nothing is recorded.
        let e = v.migrate_instance("a", "c", &[]).unwrap_err();
        assert!(matches!(e, VnfmError::Unavailable(_)), "{e}");
        assert!(v.lock()["w0"].handed_to.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stand-in worker socket: answers `{"conn": k}` (k counts the connections it
    /// accepted) to two requests per connection, then closes it and says so on `closed`.
    fn echo_worker(
        sock: PathBuf,
        conns: usize,
        closed: std::sync::mpsc::Sender<usize>,
    ) -> std::thread::JoinHandle<()> {
        let l = std::os::unix::net::UnixListener::bind(sock).unwrap();
        std::thread::spawn(move || {
            for k in 0..conns {
                let (c, _) = l.accept().unwrap();
                let mut out = c.try_clone().unwrap();
                let mut lines = BufReader::new(c).lines();
                for _ in 0..2 {
                    lines.next().unwrap().unwrap();
                    writeln!(out, "{{\"conn\": {k}}}").unwrap();
                }
                drop((lines, out));
                closed.send(k).unwrap();
            }
        })
    }

    #[test]
    fn a_worker_connection_is_kept_and_replaced_when_its_peer_has_gone() {
        let dir = std::env::temp_dir().join(format!("nfx-kept-{}", std::process::id()));
        let v = vnfm_with(&dir, serde_json::json!({}));
        let (tx, closed) = std::sync::mpsc::channel();
        let worker = echo_worker(v.socket("x"), 2, tx);
        #[derive(Deserialize)]
        struct Conn {
            conn: usize,
        }
        let conn = || v.ask_kept::<Conn>("x", &Request::Stats {}).map(|c| c.conn);
        assert_eq!(conn().unwrap(), 0);
        assert_eq!(conn().unwrap(), 0);
        // The worker closed the kept connection (as a worker that ended does): the
        // request goes out on a new one.
        assert_eq!(closed.recv().unwrap(), 0);
        assert_eq!(conn().unwrap(), 1);
        assert_eq!(conn().unwrap(), 1);
        assert_eq!(closed.recv().unwrap(), 1);
        worker.join().unwrap();
        // Nobody listens any more: an error, and no connection is kept.
        assert!(matches!(conn(), Err(VnfmError::Unavailable(_))));
        assert!(v.kept.lock().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_devices_and_dead_sockets_are_errors() {
        let dir = std::env::temp_dir().join(format!("nfx-local-{}", std::process::id()));
        let cfg: LocalConfig = serde_yaml_ng::from_str(&format!(
            "run_dir: {}\nnfx_bin: /nonexistent/nfx\nworkers:\n  w0: {{ ports: {PORTS} }}\n",
            dir.display()
        ))
        .unwrap();
        let v = LocalVnfm::new(cfg).unwrap();
        let mut s = InstanceSpec {
            id: "i".into(),
            function: "nat".into(),
            device: "zz".into(),
            config: serde_json::Value::Null,
            throughput_gbps: 0.0,
            capacity: 0.0,
        };
        assert!(matches!(
            v.deploy_instance(&s).unwrap_err(),
            VnfmError::NotFound(_)
        ));
        s.device = "w0".into();
        let e = v.deploy_instance(&s).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/nfx"), "{e}");
        assert!(v.get_instance_state("i").is_err());
        assert!(v.list_instances().unwrap().is_empty());
        let e = ask(&dir.join("none.sock"), Client::stats).unwrap_err();
        assert!(matches!(e, VnfmError::Unavailable(_)));
        let bad: Result<LocalConfig, _> =
            serde_yaml_ng::from_str("run_dir: /x\nworkers: {}\nextra: 1\n");
        assert!(bad.unwrap_err().to_string().contains("extra"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
