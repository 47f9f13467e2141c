//! The energy meter of one host: per host, per VNF and per worker, in watts (average over
//! the last interval) and joules (since the meter started), each figure with its
//! [`Source`]. RAPL counters are read where the host has them; otherwise the host's
//! power model is driven by the kernel's CPU-time accounting. Either way the host's
//! power is attributed to VNFs and workers by their threads' CPU time
//! ([`crate::attribution`]).

use crate::attribution::{split, HostPower, Load};
use crate::model::HostModel;
use crate::rapl::RaplReader;
use crate::source::Source;
use nfx_io::cpu;
use serde::Serialize;
use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

/// Threads whose CPU time a group counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Target {
    /// Every thread of a process (listed anew at each sample).
    Process {
        /// Process id.
        pid: u32,
    },
    /// One thread.
    Thread {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
    },
}

/// What a group stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    /// A VNF instance (all its processes and threads).
    Vnf,
    /// One worker (a dataplane thread, a transcoder process).
    Worker,
}

/// A named consumer of the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// Name (VNF instance id, or `<vnf>/<worker>`).
    pub name: String,
    /// VNF or worker.
    pub kind: GroupKind,
    /// Its threads.
    pub targets: Vec<Target>,
    /// Cores it reserves on the host (its share of idle power).
    pub reserved_cores: f64,
}

/// Where the host's busy CPU time comes from in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostBusy {
    /// `/proc/stat`: everything the kernel ran (a real host).
    ProcStat,
    /// The sum of the VNF groups: a host that runs only them (a namespace "host" on a
    /// machine shared with other work, such as the testbed).
    Groups,
}

/// How to meter a host.
#[derive(Debug, Clone)]
pub struct MeterConfig {
    /// Host id (a label of every figure).
    pub host: String,
    /// The host's power model; required where there is no RAPL (it also gives the idle
    /// watts subtracted from RAPL readings before dynamic power is attributed).
    pub model: Option<HostModel>,
    /// Source of the host's busy time in the model.
    pub busy: HostBusy,
    /// Read RAPL when present (false forces the model, e.g. to compare both).
    pub use_rapl: bool,
}

/// Why a meter cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    /// No energy counter and no power model.
    #[error("host {0}: no RAPL energy counters and no power model in the infrastructure descriptor (hosts[].power)")]
    NoSource(String),
}

/// Watts and joules with their origin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// Average watts over the last interval.
    pub watts: f64,
    /// Joules since the meter started.
    pub joules: f64,
    /// Measured or modeled.
    pub source: Source,
}

/// One group's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReading {
    /// Group name.
    pub name: String,
    /// VNF or worker.
    pub kind: GroupKind,
    /// Cores used on average over the interval.
    pub cpu_cores: f64,
    /// Its dynamic power (from its CPU time) in the interval.
    pub dynamic_w: f64,
    /// Its share of idle power.
    pub idle_w: f64,
    /// dynamic + idle share: watts and cumulative joules.
    pub energy: Figure,
}

/// One sample of the meter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    /// Host id.
    pub host: String,
    /// Seconds since the meter started.
    pub t_s: f64,
    /// Length of the interval the watts average over.
    pub interval_s: f64,
    /// Busy cores of the host over the interval.
    pub busy_cores: f64,
    /// CPU frequency used by the model, MHz (where the host reports one).
    pub mhz: Option<u32>,
    /// The host's figures.
    pub energy: Figure,
    /// The host's idle watts.
    pub idle_w: f64,
    /// Every group's figures.
    pub groups: Vec<GroupReading>,
}

struct GroupState {
    group: Group,
    last: HashMap<(u32, u32), Duration>,
    primed: bool,
    joules: f64,
}

impl GroupState {
    /// CPU seconds its threads used since the last call (0 at the first).
    fn cpu_delta_s(&mut self) -> f64 {
        let mut now = HashMap::new();
        for t in &self.group.targets {
            match *t {
                Target::Process { pid } => {
                    for tid in cpu::thread_ids(pid).unwrap_or_default() {
                        if let Ok(c) = cpu::task_cpu_time(pid, tid) {
                            now.insert((pid, tid), c);
                        }
                    }
                }
                Target::Thread { pid, tid } => {
                    if let Ok(c) = cpu::task_cpu_time(pid, tid) {
                        now.insert((pid, tid), c);
                    }
                }
            }
        }
        let primed = self.primed;
        let delta: Duration = now
            .iter()
            .map(|(k, c)| match self.last.get(k) {
                Some(prev) => c.saturating_sub(*prev),
                // A thread born since the last sample ran only inside the interval.
                None if primed => *c,
                None => Duration::ZERO,
            })
            .sum();
        self.last = now;
        self.primed = true;
        delta.as_secs_f64()
    }
}

