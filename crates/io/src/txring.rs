//! PACKET_MMAP transmit ring (TPACKET_V2) for [`crate::AfPacketPort`] (`tx_ring`).
//!
//! Why: `sendmmsg` makes the kernel import one `msghdr` and its iovecs per frame and
//! copy each frame into a fresh skb. With a ring the worker writes each frame (with its
//! virtio-net header, so GSO super-packets stay whole) into a slot of shared memory,
//! marks it `TP_STATUS_SEND_REQUEST`, and one `send()` per vector makes the kernel
//! transmit every marked slot in ring order.
//!
//! The ring lives on a socket of its own, bound to the interface with protocol 0 so
//! that it receives nothing: the port's receive socket (and its receive ring) stay as
//! they are. A slot may be written only while its status is `TP_STATUS_AVAILABLE`;
//! a frame that finds the next slot still queued or in flight is a counted drop
//! ([`Push::Full`]), never an overwrite. Malformed frames are skipped by the kernel
//! (PACKET_LOSS) instead of stopping the ring.
//!
//! Zero copy and slot reuse: `tpacket_snd` attaches the slot's pages to the skb as
//! fragments, marks the skb zero-copy (`skb_zcopy_set_nouarg`) and hands the slot back
//! (status `TP_STATUS_AVAILABLE`) from the skb destructor. Whoever would keep the data
//! longer than the transmit first copies the fragments (`skb_orphan_frags`: veth's
//! `__dev_forward_skb` into the peer namespace, the packet taps), so a slot that is
//! AVAILABLE again can be rewritten even while a receiver has not read what it carried
//! (crates/io/tests/afpacket_veth.rs, `tx_ring_slot_is_not_reused_under_a_reader`).

use crate::ring::map_packet_ring;
use crate::sys::{check, owned, setsockopt_int};
use nfx_packet::VnetHdr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes before the frame data in a slot: `TPACKET_ALIGN(sizeof(tpacket2_hdr))`, where
/// the kernel looks for the data of a V2 transmit frame without PACKET_TX_HAS_OFF.
pub const DATA_OFFSET: usize = 32;
/// Bytes per slot: 17 pages, room for the slot header, the virtio-net header and the
/// largest GSO super-packet a packet buffer holds.
pub const SLOT: usize = 17 * PAGE;
/// Largest frame (without its virtio-net header) a slot holds.
pub const MAX_FRAME: usize = SLOT - DATA_OFFSET - VnetHdr::LEN;
/// Slots per block: 15 slots of 17 pages fill 255 of the 256 pages the kernel
/// allocates for the block (it rounds blocks up to a power-of-two number of pages).
const SLOTS_PER_BLOCK: usize = 15;
const PAGE: usize = 4096;

// A slot holds the largest packet buffer, and a block's slots fill all but at most one of
// the power-of-two pages the kernel allocates for it.
const _: () = assert!(MAX_FRAME >= nfx_packet::PacketBuf::GSO_CAPACITY);
const _: () = {
    let pages = SLOTS_PER_BLOCK * SLOT / PAGE;
    assert!(pages.next_power_of_two() - pages <= 1);
};

const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;

/// What became of a frame offered to the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// In the ring, marked for the next kick.
    Queued,
    /// The next slot is still queued or in flight: not sent.
    Full,
    /// Longer than [`MAX_FRAME`]: not sent.
    TooBig,
}

/// A mapped TPACKET_V2 transmit ring on its own packet socket.
pub(crate) struct TxRing {
    fd: OwnedFd,
    base: *mut u8,
    size: usize,
    slots: usize,
    head: usize,
    /// Slots marked since the last kick.
    pending: usize,
}

// SAFETY: the mapping belongs to this ring alone; the kernel side is synchronised
// through each slot's status word.
unsafe impl Send for TxRing {}

