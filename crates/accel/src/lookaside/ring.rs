//! Layout of a queue pair's shared region (one per client, in a sealed memfd).
//!
//! ```text
//! 0      header, one 64-byte line per field or group (who writes it):
//!          0 magic (device)            64 sq_tail (client)        128 sq_done (device)
//!        192 undo seq/slot/len (device) 256 revoked (client)      320 cq_want (client)
//!        384 cq_bell futex (device)    448 claim (device)         512 heartbeat (device)
//!        576 device sleeping (device)  640 revoke ack (device)
//! 4096   submission entries: ring_size × 64 B; the device writes each entry's status
//!        and advances sq_done, so completions are in submission order by construction
//! ...    device times: ring_size × u32, the device's own processing time of each entry
//!        (ns), written with its status
//! ...    undo area (one slot): the device copies a buffer here before working on it in
//!        place, so a client can restore it if the device dies mid-operation
//! ...    data slots: slot_count × slot_size (the zero-copy buffer pool)
//! ```
//!
//! Neither side trusts what the other writes: the device keeps its own count of
//! completed entries and checks every entry it copies out; the client clamps what it
//! reads. The fence on failover: before each entry the device publishes `claim = seq + 1`
//! and then reads `revoked` (both sequentially consistent); a client that sets `revoked`
//! and then reads `claim` knows that the device will never start an entry at or past
//! that claim, so at most one entry (claimed, not completed) can still be written, and
//! the device stores `revoke_ack` once it has stopped for good.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Identifies a region laid out by this code.
pub(crate) const MAGIC: u64 = 0x6e66_782d_6163_6333; // "nfx-acc3"
const HEADER: usize = 4096;
/// Bytes per submission entry.
pub(crate) const ENTRY: usize = 64;
const PAGE: usize = 4096;

fn page_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// One submission entry as it sits in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct SqEntry {
    pub seq: u64,
    pub session: u32,
    pub slot: u32,
    pub len: u32,
    pub aad_off: u32,
    pub aad_len: u32,
    pub data_off: u32,
    pub data_len: u32,
    pub tag_off: u32,
    pub status: u32,
    pub iv_len: u8,
    pub pad: [u8; 3],
    pub iv: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<SqEntry>() == ENTRY);

/// Sizes of one queue pair's region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Entries in the submission ring (a power of two).
    pub ring_size: u32,
    /// Zero-copy buffer slots.
    pub slot_count: u32,
    /// Bytes per slot.
    pub slot_size: u32,
}

impl Geometry {
    /// Offset of the device-time array (one u32 per ring entry).
    fn times_off(&self) -> usize {
        HEADER + self.ring_size as usize * ENTRY
    }

    /// Offset of the undo area.
    pub(crate) fn undo_off(&self) -> usize {
        page_up(self.times_off() + self.ring_size as usize * 4)
    }

    /// Offset of slot 0.
    pub(crate) fn slots_off(&self) -> usize {
        self.undo_off() + page_up(self.slot_size as usize)
    }

    /// Total region size.
    pub(crate) fn total(&self) -> usize {
        self.slots_off() + self.slot_count as usize * self.slot_size as usize
    }

    /// Whether the sizes are sane (power-of-two ring, bounded region).
    pub(crate) fn valid(&self) -> bool {
        self.ring_size.is_power_of_two()
            && self.ring_size <= 4096
            && self.slot_count >= 1
            && self.slot_count <= 65536
            && (64..=1 << 20).contains(&self.slot_size)
            && self.total() <= 1 << 30
    }
}

/// Typed access to a queue pair's header and entries at `base`.
#[derive(Clone, Copy)]
pub(crate) struct QpView {
    base: *mut u8,
    geo: Geometry,
}

// SAFETY: a view is a pointer into a shared mapping kept alive by its owner; all
// cross-process fields are atomics.
unsafe impl Send for QpView {}

