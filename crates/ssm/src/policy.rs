//! The SSM's provisioning policy, free of I/O: fed one observation per VNF per poll and a
//! clock value, it returns the actions (revokes first, then grants) and a decision per VNF.
//! Hysteresis (SSH-tunnel paper §III): N consecutive CPU samples above the upper threshold
//! make a VNF want a queue pair, N below the lower one make a holder give it back; every
//! change starts a per-VNF cool-down; the calibration vetoes grants that would not help.

use std::collections::{BTreeMap, VecDeque};

use nfx_accel::Calibration;

use crate::decision::{Decision, Kind};

/// Engine name the EMs report while a VNF uses a lookaside queue pair.
pub const LOOKASIDE: &str = "lookaside";

/// Thresholds and capacity of the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// CPU % above which a VNF is hot.
    pub upper: f64,
    /// CPU % below which a holder's demand has fallen.
    pub lower: f64,
    /// Consecutive samples needed on either side (N).
    pub samples: usize,
    /// Time after a change during which the VNF is not changed again.
    pub cooldown_ns: u64,
    /// Queue pairs the lookaside device has.
    pub queue_pairs: usize,
    /// Calibrated accelerator/engine throughput ratio a grant must exceed.
    pub min_gain: f64,
}

impl PolicyConfig {
    /// Checks the thresholds make sense; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=100.0 * 1024.0).contains(&self.upper) || !self.upper.is_finite() {
            return Err(format!("upper: {} is not a CPU percentage", self.upper));
        }
        if !(self.lower >= 0.0 && self.lower < self.upper) {
            return Err(format!(
                "lower: {} must be at least 0 and below upper ({})",
                self.lower, self.upper
            ));
        }
        if self.samples == 0 {
            return Err("samples: must be at least 1".into());
        }
        if !(self.min_gain.is_finite() && self.min_gain > 0.0) {
            return Err(format!("min_gain: {} must be positive", self.min_gain));
        }
        Ok(())
    }
}

/// One poll's outcome for one VNF.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// The EM answered.
    Sample(Sample),
    /// The EM could not be reached (with why).
    Unreachable(String),
}

/// The parts of an EM status the policy uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Engine in use.
    pub engine: String,
    /// Algorithm of the VNF's crypto.
    pub alg: String,
    /// CPU utilisation, percent of one core.
    pub cpu_pct: f64,
    /// Mean packet size in bytes.
    pub mean_packet_bytes: f64,
}

/// A command the SSM must send to an EM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `POST /accelerator/release` to this VNF.
    Revoke(String),
    /// `POST /accelerator/use` to this VNF.
    Grant(String),
}

#[derive(Default)]
struct VnfState {
    window: VecDeque<(u64, f64)>,
    holding: bool,
    last_change_ns: Option<u64>,
    unreachable: u64,
    last: Option<Sample>,
}

impl VnfState {
    fn full(&self, n: usize) -> bool {
        self.window.len() >= n
    }
    fn hot(&self, cfg: &PolicyConfig) -> bool {
        self.full(cfg.samples) && self.window.iter().all(|&(_, c)| c > cfg.upper)
    }
    fn cold(&self, cfg: &PolicyConfig) -> bool {
        self.full(cfg.samples) && self.window.iter().all(|&(_, c)| c < cfg.lower)
    }
    fn mean(&self) -> f64 {
        if self.window.is_empty() {
            return 0.0;
        }
        self.window.iter().map(|&(_, c)| c).sum::<f64>() / self.window.len() as f64
    }
    fn cooling(&self, now: u64, cfg: &PolicyConfig) -> bool {
        self.last_change_ns
            .is_some_and(|t| now < t.saturating_add(cfg.cooldown_ns))
    }
    fn first_ts(&self) -> u64 {
        self.window.front().map_or(0, |&(t, _)| t)
    }
}

/// Outcome of one poll.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    /// Commands to send, every revoke before any grant.
    pub actions: Vec<Action>,
    /// One or more decisions per observed VNF.
    pub decisions: Vec<Decision>,
}

/// The policy state: per-VNF CPU windows, holders, cool-downs.
pub struct Policy {
    cfg: PolicyConfig,
    cal: Option<Calibration>,
    vnfs: BTreeMap<String, VnfState>,
}

