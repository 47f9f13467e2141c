//! Counters shared between the packet worker and the EM endpoint (lock-free atomics).

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering::Relaxed};

use nfx_accel::EngineKind;
use serde_json::{json, Map, Value};

use crate::esp::EspError;

/// Why a packet was dropped; each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
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

impl Drop {
    /// Every reason, in report order.
    pub const ALL: [Drop; 6] = [
        Drop::AuthFailed,
        Drop::Replay,
        Drop::BadEncap,
        Drop::TooBig,
        Drop::TxError,
        Drop::Dummy,
    ];

    /// Name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Drop::AuthFailed => "auth_failed",
            Drop::Replay => "replay",
            Drop::BadEncap => "bad_encap",
            Drop::TooBig => "too_big",
            Drop::TxError => "tx_error",
            Drop::Dummy => "dummy",
        }
    }
}

impl From<EspError> for Drop {
    fn from(e: EspError) -> Drop {
        match e {
            EspError::TooBig => Drop::TooBig,
            EspError::BadEncap => Drop::BadEncap,
            EspError::Replay => Drop::Replay,
            EspError::AuthFailed => Drop::AuthFailed,
            EspError::SeqExhausted => Drop::TxError,
            EspError::Dummy => Drop::Dummy,
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
    pub fn drop(&self, why: Drop) {
        self.drops[why as usize].fetch_add(1, Relaxed);
    }

    /// A drop counter.
    pub fn drops(&self, why: Drop) -> u64 {
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
        for d in Drop::ALL {
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
        c.drop(Drop::Replay);
        c.drop(Drop::from(EspError::AuthFailed));
        c.drop(Drop::from(EspError::SeqExhausted));
        let j = c.drops_json();
        assert_eq!(j["replay"], 1);
        assert_eq!(j["auth_failed"], 1);
        assert_eq!(j["tx_error"], 1);
        assert_eq!(j["too_big"], 0);
        c.set_engine(EngineKind::Lookaside);
        assert_eq!(c.json()["engine"], "lookaside");
    }
}
