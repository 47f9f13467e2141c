//! nfx-tunnel: an ESP-in-UDP (RFC 4303 / RFC 3948) tunnel endpoint whose crypto runs in
//! batches on an `nfx_accel` engine that can be switched live (docs/tunnel.md).

pub mod config;
pub mod csum;
pub mod em;
pub mod endpoint;
pub mod esp;
pub mod gro;
pub mod ike;
pub mod ike_config;
pub mod lanes;
pub mod metrics;
pub mod offload;
pub mod replay;
pub mod selectors;
pub mod seqspace;
pub mod seqstate;
pub mod stats;
pub mod steer;
pub mod sys;
pub mod udp_gso;
pub mod worker;

pub use config::Config;
pub use endpoint::run;
