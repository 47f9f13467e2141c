//! Network functions as dataplane graph nodes: stateful firewall, NAT, DPI,
//! elephant-flow detection. Each is configured from YAML and processes vectors.
//! The transcoder ([`transcode`]) is a VNF of another kind: a process of its own.

pub mod dpi;
pub mod elephant;
pub mod event;
pub mod firewall;
pub mod nat;
pub mod node;
pub mod spec;
pub mod table;
#[cfg(test)]
mod testutil;
pub mod transcode;

pub use event::{Event, EventSink};
pub use nfx_io::FileScope;
pub use node::{ImportReport, Node, NodeCtx, SkipReason, StateError};
pub use spec::{build, ConfigError, NodeSpec};
