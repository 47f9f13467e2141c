//! nfx-ike: IKEv2 (RFC 7296) for nfx's ESP tunnel, without I/O. The tunnel feeds it
//! received IKE messages and the time, and takes from it the messages to send and the
//! CHILD_SA keys to install; nothing here touches a socket or reads the clock, so the
//! whole protocol is unit-tested and fuzzed in-process.

pub mod auth;
pub mod config;
pub mod consts;
mod create;
pub mod crypto;
pub mod endpoint;
mod init;
pub mod keys;
pub mod proposal;
pub mod sa;
pub mod sk;
pub mod ts;
pub mod wire;

pub use config::{Config, HalfOpen, Lifetimes, Retransmit};
pub use endpoint::{Endpoint, Stats, Status};
pub use sa::{Action, EspSa};
