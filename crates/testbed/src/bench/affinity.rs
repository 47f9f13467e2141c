//! CPU affinity of threads and processes (sched_getaffinity/sched_setaffinity), for
//! keeping the generator and the device under test on different CPUs during a flood.

use anyhow::{bail, Context};

/// CPUs the calling thread may run on, ascending.
pub fn allowed() -> anyhow::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; an all-zero set is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live cpu_set_t and its size; 0 = the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    // SAFETY: CPU_ISSET only reads the set; indices stay below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts thread `tid` (0 = the calling thread) to `cpus`.
pub fn pin(tid: i32, cpus: &[usize]) -> anyhow::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        bail!("invalid CPU list {cpus:?}");
    }
    // SAFETY: cpu_set_t is plain old data; an all-zero set is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: passes a live cpu_set_t and its size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("sched_setaffinity of thread {tid} to {cpus:?}"));
    }
    Ok(())
}

/// Restricts every thread of process `pid` to `cpus`.
pub fn pin_process(pid: u32, cpus: &[usize]) -> anyhow::Result<()> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))?;
    for t in tasks {
        let name = t?.file_name();
        if let Some(tid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) {
            pin(tid, cpus).with_context(|| format!("pinning process {pid}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_be_pinned_and_released() {
        let all = allowed().unwrap();
        assert!(!all.is_empty());
        std::thread::spawn(move || {
            pin(0, &all[..1]).unwrap();
            assert_eq!(allowed().unwrap(), all[..1].to_vec());
            pin(0, &all).unwrap();
            assert_eq!(allowed().unwrap(), all);
        })
        .join()
        .unwrap();
        assert!(pin(0, &[]).is_err());
        assert!(pin(0, &[libc::CPU_SETSIZE as usize]).is_err());
        assert!(pin_process(u32::MAX, &[0]).is_err());
    }
}