struct Candidate {
    name: String,
    score: f64,
    mean: f64,
    gain: Option<f64>,
}

impl Policy {
    /// A policy with no VNFs yet; `cal` = None disables the calibration veto.
    pub fn new(cfg: PolicyConfig, cal: Option<Calibration>) -> Policy {
        Policy {
            cfg,
            cal,
            vnfs: BTreeMap::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// VNFs currently holding a queue pair.
    pub fn holders(&self) -> Vec<String> {
        self.vnfs
            .iter()
            .filter(|(_, s)| s.holding)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Forgets the VNFs not in `names` (gone since the last poll): a destroyed holder's
    /// queue pair is counted free again.
    pub fn retain(&mut self, names: &[String]) {
        self.vnfs.retain(|n, _| names.contains(n));
    }

    /// How often each VNF's EM was unreachable.
    pub fn unreachable_counts(&self) -> BTreeMap<String, u64> {
        self.vnfs
            .iter()
            .map(|(n, s)| (n.clone(), s.unreachable))
            .collect()
    }

    /// Time (ns) of the first sample of `vnf`'s current window: for a grant, the sample
    /// that crossed the upper threshold.
    pub fn crossed_ns(&self, vnf: &str) -> Option<u64> {
        self.vnfs.get(vnf).map(|s| s.first_ts())
    }

    /// Feeds one poll's observations and decides: revokes from VNFs whose demand fell,
    /// then grants to the hottest ones (preempting a holder that needs it less), and a
    /// no-op with its reason for every other observed VNF.
    pub fn step(&mut self, now: u64, obs: &[(String, Observation)]) -> Step {
        let mut out = Step::default();
        let mut decided: Vec<String> = Vec::new();
        self.observe(now, obs, &mut out, &mut decided);
        let observed: Vec<&String> = obs
            .iter()
            .filter(|(_, o)| matches!(o, Observation::Sample(_)))
            .map(|(n, _)| n)
            .collect();
        self.revoke_cold(now, &observed, &mut out, &mut decided);
        let cands = self.candidates(now, &observed, &mut out, &mut decided);
        self.grant(now, cands, &mut out, &mut decided);
        for name in observed {
            if decided.contains(name) {
                continue;
            }
            let st = &self.vnfs[name];
            let cpu = st.window.back().map(|&(_, c)| c);
            let reason = if st.holding {
                "holds a queue pair; demand has not fallen".to_string()
            } else if !st.full(self.cfg.samples) {
                format!("{} of {} samples so far", st.window.len(), self.cfg.samples)
            } else {
                format!(
                    "not {} consecutive samples above upper threshold {}%",
                    self.cfg.samples, self.cfg.upper
                )
            };
            out.decisions
                .push(opt_cpu(Decision::new(now, name, Kind::Noop, reason), cpu));
        }
        out
    }

    /// Records one poll's observations in each VNF's window; an unreachable EM is a
    /// decided no-op, an engine change reported by the EM is noted.
    fn observe(
        &mut self,
        now: u64,
        obs: &[(String, Observation)],
        out: &mut Step,
        decided: &mut Vec<String>,
    ) {
        for (name, o) in obs {
            let st = self.vnfs.entry(name.clone()).or_default();
            match o {
                Observation::Unreachable(why) => {
                    st.unreachable += 1;
                    st.window.clear();
                    out.decisions.push(Decision::new(
                        now,
                        name,
                        Kind::Noop,
                        format!("EM unreachable ({} times): {why}", st.unreachable),
                    ));
                    decided.push(name.clone());
                }
                Observation::Sample(s) => {
                    st.window.push_back((now, s.cpu_pct));
                    while st.window.len() > self.cfg.samples {
                        st.window.pop_front();
                    }
                    let on_accel = s.engine == LOOKASIDE;
                    if on_accel != st.holding {
                        st.holding = on_accel;
                        let why = if on_accel {
                            "EM reports the lookaside engine: counted as a holder"
                        } else {
                            "EM reports a software engine: its queue pair is counted free"
                        };
                        out.decisions.push(with_cpu(
                            Decision::new(now, name, Kind::Noop, why),
                            s.cpu_pct,
                        ));
                    }
                    st.last = Some(s.clone());
                }
            }
        }
    }

    /// Revokes the queue pairs of holders whose demand fell (unless still cooling down).
    fn revoke_cold(
        &mut self,
        now: u64,
        observed: &[&String],
        out: &mut Step,
        decided: &mut Vec<String>,
    ) {
        let mut revoked: Vec<String> = Vec::new();
        for name in observed {
            let st = &self.vnfs[*name];
            if !st.holding || !st.cold(&self.cfg) {
                continue;
            }
            let cpu = st.window.back().map(|&(_, c)| c);
            if st.cooling(now, &self.cfg) {
                out.decisions.push(opt_cpu(
                    Decision::new(
                        now,
                        name,
                        Kind::Noop,
                        "demand fell but still cooling down after the last change",
                    ),
                    cpu,
                ));
            } else {
                let reason = format!(
                    "demand fell: {} samples below lower threshold {}%",
                    self.cfg.samples, self.cfg.lower
                );
                out.decisions
                    .push(opt_cpu(Decision::new(now, name, Kind::Revoke, reason), cpu));
                out.actions.push(Action::Revoke((*name).clone()));
                revoked.push((*name).clone());
            }
            decided.push((*name).clone());
        }
        for n in &revoked {
            self.change(n, now, false);
        }
    }

    /// The hot VNFs without a queue pair that may get one, with their scores; the
    /// others (cooling down, or vetoed by the calibration) get their decision here.
    fn candidates(
        &mut self,
        now: u64,
        observed: &[&String],
        out: &mut Step,
        decided: &mut Vec<String>,
    ) -> Vec<Candidate> {
        let mut cands: Vec<Candidate> = Vec::new();
        for name in observed {
            let st = &self.vnfs[*name];
            if st.holding || !st.hot(&self.cfg) {
                continue;
            }
            decided.push((*name).clone());
            let cpu = st.window.back().map(|&(_, c)| c);
            let mut d = opt_cpu(Decision::new(now, name, Kind::Deny, ""), cpu);
            if st.cooling(now, &self.cfg) {
                d.decision = Kind::Noop;
                d.reason = "wants the accelerator but is cooling down after the last change".into();
                out.decisions.push(d);
                continue;
            }
            let gain = match self.gain(st.last.as_ref()) {
                Ok(g) => g,
                Err(why) => {
                    d.reason = why;
                    out.decisions.push(d);
                    continue;
                }
            };
            let mean = st.mean();
            cands.push(Candidate {
                name: (*name).clone(),
                score: mean * gain.unwrap_or(1.0),
                mean,
                gain,
            });
        }
        cands
    }

    /// Grants queue pairs to the candidates by decreasing score: a free one, else one
    /// preempted from a holder that needs it less, else a deny with the holders named.
    fn grant(
        &mut self,
        now: u64,
        mut cands: Vec<Candidate>,
        out: &mut Step,
        decided: &mut Vec<String>,
    ) {
        cands.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.name.cmp(&b.name)));
        let mut grants: Vec<Decision> = Vec::new();
        for c in cands {
            let held = self.vnfs.values().filter(|s| s.holding).count();
            let cpu = self.vnfs[&c.name].window.back().map(|&(_, x)| x);
            let mut d = opt_cpu(Decision::new(now, &c.name, Kind::Grant, ""), cpu);
            d.gain = c.gain;
            let why_hot = format!(
                "{} samples above upper threshold {}% (mean {:.1}%){}",
                self.cfg.samples,
                self.cfg.upper,
                c.mean,
                c.gain
                    .map(|g| format!(", calibrated gain {g:.2}x"))
                    .unwrap_or_default()
            );
            if held < self.cfg.queue_pairs {
                d.reason = format!("{why_hot}; a queue pair is free");
            } else if let Some(victim) = self.preemptible(now, c.mean) {
                let vcpu = self.vnfs[&victim].mean();
                out.decisions.push(opt_cpu(
                    Decision::new(
                        now,
                        &victim,
                        Kind::Revoke,
                        format!(
                            "preempted by {} which needs it more (mean cpu {:.1}% vs {:.1}%)",
                            c.name, c.mean, vcpu
                        ),
                    ),
                    self.vnfs[&victim].window.back().map(|&(_, x)| x),
                ));
                decided.push(victim.clone());
                out.actions.push(Action::Revoke(victim.clone()));
                self.change(&victim, now, false);
                d.reason = format!("{why_hot}; took the queue pair of {victim}");
            } else {
                d.decision = Kind::Deny;
                d.reason = format!(
                    "{why_hot}, but no free queue pair: all {} held by VNFs that are busy or cooling down ({})",
                    self.cfg.queue_pairs,
                    self.holders().join(", ")
                );
                out.decisions.push(d);
                continue;
            }
            self.change(&c.name, now, true);
            grants.push(d);
        }
        for d in grants {
            out.actions.push(Action::Grant(d.vnf.clone()));
            out.decisions.push(d);
        }
    }

    /// Tells the policy a grant did not happen (the EM refused or was unreachable, or a
    /// revoke it depended on failed); returns the deny decision to log.
    pub fn grant_failed(&mut self, now: u64, vnf: &str, why: &str) -> Decision {
        if let Some(st) = self.vnfs.get_mut(vnf) {
            st.holding = false;
        }
        Decision::new(now, vnf, Kind::Deny, format!("grant failed: {why}"))
    }

    /// Tells the policy a revoke did not happen: the VNF still holds its queue pair.
    pub fn revoke_failed(&mut self, now: u64, vnf: &str, why: &str) -> Decision {
        if let Some(st) = self.vnfs.get_mut(vnf) {
            st.holding = true;
        }
        Decision::new(
            now,
            vnf,
            Kind::Noop,
            format!("revoke failed, still counted as holder: {why}"),
        )
    }

    fn change(&mut self, vnf: &str, now: u64, holding: bool) {
        if let Some(st) = self.vnfs.get_mut(vnf) {
            st.holding = holding;
            st.last_change_ns = Some(now);
        }
    }

    /// The holder to take a queue pair from for a candidate of mean CPU `mean`: not hot,
    /// not cooling down, and less loaded than the candidate (the least loaded such).
    fn preemptible(&self, now: u64, mean: f64) -> Option<String> {
        self.vnfs
            .iter()
            .filter(|(_, s)| {
                s.holding && !s.hot(&self.cfg) && !s.cooling(now, &self.cfg) && s.mean() < mean
            })
            .min_by(|a, b| a.1.mean().total_cmp(&b.1.mean()))
            .map(|(n, _)| n.clone())
    }

    /// Calibrated lookaside/engine throughput ratio for the VNF's last sample, `Ok(None)`
    /// without a calibration, `Err(reason)` when the calibration vetoes the grant.
    fn gain(&self, last: Option<&Sample>) -> Result<Option<f64>, String> {
        let (Some(cal), Some(s)) = (&self.cal, last) else {
            return Ok(None);
        };
        let bytes = s.mean_packet_bytes.round().clamp(1.0, u32::MAX as f64) as u32;
        let acc = cal.throughput(LOOKASIDE, &s.alg, bytes).ok_or_else(|| {
            format!(
                "calibration has no lookaside figure for {} at {bytes} B",
                s.alg
            )
        })?;
        let cur = cal.throughput(&s.engine, &s.alg, bytes).ok_or_else(|| {
            format!(
                "calibration has no {} figure for {} at {bytes} B",
                s.engine, s.alg
            )
        })?;
        let g = acc / cur;
        if g <= self.cfg.min_gain {
            return Err(format!(
                "calibration veto: lookaside {acc:.0} MB/s does not beat {} {cur:.0} MB/s for {} at {bytes} B (gain {g:.2}x)",
                s.engine, s.alg
            ));
        }
        Ok(Some(g))
    }
}

fn with_cpu(mut d: Decision, cpu: f64) -> Decision {
    d.cpu_pct = Some(cpu);
    d
}

fn opt_cpu(mut d: Decision, cpu: Option<f64>) -> Decision {
    d.cpu_pct = cpu;
    d
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
