//! Counters shared between the packet worker and the EM endpoint (lock-free atomics).

use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed,
};

use nfx_accel::EngineKind;
use serde_json::{json, Map, Value};

use crate::config::MAX_THREADS;
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
    /// A TUN read whose virtio_net_hdr contradicts the packet (unknown GSO type,
    /// zero segment size, headers out of bounds).
    BadVnet,
    /// No outbound SA (IKE has not established one yet, or the peer is gone).
    NoSa,
    /// The outbound SA has no sequence number left (32-bit space used up, or a
    /// static key's next block could not be reserved on disk): nothing is sent.
    SeqExhausted,
    /// An IKE datagram the IKE thread could not take (its queue was full), or one
    /// arriving at an endpoint keyed statically.
    Ike,
    /// An inner packet outside the SA's negotiated traffic selectors: decrypted from
    /// the peer with a source or destination it did not agree to, or read from the TUN
    /// for addresses the SA does not carry.
    Selector,
}

impl DropCause {
    /// Every reason, in report order.
    pub const ALL: [DropCause; 11] = [
        DropCause::AuthFailed,
        DropCause::Replay,
        DropCause::BadEncap,
        DropCause::TooBig,
        DropCause::TxError,
        DropCause::Dummy,
        DropCause::BadVnet,
        DropCause::NoSa,
        DropCause::SeqExhausted,
        DropCause::Ike,
        DropCause::Selector,
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
            DropCause::BadVnet => "bad_vnet",
            DropCause::NoSa => "no_sa",
            DropCause::SeqExhausted => "seq_exhausted",
            DropCause::Ike => "ike",
            DropCause::Selector => "selector",
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
            EspError::SeqExhausted => DropCause::SeqExhausted,
            EspError::Dummy => DropCause::Dummy,
            EspError::Selector => DropCause::Selector,
        }
    }
}

