//! Counters shared between the packet worker and the EM endpoint (lock-free atomics).

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering::Relaxed};

use nfx_accel::EngineKind;
use serde_json::{json, Map, Value};

use crate::esp::EspError;

/// Why a packet was dropped; each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// ICV mismatch (wrong key or tampering): no plaintext released.
    AuthFailed,
    /// Replayed or too old sequence number.
    Replay,
    /// Malformed ESP-in-UDP packet, unknown SPI, bad padding, non-IP inner packet.
    BadEncap,
    /// Inner packet larger than the tunnel MTU / buffer.
    TooBig,
    /// Send/write failure, engine error or exhausted sequence numbers.
    TxError,
    /// Dummy packet (next header 59), discarded as RFC 4303 asks.
    Dummy,
}

impl DropCause {
    /// Every reason, in report order.
    pub const ALL: [DropCause; 6] = [
        DropCause::AuthFailed,
        DropCause::Replay,
        DropCause::BadEncap,
        DropCause::TooBig,
        DropCause::TxError,
        DropCause::Dummy,
    ];

    /// Name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DropCause::AuthFailed => "auth_failed",
            DropCause::Replay => "replay",
            DropCause::BadEncap => "bad_encap",
            DropCause::TooBig => "too_big",
            DropCause::TxError => "tx_error",
            DropCause::Dummy => "dummy",
        }
    }
}

impl From<EspError> for DropCause {
    fn from(e: EspError) -> DropCause {
        match e {
            EspError::TooBig => DropCause::TooBig,
            EspError::BadEncap => DropCause::BadEncap,
            EspError::Replay => DropCause::Replay,
            EspError::AuthFailed => DropCause::AuthFailed,
            EspError::SeqExhausted => DropCause::TxError,
            EspError::Dummy => DropCause::Dummy,
        }
    }
}

fn kind_code(k: EngineKind) -> u8 {
    match k {
        EngineKind::Soft => 0,
        EngineKind::Cpu => 1,
        EngineKind::Lookaside => 2,
    }
}

/// Everything the worker counts.
#[derive(Default)]
pub struct Counters {
    /// Packets encapsulated and sent on the underlay.
    pub tx_packets: AtomicU64,
    /// Inner bytes of those packets.
    pub tx_bytes: AtomicU64,
    /// Packets decapsulated and written to the TUN.
    pub rx_packets: AtomicU64,
    /// Inner bytes of those packets.
    pub rx_bytes: AtomicU64,
    drops: [AtomicU64; 6],
    /// Live engine switches done.
    pub engine_switches: AtomicU64,
    /// Lookaside device failures survived (fallback engine took over).
    pub failovers: AtomicU64,
    engine: AtomicU8,
    /// Kernel thread id of the packet worker (0 before it starts).
    pub worker_tid: AtomicI32,
}

impl Counters {
    /// Counts one dropped packet.
    pub fn count(&self, why: DropCause) {
        self.drops[why as usize].fetch_add(1, Relaxed);
    }

    /// A drop counter.
    pub fn drops(&self, why: DropCause) -> u64 {
        self.drops[why as usize].load(Relaxed)
    }

    /// Records the engine now in use.
    pub fn set_engine(&self, k: EngineKind) {
        self.engine.store(kind_code(k), Relaxed);
    }

    /// The engine now in use.
    pub fn engine(&self) -> EngineKind {
        EngineKind::ALL[self.engine.load(Relaxed) as usize % 3]
    }

    /// Drop counters as a JSON object.
    pub fn drops_json(&self) -> Value {
        let mut m = Map::new();
        for d in DropCause::ALL {
            m.insert(d.as_str().into(), json!(self.drops(d)));
        }
        Value::Object(m)
    }

    /// Every counter as JSON (the final report of `nfx tunnel`).
    pub fn json(&self) -> Value {
        json!({
            "engine": self.engine().as_str(),
            "tx_packets": self.tx_packets.load(Relaxed),
            "tx_bytes": self.tx_bytes.load(Relaxed),
            "rx_packets": self.rx_packets.load(Relaxed),
            "rx_bytes": self.rx_bytes.load(Relaxed),
            "drops": self.drops_json(),
            "engine_switches": self.engine_switches.load(Relaxed),
            "failovers": self.failovers.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_by_name() {
        let c = Counters::default();
        c.count(DropCause::Replay);
        c.count(DropCause::from(EspError::AuthFailed));
        c.count(DropCause::from(EspError::SeqExhausted));
        let j = c.drops_json();
        assert_eq!(j["replay"], 1);
        assert_eq!(j["auth_failed"], 1);
        assert_eq!(j["tx_error"], 1);
        assert_eq!(j["too_big"], 0);
        c.set_engine(EngineKind::Lookaside);
        assert_eq!(c.json()["engine"], "lookaside");
    }
}
