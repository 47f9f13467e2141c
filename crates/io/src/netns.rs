//! Entering a named network namespace (`ip netns` names), so that a dataplane started
//! from the root namespace can open ports on interfaces inside a testbed host.

use crate::sys::{check, owned};
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

/// Path of the namespace handle: `/run/netns/<name>`, or `name` itself if it is a path.
pub fn netns_path(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("/run/netns/{name}")
    }
}

/// Moves the calling thread into network namespace `name`. Threads spawned afterwards
/// start in it too; sockets opened afterwards belong to it for their whole life.
pub fn enter_netns(name: &str) -> io::Result<()> {
    let path = netns_path(name);
    let c = CString::new(path.clone()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("netns name `{name}` has a NUL"),
        )
    })?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let fd = owned(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })
        .map_err(|e| io::Error::new(e.kind(), format!("opening network namespace {path}: {e}")))?;
    // SAFETY: setns on a namespace descriptor we own.
    check(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("entering network namespace {path} (needs root): {e}"),
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_run_netns() {
        assert_eq!(netns_path("nfx-edge"), "/run/netns/nfx-edge");
        assert_eq!(netns_path("/proc/1/ns/net"), "/proc/1/ns/net");
    }

    #[test]
    fn missing_namespace_is_a_clear_error() {
        let err = std::thread::spawn(|| enter_netns("nfx-no-such-namespace-xyz"))
            .join()
            .unwrap()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("/run/netns/nfx-no-such-namespace-xyz"),
            "{err}"
        );
    }
}
