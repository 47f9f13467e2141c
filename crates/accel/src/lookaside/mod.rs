//! The `lookaside` engine: a separate device process reached over a unix socket, with
//! submission rings and zero-copy buffers in shared memory (how a QAT/FPGA lookaside card
//! is driven; here the "card" is a reserved core running the `cpu` engine's code).

mod client;
mod device;
mod proto;
mod ring;
mod seqpacket;
pub(crate) mod shm;

pub use client::{LookasideEngine, STALL_TIMEOUT};
pub use device::{pin_to_core, serve, Device, DeviceConfig};
