//! The interface every port (AF_PACKET, UDP, TUN) offers the dataplane worker, and the
//! counters a port keeps about itself.

use nfx_packet::{DropReason, Packet};
use std::io;
use std::os::fd::RawFd;

/// Per-port counters, owned and updated by the worker thread that owns the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames taken from the kernel by receives, whether handed on or dropped here.
    pub rx_taken: u64,
    /// Frames handed to the dataplane.
    pub rx_packets: u64,
    /// Bytes of those frames (without the virtio-net header).
    pub rx_bytes: u64,
    /// Frames the kernel accepted for transmission.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Send calls repeated because the kernel queue was momentarily full.
    pub tx_retries: u64,
    /// Receive calls that failed with an error other than "nothing to read".
    pub rx_errors: u64,
    /// Frames dropped by the port itself, by reason (`TxError`, `Truncated`).
    pub drops: [u64; DropReason::COUNT],
}

impl Default for PortCounters {
    fn default() -> Self {
        Self {
            rx_taken: 0,
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            tx_retries: 0,
            rx_errors: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

impl PortCounters {
    /// Counts one dropped frame.
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }
}

/// A packet port. Ports are non-blocking: a receive with nothing queued returns 0 and
/// the worker decides (by poll mode) whether to spin or to block on [`Port::fd`].
pub trait Port: Send {
    /// Interface (or socket) name, for counters and errors.
    fn name(&self) -> &str;

    /// The MAC address that frames leaving this port carry as source.
    fn mac(&self) -> [u8; 6];

    /// Descriptor that becomes readable when frames are queued (for poll(2)).
    fn fd(&self) -> RawFd;

    /// Receives up to `slots.len()` frames into the slots' buffers (and virtio-net
    /// headers), returning how many slots now hold a frame, in arrival order.
    fn recv(&mut self, slots: &mut [Packet]) -> io::Result<usize>;

    /// Transmits every packet of `pkts` in order. Packets the kernel would not take after
    /// a bounded number of retries get `drop = Some(TxError)` and are counted; returns
    /// how many were sent.
    fn send(&mut self, pkts: &mut [Packet]) -> usize;

    /// The port's counters.
    fn counters(&self) -> &PortCounters;

    /// The kernel's receive times of the frames the last receive returned, in their
    /// order, ns on [`stamp_clock_ns`]'s clock (0 for a frame without one): what the
    /// worker measures each packet's time in the dataplane from. Empty for ports that
    /// read no kernel timestamp (only a receive ring carries one in every frame).
    fn rx_stamps(&self) -> &[u64] {
        &[]
    }

    /// Bytes of frames this port sent that the kernel still holds (SIOCOUTQ): not yet
    /// taken by the receiving stack. Ports whose sends complete within the send call
    /// report 0.
    fn unsent_bytes(&self) -> io::Result<usize> {
        Ok(0)
    }

    /// Ends the loans of the last receive: call with the packets it returned (in any
    /// order, dropped ones included) once they have been sent, before the next
    /// receive. A port that lends packets memory of its own (a receive ring with
    /// `rx_in_place`) detaches them here and hands that memory back; the packets are
    /// empty afterwards. Nothing to do for ports that copy.
    fn release(&mut self, pkts: &mut [Packet]) {
        let _ = pkts;
    }
}

/// Now on the clock of [`Port::rx_stamps`] (CLOCK_REALTIME, the packet socket's), ns
/// since the Unix epoch.
pub fn stamp_clock_ns() -> u64 {
    // SAFETY: timespec is plain old data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live timespec; CLOCK_REALTIME always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
