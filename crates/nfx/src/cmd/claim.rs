//! One headline claim of a paper beside nfx's figure for it: the row every experiment's
//! report and `nfx report`'s `claims.json` share (docs/experiments/report.md).

use serde::{Deserialize, Serialize};

/// A paper's claim, the paper's figure, nfx's figure in a run and whether the target held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The paper, by name.
    pub paper: String,
    /// The claim, with the target nfx is held to.
    pub claim: String,
    /// The paper's figure.
    pub paper_value: String,
    /// nfx's figure in this run; `null` when it was not measured.
    pub nfx_value: Option<String>,
    /// Whether the target holds in this run (`false` when not measured).
    pub holds: bool,
    /// Why there is no figure (the experiment failed, was skipped or did not measure it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Claim {
    /// A claim judged from `measured`: nfx's figure as shown and whether the target holds;
    /// `None` when the run has no figure for it.
    pub fn new(
        paper: &str,
        claim: &str,
        paper_value: impl Into<String>,
        measured: Option<(String, bool)>,
    ) -> Self {
        let (nfx_value, holds) = match measured {
            Some((v, h)) => (Some(v), h),
            None => (None, false),
        };
        Self {
            paper: paper.into(),
            claim: claim.into(),
            paper_value: paper_value.into(),
            reason: nfx_value
                .is_none()
                .then(|| "not measured in this run".into()),
            nfx_value,
            holds,
        }
    }

    /// A claim judged on one number: shown with `digits` decimals and `unit`, holding when
    /// `target` accepts it.
    pub fn number(
        paper: &str,
        claim: &str,
        paper_value: impl Into<String>,
        value: Option<f64>,
        (digits, unit): (usize, &str),
        target: impl Fn(f64) -> bool,
    ) -> Self {
        let measured = value
            .filter(|v| v.is_finite())
            .map(|v| (format!("{v:.digits$}{unit}"), target(v)));
        Self::new(paper, claim, paper_value, measured)
    }

    /// The same claim without a figure, for `reason` (the experiment failed or was skipped).
    pub fn unmeasured(self, reason: &str) -> Self {
        Self {
            nfx_value: None,
            holds: false,
            reason: Some(reason.into()),
            ..self
        }
    }

    /// nfx's figure for a table cell.
    pub fn shown(&self) -> &str {
        self.nfx_value.as_deref().unwrap_or("not measured")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_is_judged_and_a_missing_one_fails_with_a_reason() {
        let c = Claim::number("P", "x ≥ 5×", "10×", Some(6.0), (2, "×"), |v| v >= 5.0);
        assert_eq!((c.nfx_value.as_deref(), c.holds), (Some("6.00×"), true));
        assert!(c.reason.is_none());
        let c = Claim::number("P", "x ≥ 5×", "10×", Some(4.0), (1, "×"), |v| v >= 5.0);
        assert_eq!((c.shown(), c.holds), ("4.0×", false));
        let c = Claim::number("P", "x ≥ 5×", "10×", None, (1, "×"), |v| v >= 5.0);
        assert_eq!((c.nfx_value.as_deref(), c.holds), (None, false));
        assert_eq!(c.shown(), "not measured");
        let c = Claim::number("P", "x", "1", Some(f64::NAN), (1, ""), |_| true);
        assert!(!c.holds && c.nfx_value.is_none());
        let c = Claim::number("P", "x", "1", Some(9.0), (1, ""), |_| true).unmeasured("failed");
        assert_eq!((c.holds, c.reason.as_deref()), (false, Some("failed")));
    }

    #[test]
    fn the_json_has_the_agreed_names() {
        let c = Claim::number("P", "c", "1", Some(2.0), (0, ""), |_| true);
        let v = serde_json::to_value(&c).unwrap();
        let mut k: Vec<&String> = v.as_object().unwrap().keys().collect();
        k.sort();
        assert_eq!(k, ["claim", "holds", "nfx_value", "paper", "paper_value"]);
        let back: Claim = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }
}
