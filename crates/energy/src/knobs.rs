//! The power agent's actuators, as library calls the host agent exposes:
//!
//! * **poll mode** of a dataplane worker (busy, adaptive, interrupt), live through the
//!   instance's control socket;
//! * **consolidation**: the cores a worker's threads may run on (sched_setaffinity), so
//!   that idle cores stay idle;
//! * **speed**: a fraction of full speed, applied as a CPU frequency ceiling through
//!   cpufreq (`scaling_max_freq`) where the host has it, else as a CPU bandwidth limit
//!   (cgroup `cpu.max`, or `cpu.cfs_quota_us` on hybrid v1 hosts) on the worker's
//!   threads in the nfx-owned cgroup `nfx/<name>`.
//!
//! Every setting is read back from the kernel ([`Actuator::read_back`]).

use crate::meter::Target;
use nfx_io::cgroup::{CpuController, CpuGroup};
use nfx_io::cpufreq::CpuFreq;
use nfx_io::PollMode;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// How a speed setting was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeedMechanism {
    /// A cpufreq frequency ceiling on the worker's cores.
    Frequency,
    /// A CFS bandwidth limit (duty cycle) on the worker's threads.
    CpuQuota,
}

/// A knob's state as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnobState {
    /// Worker (group) name.
    pub name: String,
    /// Cores each of its threads may run on.
    pub affinity: BTreeMap<u32, Vec<usize>>,
    /// CPU quota in cores (0.3 = 30 % of one core), `None` when unlimited or no group.
    pub quota_cores: Option<f64>,
    /// Frequency ceiling of its first core, MHz, where cpufreq exists.
    pub max_mhz: Option<u32>,
}

/// The actuators of one host.
pub struct Actuator {
    cgroups: Result<CpuController, String>,
    freq: CpuFreq,
    groups: BTreeMap<String, CpuGroup>,
}

impl Default for Actuator {
    fn default() -> Self {
        Self::new()
    }
}

fn threads_of(targets: &[Target]) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for t in targets {
        match *t {
            Target::Thread { pid, tid } => v.push((pid, tid)),
            Target::Process { pid } => {
                for tid in nfx_io::cpu::thread_ids(pid).unwrap_or_default() {
                    v.push((pid, tid));
                }
            }
        }
    }
    v
}

impl Actuator {
    /// Finds this host's cgroup cpu controller and cpufreq (either may be missing).
    pub fn new() -> Self {
        Self::with(
            CpuController::detect().map_err(|e| e.to_string()),
            CpuFreq::system(),
        )
    }

    /// An actuator over given controllers (tests).
    pub fn with(cgroups: Result<CpuController, String>, freq: CpuFreq) -> Self {
        Self {
            cgroups,
            freq,
            groups: BTreeMap::new(),
        }
    }

    /// The mechanism [`Actuator::set_speed`] uses on this host.
    pub fn speed_mechanism(&self) -> SpeedMechanism {
        if self.freq.available() {
            SpeedMechanism::Frequency
        } else {
            SpeedMechanism::CpuQuota
        }
    }

    /// Sets the poll mode of a dataplane instance's worker (all workers when `None`).
    pub fn set_poll(
        &self,
        socket: &Path,
        mode: PollMode,
        worker: Option<usize>,
    ) -> anyhow::Result<()> {
        nfx_proto::Client::connect(socket)?.poll(mode, worker)?;
        Ok(())
    }

