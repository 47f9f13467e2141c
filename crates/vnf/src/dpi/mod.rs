//! Deep packet inspection (HYPER's DPI VNF): many literal and regex patterns from a
//! file, one multi-pattern automaton scan per payload, alert or drop actions,
//! matches across TCP segment boundaries, one `dpi_match` event per (flow, pattern).

pub mod config;
pub mod engine;
pub mod error;
pub mod factor;
pub mod inspector;
pub mod patterns;
pub mod stream;
#[cfg(test)]
mod tests;

pub use config::DpiConfig;
pub use engine::{Engine, EngineKind};
pub use error::DpiError;
pub use inspector::Dpi;
pub use patterns::{Action, Kind, PatternSpec};
