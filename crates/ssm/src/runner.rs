//! The SSM loop: polls every VNF of its [`Fleet`], feeds the policy, sends its commands
//! (revokes first, and no grant after a failed revoke), and records every decision as a
//! JSON line and in memory. The fleet is how the SSM reaches the VNFs: the standalone
//! `nfx ssm` talks to their element managers itself ([`EmFleet`]); the controller goes
//! through each host's agent.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::decision::{Decision, Kind};
use crate::em::EmClient;
use crate::metrics::Stats;
use crate::policy::{Action, Observation, Policy, Sample};

/// The VNFs one SSM arbitrates, and how it observes and switches them.
pub trait Fleet: Send {
    /// The VNFs to poll now (the set may change between polls).
    fn names(&self) -> Vec<String>;
    /// One VNF's engine and load, or why it could not be read.
    fn observe(&self, name: &str) -> Observation;
    /// Has the VNF attach a queue pair of the device; the live switch's duration (µs).
    fn grant(&self, name: &str) -> Result<u64, String>;
    /// Has the VNF give its queue pair back (its crypto moves to its software engine).
    fn revoke(&self, name: &str) -> Result<(), String>;
}

/// The standalone SSM's fleet: one EM client per VNF, granting the device at `device`.
pub struct EmFleet {
    ems: Vec<(String, EmClient)>,
    device: String,
}

impl EmFleet {
    /// The EMs `ems` (name, client), granting queue pairs of the device socket `device`.
    pub fn new(ems: Vec<(String, EmClient)>, device: &str) -> EmFleet {
        EmFleet {
            ems,
            device: device.to_string(),
        }
    }

    fn em(&self, name: &str) -> Result<&EmClient, String> {
        self.ems
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e)
            .ok_or_else(|| format!("no EM named {name}"))
    }
}

impl Fleet for EmFleet {
    fn names(&self) -> Vec<String> {
        self.ems.iter().map(|(n, _)| n.clone()).collect()
    }

    fn observe(&self, name: &str) -> Observation {
        match self
            .em(name)
            .and_then(|em| em.status().map_err(|e| e.to_string()))
        {
            Ok(s) => Observation::Sample(Sample {
                engine: s.engine,
                alg: s.alg,
                cpu_pct: s.cpu_pct,
                mean_packet_bytes: s.mean_packet_bytes,
            }),
            Err(e) => Observation::Unreachable(e),
        }
    }

    fn grant(&self, name: &str) -> Result<u64, String> {
        self.em(name)?
            .use_accelerator(&self.device)
            .map(|r| r.switch_us)
            .map_err(|e| e.to_string())
    }