impl QpView {
    /// A view of a mapping of at least `geo.total()` bytes.
    pub(crate) fn new(base: *mut u8, geo: Geometry) -> QpView {
        QpView { base, geo }
    }

    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: offsets inside the 4 KiB header, 8-byte aligned in a page-aligned map.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `atomic_u64`, 4-byte aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// Magic number word (written by the device at set-up).
    pub(crate) fn magic(&self) -> &AtomicU64 {
        self.atomic_u64(0)
    }
    /// Next sequence number the client will write (client → device).
    pub(crate) fn sq_tail(&self) -> &AtomicU64 {
        self.atomic_u64(64)
    }
    /// Number of entries the device has completed (device → client).
    pub(crate) fn sq_done(&self) -> &AtomicU64 {
        self.atomic_u64(128)
    }
    /// `seq + 1` of the entry whose pre-image is in the undo area, 0 for none.
    pub(crate) fn undo_seq(&self) -> &AtomicU64 {
        self.atomic_u64(192)
    }
    /// Slot of the undo pre-image.
    pub(crate) fn undo_slot(&self) -> &AtomicU32 {
        self.atomic_u32(200)
    }
    /// Length of the undo pre-image.
    pub(crate) fn undo_len(&self) -> &AtomicU32 {
        self.atomic_u32(204)
    }
    /// Set by a client that has given up on the device: the device must stop.
    pub(crate) fn revoked(&self) -> &AtomicU32 {
        self.atomic_u32(256)
    }
    /// Non-zero while the client is (about to be) asleep on `cq_bell`: the `sq_done`
    /// value it waits for. The device clears it when it wakes the client.
    pub(crate) fn cq_want(&self) -> &AtomicU64 {
        self.atomic_u64(320)
    }
    /// Futex word the device bumps after completing entries while `cq_waiting` is set.
    pub(crate) fn cq_bell(&self) -> &AtomicU32 {
        self.atomic_u32(384)
    }
    /// `seq + 1` of the last entry the device started (the failover fence).
    pub(crate) fn claim(&self) -> &AtomicU64 {
        self.atomic_u64(448)
    }
    /// Bumped by the device on every pass of its loop while it serves this queue pair.
    pub(crate) fn heartbeat(&self) -> &AtomicU64 {
        self.atomic_u64(512)
    }
    /// 1 while the device is (about to be) asleep: the client then rings its doorbell.
    pub(crate) fn dev_sleeping(&self) -> &AtomicU32 {
        self.atomic_u32(576)
    }
    /// Set by the device once it has seen `revoked` and stopped touching the region.
    pub(crate) fn revoke_ack(&self) -> &AtomicU32 {
        self.atomic_u32(640)
    }

    fn entry_ptr(&self, seq: u64) -> *mut SqEntry {
        let i = (seq % self.geo.ring_size as u64) as usize;
        // SAFETY: i < ring_size, entries lie after the header.
        unsafe { self.base.add(HEADER + i * ENTRY).cast() }
    }

    /// Copies entry `seq` out of shared memory.
    pub(crate) fn read_entry(&self, seq: u64) -> SqEntry {
        // SAFETY: in-bounds, aligned; a volatile read because the other process writes it.
        unsafe { std::ptr::read_volatile(self.entry_ptr(seq)) }
    }

    /// Writes entry `seq`.
    pub(crate) fn write_entry(&self, seq: u64, e: &SqEntry) {
        // SAFETY: in-bounds, aligned; published by a later release store of sq_tail.
        unsafe { std::ptr::write_volatile(self.entry_ptr(seq), *e) }
    }

    fn time_ptr(&self, seq: u64) -> *mut u32 {
        let i = (seq % self.geo.ring_size as u64) as usize;
        // SAFETY: i < ring_size, the time array lies after the entries, 4-byte aligned.
        unsafe { self.base.add(self.geo.times_off() + i * 4).cast() }
    }

    /// Reads the device's processing time of entry `seq`, ns (valid once it completed).
    pub(crate) fn read_device_ns(&self, seq: u64) -> u32 {
        // SAFETY: in-bounds, aligned; published by the device's release store of sq_done.
        unsafe { std::ptr::read_volatile(self.time_ptr(seq)) }
    }

    /// Writes the processing time of entry `seq` (device side, before its status).
    pub(crate) fn write_device_ns(&self, seq: u64, ns: u32) {
        // SAFETY: as in `read_device_ns`.
        unsafe { std::ptr::write_volatile(self.time_ptr(seq), ns) }
    }

    /// Reads the status the device wrote into entry `seq`.
    pub(crate) fn read_status(&self, seq: u64) -> u32 {
        // SAFETY: field of an in-bounds entry; ordered by the acquire load of sq_done.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.entry_ptr(seq)).status)) }
    }

    /// Writes the status of entry `seq` (device side).
    pub(crate) fn write_status(&self, seq: u64, status: u32) {
        // SAFETY: as in `read_status`; published by the release store of sq_done.
        unsafe {
            std::ptr::write_volatile(
                std::ptr::addr_of_mut!((*self.entry_ptr(seq)).status),
                status,
            )
        }
    }

    /// The undo area.
    pub(crate) fn undo_ptr(&self) -> *mut u8 {
        // SAFETY: the undo area lies inside the region.
        unsafe { self.base.add(self.geo.undo_off()) }
    }
}

/// Waits on a shared (cross-process) futex word while it equals `val`, up to `timeout`.
pub(crate) fn futex_wait(word: &AtomicU32, val: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid futex word and timespec; spurious returns are handled by callers.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes one waiter of a shared futex word.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: valid futex word.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_offsets_are_page_aligned() {
        let g = Geometry {
            ring_size: 256,
            slot_count: 8,
            slot_size: 9300,
        };
        assert!(g.valid());
        assert_eq!(g.undo_off() % PAGE, 0);
        assert_eq!(g.slots_off() % PAGE, 0);
        assert!(g.slots_off() >= g.undo_off() + 9300);
        assert!(!Geometry {
            ring_size: 100,
            ..g
        }
        .valid());
    }
}
