//! The power manager of one service: from telemetry samples of the service's boxes (the
//! hosts' VNF workers) it decides knob settings, each with a reason for the operation
//! record:
//!
//! * **speed** per box by the probing loop ([`crate::probe`]), never below the SLA;
//! * **poll mode** per dataplane box by load: `busy` above `busy_above_pps`, back to
//!   `adaptive` below half that rate (by load only: on a shared or oversubscribed host a
//!   broken latency is often CPU contention, which spinning makes worse);
//! * **consolidation**: every box on the first core while the service needs less than
//!   `consolidate_below_cores`, spread over all cores above 1.5× that (hysteresis). Its
//!   need is the CPU its boxes used plus the time they waited for a CPU: boxes sharing
//!   one core cannot use more than it gives them, but a wait shows what they lack.
//!
//! It is pure (no I/O): the controller feeds it samples and applies what it returns
//! through the hosts' agents ([`crate::knobs`]).

use crate::probe::{Phase, ProbeConfig, Prober, Sample, Sla};
use nfx_io::PollMode;
use serde::Serialize;

/// How the manager treats a service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServicePolicy {
    /// The service's SLA.
    pub sla: Sla,
    /// The probing loop's tuning.
    pub probe: ProbeConfig,
    /// Packet rate above which a dataplane box busy-polls.
    pub busy_above_pps: f64,
    /// Service CPU (cores) below which its boxes share one core.
    pub consolidate_below_cores: f64,
}

/// A box of the service: a VNF worker the manager has knobs on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoxSpec {
    /// Name (VNF instance id).
    pub name: String,
    /// Whether it is a dataplane worker with a poll mode.
    pub dataplane: bool,
}

/// One box's telemetry over the last interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BoxSample {
    /// Throughput, latency and utilisation at the current setting.
    pub sample: Sample,
    /// Packets per second offered.
    pub pps: f64,
    /// Cores the box used.
    pub cpu_cores: f64,
    /// Cores' worth of time the box was runnable but waited for a CPU (0 when unknown,
    /// or when the wait is the box's own CPU limit): used + waited is what it asked for,
    /// which boxes sharing a core do not get.
    pub wait_cores: f64,
}

/// A knob setting to apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "knob", content = "value")]
pub enum Setting {
    /// Fraction of full speed (cpufreq ceiling or CPU quota).
    Speed(f64),
    /// Poll mode of a dataplane worker.
    Poll(PollMode),
    /// Cores the box may run on.
    Affinity(Vec<usize>),
}

/// One decision of the manager.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// Box name.
    pub target: String,
    /// What to set.
    pub setting: Setting,
    /// Why (for the operation record).
    pub reason: String,
}

/// Rounds in a row a box's loop must hold its settled level, with no window awaiting
/// confirmation, before the manager reports it settled ([`PowerManager::steady`]): the
/// loop's settled phase may still raise the level (headroom, a confirmed loss).
pub const STEADY_ROUNDS: u32 = 3;

struct BoxState {
    spec: BoxSpec,
    prober: Prober,
    poll: PollMode,
    settled_after: Option<u32>,
    /// Rounds in a row the loop held its settled level.
    steady: u32,
}

/// The manager of one service (see the module doc).
pub struct PowerManager {
    policy: ServicePolicy,
    boxes: Vec<BoxState>,
    cpus: Vec<usize>,
    consolidated: Option<bool>,
    reprobes: u64,
}

impl PowerManager {
    /// A manager for `boxes` that may use `cpus` (at least one). Boxes start at full
    /// speed; dataplane boxes are assumed `adaptive` until told otherwise.
    pub fn new(policy: ServicePolicy, boxes: Vec<BoxSpec>, cpus: Vec<usize>) -> Self {
        let boxes = boxes
            .into_iter()
            .map(|spec| BoxState {
                prober: Prober::new(policy.probe.clone(), policy.sla),
                poll: PollMode::Adaptive,
                settled_after: None,
                steady: 0,
                spec,
            })
            .collect();
        Self {
            policy,
            boxes,
            cpus: if cpus.is_empty() { vec![0] } else { cpus },
            consolidated: None,
            reprobes: 0,
        }
    }

