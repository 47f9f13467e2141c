//! The energy paper's probing loop as a pure state machine: lower the speed knob one
//! level at a time while the delivered throughput holds; when it drops by more than a
//! threshold (or the SLA would break), step back one level and settle; probe again when
//! the offered load changes. A rise in load first returns to full speed (safety), a fall
//! probes on downwards from where it is.
//!
//! Besides the paper's throughput criterion, the prober takes an optional *utilisation*
//! (the share of the capacity the current level leaves that the worker uses, e.g. from
//! cgroup throttling or CPU time): above `saturation` the knee is reached before any
//! packet is lost, so the probe itself need not dent the throughput. A busy-polling
//! worker always uses everything it is given; its sampler passes no utilisation.
//!
//! When the sampler also says how much CPU the box *used* (as a fraction of full
//! speed), the loop keeps headroom: it never settles below `headroom` × the CPU the box
//! used at the lowest level that held its delivery, scaled by the offered load since
//! (so a contended host, which delays a box at its limit, still finds margin there).
//! For a busy or adaptive poller that figure is an upper bound of its need (it spins
//! on what it is given), so the floor sits `headroom` above the knee the probe found.
//! The same figure lets the probe skip the levels that leave the box `headroom` × what
//! it used: they hold by construction.
//!
//! Below full speed a failed window is confirmed by the next one before the loop steps
//! back or raises a settled level (a window that holds is taken at once: noise on a
//! shared host loses packets, it does not add them), so one window in which a
//! neighbour took the CPU neither ends a probe early nor undoes a settled level.

use serde::Serialize;

/// Tuning of the loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeConfig {
    /// Knob settings from full speed (first, 1.0) down to the lowest allowed.
    pub levels: Vec<f64>,
    /// A delivery ratio more than this fraction below the reference is a drop (0.03).
    pub drop_threshold: f64,
    /// A relative change of offered load beyond this starts a new probe (0.2).
    pub load_change: f64,
    /// Offered load (bit/s) below which the box counts as idle.
    pub idle_bps: f64,
    /// Utilisation of the level's capacity at which the level counts as saturated.
    pub saturation: f64,
    /// Margin over the measured need below which the loop never settles (1.5).
    pub headroom: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            levels: vec![1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08, 0.05],
            drop_threshold: 0.03,
            load_change: 0.2,
            idle_bps: 1e5,
            saturation: 0.9,
            headroom: 1.5,
        }
    }
}

/// What the service may not go below.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sla {
    /// Minimum delivered throughput, bit/s (capped by what is offered).
    pub min_bps: f64,
    /// Maximum latency, µs.
    pub max_latency_us: f64,
    /// Share of the offered load that must be delivered (e.g. 0.95).
    pub min_delivery: f64,
}

impl Sla {
    /// Whether a sample keeps the SLA.
    pub fn kept(&self, s: &Sample) -> bool {
        let need = self.min_bps.min(s.offered_bps * self.min_delivery);
        let tput_ok = s.delivered_bps >= need;
        let lat_ok = s.latency_us.is_none_or(|l| l <= self.max_latency_us);
        tput_ok && lat_ok
    }
}

/// One measurement taken at the current knob setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Offered load, bit/s (from the input counters).
    pub offered_bps: f64,
    /// Delivered throughput, bit/s.
    pub delivered_bps: f64,
    /// Latency, µs, if measured.
    pub latency_us: Option<f64>,
    /// Share of the level's capacity in use (0..1), if known.
    pub utilization: Option<f64>,
    /// CPU the box used, as a fraction of full speed, if known (for the headroom floor).
    pub used: Option<f64>,
}

/// Where the loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Lowering the knob step by step.
    Probing,
    /// Holding a level until the load changes.
    Settled,
}

/// One decision: the knob level to apply now and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Knob setting (one of the configured levels).
    pub level: f64,
    /// Whether it differs from the previous setting.
    pub changed: bool,
    /// Phase after this decision.
    pub phase: Phase,
    /// Samples the current (or last) probe took, from its start to its settling.
    pub probe_steps: u32,
    /// The window failed and awaits confirmation by the next one (the level is held).
    pub confirming: bool,
    /// This decision started a new probe because the offered load changed (whether or
    /// not the level changed with it: a rise at full speed re-probes from there).
    pub reprobe: bool,
    /// Why, for the operation record.
    pub reason: String,
}

