//! The host's accelerator tier, run for real: each lookaside device of the agent's
//! configuration is an `nfx accel serve` process (a reserved core standing in for a
//! QAT/FPGA card: the device is modelled hardware, and its status says so), started with
//! the first tunnel endpoint placed on it and stopped with the last; each `esp` instance
//! is an `nfx tunnel` endpoint whose crypto runs on one queue pair of that device (or on
//! its CPU engine when it was placed without one, until the controller's SSM grants one:
//! [`Tunnels::switch_engine`] tells the endpoint's element manager to switch live) and
//! whose SAs it negotiates with IKEv2 against the endpoint on the peer host,
//! authenticated by the pre-shared key the controller sent over the agent's TLS link
//! ([`Tunnels::set_key`]). The key goes into a 0600 file of the endpoint's private
//! directory, never into a command line, a log or an answer. The endpoint's TUN device
//! is how the host's steering sends the service's traffic into the tunnel.
//!
//! Both endpoints of a tunnel derive the same UDP port and TUN addresses from the
//! service id, so neither needs the other's settings. Every running endpoint is
//! recorded, and a restarted agent adopts or restarts it ([`restore`]).

mod process;
mod restore;

use super::record::{self, NotRestored};
use super::steering::NeighborLink;
use crate::mediator::tunnel::{fnv1a, EndpointConfig, TUNNEL_SLOTS};
use crate::vnfm::{InstanceSpec, InstanceState, VnfmError};
use process::{log_tail, spawn, Proc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How long a device may take to open its socket, and an endpoint to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Time limit of one element-manager call.
const EM_TIMEOUT: Duration = Duration::from_secs(2);
/// A tunnel's UDP port is `PORT_BASE + slot` (slots below `TUNNEL_SLOTS`).
const PORT_BASE: u16 = 20_000;
/// Most keys held for endpoints not deployed yet.
const MAX_PENDING_KEYS: usize = 256;
/// Pre-shared key sizes accepted (the endpoint itself needs at least 16 bytes).
const PSK_LEN: std::ops::RangeInclusive<usize> = 16..=64;
/// What the device is, in every status answer.
const DEVICE_KIND: &str =
    "modelled hardware: a lookaside device process (nfx accel serve) on a reserved core";

/// A lookaside accelerator device of the host (`accelerators[]` of the agent config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorDevice {
    /// Device id (as in the infrastructure, tier `accelerator`).
    pub id: String,
    /// Queue pairs the device serves (its capacity: one per tunnel endpoint).
    pub queue_pairs: u32,
    /// The core reserved for the device process (pinned there).
    #[serde(default)]
    pub core: Option<usize>,
}

/// A running endpoint: its process and what the agent's calls need of it.
struct Endpoint {
    view: EndpointView,
    proc: Proc,
}

/// What a call needs of a running endpoint, taken out of the lock before the call talks
/// to the endpoint's element manager.
#[derive(Clone)]
struct EndpointView {
    spec: InstanceSpec,
    dir: PathBuf,
    em: SocketAddr,
    token: Zeroizing<String>,
    link: NeighborLink,
    underlay: (SocketAddr, SocketAddr),
    pid: u32,
}

/// A running device process.
struct DeviceProcess {
    proc: Proc,
    socket: PathBuf,
}

#[derive(Default)]
struct State {
    keys: BTreeMap<String, Zeroizing<Vec<u8>>>,
    ends: BTreeMap<String, Endpoint>,
    devices: BTreeMap<String, DeviceProcess>,
    /// Endpoints being started or stopped (outside the lock), with their device: other
    /// calls for the same id wait for it; the device is kept running for it.
    busy: BTreeMap<String, String>,
    /// Devices whose process is being started (outside the lock).
    starting_devices: BTreeSet<String>,
}

/// The host's tunnel endpoints and accelerator device processes.
///
/// Starting an endpoint (up to [`START_TIMEOUT`]) or a device, and stopping an endpoint,
/// run outside the lock: the id is marked busy meanwhile, so calls for other endpoints
/// answer at once and calls for the same id wait until it is done.
pub struct Tunnels {
    host: String,
    dir: PathBuf,
    nfx_bin: Option<PathBuf>,
    devices: BTreeMap<String, AcceleratorDevice>,
    neighbors: BTreeMap<String, NeighborLink>,
    st: Mutex<State>,
    /// Signalled whenever a busy endpoint or a starting device is done.
    done: Condvar,
}

/// What the controller asks of a tunnel endpoint's engine
/// (`POST /agent/v1/tunnels/{id}/engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineRequest {
    /// `true`: attach a queue pair of the endpoint's device; `false`: give it back and
    /// run the crypto on the CPU engine.
    pub lookaside: bool,
}

/// The endpoint's answer to a live engine switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineSwitch {
    /// Engine in use after the switch (`lookaside` or `cpu`).
    pub engine: String,
    /// How long the live switch took, µs.
    pub switch_us: u64,
}

