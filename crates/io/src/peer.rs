//! Local peers of a unix socket: who is on the other end (`SO_PEERCRED`,
//! `SO_PEERGROUPS`), whether a policy (same user, or a configured group) admits them, and
//! whether the directory a socket lives in can be trusted (nobody else can replace the
//! socket with their own).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The credentials the kernel recorded for a unix-socket peer when it connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (in the caller's pid namespace).
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// Reads the peer's credentials of a connected unix socket.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid fd, out-pointer and length.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}

/// Reads the peer's supplementary groups (`SO_PEERGROUPS`, at most 256 are looked at).
pub fn peer_groups(sock: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: valid fd, out-buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(len as usize / 4);
    Ok(groups)
}

/// The calling process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Who may talk to a local endpoint: processes of the same effective user or root, and
/// members (primary or supplementary) of `group` when one is configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerPolicy {
    /// A group whose members are admitted besides the same user.
    pub group: Option<u32>,
}

impl PeerPolicy {
    /// Admits the peer of `sock` or says why not (naming its uid, never anything secret).
    pub fn check(&self, sock: BorrowedFd<'_>) -> Result<PeerCred, String> {
        let cred = peer_cred(sock).map_err(|e| format!("cannot read peer credentials: {e}"))?;
        if cred.uid == euid() || cred.uid == 0 {
            return Ok(cred);
        }
        if let Some(g) = self.group {
            if cred.gid == g || peer_groups(sock).is_ok_and(|gs| gs.contains(&g)) {
                return Ok(cred);
            }
        }
        Err(match self.group {
            Some(g) => format!(
                "peer uid {} (pid {}) is neither this user nor in group {g}",
                cred.uid, cred.pid
            ),
            None => format!("peer uid {} (pid {}) is not this user", cred.uid, cred.pid),
        })
    }
}

/// A group given by gid or by name (looked up in /etc/group).
pub fn group_id(g: &str) -> Result<u32, String> {
    if let Ok(gid) = g.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").map_err(|e| format!("/etc/group: {e}"))?;
    groups
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next() == Some(g)).then(|| f.nth(1)?.parse().ok())?
        })
        .ok_or_else(|| format!("no group `{g}` in /etc/group"))
}

/// Gives a freshly bound socket file its access: mode 0600, or 0660 owned by `group`.
pub fn restrict_socket(path: &Path, group: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some(g) = group {
        std::os::unix::fs::chown(path, None, Some(g))?;
    }
    Ok(())
}

/// Checks that `dir` is a directory that only this user or root can change: owned by
/// the effective user or root, and writable by neither group nor others.
pub fn check_private_dir(dir: &Path) -> Result<(), String> {
    let md = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !md.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if md.uid() != euid() && md.uid() != 0 {
        return Err(format!(
            "{} is owned by uid {}, not by this user or root",
            dir.display(),
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o})",
            dir.display(),
            md.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Validates a unix-socket path against a trusted directory: the path must name a
/// socket (not a symlink) owned by this user or root, lying inside `dir` once every
/// symlink is resolved, and both `dir` and the socket's own directory must pass
/// [`check_private_dir`]. Returns the resolved path.
pub fn validate_socket_path(path: &Path, dir: &Path) -> Result<PathBuf, String> {
    let name = path
        .file_name()
        .filter(|n| *n != OsStr::new(".") && *n != OsStr::new(".."))
        .ok_or_else(|| format!("{} does not name a socket", path.display()))?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let parent = parent
        .canonicalize()
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("socket directory {}: {e}", dir.display()))?;
    if !parent.starts_with(&dir) {
        return Err(format!(
            "{} is outside the socket directory {}",
            path.display(),
            dir.display()
        ));
    }
    check_private_dir(&dir)?;
    check_private_dir(&parent)?;
    let full = parent.join(name);
    let md = std::fs::symlink_metadata(&full).map_err(|e| format!("{}: {e}", full.display()))?;
    if !md.file_type().is_socket() {
        return Err(format!("{} is not a unix socket", full.display()));
    }
    if md.uid() != euid() && md.uid() != 0 {
        return Err(format!(
            "{} is owned by uid {}, not by this user or root",
            full.display(),
            md.uid()
        ));
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn private_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nfx-io-peer-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn a_process_of_the_same_user_is_admitted() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_cred(a.as_fd()).unwrap();
        assert_eq!(c.uid, euid());
        assert_eq!(c.pid, std::process::id() as i32);
        assert!(PeerPolicy::default().check(a.as_fd()).is_ok());
    }

    #[test]
    fn groups_are_found_by_gid_or_name() {
        assert_eq!(group_id("4242"), Ok(4242));
        assert_eq!(group_id("root"), Ok(0));
        assert!(group_id("no-such-group-nfx")
            .unwrap_err()
            .contains("no group"));
    }

    #[test]
    fn socket_paths_outside_or_in_open_directories_are_refused() {
        let d = private_dir("path");
        let sock = d.join("dev.sock");
        let _l = UnixListener::bind(&sock).unwrap();
        assert_eq!(validate_socket_path(&sock, &d).unwrap(), sock);
        // Through a `..` detour that ends inside: still fine; outside: refused.
        let detour = d.join("..").join(d.file_name().unwrap()).join("dev.sock");
        assert!(validate_socket_path(&detour, &d).is_ok());
        let other = private_dir("other");
        assert!(validate_socket_path(&sock, &other)
            .unwrap_err()
            .contains("outside"));
        // A regular file is not a socket; a symlink to the socket is not the socket.
        std::fs::write(d.join("file"), b"x").unwrap();
        assert!(validate_socket_path(&d.join("file"), &d)
            .unwrap_err()
            .contains("not a unix socket"));
        std::os::unix::fs::symlink(&sock, d.join("link")).unwrap();
        assert!(validate_socket_path(&d.join("link"), &d).is_err());
        // A directory others can write to is not trusted.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(validate_socket_path(&sock, &d)
            .unwrap_err()
            .contains("writable by group or others"));
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&other).unwrap();
    }
}