/// The probing loop of one knob (see the module doc).
#[derive(Debug, Clone)]
pub struct Prober {
    cfg: ProbeConfig,
    sla: Sla,
    idx: usize,
    phase: Phase,
    reference: Option<f64>,
    load_ref: Option<f64>,
    steps: u32,
    /// Settled at full speed only because the SLA was broken there (e.g. a VNF still
    /// starting): probe again once it is kept.
    retry: bool,
    /// The need measured at the lowest level that held in this probe: (CPU used as a
    /// fraction of full speed, offered bit/s then).
    held: Option<(f64, f64)>,
    /// The level (index) whose last window failed and awaits confirmation.
    failed_at: Option<usize>,
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

impl Prober {
    /// Starts probing from full speed.
    pub fn new(cfg: ProbeConfig, sla: Sla) -> Self {
        assert!(!cfg.levels.is_empty(), "a prober needs at least one level");
        Self {
            cfg,
            sla,
            idx: 0,
            phase: Phase::Probing,
            reference: None,
            load_ref: None,
            steps: 0,
            retry: false,
            held: None,
            failed_at: None,
        }
    }

    /// The knob setting in force.
    pub fn level(&self) -> f64 {
        self.cfg.levels[self.idx]
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn ratio(&self, s: &Sample) -> f64 {
        if s.offered_bps < self.cfg.idle_bps {
            1.0
        } else {
            (s.delivered_bps / s.offered_bps).min(1.0)
        }
    }

    fn load_changed(&self, offered: f64) -> Option<bool> {
        let r = self.load_ref?;
        let scale = r.max(self.cfg.idle_bps);
        ((offered - r).abs() > self.cfg.load_change * scale).then_some(offered > r)
    }

    /// The lowest level the headroom allows at offered load `offered` (0 when no need
    /// was measured): `headroom` × the need at the held level, scaled by the load.
    pub fn floor(&self, offered: f64) -> f64 {
        match self.held {
            Some((used, at)) if at >= self.cfg.idle_bps => {
                self.cfg.headroom * used * (offered / at).max(1.0)
            }
            Some((used, _)) => self.cfg.headroom * used,
            None => 0.0,
        }
    }

    /// Raises the level to the lowest one at or above the floor for `offered`; returns
    /// the floor when it did.
    fn raise_to_floor(&mut self, offered: f64) -> Option<f64> {
        let floor = self.floor(offered);
        let lowest_ok = self
            .cfg
            .levels
            .iter()
            .rposition(|&l| l >= floor - 1e-9)
            .unwrap_or(0);
        (lowest_ok < self.idx).then(|| {
            self.idx = lowest_ok;
            floor
        })
    }

    fn headroom_note(&self, floor: f64) -> String {
        let used = self.held.map_or(0.0, |h| h.0);
        format!(
            "; raised to {} for headroom ({:.1} × the {} of full speed it used at the lowest level that held = {})",
            pct(self.level()),
            self.cfg.headroom,
            pct(used),
            pct(floor)
        )
    }

    /// Adds a window's outcome at the current level; the level's verdict (`true`: it
    /// fails), or `None` while a failed window awaits confirmation by the next one. At
    /// full speed every window is a verdict (there is nothing to step back to).
    fn vote(&mut self, fail: bool) -> Option<bool> {
        if self.failed_at != Some(self.idx) {
            self.failed_at = None;
        }
        let verdict = match (fail, self.failed_at) {
            (true, None) if self.idx > 0 => None,
            (f, _) => Some(f),
        };
        self.failed_at = verdict.is_none().then_some(self.idx);
        verdict
    }

    fn decide(&mut self, from: usize, reason: String) -> Decision {
        Decision {
            level: self.level(),
            changed: from != self.idx,
            phase: self.phase,
            probe_steps: self.steps,
            confirming: false,
            reprobe: false,
            reason,
        }
    }

    /// Takes the sample measured at the current level and returns the next level.
    pub fn step(&mut self, s: &Sample) -> Decision {
        let from = self.idx;
        let ratio = self.ratio(s);
        if let Some(rose) = self.load_changed(s.offered_bps) {
            let was = self.load_ref.unwrap_or(0.0);
            self.load_ref = Some(s.offered_bps);
            self.failed_at = None;
            self.phase = Phase::Probing;
            self.reference = None;
            self.held = None;
            self.steps = 1;
            let why = format!(
                "offered load {} from {:.2} to {:.2} Mbit/s",
                if rose { "rose" } else { "fell" },
                was / 1e6,
                s.offered_bps / 1e6
            );
            let why = if rose && self.idx > 0 {
                self.idx = 0;
                format!("{why}: back to full speed, re-probing")
            } else {
                format!("{why}: re-probing from {}", pct(self.level()))
            };
            return Decision {
                reprobe: true,
                ..self.decide(from, why)
            };
        }
        self.load_ref.get_or_insert(s.offered_bps);
        if self.phase == Phase::Probing {
            self.steps += 1;
        }
        let kept = self.sla.kept(s);
        let reference = *self.reference.get_or_insert(ratio);
        let dropped = ratio < reference * (1.0 - self.cfg.drop_threshold);
        let saturated = s
            .utilization
            .is_some_and(|u| u >= self.cfg.saturation && self.idx > 0);
        if self.phase == Phase::Probing && kept && !dropped && !saturated {
            if let Some(used) = s.used {
                self.held = Some((used, s.offered_bps));
            }
        }
        let fail = !kept || dropped || (saturated && self.phase == Phase::Probing);
        if self.vote(fail).is_none() {
            let why = format!(
                "at {} delivery {} of the reference {}: confirming over another window",
                pct(self.level()),
                pct(ratio),
                pct(reference)
            );
            return Decision {
                confirming: true,
                ..self.decide(from, why)
            };
        }
        match self.phase {
            Phase::Probing if !kept || dropped || saturated => {
                let cause = if !kept {
                    "the SLA broke".to_string()
                } else if dropped {
                    format!(
                        "delivery fell to {} of the reference {}",
                        pct(ratio),
                        pct(reference)
                    )
                } else {
                    format!(
                        "the worker used {} of the capacity left",
                        pct(s.utilization.unwrap_or(1.0))
                    )
                };
                self.retry = from == 0;
                self.idx = self.idx.saturating_sub(1);
                self.phase = Phase::Settled;
                let mut why = format!(
                    "at {} {cause}: stepped back to {}",
                    pct(self.cfg.levels[from]),
                    pct(self.level())
                );
                if let Some(f) = self.raise_to_floor(s.offered_bps) {
                    why += &self.headroom_note(f);
                }
                self.decide(from, why)
            }
            Phase::Probing if self.idx + 1 < self.cfg.levels.len() => {
                // Levels that leave the box `headroom` × what it used hold by
                // construction: skipped.
                let skip_to = s.used.map_or(0.0, |u| u * self.cfg.headroom);
                self.idx += 1;
                while self.idx + 1 < self.cfg.levels.len()
                    && self.cfg.levels[self.idx + 1] >= skip_to
                    && skip_to > 0.0
                {
                    self.idx += 1;
                }
                self.decide(
                    from,
                    format!(
                        "throughput held at {}: lowering to {}",
                        pct(self.cfg.levels[from]),
                        pct(self.level())
                    ),
                )
            }
            Phase::Probing => {
                self.phase = Phase::Settled;
                let mut why = format!("throughput holds at the lowest level {}", pct(self.level()));
                if let Some(f) = self.raise_to_floor(s.offered_bps) {
                    why += &self.headroom_note(f);
                }
                self.decide(from, why)
            }
            Phase::Settled if self.retry && kept => {
                self.retry = false;
                self.held = None;
                self.phase = Phase::Probing;
                self.reference = Some(ratio);
                self.steps = 1;
                self.idx = (self.idx + 1).min(self.cfg.levels.len() - 1);
                self.decide(
                    from,
                    format!(
                        "the SLA holds again at {}: probing, lowering to {}",
                        pct(self.cfg.levels[from]),
                        pct(self.level())
                    ),
                )
            }
            Phase::Settled if (!kept || dropped) && self.idx > 0 => {
                self.idx -= 1;
                self.decide(
                    from,
                    format!(
                        "settled level lost throughput ({}): raised to {}",
                        pct(ratio),
                        pct(self.level())
                    ),
                )
            }
            Phase::Settled => match self.raise_to_floor(s.offered_bps) {
                Some(f) => {
                    let why = format!("settled, the load grew{}", self.headroom_note(f));
                    self.decide(from, why)
                }
                None => self.decide(from, format!("settled at {}", pct(self.level()))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box that needs `need` of full speed to carry `offered`: below it, it delivers
    /// in proportion to the speed it has (a CPU-bound VNF), and it draws power in
    /// proportion to the speed it uses.
    fn curve(level: f64, need: f64, offered: f64) -> (Sample, f64) {
        let delivered = offered * (level / need).min(1.0);
        let used = need.min(level);
        let sample = Sample {
            offered_bps: offered,
            delivered_bps: delivered,
            latency_us: Some(if level >= need { 500.0 } else { 50_000.0 }),
            utilization: None,
            used: None,
        };
        (sample, 10.0 + 30.0 * used)
    }

    fn sla() -> Sla {
        Sla {
            min_bps: 1e9,
            max_latency_us: 10_000.0,
            min_delivery: 0.9,
        }
    }

    /// Runs the loop until it settles; returns (probe steps, level).
    fn settle(p: &mut Prober, need: f64, offered: f64) -> (u32, f64) {
        for _ in 0..20 {
            let (s, _) = curve(p.level(), need, offered);
            let d = p.step(&s);
            if d.phase == Phase::Settled {
                return (d.probe_steps, p.level());
            }
        }
        panic!("did not settle in 20 steps");
    }

    #[test]
    fn finds_the_knee_and_steps_back() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        // Needs 30 % of full speed: 35 % holds, 25 % loses throughput → back to 35 %.
        let (steps, level) = settle(&mut p, 0.30, 100e6);
        assert_eq!(level, 0.35);
        assert!(steps <= 10, "{steps} steps");
        // Settled: the level holds, and holding is not counted as probing.
        for _ in 0..5 {
            let (s, _) = curve(p.level(), 0.30, 100e6);
            let d = p.step(&s);
            assert!(!d.changed && d.reason.contains("settled"), "{d:?}");
            assert_eq!(d.probe_steps, steps);
        }
    }

    #[test]
    fn one_noisy_window_neither_ends_a_probe_nor_raises_a_settled_level() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        let (s, _) = curve(1.0, 0.30, 100e6);
        assert_eq!(p.step(&s).level, 0.7);
        // At 70 % a neighbour takes the CPU for one window: 10 % lost. Held, confirming.
        let noisy = |level: f64| {
            let (mut s, _) = curve(level, 0.30, 100e6);
            s.delivered_bps *= 0.9;
            s
        };
        let d = p.step(&noisy(0.7));
        assert!(d.confirming && !d.changed && d.level == 0.7, "{d:?}");
        // The next window holds: the majority of the level's windows holds, probing goes
        // on, and it settles where the quiet loop does.
        let (s, _) = curve(0.7, 0.30, 100e6);
        let d = p.step(&s);
        assert!(d.changed && d.level == 0.5 && !d.confirming, "{d:?}");
        let (steps, level) = settle(&mut p, 0.30, 100e6);
        assert_eq!(level, 0.35);
        assert!(steps <= 10, "{steps}");
        // Settled: one lossy window is held, two in a row raise the level.
        let d = p.step(&noisy(0.35));
        assert!(d.confirming && d.level == 0.35, "{d:?}");
        let (s, _) = curve(0.35, 0.30, 100e6);
        assert!(!p.step(&s).changed);
        p.step(&noisy(0.35));
        let d = p.step(&noisy(0.35));
        assert!(
            d.changed && d.level == 0.5 && d.reason.contains("lost"),
            "{d:?}"
        );
    }

    #[test]
    fn saturation_stops_before_any_loss() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        // Needs 33 %: at 35 % it still delivers everything but uses 94 % of what it
        // has, so the probe steps back to 50 % without ever losing a packet.
        let need = 0.33;
        let mut lost = false;
        for _ in 0..12 {
            let (mut s, _) = curve(p.level(), need, 100e6);
            s.utilization = Some((need / p.level()).min(1.0));
            lost |= s.delivered_bps < s.offered_bps;
            p.step(&s);
        }
        assert_eq!((p.level(), p.phase()), (0.5, Phase::Settled));
        assert!(!lost);
    }

    #[test]
    fn re_probes_on_a_load_change_and_settles_within_ten_steps() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        settle(&mut p, 0.30, 100e6);
        // Load doubles (needs 60 %): first sample at the old level loses throughput, and
        // the load change sends the knob straight back to full speed.
        let (s, _) = curve(p.level(), 0.60, 200e6);
        let d = p.step(&s);
        assert!(
            d.changed && d.level == 1.0 && d.reason.contains("rose") && d.reprobe,
            "{d:?}"
        );
        // Still at full speed, the load rises again: a re-probe that changes no level.
        let (s, _) = curve(p.level(), 0.60, 300e6);
        let d = p.step(&s);
        assert!(d.reprobe && !d.changed && d.level == 1.0, "{d:?}");
        let (s, _) = curve(p.level(), 0.60, 300e6);
        assert!(!p.step(&s).reprobe);
        let (steps, level) = settle(&mut p, 0.60, 200e6);
        assert_eq!(level, 0.7);
        assert!(steps <= 10);
        // Load falls to a tenth (needs 6 %): probing goes on down from 70 %.
        let (s, _) = curve(p.level(), 0.06, 20e6);
        let d = p.step(&s);
        assert!(
            d.reason.contains("fell") && d.phase == Phase::Probing,
            "{d:?}"
        );
        let (steps, level) = settle(&mut p, 0.06, 20e6);
        assert_eq!(level, 0.08);
        assert!(steps <= 10, "{steps}");
    }

    #[test]
    fn power_falls_along_the_probe_and_the_sla_is_kept_where_it_settles() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        let (_, full_w) = curve(1.0, 0.3, 100e6);
        settle(&mut p, 0.3, 100e6);
        let (s, w) = curve(p.level(), 0.3, 100e6);
        assert!(sla().kept(&s));
        assert!(w <= full_w, "settled {w} W vs full speed {full_w} W");
    }

