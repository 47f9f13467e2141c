//! nfx-testbed: the namespace testbed (`src — edge — cloud — dst`), traffic drivers
//! (iperf3, sockperf, a batched UDP generator and sink), CPU measurement and the
//! kernel nftables baseline that nfx is compared against.

pub mod cpu;
pub mod netns;
pub mod probe;
pub mod process;
pub mod root;
pub mod topology;
pub mod udpgen;

pub use topology::{Host, Spec, Testbed, TestbedGuard};