    /// The speed each box runs at now, by name.
    pub fn speeds(&self) -> Vec<(String, f64)> {
        self.boxes
            .iter()
            .map(|b| (b.spec.name.clone(), b.prober.level()))
            .collect()
    }

    /// Probes started over because a box's offered load changed, over all boxes: a
    /// re-probe at full speed changes no knob, so it shows here and not as an action.
    pub fn reprobes(&self) -> u64 {
        self.reprobes
    }

    /// Probe steps the last completed probe of each box took to settle.
    pub fn settle_steps(&self) -> Vec<(String, Option<u32>)> {
        self.boxes
            .iter()
            .map(|b| (b.spec.name.clone(), b.settled_after))
            .collect()
    }

    /// Whether each box is settled: its loop settled and held the level for
    /// [`STEADY_ROUNDS`] rounds in a row (the signal to measure a settled box by).
    pub fn steady(&self) -> Vec<(String, bool)> {
        self.boxes
            .iter()
            .map(|b| (b.spec.name.clone(), b.steady >= STEADY_ROUNDS))
            .collect()
    }

    /// Decides from one telemetry sample per box (in the order of the boxes given to
    /// [`PowerManager::new`]; a missing sample leaves its box as it is).
    pub fn step(&mut self, samples: &[Option<BoxSample>]) -> Vec<Action> {
        let mut out = Vec::new();
        for (b, s) in self.boxes.iter_mut().zip(samples) {
            let Some(s) = s else { continue };
            let d = b.prober.step(&s.sample);
            self.reprobes += u64::from(d.reprobe);
            let holds = d.phase == Phase::Settled && !d.changed && !d.confirming;
            b.steady = if holds { b.steady + 1 } else { 0 };
            if d.phase == Phase::Settled && (d.changed || b.settled_after.is_none()) {
                b.settled_after = Some(d.probe_steps);
            } else if d.phase == Phase::Probing && d.probe_steps == 1 {
                b.settled_after = None;
            }
            if d.changed {
                out.push(Action {
                    target: b.spec.name.clone(),
                    setting: Setting::Speed(d.level),
                    reason: d.reason,
                });
            }
            if b.spec.dataplane {
                if let Some(a) = choose_poll(&self.policy, b, s) {
                    out.push(a);
                }
            }
        }
        out.extend(self.consolidate(samples));
        out
    }

    fn consolidate(&mut self, samples: &[Option<BoxSample>]) -> Vec<Action> {
        if self.cpus.len() < 2 || samples.iter().all(Option::is_none) {
            return Vec::new();
        }
        let used: f64 = samples.iter().flatten().map(|s| s.cpu_cores).sum();
        let waited: f64 = samples.iter().flatten().map(|s| s.wait_cores).sum();
        let need = used + waited;
        let thr = self.policy.consolidate_below_cores;
        let want = match self.consolidated {
            Some(true) if need > 1.5 * thr => false,
            Some(false) if need < thr => true,
            None => need < thr,
            Some(c) => c,
        };
        if self.consolidated == Some(want) {
            return Vec::new();
        }
        self.consolidated = Some(want);
        let (cpus, why) = if want {
            (
                vec![self.cpus[0]],
                format!("service needs {need:.2} cores (used {used:.2} + waited {waited:.2}; < {thr:.2}): consolidated on core {}, the others left idle", self.cpus[0]),
            )
        } else {
            (
                self.cpus.clone(),
                format!(
                    "service needs {need:.2} cores (used {used:.2} + waited {waited:.2}; > {:.2}): spread over cores {:?}",
                    1.5 * thr,
                    self.cpus
                ),
            )
        };
        self.boxes
            .iter()
            .map(|b| Action {
                target: b.spec.name.clone(),
                setting: Setting::Affinity(cpus.clone()),
                reason: why.clone(),
            })
            .collect()
    }
}

