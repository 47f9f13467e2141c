//! One module per `nfx` subcommand.

pub mod accel;
pub mod bench;
pub mod bench_accel;
pub mod bench_chaining;
pub mod bench_dataplane;
pub mod bench_placement;
pub mod chain;
pub mod demo;
pub mod place;
pub mod run;
pub mod stats;
pub mod testbed;