/// A host's energy meter (see the module doc).
pub struct Meter {
    cfg: MeterConfig,
    rapl: Option<(RaplReader, Vec<u64>)>,
    freq: nfx_io::cpufreq::CpuFreq,
    groups: Vec<GroupState>,
    started: Instant,
    last_at: Option<Instant>,
    last_busy_ticks: u64,
    host_joules: f64,
}

impl Meter {
    /// A meter reading RAPL where present (and allowed), else the model.
    pub fn new(cfg: MeterConfig) -> Result<Self, MeterError> {
        let rapl = if cfg.use_rapl {
            RaplReader::discover()
        } else {
            None
        };
        Self::with_rapl(cfg, rapl)
    }

    /// A meter with a given RAPL reader (or none).
    pub fn with_rapl(cfg: MeterConfig, rapl: Option<RaplReader>) -> Result<Self, MeterError> {
        if rapl.is_none() && cfg.model.is_none() {
            return Err(MeterError::NoSource(cfg.host.clone()));
        }
        Ok(Self {
            rapl: rapl.map(|r| (r, Vec::new())),
            cfg,
            freq: nfx_io::cpufreq::CpuFreq::system(),
            groups: Vec::new(),
            started: Instant::now(),
            last_at: None,
            last_busy_ticks: 0,
            host_joules: 0.0,
        })
    }

    /// Where the host figure comes from.
    pub fn source(&self) -> Source {
        if self.rapl.is_some() {
            Source::Rapl
        } else {
            Source::Model
        }
    }

    /// Adds (or replaces, by name) a group; its joules start at zero.
    pub fn add_group(&mut self, group: Group) {
        self.remove_group(&group.name);
        self.groups.push(GroupState {
            group,
            last: HashMap::new(),
            primed: false,
            joules: 0.0,
        });
    }

    /// Stops metering group `name`.
    pub fn remove_group(&mut self, name: &str) {
        self.groups.retain(|g| g.group.name != name);
    }

