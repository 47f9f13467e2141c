//! The one asynchronous batch interface every engine implements (after DPDK cryptodev /
//! VPP async crypto): sessions, batch submit, completion poll, drain.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::{AccelError, Alg, Buf, Completion, Op, SessionId, SessionSpec};

/// The kinds of engine nfx has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Portable software, no crypto instructions (the SW-VNF baseline).
    Soft,
    /// The CPU's crypto instructions through aws-lc.
    Cpu,
    /// A queue pair of the lookaside device process.
    Lookaside,
    /// PRESENT only, bitsliced across the blocks of a whole batch in the CPU's wide
    /// vectors (AVX2, else 64-bit words): the HW-VNF's cipher pipeline.
    Bitsliced,
}

impl EngineKind {
    /// Every kind, in report order.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::Soft,
        EngineKind::Cpu,
        EngineKind::Lookaside,
        EngineKind::Bitsliced,
    ];

    /// The engine's name in configs, JSON and calibration files.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Soft => "soft",
            EngineKind::Cpu => "cpu",
            EngineKind::Lookaside => "lookaside",
            EngineKind::Bitsliced => "bitsliced",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = AccelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                AccelError::BadArgument(format!(
                    "unknown engine `{s}` (soft, cpu, lookaside, bitsliced)"
                ))
            })
    }
}

/// Counters every engine keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EngineStats {
    /// Operations completed.
    pub ops: u64,
    /// Data bytes processed by completed operations.
    pub bytes: u64,
    /// Operations that completed with `AuthFailed`.
    pub auth_failures: u64,
    /// Operations rejected as `BadArgument` or `NoSession`.
    pub rejected: u64,
    /// Times the lookaside client lost its device and switched to the fallback engine.
    pub failovers: u64,
    /// In-flight operations re-run on the fallback engine after a failover.
    pub resubmitted: u64,
}

/// A crypto engine. Completions come back in submission order, so a caller (e.g. a
/// tunnel) can `drain` one engine and continue on another between two batches without
/// losing or reordering anything.
pub trait Engine: Send {
    /// Which kind of engine this is.
    fn kind(&self) -> EngineKind;

    /// Whether this engine implements `alg` (the bitsliced engine does PRESENT only).
    fn supports(&self, alg: Alg) -> bool {
        let _ = alg;
        true
    }

    /// Creates a session; the engine keeps its own expanded copy of the keys.
    fn create_session(&mut self, spec: SessionSpec) -> Result<SessionId, AccelError>;

    /// Destroys a session (its key material is zeroized).
    fn destroy_session(&mut self, id: SessionId) -> Result<(), AccelError>;

    /// A buffer from this engine's pool (shared memory for the lookaside device).
    fn alloc_buf(&mut self, capacity: usize) -> Result<Buf, AccelError>;

    /// Submits operations from the front of `ops` in order; returns how many were taken
    /// (fewer than offered when the queue is full; the rest stay in `ops`).
    fn submit(&mut self, ops: &mut Vec<Op>) -> Result<usize, AccelError>;

    /// Moves up to `max` finished operations, in submission order, to `out`.
    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> usize;

    /// Operations submitted and not yet returned by `poll`.
    fn in_flight(&self) -> usize;

    /// Blocks for at most `timeout` until `poll` can return `n` completions (or every
    /// operation in flight, if fewer), so that a caller waiting for a batch sleeps once
    /// and is woken when it is done instead of polling in a loop. Engines that finish
    /// operations inside `submit` (soft, cpu) return at once.
    fn wait_ready(&mut self, n: usize, timeout: std::time::Duration) {
        let _ = (n, timeout);
    }

    /// Counters.
    fn stats(&self) -> EngineStats;

    /// Why the engine moved its work to a fallback engine, if it did (lookaside only).
    fn failover_reason(&self) -> Option<&str> {
        None
    }

    /// Waits until every submitted operation is returned (in order) into `out`.
    fn drain(&mut self, out: &mut Vec<Completion>) -> Result<(), AccelError> {
        while self.in_flight() > 0 {
            if self.poll(out, usize::MAX) == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}
