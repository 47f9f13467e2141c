//! Shared-memory mappings: sealed memfd regions the device creates and passes to
//! clients. The seals (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) make the size final,
//! so no process holding the fd can `ftruncate` it under another's mapping (which would
//! turn that process's next access into SIGBUS); the receiving side refuses an fd that
//! is not sealed so or not exactly the expected size.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::AccelError;

/// The seals every shared region carries: its size can never change again.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A `MAP_SHARED` mapping, unmapped on drop.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access through it goes through
// atomics or through buffers with a single owner (see `Buf`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: i32, len: usize) -> Result<Mapping, AccelError> {
        let flags = if fd < 0 {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a fresh mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AccelError::last_os(format!("mmap {len} bytes")));
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// Anonymous shared memory (for tests of buffer pools).
    #[cfg(test)]
    pub(crate) fn anonymous(len: usize) -> Result<Mapping, AccelError> {
        Self::map(-1, len)
    }

    /// A new sealed memfd of `len` bytes and its mapping.
    pub(crate) fn memfd(name: &CStr, len: usize) -> Result<(OwnedFd, Mapping), AccelError> {
        // SAFETY: name is a valid C string; the result is checked.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(AccelError::last_os("memfd_create"));
        }
        // SAFETY: fd was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: valid fd; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(AccelError::last_os("ftruncate memfd"));
        }
        // SAFETY: valid fd and seal flags; the result is checked.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
            return Err(AccelError::last_os("seal memfd"));
        }
        let m = Self::map(fd.as_raw_fd(), len)?;
        Ok((fd, m))
    }

    /// Maps a received memfd after checking that it is sealed against resizing and is
    /// exactly `len` bytes.
    pub(crate) fn from_sealed_fd(fd: &OwnedFd, len: usize) -> Result<Mapping, AccelError> {
        // SAFETY: valid fd; F_GET_SEALS returns flags or -1.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & SEALS != SEALS {
            return Err(AccelError::BadArgument(
                "shared region is not a memfd sealed against shrinking, growing and new seals"
                    .into(),
            ));
        }
        // SAFETY: stat is plain data filled by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and pointer; the result is checked.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(AccelError::last_os("fstat shared region"));
        }
        if st.st_size as u64 != len as u64 {
            return Err(AccelError::BadArgument(format!(
                "shared region is {} bytes, expected {len}",
                st.st_size
            )));
        }
        Self::map(fd.as_raw_fd(), len)
    }

    /// First byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_shared_between_mappings() {
        let (fd, a) = Mapping::memfd(c"nfx-test", 8192).unwrap();
        let b = Mapping::from_sealed_fd(&fd, 8192).unwrap();
        // SAFETY: both mappings are 8192 bytes of the same memfd.
        unsafe {
            *a.ptr().add(100) = 42;
            assert_eq!(*b.ptr().add(100), 42);
        }
        assert!(Mapping::from_sealed_fd(&fd, 1 << 20).is_err());
        assert!(Mapping::from_sealed_fd(&fd, 4096).is_err());
    }

    #[test]
    fn sealed_regions_cannot_be_resized_and_unsealed_ones_are_refused() {
        let (fd, _m) = Mapping::memfd(c"nfx-test", 8192).unwrap();
        // SAFETY: valid fd; the calls are expected to fail.
        unsafe {
            assert_ne!(libc::ftruncate(fd.as_raw_fd(), 0), 0);
            assert_ne!(libc::ftruncate(fd.as_raw_fd(), 1 << 20), 0);
            assert_ne!(
                libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE),
                0
            );
        }
        // SAFETY: a plain memfd without seals, owned here.
        let plain = unsafe {
            OwnedFd::from_raw_fd(libc::memfd_create(c"nfx-plain".as_ptr(), libc::MFD_CLOEXEC))
        };
        // SAFETY: valid fd.
        assert_eq!(unsafe { libc::ftruncate(plain.as_raw_fd(), 8192) }, 0);
        assert!(Mapping::from_sealed_fd(&plain, 8192).is_err());
    }
}
