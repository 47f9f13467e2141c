//! `nfx experiment energy`: the energy paper's experiment on the namespace testbed. Video
//! streams (MPEG-TS over UDP) go src → NAT box (edge) → transcoding box (cloud) → dst
//! under a load ramp 0 → N streams → 0, once per dataplane: kernel forwarding, nfx busy
//! poll (the OvS-DPDK case), nfx adaptive, and nfx adaptive with the power manager.
//! Each tick records throughput, round-trip latency, the boxes' power and energy (with
//! its source: RAPL where present, else the host model of
//! `configs/energy/infrastructure.yaml` driven by the boxes' CPU time) and the knobs.

mod boxes;
pub(crate) mod ramp;
pub(crate) mod report;
pub(crate) mod video;

use anyhow::Context;
use boxes::{Case, NatBox};
use nfx_energy::knobs::Actuator;
use nfx_energy::manager::{Action, BoxSample, BoxSpec, PowerManager, ServicePolicy, Setting};
use nfx_energy::probe::{ProbeConfig, Sample, Sla};
use nfx_energy::{Group, GroupKind, HostBusy, HostModel, Meter, MeterConfig, Reading, Target};
use nfx_testbed::netns::{iface_counters, IfaceCounters};
use nfx_testbed::process::ChildGuard;
use nfx_testbed::{netns, Host, Spec, Testbed, TestbedGuard};
use ramp::{Plan, Targets, Tick};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use video::{Clip, Sources};

/// Arguments of `nfx experiment energy`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// Short steps and a small clip (for CI; under 2 minutes on a quiet machine).
    #[arg(long)]
    quick: bool,
    /// Video streams at the peak of the ramp.
    #[arg(long, default_value_t = 10)]
    streams: u32,
    /// Seconds per ramp step (default 10, 2.5 with --quick).
    #[arg(long)]
    step_s: Option<f64>,
    /// Infrastructure descriptor whose first host with a `power` model is the NFV host.
    #[arg(long, default_value = "configs/energy/infrastructure.yaml")]
    infrastructure: PathBuf,
    /// SLA: largest round-trip p99 through the boxes, ms.
    #[arg(long, default_value_t = 20.0)]
    max_rtt_ms: f64,
    /// SLA: share of the offered throughput and frames that must be delivered.
    #[arg(long, default_value_t = 0.95)]
    min_delivery: f64,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-en-")]
    prefix: String,
    /// Second octet of the testbed's 10.b.x.x addresses.
    #[arg(long, default_value_t = 209)]
    subnet_base: u8,
}

/// One operation record of the power manager.
#[derive(Debug, Clone, Serialize)]
pub struct OpRecord {
    /// Case.
    pub case: String,
    /// Seconds into the ramp.
    pub t_s: f64,
    /// The decision.
    pub action: Action,
    /// Whether the knob could be applied (and the error if not).
    pub applied: Result<(), String>,
}

/// Everything one case produced.
pub struct CaseRun {
    /// The case.
    pub case: Case,
    /// Its samples.
    pub ticks: Vec<Tick>,
    /// CPU of the idle NAT worker before the ramp, % of a core (nfx cases).
    pub idle_core_pct: Option<f64>,
    /// The manager's decisions.
    pub ops: Vec<OpRecord>,
    /// The largest number of probe steps a completed probe took.
    pub settle_steps: Option<u32>,
    /// The longest time from a load change to the manager's re-probe, s.
    pub reprobe_s: Option<f64>,
}

/// What every case shares.
struct Bench<'a> {
    tb: &'a Testbed,
    nfx: PathBuf,
    work: PathBuf,
    clip: Clip,
    clip_file: PathBuf,
    plan: Plan,
    model: HostModel,
    napi: Vec<Target>,
    targets: Targets,
}

/// The id and power model of the descriptor's first host with a `power` model (the host
/// whose energy an experiment models).
pub(crate) fn power_host(infra_path: &std::path::Path) -> anyhow::Result<(String, HostModel)> {
    let infra = nfx_model::Infrastructure::load(infra_path)?;
    let host = infra
        .hosts
        .iter()
        .find(|h| h.power.is_some())
        .with_context(|| format!("{}: no host has a power model", infra_path.display()))?;
    let power = host.power.clone().context("checked")?;
    Ok((host.id.clone(), HostModel::new(host.cores, power)))
}