/// The part of an endpoint's `GET /status` the agent reports (docs/tunnel.md).
#[derive(Debug, Deserialize)]
struct EmStatus {
    ready: bool,
    engine: String,
    #[serde(default)]
    queue_pair: Option<u32>,
    alg: String,
    #[serde(default)]
    ike: Option<IkeStatus>,
    cpu_pct: f64,
    tx_packets: u64,
    tx_bytes: u64,
    rx_packets: u64,
    rx_bytes: u64,
    drops: BTreeMap<String, u64>,
    failovers: u64,
}

#[derive(Debug, Deserialize)]
struct IkeStatus {
    state: String,
}

fn unavailable(e: impl std::fmt::Display) -> VnfmError {
    VnfmError::Unavailable(e.to_string())
}

impl Tunnels {
    /// The tunnels of `host`, with their files under `dir`; the device processes and
    /// endpoints an earlier agent recorded there are adopted or started again
    /// ([`restore`]). Returns those that could not be brought back, as `(instance,
    /// device, reason)`.
    pub fn new(
        host: &str,
        dir: PathBuf,
        nfx_bin: Option<PathBuf>,
        devices: &[AcceleratorDevice],
        neighbors: BTreeMap<String, NeighborLink>,
    ) -> anyhow::Result<(Self, Vec<NotRestored>)> {
        for d in [dir.clone(), dir.join("accel"), dir.join("ends")] {
            std::fs::create_dir_all(&d)?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
        }
        let t = Tunnels {
            host: host.to_string(),
            dir,
            nfx_bin,
            devices: devices.iter().map(|d| (d.id.clone(), d.clone())).collect(),
            neighbors,
            st: Mutex::new(State::default()),
            done: Condvar::new(),
        };
        let lost = t.restore();
        Ok((t, lost))
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (releasing the lock) until endpoint `id` is not busy.
    fn until_idle<'a>(&self, mut st: MutexGuard<'a, State>, id: &str) -> MutexGuard<'a, State> {
        while st.busy.contains_key(id) {
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// Keeps the IKE key of endpoint `id` until its deploy.
    pub fn set_key(&self, id: &str, psk: &[u8]) -> Result<(), VnfmError> {
        check_id(id)?;
        if !PSK_LEN.contains(&psk.len()) {
            return Err(VnfmError::Invalid(format!(
                "tunnel key of {id}: {} to {} bytes",
                PSK_LEN.start(),
                PSK_LEN.end()
            )));
        }
        let mut st = self.st();
        if st.keys.len() >= MAX_PENDING_KEYS && !st.keys.contains_key(id) {
            return Err(VnfmError::Conflict(format!(
                "{MAX_PENDING_KEYS} tunnel keys already wait for their deploy"
            )));
        }
        st.keys.insert(id.to_string(), Zeroizing::new(psk.to_vec()));
        Ok(())
    }

    /// Whether `id` is a tunnel endpoint of this host (running, or being started or
    /// stopped).
    pub fn holds(&self, id: &str) -> bool {
        let st = self.st();
        st.ends.contains_key(id) || st.busy.contains_key(id)
    }

    /// The configuration endpoint `id` was deployed with.
    pub fn config_of(&self, id: &str) -> Option<serde_json::Value> {
        self.st().ends.get(id).map(|e| e.view.spec.config.clone())
    }

    /// Ids of the running endpoints.
    pub fn ids(&self) -> Vec<String> {
        self.st().ends.keys().cloned().collect()
    }

    /// Every running endpoint's TUN link (the steering sends its tunnel's traffic there).
    pub fn links(&self) -> Vec<(String, NeighborLink)> {
        self.st()
            .ends
            .iter()
            .map(|(id, e)| (id.clone(), e.view.link.clone()))
            .collect()
    }

    /// The view of running endpoint `id` (busy: unavailable until its start or stop
    /// is done).
    fn view(&self, id: &str) -> Result<EndpointView, VnfmError> {
        let st = self.st();
        match st.ends.get(id) {
            Some(e) => Ok(e.view.clone()),
            None if st.busy.contains_key(id) => Err(VnfmError::Unavailable(format!(
                "tunnel endpoint {id} is being started or stopped"
            ))),
            None => Err(VnfmError::NotFound(format!("no tunnel endpoint {id}"))),
        }
    }

    /// Switches endpoint `id`'s crypto live onto a queue pair of its device or back to its
    /// CPU engine, through the endpoint's element manager (its token never leaves the
    /// agent). A refusal (no free queue pair, already attached) is a conflict.
    pub fn switch_engine(&self, id: &str, req: EngineRequest) -> Result<EngineSwitch, VnfmError> {
        let e = self.view(id)?;
        let socket = self
            .st()
            .devices
            .get(&e.spec.device)
            .map(|d| d.socket.clone());
        let (path, body) = if req.lookaside {
            let socket = socket.ok_or_else(|| {
                VnfmError::Unavailable(format!("the device of tunnel endpoint {id} does not run"))
            })?;
            ("/accelerator/use", serde_json::json!({ "device": socket }))
        } else {
            ("/accelerator/release", serde_json::json!({}))
        };
        let r = ureq::AgentBuilder::new()
            .timeout(EM_TIMEOUT)
            .build()
            .post(&format!("http://{}{path}", e.em))
            .set("Authorization", &format!("Bearer {}", e.token.as_str()))
            .send_json(body);
        match r {
            Ok(resp) => resp.into_json().map_err(|err| {
                VnfmError::Unavailable(format!("tunnel endpoint {id}: {path}: {err}"))
            }),
            Err(ureq::Error::Status(code, resp)) => {
                let why = resp.into_string().unwrap_or_default();
                let msg = format!("tunnel endpoint {id}: {path}: {code} {why}");
                Err(if code == 409 {
                    VnfmError::Conflict(msg)
                } else {
                    VnfmError::Unavailable(msg)
                })
            }
            Err(err) => Err(VnfmError::Unavailable(format!(
                "tunnel endpoint {id}: {path}: {err}"
            ))),
        }
    }

    /// Starts endpoint `spec` (and its device if it does not run), outside the lock;
    /// returns its state and the TUN link the steering sends the tunnel's traffic to.
    pub fn deploy(&self, spec: &InstanceSpec) -> Result<(InstanceState, NeighborLink), VnfmError> {
        check_id(&spec.id)?;
        let st = self.st();
        let mut st = self.until_idle(st, &spec.id);
        if let Some(e) = st.ends.get(&spec.id) {
            if e.view.spec != *spec {
                return Err(VnfmError::Conflict(format!(
                    "tunnel endpoint {} exists with another spec",
                    spec.id
                )));
            }
            let view = e.view.clone();
            drop(st);
            return Ok((self.read_state(&view)?, view.link));
        }
        let (c, dev, nb) = self.prepare(spec)?;
        let psk = st.keys.remove(&spec.id).ok_or_else(|| {
            VnfmError::Invalid(format!(
                "no IKE key was provisioned for tunnel endpoint {} (the controller sends it \
                 before the deploy)",
                spec.id
            ))
        })?;
        st.busy.insert(spec.id.clone(), spec.device.clone());
        drop(st);
        let started = self.launch(spec, &c, &dev, &nb, &nfx_io::token::hex(&psk));
        let view = self.finish_start(spec, started)?;
        Ok((self.read_state(&view)?, view.link))
    }

    /// Checks an endpoint's configuration: its config, its device, its peer host.
    fn prepare(
        &self,
        spec: &InstanceSpec,
    ) -> Result<(EndpointConfig, AcceleratorDevice, NeighborLink), VnfmError> {
        let c: EndpointConfig = serde_json::from_value(spec.config.clone())
            .map_err(|e| VnfmError::Invalid(format!("esp instance {}: config: {e}", spec.id)))?;
        if !matches!(c.role.as_str(), "initiator" | "responder") {
            return Err(VnfmError::Invalid(format!(
                "esp instance {}: config.role: {:?} is neither initiator nor responder",
                spec.id, c.role
            )));
        }
        let dev = self.devices.get(&spec.device).ok_or_else(|| {
            VnfmError::NotFound(format!(
                "{} is not an accelerator device of host {}",
                spec.device, self.host
            ))
        })?;
        let nb = self.neighbors.get(&c.peer_host).ok_or_else(|| {
            VnfmError::Invalid(format!(
                "esp instance {}: peer host {} is not a neighbor of {}",
                spec.id, c.peer_host, self.host
            ))
        })?;
        Ok((c, dev.clone(), nb.clone()))
    }

    /// Starts the device if needed, then the endpoint (its id is busy; the lock is not
    /// held).
    fn launch(
        &self,
        spec: &InstanceSpec,
        c: &EndpointConfig,
        dev: &AcceleratorDevice,
        nb: &NeighborLink,
        psk_hex: &str,
    ) -> Result<Endpoint, VnfmError> {
        let local = iface_addr(&nb.iface)?;
        let socket = self.ensure_device(dev)?;
        self.start_endpoint(spec, c, &socket, nb, local, psk_hex)
    }

    /// Ends a start of busy endpoint `spec`: keeps the endpoint (or, when it failed,
    /// stops the devices no endpoint uses), frees its id and wakes the waiters.
    fn finish_start(
        &self,
        spec: &InstanceSpec,
        started: Result<Endpoint, VnfmError>,
    ) -> Result<EndpointView, VnfmError> {
        let mut st = self.st();
        st.busy.remove(&spec.id);
        let out = match started {
            Ok(e) => {
                let view = e.view.clone();
                st.ends.insert(spec.id.clone(), e);
                Ok(view)
            }
            Err(e) => {
                self.stop_unused_devices(&mut st);
                Err(e)
            }
        };
        drop(st);
        self.done.notify_all();
        out
    }

    /// Stops endpoint `id` (outside the lock) and removes its record and files (its
    /// device too when no endpoint uses it any more); `false` when there is no such
    /// endpoint.
    pub fn destruct(&self, id: &str) -> bool {
        let st = self.st();
        let mut st = self.until_idle(st, id);
        let Some(mut e) = st.ends.remove(id) else {
            return false;
        };
        st.busy.insert(id.to_string(), e.view.spec.device.clone());
        drop(st);
        let _ = std::fs::remove_file(self.record_file(id));
        e.proc.stop();
        let _ = std::fs::remove_dir_all(&e.view.dir);
        let mut st = self.st();
        st.busy.remove(id);
        self.stop_unused_devices(&mut st);
        drop(st);
        self.done.notify_all();
        true
    }

    /// The endpoint's state, its counters read from the running endpoint.
    pub fn state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let view = self.view(id)?;
        self.read_state(&view)
    }

