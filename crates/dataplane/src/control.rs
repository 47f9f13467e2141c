//! The control socket: a unix stream socket, one JSON request per line, one JSON
//! response per line (`stats`, `reconfigure`, `export_state`, `import_state`, the
//! handoff steps `hold`, `release`, `drain`, `steer`, the live poll-mode change `poll`,
//! and `shutdown`; the protocol and its client are [`nfx_proto`]). Only this user, root and members of the
//! configured `control_group` may connect: the socket file is 0600 (0660 owned by the
//! group) and every connection's peer credentials are checked; refusals are counted in
//! the stats (`control_rejected`).

use crate::runtime::Controller;
use anyhow::{anyhow, Context};
use nfx_io::peer::{restrict_socket, PeerPolicy};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Longest request line accepted: an `import_state` of 4 million NAT mappings (24 B
/// each, base64) fits, and so does a reconfigure with large rule sets.
const MAX_LINE: u64 = 160 << 20;

/// A listening control socket; removed from the filesystem on drop.
pub struct ControlServer {
    path: PathBuf,
    /// A handle on the listening socket, to wake the accept loop on drop even when the
    /// socket file was removed meanwhile (a connect to the path would then fail).
    listener: UnixListener,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (creating its directory, replacing a stale socket) and serves
    /// requests on behalf of `ctl`, one thread per connection, to peers that are this
    /// user, root, or in `group`.
    pub fn start(path: &Path, ctl: Controller, group: Option<u32>) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(anyhow!(
                    "control socket {} is in use by a running instance",
                    path.display()
                ));
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding control socket {}", path.display()))?;
        restrict_socket(path, group)
            .with_context(|| format!("restricting control socket {}", path.display()))?;
        let policy = PeerPolicy { group };
        let shown = path.display().to_string();
        let handle = listener
            .try_clone()
            .context("duplicating the control socket")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nfx-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    if let Err(why) = policy.check(conn.as_fd()) {
                        ctl.count_control_rejected();
                        log::warn!("control socket {shown}: connection refused: {why}");
                        continue;
                    }
                    let ctl = ctl.clone();
                    let _ = std::thread::Builder::new()
                        .name("nfx-control-conn".into())
                        .spawn(move || serve(conn, ctl));
                }
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            listener: handle,
            stop,
            thread: Some(thread),
        })
    }

    /// Where the socket listens.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn serve(conn: UnixStream, ctl: Controller) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn.take(MAX_LINE));
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        reader.get_mut().set_limit(MAX_LINE);
        if line.trim().is_empty() {
            continue;
        }
        // One write per answer, newline included: `writeln!` on the unbuffered stream
        // writes the line and its newline apart, and the client, woken by the first,
        // must wait again for the second.
        let mut resp = ctl.handle_line(line.trim());
        resp.push('\n');
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag: shutting the listening socket down
        // makes a blocked accept(2) return at once.
        // SAFETY: shutdown(2) on a descriptor this server owns.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
