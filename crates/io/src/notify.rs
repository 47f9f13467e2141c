//! systemd's readiness protocol (sd_notify(3)): a service started with `Type=notify`
//! tells the service manager it is ready by sending `READY=1` in a datagram to the Unix
//! socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
//! Without that variable (not started by systemd) nothing is sent. [`ReadyListener`] is
//! the supervisor's side, for a parent that starts such a process itself (the host
//! agent's `nfx run` workers): it is told the moment the child is ready instead of
//! probing for it.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Tells systemd the service is ready, if it asked (`$NOTIFY_SOCKET` set). Returns
/// whether a notification was sent.
pub fn ready() -> io::Result<bool> {
    match std::env::var_os(NOTIFY_SOCKET) {
        Some(s) if !s.is_empty() => {
            send(&s.to_string_lossy(), "READY=1\n")?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the notify socket `socket`.
pub fn send(socket: &str, state: &str) -> io::Result<()> {
    let addr = address(socket)?;
    let sock = UnixDatagram::unbound()?;
    let n = sock.send_to_addr(state.as_bytes(), &addr)?;
    if n != state.len() {
        return Err(io::Error::other("short write to the notify socket"));
    }
    Ok(())
}

/// The supervisor's end of the readiness protocol: a datagram socket at a path, to be
/// handed to a child as its `$NOTIFY_SOCKET` ([`ReadyListener::path`]). The socket file
/// is removed on drop.
#[derive(Debug)]
pub struct ReadyListener {
    socket: UnixDatagram,
    path: std::path::PathBuf,
}

impl ReadyListener {
    /// Binds `path` (an absolute path short enough for a Unix socket address), replacing
    /// a file left there.
    pub fn bind(path: &std::path::Path) -> io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path)?;
        Ok(ReadyListener {
            socket,
            path: path.to_path_buf(),
        })
    }

    /// The value for the child's `$NOTIFY_SOCKET`.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Waits up to `timeout` for a notification; true once one says `READY=1` (other
    /// states, e.g. `STATUS=...`, are read and skipped).
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.socket.set_read_timeout(Some(left))?;
            match self.socket.recv(&mut buf) {
                Ok(n) if says_ready(&buf[..n]) => return Ok(true),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(false)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for ReadyListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether a notification's `KEY=VALUE` lines include `READY=1`.
fn says_ready(state: &[u8]) -> bool {
    state.split(|b| *b == b'\n').any(|l| l == b"READY=1")
}

/// `$NOTIFY_SOCKET` as an address: an absolute path, or `@name` in the abstract namespace.
fn address(socket: &str) -> io::Result<SocketAddr> {
    if let Some(name) = socket.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
    } else if socket.starts_with('/') {
        SocketAddr::from_pathname(socket)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{NOTIFY_SOCKET}={socket:?}: neither an absolute path nor @name"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_ready_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("nfx-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("nfx-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        send(&format!("@{name}"), "READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }

    #[test]
    fn a_listener_sees_ready_and_times_out_without_it() {
        let dir = std::env::temp_dir().join(format!("nfx-notify-l-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let l = ReadyListener::bind(&dir.join("ready.sock")).unwrap();
        let t = std::time::Instant::now();
        assert!(!l.wait(std::time::Duration::from_millis(30)).unwrap());
        assert!(t.elapsed() >= std::time::Duration::from_millis(30));
        let to = l.path().to_str().unwrap().to_string();
        send(&to, "STATUS=starting\n").unwrap();
        send(&to, "STATUS=up\nREADY=1\n").unwrap();
        assert!(l.wait(std::time::Duration::from_secs(5)).unwrap());
        let path = l.path().to_path_buf();
        drop(l);
        assert!(!path.exists(), "the socket file goes with the listener");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_relative_names() {
        let e = send("relative.sock", "READY=1\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
