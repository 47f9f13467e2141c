//! CPU use during a run, read from the kernel (parsers in `nfx_io::cpu`): system-wide busy jiffies from
//! `/proc/stat` and per-process utime+stime from `/proc/<pid>/stat`.

use anyhow::Context;
use nfx_io::cpu::{parse_pid_stat, parse_proc_stat};
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
    jiffies: u64,
    at: Instant,
}

impl ProcessCpu {
    /// Reads the counters of `pid` now.
    pub fn start(pid: u32) -> anyhow::Result<Self> {
        Ok(Self {
            pid,
            jiffies: read_pid(pid)?,
            at: Instant::now(),
        })
    }

    /// Cores used by the process on average since [`ProcessCpu::start`].
    pub fn cores(&self) -> anyhow::Result<f64> {
        let j = read_pid(self.pid)?;
        let secs = self.at.elapsed().as_secs_f64().max(1e-3);
        Ok(j.saturating_sub(self.jiffies) as f64 / clk_tck() / secs)
    }
}

fn read_pid(pid: u32) -> anyhow::Result<u64> {
    let p = format!("/proc/{pid}/stat");
    Ok(parse_pid_stat(
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
        assert!(s.cores().unwrap() > 0.0);
    }
}
