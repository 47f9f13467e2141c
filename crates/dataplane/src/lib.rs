//! The nfx vector dataplane: a worker thread owns two ports and a graph of nodes
//! (`parse` → `classify` → each service's VNF chain → `output`), moves packets in vectors of up to 256, counts every
//! packet, byte, drop and cycle per node, and answers control requests (stats,
//! reconfiguration, flow-state export/import) between two vectors.

pub mod builtin;
pub mod chain;
pub mod classify;
pub mod config;
pub mod control;
pub mod fastpath;
pub mod graph;
pub mod latency;
#[cfg(any(test, feature = "fuzzing"))]
pub mod mem_port;
pub mod metrics;
pub mod runtime;
pub mod services;
pub mod signals;
pub mod stash;
pub mod stats;
pub mod steer;
pub mod worker;

#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
mod runtime_tests;
#[cfg(test)]
mod services_runtime_tests;
#[cfg(test)]
mod services_tests;
#[cfg(test)]
mod testkit;

pub use chain::{build_chain, build_node, vnf_builder};
pub use config::{ClassifierConfig, ConfigError, FanoutConfig, Role, RunConfig};
pub use control::ControlServer;
pub use graph::Graph;
pub use runtime::{Controller, Dataplane, NodeBuilder, PortOpener, Reconfigured};
pub use services::{InstanceConfig, ServiceConfig, ServiceSet};
pub use stats::{ServiceStats, Stats};
