//! nfx-testbed: the namespace testbed (`src — edge — cloud — dst`), traffic drivers
//! (iperf3, sockperf, a batched UDP generator and sink), CPU measurement and the
//! kernel nftables baseline that nfx is compared against.

pub mod acl;
pub mod bench;
pub mod cpu;
pub mod hosts;
pub mod iperf;
pub mod netns;
pub mod nftables;
pub mod nfxrun;
pub mod peers;
pub mod pktgen;
pub mod probe;
pub mod process;
pub mod root;
pub mod runconfig;
pub mod sockperf;
pub mod stop;
pub mod tablerun;
pub mod topology;
pub mod udpgen;

/// Re-exported so the binary and its tests share one temp-dir implementation.
pub use tempfile;
pub use topology::{Host, Spec, Testbed, TestbedGuard};
