//! The processes of the accelerator tier (tunnel endpoints, lookaside devices): started
//! by this agent, or adopted from the agent that ran before it and was killed (its
//! children outlive it; a restarted agent is not their parent, so it watches them by
//! pid, checked against their command line so that a reused pid is never taken for
//! one of them).

use crate::hostagent::leftovers;
use crate::vnfm::VnfmError;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a stopped process may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// One process of the tier.
pub(super) enum Proc {
    /// Started by this agent.
    Child(Child),
    /// Started by an earlier agent of this host; `needle` is its own file under the
    /// agent's directory (an endpoint's configuration or a device's socket), which its
    /// command line names after the flag the agent passed it with.
    Adopted { pid: u32, needle: PathBuf },
}

impl Proc {
    /// Adopts process `pid` if it runs and its command line is the one the agent starts
    /// for `needle`.
    pub(super) fn adopt(pid: u32, needle: &Path) -> Option<Proc> {
        is_ours(pid, needle).then(|| Proc::Adopted {
            pid,
            needle: needle.to_path_buf(),
        })
    }

    /// Its process id.
    pub(super) fn id(&self) -> u32 {
        match self {
            Proc::Child(c) => c.id(),
            Proc::Adopted { pid, .. } => *pid,
        }
    }

    /// How it ended, once it has (`None` while it runs).
    pub(super) fn ended(&mut self) -> Option<String> {
        match self {
            Proc::Child(c) => match c.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                _ => None,
            },
            Proc::Adopted { pid, needle } => (!is_ours(*pid, needle))
                .then(|| "ended (adopted after an agent restart: no exit status)".to_string()),
        }
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`]; reaps a child.
    pub(super) fn stop(&mut self) {
        if self.ended().is_some() {
            return;
        }
        let pid = self.id() as i32;
        // SAFETY: kill(2) of a process of this tier that still runs (a child not yet
        // reaped, or an adopted process whose command line was just checked).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < STOP_GRACE {
            if self.ended().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match self {
            Proc::Child(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Proc::Adopted { pid, needle } => kill_if_ours(*pid, needle),
        }
    }
}

/// Whether `pid` runs (not a zombie) and its command line is the one the agent starts
/// for the instance whose own file is `needle` ([`leftovers::runs`]).
fn is_ours(pid: u32, needle: &Path) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.starts_with(" Z"))
    });
    running
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| leftovers::runs(needle, &c))
}

/// SIGKILLs `pid` if its command line is the one the agent starts for `needle` (a
/// process an earlier agent started and this one does not adopt) and waits up to
/// [`STOP_GRACE`] until it is gone, so that its TUN device and port are free for a new
/// process.
pub(super) fn kill_if_ours(pid: u32, needle: &Path) {
    if !is_ours(pid, needle) {
        return;
    }
    // SAFETY: kill(2) of a single process (pid > 1) whose command line is the one an
    // agent of this host starts for `needle`.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let start = Instant::now();
    while is_ours(pid, needle) && start.elapsed() < STOP_GRACE {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid recorded in `file`, if it holds one ([`leftovers::parse_pid`]: digits, above 1).
pub(super) fn pid_in(file: &Path) -> Option<u32> {
    let pid = leftovers::parse_pid(&std::fs::read(file).ok()?)?;
    u32::try_from(pid).ok()
}

/// Starts a dataplane process (tunnel endpoint or lookaside device) with its output in
/// `log_file`, at the dataplane's priority as the agent's workers are
/// ([`nfx_io::priority`]).
pub(super) fn spawn(mut cmd: Command, log_file: &Path) -> Result<Proc, VnfmError> {
    let log = std::fs::File::create(log_file)
        .map_err(|e| VnfmError::Unavailable(format!("{}: {e}", log_file.display())))?;
    let nice = nfx_io::priority::DATAPLANE_NICE;
    nfx_io::priority::start_at_nice(&mut cmd, nice);
    let out = log
        .try_clone()
        .map_err(|e| VnfmError::Unavailable(e.to_string()))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(log)
        .spawn()
        .map_err(|e| VnfmError::Unavailable(format!("starting {cmd:?}: {e}")))?;
    if let Err(e) = nfx_io::priority::check_nice(child.id(), nice) {
        log::warn!("{cmd:?} {e}");
    }
    Ok(Proc::Child(child))
}

/// The last lines of a log file (for an error).
pub(super) fn log_tail(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = lines.into_iter().rev().collect();
    format!("{} (see {})", tail.join(" | "), file.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_process_is_watched_and_stopped_by_pid() {
        // A shell whose command line is an endpoint's, for a configuration of this test.
        let conf = std::env::temp_dir()
            .join(format!("nfx-proc-{}", std::process::id()))
            .join(leftovers::ENDPOINT_CONFIG);
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5; :", "sh", "tunnel", "--config"])
            .arg(&conf)
            .spawn()
            .unwrap();
        // Until its exec, the child's command line is still this test's.
        let start = Instant::now();
        let mut p = loop {
            if let Some(p) = Proc::adopt(child.id(), &conf) {
                break p;
            }
            assert!(start.elapsed() < Duration::from_secs(2), "never adopted");
            std::thread::sleep(Duration::from_millis(1));
        };
        let other = Path::new("/run/nfx/not-this-one").join(leftovers::ENDPOINT_CONFIG);
        assert!(Proc::adopt(child.id(), &other).is_none());
        assert_eq!(p.id(), child.id());
        assert_eq!(p.ended(), None);
        // The test still holds the child: reap it on a thread while `stop` waits.
        let reaper = std::thread::spawn(move || child.wait().unwrap());
        p.stop();
        assert!(!reaper.join().unwrap().success());
        assert!(p.ended().is_some());
    }
}