    fn revoke(&self, name: &str) -> Result<(), String> {
        self.em(name)?
            .release_accelerator()
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The SSM: the policy plus the fleet of VNFs it hands the device's queue pairs to.
pub struct Ssm {
    policy: Policy,
    fleet: Box<dyn Fleet>,
    log: Vec<Decision>,
    sink: Option<Box<dyn Write + Send>>,
    stats: Arc<Mutex<Stats>>,
}

impl Ssm {
    /// An SSM over `ems` (name, client) granting queue pairs of the device at `device`.
    pub fn new(policy: Policy, ems: Vec<(String, EmClient)>, device: &str) -> Ssm {
        Ssm::with_fleet(policy, Box::new(EmFleet::new(ems, device)), device)
    }

    /// An SSM over `fleet`, handing out the queue pairs of the device named `device`.
    pub fn with_fleet(policy: Policy, fleet: Box<dyn Fleet>, device: &str) -> Ssm {
        let stats = Stats {
            device: device.to_string(),
            queue_pairs: policy.config().queue_pairs,
            ..Stats::default()
        };
        Ssm {
            policy,
            fleet,
            log: Vec::new(),
            sink: None,
            stats: Arc::new(Mutex::new(stats)),
        }
    }

    /// Also writes every decision as a JSON line to `w`.
    pub fn with_sink(mut self, w: Box<dyn Write + Send>) -> Ssm {
        self.sink = Some(w);
        self
    }

    /// Every decision so far.
    pub fn log(&self) -> &[Decision] {
        &self.log
    }

    /// The counters a metrics endpoint renders ([`crate::metrics::render`]), updated after
    /// every poll.
    pub fn stats(&self) -> Arc<Mutex<Stats>> {
        self.stats.clone()
    }

    /// The policy (for holders and unreachable counts).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// One poll at `now_ns` on the caller's clock; `clock` gives that clock's time after the
    /// EM commands returned (for the reaction time). Returns this poll's decisions.
    pub fn tick(&mut self, now_ns: u64, clock: &dyn Fn() -> u64) -> Vec<Decision> {
        let names = self.fleet.names();
        self.policy.retain(&names);
        let obs: Vec<(String, Observation)> = names
            .into_iter()
            .map(|name| {
                let o = self.fleet.observe(&name);
                (name, o)
            })
            .collect();
        let step = self.policy.step(now_ns, &obs);
        let mut decisions = step.decisions;
        let mut failed_revoke: Option<String> = None;
        for a in &step.actions {
            match a {
                Action::Revoke(n) => {
                    if let Err(e) = self.fleet.revoke(n) {
                        decisions.push(self.policy.revoke_failed(now_ns, n, &e));
                        failed_revoke = Some(n.clone());
                    }
                }
                Action::Grant(n) => {
                    let res = match &failed_revoke {
                        Some(v) => Err(format!("postponed: revoke of {v} failed")),
                        None => self.fleet.grant(n),
                    };
                    match res {
                        Ok(switch_us) => {
                            let crossed = self.policy.crossed_ns(n).unwrap_or(now_ns);
                            let ms = clock().saturating_sub(crossed) as f64 / 1e6;
                            if let Some(d) = decisions
                                .iter_mut()
                                .find(|d| d.vnf == *n && d.decision == Kind::Grant)
                            {
                                d.reaction_ms = Some(ms);
                                d.switch_us = Some(switch_us);
                            }
                        }
                        Err(e) => {
                            decisions.retain(|d| !(d.vnf == *n && d.decision == Kind::Grant));
                            decisions.push(self.policy.grant_failed(now_ns, n, &e));
                        }
                    }
                }
            }
        }
        for d in &decisions {
            if let Some(w) = self.sink.as_mut() {
                if let Err(e) = writeln!(w, "{}", d.to_json_line()).and_then(|_| w.flush()) {
                    log::warn!("ssm: cannot write decision event: {e}");
                }
            }
            if d.decision != Kind::Noop {
                log::info!("ssm: {} {:?}: {}", d.vnf, d.decision, d.reason);
            }
        }
        self.log.extend(decisions.iter().cloned());
        self.update_stats(&obs, &decisions);
        decisions
    }

    fn update_stats(&self, obs: &[(String, Observation)], decisions: &[Decision]) {
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        st.vnfs.retain(|name, _| obs.iter().any(|(n, _)| n == name));
        st.record(decisions);
        let holders = self.policy.holders();
        let unreachable = self.policy.unreachable_counts();
        for (name, o) in obs {
            let v = st.vnfs.entry(name.clone()).or_default();
            v.holding = holders.contains(name);
            v.unreachable = unreachable.get(name).copied().unwrap_or(0);
            if let Observation::Sample(s) = o {
                v.last = Some((s.cpu_pct, s.engine.clone()));
            }
        }
    }

    /// Polls every `period` until `stop` is set (the sleep is the poll period itself).
    pub fn run(&mut self, period: Duration, stop: &AtomicBool) {
        let t0 = Instant::now();
        let clock = move || t0.elapsed().as_nanos() as u64;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now = clock();
            self.tick(now, &clock);
            next += period;
            let wait = next.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                next = Instant::now();
            } else {
                std::thread::sleep(wait);
            }
        }
    }
}