fn kind_code(k: EngineKind) -> u8 {
    match k {
        EngineKind::Soft => 0,
        EngineKind::Cpu => 1,
        EngineKind::Lookaside => 2,
        EngineKind::Bitsliced => 3,
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
    drops: [AtomicU64; DropCause::ALL.len()],
    /// Live engine switches done.
    pub engine_switches: AtomicU64,
    /// Lookaside device failures survived (fallback engine took over).
    pub failovers: AtomicU64,
    engine: AtomicU8,
    /// Kernel thread id of the (lead) packet worker (0 before it starts).
    pub worker_tid: AtomicI32,
    /// Kernel thread ids of the sending lanes (their CPU time counts as the worker's).
    pub lane_tids: std::sync::Mutex<Vec<i32>>,
    /// Sending lanes the endpoint runs (0: one worker serves both directions).
    pub lanes: AtomicUsize,
    /// Packets sent per worker: the lead first, then each lane (shows how the
    /// multi-queue TUN spread the flows).
    pub lane_tx: [AtomicU64; MAX_THREADS],
    /// TUN up with its address and the underlay socket bound: traffic can flow.
    pub ready: AtomicBool,
    /// `TUN_F_*` offloads the kernel accepted on the TUN.
    pub tun_offloads: AtomicU32,
    /// UDP GSO in use on sends.
    pub udp_gso: AtomicBool,
    /// UDP GRO in use on receives.
    pub udp_gro: AtomicBool,
    /// Times the kernel refused an offload and the per-packet path took over.
    pub offload_fallbacks: AtomicU64,
    /// Super-packets written to the TUN that joined more than one segment.
    pub coalesced: AtomicU64,
    /// Underlay messages the kernel scattered straight into engine buffers, one per
    /// datagram (no copy in the worker).
    pub scattered: AtomicU64,
    /// Underlay messages that did not fit the offered slots and were gathered, split and
    /// copied by the worker (the slow path beside `scattered`).
    pub gathered: AtomicU64,
    /// Super-packets read from the TUN scattered straight into engine buffers, one per
    /// segment (no payload copy in the worker).
    pub tun_scattered: AtomicU64,
    /// SPI of the outbound SA in use (0: none).
    pub out_spi: AtomicU32,
    /// Highest sequence number used on it.
    pub out_seq: AtomicU64,
    /// Inner bytes sent on it.
    pub out_sa_bytes: AtomicU64,
    /// Lookaside queue pair last granted (meaningful while the engine is `lookaside`).
    queue_pair: AtomicU32,
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

    /// Records the lookaside queue pair the device granted.
    pub fn set_queue_pair(&self, qp: u32) {
        self.queue_pair.store(qp, Relaxed);
    }

    /// The lookaside queue pair in use: `None` while a software engine does the work
    /// (never attached, released, or the device failed over).
    pub fn queue_pair(&self) -> Option<u32> {
        (self.engine() == EngineKind::Lookaside).then(|| self.queue_pair.load(Relaxed))
    }

    /// The engine now in use.
    pub fn engine(&self) -> EngineKind {
        EngineKind::ALL[self.engine.load(Relaxed) as usize % EngineKind::ALL.len()]
    }

    /// Drop counters as a JSON object.
    pub fn drops_json(&self) -> Value {
        let mut m = Map::new();
        for d in DropCause::ALL {
            m.insert(d.as_str().into(), json!(self.drops(d)));
        }
        Value::Object(m)
    }

    /// Which offloads are in use, as JSON.
    pub fn offload_json(&self) -> Value {
        let t = self.tun_offloads.load(Relaxed);
        let names: Vec<&str> = [
            (crate::sys::TUN_F_CSUM, "csum"),
            (crate::sys::TUN_F_TSO4, "tso4"),
            (crate::sys::TUN_F_TSO6, "tso6"),
            (crate::sys::TUN_F_USO4, "uso4"),
            (crate::sys::TUN_F_USO6, "uso6"),
        ]
        .iter()
        .filter(|(f, _)| t & f != 0)
        .map(|(_, n)| *n)
        .collect();
        json!({
            "tun": names,
            "udp_gso": self.udp_gso.load(Relaxed),
            "udp_gro": self.udp_gro.load(Relaxed),
            "fallbacks": self.offload_fallbacks.load(Relaxed),
            "coalesced": self.coalesced.load(Relaxed),
            "scattered": self.scattered.load(Relaxed),
            "gathered": self.gathered.load(Relaxed),
            "tun_scattered": self.tun_scattered.load(Relaxed),
        })
    }

    /// `{"sending": N, "tx_packets": [lead, lane 1, ...]}`.
    pub fn lanes_json(&self) -> Value {
        let n = self.lanes.load(Relaxed).min(MAX_THREADS - 1);
        let tx: Vec<u64> = self.lane_tx[..=n].iter().map(|c| c.load(Relaxed)).collect();
        json!({"sending": n, "tx_packets": tx})
    }

    /// Every counter as JSON (the final report of `nfx tunnel`).
    pub fn json(&self) -> Value {
        json!({
            "engine": self.engine().as_str(),
            "queue_pair": self.queue_pair(),
            "tx_packets": self.tx_packets.load(Relaxed),
            "tx_bytes": self.tx_bytes.load(Relaxed),
            "rx_packets": self.rx_packets.load(Relaxed),
            "rx_bytes": self.rx_bytes.load(Relaxed),
            "drops": self.drops_json(),
            "engine_switches": self.engine_switches.load(Relaxed),
            "failovers": self.failovers.load(Relaxed),
            "offload": self.offload_json(),
            "lanes": self.lanes_json(),
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
        assert_eq!(j["seq_exhausted"], 1);
        assert_eq!(j["tx_error"], 0);
        assert_eq!(j["too_big"], 0);
        c.count(DropCause::BadVnet);
        assert_eq!(c.drops_json()["bad_vnet"], 1);
        c.tun_offloads
            .store(crate::sys::TUN_F_CSUM | crate::sys::TUN_F_TSO4, Relaxed);
        assert_eq!(c.offload_json()["tun"], json!(["csum", "tso4"]));
        c.set_queue_pair(3);
        assert_eq!(
            c.json()["queue_pair"],
            Value::Null,
            "no queue pair on a software engine"
        );
        c.set_engine(EngineKind::Lookaside);
        assert_eq!(c.json()["engine"], "lookaside");
        assert_eq!(c.json()["queue_pair"], 3);
    }
}