    /// Endpoints whose process ended without the agent stopping it: `(instance,
    /// device, reason)`; they are forgotten (their record and files removed).
    pub fn reap_dead(&self) -> Vec<(String, String, String)> {
        let mut st = self.st();
        let dead: Vec<(String, String)> = st
            .ends
            .iter_mut()
            .filter_map(|(id, e)| e.proc.ended().map(|status| (id.clone(), status)))
            .collect();
        let mut out = Vec::new();
        for (id, status) in dead {
            if let Some(e) = st.ends.remove(&id) {
                let _ = std::fs::remove_file(self.record_file(&id));
                let _ = std::fs::remove_dir_all(&e.view.dir);
                out.push((
                    id,
                    e.view.spec.device.clone(),
                    format!("tunnel endpoint (pid {}) ended: {status}", e.view.pid),
                ));
            }
        }
        if !out.is_empty() {
            self.stop_unused_devices(&mut st);
        }
        out
    }

    /// Where endpoint `id`'s record is kept.
    fn record_file(&self, id: &str) -> PathBuf {
        record::file_of(&self.dir.join("ends"), id)
    }

    fn nfx_bin(&self) -> Result<PathBuf, VnfmError> {
        match &self.nfx_bin {
            Some(b) => Ok(b.clone()),
            None => std::env::current_exe().map_err(unavailable),
        }
    }

