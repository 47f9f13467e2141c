//! The unix SOCK_SEQPACKET socket both sides of the lookaside control channel open:
//! the device binds it, clients connect to it. One place builds the address and the
//! socket so both sides agree on them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::AccelError;

/// The `sockaddr_un` of `path`, or an error when the path does not fit.
fn address(path: &Path) -> Result<libc::sockaddr_un, AccelError> {
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
fn socket() -> Result<OwnedFd, AccelError> {
    // SAFETY: plain socket call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(AccelError::last_os("socket"));
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A fresh socket on which `call` (`bind` or `connect`) was made with `path`'s address;
/// an OS error of the call goes through `fail`.
fn socket_at(
    path: &Path,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
    fail: impl FnOnce(std::io::Error) -> AccelError,
) -> Result<OwnedFd, AccelError> {
    let addr = address(path)?;
    let fd = socket()?;
    // SAFETY: valid fd and address of the stated length.
    let r = unsafe {
        call(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(fail(std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// A socket bound to `path` (not yet listening).
pub(super) fn bind(path: &Path) -> Result<OwnedFd, AccelError> {
    socket_at(path, libc::bind, |source| AccelError::Io {
        context: format!("bind {}", path.display()),
        source,
    })
}

/// A socket connected to `path`; `DeviceGone` when nothing listens there.
pub(super) fn connect(path: &Path) -> Result<OwnedFd, AccelError> {
    socket_at(path, libc::connect, |e| {
        AccelError::DeviceGone(format!("connect {}: {e}", path.display()))
    })
}
