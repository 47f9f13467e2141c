//! The agent's power agent: meters its host once a second with the energy crate's
//! [`Meter`] — RAPL where `/sys/class/powercap` has it, else the host's power model
//! (the agent configuration's `power`, from the infrastructure descriptor) driven by the
//! CPU time of the host's worker processes (`/proc/<pid>/task/*/schedstat`) — and
//! attributes each worker's energy to its VNF instances by the TSC cycles the worker's
//! dataplane spent in each instance's node over the interval (evenly while none
//! processed a packet). It also reads back, per worker thread, what the power knobs act
//! on: the poll mode (from the worker), the affinity and the CPU limit (from the kernel).
//! Every figure carries its [`Source`].

use crate::vnfm::local::WorkerProcess;
use nfx_energy::meter::{Figure, GroupKind, GroupReading, Reading};
use nfx_energy::{Group, HostBusy, HostModel, Meter, MeterConfig, Source, Target};
use nfx_io::cgroup::CpuController;
use nfx_model::PowerModel;
use nfx_proto::stats::LatencyStats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How often the power agent samples its host.
pub const METER_EVERY: Duration = Duration::from_secs(1);

/// The power agent's latest figures (`GET /agent/v1/energy`, and the heartbeat's
/// `energy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyReport {
    /// Host id.
    pub host: String,
    /// Where every figure comes from (`rapl` or `model`).
    pub source: Source,
    /// When it was sampled, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// Seconds the watts average over.
    pub interval_s: f64,
    /// The host's average power over the interval, W.
    pub power_w: f64,
    /// The host's energy since the agent started metering, J.
    pub energy_j: f64,
    /// The host's idle power (from its model), W.
    pub idle_w: f64,
    /// Busy cores of the host over the interval (its workers' CPU time).
    pub busy_cores: f64,
    /// Per VNF instance.
    pub instances: Vec<InstanceEnergy>,
    /// Per worker process, with its threads' knob settings.
    pub workers: Vec<WorkerPower>,
}

/// One VNF instance's energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceEnergy {
    /// Instance id.
    pub instance: String,
    /// Its device (worker).
    pub device: String,
    /// Its share of its worker's power over the interval, W.
    pub power_w: f64,
    /// Its energy since the agent started metering it, J.
    pub energy_j: f64,
    /// Cores of CPU time attributed to it over the interval.
    pub cpu_cores: f64,
    /// `rapl` or `model`.
    pub source: Source,
}

/// One worker process: its metered figures and its threads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerPower {
    /// Device id.
    pub device: String,
    /// Process id.
    pub pid: u32,
    /// Cores it used over the interval (all its threads, from `/proc`).
    pub cpu_cores: f64,
    /// Its power over the interval (dynamic from its CPU time + idle share), W.
    pub power_w: f64,
    /// Its energy since the agent started metering it, J.
    pub energy_j: f64,
    /// Its ports' cumulative counters (what the power manager derives offered and
    /// delivered throughput from).
    #[serde(default)]
    pub traffic: WorkerTraffic,
    /// Its ports as the kernel counts them, when the agent could read them (what the
    /// power manager counts offered load by: the kernel counts a frame when it arrives,
    /// not when the worker reads it, which a CPU limit delays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireTraffic>,
    /// Its dataplane threads as the worker and the kernel report them (empty when the
    /// worker did not answer).
    pub threads: Vec<ThreadKnobs>,
    /// Cores' worth of time its threads spent runnable but waiting for a CPU over the
    /// interval (the kernel's run-queue delay, `schedstat`; it includes time held back by
    /// its CPU limit): with `cpu_cores`, the CPU it asked for — what the power manager
    /// consolidates by, since threads sharing a contended core get less than they need.
    #[serde(default)]
    pub wait_cores: f64,
    /// The longest a packet can wait for this worker's CPU because of its CPU limit, µs:
    /// a bound computed from the limit read back from the kernel (period − quota of its
    /// threads' cgroup; 0 unlimited), not a measured delay. `None` when no thread
    /// answered. The power manager checks it against the service's latency SLA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_bound_us: Option<f64>,
    /// Its packets' measured time in the worker (kernel receive stamp to send) over the
    /// worker's last one to two seconds, the worst of its threads
    /// ([`LatencyStats::worst`]); `None` when the worker measures none (no receive
    /// ring, nothing received yet, or it did not answer). What the power manager checks
    /// the latency SLA against when it counted packets; the bound above otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyStats>,
}

/// A worker's cumulative port counters, from its stats (zero when it did not answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerTraffic {
    /// Frames received on its ports.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames the kernel dropped before the worker read them (socket buffer full).
    pub socket_drops: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
}