    /// The groups metered.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().map(|g| &g.group)
    }

    /// Takes a sample: reads CPU time (and RAPL), attributes the interval's power and
    /// adds its energy. The first call only sets the baseline (zero watts).
    pub fn sample(&mut self) -> io::Result<Reading> {
        let now = Instant::now();
        let interval = self
            .last_at
            .map(|t| now.duration_since(t).as_secs_f64())
            .unwrap_or(0.0);
        let cpu_s: Vec<f64> = self.groups.iter_mut().map(|g| g.cpu_delta_s()).collect();
        let busy_s = match self.cfg.busy {
            HostBusy::ProcStat => {
                let ticks = cpu::read_proc_stat()?.0.busy;
                let d = ticks.saturating_sub(self.last_busy_ticks);
                self.last_busy_ticks = ticks;
                if self.last_at.is_some() {
                    d as f64 / cpu::clk_tck() as f64
                } else {
                    0.0
                }
            }
            HostBusy::Groups => self
                .groups
                .iter()
                .zip(&cpu_s)
                .filter(|(g, _)| g.group.kind == GroupKind::Vnf)
                .map(|(_, c)| c)
                .sum(),
        };
        // The host was busy at least as long as any one group (sampling skew).
        let busy_s = cpu_s.iter().copied().fold(busy_s, f64::max);
        let rapl_j = match &mut self.rapl {
            Some((reader, last)) => {
                let cur = reader.read()?;
                let j = if last.is_empty() {
                    0.0
                } else {
                    reader.host_joules(&reader.joules_between(last, &cur))
                };
                *last = cur;
                Some(j)
            }
            None => None,
        };
        let mhz = self.freq.mean_cur_mhz();
        let loads: Vec<Load> = self
            .groups
            .iter()
            .zip(&cpu_s)
            .map(|(g, &c)| Load {
                cpu_s: c,
                reserved_cores: g.group.reserved_cores,
            })
            .collect();
        let host = match (rapl_j, &self.cfg.model) {
            (Some(j), model) => HostPower::Measured {
                watts: if interval > 0.0 { j / interval } else { 0.0 },
                idle_w: model.as_ref().map(|m| m.pair_at(mhz).0).unwrap_or(0.0),
                cores: model.as_ref().map(|m| m.cores).unwrap_or_else(online_cores),
            },
            (None, Some(model)) => HostPower::Model { model, mhz },
            (None, None) => unreachable!("checked in Meter::with_rapl"),
        };
        let s = split(host, interval, busy_s, &loads);
        let primed = self.last_at.is_some();
        self.last_at = Some(now);
        let source = self.source();
        let scale = if primed { interval } else { 0.0 };
        self.host_joules += s.host_w * scale;
        let groups = self
            .groups
            .iter_mut()
            .zip(s.shares.iter().zip(&cpu_s))
            .map(|(g, (sh, &c))| {
                let w = if primed { sh.total_w() } else { 0.0 };
                g.joules += w * scale;
                GroupReading {
                    name: g.group.name.clone(),
                    kind: g.group.kind,
                    cpu_cores: if interval > 0.0 { c / interval } else { 0.0 },
                    dynamic_w: if primed { sh.dynamic_w } else { 0.0 },
                    idle_w: if primed { sh.idle_w } else { 0.0 },
                    energy: Figure {
                        watts: w,
                        joules: g.joules,
                        source,
                    },
                }
            })
            .collect();
        Ok(Reading {
            host: self.cfg.host.clone(),
            t_s: now.duration_since(self.started).as_secs_f64(),
            interval_s: interval,
            busy_cores: if interval > 0.0 {
                busy_s / interval
            } else {
                0.0
            },
            mhz,
            energy: Figure {
                watts: if primed { s.host_w } else { 0.0 },
                joules: self.host_joules,
                source,
            },
            idle_w: s.idle_w,
            groups,
        })
    }
}

/// Cores online (sysconf), at least 1.
fn online_cores() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_model::PowerModel;

    fn model_cfg(busy: HostBusy) -> MeterConfig {
        MeterConfig {
            host: "h".into(),
            model: Some(HostModel::new(
                2,
                PowerModel {
                    idle_w: 6.0,
                    max_w: 36.0,
                    frequencies: vec![],
                },
            )),
            busy,
            use_rapl: false,
        }
    }

    #[test]
    fn no_rapl_and_no_model_is_an_error_naming_the_host() {
        let cfg = MeterConfig {
            model: None,
            ..model_cfg(HostBusy::ProcStat)
        };
        let e = Meter::with_rapl(cfg, None).err().unwrap().to_string();
        assert!(e.contains("host h") && e.contains("power"), "{e}");
    }

    #[test]
    fn spinning_thread_is_charged_a_core_of_dynamic_power() {
        let mut m = Meter::with_rapl(model_cfg(HostBusy::Groups), None).unwrap();
        assert_eq!(m.source(), Source::Model);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let h = std::thread::spawn(move || {
            tx.send(cpu::gettid()).unwrap();
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        m.add_group(Group {
            name: "spin".into(),
            kind: GroupKind::Vnf,
            targets: vec![Target::Thread {
                pid: std::process::id(),
                tid,
            }],
            reserved_cores: 1.0,
        });
        let first = m.sample().unwrap();
        assert_eq!(first.energy.watts, 0.0);
        std::thread::sleep(Duration::from_millis(400));
        let r = m.sample().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap();
        let g = &r.groups[0];
        // On a shared machine the spinner gets at least part of a core; every watt of it
        // is 15 W per core (30 W over 2 cores) and its idle share is half of 6 W.
        assert!(g.cpu_cores > 0.1 && g.cpu_cores <= 1.05, "{g:?}");
        assert!((g.dynamic_w - 15.0 * g.cpu_cores).abs() < 1e-6, "{g:?}");
        assert_eq!(g.idle_w, 3.0);
        assert!((r.energy.watts - (6.0 + g.dynamic_w)).abs() < 1e-6);
        assert!(g.energy.joules > 0.0 && r.energy.joules >= g.energy.joules);
        assert_eq!(g.energy.source, Source::Model);
    }
}
