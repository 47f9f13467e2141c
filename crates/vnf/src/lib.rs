//! Network functions as dataplane graph nodes: stateful firewall, NAT, DPI,
//! elephant-flow detection. Each is configured from YAML and processes vectors.

pub mod event;
pub mod node;

pub use event::{Event, EventSink};
pub use node::{Node, NodeCtx};
