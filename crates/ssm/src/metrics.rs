//! The SSM's metrics (`nfx ssm --metrics-listen ADDR`): polls, decisions per VNF and kind,
//! which VNF holds a queue pair, each VNF's last CPU sample, engine and unreachable count,
//! and the last grant's reaction and switch times. The runner updates a [`Stats`] after
//! every poll; a scrape renders a copy of it, so a scrape never waits on an EM call.

use std::collections::BTreeMap;

use nfx_metrics::{labels, Families};

use crate::decision::{Decision, Kind};

/// What the SSM knows of one VNF, as of its last poll.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VnfStats {
    /// Decisions so far, by kind.
    pub decisions: BTreeMap<&'static str, u64>,
    /// Whether the VNF holds a lookaside queue pair.
    pub holding: bool,
    /// Polls at which its EM could not be reached.
    pub unreachable: u64,
    /// Its last CPU sample (percent of one core) and engine, when its EM answered once.
    pub last: Option<(f64, String)>,
    /// The last grant's reaction time (ms) and live switch time (µs), once granted.
    pub last_grant: Option<(f64, u64)>,
}

/// The SSM's counters: what one scrape renders.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// The lookaside device the SSM hands out.
    pub device: String,
    /// Queue pairs it may hand out.
    pub queue_pairs: usize,
    /// Polls done.
    pub polls: u64,
    /// Per VNF (EM name).
    pub vnfs: BTreeMap<String, VnfStats>,
}

impl Stats {
    /// Counts one poll's decisions (a grant's figures once its EM confirmed the switch).
    pub fn record(&mut self, decisions: &[Decision]) {
        self.polls += 1;
        for d in decisions {
            let v = self.vnfs.entry(d.vnf.clone()).or_default();
            *v.decisions.entry(kind_name(d.decision)).or_default() += 1;
            if let (Kind::Grant, Some(ms), Some(us)) = (d.decision, d.reaction_ms, d.switch_us) {
                v.last_grant = Some((ms, us));
            }
        }
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Grant => "grant",
        Kind::Revoke => "revoke",
        Kind::Deny => "deny",
        Kind::Noop => "noop",
    }
}

/// Renders `s` as Prometheus text.
pub fn render(s: &Stats) -> String {
    families(s).encode()
}

/// Every sample name [`render`] can export, from its registry.
pub fn sample_names() -> Vec<String> {
    families(&Stats::default()).sample_names().to_vec()
}

fn families(s: &Stats) -> Families {
    let mut f = Families::default();
    let d = labels(&[("device", &s.device)]);
    f.int_gauge(
        "nfx_ssm_queue_pairs",
        "Lookaside queue pairs the SSM may hand out",
    )
    .get_or_create(&d)
    .set(s.queue_pairs as i64);
    f.count("nfx_ssm_polls", "Polls of every element manager")
        .get_or_create(&d)
        .inc_by(s.polls);
    let decisions = f.count(
        "nfx_ssm_decisions",
        "Decisions per VNF by kind (grant, revoke, deny, noop)",
    );
    let holding = f.int_gauge(
        "nfx_ssm_holding",
        "1 when the VNF holds a lookaside queue pair",
    );
    let unreachable = f.count(
        "nfx_ssm_em_unreachable",
        "Polls at which the VNF's element manager could not be reached",
    );
    let cpu = f.gauge(
        "nfx_ssm_vnf_cpu_percent",
        "The VNF's last CPU sample, percent of one core",
    );
    let engine = f.int_gauge(
        "nfx_ssm_vnf_engine_info",
        "Always 1; the engine label names the VNF's crypto engine at its last poll",
    );
    let reaction = f.gauge(
        "nfx_ssm_grant_reaction_seconds",
        "The last grant's time from the first sample above the upper threshold to the engine in use",
    );
    let switch = f.gauge(
        "nfx_ssm_grant_switch_seconds",
        "The last grant's live engine switch in the VNF, as its EM reported it",
    );
    for (name, v) in &s.vnfs {
        let l = labels(&[("vnf", name)]);
        for (kind, n) in &v.decisions {
            decisions
                .get_or_create(&labels(&[("vnf", name), ("decision", kind)]))
                .inc_by(*n);
        }
        holding.get_or_create(&l).set(i64::from(v.holding));
        unreachable.get_or_create(&l).inc_by(v.unreachable);
        if let Some((pct, eng)) = &v.last {
            cpu.get_or_create(&l).set(*pct);
            engine
                .get_or_create(&labels(&[("vnf", name), ("engine", eng)]))
                .set(1);
        }
        if let Some((ms, us)) = v.last_grant {
            reaction.get_or_create(&l).set(ms / 1e3);
            switch.get_or_create(&l).set(us as f64 / 1e6);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_counted_per_vnf_and_kind_and_rendered() {
        let mut s = Stats {
            device: "/run/nfx/accel.sock".into(),
            queue_pairs: 1,
            ..Stats::default()
        };
        let mut g = Decision::new(1, "t1", Kind::Grant, "cpu above 90 %");
        g.reaction_ms = Some(250.0);
        g.switch_us = Some(80);
        s.record(&[g, Decision::new(1, "t2", Kind::Deny, "no free queue pair")]);
        s.record(&[Decision::new(2, "t2", Kind::Deny, "no free queue pair")]);
        let t1 = s.vnfs.get_mut("t1").unwrap();
        t1.holding = true;
        t1.last = Some((95.5, "lookaside".into()));
        let t = render(&s);
        for line in [
            r#"nfx_ssm_polls_total{device="/run/nfx/accel.sock"} 2"#,
            r#"nfx_ssm_queue_pairs{device="/run/nfx/accel.sock"} 1"#,
            r#"nfx_ssm_decisions_total{vnf="t2",decision="deny"} 2"#,
            r#"nfx_ssm_decisions_total{vnf="t1",decision="grant"} 1"#,
            r#"nfx_ssm_holding{vnf="t1"} 1"#,
            r#"nfx_ssm_holding{vnf="t2"} 0"#,
            r#"nfx_ssm_vnf_cpu_percent{vnf="t1"} 95.5"#,
            r#"nfx_ssm_vnf_engine_info{vnf="t1",engine="lookaside"} 1"#,
            r#"nfx_ssm_grant_reaction_seconds{vnf="t1"} 0.25"#,
            r#"nfx_ssm_grant_switch_seconds{vnf="t1"} 0.00008"#,
        ] {
            assert!(t.contains(line), "missing {line}:\n{t}");
        }
        assert!(!t.contains(r#"nfx_ssm_vnf_cpu_percent{vnf="t2"}"#), "{t}");
        let names = sample_names();
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let n = l.split(['{', ' ']).next().unwrap();
            assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
        }
    }
}
