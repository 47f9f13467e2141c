//! Configuration of the elephant-flow detector, as written in a run config's YAML.

use super::ElephantDetector;
use crate::spec::ConfigError;
use serde::{Deserialize, Serialize};

/// When a flow is an elephant, and how much state the detector may keep.
///
/// A flow turns elephant when it has carried at least `min_bytes` in total AND, within
/// one measurement window of `window_ms`, at least `min_rate_bps × window` bits.
/// Setting either threshold to 0 disables that condition (not both).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElephantConfig {
    /// Total IP bytes a flow must have carried (default 1 MB).
    #[serde(default = "default_min_bytes")]
    pub min_bytes: u64,
    /// Rate in bit/s a flow must reach over one window (default 10 Mbit/s).
    #[serde(default = "default_min_rate_bps")]
    pub min_rate_bps: u64,
    /// Measurement window in milliseconds (default 1000).
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// Flow-table size: most flows tracked at once (default 65536, rounded up).
    #[serde(default = "default_max_flows")]
    pub max_flows: usize,
    /// A flow idle this long (ms) is forgotten (default 30000).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
}

fn default_min_bytes() -> u64 {
    1_000_000
}
fn default_min_rate_bps() -> u64 {
    10_000_000
}
fn default_window_ms() -> u64 {
    1000
}
fn default_max_flows() -> usize {
    65_536
}
fn default_idle_timeout_ms() -> u64 {
    30_000
}

impl Default for ElephantConfig {
    fn default() -> Self {
        Self {
            min_bytes: default_min_bytes(),
            min_rate_bps: default_min_rate_bps(),
            window_ms: default_window_ms(),
            max_flows: default_max_flows(),
            idle_timeout_ms: default_idle_timeout_ms(),
        }
    }
}

/// Largest flow table accepted (16 Mi flows, about 1 GiB of slots).
pub const MAX_FLOWS: usize = 1 << 24;

/// A config value out of range: names the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("elephant.{field}: {problem}")]
pub struct ElephantConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl ElephantConfig {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), ElephantConfigError> {
        let err = |field, problem: &str| {
            Err(ElephantConfigError {
                field,
                problem: problem.into(),
            })
        };
        if self.min_bytes == 0 && self.min_rate_bps == 0 {
            return err(
                "min_bytes",
                "min_bytes and min_rate_bps are both 0: every flow would be an elephant",
            );
        }
        if !(1..=3_600_000).contains(&self.window_ms) {
            return err("window_ms", "must be between 1 and 3600000");
        }
        if !(1..=MAX_FLOWS).contains(&self.max_flows) {
            return err("max_flows", &format!("must be between 1 and {MAX_FLOWS}"));
        }
        if self.idle_timeout_ms == 0 {
            return err("idle_timeout_ms", "must be at least 1");
        }
        Ok(())
    }

    /// Builds the node for a chain spec.
    pub fn build(&self, name: &str) -> Result<ElephantDetector, ConfigError> {
        ElephantDetector::new(name, self).map_err(|e| ConfigError::new(e.field, e.problem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_fields_and_validate() {
        let c: ElephantConfig = serde_yaml_ng::from_str("min_bytes: 5").unwrap();
        assert_eq!(
            c,
            ElephantConfig {
                min_bytes: 5,
                ..ElephantConfig::default()
            }
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn unknown_field_is_rejected_by_name() {
        let e = serde_yaml_ng::from_str::<ElephantConfig>("min_byte: 5").unwrap_err();
        assert!(e.to_string().contains("min_byte"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let cases = [
            (
                ElephantConfig {
                    min_bytes: 0,
                    min_rate_bps: 0,
                    ..Default::default()
                },
                "min_bytes",
            ),
            (
                ElephantConfig {
                    window_ms: 0,
                    ..Default::default()
                },
                "window_ms",
            ),
            (
                ElephantConfig {
                    max_flows: 0,
                    ..Default::default()
                },
                "max_flows",
            ),
            (
                ElephantConfig {
                    max_flows: MAX_FLOWS + 1,
                    ..Default::default()
                },
                "max_flows",
            ),
            (
                ElephantConfig {
                    idle_timeout_ms: 0,
                    ..Default::default()
                },
                "idle_timeout_ms",
            ),
        ];
        for (c, field) in cases {
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, field);
            assert!(
                e.to_string().starts_with(&format!("elephant.{field}: ")),
                "{e}"
            );
            assert_eq!(c.build("e").unwrap_err().field, field);
        }
        assert!(ElephantConfig::default().build("e").is_ok());
    }
}
