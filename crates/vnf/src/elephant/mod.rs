//! Elephant-flow detection (HYPER's "elephant flow detection" VNF): per-flow byte and
//! rate accounting in a fixed-size table, one `elephant` event per flow.
//!
//! Also home of [`flow_table::FlowTable`], the bounded set-associative table that the
//! DPI node reuses for its stream tails and event de-duplication.

pub mod config;
pub mod detector;
pub mod flow_table;
#[cfg(test)]
pub(crate) mod testpkt;
#[cfg(test)]
mod tests;

pub use config::{ElephantConfig, ElephantConfigError};
pub use detector::{wire_size, ElephantDetector};
pub use flow_table::FlowTable;
