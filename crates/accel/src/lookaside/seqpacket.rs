//! The unix SOCK_SEQPACKET socket both sides of the lookaside control channel open:
//! the device binds it, clients connect to it. One place builds the address and the
//! socket so both sides agree on them.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::AccelError;

/// The `sockaddr_un` of `path`, or an error when the path does not fit.
pub(super) fn address(path: &Path) -> Result<libc::sockaddr_un, AccelError> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(AccelError::BadArgument(format!(
            "socket path {} is too long",
            path.display()
        )));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(addr)
}

/// A fresh close-on-exec SOCK_SEQPACKET unix socket.
pub(super) fn socket() -> Result<OwnedFd, AccelError> {
    // SAFETY: plain socket call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(AccelError::last_os("socket"));
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