impl TxRing {
    /// Opens a send-only packet socket on interface `ifindex` with a ring of at least
    /// `frames` slots (PACKET_VNET_HDR, PACKET_LOSS, optionally PACKET_QDISC_BYPASS).
    pub(crate) fn open(ifindex: u32, frames: usize, qdisc_bypass: bool) -> io::Result<Self> {
        // SAFETY: plain socket(2) call.
        let fd = owned(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        let raw = fd.as_raw_fd();
        setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)?;
        setsockopt_int(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as i32,
        )?;
        setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_LOSS, 1)?;
        if qdisc_bypass {
            setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
        }
        let blocks = frames.div_ceil(SLOTS_PER_BLOCK).max(1);
        let slots = blocks * SLOTS_PER_BLOCK;
        let block = SLOTS_PER_BLOCK * SLOT;
        let (base, size) = map_packet_ring(raw, libc::PACKET_TX_RING, block, blocks, SLOT)?;
        let ring = Self {
            fd,
            base,
            size,
            slots,
            head: 0,
            pending: 0,
        };
        // SAFETY: sockaddr_ll is plain old data. Protocol 0: bound for sending only.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: passes a live sockaddr_ll and its size.
        check(unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(ring)
    }

    /// The ring's socket (to wait for room in its send buffer).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: slot `i` < `slots` lies in the mapping, is page aligned and starts
        // with the u32 status word the kernel reads and writes.
        unsafe { &*self.base.add(i * SLOT).cast::<AtomicU32>() }
    }

    /// Copies `frame` and its header into the next slot and marks it for sending.
    pub(crate) fn push(&mut self, vnet: &VnetHdr, frame: &[u8]) -> Push {
        if frame.len() > MAX_FRAME {
            return Push::TooBig;
        }
        if self.status(self.head).load(Ordering::Acquire) != TP_STATUS_AVAILABLE {
            return Push::Full;
        }
        let slot = self.head * SLOT;
        // SAFETY: the slot is SLOT bytes inside the mapping and, being AVAILABLE, owned
        // by userspace; header and frame fit (MAX_FRAME + offsets <= SLOT).
        unsafe {
            let data = self.base.add(slot + DATA_OFFSET);
            std::ptr::copy_nonoverlapping(vnet.to_bytes().as_ptr(), data, VnetHdr::LEN);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), data.add(VnetHdr::LEN), frame.len());
            // struct tpacket2_hdr { u32 tp_status, tp_len; ... }: tp_len counts the
            // virtio-net header too.
            self.base
                .add(slot + 4)
                .cast::<u32>()
                .write((VnetHdr::LEN + frame.len()) as u32);
        }
        self.status(self.head)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.head = (self.head + 1) % self.slots;
        self.pending += 1;
        Push::Queued
    }

    /// Frames marked but not yet handed to the kernel by a kick.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Makes the kernel send every marked slot. `Ok` once it took them all; the
    /// error of `send()` otherwise (EAGAIN/ENOBUFS: the rest goes with the next kick).
    pub(crate) fn kick(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        // SAFETY: no buffer: with a TX ring, send() transmits the marked slots.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.pending = 0;
        Ok(())
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`.
        unsafe { libc::munmap(self.base.cast(), self.size) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ifindex;

    /// An Ethernet frame to a MAC nobody has, with an experimental ethertype.
    fn frame(len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0x77, 1]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x77, 2]);
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        f
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn a_slot_in_flight_is_never_overwritten_and_comes_back_after_the_kick() {
        let mut ring = TxRing::open(ifindex("lo").unwrap(), 1, true).unwrap();
        assert_eq!(ring.slots, SLOTS_PER_BLOCK);
        let f = frame(60);
        for _ in 0..ring.slots {
            assert_eq!(ring.push(&VnetHdr::default(), &f), Push::Queued);
        }
        // Every slot is marked and not yet sent: the next frame must not take one.
        assert_eq!(ring.push(&VnetHdr::default(), &f), Push::Full);
        assert_eq!(ring.pending(), ring.slots);
        ring.kick().unwrap();
        assert_eq!(ring.pending(), 0);
        // Loopback frees each skb (a frame for nobody) in its receive softirq, which
        // normally runs before send() returns; allow it to be deferred a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut pushed = ring.push(&VnetHdr::default(), &f);
        while pushed == Push::Full && std::time::Instant::now() < deadline {
            std::thread::yield_now();
            pushed = ring.push(&VnetHdr::default(), &f);
        }
        assert_eq!(pushed, Push::Queued, "slot never came back after the kick");
        ring.kick().unwrap();
        assert_eq!(
            ring.push(&VnetHdr::default(), &vec![0u8; MAX_FRAME + 1]),
            Push::TooBig
        );
        assert_eq!(ring.pending(), 0);
    }
}