impl WorkerTraffic {
    /// The sums over a worker's ports.
    pub fn of(s: &nfx_dataplane::Stats) -> Self {
        s.ports.iter().fold(Self::default(), |t, p| Self {
            rx_packets: t.rx_packets + p.rx_packets,
            rx_bytes: t.rx_bytes + p.rx_bytes,
            socket_drops: t.socket_drops + p.socket_drops,
            tx_packets: t.tx_packets + p.tx_packets,
            tx_bytes: t.tx_bytes + p.tx_bytes,
        })
    }
}

/// A worker's ports as the kernel counts them (`/proc/<pid>/net/dev`), summed over its
/// ports, with the moment they were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WireTraffic {
    /// When they were read, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// Frames that arrived on the worker's ports.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames the kernel dropped on arrival.
    pub rx_dropped: u64,
    /// Frames the worker sent.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
}

impl WireTraffic {
    /// Reads the counters of `ports` in `pid`'s network namespace now.
    pub fn read(pid: u32, ports: &[String]) -> std::io::Result<Self> {
        let c = nfx_io::netdev::counters(pid, ports)?;
        Ok(Self {
            at_unix_ms: unix_ms(),
            rx_packets: c.rx_packets,
            rx_bytes: c.rx_bytes,
            rx_dropped: c.rx_dropped,
            tx_packets: c.tx_packets,
            tx_bytes: c.tx_bytes,
        })
    }
}

/// Now, in ms since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A dataplane thread's knob settings, read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadKnobs {
    /// Worker thread index in the dataplane.
    pub worker: usize,
    /// Kernel thread id.
    pub tid: u32,
    /// Poll mode in force (`busy`, `adaptive`, `interrupt`).
    pub poll: String,
    /// CPUs it may run on (`sched_getaffinity`).
    pub affinity: Vec<usize>,
    /// Its cgroup's CPU limit in cores (`cpu.max` or the v1 CFS quota); `None` when
    /// unlimited or the host has no readable cpu controller.
    pub cpu_max_cores: Option<f64>,
    /// The longest this thread waits for CPU in one period of its limit, µs (period −
    /// quota as the kernel has them; 0 when unlimited or the quota covers the period).
    #[serde(default)]
    pub cpu_wait_bound_us: f64,
}

/// A VNF instance that is a process tree of its own rather than a node of a worker (a
/// transcoder: `nfx transcode` and its `ffmpeg` child): metered by the CPU time of the
/// process and its children, all of it the instance's.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessTree {
    /// Instance id.
    pub instance: String,
    /// Its device.
    pub device: String,
    /// The process at the root of the tree.
    pub pid: u32,
    /// Cores the instance reserves on its device (its share of the host's idle power).
    pub reserved_cores: f64,
}

/// What the agent meters with.
struct State {
    meter: Meter,
    /// pid of each device's worker as metered.
    pids: BTreeMap<String, u32>,
    /// The processes metered for each process-tree instance (root first).
    trees: BTreeMap<String, Vec<u32>>,
    /// Cumulative cycles of each (device, node) at the last sample.
    cycles: BTreeMap<(String, String), f64>,
    /// Joules of each instance.
    joules: BTreeMap<String, f64>,
    /// Interface names of each device's worker ports (from its stats).
    ports: BTreeMap<String, Vec<String>>,
    /// Each device's worker: pid, its threads' run-queue delay and when it was read.
    waits: BTreeMap<String, (u32, Duration, Instant)>,
    cpu: Option<CpuController>,
}

/// The power agent of one host.
pub struct PowerAgent {
    host: String,
    cores: BTreeMap<String, u32>,
    state: Mutex<Result<State, String>>,
    latest: Mutex<Option<EnergyReport>>,
}

impl PowerAgent {
    /// A power agent for `host` whose devices own `cores` (device → cores), with the
    /// host's power `model` (required where there is no RAPL; the error says so and is
    /// reported by [`PowerAgent::report`]).
    pub fn new(host: &str, cores: BTreeMap<String, u32>, model: Option<PowerModel>) -> Self {
        let total: u32 = cores.values().sum();
        let cfg = MeterConfig {
            host: host.to_string(),
            model: model.map(|m| HostModel::new(total.max(1), m)),
            busy: HostBusy::Groups,
            use_rapl: true,
        };
        let state = Meter::new(cfg)
            .map(|meter| State {
                meter,
                pids: BTreeMap::new(),
                trees: BTreeMap::new(),
                cycles: BTreeMap::new(),
                joules: BTreeMap::new(),
                ports: BTreeMap::new(),
                waits: BTreeMap::new(),
                cpu: CpuController::detect().ok(),
            })
            .map_err(|e| e.to_string());
        if let Err(e) = &state {
            log::warn!("energy is not metered: {e}");
        }
        PowerAgent {
            host: host.to_string(),
            cores,
            state: Mutex::new(state),
            latest: Mutex::new(None),
        }
    }