/// Runs the subcommand.
pub fn run(a: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    anyhow::ensure!(
        (1..=64).contains(&a.streams),
        "--streams {}: 1..=64",
        a.streams
    );
    let step_s = a.step_s.unwrap_or(if a.quick { 2.5 } else { 10.0 });
    anyhow::ensure!(
        (1.0..=600.0).contains(&step_s),
        "--step-s {step_s}: 1..=600"
    );
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let work = a.out.join("work");
    std::fs::create_dir_all(&work)?;
    let infra_path = super::data::resolve(&a.infrastructure, &work)?;
    let (host_id, model) = power_host(&infra_path)?;
    let clip = if a.quick {
        Clip {
            width: 160,
            height: 120,
            kbps: 400,
            out_kbps: 100,
        }
    } else {
        Clip {
            width: 320,
            height: 240,
            kbps: 1500,
            out_kbps: 300,
        }
    };
    let clip_file = video::encode_clip(&work, clip)?;
    let tb = TestbedGuard::up(Spec {
        prefix: a.prefix.clone(),
        subnet_base: a.subnet_base,
    })?;
    let napi = boxes::kernel_threads(&tb)?;
    let bench = Bench {
        tb: &tb,
        nfx: std::env::current_exe().context("locating the nfx binary")?,
        work: work.clone(),
        clip,
        clip_file,
        plan: Plan::ramp(a.streams, step_s),
        model,
        napi,
        targets: Targets {
            min_delivery: a.min_delivery,
            max_rtt_ms: a.max_rtt_ms,
            warmup_s: (step_s / 3.0).min(2.0),
        },
    };
    let mut runs = Vec::new();
    let progress = super::output::Progress::bar("energy: cases", Case::ALL.len() as u64);
    for case in Case::ALL {
        progress.message(case.name());
        crate::note!("energy: case {} ...", case.name());
        runs.push(run_case(&bench, case)?);
        progress.inc();
    }
    drop(progress);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    report::write(
        &a.out,
        &report::Inputs {
            runs: &runs,
            plan: &bench.plan,
            targets: &bench.targets,
            model: &bench.model,
            host: &host_id,
            infra: &infra_path,
            clip,
            loadavg: load
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        },
    )?;
    drop(tb);
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

/// Collects round-trip times from a `ping` through the NAT box.
struct Rtt {
    _child: ChildGuard,
    samples: Arc<Mutex<Vec<f64>>>,
}

impl Rtt {
    fn start(ns: &str, to: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        let mut cmd = netns::command(ns, &["ping", "-n", "-i", "0.05", &to.to_string()]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().context("starting ping")?;
        let stdout = child.stdout.take().context("ping stdout")?;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let s2 = samples.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(ms) = line
                    .split("time=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
                {
                    s2.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
                }
            }
        });
        Ok(Self {
            _child: ChildGuard::new(child, "ping"),
            samples,
        })
    }

    fn drain(&self) -> Vec<f64> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Counters read at each tick.
#[derive(Clone, Copy, Default)]
struct Counters {
    src: IfaceCounters,
    cloud_in: IfaceCounters,
    cloud_out: IfaceCounters,
    frames: u64,
}

fn read_counters(tb: &Testbed, frames: u64) -> anyhow::Result<Counters> {
    Ok(Counters {
        src: iface_counters(&tb.ns(Host::Src), "veth0")?,
        cloud_in: iface_counters(&tb.ns(Host::Cloud), "to-edge")?,
        cloud_out: iface_counters(&tb.ns(Host::Cloud), "to-dst")?,
        frames,
    })
}

fn group<'r>(r: &'r Reading, name: &str) -> Option<&'r nfx_energy::GroupReading> {
    r.groups.iter().find(|g| g.name == name)
}

fn policy(t: &Targets) -> ServicePolicy {
    ServicePolicy {
        sla: Sla {
            min_bps: f64::INFINITY,
            max_latency_us: t.max_rtt_ms * 1000.0,
            min_delivery: t.min_delivery,
        },
        probe: ProbeConfig::default(),
        busy_above_pps: 200_000.0,
        consolidate_below_cores: 0.6,
    }
}

/// Idle CPU of a thread over `secs`, % of a core.
fn idle_pct(pid: u32, tid: u32, secs: f64) -> anyhow::Result<f64> {
    let c0 = nfx_io::cpu::task_cpu_time(pid, tid)?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let c1 = nfx_io::cpu::task_cpu_time(pid, tid)?;
    Ok(100.0 * (c1 - c0).as_secs_f64() / t0.elapsed().as_secs_f64())
}

