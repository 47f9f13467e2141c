//! The `slots` array map, mapped into this process (BPF_F_MMAPABLE): the worker reads
//! the per-flow counters and flips the control word with atomics, without a syscall.

use crate::key::RawSlot;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
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
pub(crate) struct Slots {
    base: *mut RawSlot,
    len: usize,
    map_len: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics and volatile
// writes of slots that the BPF program cannot reach yet (see `write`).
unsafe impl Send for Slots {}

impl Slots {
    /// Maps `len` slots of the array map `fd`.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        let bytes = len * std::mem::size_of::<RawSlot>();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = bytes.div_ceil(page) * page;
        // SAFETY: maps a BPF array created with BPF_F_MMAPABLE; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: p.cast(),
            len,
            map_len,
        })
    }

    fn at(&self, slot: u32) -> *mut RawSlot {
        assert!((slot as usize) < self.len, "slot {slot} out of range");
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.base.add(slot as usize) }
    }

    fn word(&self, slot: u32, field: usize) -> &AtomicU64 {
        // SAFETY: `field` is the offset of an 8-byte aligned u64 inside the slot; the
        // mapping lives as long as `self`.
        unsafe { &*(self.at(slot).cast::<u8>().add(field).cast::<AtomicU64>()) }
    }

    /// Overwrites a slot. Only for a slot no table key points at (free or quarantined
    /// past its grace period), so the BPF program does not read it meanwhile.
    pub fn write(&self, slot: u32, v: RawSlot) {
        // SAFETY: in bounds; no concurrent reader (see above).
        unsafe { std::ptr::write_volatile(self.at(slot), v) };
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

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}