    /// Cores of each of the host's software devices.
    pub fn cores(&self) -> &BTreeMap<String, u32> {
        &self.cores
    }

    /// The latest figures; `Err` says why the host is not metered.
    pub fn report(&self) -> Result<Option<EnergyReport>, String> {
        if let Err(e) = &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(e.clone());
        }
        Ok(self
            .latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }

    /// Takes one sample over the running `workers` and process-tree instances `trees`.
    pub fn sample(&self, workers: &[WorkerProcess], trees: &[ProcessTree]) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(st) = &mut *g else { return };
        track_trees(st, trees);
        match self.sample_with(st, workers, trees) {
            Ok(r) => *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(r),
            Err(e) => log::warn!("metering {}: {e}", self.host),
        }
    }

    fn sample_with(
        &self,
        st: &mut State,
        workers: &[WorkerProcess],
        trees: &[ProcessTree],
    ) -> std::io::Result<EnergyReport> {
        for w in workers {
            if st.pids.get(&w.device) != Some(&w.pid) {
                st.meter.add_group(Group {
                    name: w.device.clone(),
                    kind: GroupKind::Vnf,
                    targets: vec![Target::Process { pid: w.pid }],
                    reserved_cores: f64::from(self.cores.get(&w.device).copied().unwrap_or(0)),
                });
                st.pids.insert(w.device.clone(), w.pid);
            }
        }
        let gone: Vec<String> = st
            .pids
            .keys()
            .filter(|d| !workers.iter().any(|w| &w.device == *d))
            .cloned()
            .collect();
        for d in gone {
            st.meter.remove_group(&d);
            st.pids.remove(&d);
            st.ports.remove(&d);
            st.waits.remove(&d);
        }
        let reading = st.meter.sample()?;
        let source = reading.energy.source;
        let mut instances = Vec::new();
        let mut out_workers = Vec::new();
        for w in workers {
            let Some(g) = reading.groups.iter().find(|g| g.name == w.device) else {
                continue;
            };
            let stats = nfx_proto::Client::connect(&w.socket)
                .and_then(|mut c| c.stats())
                .map_err(|e| log::debug!("stats of worker {}: {e:#}", w.device))
                .ok();
            if let Some(s) = &stats {
                let names = s.ports.iter().map(|p| p.iface.clone()).collect();
                st.ports.insert(w.device.clone(), names);
            }
            let wire = st.ports.get(&w.device).and_then(|ports| {
                WireTraffic::read(w.pid, ports)
                    .map_err(|e| log::debug!("ports of worker {}: {e}", w.device))
                    .ok()
            });
            let work: Vec<f64> = w
                .instances
                .iter()
                .map(|(_, node)| {
                    let now = stats
                        .as_ref()
                        .and_then(|s| s.nodes.iter().find(|n| &n.name == node))
                        .map(|n| n.packets as f64 * n.cycles_per_packet)
                        .unwrap_or(0.0);
                    let key = (w.device.clone(), node.clone());
                    let before = st.cycles.insert(key, now).unwrap_or(0.0);
                    (now - before).max(0.0)
                })
                .collect();
            let interval_j = g.energy.watts * reading.interval_s;
            for ((id, _), share) in w.instances.iter().zip(split_shares(&work)) {
                let j = st.joules.entry(id.clone()).or_insert(0.0);
                *j += interval_j * share;
                instances.push(InstanceEnergy {
                    instance: id.clone(),
                    device: w.device.clone(),
                    power_w: g.energy.watts * share,
                    energy_j: *j,
                    cpu_cores: g.cpu_cores * share,
                    source,
                });
            }
            let threads = stats
                .as_ref()
                .map(|s| thread_knobs(s, st.cpu.as_ref()))
                .unwrap_or_default();
            out_workers.push(WorkerPower {
                device: w.device.clone(),
                pid: w.pid,
                cpu_cores: g.cpu_cores,
                power_w: g.energy.watts,
                energy_j: g.energy.joules,
                traffic: stats.as_ref().map(WorkerTraffic::of).unwrap_or_default(),
                wire,
                wait_cores: wait_cores(&mut st.waits, w),
                cpu_wait_bound_us: cpu_wait_bound_us(&threads),
                latency: stats.as_ref().and_then(|s| {
                    LatencyStats::worst(s.workers.iter().filter_map(|w| w.latency.as_ref()))
                }),
                threads,
            });
        }
        for t in trees {
            let Some(g) = reading.groups.iter().find(|g| g.name == tree_group(t)) else {
                continue;
            };
            let j = st.joules.entry(t.instance.clone()).or_insert(0.0);
            *j += g.energy.watts * reading.interval_s;
            instances.push(InstanceEnergy {
                instance: t.instance.clone(),
                device: t.device.clone(),
                power_w: g.energy.watts,
                energy_j: *j,
                cpu_cores: g.cpu_cores,
                source,
            });
        }
        st.joules
            .retain(|id, _| instances.iter().any(|i| &i.instance == id));
        st.cycles.retain(|(d, n), _| {
            workers
                .iter()
                .any(|w| &w.device == d && w.instances.iter().any(|(_, x)| x == n))
        });
        Ok(EnergyReport {
            host: self.host.clone(),
            source,
            at_unix_ms: unix_ms(),
            interval_s: reading.interval_s,
            power_w: reading.energy.watts,
            energy_j: reading.energy.joules,
            idle_w: reading.idle_w,
            busy_cores: reading.busy_cores,
            instances,
            workers: out_workers,
        })
    }
}

