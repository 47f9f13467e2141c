//! nfx-accel: crypto engines behind one asynchronous batch interface (docs/accel.md).
//!
//! A caller creates a session (algorithm, key, direction) on an [`Engine`], submits
//! batches of [`Op`]s (IV, AAD/data/tag offsets in a [`Buf`]) and polls [`Completion`]s,
//! which always come back in submission order. Engines: `soft` (portable code, no crypto
//! instructions), `cpu` (aws-lc with AES-NI/VAES/SHA-NI, bitsliced PRESENT),
//! `bitsliced` (PRESENT only, bitsliced across a batch in AVX2 registers) and
//! `lookaside` (a device process with shared-memory rings, falling back to `cpu`/`soft`
//! if it dies).

mod alg;
mod backend;
pub mod bench;
mod bitsliced;
mod buf;
pub mod calibration;
mod cpu;
mod engine;
mod error;
pub mod lookaside;
mod op;
mod session;
mod soft;

pub use alg::{Alg, AlgFamily};
pub use backend::SYNC_QUEUE_DEPTH;
pub use bitsliced::{bitsliced_engine, present_isa};
pub use buf::Buf;
pub use calibration::{CalPoint, Calibration, CalibrationError};
pub use cpu::cpu_engine;
pub use engine::{Engine, EngineKind, EngineStats};
pub use error::AccelError;
pub use lookaside::{ClientOptions, DeviceConfig, LookasideEngine};
pub use op::{Completion, Iv, Layout, Op, Status, MAX_IV};
pub use session::{Direction, SecretBytes, SessionId, SessionSpec, MAX_AUTH_KEY};
pub use soft::soft_engine;

/// Opens an in-process engine by kind (`lookaside` needs `LookasideEngine::connect`).
pub fn open_local(kind: EngineKind) -> Result<Box<dyn Engine>, AccelError> {
    match kind {
        EngineKind::Soft => Ok(soft_engine()),
        EngineKind::Cpu => Ok(cpu_engine()),
        EngineKind::Bitsliced => Ok(bitsliced_engine()),
        EngineKind::Lookaside => Err(AccelError::BadArgument(
            "the lookaside engine is opened with LookasideEngine::connect".into(),
        )),
    }
}
