//! The power agent's knobs as an API call (`POST /agent/v1/knobs`): set one worker's poll
//! mode, CPU bandwidth limit (`cpu.max`, or the v1 CFS quota) or affinity, and answer
//! with what the kernel reports afterwards. The caller names a worker by its device id
//! only; the cgroup is always `nfx/<device>` under the cpu controller this agent found
//! (the name checked by `nfx_io::cgroup`), and every value is bounded before it reaches
//! the kernel.

use super::power::{thread_knobs, ThreadKnobs};
use crate::vnfm::local::WorkerProcess;
use nfx_energy::knobs::Actuator;
use nfx_energy::Target;
use nfx_io::PollMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Smallest CPU limit accepted, in cores (the kernel's 1 ms quota per 100 ms period).
pub const MIN_CPU_CORES: f64 = 0.01;
/// Most CPUs an affinity request may list.
pub const MAX_AFFINITY_CPUS: usize = 1024;

/// A knob setting for one worker (`POST /agent/v1/knobs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnobRequest {
    /// The worker's device id (a software device of this host with a running worker).
    pub device: String,
    /// What to set.
    pub setting: KnobSetting,
}

/// One knob and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "knob", content = "value")]
pub enum KnobSetting {
    /// Poll mode of every dataplane thread of the worker.
    Poll(PollMode),
    /// CPU bandwidth limit of the worker in cores (0.35 = 35 % of one core, at most its
    /// device's cores); `null` lifts it.
    CpuMax(Option<f64>),
    /// CPUs the worker's threads may run on.
    Affinity(Vec<usize>),
}

impl KnobSetting {
    /// Short text for logs and operation records (`cpu.max 0.35 core`, ...).
    pub fn label(&self) -> String {
        match self {
            KnobSetting::Poll(m) => format!("poll {}", m.as_str()),
            KnobSetting::CpuMax(Some(c)) => format!("cpu.max {c:.2} core"),
            KnobSetting::CpuMax(None) => "cpu.max unlimited".into(),
            KnobSetting::Affinity(c) => format!("affinity {c:?}"),
        }
    }
}

/// The worker's knobs as the kernel reports them after a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobAnswer {
    /// Device id.
    pub device: String,
    /// The worker's process id.
    pub pid: u32,
    /// The worker's cgroup directory, once a CPU limit was set on it.
    pub cgroup: Option<String>,
    /// Its limit files as read back (`cpu.max=35000 100000`, or the v1 pair).
    pub cpu_limit: Option<String>,
    /// Each dataplane thread: poll mode, affinity, CPU limit in cores.
    pub threads: Vec<ThreadKnobs>,
}

/// Why a knob call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobError {
    /// A value out of bounds or a malformed request (400).
    #[error("{0}")]
    Invalid(String),
    /// No such worker on this host (404).
    #[error("{0}")]
    NotFound(String),
    /// The kernel or the worker refused (503), e.g. no writable cpu cgroup controller.
    #[error("{0}")]
    Failed(String),
}

/// Checks `req` against the worker's device `cores` and the `usable` CPUs.
pub fn validate(req: &KnobRequest, cores: u32, usable: &[usize]) -> Result<(), KnobError> {
    match &req.setting {
        KnobSetting::Poll(_) | KnobSetting::CpuMax(None) => Ok(()),
        KnobSetting::CpuMax(Some(c)) => {
            let hi = f64::from(cores.max(1));
            if c.is_finite() && (MIN_CPU_CORES..=hi).contains(c) {
                Ok(())
            } else {
                Err(KnobError::Invalid(format!(
                    "setting.value: a CPU limit of {c} cores is outside {MIN_CPU_CORES}..={hi} (device {})",
                    req.device
                )))
            }
        }
        KnobSetting::Affinity(cpus) => {
            if cpus.is_empty() || cpus.len() > MAX_AFFINITY_CPUS {
                return Err(KnobError::Invalid(format!(
                    "setting.value: an affinity lists 1..={MAX_AFFINITY_CPUS} CPUs, got {}",
                    cpus.len()
                )));
            }
            match cpus.iter().find(|c| !usable.contains(c)) {
                Some(c) => Err(KnobError::Invalid(format!(
                    "setting.value: CPU {c} is not usable here (usable: {usable:?})"
                ))),
                None => Ok(()),
            }
        }
    }
}

