//! Which TUN queue each flow uses, learned from the sending lanes, so that the lead
//! writes a flow's received packets to the queue the flow's sent packets leave on.
//!
//! Linux steers a multi-queue TUN's outgoing packets by flow hash, but a packet written
//! into a queue re-points its flow (symmetric hash) to that queue ("automq"). If the
//! lead wrote everything it receives to one queue, every flow with traffic both ways
//! (TCP: its ACKs) would be moved there, onto one lane, and its packets already queued
//! on the old queue could be overtaken by the new ones. So each lane records, per read,
//! the flow's symmetric key and its queue in a lock-free table, and the lead writes a
//! received packet to that queue (queue 0 when the flow is unknown, e.g. one the peer
//! started: its first reply then goes out queue 0, and stays there).

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use nfx_packet::ip_tuple;

/// Table slots (flows remembered at once; a collision only costs a queue switch).
const SLOTS: usize = 4096;

/// The learned flow → queue table.
pub struct FlowQueues {
    slots: Box<[AtomicU64]>,
}

impl Default for FlowQueues {
    fn default() -> Self {
        FlowQueues {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl FlowQueues {
    /// Records that the flow with key `key` leaves on queue `q` (< 255).
    pub fn learn(&self, key: u64, q: usize) {
        let v = (key & !0xff) | (q as u64 + 1);
        let slot = &self.slots[(key as usize >> 8) % SLOTS];
        // Read first: a steady flow finds its entry in place and writes nothing.
        if slot.load(Relaxed) != v {
            slot.store(v, Relaxed);
        }
    }

    /// The queue flow `key` was last seen leaving on.
    pub fn queue(&self, key: u64) -> Option<usize> {
        let v = self.slots[(key as usize >> 8) % SLOTS].load(Relaxed);
        (v != 0 && v & !0xff == key & !0xff).then(|| (v & 0xff) as usize - 1)
    }
}

/// The symmetric flow key of an IP packet (the same for both directions): protocol and
/// the two (address, port) ends in a fixed order; ports only for TCP, UDP and SCTP.
/// `None` for what is too short to be an IP packet.
pub fn flow_key(ip: &[u8]) -> Option<u64> {
    let t = ip_tuple(ip)?;
    let (pa, pb) = match t.proto {
        6 | 17 | 132 => t.ports.unwrap_or_default(),
        _ => (0, 0),
    };
    let (x, y) = if (t.src, pa) <= (t.dst, pb) {
        ((t.src, pa), (t.dst, pb))
    } else {
        ((t.dst, pb), (t.src, pa))
    };
    let h = BuildHasherDefault::<DefaultHasher>::default();
    Some(h.hash_one((t.proto, x, y)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn both_directions_share_a_key_and_flows_differ() {
        let out = v4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 5201);
        let back = v4([10, 0, 0, 2], [10, 0, 0, 1], 5201, 40000);
        let other = v4([10, 0, 0, 1], [10, 0, 0, 2], 40001, 5201);
        assert_eq!(flow_key(&out), flow_key(&back));
        assert_ne!(flow_key(&out), flow_key(&other));
        assert_eq!(flow_key(&[0x45, 0, 0]), None);
        assert_eq!(flow_key(&[]), None);
    }

    #[test]
    fn learned_queues_are_found_and_unknown_flows_are_not() {
        let t = FlowQueues::default();
        let a = flow_key(&v4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2)).unwrap();
        let b = flow_key(&v4([1, 1, 1, 1], [2, 2, 2, 2], 3, 4)).unwrap();
        assert_eq!(t.queue(a), None);
        t.learn(a, 1);
        assert_eq!(t.queue(a), Some(1));
        t.learn(a, 0);
        assert_eq!(t.queue(a), Some(0));
        // A key that only shares the slot is not taken for the learned flow.
        assert_eq!(t.queue(a ^ (1 << 40)), None);
        t.learn(b, 2);
        assert_eq!((t.queue(a), t.queue(b)), (Some(0), Some(2)));
    }
}
