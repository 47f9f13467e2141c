//! Thin, checked wrappers around the few libc calls the ports share (socket options,
//! interface lookups, owned file descriptors).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns a `-1` return into the thread's `errno` as an [`io::Error`].
pub(crate) fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Wraps a freshly created descriptor so that it is closed on every error path.
pub(crate) fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(fd)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(ret).map(|_| ())
}

/// Sets a socket buffer size, forcing past the sysctl limit when allowed (root) and
/// falling back to the ordinary, capped option otherwise.
pub(crate) fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int, bytes: usize) {
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if setsockopt_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        // Best effort: without CAP_NET_ADMIN the kernel caps the size at rmem_max/wmem_max,
        // which only costs throughput, never correctness.
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes);
    }
}

/// Builds an `ifreq` naming `iface`, or an error when the name cannot be one.
pub(crate) fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    let bytes = iface.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{iface}` is not a valid interface name (1..15 bytes, no NUL)"),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

/// `MEMBARRIER_CMD_GLOBAL` (linux/membarrier.h): returns after an RCU grace period.
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// Waits until every kernel receive path that was running when it was called has
/// finished (an RCU grace period, through membarrier(2)). Socket code calls it after
/// changing where frames go (e.g. joining a fanout group) so that a frame already on
/// its way by the old route has landed and can be dealt with.
pub fn rcu_grace_period() -> io::Result<()> {
    // SAFETY: membarrier(MEMBARRIER_CMD_GLOBAL, 0) takes no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("membarrier(MEMBARRIER_CMD_GLOBAL): {e} (nohz_full kernels refuse it)"),
        ));
    }
    Ok(())
}

/// Index of interface `iface` in the calling thread's network namespace.
pub fn ifindex(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name `{iface}` has a NUL"),
        )
    })?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface `{iface}` in this network namespace"),
        ));
    }
    Ok(idx)
}

/// Hardware (MAC) address of interface `iface` in the calling thread's namespace.
pub fn iface_mac(iface: &str) -> io::Result<[u8; 6]> {
    let mut req = ifreq(iface)?;
    // SAFETY: plain datagram socket used only for the ioctl below.
    let sock =
        owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: SIOCGIFHWADDR reads the name from and writes the address into `req`.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })
        .map_err(|e| io::Error::new(e.kind(), format!("reading the MAC of `{iface}`: {e}")))?;
    // SAFETY: the kernel filled `ifru_hwaddr` for SIOCGIFHWADDR.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// Parses `aa:bb:cc:dd:ee:ff` into six bytes.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for m in mac.iter_mut() {
        let p = parts.next().ok_or_else(|| {
            format!("`{s}` is not a MAC address (need 6 hex bytes like 02:00:00:00:00:01)")
        })?;
        if p.len() != 2 {
            return Err(format!(
                "`{s}` is not a MAC address (need 6 hex bytes like 02:00:00:00:00:01)"
            ));
        }
        *m = u8::from_str_radix(p, 16)
            .map_err(|_| format!("`{s}` is not a MAC address (`{p}` is not a hex byte)"))?;
    }
    if parts.next().is_some() {
        return Err(format!("`{s}` is not a MAC address (more than 6 bytes)"));
    }
    Ok(mac)
}

/// Formats six bytes as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    let m = mac;
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip() {
        let mac = parse_mac("02:0a:FF:00:10:9c").unwrap();
        assert_eq!(mac, [2, 0x0a, 0xff, 0, 0x10, 0x9c]);
        assert_eq!(format_mac(&mac), "02:0a:ff:00:10:9c");
    }

    #[test]
    fn bad_macs_are_rejected() {
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "0g:00:00:00:00:01",
            "2:00:00:00:00:01",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_is_found_and_bad_names_fail() {
        assert!(ifindex("lo").unwrap() > 0);
        assert_eq!(iface_mac("lo").unwrap(), [0; 6]);
        assert!(ifindex("nfx-no-such-if").is_err());
        assert!(ifreq("a-name-far-too-long-for-linux").is_err());
        assert!(ifreq("").is_err());
    }
}