/// Applies `req` to its worker (one of `workers`, whose devices own `cores`) with `act`
/// and reads the result back from the kernel.
pub fn apply(
    act: &mut Actuator,
    workers: &[WorkerProcess],
    cores: &BTreeMap<String, u32>,
    req: &KnobRequest,
) -> Result<KnobAnswer, KnobError> {
    let dev_cores = *cores.get(&req.device).ok_or_else(|| {
        KnobError::NotFound(format!("no software device {:?} on this host", req.device))
    })?;
    let w = workers
        .iter()
        .find(|w| w.device == req.device)
        .ok_or_else(|| {
            KnobError::NotFound(format!(
                "device {} runs no worker (no instance deployed)",
                req.device
            ))
        })?;
    let usable = nfx_io::affinity::usable_cpus().unwrap_or_default();
    validate(req, dev_cores, &usable)?;
    let target = [Target::Process { pid: w.pid }];
    let failed =
        |e: String| KnobError::Failed(format!("{}: {}: {e}", req.device, req.setting.label()));
    match &req.setting {
        KnobSetting::Poll(m) => act
            .set_poll(&w.socket, *m, None)
            .map_err(|e| failed(format!("{e:#}")))?,
        KnobSetting::CpuMax(c) => {
            if let Some(why) = act.cgroup_error() {
                return Err(failed(format!("no CPU limit possible on this host: {why}")));
            }
            act.limit_cpu(&req.device, &target, *c)
                .map_err(|e| failed(e.to_string()))?
        }
        KnobSetting::Affinity(cpus) => act.pin(&target, cpus).map_err(|e| failed(e.to_string()))?,
    }
    let group = act.group(&req.device);
    let stats = nfx_proto::Client::connect(&w.socket)
        .and_then(|mut c| c.stats())
        .map_err(|e| failed(format!("reading back: {e}")))?;
    Ok(KnobAnswer {
        device: req.device.clone(),
        pid: w.pid,
        cgroup: group.map(|g| g.path().display().to_string()),
        cpu_limit: group.and_then(|g| g.limit_text().ok()),
        threads: thread_knobs(
            &stats,
            nfx_io::cgroup::CpuController::detect().ok().as_ref(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(setting: KnobSetting) -> KnobRequest {
        KnobRequest {
            device: "h1-sw0".into(),
            setting,
        }
    }

    #[test]
    fn values_are_bounded_before_they_reach_the_kernel() {
        let usable = [0, 1];
        assert!(validate(&req(KnobSetting::CpuMax(Some(0.35))), 1, &usable).is_ok());
        assert!(validate(&req(KnobSetting::CpuMax(None)), 1, &usable).is_ok());
        for bad in [0.0, 0.001, 1.5, f64::NAN, f64::INFINITY, -1.0] {
            let e = validate(&req(KnobSetting::CpuMax(Some(bad))), 1, &usable).unwrap_err();
            assert!(matches!(e, KnobError::Invalid(_)), "{bad}: {e:?}");
        }
        assert!(validate(&req(KnobSetting::CpuMax(Some(1.5))), 2, &usable).is_ok());
        assert!(validate(&req(KnobSetting::Affinity(vec![1])), 1, &usable).is_ok());
        let e = validate(&req(KnobSetting::Affinity(vec![7])), 1, &usable).unwrap_err();
        assert!(e.to_string().contains("CPU 7"), "{e}");
        assert!(validate(&req(KnobSetting::Affinity(vec![])), 1, &usable).is_err());
        let many = vec![0; MAX_AFFINITY_CPUS + 1];
        assert!(validate(&req(KnobSetting::Affinity(many)), 1, &usable).is_err());
    }

    #[test]
    fn requests_are_typed_and_unknown_devices_are_not_found() {
        let r: KnobRequest =
            serde_json::from_str(r#"{"device":"h1-sw0","setting":{"knob":"cpu_max","value":0.5}}"#)
                .unwrap();
        assert_eq!(r.setting, KnobSetting::CpuMax(Some(0.5)));
        let r: KnobRequest =
            serde_json::from_str(r#"{"device":"d","setting":{"knob":"poll","value":"busy"}}"#)
                .unwrap();
        assert_eq!(r.setting.label(), "poll busy");
        for bad in [
            r#"{"device":"d","setting":{"knob":"poll","value":"spin"}}"#,
            r#"{"device":"d","setting":{"knob":"cgroup_path","value":"/etc"}}"#,
            r#"{"device":"d","setting":{"knob":"cpu_max","value":0.5},"path":"/x"}"#,
        ] {
            assert!(serde_json::from_str::<KnobRequest>(bad).is_err(), "{bad}");
        }
        let mut act = Actuator::with(
            Err("none".into()),
            nfx_io::cpufreq::CpuFreq::at(std::path::Path::new("/nonexistent")),
        );
        let cores = BTreeMap::from([("h1-sw0".to_string(), 1)]);
        let e = apply(&mut act, &[], &cores, &req(KnobSetting::CpuMax(Some(0.5)))).unwrap_err();
        assert!(
            matches!(e, KnobError::NotFound(_)) && e.to_string().contains("no worker"),
            "{e}"
        );
        let mut other = req(KnobSetting::CpuMax(None));
        other.device = "../../etc".into();
        let e = apply(&mut act, &[], &cores, &other).unwrap_err();
        assert!(matches!(e, KnobError::NotFound(_)), "{e}");
    }
}
