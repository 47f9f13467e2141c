//! The `lookaside` engine: a separate device process reached over a unix socket, with
//! submission rings and zero-copy buffers in shared memory (how a QAT/FPGA lookaside card
//! is driven; here the "card" is a reserved core running the `cpu` engine's code). The
//! device trusts no client and no client trusts more of the device than it must:
//! peer credentials on the socket, sealed regions, a doorbell and bounded tables per
//! client, checked ring entries and messages, and a fence on failover (docs/accel.md).

mod client;
mod device;
pub mod metrics;
mod proto;
mod ring;
mod seqpacket;
pub(crate) mod shm;
#[doc(hidden)]
pub mod testing;

pub use client::{validate_device_path, ClientOptions, LookasideEngine, STALL_TIMEOUT};
pub use device::{pin_to_core, serve, Device, DeviceConfig, DeviceProbe, DeviceStats, QpStats};
