//! Poll modes (busy, interrupt, adaptive) and the blocking primitives they use:
//! poll(2) over the ports plus an eventfd that wakes a blocked worker for control work.

use crate::sys::{check, owned};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::str::FromStr;
use std::time::Duration;

/// How a worker waits for packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin on non-blocking receives: lowest latency, always 100 % of a core.
    Busy,
    /// Block in poll(2) whenever a pass over the ports finds nothing.
    Interrupt,
    /// Spin while traffic flows; after [`ADAPTIVE_SPIN`] without a packet, block in poll(2).
    Adaptive,
}

/// How long an adaptive worker keeps spinning after the last packet before it blocks.
pub const ADAPTIVE_SPIN: Duration = Duration::from_micros(200);

impl PollMode {
    /// Stable lowercase name (config files, stats JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            PollMode::Busy => "busy",
            PollMode::Interrupt => "interrupt",
            PollMode::Adaptive => "adaptive",
        }
    }
}

impl FromStr for PollMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "busy" => Ok(PollMode::Busy),
            "interrupt" => Ok(PollMode::Interrupt),
            "adaptive" => Ok(PollMode::Adaptive),
            _ => Err(format!(
                "unknown poll mode `{s}` (expected busy, interrupt or adaptive)"
            )),
        }
    }
}

/// An eventfd that another thread writes to wake a worker blocked in [`Waiter::wait`].
#[derive(Debug)]
pub struct Notifier {
    fd: OwnedFd,
}

impl Notifier {
    /// Creates a non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain eventfd(2) call.
        let fd = owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        Ok(Self { fd })
    }

    /// Adopts an eventfd received from another process (e.g. over `SCM_RIGHTS`), after
    /// checking that it is one, and makes it non-blocking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor is {}, not an eventfd", link.display()),
            ));
        }
        // SAFETY: valid fd; F_GETFL/F_SETFL take and return plain flags.
        unsafe {
            let fl = check(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
            check(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_SETFL,
                fl | libc::O_NONBLOCK,
            ))?;
        }
        Ok(Self { fd })
    }

    /// The descriptor, to pass to another process.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Makes the descriptor readable (wakes the waiter). Safe to call from any thread.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64. A full counter (EAGAIN) already means
        // "readable", which is all a notification needs.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the descriptor to not-readable.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN means it was already clear.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor, for a [`Waiter`].
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Blocks until one of a fixed set of descriptors is readable or a timeout passes.
#[derive(Debug)]
pub struct Waiter {
    fds: Vec<libc::pollfd>,
}

impl Waiter {
    /// Watches `fds` for readability.
    pub fn new(fds: &[RawFd]) -> Self {
        Self {
            fds: fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// Waits until a descriptor is readable or `timeout` passes; returns whether one is.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: passes the live pollfd array and its length.
        match check(unsafe {
            libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms)
        }) {
            Ok(n) => Ok(n > 0),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether descriptor `i` (in the order given to [`Waiter::new`]) was readable, or
    /// hung up, at the last [`Waiter::wait`]: a worker serving many sockets reads only
    /// those.
    pub fn ready(&self, i: usize) -> bool {
        self.fds
            .get(i)
            .is_some_and(|p| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn poll_mode_names_round_trip() {
        for m in [PollMode::Busy, PollMode::Interrupt, PollMode::Adaptive] {
            assert_eq!(m.as_str().parse::<PollMode>().unwrap(), m);
        }
        assert!("spin".parse::<PollMode>().unwrap_err().contains("spin"));
    }

    #[test]
    fn notifier_wakes_waiter_and_clears() {
        let n = Notifier::new().unwrap();
        let mut w = Waiter::new(&[n.fd()]);
        assert!(!w.wait(Duration::ZERO).unwrap());
        n.notify();
        n.notify();
        assert!(w.wait(Duration::from_secs(5)).unwrap());
        assert!(w.ready(0));
        let dup = Notifier::from_fd(n.as_fd().try_clone_to_owned().unwrap()).unwrap();
        dup.clear();
        assert!(!w.wait(Duration::ZERO).unwrap());
        assert!(!w.ready(0) && !w.ready(9));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(Notifier::from_fd(a.into()).is_err());
        n.clear();
        assert!(!w.wait(Duration::ZERO).unwrap());
    }

    #[test]
    fn waiter_blocks_until_notified_from_another_thread() {
        let n = std::sync::Arc::new(Notifier::new().unwrap());
        let mut w = Waiter::new(&[n.fd()]);
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.notify());
        let start = Instant::now();
        assert!(w.wait(Duration::from_secs(10)).unwrap());
        assert!(start.elapsed() < Duration::from_secs(10));
        t.join().unwrap();
    }
}
