//! What survives an agent restart on the accelerator tier: every endpoint the agent ran
//! is recorded in `ends/<id>.json` ([`super::super::record`]: its spec, pid,
//! element-manager address, TUN link and underlay); a restarted agent brings each back.
//!
//! An endpoint process outlives the agent that started it (it is not killed with it), so
//! the restarted agent first tries to **adopt** it: the recorded pid still runs the
//! endpoint's own configuration file, its element manager answers with the recorded
//! token and is ready, and its transform is the recorded one. The adopted endpoint keeps
//! its IKE and ESP SAs and their sequence numbers — the tunnel never stops. Only when
//! that fails (the endpoint died with the agent or since, or does not answer) is the
//! leftover process killed and the endpoint **started again** from its record and its
//! key file: the new process negotiates new SAs by IKE with fresh nonces and key
//! material, so no key is ever used again with a restarted sequence number. A device
//! process is adopted the same way (running, its socket present); otherwise it starts
//! again with the first endpoint that needs it.

use super::process::{kill_if_ours, pid_in, Proc};
use super::{Endpoint, EndpointView, Tunnels};
use crate::hostagent::leftovers::{DEVICE_SOCKET, ENDPOINT_CONFIG};
use crate::hostagent::record::{self, NotRestored};
use crate::hostagent::steering::NeighborLink;
use crate::mediator::tunnel::EndpointConfig;
use crate::vnfm::{InstanceSpec, VnfmError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use zeroize::Zeroizing;

/// What the agent keeps of a running endpoint to bring it back after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EndpointRecord {
    /// The spec it was deployed with.
    pub spec: InstanceSpec,
    /// Its process id.
    pub pid: u32,
    /// Its element manager's address (loopback).
    pub em: SocketAddr,
    /// Its TUN device and the peer's TUN address.
    pub link: NeighborLink,
    /// The underlay's local and peer addresses.
    pub underlay: (SocketAddr, SocketAddr),
}

impl Tunnels {
    /// Brings back the device processes and endpoints an earlier agent recorded under
    /// the tunnel directory; returns those it could not (reported as lost).
    pub(super) fn restore(&self) -> Vec<NotRestored> {
        self.adopt_devices();
        let ends_dir = self.dir.join("ends");
        let mut lost = Vec::new();
        let mut recorded = BTreeSet::new();
        for file in record::files_in(&ends_dir) {
            let id = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            recorded.insert(id.clone());
            let dir = ends_dir.join(&id);
            let rec = record::load::<EndpointRecord>(&file).and_then(|r| {
                if r.spec.id == id {
                    Ok(r)
                } else {
                    Err(format!(
                        "{}: names endpoint {:?}",
                        file.display(),
                        r.spec.id
                    ))
                }
            });
            let rec = match rec {
                Ok(r) => r,
                Err(e) => {
                    stop_recorded(&dir);
                    let aside = record::set_aside(&ends_dir, &file);
                    let _ = std::fs::remove_dir_all(&dir);
                    log::error!(
                        "tunnel endpoint {id}: {e} (set aside as {})",
                        aside.display()
                    );
                    lost.push((id, "unknown".into(), format!("damaged record: {e}")));
                    continue;
                }
            };
            match self.bring_back(&rec, &dir) {
                Ok(how) => log::info!("tunnel endpoint {id}: {how} after the agent restart"),
                Err(e) => {
                    stop_recorded(&dir);
                    let _ = std::fs::remove_file(&file);
                    let _ = std::fs::remove_dir_all(&dir);
                    log::warn!("tunnel endpoint {id}: not brought back: {e}");
                    lost.push((id, rec.spec.device, format!("not restored: {e}")));
                }
            }
        }
        // Endpoint directories without a record: a start the earlier agent never
        // finished (the controller got no answer for it).
        for d in std::fs::read_dir(&ends_dir).into_iter().flatten().flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if d.path().is_dir() && name != "damaged" && !recorded.contains(&name) {
                stop_recorded(&d.path());
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
        let mut st = self.st();
        self.stop_unused_devices(&mut st);
        lost
    }

    /// Adopts the running device process of every configured device; kills the others
    /// an earlier agent recorded.
    fn adopt_devices(&self) {
        let accel = self.dir.join("accel");
        let mut st = self.st();
        for d in std::fs::read_dir(&accel).into_iter().flatten().flatten() {
            let p = d.path();
            if p.extension().is_none_or(|x| x != "pid") {
                continue;
            }
            let id = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let socket = accel.join(&id).join(DEVICE_SOCKET);
            let adopted = pid_in(&p)
                .filter(|_| self.devices.contains_key(&id) && socket.exists())
                .and_then(|pid| Proc::adopt(pid, &socket));
            match adopted {
                Some(proc) => {
                    log::info!("accelerator device {id}: adopted (pid {})", proc.id());
                    st.devices.insert(id, super::DeviceProcess { proc, socket });
                }
                None => {
                    if let Some(pid) = pid_in(&p) {
                        kill_if_ours(pid, &socket);
                    }
                    let _ = std::fs::remove_file(&p);
                    let _ = std::fs::remove_dir_all(accel.join(&id));
                }
            }
        }
    }

    /// Adopts the endpoint of `rec` or starts it again; says which.
    fn bring_back(&self, rec: &EndpointRecord, dir: &Path) -> Result<&'static str, VnfmError> {
        let spec = &rec.spec;
        if !self.devices.contains_key(&spec.device) {
            return Err(VnfmError::NotFound(format!(
                "{} is no longer an accelerator device of host {}",
                spec.device, self.host
            )));
        }
        if let Some(e) = self.adopt(rec, dir) {
            self.st().ends.insert(spec.id.clone(), e);
            return Ok("adopted");
        }
        stop_recorded(dir);
        kill_if_ours(rec.pid, &dir.join(ENDPOINT_CONFIG));
        let psk = std::fs::read_to_string(dir.join("ike.psk"))
            .map(|s| Zeroizing::new(s.trim().to_string()))
            .map_err(|e| VnfmError::Unavailable(format!("its key file: {e}")))?;
        let (c, dev, nb) = self.prepare(spec)?;
        self.st().busy.insert(spec.id.clone(), spec.device.clone());
        let started = self.launch(spec, &c, &dev, &nb, &psk);
        self.finish_start(spec, started).map(|_| "started again")
    }

    /// The endpoint of `rec` if its process still runs its configuration and answers.
    fn adopt(&self, rec: &EndpointRecord, dir: &Path) -> Option<Endpoint> {
        let proc = Proc::adopt(rec.pid, &dir.join(ENDPOINT_CONFIG))?;
        let token = std::fs::read_to_string(dir.join("em.token")).ok()?;
        let c: EndpointConfig = serde_json::from_value(rec.spec.config.clone()).ok()?;
        let view = EndpointView {
            spec: rec.spec.clone(),
            dir: dir.to_path_buf(),
            em: rec.em,
            token: Zeroizing::new(token.trim().to_string()),
            link: rec.link.clone(),
            underlay: rec.underlay,
            pid: proc.id(),
        };
        let status = self.em_status(&view).ok()?;
        (status.ready && status.alg == c.alg).then_some(Endpoint { view, proc })
    }
}

/// Kills the process an endpoint directory's pid file names (if it runs that
/// endpoint's configuration).
fn stop_recorded(dir: &Path) {
    if let Some(pid) = pid_in(&dir.join("pid")) {
        kill_if_ours(pid, &dir.join(ENDPOINT_CONFIG));
    }
}