/// What one sample interval of a case's ramp saw: rates in bit/s, packets/s and frames/s.
struct Interval {
    dt: f64,
    streams: usize,
    offered: f64,
    nat_out: f64,
    tc_out: f64,
    pps: f64,
    out_fps: f64,
    expected_fps: f64,
}

/// Where a tick falls: its case, its time since the case started and since its step
/// started, and the step.
struct TickAt<'a> {
    case: &'a str,
    t_s: f64,
    in_step_s: f64,
    step: usize,
}

impl Interval {
    /// The rates between two counter readings `dt` seconds apart, with `streams` sources.
    fn between(prev: &Counters, now: &Counters, dt: f64, streams: usize) -> Self {
        let rate = |a: u64, b: u64| 8.0 * a.saturating_sub(b) as f64 / dt;
        Interval {
            dt,
            streams,
            offered: rate(now.src.tx_bytes, prev.src.tx_bytes),
            nat_out: rate(now.cloud_in.rx_bytes, prev.cloud_in.rx_bytes),
            tc_out: rate(now.cloud_out.tx_bytes, prev.cloud_out.tx_bytes),
            pps: now.src.tx_packets.saturating_sub(prev.src.tx_packets) as f64 / dt,
            out_fps: now.frames.saturating_sub(prev.frames) as f64 / dt,
            expected_fps: f64::from(streams as u32 * video::FPS),
        }
    }

    /// The interval's tick at `at`, with the meter's reading `r`, the probes' round
    /// trips and the knobs' settings.
    fn tick(&self, at: TickAt<'_>, r: &Reading, rtts: &[f64], knobs: &Knobs) -> Tick {
        let (nat_g, tc_g) = (group(r, "nat"), group(r, "transcode"));
        Tick {
            case: at.case.into(),
            t_s: at.t_s,
            in_step_s: at.in_step_s,
            interval_s: self.dt,
            step: at.step,
            streams: self.streams as u32,
            offered_mbps: self.offered / 1e6,
            nat_mbps: self.nat_out / 1e6,
            transcoded_mbps: self.tc_out / 1e6,
            expected_fps: self.expected_fps,
            out_fps: self.out_fps,
            rtt_p99_ms: ramp::p99(rtts),
            nat_w: nat_g.map(|g| g.energy.watts).unwrap_or(0.0),
            transcode_w: tc_g.map(|g| g.energy.watts).unwrap_or(0.0),
            dynamic_w: nat_g.map(|g| g.dynamic_w).unwrap_or(0.0)
                + tc_g.map(|g| g.dynamic_w).unwrap_or(0.0),
            nat_cpu: nat_g.map(|g| g.cpu_cores).unwrap_or(0.0),
            transcode_cpu: tc_g.map(|g| g.cpu_cores).unwrap_or(0.0),
            source: r.energy.source.as_str().into(),
            nat_speed: knobs.nat_speed,
            transcode_speed: knobs.tc_speed,
            poll: knobs.poll.clone(),
            cpus: knobs.cpus_text(),
        }
    }
}