    /// The device's socket, starting its process (outside the lock) if it does not run.
    fn ensure_device(&self, dev: &AcceleratorDevice) -> Result<PathBuf, VnfmError> {
        let mut st = self.st();
        loop {
            if st.starting_devices.contains(&dev.id) {
                st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if let Some(p) = st.devices.get_mut(&dev.id) {
                if p.proc.ended().is_none() {
                    return Ok(p.socket.clone());
                }
                st.devices.remove(&dev.id);
            }
            break;
        }
        st.starting_devices.insert(dev.id.clone());
        drop(st);
        let started = self.start_device(dev);
        let mut st = self.st();
        st.starting_devices.remove(&dev.id);
        let out = started.map(|p| {
            let socket = p.socket.clone();
            st.devices.insert(dev.id.clone(), p);
            socket
        });
        drop(st);
        self.done.notify_all();
        out
    }

    /// Starts the device's process and waits for its socket.
    fn start_device(&self, dev: &AcceleratorDevice) -> Result<DeviceProcess, VnfmError> {
        let dir = self.dir.join("accel").join(&dev.id);
        let _ = std::fs::remove_dir_all(&dir);
        let socket = dir.join(super::leftovers::DEVICE_SOCKET);
        let log_file = self.dir.join("accel").join(format!("{}.log", dev.id));
        let mut cmd = Command::new(self.nfx_bin()?);
        cmd.args(["accel", "serve", "--queue-pairs"])
            .arg(dev.queue_pairs.to_string())
            .arg("--socket")
            .arg(&socket);
        if let Some(c) = dev.core {
            cmd.arg("--core").arg(c.to_string());
        }
        let mut proc = spawn(cmd, &log_file)?;
        write_private(
            &self.dir.join("accel").join(format!("{}.pid", dev.id)),
            proc.id().to_string().as_bytes(),
        )?;
        let start = Instant::now();
        while !socket.exists() {
            if let Some(status) = proc.ended() {
                return Err(VnfmError::Unavailable(format!(
                    "accelerator device {} exited ({status}): {}",
                    dev.id,
                    log_tail(&log_file)
                )));
            }
            if start.elapsed() > START_TIMEOUT {
                proc.stop();
                return Err(VnfmError::Unavailable(format!(
                    "accelerator device {} did not open its socket within {START_TIMEOUT:?}",
                    dev.id
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        log::info!(
            "accelerator device {} started (pid {}, {} queue pairs; {DEVICE_KIND})",
            dev.id,
            proc.id(),
            dev.queue_pairs
        );
        Ok(DeviceProcess { proc, socket })
    }

    /// Stops the device processes no endpoint uses (running or busy).
    fn stop_unused_devices(&self, st: &mut State) {
        let unused: Vec<String> = st
            .devices
            .keys()
            .filter(|d| {
                !st.ends.values().any(|e| &e.view.spec.device == *d)
                    && !st.busy.values().any(|b| b == *d)
            })
            .cloned()
            .collect();
        for d in unused {
            if let Some(mut p) = st.devices.remove(&d) {
                p.proc.stop();
                log::info!("accelerator device {d} stopped (no tunnel endpoint left)");
            }
            let _ = std::fs::remove_dir_all(self.dir.join("accel").join(&d));
            let _ = std::fs::remove_file(self.dir.join("accel").join(format!("{d}.pid")));
        }
    }

    /// Writes the endpoint's files and starts it; waits until it is ready, then records
    /// it ([`restore::EndpointRecord`]).
    fn start_endpoint(
        &self,
        spec: &InstanceSpec,
        c: &EndpointConfig,
        socket: &Path,
        nb: &NeighborLink,
        local: Ipv4Addr,
        psk_hex: &str,
    ) -> Result<Endpoint, VnfmError> {
        let dir = self.dir.join("ends").join(&spec.id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(unavailable)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(unavailable)?;
        write_private(&dir.join("ike.psk"), psk_hex.as_bytes())?;
        let token = nfx_io::token::random().map_err(VnfmError::Unavailable)?;
        write_private(&dir.join("em.token"), token.as_bytes())?;
        let em = free_local_port()?;
        let plan = EndpointPlan::new(c, &spec.id)?;
        let underlay = (
            SocketAddr::from((local, plan.port)),
            SocketAddr::from((nb.peer, plan.port)),
        );
        let cfg = serde_json::json!({
            "name": spec.id,
            "em_listen": em.to_string(),
            "em_token_file": "em.token",
            "engine": "cpu",
            "lookaside": crate::mediator::tunnel::holds_queue_pair(spec).then_some(socket),
            "lookaside_dir": socket.parent(),
            "threads": 1,
            "tun": {"name": plan.tun, "address": format!("{}/30", plan.local_tun)},
            "underlay": {"local": underlay.0.to_string(), "peer": underlay.1.to_string(), "mtu": 1500},
            "ike": {
                "role": c.role,
                "local_id": format!("{}.nfx", self.host),
                "remote_id": format!("{}.nfx", c.peer_host),
                "psk_file": "ike.psk",
                "esp": [c.alg],
                "retransmit_ms": 200,
                "restart_s": 1,
            },
        });
        let file = dir.join(super::leftovers::ENDPOINT_CONFIG);
        let yaml = serde_yaml_ng::to_string(&cfg).map_err(unavailable)?;
        std::fs::write(&file, yaml).map_err(unavailable)?;
        let log_file = dir.join("tunnel.log");
        let mut cmd = Command::new(self.nfx_bin()?);
        cmd.arg("tunnel").arg("--config").arg(&file);
        let proc = spawn(cmd, &log_file)?;
        write_private(&dir.join("pid"), proc.id().to_string().as_bytes())?;
        let mut e = Endpoint {
            view: EndpointView {
                spec: spec.clone(),
                dir,
                em,
                token,
                link: NeighborLink {
                    iface: plan.tun.clone(),
                    peer: plan.peer_tun,
                },
                underlay,
                pid: proc.id(),
            },
            proc,
        };
        if let Err(err) = self.until_ready(&mut e, &log_file) {
            e.proc.stop();
            let _ = std::fs::remove_dir_all(&e.view.dir);
            return Err(err);
        }
        // Decrypted packets arrive on the TUN from addresses routed elsewhere: a strict
        // reverse-path filter would drop them.
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv4/conf/{}/rp_filter", plan.tun),
            "0",
        );
        let rec = restore::EndpointRecord {
            spec: spec.clone(),
            pid: e.view.pid,
            em,
            link: e.view.link.clone(),
            underlay,
        };
        if let Err(err) = record::save(&self.record_file(&spec.id), &rec) {
            e.proc.stop();
            let _ = std::fs::remove_dir_all(&e.view.dir);
            return Err(VnfmError::Unavailable(format!(
                "recording the endpoint: {err}"
            )));
        }
        log::info!(
            "tunnel endpoint {} ({}) on device {}: {} → {}",
            spec.id,
            c.role,
            spec.device,
            underlay.0,
            underlay.1
        );
        Ok(e)
    }

    /// Waits until the endpoint's element manager says it is ready.
    fn until_ready(&self, e: &mut Endpoint, log_file: &Path) -> Result<(), VnfmError> {
        let start = Instant::now();
        loop {
            if self.em_status(&e.view).is_ok_and(|s| s.ready) {
                return Ok(());
            }
            if let Some(status) = e.proc.ended() {
                return Err(VnfmError::Unavailable(format!(
                    "tunnel endpoint {} exited ({status}): {}",
                    e.view.spec.id,
                    log_tail(log_file)
                )));
            }
            if start.elapsed() > START_TIMEOUT {
                let why = self.em_status(&e.view).err().map(|e| e.to_string());
                return Err(VnfmError::Unavailable(format!(
                    "tunnel endpoint {} was not ready within {START_TIMEOUT:?} ({}): {}",
                    e.view.spec.id,
                    why.unwrap_or_else(|| "not ready".into()),
                    log_tail(log_file)
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn em_status(&self, e: &EndpointView) -> Result<EmStatus, VnfmError> {
        let r = ureq::AgentBuilder::new()
            .timeout(EM_TIMEOUT)
            .build()
            .get(&format!("http://{}/status", e.em))
            .set("Authorization", &format!("Bearer {}", e.token.as_str()))
            .call()
            .map_err(|err| {
                VnfmError::Unavailable(format!("tunnel endpoint {}: {err}", e.spec.id))
            })?;
        r.into_json().map_err(|err| {
            VnfmError::Unavailable(format!("tunnel endpoint {}: status: {err}", e.spec.id))
        })
    }

    fn read_state(&self, e: &EndpointView) -> Result<InstanceState, VnfmError> {
        let s = self.em_status(e)?;
        let ike = s.ike.map(|i| i.state).unwrap_or_default();
        Ok(InstanceState {
            id: e.spec.id.clone(),
            function: e.spec.function.clone(),
            device: e.spec.device.clone(),
            status: "running".into(),
            config_version: 1,
            flows: 0,
            packets: s.tx_packets + s.rx_packets,
            cpu_pct: s.cpu_pct,
            detail: serde_json::json!({
                "vnfm": "real",
                "pid": e.pid,
                "device_kind": DEVICE_KIND,
                "engine": s.engine,
                "queue_pair": s.queue_pair,
                "alg": s.alg,
                "ike": ike,
                "tun": e.link.iface,
                "underlay": {"local": e.underlay.0.to_string(), "peer": e.underlay.1.to_string()},
                "tx_packets": s.tx_packets,
                "tx_bytes": s.tx_bytes,
                "rx_packets": s.rx_packets,
                "rx_bytes": s.rx_bytes,
                "drops": s.drops,
                "failovers": s.failovers,
            }),
        })
    }
}

impl Drop for Tunnels {
    fn drop(&mut self) {
        let mut st = self.st();
        for e in st.ends.values_mut() {
            e.proc.stop();
        }
        for p in st.devices.values_mut() {
            p.proc.stop();
        }
    }
}

/// What both endpoints of a tunnel derive from its slot (assigned by the controller,
/// unique among its tunnels): the UDP port of IKE and ESP, and the TUN addresses (a /30
/// of 169.254.128.0–169.254.254.255, the initiator on .1); the TUN name comes from the
/// instance id (unique on the host).
#[derive(Debug, Clone, PartialEq, Eq)]
struct EndpointPlan {
    port: u16,
    tun: String,
    local_tun: Ipv4Addr,
    peer_tun: Ipv4Addr,
}

impl EndpointPlan {
    fn new(c: &EndpointConfig, instance: &str) -> Result<Self, VnfmError> {
        let slot = c.slot_or_derived();
        if slot >= TUNNEL_SLOTS {
            return Err(VnfmError::Invalid(format!(
                "tunnel {}: slot {slot} is not below {TUNNEL_SLOTS}",
                c.tunnel
            )));
        }
        let port = PORT_BASE + slot;
        let net = u32::from(Ipv4Addr::new(169, 254, 128, 0)) + (u32::from(slot) << 2);
        let (a, b) = (Ipv4Addr::from(net + 1), Ipv4Addr::from(net + 2));
        let (local_tun, peer_tun) = if c.role == "initiator" {
            (a, b)
        } else {
            (b, a)
        };
        Ok(EndpointPlan {
            port,
            tun: format!("nfxt{:08x}", fnv1a(instance.as_bytes())),
            local_tun,
            peer_tun,
        })
    }
}

/// Instance ids go into file names: letters, digits, `-`, `_`, `.` only.
fn check_id(id: &str) -> Result<(), VnfmError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(VnfmError::Invalid(format!(
            "instance id {id:?}: use 1-128 of A-Z a-z 0-9 - _ . (not starting with .)"
        )))
    }
}

/// The IPv4 address of `iface` (the host's end of a link).
fn iface_addr(iface: &str) -> Result<Ipv4Addr, VnfmError> {
    let out = nfx_io::command::run(
        "ip",
        &["-j", "-4", "addr", "show", "dev", iface],
        None,
        Duration::from_secs(5),
    )
    .map_err(|e| VnfmError::Unavailable(format!("ip addr show dev {iface}: {e}")))?;
    #[derive(Deserialize)]
    struct Link {
        addr_info: Vec<Addr>,
    }
    #[derive(Deserialize)]
    struct Addr {
        local: Ipv4Addr,
    }
    let links: Vec<Link> = serde_json::from_str(&out).map_err(unavailable)?;
    links
        .into_iter()
        .flat_map(|l| l.addr_info)
        .map(|a| a.local)
        .next()
        .ok_or_else(|| VnfmError::Unavailable(format!("{iface} has no IPv4 address")))
}

/// A loopback TCP address nothing listens on now (the endpoint's EM binds it).
fn free_local_port() -> Result<SocketAddr, VnfmError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(unavailable)
}

/// Creates `file` with mode 0600 holding `data`.
fn write_private(file: &Path, data: &[u8]) -> Result<(), VnfmError> {
    nfx_io::token::write_private(file, data).map_err(VnfmError::Unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(tunnel: &str, role: &str) -> EndpointConfig {
        EndpointConfig {
            tunnel: tunnel.into(),
            role: role.into(),
            peer_host: "h2".into(),
            alg: "aes-128-gcm".into(),
            slot: None,
        }
    }

    #[test]
    fn both_ends_derive_the_same_port_and_mirrored_tun_addresses() {
        let a = EndpointPlan::new(&cfg("vpn", "initiator"), "vpn-esp-h1").unwrap();
        let b = EndpointPlan::new(&cfg("vpn", "responder"), "vpn-esp-h2").unwrap();
        assert_eq!(a.port, b.port);
        assert!((PORT_BASE..PORT_BASE + TUNNEL_SLOTS).contains(&a.port));
        assert_eq!((a.local_tun, a.peer_tun), (b.peer_tun, b.local_tun));
        assert_eq!(a.local_tun.octets()[0..2], [169, 254]);
        assert_eq!(a.local_tun.octets()[3] % 4, 1, "{}", a.local_tun);
        assert!(a.tun.len() <= 15 && a.tun != b.tun, "{} {}", a.tun, b.tun);
    }

    #[test]
    fn slots_give_distinct_ports_and_addresses_within_the_link_local_range() {
        let at = |slot| {
            let c = EndpointConfig {
                slot: Some(slot),
                ..cfg("vpn", "initiator")
            };
            EndpointPlan::new(&c, "vpn-esp-h1")
        };
        let (first, last) = (at(0).unwrap(), at(TUNNEL_SLOTS - 1).unwrap());
        assert_eq!(first.local_tun, Ipv4Addr::new(169, 254, 128, 1));
        assert_eq!(last.peer_tun, Ipv4Addr::new(169, 254, 254, 254));
        assert_ne!(at(1).unwrap().port, first.port);
        assert!(matches!(at(TUNNEL_SLOTS), Err(VnfmError::Invalid(_))));
    }

    /// The initiator end of tunnel `vpn` on h1's device.
    fn vpn_initiator() -> InstanceSpec {
        InstanceSpec {
            id: "vpn-esp-h1".into(),
            function: "esp".into(),
            device: "h1-acc0".into(),
            config: serde_json::to_value(cfg("vpn", "initiator")).unwrap(),
            throughput_gbps: 1.0,
            capacity: 1.0,
        }
    }

    /// Host h1's tunnels in `dir`: one accelerator device of two queue pairs, neighbor h2
    /// over loopback.
    fn h1_with_one_device(dir: PathBuf, nfx_bin: Option<PathBuf>) -> (Tunnels, Vec<NotRestored>) {
        Tunnels::new(
            "h1",
            dir,
            nfx_bin,
            &[AcceleratorDevice {
                id: "h1-acc0".into(),
                queue_pairs: 2,
                core: None,
            }],
            BTreeMap::from([(
                "h2".to_string(),
                NeighborLink {
                    iface: "lo".into(),
                    peer: Ipv4Addr::LOCALHOST,
                },
            )]),
        )
        .unwrap()
    }

    #[test]
    fn bad_ids_and_keys_are_refused_and_no_key_means_no_endpoint() {
        let dir = std::env::temp_dir().join(format!("nfx-tunnels-{}", std::process::id()));
        let t = h1_with_one_device(dir.clone(), None).0;
        assert!(matches!(
            t.set_key("../x", &[1; 32]),
            Err(VnfmError::Invalid(_))
        ));
        assert!(matches!(
            t.set_key("e1", &[1; 8]),
            Err(VnfmError::Invalid(_))
        ));
        let mut spec = vpn_initiator();
        let e = t.deploy(&spec).unwrap_err().to_string();
        assert!(e.contains("no IKE key was provisioned"), "{e}");
        spec.device = "h1-sw0".into();
        assert!(matches!(t.deploy(&spec), Err(VnfmError::NotFound(_))));
        spec.config["role"] = "both".into();
        assert!(matches!(t.deploy(&spec), Err(VnfmError::Invalid(_))));
        spec.config["secret"] = "x".into();
        assert!(matches!(t.deploy(&spec), Err(VnfmError::Invalid(_))));
        assert!(t.ids().is_empty() && !t.destruct("vpn-esp-h1"));
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_restart_reports_damaged_and_stale_records_and_removes_unfinished_starts() {
        let dir = std::env::temp_dir().join(format!("nfx-tunnels-rs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ends = dir.join("ends");
        std::fs::create_dir_all(ends.join("half")).unwrap();
        // Torn by a crash of the disk, written by a newer agent.
        std::fs::write(ends.join("torn.json"), br#"{"version": 1, "rec"#).unwrap();
        std::fs::write(ends.join("newer.json"), br#"{"version": 9, "record": {}}"#).unwrap();
        // Whole, but on a device the agent's configuration no longer has.
        let rec = restore::EndpointRecord {
            spec: InstanceSpec {
                id: "gone".into(),
                function: "esp".into(),
                device: "h1-acc9".into(),
                config: serde_json::to_value(cfg("vpn", "initiator")).unwrap(),
                throughput_gbps: 1.0,
                capacity: 1.0,
            },
            pid: 1,
            em: "127.0.0.1:1".parse().unwrap(),
            link: NeighborLink {
                iface: "nfxt0".into(),
                peer: Ipv4Addr::LOCALHOST,
            },
            underlay: (
                "127.0.0.1:2".parse().unwrap(),
                "127.0.0.1:3".parse().unwrap(),
            ),
        };
        record::save(&ends.join("gone.json"), &rec).unwrap();
        // A start the earlier agent never finished: no record; its pid file names a
        // process that is not an endpoint (init), which is left alone.
        std::fs::write(ends.join("half").join("pid"), "1").unwrap();
        let (t, mut lost) = Tunnels::new("h1", dir.clone(), None, &[], BTreeMap::new()).unwrap();
        lost.sort();
        let reasons: Vec<(&str, &str)> = lost
            .iter()
            .map(|(id, _, why)| (id.as_str(), why.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].0 == "gone" && reasons[0].1.contains("no longer an accelerator device"));
        assert!(reasons[1].0 == "newer" && reasons[1].1.contains("newer.json: record version 9"));
        assert!(reasons[2].0 == "torn" && reasons[2].1.contains("torn.json: not a record"));
        assert!(t.ids().is_empty());
        assert!(ends.join("damaged").join("torn.json").exists());
        assert!(!ends.join("half").exists() && !ends.join("gone.json").exists());
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stand-in `nfx` binary: `accel serve` opens its socket (a file) and runs 5 s;
    /// `tunnel` runs 0.5 s and fails, never ready.
    const FAKE_NFX: &str = r#"#!/bin/sh
if [ "$1" = accel ]; then
  while [ "$#" -gt 0 ]; do
    if [ "$1" = --socket ]; then mkdir -p "$(dirname "$2")"; touch "$2"; fi
    shift
  done
  exec sleep 5
fi
sleep 0.5
echo "stand-in endpoint: not ready"
exit 3
"#;

    #[test]
    fn an_endpoint_start_does_not_hold_the_lock_and_the_same_id_waits_for_it() {
        let dir = std::env::temp_dir().join(format!("nfx-tunnels-busy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("nfx");
        std::fs::write(&bin, FAKE_NFX).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (t, lost) = h1_with_one_device(dir.join("tunnels"), Some(bin));
        assert!(lost.is_empty());
        let t = std::sync::Arc::new(t);
        let spec = vpn_initiator();
        t.set_key(&spec.id, &[7; 32]).unwrap();
        let first = std::thread::spawn({
            let (t, spec) = (t.clone(), spec.clone());
            move || t.deploy(&spec)
        });
        let t0 = Instant::now();
        while !t.holds(&spec.id) {
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "the start never began"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // While it starts: other calls answer at once; its own state is unavailable.
        let t1 = Instant::now();
        t.set_key("other", &[8; 32]).unwrap();
        assert!(t.ids().is_empty());
        assert!(matches!(t.state(&spec.id), Err(VnfmError::Unavailable(_))));
        assert!(
            t1.elapsed() < Duration::from_millis(100),
            "{:?}",
            t1.elapsed()
        );
        // A second deploy of the same id waits for the first, then finds its key
        // consumed: it never started a second process beside the first.
        let second = t.deploy(&spec).unwrap_err().to_string();
        assert!(second.contains("no IKE key was provisioned"), "{second}");
        let e = first.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("exited") && e.contains("not ready"), "{e}");
        assert!(!t.holds(&spec.id) && t.ids().is_empty());
        // The failed start stopped the device it had started for nothing.
        assert!(t.st().devices.is_empty());
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
