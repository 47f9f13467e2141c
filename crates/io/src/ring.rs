//! PACKET_MMAP receive ring (TPACKET_V2) for [`crate::AfPacketPort`].
//!
//! Why: with `recvmmsg` every batch costs a system call and every frame an skb clone
//! queued on the socket, then copied and freed in the worker's context. With a ring the
//! kernel copies each frame into shared memory in the context that delivers it (on veth
//! that is the *sender's* transmit), and the worker reads frames with plain memory loads:
//! no system call while frames are waiting.
//!
//! Slots are [`SLOT`] bytes, enough for an MTU frame and its headers, or [`GSO_SLOT`]
//! bytes, enough for a 64 KiB GSO super-packet, which then lands in the ring in the
//! sender's context too. A frame that does not fit is also queued on the socket in full
//! (PACKET_COPY_THRESH) and its slot is marked `TP_STATUS_COPY`; the port then reads that
//! one frame with `recvmsg`, in the same position, so order and GSO are kept. A slot whose
//! lengths do not add up is a counted `Truncated` drop, never a panic.
//!
//! Slots are either handed back as soon as their frame is copied out
//! (`RxRing::release_head`) or lent to the packets in place (`RxRing::take_head`)
//! and handed back together after the send (`RxRing::release_held`).

use crate::sys::{check, setsockopt_int};
use nfx_packet::{DropReason, VnetHdr};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per ring slot: tpacket2 header, address, virtio-net header and an MTU frame.
pub const SLOT: usize = 2048;
/// Bytes per ring block (the kernel allocates the ring in blocks of whole slots).
const BLOCK: usize = 64 << 10;
/// Slot status bits (linux/if_packet.h).
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_KERNEL: u32 = 0;

/// Where one received frame lies in its slot, as read from the slot's `tpacket2_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotFrame {
    /// The whole frame is in the slot: `len` bytes from byte `mac`, the virtio-net
    /// header in the [`VnetHdr::LEN`] bytes before it.
    InSlot {
        /// Offset of the Ethernet header in the slot.
        mac: usize,
        /// Frame length.
        len: usize,
    },
    /// Too big for a slot; the full frame waits in the socket queue.
    Queued,
}

/// Reads the header of a slot the kernel handed over (`status` has `TP_STATUS_USER`)
/// and checks that the frame it describes lies inside the slot. Errors are the reason to
/// count the frame as dropped.
pub fn parse_slot(slot: &[u8], status: u32) -> Result<SlotFrame, DropReason> {
    let hdr_len = std::mem::size_of::<libc::tpacket2_hdr>();
    if slot.len() < hdr_len {
        return Err(DropReason::Truncated);
    }
    let word = |at: usize| u32::from_ne_bytes([slot[at], slot[at + 1], slot[at + 2], slot[at + 3]]);
    let half = |at: usize| usize::from(u16::from_ne_bytes([slot[at], slot[at + 1]]));
    // struct tpacket2_hdr { u32 tp_status, tp_len, tp_snaplen; u16 tp_mac, tp_net; ... }
    let len = word(4) as usize;
    let snap = word(8) as usize;
    let mac = half(12);
    if status & TP_STATUS_COPY != 0 {
        return Ok(SlotFrame::Queued);
    }
    if snap != len || len == 0 || mac < hdr_len + VnetHdr::LEN || mac + len > slot.len() {
        return Err(DropReason::Truncated);
    }
    Ok(SlotFrame::InSlot { mac, len })
}

/// The kernel's receive time of the frame in a slot the kernel handed over, ns since
/// the Unix epoch (CLOCK_REALTIME, as the packet socket stamps it when it copies the
/// frame into the ring: a software stamp taken on arrival, or the copy's own time); 0
/// when the slot is too short to hold one.
pub fn slot_stamp_ns(slot: &[u8]) -> u64 {
    // struct tpacket2_hdr { ...; u16 tp_mac, tp_net; u32 tp_sec, tp_nsec; ... }
    let Some(b) = slot.get(16..24) else {
        return 0;
    };
    let sec = u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let nsec = u64::from(u32::from_ne_bytes([b[4], b[5], b[6], b[7]]));
    sec * 1_000_000_000 + nsec
}

/// A mapped TPACKET_V2 receive ring on one packet socket.
pub(crate) struct RxRing {
    base: *mut u8,
    size: usize,
    slot: usize,
    block: usize,
    per_block: usize,
    slots: usize,
    head: usize,
    /// Slots before `head` taken but not yet handed back ([`Self::take_head`]).
    held: usize,
}

// SAFETY: the mapping belongs to this ring alone; the kernel side is synchronised
// through each slot's status word.
unsafe impl Send for RxRing {}