    /// Lets the threads of `targets` run only on `cpus`.
    pub fn pin(&self, targets: &[Target], cpus: &[usize]) -> io::Result<()> {
        for (_, tid) in threads_of(targets) {
            match nfx_io::affinity::set_affinity(tid, cpus) {
                Ok(()) => {}
                // A thread that exited meanwhile has nothing to pin.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs worker `name` (its `targets`) at `fraction` (0 < f ≤ 1) of full speed on
    /// `cores` cores' worth of CPU: a frequency ceiling of `fraction` × the hardware
    /// maximum on `cpus` where cpufreq exists, else a CPU quota of `fraction × cores`.
    /// `fraction` ≥ 1 lifts the limit.
    pub fn set_speed(
        &mut self,
        name: &str,
        targets: &[Target],
        fraction: f64,
        cores: f64,
        cpus: &[usize],
    ) -> io::Result<SpeedMechanism> {
        let f = fraction.clamp(0.01, 1.0);
        if self.freq.available() {
            for &c in cpus {
                let cpu = c as u32;
                let (_, hi) = self.freq.limits_khz(cpu)?;
                self.freq.set_max_khz(cpu, (hi as f64 * f) as u64)?;
            }
            return Ok(SpeedMechanism::Frequency);
        }
        let limit = (f < 1.0).then_some(f * cores);
        self.limit_cpu(name, targets, limit)?;
        Ok(SpeedMechanism::CpuQuota)
    }

    /// Limits worker `name` to `cores` cores of CPU time (`None`: unlimited), moving its
    /// threads into `nfx/<name>` on first use (threads started since are added too).
    pub fn limit_cpu(
        &mut self,
        name: &str,
        targets: &[Target],
        cores: Option<f64>,
    ) -> io::Result<()> {
        let ctl = self
            .cgroups
            .as_ref()
            .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.clone()))?;
        if !self.groups.contains_key(name) {
            self.groups.insert(name.to_string(), ctl.create(name)?);
        }
        let g = self.groups.get_mut(name).expect("inserted above");
        let inside = g.threads().unwrap_or_default();
        for t in targets {
            match *t {
                Target::Process { pid } => g.add_process(pid)?,
                Target::Thread { pid, tid } if !inside.contains(&tid) => g.add_thread(pid, tid)?,
                Target::Thread { .. } => {}
            }
        }
        g.set_cores(cores)
    }

    /// Lifts every setting of worker `name`: its threads go back to their cgroups and
    /// the group is removed.
    pub fn release(&mut self, name: &str) -> io::Result<()> {
        match self.groups.remove(name) {
            Some(g) => g.remove(),
            None => Ok(()),
        }
    }

    /// The cgroup nfx made for worker `name`, if a CPU limit was ever set on it.
    pub fn group(&self, name: &str) -> Option<&CpuGroup> {
        self.groups.get(name)
    }

    /// Why a CPU limit cannot be applied on this host (no cpu cgroup controller, or
    /// none this process can see), if so.
    pub fn cgroup_error(&self) -> Option<&str> {
        self.cgroups.as_ref().err().map(String::as_str)
    }

    /// What the kernel reports for worker `name`'s threads.
    pub fn read_back(&self, name: &str, targets: &[Target]) -> io::Result<KnobState> {
        let mut affinity = BTreeMap::new();
        for (_, tid) in threads_of(targets) {
            if let Ok(a) = nfx_io::affinity::affinity(tid) {
                affinity.insert(tid, a);
            }
        }
        let quota_cores = match self.groups.get(name) {
            Some(g) => {
                let (q, p) = g.limit()?;
                q.map(|q| q.as_secs_f64() / p.as_secs_f64())
            }
            None => None,
        };
        let max_mhz = self
            .freq
            .cpus()
            .first()
            .and_then(|&c| self.freq.max_khz(c).ok())
            .map(|k| (k / 1000) as u32);
        Ok(KnobState {
            name: name.to_string(),
            affinity,
            quota_cores,
            max_mhz,
        })
    }
}

impl Drop for Actuator {
    fn drop(&mut self) {
        let names: Vec<String> = self.groups.keys().cloned().collect();
        for n in names {
            let _ = self.release(&n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cgroups_a_limit_is_a_clear_error_and_cpufreq_is_preferred() {
        let mut a = Actuator::with(
            Err("no cpu cgroup controller".into()),
            CpuFreq::at(Path::new("/nonexistent")),
        );
        assert_eq!(a.speed_mechanism(), SpeedMechanism::CpuQuota);
        let e = a
            .limit_cpu("x", &[Target::Process { pid: 1 }], Some(0.5))
            .unwrap_err();
        assert!(e.to_string().contains("no cpu cgroup"), "{e}");
        // Releasing a worker that has no group is a no-op.
        assert!(a.release("x").is_ok());
    }

    #[test]
    fn pinning_reads_back() {
        let cpus = nfx_io::affinity::usable_cpus().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(nfx_io::cpu::gettid()).unwrap();
            let _ = done_rx.recv();
        });
        let t = Target::Thread {
            pid: std::process::id(),
            tid: rx.recv().unwrap(),
        };
        let a = Actuator::with(Err("none".into()), CpuFreq::at(Path::new("/nonexistent")));
        a.pin(&[t], &cpus[..1]).unwrap();
        let st = a.read_back("w", &[t]).unwrap();
        assert_eq!(st.affinity.values().next().unwrap(), &cpus[..1].to_vec());
        assert_eq!(st.quota_cores, None);
        done_tx.send(()).unwrap();
        h.join().unwrap();
    }
}
