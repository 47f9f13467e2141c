//! CPU use during a run, read from the kernel: system-wide busy jiffies from
//! `/proc/stat` and per-process utime+stime from `/proc/<pid>/stat`.

use anyhow::{bail, Context};
use std::time::Instant;

/// Clock ticks per second of the jiffy counters.
fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Busy and total jiffies from the aggregate `cpu` line of `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> anyhow::Result<(u64, u64)> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("/proc/stat has no aggregate cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().context("bad /proc/stat field"))
        .collect::<anyhow::Result<_>>()?;
    if v.len() < 4 {
        bail!("/proc/stat cpu line too short");
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice] — guest time
    // is already inside user/nice.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

/// utime+stime (jiffies) from `/proc/<pid>/stat` text (fields 14 and 15, counted
/// after the parenthesised command name, which may contain spaces).
pub fn parse_pid_stat(text: &str) -> anyhow::Result<u64> {
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .context("malformed /proc/<pid>/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14 → index 11.
    let ut: u64 = f.get(11).context("no utime")?.parse()?;
    let st: u64 = f.get(12).context("no stime")?.parse()?;
    Ok(ut + st)
}

/// A start point for measuring system-wide CPU cores used.
pub struct SystemCpu {
    busy: u64,
    at: Instant,
}

impl SystemCpu {
    /// Reads the counters now.
    pub fn start() -> anyhow::Result<Self> {
        let (busy, _) = parse_proc_stat(&std::fs::read_to_string("/proc/stat")?)?;
        Ok(Self {
            busy,
            at: Instant::now(),
        })
    }

    /// Cores busy on average since [`SystemCpu::start`] (e.g. 1.5 = one and a half cores).
    pub fn cores(&self) -> anyhow::Result<f64> {
        let (busy, _) = parse_proc_stat(&std::fs::read_to_string("/proc/stat")?)?;
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
    parse_pid_stat(&std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let t = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_proc_stat(t).unwrap(), (160, 1180));
        assert!(parse_proc_stat("intr 1 2").is_err());
        assert!(parse_proc_stat("cpu  1 x 3 4").is_err());
    }

    #[test]
    fn pid_stat_handles_spaces_in_comm() {
        let t = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 17 4 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_pid_stat(t).unwrap(), 21);
        assert!(parse_pid_stat("42 (x) S 1").is_err());
    }

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
