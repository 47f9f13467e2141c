//! The transcoders a host agent runs: each `transcode` instance placed on one of the
//! host's software devices is an `nfx transcode --config FILE` process of its own (not a
//! node of the device's worker), started by the agent in its host's namespace and
//! supervised like a worker: its pid is recorded, a transcoder that ends without being
//! stopped is reported lost, and destroying the instance stops it and its `ffmpeg`
//! child. `ffmpeg` dies with its `nfx transcode` (`PR_SET_PDEATHSIG`), so no encoder
//! outlives its supervisor. A restarted agent stops the transcoders an earlier agent
//! left (their pid files, checked against the command line it starts) and reports
//! them lost, so the controller deploys them again.
//!
//! A transcoder is an L4 endpoint: it receives the stream addressed to its host at its
//! `listen_port` — or, transparently, the stream a source addresses to its `output`,
//! which the agent's steering redirects into it on this host — and sends a new stream to
//! its `output`, which the service's selector names (docs/descriptors.md, "The
//! transcode function").
//!
//! Files, under the agent's `transcode/` directory, one directory per instance (its id
//! restricted to a file name): `transcode.yaml` (the config), `pid`, `spec.json` (the
//! instance as deployed), `transcode.log` (the process's output) and `ffmpeg.log`.

use super::leftovers::{self, PidFile};
use super::power::ProcessTree;
use crate::vnfm::{InstanceSpec, InstanceState, VnfmError};
use nfx_vnf::transcode::TranscodeConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a transcoder may take to have its encoder listening.
const START: Duration = Duration::from_secs(5);
/// How long a transcoder may take to stop after SIGTERM before it is killed (it gives
/// ffmpeg 3 s).
const STOP: Duration = Duration::from_secs(5);
/// The configuration file in an instance's directory.
const CONFIG: &str = "transcode.yaml";

/// One running transcoder.
struct Running {
    spec: InstanceSpec,
    version: u64,
    child: Child,
}

/// The host's transcoders.
pub struct Transcoders {
    dir: PathBuf,
    nfx_bin: Option<PathBuf>,
    devices: BTreeSet<String>,
    running: Mutex<BTreeMap<String, Running>>,
}

/// A transcoder that ended without being stopped: `(instance, device, reason)`.
pub type Lost = (String, String, String);