fn run_case(b: &Bench<'_>, case: Case) -> anyhow::Result<CaseRun> {
    let dir = b.work.join(case.name().replace('+', "-"));
    std::fs::create_dir_all(&dir)?;
    let nat = NatBox::start(case, b.tb, &b.nfx, &dir)?;
    let mut transcoders = video::start_transcoders(
        &b.tb.ns(Host::Cloud),
        b.tb.dst_ip(),
        b.plan.peak(),
        b.clip,
        &dir,
    )?;
    let tc_targets: Vec<Target> = transcoders
        .iter()
        .map(|t| Target::Process { pid: t.pid() })
        .collect();
    let worker = nat.dataplane()?;
    let worker_target = worker.map(|(pid, tid)| Target::Thread { pid, tid });
    let mut meter = case_meter(b, &nat, &tc_targets, worker_target)?;
    let idle_core_pct = match worker {
        Some((pid, tid)) => Some(idle_pct(
            pid,
            tid,
            if b.plan.step_s < 5.0 { 1.0 } else { 2.0 },
        )?),
        None => None,
    };
    let cpus = nfx_io::affinity::usable_cpus()?;
    let mut manager = (case == Case::Manager).then(|| {
        PowerManager::new(
            policy(&b.targets),
            vec![
                BoxSpec {
                    name: "nat".into(),
                    dataplane: true,
                },
                BoxSpec {
                    name: "transcode".into(),
                    dataplane: false,
                },
            ],
            cpus.clone(),
        )
    });
    let mut act = Actuator::new();
    let cg = |n: &str| format!("energy-{}-{n}", std::process::id());
    let rtt = Rtt::start(&b.tb.ns(Host::Src), b.tb.dst_ip())?;
    let mut sources = Sources::new(&b.tb.ns(Host::Src), &b.clip_file, b.tb.cloud_ip());
    let frames = |ts: &[nfx_vnf::transcode::process::Transcoder]| -> u64 {
        ts.iter().map(|t| t.progress().frames).sum()
    };
    let mut prev = read_counters(b.tb, frames(&transcoders))?;
    meter.sample()?;
    let (mut ticks, mut ops) = (Vec::new(), Vec::new());
    let mut knobs = Knobs {
        nat_speed: 1.0,
        tc_speed: 1.0,
        poll: case.poll().unwrap_or("kernel").to_string(),
        cpus: cpus.clone(),
    };
    let mut fps_window: Vec<(f64, f64, f64)> = Vec::new();
    let (mut settle_steps, mut reprobe_s): (Option<u32>, Option<f64>) = (None, None);
    let t0 = Instant::now();
    let mut last = t0;
    for (step, &n) in b.plan.streams.iter().enumerate() {
        let changed = sources.len() != n as usize;
        sources.set(n as usize)?;
        let step_start = Instant::now();
        // Re-probe delay: from the start of the sample window in which the offered load
        // was first seen to move (sources take a moment to start) to the decision.
        let mut awaiting_reprobe = changed && step > 0;
        let before = ticks.last().map(|t: &Tick| t.offered_mbps).unwrap_or(0.0);
        let mut change_seen: Option<f64> = None;
        let mut next = step_start;
        while step_start.elapsed().as_secs_f64() < b.plan.step_s {
            next += Duration::from_secs_f64(b.plan.tick_s);
            if let Some(w) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(w);
            }
            let now_c = read_counters(b.tb, frames(&transcoders))?;
            let r = meter.sample()?;
            let dt = last.elapsed().as_secs_f64().max(1e-3);
            last = Instant::now();
            let iv = Interval::between(&prev, &now_c, dt, sources.len());
            prev = now_c;
            let at = TickAt {
                case: case.name(),
                t_s: t0.elapsed().as_secs_f64(),
                in_step_s: step_start.elapsed().as_secs_f64(),
                step,
            };
            let tick = iv.tick(at, &r, &rtt.drain(), &knobs);
            if let Some(m) = manager.as_mut() {
                fps_window.push((dt, iv.out_fps, iv.expected_fps));
                if fps_window.len() > 4 {
                    fps_window.remove(0);
                }
                let rates = BoxRates {
                    offered: iv.offered,
                    nat_out: iv.nat_out,
                    pps: iv.pps,
                    worker_cpu: group(&r, "nat/worker").map(|g| g.cpu_cores).unwrap_or(0.0),
                    tc_delivery: delivery(&fps_window),
                };
                let reprobes = m.reprobes();
                let actions = m.step(&box_samples(&tick, &rates, &knobs));
                let moved = (tick.offered_mbps - before).abs() > 0.2 * before.max(0.1);
                if awaiting_reprobe && change_seen.is_none() && moved {
                    change_seen = Some(tick.t_s - dt);
                }
                if let Some(seen) = change_seen.filter(|_| awaiting_reprobe) {
                    if m.reprobes() > reprobes {
                        let d = tick.t_s - seen;
                        reprobe_s = Some(reprobe_s.map_or(d, |r: f64| r.max(d)));
                        awaiting_reprobe = false;
                    }
                }
                for action in actions {
                    let applied = knobs
                        .apply(&mut act, &action, &nat, worker_target, &tc_targets, &cg)
                        .map_err(|e| format!("{e:#}"));
                    ops.push(OpRecord {
                        case: case.name().into(),
                        t_s: tick.t_s,
                        action,
                        applied,
                    });
                }
                settle_steps = m
                    .settle_steps()
                    .iter()
                    .filter_map(|(_, s)| *s)
                    .chain(settle_steps)
                    .max();
            }
            ticks.push(tick);
        }
    }
    sources.set(0)?;
    for name in ["nat", "transcode"] {
        act.release(&cg(name))?;
    }
    for t in transcoders.drain(..) {
        t.stop(Duration::from_secs(2));
    }
    drop(nat);
    Ok(CaseRun {
        case,
        ticks,
        idle_core_pct,
        ops,
        settle_steps,
        reprobe_s,
    })
}