fn choose_poll(policy: &ServicePolicy, b: &mut BoxState, s: &BoxSample) -> Option<Action> {
    let want = match b.poll {
        PollMode::Busy if s.pps < 0.5 * policy.busy_above_pps => PollMode::Adaptive,
        _ if s.pps > policy.busy_above_pps => PollMode::Busy,
        other => other,
    };
    if want == b.poll {
        return None;
    }
    b.poll = want;
    let reason = if want == PollMode::Busy {
        format!(
            "{:.0} pps > {:.0}: busy polling",
            s.pps, policy.busy_above_pps
        )
    } else {
        format!(
            "{:.0} pps < {:.0}: adaptive polling (sleeps when idle)",
            s.pps,
            0.5 * policy.busy_above_pps
        )
    };
    Some(Action {
        target: b.spec.name.clone(),
        setting: Setting::Poll(want),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ServicePolicy {
        ServicePolicy {
            sla: Sla {
                min_bps: 1e6,
                max_latency_us: 20_000.0,
                min_delivery: 0.9,
            },
            probe: ProbeConfig::default(),
            busy_above_pps: 200_000.0,
            consolidate_below_cores: 0.6,
        }
    }

    fn sample(level: f64, need: f64, offered: f64, pps: f64) -> BoxSample {
        BoxSample {
            sample: Sample {
                offered_bps: offered,
                delivered_bps: offered * (level / need).min(1.0),
                latency_us: Some(800.0),
                utilization: None,
                used: None,
            },
            pps,
            cpu_cores: need.min(level),
            wait_cores: 0.0,
        }
    }

    fn boxes() -> Vec<BoxSpec> {
        vec![
            BoxSpec {
                name: "nat".into(),
                dataplane: true,
            },
            BoxSpec {
                name: "transcode".into(),
                dataplane: false,
            },
        ]
    }

    #[test]
    fn probes_each_box_consolidates_and_records_reasons() {
        let mut m = PowerManager::new(policy(), boxes(), vec![0, 1]);
        assert!(m.steady().iter().all(|(_, s)| !*s));
        let mut all = Vec::new();
        for _ in 0..12 {
            let sp = m.speeds();
            all.extend(m.step(&[
                Some(sample(sp[0].1, 0.04, 20e6, 2_000.0)),
                Some(sample(sp[1].1, 0.30, 20e6, 2_000.0)),
            ]));
        }
        let sp = m.speeds();
        assert_eq!(sp[0].1, 0.05, "{sp:?}");
        assert_eq!(sp[1].1, 0.35, "{sp:?}");
        assert!(m
            .settle_steps()
            .iter()
            .all(|(_, s)| s.is_some_and(|n| n <= 10)));
        // Held for STEADY_ROUNDS rounds since: reported settled.
        assert!(m.steady().iter().all(|(_, s)| *s), "{:?}", m.steady());
        let aff: Vec<&Action> = all
            .iter()
            .filter(|a| matches!(a.setting, Setting::Affinity(_)))
            .collect();
        assert_eq!(aff.len(), 2, "{aff:?}");
        assert_eq!(aff[0].setting, Setting::Affinity(vec![0]));
        assert!(aff[0].reason.contains("consolidated"));
        assert!(all.iter().all(|a| !a.reason.is_empty()));
        // No poll change at a low rate with the latency kept.
        assert!(!all.iter().any(|a| matches!(a.setting, Setting::Poll(_))));
        assert_eq!(m.reprobes(), 0);
        // The load doubles: both boxes re-probe in the same round (the settled NAT box
        // goes back to full speed: an action; each counts once).
        let sp = m.speeds();
        let acts = m.step(&[
            Some(sample(sp[0].1, 0.08, 40e6, 4_000.0)),
            Some(sample(sp[1].1, 0.60, 40e6, 4_000.0)),
        ]);
        assert_eq!(m.reprobes(), 2, "{acts:?}");
    }

    #[test]
    fn high_rate_switches_to_busy_and_back_with_hysteresis() {
        let mut m = PowerManager::new(policy(), boxes()[..1].to_vec(), vec![0]);
        let a = m.step(&[Some(sample(1.0, 0.5, 1e9, 300_000.0))]);
        assert!(
            a.contains(&Action {
                target: "nat".into(),
                setting: Setting::Poll(PollMode::Busy),
                reason: "300000 pps > 200000: busy polling".into(),
            }),
            "{a:?}"
        );
        // Between half the threshold and the threshold: stays busy.
        let a = m.step(&[Some(sample(1.0, 0.5, 1e9, 150_000.0))]);
        assert!(
            !a.iter().any(|x| matches!(x.setting, Setting::Poll(_))),
            "{a:?}"
        );
        let a = m.step(&[Some(sample(0.7, 0.5, 1e8, 50_000.0))]);
        assert!(
            a.iter()
                .any(|x| x.setting == Setting::Poll(PollMode::Adaptive)),
            "{a:?}"
        );
        // Late packets at a low rate do not make it spin.
        let mut late = sample(0.5, 0.5, 1e8, 50_000.0);
        late.sample.latency_us = Some(30_000.0);
        let a = m.step(&[Some(late)]);
        assert!(
            !a.iter().any(|x| matches!(x.setting, Setting::Poll(_))),
            "{a:?}"
        );
    }

    #[test]
    fn spreads_when_the_service_grows() {
        let mut m = PowerManager::new(policy(), boxes(), vec![0, 1]);
        let a = m.step(&[
            Some(sample(1.0, 0.1, 1e7, 1e3)),
            Some(sample(1.0, 0.1, 1e7, 1e3)),
        ]);
        assert!(a.iter().any(|x| x.setting == Setting::Affinity(vec![0])));
        let a = m.step(&[
            Some(sample(1.0, 0.5, 1e8, 1e4)),
            Some(sample(1.0, 0.6, 1e8, 1e4)),
        ]);
        assert!(
            a.iter().any(|x| x.setting == Setting::Affinity(vec![0, 1])),
            "{a:?}"
        );
        // No sample: nothing decided.
        assert!(m.step(&[None, None]).is_empty());
    }

    #[test]
    fn boxes_sharing_a_core_spread_when_they_wait_for_it() {
        let mut m = PowerManager::new(policy(), boxes(), vec![0, 1]);
        let idle = sample(1.0, 0.01, 1e5, 10.0);
        let a = m.step(&[Some(idle), Some(idle)]);
        assert!(a.iter().any(|x| x.setting == Setting::Affinity(vec![0])));
        // Loaded, both on core 0 beside a busy neighbour: each gets 0.2 core and waits
        // 0.8 for it. What they used alone (0.4) is below the threshold; what they asked
        // for (2.0) is not.
        let mut busy = sample(1.0, 0.2, 1e7, 1e3);
        busy.wait_cores = 0.8;
        let a = m.step(&[Some(busy), Some(busy)]);
        let spread: Vec<&Action> = a
            .iter()
            .filter(|x| x.setting == Setting::Affinity(vec![0, 1]))
            .collect();
        assert_eq!(spread.len(), 2, "{a:?}");
        assert!(
            spread[0].reason.contains("used 0.40 + waited 1.60"),
            "{}",
            spread[0].reason
        );
        // Spread, the same use with less wait (0.7 in all): between the thresholds, it
        // stays spread.
        busy.wait_cores = 0.15;
        let a = m.step(&[Some(busy), Some(busy)]);
        assert!(!a.iter().any(|x| matches!(x.setting, Setting::Affinity(_))));
    }
}
