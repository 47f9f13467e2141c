//! CPU use during a run, read from the kernel (parsers in `nfx_io::cpu`): system-wide busy jiffies from
//! `/proc/stat` and per-process utime+stime from `/proc/<pid>/stat`.

use anyhow::Context;
use nfx_io::cpu::{parse_proc_stat, parse_task_stat, TaskStat};
use std::time::Instant;

/// Clock ticks per second of the jiffy counters.
fn clk_tck() -> f64 {
    nfx_io::cpu::clk_tck() as f64
}

/// Busy jiffies of the whole machine (`/proc/stat`).
fn read_busy() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/stat")?;
    Ok(parse_proc_stat(&text)?.busy)
}

/// A start point for measuring system-wide CPU cores used.
pub struct SystemCpu {
    busy: u64,
    at: Instant,
}

impl SystemCpu {
    /// Reads the counters now.
    pub fn start() -> anyhow::Result<Self> {
        let busy = read_busy()?;
        Ok(Self {
            busy,
            at: Instant::now(),
        })
    }

    /// Cores busy on average since [`SystemCpu::start`] (e.g. 1.5 = one and a half cores).
    pub fn cores(&self) -> anyhow::Result<f64> {
        let busy = read_busy()?;
        let secs = self.at.elapsed().as_secs_f64().max(1e-3);
        Ok((busy.saturating_sub(self.busy)) as f64 / clk_tck() / secs)
    }
}

/// A start point for measuring one process's CPU use (all its threads).
pub struct ProcessCpu {
    pid: u32,
    start: TaskStat,
    at: Instant,
}

/// CPU seconds a process spent in user and in kernel mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct UserSys {
    /// User-mode seconds.
    pub user_s: f64,
    /// Kernel-mode seconds (system calls, and the softirq work charged to the process).
    pub sys_s: f64,
}

impl UserSys {
    /// The CPU time between two readings of the same process's counters.
    pub fn between(from: &TaskStat, to: &TaskStat) -> Self {
        Self {
            user_s: to.utime.saturating_sub(from.utime) as f64 / clk_tck(),
            sys_s: to.stime.saturating_sub(from.stime) as f64 / clk_tck(),
        }
    }
}

impl ProcessCpu {
    /// Reads the counters of `pid` now.
    pub fn start(pid: u32) -> anyhow::Result<Self> {
        Ok(Self {
            pid,
            start: read_pid(pid)?,
            at: Instant::now(),
        })
    }

    /// Cores used by the process on average since [`ProcessCpu::start`].
    pub fn cores(&self) -> anyhow::Result<f64> {
        let u = self.used()?;
        let secs = self.at.elapsed().as_secs_f64().max(1e-3);
        Ok((u.user_s + u.sys_s) / secs)
    }

    /// User and kernel CPU seconds of the process since [`ProcessCpu::start`].
    pub fn used(&self) -> anyhow::Result<UserSys> {
        Ok(UserSys::between(&self.start, &read_pid(self.pid)?))
    }
}

fn read_pid(pid: u32) -> anyhow::Result<TaskStat> {
    let p = format!("/proc/{pid}/stat");
    Ok(parse_task_stat(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_cpu_rises_when_spinning() {
        let p = ProcessCpu::start(std::process::id()).unwrap();
        let s = SystemCpu::start().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(p.cores().unwrap() > 0.0);
        assert!(p.used().unwrap().user_s > 0.0);
        assert!(s.cores().unwrap() > 0.0);
    }
}