impl Transcoders {
    /// The transcoders of an agent whose software devices are `devices`, with files
    /// under `dir`; stops those an earlier agent left there and returns them as lost.
    pub fn new(
        dir: PathBuf,
        nfx_bin: Option<PathBuf>,
        devices: BTreeSet<String>,
    ) -> anyhow::Result<(Self, Vec<Lost>)> {
        std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        let mut lost = Vec::new();
        for e in std::fs::read_dir(&dir)?.flatten() {
            let d = e.path();
            if !d.is_dir() {
                continue;
            }
            let id = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = leftovers::leftover(&pid_file(&d), cmdline) {
                stop_pid(pid as u32, None);
                let device = std::fs::read(d.join("spec.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<InstanceSpec>(&b).ok())
                    .map(|s| s.device)
                    .unwrap_or_default();
                let reason =
                    format!("transcoder {id} (pid {pid}) was stopped: the agent restarted");
                lost.push((id, device, reason));
            }
            let _ = std::fs::remove_dir_all(&d);
        }
        let t = Transcoders {
            dir,
            nfx_bin,
            devices,
            running: Mutex::default(),
        };
        Ok((t, lost))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `id` is one of the host's transcoders.
    pub fn holds(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Ids of the running transcoders.
    pub fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Starts the transcoder of `spec` (idempotent: the same spec twice is one
    /// transcoder) and waits until its encoder listens.
    pub fn deploy(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        let mut g = self.lock();
        if let Some(r) = g.get_mut(&spec.id) {
            return if r.spec == *spec {
                Ok(state(r))
            } else {
                Err(VnfmError::Conflict(format!(
                    "instance {:?} exists with another spec",
                    spec.id
                )))
            };
        }
        if !self.devices.contains(&spec.device) {
            return Err(VnfmError::NotFound(format!(
                "device {:?} is not a software device of this host",
                spec.device
            )));
        }
        let cfg = TranscodeConfig::from_function_config(&spec.config)
            .map_err(|e| VnfmError::Invalid(format!("{}: config: {e}", spec.id)))?;
        let dir = self.instance_dir(&spec.id)?;
        let child = self.start(&dir, spec, &cfg)?;
        let mut r = Running {
            spec: spec.clone(),
            version: 1,
            child,
        };
        let st = state(&mut r);
        g.insert(spec.id.clone(), r);
        Ok(st)
    }

    /// Restarts transcoder `id` with `config` (its stream pauses while the encoder
    /// starts again); a refused config leaves the running one as it was.
    pub fn configure(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        let mut g = self.lock();
        let r = g
            .get_mut(id)
            .ok_or_else(|| VnfmError::NotFound(format!("instance {id:?}")))?;
        if r.spec.config == *config {
            return Ok(state(r));
        }
        let cfg = TranscodeConfig::from_function_config(config)
            .map_err(|e| VnfmError::Invalid(format!("{id}: config: {e}")))?;
        stop_child(&mut r.child);
        let dir = self.dir.join(id);
        let mut spec = r.spec.clone();
        spec.config = config.clone();
        match self.start(&dir, &spec, &cfg) {
            Ok(child) => {
                r.child = child;
                r.spec = spec;
                r.version = r.version.saturating_add(1);
                Ok(state(r))
            }
            Err(e) => {
                g.remove(id);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Stops transcoder `id` and its encoder and removes its files.
    pub fn destruct(&self, id: &str) -> Result<(), VnfmError> {
        let mut r = self
            .lock()
            .remove(id)
            .ok_or_else(|| VnfmError::NotFound(format!("instance {id:?}")))?;
        stop_child(&mut r.child);
        let _ = std::fs::remove_dir_all(self.dir.join(id));
        Ok(())
    }

    /// The state of transcoder `id`.
    pub fn state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        let mut g = self.lock();
        let r = g
            .get_mut(id)
            .ok_or_else(|| VnfmError::NotFound(format!("instance {id:?}")))?;
        Ok(state(r))
    }

    /// Finds the transcoders whose process ended although nobody stopped it: forgets
    /// them (their directory stays, with its logs, until the next agent) and returns
    /// them as lost.
    pub fn reap_dead(&self) -> Vec<Lost> {
        let mut g = self.lock();
        let mut out = Vec::new();
        g.retain(|id, r| match r.child.try_wait() {
            Ok(None) => true,
            ended => {
                let how = match ended {
                    Ok(Some(s)) => s.to_string(),
                    _ => "not waitable".to_string(),
                };
                let reason = format!(
                    "transcoder {id} (pid {}) ended: {how}; see {}",
                    r.child.id(),
                    self.dir.join(id).join("ffmpeg.log").display()
                );
                out.push((id.clone(), r.spec.device.clone(), reason));
                false
            }
        });
        out
    }

    /// The running transcoders as the power agent meters them.
    pub fn processes(&self) -> Vec<ProcessTree> {
        self.lock()
            .values()
            .map(|r| ProcessTree {
                instance: r.spec.id.clone(),
                device: r.spec.device.clone(),
                pid: r.child.id(),
                reserved_cores: r.spec.capacity,
            })
            .collect()
    }

    /// The directory of instance `id`, created; the id must be a plain file name.
    fn instance_dir(&self, id: &str) -> Result<PathBuf, VnfmError> {
        if !nfx_vnf::transcode::plain_name(id, 128) {
            return Err(VnfmError::Invalid(format!(
                "instance id {id:?}: a transcoder's id names its directory (A-Z a-z 0-9 - _ .)"
            )));
        }
        let dir = self.dir.join(id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| unavailable(&dir, e))?;
        Ok(dir)
    }

    /// Writes the instance's files in `dir` and starts `nfx transcode`; returns once its
    /// encoder listens, or kills it and says why.
    fn start(
        &self,
        dir: &Path,
        spec: &InstanceSpec,
        cfg: &TranscodeConfig,
    ) -> Result<Child, VnfmError> {
        let file = dir.join(CONFIG);
        // JSON, which is YAML: `nfx transcode` reads it as `{"transcode": {...}}` (a YAML
        // serializer would write the enum as a `!transcode` tag).
        let text = serde_json::to_string(&nfx_vnf::transcode::ProcessSpec::Transcode(cfg.clone()))
            .map_err(|e| VnfmError::Unavailable(e.to_string()))?;
        std::fs::write(&file, text).map_err(|e| unavailable(&file, e))?;
        let spec_json = serde_json::to_vec(spec).map_err(|e| unavailable(dir, e))?;
        std::fs::write(dir.join("spec.json"), spec_json).map_err(|e| unavailable(dir, e))?;
        let bin = match &self.nfx_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(|e| unavailable(dir, e))?,
        };
        let log_path = dir.join("transcode.log");
        let log = std::fs::File::create(&log_path).map_err(|e| unavailable(&log_path, e))?;
        let mut child = Command::new(&bin)
            .arg("transcode")
            .arg("--config")
            .arg(&file)
            .arg("--log")
            .arg(dir.join("ffmpeg.log"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| unavailable(&log_path, e))?)
            .stderr(log)
            .spawn()
            .map_err(|e| unavailable(&bin, e))?;
        let pid_path = dir.join("pid");
        if let Err(e) = std::fs::write(&pid_path, child.id().to_string()) {
            stop_child(&mut child);
            return Err(unavailable(&pid_path, e));
        }
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(VnfmError::Unavailable(format!(
                    "transcoder {} exited with {status}: {}",
                    spec.id,
                    tail(&log_path)
                )));
            }
            let encoders = nfx_io::cpu::child_pids(child.id()).unwrap_or_default();
            if encoders
                .iter()
                .any(|&p| udp_bound(p, cfg.listen_port).unwrap_or(false))
            {
                return Ok(child);
            }
            if t0.elapsed() > START {
                stop_child(&mut child);
                return Err(VnfmError::Unavailable(format!(
                    "transcoder {}: no encoder listening on UDP port {} within {START:?}: {}",
                    spec.id,
                    cfg.listen_port,
                    tail(&log_path)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Transcoders {
    /// The transcoders outlive the agent's object only as leftovers of a killed agent:
    /// an agent that shuts down in order stops them.
    fn drop(&mut self) {
        for r in self.lock().values_mut() {
            stop_child(&mut r.child);
        }
    }
}

/// The instance's state: running while its process is, with its processes' CPU time.
fn state(r: &mut Running) -> InstanceState {
    let pid = r.child.id();
    let running = matches!(r.child.try_wait(), Ok(None));
    let encoders = nfx_io::cpu::child_pids(pid).unwrap_or_default();
    let cpu_s: f64 = std::iter::once(pid)
        .chain(encoders.iter().copied())
        .filter_map(|p| nfx_io::cpu::process_cpu_time(p).ok())
        .map(|d| d.as_secs_f64())
        .sum();
    InstanceState {
        id: r.spec.id.clone(),
        function: r.spec.function.clone(),
        device: r.spec.device.clone(),
        status: if running { "running" } else { "ended" }.into(),
        config_version: r.version,
        flows: 0,
        packets: 0,
        cpu_pct: 0.0,
        detail: serde_json::json!({
            "pid": pid,
            "encoder_pids": encoders,
            "cpu_s": cpu_s,
        }),
    }
}

/// How the agent started the transcoder of directory `dir` (for a leftover's check).
fn pid_file(dir: &Path) -> PidFile {
    PidFile {
        file: dir.join("pid"),
        subcommand: &["transcode"],
        flag: "--config",
        path: dir.join(CONFIG),
    }
}

/// `/proc/<pid>/cmdline`.
fn cmdline(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// Stops a transcoder: SIGTERM (it stops its encoder), SIGKILL after [`STOP`], reaped.
fn stop_child(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) {
        stop_pid(child.id(), Some(child));
    }
    let _ = child.wait();
}

/// SIGTERM to `pid`, then SIGKILL after [`STOP`]; waits through `child` when it is ours.
/// Its encoders die with it (`PR_SET_PDEATHSIG`); any still there after it are killed.
fn stop_pid(pid: u32, mut child: Option<&mut Child>) {
    let encoders = nfx_io::cpu::child_pids(pid).unwrap_or_default();
    let gone = |child: &mut Option<&mut Child>| match child {
        Some(c) => !matches!(c.try_wait(), Ok(None)),
        None => !Path::new(&format!("/proc/{pid}")).exists(),
    };
    // SAFETY: kill(2) on a pid this agent started (its child, or checked against the
    // command line it starts).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let t0 = Instant::now();
    while !gone(&mut child) && t0.elapsed() < STOP {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !gone(&mut child) {
        // SAFETY: as above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    for e in encoders {
        let comm = std::fs::read_to_string(format!("/proc/{e}/comm")).unwrap_or_default();
        if comm.trim_end() == "ffmpeg" {
            // SAFETY: the encoder this transcoder started (its name checked).
            unsafe { libc::kill(e as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Whether process `pid` (in its network namespace) has a UDP socket bound to `port`
/// (`/proc/<pid>/net/udp`).
fn udp_bound(pid: u32, port: u16) -> std::io::Result<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/udp"))?;
    Ok(udp_ports(&text).contains(&port))
}

/// The local ports of a `/proc/net/udp` table.
fn udp_ports(text: &str) -> Vec<u16> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let local = l.split_whitespace().nth(1)?;
            u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()
        })
        .collect()
}

/// The last lines of a log, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let last = lines[lines.len().saturating_sub(5)..].join(" | ");
    if last.is_empty() {
        format!("{} is empty", path.display())
    } else {
        last
    }
}

fn unavailable(path: &Path, e: impl std::fmt::Display) -> VnfmError {
    VnfmError::Unavailable(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, device: &str, config: serde_json::Value) -> InstanceSpec {
        InstanceSpec {
            id: id.into(),
            function: "transcode".into(),
            device: device.into(),
            config,
            throughput_gbps: 0.0,
            capacity: 1.0,
        }
    }

    fn config() -> serde_json::Value {
        serde_json::json!({"listen_port": 5000, "output": "127.0.0.1:6000", "bitrate_kbps": 300})
    }

    #[test]
    fn the_config_file_is_what_nfx_transcode_reads() {
        let cfg = TranscodeConfig::from_function_config(&config()).unwrap();
        let text = serde_json::to_string(&nfx_vnf::transcode::ProcessSpec::Transcode(cfg.clone()))
            .unwrap();
        let nfx_vnf::transcode::ProcessSpec::Transcode(back) =
            nfx_vnf::transcode::ProcessSpec::from_yaml(&text).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn proc_net_udp_ports_are_read() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                 \x20 12: 00000000:1388 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 0\n\
                 \x20 13: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 0\n";
        assert_eq!(udp_ports(t), [5000, 53]);
        assert!(udp_ports("header only\n").is_empty());
    }

    /// Refusals leave nothing behind: no process, no entry; a dead transcoder is
    /// reported lost once, with its device, and forgotten.
    #[test]
    fn bookkeeping_refuses_bad_requests_and_reports_the_dead_once() {
        let dir = std::env::temp_dir().join(format!("nfx-xcode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // `false` stands in for the nfx binary: it exits at once.
        let (t, lost) = Transcoders::new(
            dir.clone(),
            Some("/bin/false".into()),
            BTreeSet::from(["sw0".to_string()]),
        )
        .unwrap();
        assert!(lost.is_empty());
        let e = t.deploy(&spec("a", "nope", config())).unwrap_err();
        assert!(matches!(e, VnfmError::NotFound(_)), "{e}");
        let mut bad = config();
        bad["bitrate_kbps"] = 1.into();
        let e = t.deploy(&spec("a", "sw0", bad)).unwrap_err().to_string();
        assert!(e.contains("transcode.field `bitrate_kbps`"), "{e}");
        let e = t.deploy(&spec("../a", "sw0", config())).unwrap_err();
        assert!(matches!(e, VnfmError::Invalid(_)), "{e}");
        let e = t
            .deploy(&spec("a", "sw0", config()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exited with"), "{e}");
        assert!(t.ids().is_empty() && t.processes().is_empty());

        // A running one (`sleep` standing in for the process), then its death.
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        t.lock().insert(
            "b".into(),
            Running {
                spec: spec("b", "sw0", config()),
                version: 1,
                child,
            },
        );
        assert!(t.holds("b"));
        assert_eq!(t.state("b").unwrap().status, "running");
        assert_eq!(t.processes()[0].pid, pid);
        assert!(t.reap_dead().is_empty());
        // SAFETY: our own child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        let t0 = Instant::now();
        let mut lost = Vec::new();
        while lost.is_empty() && t0.elapsed() < Duration::from_secs(5) {
            lost = t.reap_dead();
        }
        assert_eq!(lost.len(), 1);
        assert_eq!((lost[0].0.as_str(), lost[0].1.as_str()), ("b", "sw0"));
        assert!(lost[0].2.contains("signal: 9"), "{}", lost[0].2);
        assert!(t.reap_dead().is_empty() && !t.holds("b"));
        assert!(matches!(t.destruct("b"), Err(VnfmError::NotFound(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