    #[test]
    fn an_sla_broken_at_full_speed_stays_at_full_speed() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        let s = Sample {
            offered_bps: 100e6,
            delivered_bps: 10e6,
            latency_us: None,
            utilization: None,
            used: None,
        };
        let d = p.step(&s);
        assert_eq!((d.level, d.phase), (1.0, Phase::Settled));
        assert!(d.reason.contains("SLA"));
    }

    #[test]
    fn a_box_still_starting_is_probed_once_it_delivers() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        let starting = Sample {
            offered_bps: 100e6,
            delivered_bps: 0.0,
            latency_us: None,
            utilization: None,
            used: None,
        };
        assert_eq!(p.step(&starting).phase, Phase::Settled);
        let (s, _) = curve(1.0, 0.3, 100e6);
        let d = p.step(&s);
        assert!(
            d.changed && d.level == 0.7 && d.phase == Phase::Probing,
            "{d:?}"
        );
        assert_eq!(settle(&mut p, 0.3, 100e6).1, 0.35);
    }

    #[test]
    fn a_poller_that_uses_its_whole_limit_settles_with_headroom_that_follows_the_load() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        // Needs 4 % of full speed, spins on whatever it is given: throughput holds down
        // to the lowest level (5 %), where it used 5 %; 1.5 × 5 % = 7.5 % → 8 %.
        let spinner = |level: f64, offered: f64| {
            let (mut s, _) = curve(level, 0.04 * offered / 100e6, offered);
            s.used = Some(level);
            s
        };
        let mut last = None;
        for _ in 0..10 {
            last = Some(p.step(&spinner(p.level(), 100e6)));
            if p.phase() == Phase::Settled {
                break;
            }
        }
        let d = last.unwrap();
        assert_eq!((p.level(), d.phase), (0.08, Phase::Settled), "{d:?}");
        assert!(
            d.reason.contains("headroom") && d.reason.contains("8 %"),
            "{d:?}"
        );
        assert!((p.floor(100e6) - 0.075).abs() < 1e-9);
        // Holds while the load holds.
        assert!(!p.step(&spinner(p.level(), 100e6)).changed);
        // 15 % more load (no new probe below 20 %): the floor follows, 8.6 % → 12 %.
        let d = p.step(&spinner(p.level(), 115e6));
        assert!(d.changed && d.phase == Phase::Settled, "{d:?}");
        assert_eq!(p.level(), 0.12);
        // A new probe forgets the old need.
        p.step(&spinner(p.level(), 200e6));
        assert_eq!(p.floor(200e6), 0.0);
    }

    #[test]
    fn idle_box_probes_to_the_lowest_level() {
        let mut p = Prober::new(ProbeConfig::default(), sla());
        let idle = Sample {
            offered_bps: 0.0,
            delivered_bps: 0.0,
            latency_us: None,
            utilization: Some(0.0),
            used: None,
        };
        let mut last = None;
        for _ in 0..10 {
            last = Some(p.step(&idle));
        }
        assert_eq!(p.level(), 0.05);
        assert_eq!(last.unwrap().phase, Phase::Settled);
    }
}
