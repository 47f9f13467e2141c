//! Ctrl-C / SIGTERM as a flag, so long-running drivers (demo, benchmarks) stop their
//! traffic and tear the testbed down instead of dying with namespaces left behind.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set the stop flag instead of killing the process.
pub fn install() {
    let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
}

/// Whether SIGINT/SIGTERM arrived since [`install`].
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_sets_the_flag() {
        install();
        assert!(!requested());
        // SAFETY: raise(3) delivers SIGTERM to this thread, where our handler runs.
        unsafe { libc::raise(libc::SIGTERM) };
        assert!(requested());
        STOP.store(false, Ordering::Relaxed);
    }
}