/// Cores' worth of run-queue delay of `w`'s threads since the last call for its device
/// (0 on the first, or when its pid changed or `/proc` could not be read).
fn wait_cores(waits: &mut BTreeMap<String, (u32, Duration, Instant)>, w: &WorkerProcess) -> f64 {
    let Ok(now) = nfx_io::cpu::process_wait_time(w.pid) else {
        waits.remove(&w.device);
        return 0.0;
    };
    let at = Instant::now();
    match waits.insert(w.device.clone(), (w.pid, now, at)) {
        Some((pid, before, t)) if pid == w.pid && at > t => {
            now.saturating_sub(before).as_secs_f64() / (at - t).as_secs_f64()
        }
        _ => 0.0,
    }
}

/// The longest wait for CPU that its limit imposes on any of `threads`, µs, from the
/// limits they read back ([`ThreadKnobs::cpu_wait_bound_us`]); `None` without threads.
fn cpu_wait_bound_us(threads: &[ThreadKnobs]) -> Option<f64> {
    threads.iter().map(|t| t.cpu_wait_bound_us).reduce(f64::max)
}

/// The meter's group name of a process-tree instance (apart from the workers', which are
/// named by their device).
fn tree_group(t: &ProcessTree) -> String {
    format!("process:{}", t.instance)
}

/// Makes the meter's groups of process-tree instances `trees` cover each one's process
/// and its current children (a child that appeared since the last sample, such as the
/// encoder a transcoder starts, joins its group); forgets instances that have gone.
fn track_trees(st: &mut State, trees: &[ProcessTree]) {
    for t in trees {
        let mut pids = vec![t.pid];
        pids.extend(nfx_io::cpu::child_pids(t.pid).unwrap_or_default());
        if st.trees.get(&t.instance) != Some(&pids) {
            st.meter.add_group(Group {
                name: tree_group(t),
                kind: GroupKind::Vnf,
                targets: pids.iter().map(|&pid| Target::Process { pid }).collect(),
                reserved_cores: t.reserved_cores,
            });
            st.trees.insert(t.instance.clone(), pids);
        }
    }
    let meter = &mut st.meter;
    st.trees.retain(|i, _| {
        let here = trees.iter().any(|t| &t.instance == i);
        if !here {
            meter.remove_group(&format!("process:{i}"));
        }
        here
    });
}

/// Each instance's share of its worker from the cycles each spent in the interval;
/// equal shares when none spent any.
pub fn split_shares(work: &[f64]) -> Vec<f64> {
    let total: f64 = work.iter().sum();
    if total > 0.0 {
        work.iter().map(|w| w / total).collect()
    } else {
        vec![1.0 / work.len().max(1) as f64; work.len()]
    }
}

/// The worker's threads with their knobs read back from the kernel.
pub(crate) fn thread_knobs(
    s: &nfx_dataplane::Stats,
    cpu: Option<&CpuController>,
) -> Vec<ThreadKnobs> {
    s.workers
        .iter()
        .map(|w| {
            let limit = cpu.and_then(|c| c.thread_limit(w.tid).ok().flatten());
            ThreadKnobs {
                worker: w.id,
                tid: w.tid,
                poll: w.poll.clone(),
                affinity: nfx_io::affinity::affinity(w.tid).unwrap_or_default(),
                cpu_max_cores: limit.map(|(q, p)| q.as_secs_f64() / p.as_secs_f64().max(1e-9)),
                cpu_wait_bound_us: limit
                    .map_or(0.0, |(q, p)| p.saturating_sub(q).as_secs_f64() * 1e6),
            }
        })
        .collect()
}