/// The case's energy meter: the NAT box (with the NAPI threads that carry its traffic),
/// the transcoders and, where the case has one, the NAT's dataplane worker thread.
fn case_meter(
    b: &Bench<'_>,
    nat: &NatBox,
    tc_targets: &[Target],
    worker: Option<Target>,
) -> anyhow::Result<Meter> {
    let mut meter = Meter::new(MeterConfig {
        host: "nfv-host".into(),
        model: Some(b.model.clone()),
        busy: HostBusy::Groups,
        use_rapl: true,
    })?;
    let mut nat_targets = nat.targets();
    nat_targets.extend(b.napi.iter().copied());
    meter.add_group(Group {
        name: "nat".into(),
        kind: GroupKind::Vnf,
        targets: nat_targets,
        reserved_cores: 1.0,
    });
    meter.add_group(Group {
        name: "transcode".into(),
        kind: GroupKind::Vnf,
        targets: tc_targets.to_vec(),
        reserved_cores: 1.0,
    });
    if let Some(w) = worker {
        meter.add_group(Group {
            name: "nat/worker".into(),
            kind: GroupKind::Worker,
            targets: vec![w],
            reserved_cores: 0.0,
        });
    }
    Ok(meter)
}

/// One tick's rates (bit/s, packets/s) and the NAT worker's CPU, for the power manager.
struct BoxRates {
    offered: f64,
    nat_out: f64,
    pps: f64,
    worker_cpu: f64,
    /// Share of the expected frames the transcoders delivered (≤ 1).
    tc_delivery: f64,
}

/// The share of the expected frames delivered over `window` (interval, frames/s out,
/// frames/s expected), weighted by interval; 1 when nothing was expected.
fn delivery(window: &[(f64, f64, f64)]) -> f64 {
    let (got, want) = window
        .iter()
        .fold((0.0, 0.0), |(g, w), (d, o, e)| (g + d * o, w + d * e));
    if want > 0.0 {
        (got / want).min(1.0)
    } else {
        1.0
    }
}

/// The power manager's samples of one tick: the NAT box by what it delivered and the
/// measured round-trip p99, the transcoding box by the frames it delivered.
fn box_samples(tick: &Tick, r: &BoxRates, knobs: &Knobs) -> [Option<BoxSample>; 2] {
    [
        Some(BoxSample {
            sample: Sample {
                offered_bps: r.offered,
                delivered_bps: r.nat_out,
                latency_us: tick.rtt_p99_ms.map(|ms| ms * 1000.0),
                utilization: Some(r.worker_cpu / knobs.nat_speed),
                used: None,
            },
            pps: r.pps,
            cpu_cores: tick.nat_cpu,
            wait_cores: 0.0,
        }),
        Some(BoxSample {
            sample: Sample {
                offered_bps: r.nat_out,
                delivered_bps: r.nat_out * r.tc_delivery,
                latency_us: None,
                utilization: Some(tick.transcode_cpu / knobs.tc_speed),
                used: None,
            },
            pps: 0.0,
            cpu_cores: tick.transcode_cpu,
            wait_cores: 0.0,
        }),
    ]
}

/// The knob settings of the running case.
struct Knobs {
    nat_speed: f64,
    tc_speed: f64,
    poll: String,
    cpus: Vec<usize>,
}

impl Knobs {
    fn cpus_text(&self) -> String {
        self.cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Applies one manager decision through the actuators.
    fn apply(
        &mut self,
        act: &mut Actuator,
        a: &Action,
        nat: &NatBox,
        worker: Option<Target>,
        tc: &[Target],
        cg: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<()> {
        let targets: Vec<Target> = if a.target == "nat" {
            worker.into_iter().collect()
        } else {
            tc.to_vec()
        };
        match &a.setting {
            Setting::Speed(f) => {
                act.set_speed(&cg(&a.target), &targets, *f, 1.0, &self.cpus)?;
                if a.target == "nat" {
                    self.nat_speed = *f;
                } else {
                    self.tc_speed = *f;
                }
            }
            Setting::Poll(mode) => {
                let sock = nat.socket().context("no dataplane to set a poll mode on")?;
                act.set_poll(sock, *mode, None)?;
                self.poll = mode.as_str().into();
            }
            Setting::Affinity(cpus) => {
                act.pin(&targets, cpus)?;
                self.cpus = cpus.clone();
            }
        }
        Ok(())
    }
}
