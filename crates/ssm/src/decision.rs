//! The SSM's decisions: one event per VNF per poll (grant, revoke, deny or no-op), each with
//! its reason, written as JSON lines and kept in memory for reports and tests.

use serde::Serialize;

/// What the SSM decided for one VNF.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A lookaside queue pair was (or is being) handed to the VNF.
    Grant,
    /// The VNF's queue pair was (or is being) taken back.
    Revoke,
    /// The VNF wants a queue pair but does not get one.
    Deny,
    /// Nothing changes for the VNF.
    Noop,
}

/// One decision event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// Time of the poll that produced it (ns on the SSM's clock).
    pub ts_ns: u64,
    /// VNF (EM) name.
    pub vnf: String,
    /// What was decided.
    pub decision: Kind,
    /// Why, in words an operator can act on.
    pub reason: String,
    /// The VNF's latest CPU sample, when one was received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// Calibrated gain of the accelerator over the VNF's engine, when computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gain: Option<f64>,
    /// For a grant: time from the first sample above the upper threshold to the engine in
    /// use (filled in once the EM confirmed the switch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reaction_ms: Option<f64>,
    /// For a grant: how long the VNF's live engine switch took (µs, from its EM reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_us: Option<u64>,
}

impl Decision {
    /// A decision without CPU, gain or reaction figures.
    pub fn new(ts_ns: u64, vnf: &str, decision: Kind, reason: impl Into<String>) -> Decision {
        Decision {
            ts_ns,
            vnf: vnf.to_string(),
            decision,
            reason: reason.into(),
            cpu_pct: None,
            gain: None,
            reaction_ms: None,
            switch_us: None,
        }
    }

    /// The event as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_names_kind_and_skips_absent_figures() {
        let mut d = Decision::new(5, "t1", Kind::Deny, "no free queue pair");
        let line = d.to_json_line();
        assert_eq!(
            line,
            r#"{"ts_ns":5,"vnf":"t1","decision":"deny","reason":"no free queue pair"}"#
        );
        d.cpu_pct = Some(95.5);
        d.decision = Kind::Grant;
        let v: serde_json::Value = serde_json::from_str(&d.to_json_line()).unwrap();
        assert_eq!(v["decision"], "grant");
        assert_eq!(v["cpu_pct"], 95.5);
        assert!(v.get("gain").is_none());
    }
}
