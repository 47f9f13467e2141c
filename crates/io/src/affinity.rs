//! Which cores a thread may run on (sched_setaffinity / sched_getaffinity), the knob
//! that consolidates workers onto fewer cores so that the others stay idle.

use crate::sys::check;
use std::io;

/// Largest core number handled (the size of the kernel's default `cpu_set_t`).
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// Lets thread `tid` (0 = the calling thread) run only on `cpus`.
pub fn set_affinity(tid: u32, cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= MAX_CPUS) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cpu list {cpus:?}: need 1 or more cores below {MAX_CPUS}"),
        ));
    }
    // SAFETY: cpu_set_t is plain old data; the CPU_* helpers stay inside it (checked above).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: passes a live cpu_set_t and its size.
    check(unsafe {
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    })
    .map(|_| ())
    .map_err(|e| io::Error::new(e.kind(), format!("sched_setaffinity({tid}, {cpus:?}): {e}")))
}

/// The cores thread `tid` (0 = the calling thread) may run on, ascending.
pub fn affinity(tid: u32) -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live cpu_set_t and its size.
    check(unsafe {
        libc::sched_getaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    })
    .map_err(|e| io::Error::new(e.kind(), format!("sched_getaffinity({tid}): {e}")))?;
    // SAFETY: every index is below CPU_SETSIZE.
    Ok((0..MAX_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Cores this process may use (its own affinity at the time of the call).
pub fn usable_cpus() -> io::Result<Vec<usize>> {
    affinity(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_core_reads_back_that_core() {
        let all = usable_cpus().unwrap();
        assert!(!all.is_empty());
        let first = all[0];
        let got = std::thread::spawn(move || {
            let tid = crate::cpu::gettid();
            set_affinity(tid, &[first]).unwrap();
            affinity(tid).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(got, vec![first]);
        // The test thread itself is unaffected.
        assert_eq!(usable_cpus().unwrap(), all);
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(set_affinity(0, &[]).is_err());
        assert!(set_affinity(0, &[MAX_CPUS]).is_err());
        assert!(affinity(u32::MAX / 2).is_err());
    }
}
