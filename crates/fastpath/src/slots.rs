//! The `slots` array map, mapped into this process (BPF_F_MMAPABLE): the worker reads
//! the per-flow counters and flips the control word with atomics, without a syscall.

use crate::key::RawSlot;
use crate::mapping::Mapping;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bit of the control word that makes the fast path forward a flow's frames.
pub const ACTIVE: u64 = 1 << 63;

/// Counters the BPF program keeps per flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotCounters {
    /// Frames forwarded by the fast path (GSO super-packets count their segments).
    pub packets: u64,
    /// Bytes of those frames, Ethernet header included.
    pub bytes: u64,
    /// CLOCK_MONOTONIC nanoseconds of the last forwarded frame (0: none yet).
    pub last_ns: u64,
}

/// The mapping of the whole array.
pub(crate) struct Slots(Mapping);

impl Slots {
    /// The slots in `mapping` (of the `slots` map, elements of `RawSlot` size).
    pub fn new(mapping: Mapping) -> Self {
        Self(mapping)
    }

    fn word(&self, slot: u32, field: usize) -> &AtomicU64 {
        self.0.word(slot, field)
    }

    /// Overwrites a slot. Only for a slot no table key points at (free or quarantined
    /// past its grace period), so the BPF program does not read it meanwhile.
    pub fn write(&self, slot: u32, v: RawSlot) {
        // SAFETY: in bounds (`at` checks) and 8-byte aligned like the mapping; no
        // concurrent reader (see above).
        unsafe { std::ptr::write_volatile(self.0.at(slot).cast::<RawSlot>(), v) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The control word: ACTIVE bit and frames handed to userspace.
    pub fn ctl(&self, slot: u32) -> u64 {
        self.word(slot, 0).load(Ordering::SeqCst)
    }

    /// Sets ACTIVE if the control word still equals `seen` (no frame counted since).
    pub fn arm(&self, slot: u32, seen: u64) -> bool {
        self.word(slot, 0)
            .compare_exchange(seen, seen | ACTIVE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Clears ACTIVE: the flow's next frames go to userspace again.
    pub fn disarm(&self, slot: u32) {
        self.word(slot, 0).fetch_and(!ACTIVE, Ordering::SeqCst);
    }

    /// The counters of a slot.
    pub fn counters(&self, slot: u32) -> SlotCounters {
        SlotCounters {
            packets: self.word(slot, 8).load(Ordering::Relaxed),
            bytes: self.word(slot, 16).load(Ordering::Relaxed),
            last_ns: self.word(slot, 24).load(Ordering::Relaxed),
        }
    }
}