/// The report as the energy crate's reading (instances as VNF groups), for its
/// Prometheus names.
pub fn as_reading(r: &EnergyReport) -> Reading {
    let fig = |watts, joules| Figure {
        watts,
        joules,
        source: r.source,
    };
    Reading {
        host: r.host.clone(),
        t_s: 0.0,
        interval_s: r.interval_s,
        busy_cores: r.busy_cores,
        mhz: None,
        energy: fig(r.power_w, r.energy_j),
        idle_w: r.idle_w,
        groups: r
            .instances
            .iter()
            .map(|i| GroupReading {
                name: i.instance.clone(),
                kind: GroupKind::Vnf,
                cpu_cores: i.cpu_cores,
                dynamic_w: 0.0,
                idle_w: 0.0,
                energy: fig(i.power_w, i.energy_j),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_cycles_and_are_even_when_idle() {
        assert_eq!(split_shares(&[300.0, 100.0]), vec![0.75, 0.25]);
        assert_eq!(split_shares(&[0.0, 0.0]), vec![0.5, 0.5]);
        assert!(split_shares(&[]).is_empty());
    }

    #[test]
    fn no_power_model_and_no_rapl_is_a_clear_error() {
        if nfx_energy::rapl::RaplReader::discover().is_some() {
            return; // a host with RAPL needs no model
        }
        let a = PowerAgent::new("h9", BTreeMap::from([("d".into(), 1)]), None);
        let e = a.report().unwrap_err();
        assert!(e.contains("host h9") && e.contains("power"), "{e}");
        a.sample(&[], &[]);
        assert!(a.report().is_err());
    }

    /// A process-tree instance is charged its children's CPU (a transcoder's encoder),
    /// all of it its own, and is forgotten once gone.
    #[test]
    fn a_process_tree_is_metered_with_its_children() {
        let model = nfx_energy::model::default_power(2);
        let a = PowerAgent::new("h1", BTreeMap::from([("sw0".into(), 1)]), Some(model));
        // A shell that waits while its child spins, in a process group of its own that
        // the guard kills, whatever the test does.
        struct Group(std::process::Child);
        impl Drop for Group {
            fn drop(&mut self) {
                // SAFETY: kill(2) on the process group this test created.
                unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
                let _ = self.0.wait();
            }
        }
        let root = Group(
            std::os::unix::process::CommandExt::process_group(
                &mut std::process::Command::new("sh"),
                0,
            )
            .args(["-c", "yes > /dev/null & wait"])
            .spawn()
            .unwrap(),
        );
        let tree = ProcessTree {
            instance: "xc".into(),
            device: "sw0".into(),
            pid: root.0.id(),
            reserved_cores: 1.0,
        };
        let t0 = std::time::Instant::now();
        let mut cores = 0.0;
        while cores < 0.3 && t0.elapsed() < Duration::from_millis(2500) {
            a.sample(&[], std::slice::from_ref(&tree));
            std::thread::sleep(Duration::from_millis(250));
            a.sample(&[], std::slice::from_ref(&tree));
            let r = a.report().unwrap().unwrap();
            if let Some(i) = r.instances.iter().find(|i| i.instance == "xc") {
                assert_eq!(i.device, "sw0");
                assert!(i.energy_j >= 0.0 && i.power_w > 0.0, "{i:?}");
                cores = i.cpu_cores;
            }
        }
        drop(root);
        assert!(
            cores >= 0.3,
            "the spinning child was not charged: {cores} cores"
        );
        a.sample(&[], &[]);
        assert!(a.report().unwrap().unwrap().instances.is_empty());
    }

    #[test]
    fn a_model_host_reports_its_idle_power_with_no_workers() {
        let model = nfx_energy::model::default_power(2);
        let a = PowerAgent::new(
            "h1",
            BTreeMap::from([("a".into(), 1), ("b".into(), 1)]),
            Some(model),
        );
        assert_eq!(a.report().unwrap(), None);
        a.sample(&[], &[]);
        std::thread::sleep(Duration::from_millis(20));
        a.sample(&[], &[]);
        let r = a.report().unwrap().unwrap();
        if r.source == Source::Model {
            assert!((r.power_w - 6.2).abs() < 1e-9, "{r:?}");
            assert!(r.energy_j > 0.0 && r.instances.is_empty());
        }
    }
}
