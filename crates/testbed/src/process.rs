//! Running external tools (`ip`, `nft`, `iperf3`, `sockperf`) with bounded time and
//! errors that say which command failed and what it printed.

use anyhow::{bail, Context};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How often a bounded wait checks whether the child has exited.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// Renders a command line for error messages.
fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `args[0] args[1..]`, waits at most `limit`, and returns stdout; a non-zero exit,
/// a timeout or a missing program is an error naming the command and its stderr.
pub fn run(args: &[&str], limit: Duration) -> anyhow::Result<String> {
    let out = run_output(args, limit)?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`run`] but returns the whole output whatever the exit status (still bounded).
pub fn run_output(args: &[&str], limit: Duration) -> anyhow::Result<Output> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let mut cmd = Command::new(prog);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    output_within(cmd, limit)
}

/// Spawns `cmd` with piped stdout/stderr and collects its output, killing it after `limit`.
pub fn output_within(mut cmd: Command, limit: Duration) -> anyhow::Result<Output> {
    let what = describe(&cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{what}` (is it installed? try scripts/deps.sh)"))?;
    let mut guard = ChildGuard::new(child, &what);
    guard.wait_within(limit)?;
    let child = guard.take();
    child
        .wait_with_output()
        .with_context(|| format!("collecting output of `{what}`"))
}

/// A child process that is killed (and reaped) when dropped, so an error or panic in a
/// test or benchmark never leaves a traffic tool running.
pub struct ChildGuard {
    child: Option<Child>,
    what: String,
}

impl ChildGuard {
    /// Wraps an already spawned child; `what` names it in errors.
    pub fn new(child: Child, what: &str) -> Self {
        Self {
            child: Some(child),
            what: what.to_string(),
        }
    }

    /// Spawns `cmd` and guards it.
    pub fn spawn(mut cmd: Command) -> anyhow::Result<Self> {
        let what = describe(&cmd);
        let child = cmd.spawn().with_context(|| {
            format!("cannot start `{what}` (is it installed? try scripts/deps.sh)")
        })?;
        Ok(Self::new(child, &what))
    }

    /// The process id of the child.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Whether the child has already exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// Waits until the child exits or `limit` passes; on timeout the child is killed
    /// and an error returned.
    pub fn wait_within(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().context("child already taken")?;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`{}` did not finish within {:?}; killed", self.what, limit);
            }
            std::thread::sleep(WAIT_POLL);
        }
    }

    /// Like [`ChildGuard::wait_within`], and also returns the child's own CPU time as
    /// the kernel accounted it: `/proc/<pid>/stat` is read once the child has exited
    /// but before it is reaped (`waitid` with `WNOWAIT`), so nothing it ran is missed.
    pub fn wait_within_stat(
        &mut self,
        limit: Duration,
    ) -> anyhow::Result<(std::process::ExitStatus, nfx_io::cpu::TaskStat)> {
        let deadline = Instant::now() + limit;
        let pid = self.id();
        loop {
            // SAFETY: siginfo_t is plain data; waitid only writes into it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waits (without reaping) for our own child only.
            let rc = unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            anyhow::ensure!(
                rc == 0,
                "waitid on `{}`: {}",
                self.what,
                std::io::Error::last_os_error()
            );
            // SAFETY: si_pid is valid for a WEXITED report; zero means none yet.
            if unsafe { info.si_pid() } != 0 {
                let p = format!("/proc/{pid}/stat");
                let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
                let stat = nfx_io::cpu::parse_task_stat(&text)?;
                return Ok((self.wait_within(limit)?, stat));
            }
            if Instant::now() >= deadline {
                let _ = self.wait_within(Duration::ZERO);
                bail!("`{}` did not finish within {:?}; killed", self.what, limit);
            }
            std::thread::sleep(WAIT_POLL);
        }
    }

    /// Sends SIGINT (a graceful stop for tools that print a summary on interrupt) and
    /// waits up to `limit`, then kills.
    pub fn interrupt(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.id() as libc::pid_t;
        if pid > 0 && !self.exited() {
            // SAFETY: kill(2) on our own child's pid; worst case ESRCH if it just exited.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        self.wait_within(limit)
    }

    /// Gives up the guard and returns the child (the caller is now responsible for it).
    pub fn take(&mut self) -> Child {
        self.child.take().expect("ChildGuard::take called twice")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_returns_stdout() {
        let out = run(&["echo", "hello"], Duration::from_secs(5)).unwrap();
        assert_eq!(out.trim(), "hello");
    }

    #[test]
    fn failure_names_command_and_stderr() {
        let err = run(
            &["sh", "-c", "echo boom >&2; exit 3"],
            Duration::from_secs(5),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("sh -c"), "{err}");
        assert!(err.contains("boom"), "{err}");
    }

    #[test]
    fn missing_program_is_an_error() {
        let err = run(&["/nonexistent/nfx-tool"], Duration::from_secs(1)).unwrap_err();
        assert!(format!("{err:#}").contains("cannot start"));
    }

    #[test]
    fn timeout_kills_the_child() {
        let started = Instant::now();
        let err = run(&["sleep", "30"], Duration::from_millis(200)).unwrap_err();
        assert!(err.to_string().contains("did not finish"));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn exited_child_cpu_time_is_read_before_reaping() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]);
        let mut g = ChildGuard::spawn(cmd).unwrap();
        let (status, stat) = g.wait_within_stat(Duration::from_secs(30)).unwrap();
        assert!(status.success());
        assert!(stat.utime + stat.stime > 0, "{stat:?}");
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let mut g = ChildGuard::spawn(cmd).unwrap();
        let e = g.wait_within_stat(Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
    }

    #[test]
    fn guard_kills_on_drop() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let g = ChildGuard::spawn(cmd).unwrap();
        let pid = g.id();
        drop(g);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| !s.contains("(sleep)"))
                    .unwrap_or(true)
        );
    }
}
