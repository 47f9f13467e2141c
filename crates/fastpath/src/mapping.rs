//! A BPF array map created with BPF_F_MMAPABLE, mapped into this process: the worker
//! reads its counters and flips its control words with atomics, without a syscall.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU64;

/// The mapping of a whole array of `len` elements of `elem` bytes (a multiple of 8,
/// as the kernel lays out mapped arrays).
pub(crate) struct Mapping {
    base: *mut u8,
    elem: usize,
    len: usize,
    map_len: usize,
}

// SAFETY: the mapping is shared memory; `Mapping` only hands out atomics and raw
// pointers whose users uphold their own rules (see `Slots::write`).
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the array map `fd` of `len` elements of `elem` bytes.
    pub fn new(fd: BorrowedFd<'_>, elem: usize, len: usize) -> io::Result<Self> {
        assert!(
            elem.is_multiple_of(8),
            "mapped array elements are 8-byte aligned"
        );
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = (elem * len).div_ceil(page).max(1) * page;
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
            elem,
            len,
            map_len,
        })
    }

    /// The start of element `index`.
    pub fn at(&self, index: u32) -> *mut u8 {
        assert!((index as usize) < self.len, "element {index} out of range");
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.base.add(index as usize * self.elem) }
    }

    /// The u64 at byte `field` of element `index`.
    pub fn word(&self, index: u32, field: usize) -> &AtomicU64 {
        assert!(
            field.is_multiple_of(8) && field + 8 <= self.elem,
            "field {field}"
        );
        // SAFETY: an 8-byte aligned u64 inside the element (checked above); the mapping
        // lives as long as `self`.
        unsafe { &*(self.at(index).add(field).cast::<AtomicU64>()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}
