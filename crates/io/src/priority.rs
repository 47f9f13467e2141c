//! Scheduling priority (nice value) of dataplane processes: a worker polls rings that
//! hold a bounded amount of traffic, so on a host whose cores it shares with other
//! processes it must win the CPU when it is runnable, or its rings overflow
//! (`socket_drops`) while a build or a bulk transfer runs beside it.
//!
//! With the kernel's autogroup scheduling (`kernel.sched_autogroup_enabled`, on by
//! default in Debian's kernels) CFS first shares the CPU equally between *sessions* and
//! only then by nice value inside each: a worker left in its agent's session shares that
//! session's slice with the agent and every other worker, whatever its nice value. So a
//! prioritised process starts its own session and gives the session's autogroup the
//! nice value as well.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Nice value host agents start dataplane workers at: ahead of ordinary processes
/// (nice 0; a nice −10 task weighs about 9.3× a nice 0 one in CFS) but not real-time, so
/// a busy-polling worker cannot lock a core away from the kernel's own threads.
pub const DATAPLANE_NICE: i32 = -10;

/// Makes the process `cmd` spawns start at nice `nice` in a session of its own whose
/// autogroup has the same nice value: set in the child between fork and exec, so every
/// thread it creates inherits it. Without the privilege to raise a priority
/// (`CAP_SYS_NICE`) the child keeps its parent's values; [`nice_of`] and
/// [`autogroup_nice_of`] tell.
pub fn start_at_nice(cmd: &mut Command, nice: i32) -> &mut Command {
    let value = nice.to_string();
    // SAFETY: setsid, open, write, close and setpriority are async-signal-safe; the
    // closure reads only `value`, allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, value.as_ptr().cast(), value.len());
                libc::close(fd);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            Ok(())
        })
    }
}

/// Whether process `pid` runs at nice `nice`, its autogroup too (where there is one); if
/// not, what it runs at, for the caller's warning.
pub fn check_nice(pid: u32, nice: i32) -> Result<(), String> {
    let group = autogroup_nice_of(pid);
    match nice_of(pid) {
        Ok(got) if got == nice && group.is_none_or(|g| g == nice) => Ok(()),
        got => Err(format!(
            "runs at nice {got:?} (autogroup {group:?}), not {nice} (raising a priority \
             needs CAP_SYS_NICE): it may lose its CPU to processes beside it"
        )),
    }
}

/// The nice value of process `pid`'s autogroup (`None` without autogroup scheduling).
pub fn autogroup_nice_of(pid: u32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok()?;
    // "/autogroup-595 nice 0"
    text.split_whitespace().last()?.parse().ok()
}

/// The nice value of process (or thread) `pid`.
pub fn nice_of(pid: u32) -> io::Result<i32> {
    // getpriority returns the nice value itself, which may be −1: errno tells an error.
    // SAFETY: errno is thread-local; getpriority reads no memory of ours.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, pid as libc::id_t);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_starts_at_the_nice_value_asked_for_when_allowed() {
        let own = nice_of(std::process::id()).unwrap();
        // Lowering a priority needs no privilege; raising it needs CAP_SYS_NICE.
        for want in [own + 5, DATAPLANE_NICE] {
            let mut cmd = Command::new("sleep");
            cmd.arg("5");
            let mut child = start_at_nice(&mut cmd, want).spawn().unwrap();
            let got = nice_of(child.id()).unwrap();
            let group = autogroup_nice_of(child.id());
            let checked = check_nice(child.id(), want);
            child.kill().unwrap();
            child.wait().unwrap();
            let allowed = want >= own || unsafe { libc::geteuid() } == 0;
            assert_eq!(checked.is_ok(), allowed, "{checked:?}");
            if allowed {
                assert_eq!(got, want);
                if let Some(g) = group {
                    assert_eq!(g, want, "its own session's autogroup");
                }
            } else {
                assert_eq!(got, own, "refused: the child keeps its parent's");
            }
        }
        assert!(nice_of(u32::MAX >> 2).is_err());
    }
}
