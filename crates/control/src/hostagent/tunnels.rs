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
//! service id, so neither needs the other's settings.

use super::steering::NeighborLink;
use crate::mediator::tunnel::{fnv1a, EndpointConfig, TUNNEL_SLOTS};
use crate::vnfm::{InstanceSpec, InstanceState, VnfmError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How long a device may take to open its socket, and an endpoint to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Time limit of one element-manager call.
const EM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a stopped process may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);
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

/// A running endpoint.
struct Endpoint {
    spec: InstanceSpec,
    child: Child,
    dir: PathBuf,
    em: SocketAddr,
    token: Zeroizing<String>,
    link: NeighborLink,
    underlay: (SocketAddr, SocketAddr),
}

/// A running device process.
struct DeviceProcess {
    child: Child,
    socket: PathBuf,
}

#[derive(Default)]
struct State {
    keys: BTreeMap<String, Zeroizing<Vec<u8>>>,
    ends: BTreeMap<String, Endpoint>,
    devices: BTreeMap<String, DeviceProcess>,
}

/// The host's tunnel endpoints and accelerator device processes.
pub struct Tunnels {
    host: String,
    dir: PathBuf,
    nfx_bin: Option<PathBuf>,
    devices: BTreeMap<String, AcceleratorDevice>,
    neighbors: BTreeMap<String, NeighborLink>,
    st: Mutex<State>,
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
    /// The tunnels of `host`, with their files under `dir`; processes an earlier agent
    /// left there are stopped and the directory emptied.
    pub fn new(
        host: &str,
        dir: PathBuf,
        nfx_bin: Option<PathBuf>,
        devices: &[AcceleratorDevice],
        neighbors: BTreeMap<String, NeighborLink>,
    ) -> anyhow::Result<Self> {
        super::leftovers::stop(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        for d in [dir.clone(), dir.join("accel"), dir.join("ends")] {
            std::fs::create_dir_all(&d)?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Tunnels {
            host: host.to_string(),
            dir,
            nfx_bin,
            devices: devices.iter().map(|d| (d.id.clone(), d.clone())).collect(),
            neighbors,
            st: Mutex::new(State::default()),
        })
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Whether `id` is a tunnel endpoint of this host.
    pub fn holds(&self, id: &str) -> bool {
        self.st().ends.contains_key(id)
    }

    /// The configuration endpoint `id` was deployed with.
    pub fn config_of(&self, id: &str) -> Option<serde_json::Value> {
        self.st().ends.get(id).map(|e| e.spec.config.clone())
    }

    /// Ids of the endpoints.
    pub fn ids(&self) -> Vec<String> {
        self.st().ends.keys().cloned().collect()
    }

    /// Switches endpoint `id`'s crypto live onto a queue pair of its device or back to its
    /// CPU engine, through the endpoint's element manager (its token never leaves the
    /// agent). A refusal (no free queue pair, already attached) is a conflict.
    pub fn switch_engine(&self, id: &str, req: EngineRequest) -> Result<EngineSwitch, VnfmError> {
        let (em, token, socket) = {
            let st = self.st();
            let e = st
                .ends
                .get(id)
                .ok_or_else(|| VnfmError::NotFound(format!("no tunnel endpoint {id}")))?;
            let socket = st.devices.get(&e.spec.device).map(|d| d.socket.clone());
            (e.em, e.token.clone(), socket)
        };
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
            .post(&format!("http://{em}{path}"))
            .set("Authorization", &format!("Bearer {}", token.as_str()))
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

    /// Starts endpoint `spec` (and its device if it does not run); returns its state and
    /// the TUN link the steering sends the tunnel's traffic to.
    pub fn deploy(&self, spec: &InstanceSpec) -> Result<(InstanceState, NeighborLink), VnfmError> {
        check_id(&spec.id)?;
        let mut st = self.st();
        if let Some(e) = st.ends.get(&spec.id) {
            if e.spec != *spec {
                return Err(VnfmError::Conflict(format!(
                    "tunnel endpoint {} exists with another spec",
                    spec.id
                )));
            }
            return Ok((self.read_state(e)?, e.link.clone()));
        }
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
        let psk = st.keys.remove(&spec.id).ok_or_else(|| {
            VnfmError::Invalid(format!(
                "no IKE key was provisioned for tunnel endpoint {} (the controller sends it \
                 before the deploy)",
                spec.id
            ))
        })?;
        let local = iface_addr(&nb.iface)?;
        let socket = self.ensure_device(&mut st, dev)?;
        match self.start_endpoint(spec, &c, &socket, nb, local, &psk) {
            Ok(e) => {
                let out = (self.read_state(&e)?, e.link.clone());
                st.ends.insert(spec.id.clone(), e);
                Ok(out)
            }
            Err(e) => {
                self.stop_unused_devices(&mut st);
                Err(e)
            }
        }
    }

    /// Stops endpoint `id` and removes its files (its device too when no endpoint uses
    /// it any more); `false` when there is no such endpoint.
    pub fn destruct(&self, id: &str) -> bool {
        let mut st = self.st();
        let Some(mut e) = st.ends.remove(id) else {
            return false;
        };
        stop(&mut e.child);
        let _ = std::fs::remove_dir_all(&e.dir);
        self.stop_unused_devices(&mut st);
        true
    }

    /// The endpoint's state, its counters read from the running endpoint.
    pub fn state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let st = self.st();
        let e = st
            .ends
            .get(id)
            .ok_or_else(|| VnfmError::NotFound(format!("no tunnel endpoint {id}")))?;
        self.read_state(e)
    }

    /// Endpoints whose process ended without the agent stopping it: `(instance,
    /// device, reason)`; they are forgotten (their files removed).
    pub fn reap_dead(&self) -> Vec<(String, String, String)> {
        let mut st = self.st();
        let dead: Vec<(String, String)> = st
            .ends
            .iter_mut()
            .filter_map(|(id, e)| match e.child.try_wait() {
                Ok(Some(status)) => Some((id.clone(), status.to_string())),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for (id, status) in dead {
            if let Some(e) = st.ends.remove(&id) {
                let _ = std::fs::remove_dir_all(&e.dir);
                out.push((
                    id,
                    e.spec.device.clone(),
                    format!("tunnel endpoint (pid {}) ended: {status}", e.child.id()),
                ));
            }
        }
        if !out.is_empty() {
            self.stop_unused_devices(&mut st);
        }
        out
    }

    fn nfx_bin(&self) -> Result<PathBuf, VnfmError> {
        match &self.nfx_bin {
            Some(b) => Ok(b.clone()),
            None => std::env::current_exe().map_err(unavailable),
        }
    }

    /// The device's socket, starting its process if it does not run.
    fn ensure_device(&self, st: &mut State, dev: &AcceleratorDevice) -> Result<PathBuf, VnfmError> {
        if let Some(p) = st.devices.get_mut(&dev.id) {
            if matches!(p.child.try_wait(), Ok(None)) {
                return Ok(p.socket.clone());
            }
            st.devices.remove(&dev.id);
        }
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
        let mut child = spawn(cmd, &log_file)?;
        write_private(
            &self.dir.join("accel").join(format!("{}.pid", dev.id)),
            child.id().to_string().as_bytes(),
        )?;
        let start = Instant::now();
        while !socket.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(VnfmError::Unavailable(format!(
                    "accelerator device {} exited ({status}): {}",
                    dev.id,
                    log_tail(&log_file)
                )));
            }
            if start.elapsed() > START_TIMEOUT {
                stop(&mut child);
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
            child.id(),
            dev.queue_pairs
        );
        st.devices.insert(
            dev.id.clone(),
            DeviceProcess {
                child,
                socket: socket.clone(),
            },
        );
        Ok(socket)
    }

    /// Stops the device processes no endpoint uses.
    fn stop_unused_devices(&self, st: &mut State) {
        let unused: Vec<String> = st
            .devices
            .keys()
            .filter(|d| !st.ends.values().any(|e| &e.spec.device == *d))
            .cloned()
            .collect();
        for d in unused {
            if let Some(mut p) = st.devices.remove(&d) {
                stop(&mut p.child);
                log::info!("accelerator device {d} stopped (no tunnel endpoint left)");
            }
            let _ = std::fs::remove_dir_all(self.dir.join("accel").join(&d));
            let _ = std::fs::remove_file(self.dir.join("accel").join(format!("{d}.pid")));
        }
    }

    /// Writes the endpoint's files and starts it; waits until it is ready.
    fn start_endpoint(
        &self,
        spec: &InstanceSpec,
        c: &EndpointConfig,
        socket: &Path,
        nb: &NeighborLink,
        local: Ipv4Addr,
        psk: &[u8],
    ) -> Result<Endpoint, VnfmError> {
        let dir = self.dir.join("ends").join(&spec.id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(unavailable)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(unavailable)?;
        write_private(&dir.join("ike.psk"), nfx_io::token::hex(psk).as_bytes())?;
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
        let child = spawn(cmd, &log_file)?;
        write_private(&dir.join("pid"), child.id().to_string().as_bytes())?;
        let mut e = Endpoint {
            spec: spec.clone(),
            child,
            dir,
            em,
            token,
            link: NeighborLink {
                iface: plan.tun.clone(),
                peer: plan.peer_tun,
            },
            underlay,
        };
        let start = Instant::now();
        loop {
            if self.em_status(&e).is_ok_and(|s| s.ready) {
                break;
            }
            if let Ok(Some(status)) = e.child.try_wait() {
                let why = log_tail(&log_file);
                let _ = std::fs::remove_dir_all(&e.dir);
                return Err(VnfmError::Unavailable(format!(
                    "tunnel endpoint {} exited ({status}): {why}",
                    spec.id
                )));
            }
            if start.elapsed() > START_TIMEOUT {
                let why = self.em_status(&e).err().map(|e| e.to_string());
                stop(&mut e.child);
                let tail = log_tail(&log_file);
                let _ = std::fs::remove_dir_all(&e.dir);
                return Err(VnfmError::Unavailable(format!(
                    "tunnel endpoint {} was not ready within {START_TIMEOUT:?} ({}): {tail}",
                    spec.id,
                    why.unwrap_or_else(|| "not ready".into())
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Decrypted packets arrive on the TUN from addresses routed elsewhere: a strict
        // reverse-path filter would drop them.
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv4/conf/{}/rp_filter", plan.tun),
            "0",
        );
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

    fn em_status(&self, e: &Endpoint) -> Result<EmStatus, VnfmError> {
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

    fn read_state(&self, e: &Endpoint) -> Result<InstanceState, VnfmError> {
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
                "pid": e.child.id(),
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
            stop(&mut e.child);
        }
        for p in st.devices.values_mut() {
            stop(&mut p.child);
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

/// Starts a dataplane process (tunnel endpoint or lookaside device) with its output in
/// `log_file`, at the dataplane's priority as the agent's workers are
/// ([`nfx_io::priority`]).
fn spawn(mut cmd: Command, log_file: &Path) -> Result<Child, VnfmError> {
    let log = std::fs::File::create(log_file)
        .map_err(|e| VnfmError::Unavailable(format!("{}: {e}", log_file.display())))?;
    let nice = nfx_io::priority::DATAPLANE_NICE;
    nfx_io::priority::start_at_nice(&mut cmd, nice);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(unavailable)?)
        .stderr(log)
        .spawn()
        .map_err(|e| VnfmError::Unavailable(format!("starting {cmd:?}: {e}")))?;
    if let Err(e) = nfx_io::priority::check_nice(child.id(), nice) {
        log::warn!("{cmd:?} {e}");
    }
    Ok(child)
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`]; reaps the child.
fn stop(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    // SAFETY: kill(2) of a child this agent started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while start.elapsed() < STOP_GRACE {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of a log file (for an error).
fn log_tail(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = lines.into_iter().rev().collect();
    format!("{} (see {})", tail.join(" | "), file.display())
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

    #[test]
    fn bad_ids_and_keys_are_refused_and_no_key_means_no_endpoint() {
        let dir = std::env::temp_dir().join(format!("nfx-tunnels-{}", std::process::id()));
        let t = Tunnels::new(
            "h1",
            dir.clone(),
            None,
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
        .unwrap();
        assert!(matches!(
            t.set_key("../x", &[1; 32]),
            Err(VnfmError::Invalid(_))
        ));
        assert!(matches!(
            t.set_key("e1", &[1; 8]),
            Err(VnfmError::Invalid(_))
        ));
        let mut spec = InstanceSpec {
            id: "vpn-esp-h1".into(),
            function: "esp".into(),
            device: "h1-acc0".into(),
            config: serde_json::to_value(cfg("vpn", "initiator")).unwrap(),
            throughput_gbps: 1.0,
            capacity: 1.0,
        };
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
}