/// Bytes per slot of a ring that holds GSO super-packets whole: the slot header
/// (`tp_mac` is 76 with a virtio-net header) and a frame of up to 69 556 bytes, more
/// than a veth's 64 KiB GSO frame and its Ethernet header.
pub const GSO_SLOT: usize = 68 << 10;
/// Block size of a ring of [`GSO_SLOT`] slots: 15 slots in 1 MiB (an order-8 block;
/// the kernel falls back to vmalloc memory when it has no such contiguous pages).
const GSO_BLOCK: usize = 1 << 20;

/// Ring geometry for `frames` slots of `slot` bytes: (block size, blocks, slots per
/// block). Slots up to [`SLOT`] use 64 KiB blocks, bigger ones 1 MiB blocks.
pub(crate) fn geometry(frames: usize, slot: usize) -> (usize, usize, usize) {
    let block = if slot <= SLOT { BLOCK } else { GSO_BLOCK };
    let per_block = (block / slot).max(1);
    let block = block.max(slot.next_power_of_two());
    (block, frames.div_ceil(per_block).max(1), per_block)
}

/// Configures a TPACKET_V2 ring (`which`: PACKET_RX_RING or PACKET_TX_RING) of `blocks`
/// blocks of `block` bytes, cut into `frame`-byte slots, on packet socket `fd`, and maps
/// it. Returns the mapping and its length (the caller unmaps it).
pub(crate) fn map_packet_ring(
    fd: RawFd,
    which: libc::c_int,
    block: usize,
    blocks: usize,
    frame: usize,
) -> io::Result<(*mut u8, usize)> {
    let req = libc::tpacket_req {
        tp_block_size: block as u32,
        tp_block_nr: blocks as u32,
        tp_frame_size: frame as u32,
        tp_frame_nr: (blocks * (block / frame)) as u32,
    };
    // SAFETY: passes a live tpacket_req and its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            which,
            (&req as *const libc::tpacket_req).cast(),
            std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
        )
    })?;
    let size = blocks * block;
    // No MAP_POPULATE: the packet socket's mmap handler inserts every page of the ring
    // (allocated and zeroed by the setsockopt above) into the mapping itself, so a
    // populate pass would only walk the page tables again on the worker's start-up path.
    // SAFETY: maps the ring just configured on `fd`; checked for MAP_FAILED below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok((base.cast(), size))
}

