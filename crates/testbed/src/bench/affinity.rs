//! CPU affinity of threads and processes (sched_getaffinity/sched_setaffinity), for
//! keeping the generator and the device under test on different CPUs during a flood.

//! The system calls live in `nfx_io::affinity`.

use anyhow::Context;

/// CPUs the calling thread may run on, ascending.
pub fn allowed() -> anyhow::Result<Vec<usize>> {
    Ok(nfx_io::affinity::affinity(0)?)
}

/// Restricts thread `tid` (0 = the calling thread) to `cpus`.
pub fn pin(tid: i32, cpus: &[usize]) -> anyhow::Result<()> {
    let tid = u32::try_from(tid).with_context(|| format!("thread id {tid}"))?;
    Ok(nfx_io::affinity::set_affinity(tid, cpus)?)
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
