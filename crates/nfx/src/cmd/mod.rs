//! One module per `nfx` subcommand.

pub mod accel;
pub mod bench;
pub mod bench_accel;
pub mod bench_chaining;
pub mod bench_control;
pub mod bench_dataplane;
pub mod bench_migration;
pub mod bench_placement;
pub mod bench_tunnel;
pub mod chain;
pub mod ctl;
pub mod data;
pub mod demo;
pub mod experiment;
pub mod experiment_energy;
pub mod output;
pub mod place;
pub mod run;
pub mod shell;
pub mod ssm;
pub mod stats;
pub mod table;
pub mod testbed;
pub mod testbed_hosts;
pub mod transcode;
pub mod tunnel;
