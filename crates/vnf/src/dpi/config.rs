//! Configuration of the DPI node, as written in a run config's YAML.

use super::engine::EngineKind;
use super::{Dpi, DpiError};
use crate::spec::ConfigError;
use nfx_io::FileScope;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which patterns to match, with which engine, and how much per-flow state to keep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpiConfig {
    /// Pattern file (`id<TAB>action<TAB>kind<TAB>pattern` lines), relative to the
    /// directory of the config file that names it; it must lie in that directory or
    /// an allow-listed one (see `nfx_io::FileScope`).
    pub patterns: PathBuf,
    /// Matching engine (default `auto`).
    #[serde(default)]
    pub engine: EngineKind,
    /// Bytes of each TCP flow's tail kept for matches across segment boundaries
    /// (default 64; 0 turns stream matching off).
    #[serde(default = "default_stream_window")]
    pub stream_window: usize,
    /// Most TCP flows with a tail at once (default 16384, rounded up).
    #[serde(default = "default_stream_flows")]
    pub stream_flows: usize,
    /// Most (flow, pattern) pairs remembered to raise one event each (default 65536).
    #[serde(default = "default_event_table")]
    pub event_table: usize,
    /// Stream tails and remembered pairs idle this long (ms) are freed (default 60000).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Payload bytes of each flow that are inspected, like Suricata's stream depth;
    /// later bytes of the flow pass unscanned (default 1 MiB; 0 = inspect everything).
    #[serde(default = "default_depth")]
    pub depth: u64,
    /// Most flows whose inspected bytes are counted for `depth` (default 65536).
    #[serde(default = "default_depth_flows")]
    pub depth_flows: usize,
}

fn default_stream_window() -> usize {
    64
}
fn default_stream_flows() -> usize {
    16_384
}
fn default_event_table() -> usize {
    65_536
}
fn default_idle_timeout_ms() -> u64 {
    60_000
}
fn default_depth() -> u64 {
    1 << 20
}
fn default_depth_flows() -> usize {
    65_536
}

/// Largest `stream_window`.
pub const MAX_STREAM_WINDOW: usize = 4096;
/// Largest `stream_flows` and `event_table`.
pub const MAX_TABLE: usize = 1 << 22;

impl DpiConfig {
    /// A config with defaults for everything but the pattern file.
    pub fn with_patterns(patterns: impl Into<PathBuf>) -> Self {
        Self {
            patterns: patterns.into(),
            engine: EngineKind::default(),
            stream_window: default_stream_window(),
            stream_flows: default_stream_flows(),
            event_table: default_event_table(),
            idle_timeout_ms: default_idle_timeout_ms(),
            depth: default_depth(),
            depth_flows: default_depth_flows(),
        }
    }

    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), DpiError> {
        let err = |field, problem: String| Err(DpiError::Config { field, problem });
        if self.patterns.as_os_str().is_empty() {
            return err("patterns", "must name a pattern file".into());
        }
        if self.stream_window > MAX_STREAM_WINDOW {
            return err(
                "stream_window",
                format!("must be between 0 and {MAX_STREAM_WINDOW}"),
            );
        }
        if self.stream_window > 0 && !(1..=MAX_TABLE).contains(&self.stream_flows) {
            return err("stream_flows", format!("must be between 1 and {MAX_TABLE}"));
        }
        if !(1..=MAX_TABLE).contains(&self.event_table) {
            return err("event_table", format!("must be between 1 and {MAX_TABLE}"));
        }
        if self.depth > 0 && !(1..=MAX_TABLE).contains(&self.depth_flows) {
            return err("depth_flows", format!("must be between 1 and {MAX_TABLE}"));
        }
        if self.idle_timeout_ms == 0 {
            return err("idle_timeout_ms", "must be at least 1".into());
        }
        Ok(())
    }

    /// Builds the node for a chain spec; the pattern file is read within `files`.
    /// Pattern-file errors come back under field `patterns`, with the file and line
    /// in the message.
    pub fn build(&self, name: &str, files: &FileScope) -> Result<Dpi, ConfigError> {
        Dpi::new(name, self, files).map_err(|e| match e {
            DpiError::Config { field, problem } => ConfigError::new(field, problem),
            other => ConfigError::new("patterns", other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_with_defaults_and_engine_names() {
        let c: DpiConfig =
            serde_yaml_ng::from_str("patterns: p.txt\nengine: aho_corasick").unwrap();
        assert_eq!(
            c,
            DpiConfig {
                engine: EngineKind::AhoCorasick,
                ..DpiConfig::with_patterns("p.txt")
            }
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn unknown_fields_and_engines_are_named() {
        let e = serde_yaml_ng::from_str::<DpiConfig>("patterns: p\nwindow: 3").unwrap_err();
        assert!(e.to_string().contains("window"), "{e}");
        let e = serde_yaml_ng::from_str::<DpiConfig>("patterns: p\nengine: hyperscan").unwrap_err();
        assert!(e.to_string().contains("hyperscan"), "{e}");
        assert!(serde_yaml_ng::from_str::<DpiConfig>("engine: regex").is_err());
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let base = DpiConfig::with_patterns("p.txt");
        let cases = [
            (
                DpiConfig {
                    patterns: PathBuf::new(),
                    ..base.clone()
                },
                "dpi.patterns: ",
            ),
            (
                DpiConfig {
                    stream_window: MAX_STREAM_WINDOW + 1,
                    ..base.clone()
                },
                "dpi.stream_window: ",
            ),
            (
                DpiConfig {
                    stream_flows: 0,
                    ..base.clone()
                },
                "dpi.stream_flows: ",
            ),
            (
                DpiConfig {
                    event_table: MAX_TABLE + 1,
                    ..base.clone()
                },
                "dpi.event_table: ",
            ),
            (
                DpiConfig {
                    idle_timeout_ms: 0,
                    ..base.clone()
                },
                "dpi.idle_timeout_ms: ",
            ),
        ];
        for (c, want) in cases {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        }
        assert!(DpiConfig {
            stream_window: 0,
            stream_flows: 0,
            ..base
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn build_maps_errors_to_fields() {
        let c = DpiConfig {
            event_table: 0,
            ..DpiConfig::with_patterns("p.txt")
        };
        assert_eq!(
            c.build("d", &FileScope::new("/")).unwrap_err().field,
            "event_table"
        );
        let e = DpiConfig::with_patterns("missing.txt")
            .build("d", &FileScope::new("/nonexistent"))
            .unwrap_err();
        assert_eq!(e.field, "patterns");
        assert!(e.msg.starts_with("`missing.txt`: cannot read"), "{}", e.msg);
    }
}
