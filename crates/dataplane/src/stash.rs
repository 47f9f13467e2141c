//! Frames a held worker takes off a port and keeps, in arrival order, until it is
//! released.
//!
//! Why: a handoff holds the new worker while flow state moves to it, and steers the
//! traffic to it first, so that no frame meets a worker without its state. A socket's
//! receive ring (512 slots) fills within milliseconds of a TCP transfer, and every
//! frame past it is lost (`socket_drops`). A held worker therefore keeps taking
//! frames, copies them here (up to [`STASH_BYTES`] per port) and runs them, before
//! anything newer, once released. Past that bound frames wait in the socket as before.

use nfx_packet::{DropReason, Packet, PacketBuf, VnetHdr};
use std::collections::VecDeque;

/// Most bytes of frames one port's stash keeps.
pub const STASH_BYTES: usize = 64 << 20;

/// One port's kept frames.
#[derive(Default)]
pub struct Stash {
    frames: VecDeque<(Box<[u8]>, VnetHdr)>,
    bytes: usize,
    drops: [u64; DropReason::COUNT],
}

impl Stash {
    /// Whether another receive's worth of frames may be taken.
    pub fn has_room(&self) -> bool {
        self.bytes < STASH_BYTES
    }

    /// Frames kept.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frames the stash could not keep, by reason (`TooBig`: longer than a packet
    /// buffer, so it could not be given back).
    pub fn drops(&self) -> &[u64; DropReason::COUNT] {
        &self.drops
    }

    /// Copies the frames of `pkts` (just received, in order) and their virtio-net
    /// headers.
    pub fn keep(&mut self, pkts: &[Packet]) {
        for p in pkts {
            let f = p.buf.frame();
            if f.len() > PacketBuf::GSO_CAPACITY {
                self.drops[DropReason::TooBig as usize] += 1;
                continue;
            }
            self.bytes += f.len();
            self.frames.push_back((f.into(), p.buf.vnet));
        }
    }

    /// Moves the oldest frames into `slots` (one each, in order) and returns how many;
    /// the slots' buffers must hold [`PacketBuf::GSO_CAPACITY`] bytes.
    pub fn refill(&mut self, slots: &mut [Packet]) -> usize {
        let mut n = 0;
        for p in slots.iter_mut() {
            let Some((f, vnet)) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= f.len();
            p.buf.storage_mut()[..f.len()].copy_from_slice(&f);
            p.buf.set_len(f.len());
            p.buf.vnet = vnet;
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_packet::{Direction, PacketVector};

    fn packet(tag: u8, len: usize) -> Packet {
        let mut p = Packet::new(PacketBuf::from_frame(&vec![tag; len]), Direction::Forward);
        p.buf.vnet.gso_size = u16::from(tag);
        p
    }

    #[test]
    fn frames_come_back_in_order_with_their_headers() {
        let mut s = Stash::default();
        s.keep(&[packet(1, 60), packet(2, 1500)]);
        s.keep(&[packet(3, 9000)]);
        assert_eq!(s.len(), 3);
        let mut v = PacketVector::new(2, PacketBuf::GSO_CAPACITY);
        assert_eq!(s.refill(v.slots_mut()), 2);
        let got: Vec<(u8, usize, u16)> = v.slots_mut()[..2]
            .iter()
            .map(|p| (p.buf.frame()[0], p.buf.len(), p.buf.vnet.gso_size))
            .collect();
        assert_eq!(got, [(1, 60, 1), (2, 1500, 2)]);
        assert_eq!(s.refill(v.slots_mut()), 1);
        assert_eq!(v.slots_mut()[0].buf.frame(), &[3u8; 9000][..]);
        assert!(s.is_empty());
        assert_eq!(s.refill(v.slots_mut()), 0);
        assert_eq!(s.bytes, 0);
    }

    #[test]
    fn room_ends_at_the_byte_bound() {
        let mut s = Stash::default();
        let big = packet(7, 65536);
        while s.has_room() {
            s.keep(std::slice::from_ref(&big));
        }
        assert_eq!(s.len(), STASH_BYTES / 65536);
        let mut v = PacketVector::new(1, PacketBuf::GSO_CAPACITY);
        s.refill(v.slots_mut());
        assert!(s.has_room(), "one frame out makes room");
        assert_eq!(s.drops().iter().sum::<u64>(), 0);
    }

    #[test]
    fn a_frame_longer_than_a_packet_buffer_is_a_counted_drop() {
        let mut s = Stash::default();
        s.keep(&[packet(1, PacketBuf::GSO_CAPACITY + 1), packet(2, 60)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.drops()[DropReason::TooBig as usize], 1);
    }
}
