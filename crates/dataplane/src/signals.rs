//! SIGINT/SIGTERM handling for `nfx run` without async handlers: the signals are blocked
//! in the main thread before any other thread exists (so every thread inherits the
//! mask) and collected synchronously with sigtimedwait(2).

use std::io;
use std::time::Duration;

/// The termination signals, blocked for the whole process and waited for explicitly.
pub struct TerminationSignals {
    set: libc::sigset_t,
}

impl TerminationSignals {
    /// Blocks SIGINT and SIGTERM in the calling thread. Call before spawning threads.
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigset_t is plain old data initialised by sigemptyset/sigaddset; the
        // mask change affects only the calling thread (and threads it spawns later).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(Self { set })
        }
    }

    /// Waits up to `timeout` for SIGINT or SIGTERM; returns the signal number if one came.
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // SAFETY: passes the live set and timespec; no siginfo is requested.
        let sig = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (sig > 0).then_some(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_sigterm_is_collected_not_fatal() {
        std::thread::spawn(|| {
            let s = TerminationSignals::block().unwrap();
            assert_eq!(s.wait(Duration::from_millis(1)), None);
            // SAFETY: sends SIGTERM to this very thread, where it is blocked.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGTERM) };
            assert_eq!(s.wait(Duration::from_secs(5)), Some(libc::SIGTERM));
        })
        .join()
        .unwrap();
    }
}
