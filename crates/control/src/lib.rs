//! nfx-control: the management plane of nfx (HYPER §III): the unified VNFM interface and
//! its simulated, local and remote implementations, the mediator's decision tree, the
//! forwarding enforcer, the controller with its SQLite state, operation journal and REST
//! API, and the host agent that serves the VNFM calls over REST.

pub mod agent;
pub mod agents;
pub mod api;
pub mod client;
pub mod controller;
pub mod energy;
pub mod enforcer;
pub mod hostagent;
pub mod mediator;
pub mod netns_exec;
pub mod ops;
pub mod optimize;
pub mod power_manager;
pub mod projection;
pub mod scale;
pub mod server;
pub mod store;
pub mod tls;
pub mod topology;
pub mod tunnel_ssm;
pub mod vnfm;
