//! nfx-placement: HYPER's performance-aware VNF placement (§V), made exact and fast.
//! Offline: minimum-cost placement under constraints (2)–(6), proven optimal or with a
//! reported gap (column generation, diving, branch and price). Baseline: HYPER's enhanced FFD. Online:
//! HYPER's best-fit fitness. Also readers for the classical bin-packing benchmark sets
//! and a generator of HYPER-style instances.

pub mod bench;
pub mod bin_completion;
pub mod bnp;
pub mod bounds;
pub mod bpp;
pub mod colgen;
pub mod complete;
pub mod count_refute;
pub mod cover_lp;
pub mod error;
pub mod exact;
pub mod families;
pub mod ffd;
pub mod generator;
pub mod greedy;
pub mod instance;
pub mod online;
pub mod pricing;
pub mod pricing_exact;
pub mod problem;
pub mod rc_enum;
pub mod repack;
pub mod restricted;
pub mod simplex;
pub mod solve;
#[cfg(test)]
mod test_support;
pub mod validate;
pub mod waste;

pub use error::{PlacementError, Result};
pub use instance::{Device, DeviceKind, Instance, VnfInstance};
pub use solve::{place, Algorithm, Placement};
