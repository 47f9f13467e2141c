//! systemd's readiness protocol (sd_notify(3)): a service started with `Type=notify`
//! tells the service manager it is ready by sending `READY=1` in a datagram to the Unix
//! socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
//! Without that variable (not started by systemd) nothing is sent.

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
    fn rejects_relative_names() {
        let e = send("relative.sock", "READY=1\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
