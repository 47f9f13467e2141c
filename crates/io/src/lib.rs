//! Packet ports for the nfx dataplane and the ways a worker waits on them.
//!
//! [`AfPacketPort`] moves raw frames (with their virtio-net offload header, so GSO
//! super-packets stay whole) in batches on a veth end; [`PollMode`] says whether a worker
//! spins, blocks, or adapts; [`cpu`] reads the kernel's per-thread CPU accounting.

pub mod affinity;
pub mod afpacket;
pub mod bpf;
pub mod cgroup;
pub mod command;
pub mod confine;
pub mod cpu;
pub mod cpufreq;
pub mod fanout;
pub mod isolate;
mod mmsg;
pub mod netdev;
pub mod netns;
pub mod notify;
pub mod peer;
pub mod poll;
pub mod port;
pub mod priority;
pub mod ring;
pub mod sys;
pub mod token;
pub mod tun;
pub mod txring;
pub mod udp;

pub use afpacket::{AfPacketOptions, AfPacketPort};
pub use confine::{ConfineError, FileScope};
pub use poll::{Notifier, PollMode, Waiter, ADAPTIVE_SPIN};
pub use port::{stamp_clock_ns, Port, PortCounters};
pub use tun::TunPort;
pub use udp::UdpPort;
