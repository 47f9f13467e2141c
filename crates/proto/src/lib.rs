//! The control protocol of an nfx worker (`nfx run`): newline-delimited JSON over a
//! unix stream socket, one request object per line ([`Request`], tagged by `cmd`), one
//! answer object per line (a type per request, or [`ErrorAnswer`]), the stats document
//! ([`Stats`]), the services form of a worker's configuration ([`ServiceSet`]), the
//! worker's run configuration ([`RunConfig`], `nfx run --config`) and the one client
//! ([`Client`]). The worker (crates/dataplane) serves it; the agent, the
//! local VNFM, the testbed and `nfx stats` speak it through [`Client`].

pub mod client;
pub mod request;
pub mod response;
pub mod run_config;
pub mod services;
pub mod stats;

#[cfg(test)]
mod run_config_tests;
#[cfg(test)]
mod tests;

pub use client::{fetch_stats, Client, ClientError};
pub use request::{Reconfigure, ReconfigureForm, Request};
pub use response::{
    answer_line, Ack, Drained, ErrorAnswer, Exported, Held, Imported, PollSet, Reconfigured,
    Steered,
};
pub use run_config::{ConfigError, FanoutConfig, PortConfig, Ports, Role, RunConfig};
pub use services::{InstanceConfig, ServiceConfig, ServiceSet};
pub use stats::{FastPathStats, NodeStats, PortStats, ServiceStats, Stats, WorkerStats};