impl RxRing {
    /// Sets up a ring of at least `frames` slots of `slot` bytes (a multiple of 16, at
    /// least [`SLOT`]) on `fd` (a packet socket with PACKET_VNET_HDR already set, no
    /// ring yet) and maps it.
    pub(crate) fn new(fd: RawFd, frames: usize, slot: usize) -> io::Result<Self> {
        if slot < SLOT || !slot.is_multiple_of(16) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "receive ring slot of {slot} bytes: must be a multiple of 16, at least {SLOT}"
                ),
            ));
        }
        let (block, blocks, per_block) = geometry(frames, slot);
        setsockopt_int(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as i32,
        )?;
        // Frames that do not fit a slot are queued on the socket as well.
        setsockopt_int(fd, libc::SOL_PACKET, libc::PACKET_COPY_THRESH, 1)?;
        let (base, size) = map_packet_ring(fd, libc::PACKET_RX_RING, block, blocks, slot)?;
        Ok(Self {
            base,
            size,
            slot,
            block,
            per_block,
            slots: blocks * per_block,
            head: 0,
            held: 0,
        })
    }

    /// Bytes per slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot
    }

    /// Slot `i`'s first byte (slots do not straddle blocks: the kernel maps block
    /// after block contiguously and each block holds whole slots, so slot `i` of block
    /// `b` is at `b * block + (i % per_block) * slot`).
    fn slot_ptr(&self, i: usize) -> *mut u8 {
        // SAFETY: slot `i` < `slots` lies inside the mapping of `slots / per_block` blocks.
        unsafe {
            self.base
                .add((i / self.per_block) * self.block + (i % self.per_block) * self.slot)
        }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: slot `i` < `slots` lies in the mapping, is 16-byte aligned and starts
        // with the u32 status word the kernel writes.
        unsafe { &*self.slot_ptr(i).cast::<AtomicU32>() }
    }

    /// The status of the slot at the head if the kernel handed it over, else `None`.
    pub(crate) fn ready(&self) -> Option<u32> {
        if self.held == self.slots {
            return None;
        }
        let s = self.status(self.head).load(Ordering::Acquire);
        (s & TP_STATUS_USER != 0).then_some(s)
    }

    /// The head slot's bytes (valid while it is ready).
    pub(crate) fn head_slot(&self) -> &[u8] {
        // SAFETY: the head slot is `slot` bytes inside the mapping and owned by
        // userspace until it is handed back (its status says TP_STATUS_USER).
        unsafe { std::slice::from_raw_parts(self.slot_ptr(self.head), self.slot) }
    }

    /// The head slot's first byte, for a packet to borrow the frame in it until
    /// [`Self::release_held`].
    pub(crate) fn head_ptr(&self) -> *mut u8 {
        self.slot_ptr(self.head)
    }

    /// Gives the head slot back to the kernel and moves on (no slot may be held).
    pub(crate) fn release_head(&mut self) {
        debug_assert_eq!(self.held, 0);
        self.status(self.head)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.head = (self.head + 1) % self.slots;
    }

    /// Moves past the head slot but keeps it from the kernel until
    /// [`Self::release_held`] (its frame is used in place).
    pub(crate) fn take_head(&mut self) {
        self.held += 1;
        self.head = (self.head + 1) % self.slots;
    }

    /// Slots taken with [`Self::take_head`] and not yet handed back.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Hands every held slot back to the kernel, oldest first. The kernel fills slots
    /// in ring order and stops at the first one userspace still holds, so handing back
    /// a contiguous run behind the head never lets it overwrite a slot in use.
    pub(crate) fn release_held(&mut self) {
        let first = (self.head + self.slots - self.held) % self.slots;
        for k in 0..self.held {
            self.status((first + k) % self.slots)
                .store(TP_STATUS_KERNEL, Ordering::Release);
        }
        self.held = 0;
    }

    /// Releases every slot userspace holds (frames queued before a fanout join).
    pub(crate) fn discard(&mut self) {
        self.release_held();
        while self.ready().is_some() {
            self.release_head();
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.base.cast(), self.size) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(len: u32, snap: u32, mac: u16) -> Vec<u8> {
        let mut s = vec![0u8; SLOT];
        s[0..4].copy_from_slice(&TP_STATUS_USER.to_ne_bytes());
        s[4..8].copy_from_slice(&len.to_ne_bytes());
        s[8..12].copy_from_slice(&snap.to_ne_bytes());
        s[12..14].copy_from_slice(&mac.to_ne_bytes());
        s
    }

    #[test]
    fn well_formed_slot_gives_the_frame() {
        assert_eq!(
            parse_slot(&slot(60, 60, 82), TP_STATUS_USER),
            Ok(SlotFrame::InSlot { mac: 82, len: 60 })
        );
        let max = (SLOT - 82) as u32;
        assert_eq!(
            parse_slot(&slot(max, max, 82), TP_STATUS_USER),
            Ok(SlotFrame::InSlot {
                mac: 82,
                len: max as usize
            })
        );
    }

    #[test]
    fn slot_stamp_reads_seconds_and_nanoseconds() {
        let mut s = slot(60, 60, 82);
        s[16..20].copy_from_slice(&1_700_000_000u32.to_ne_bytes());
        s[20..24].copy_from_slice(&123_456_789u32.to_ne_bytes());
        assert_eq!(slot_stamp_ns(&s), 1_700_000_000_123_456_789);
        assert_eq!(slot_stamp_ns(&s[..20]), 0);
    }

    #[test]
    fn ring_geometry_keeps_slots_inside_blocks() {
        assert_eq!(geometry(16384, SLOT), (64 << 10, 512, 32));
        let (block, blocks, per) = geometry(512, GSO_SLOT);
        assert_eq!((block, blocks, per), (1 << 20, 35, 15));
        assert!(per * GSO_SLOT <= block);
        // A GSO frame (64 KiB + Ethernet) behind the header fits a GSO slot.
        let max = (GSO_SLOT - 76) as u32;
        let mut s = vec![0u8; GSO_SLOT];
        s[4..8].copy_from_slice(&max.to_ne_bytes());
        s[8..12].copy_from_slice(&max.to_ne_bytes());
        s[12..14].copy_from_slice(&76u16.to_ne_bytes());
        assert!(max as usize >= 65536 + 14);
        assert_eq!(
            parse_slot(&s, TP_STATUS_USER),
            Ok(SlotFrame::InSlot {
                mac: 76,
                len: max as usize
            })
        );
    }

    #[test]
    fn oversize_frame_marked_copy_is_read_from_the_queue() {
        assert_eq!(
            parse_slot(&slot(60000, 1966, 82), TP_STATUS_USER | TP_STATUS_COPY),
            Ok(SlotFrame::Queued)
        );
    }

    #[test]
    fn bad_lengths_are_truncated_drops() {
        let bad = [
            slot(60000, 1966, 82), // cut short, no full copy queued
            slot(0, 0, 82),        // empty
            slot(60, 60, 20),      // frame overlaps the header
            slot(60, 60, 2040),    // frame runs past the slot
            slot(3000, 3000, 82),  // lengths past the slot
            slot(u32::MAX, u32::MAX, 82),
        ];
        for s in bad {
            assert_eq!(
                parse_slot(&s, TP_STATUS_USER),
                Err(DropReason::Truncated),
                "{:?}",
                &s[..14]
            );
        }
        assert_eq!(
            parse_slot(&[0u8; 8], TP_STATUS_USER),
            Err(DropReason::Truncated)
        );
    }
}
