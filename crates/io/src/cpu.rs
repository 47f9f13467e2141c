//! CPU time as the kernel accounts it: of the calling thread (getrusage), of any thread
//! or process (`/proc/<pid>/task/<tid>/schedstat` in nanoseconds, `stat` in clock ticks)
//! and of every core (`/proc/stat`). It is the basis of every per-worker CPU-utilisation
//! figure nfx reports and of the modeled energy of `nfx-energy`.

use std::io;
use std::path::Path;
use std::time::Duration;

/// User + system CPU time consumed so far by the calling thread (getrusage(RUSAGE_THREAD)).
pub fn thread_cpu_time() -> Duration {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live rusage. RUSAGE_THREAD cannot fail for the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The calling thread's kernel thread id (what `/proc/<pid>/task/` lists and what
/// `sched_setaffinity` and cgroup `tasks` files take).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Turns CPU time over wall time into a percentage of one core.
pub fn cpu_pct(cpu: Duration, wall: Duration) -> f64 {
    if wall.is_zero() {
        0.0
    } else {
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    }
}

/// Clock ticks per second of the jiffy counters in `/proc`.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Busy and total jiffies of one `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTicks {
    /// Jiffies not idle and not waiting for I/O.
    pub busy: u64,
    /// All jiffies (busy + idle + iowait).
    pub total: u64,
}

fn parse_cpu_line(line: &str) -> io::Result<CoreTicks> {
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().map_err(|_| bad("bad /proc/stat field")))
        .collect::<io::Result<_>>()?;
    if v.len() < 4 {
        return Err(bad("/proc/stat cpu line too short"));
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice] — guest time
    // is already inside user/nice.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Ok(CoreTicks {
        busy: total - idle,
        total,
    })
}

/// Busy and total jiffies from the aggregate `cpu` line of `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> io::Result<CoreTicks> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| bad("/proc/stat has no aggregate cpu line"))?;
    parse_cpu_line(line)
}

/// Per-core busy and total jiffies from the `cpuN` lines of `/proc/stat` text, indexed
/// by core number (a core missing from the text, e.g. offline, reads as zero).
pub fn parse_proc_stat_cores(text: &str) -> io::Result<Vec<CoreTicks>> {
    let mut cores = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        // `cpuN ...`: the number is glued to `cpu` (the aggregate line has a space).
        let Some(num) = rest
            .split_whitespace()
            .next()
            .filter(|_| rest.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(n) = num.parse::<usize>() else {
            continue;
        };
        if n >= 4096 {
            return Err(bad("/proc/stat core number out of range"));
        }
        if cores.len() <= n {
            cores.resize(n + 1, CoreTicks::default());
        }
        cores[n] = parse_cpu_line(line)?;
    }
    Ok(cores)
}

/// Reads `/proc/stat`: the aggregate and the per-core jiffies.
pub fn read_proc_stat() -> io::Result<(CoreTicks, Vec<CoreTicks>)> {
    let text = std::fs::read_to_string("/proc/stat")?;
    Ok((parse_proc_stat(&text)?, parse_proc_stat_cores(&text)?))
}

/// The fields of `/proc/<pid>[/task/<tid>]/stat` that CPU accounting uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStat {
    /// User-mode jiffies (field 14).
    pub utime: u64,
    /// Kernel-mode jiffies (field 15).
    pub stime: u64,
    /// CPU the task last ran on (field 39), if the line has it.
    pub processor: Option<u32>,
}

/// Parses `/proc/<pid>/stat` text (fields counted after the parenthesised command
/// name, which may contain spaces and parentheses).
pub fn parse_task_stat(text: &str) -> io::Result<TaskStat> {
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| bad("malformed /proc/<pid>/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is at index n - 3.
    let num = |i: usize, what: &str| -> io::Result<u64> {
        f.get(i)
            .ok_or_else(|| bad(what))?
            .parse()
            .map_err(|_| bad(what))
    };
    Ok(TaskStat {
        utime: num(11, "no utime in /proc/<pid>/stat")?,
        stime: num(12, "no stime in /proc/<pid>/stat")?,
        processor: f.get(36).and_then(|p| p.parse().ok()),
    })
}

/// utime+stime (jiffies) from `/proc/<pid>/stat` text.
pub fn parse_pid_stat(text: &str) -> io::Result<u64> {
    parse_task_stat(text).map(|s| s.utime + s.stime)
}

/// Time on CPU in nanoseconds: the first field of `/proc/<pid>/task/<tid>/schedstat`.
pub fn parse_schedstat(text: &str) -> io::Result<u64> {
    text.split_whitespace()
        .next()
        .ok_or_else(|| bad("empty schedstat"))?
        .parse()
        .map_err(|_| bad("bad schedstat"))
}

/// Time spent runnable but waiting for a CPU, in nanoseconds: the second field of
/// `/proc/<pid>/task/<tid>/schedstat` (the scheduler's run-queue delay, which includes
/// time held back by a CPU bandwidth limit). CPU time says what a thread got; this says
/// what it was kept waiting for.
pub fn parse_schedstat_wait(text: &str) -> io::Result<u64> {
    text.split_whitespace()
        .nth(1)
        .ok_or_else(|| bad("schedstat without a run-queue delay"))?
        .parse()
        .map_err(|_| bad("bad schedstat"))
}

/// Run-queue delay of every thread of process `pid` together ([`parse_schedstat_wait`]);
/// a thread that exits while it is read is left out.
pub fn process_wait_time(pid: u32) -> io::Result<Duration> {
    let mut ns = 0u64;
    for tid in thread_ids(pid)? {
        if let Ok(t) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")) {
            ns += parse_schedstat_wait(&t)?;
        }
    }
    Ok(Duration::from_nanos(ns))
}

/// CPU time of thread `tid` of process `pid`: nanosecond `schedstat` where the kernel
/// has it, else `stat`'s user + system clock ticks.
pub fn task_cpu_time(pid: u32, tid: u32) -> io::Result<Duration> {
    task_cpu_time_in(Path::new("/proc"), pid, tid)
}

/// [`task_cpu_time`] under another procfs root (tests use recorded trees).
pub fn task_cpu_time_in(proc: &Path, pid: u32, tid: u32) -> io::Result<Duration> {
    let dir = proc.join(format!("{pid}/task/{tid}"));
    if let Ok(text) = std::fs::read_to_string(dir.join("schedstat")) {
        return parse_schedstat(&text).map(Duration::from_nanos);
    }
    let s = parse_task_stat(&std::fs::read_to_string(dir.join("stat"))?)?;
    let tck = clk_tck();
    let j = s.utime + s.stime;
    Ok(Duration::from_secs(j / tck) + Duration::from_nanos((j % tck) * 1_000_000_000 / tck))
}

/// Thread ids of process `pid` (its `/proc/<pid>/task` entries), ascending.
pub fn thread_ids(pid: u32) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// The command name (`comm`) of thread `tid` of `pid`, without the newline.
pub fn thread_name(pid: u32, tid: u32) -> io::Result<String> {
    Ok(
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))?
            .trim_end()
            .to_string(),
    )
}

/// CPU time of every live thread of `pid`, summed (threads that already exited are
/// not counted: sample a process whose threads live as long as it does).
pub fn process_cpu_time(pid: u32) -> io::Result<Duration> {
    let mut sum = Duration::ZERO;
    for tid in thread_ids(pid)? {
        // A thread may exit between the listing and the read.
        if let Ok(t) = task_cpu_time(pid, tid) {
            sum += t;
        }
    }
    Ok(sum)
}

/// The parent pid field of a `/proc/<pid>/stat` line (the field after the
/// parenthesised command name, which may itself hold spaces and parentheses).
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Processes whose parent is `pid` (a scan of `/proc/*/stat`), ascending: what a
/// supervisor's CPU accounting adds to its own threads (a child such as `ffmpeg`).
pub fn child_pids(pid: u32) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")?
        .filter_map(|e| {
            let p: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            (parse_ppid(&stat)? == pid).then_some(p)
        })
        .collect();
    v.sort_unstable();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_found_by_their_parent_pid() {
        assert_eq!(parse_ppid("42 (a) b) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("garbage"), None);
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let kids = child_pids(std::process::id()).unwrap();
        assert!(kids.contains(&c.id()), "{kids:?}");
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(!child_pids(std::process::id()).unwrap().contains(&c.id()));
    }
    use std::time::Instant;

    #[test]
    fn spinning_thread_accrues_cpu_and_sleeping_one_does_not() {
        let busy = std::thread::spawn(|| {
            let c0 = thread_cpu_time();
            let t0 = Instant::now();
            let mut x = 0u64;
            while t0.elapsed() < Duration::from_millis(60) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            (thread_cpu_time() - c0, t0.elapsed())
        })
        .join()
        .unwrap();
        assert!(busy.0 > Duration::ZERO, "spinning thread shows no CPU time");
        let idle = std::thread::spawn(|| {
            let c0 = thread_cpu_time();
            std::thread::park_timeout(Duration::from_millis(60));
            thread_cpu_time() - c0
        })
        .join()
        .unwrap();
        assert!(
            idle < busy.0,
            "parked thread used {idle:?}, spinning one {:?}",
            busy.0
        );
    }

    #[test]
    fn pct_of_wall() {
        assert_eq!(
            cpu_pct(Duration::from_millis(50), Duration::from_millis(100)),
            50.0
        );
        assert_eq!(cpu_pct(Duration::from_millis(5), Duration::ZERO), 0.0);
    }

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let t = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        let c = parse_proc_stat(t).unwrap();
        assert_eq!((c.busy, c.total), (160, 1180));
        assert!(parse_proc_stat("intr 1 2").is_err());
        assert!(parse_proc_stat("cpu  1 x 3 4").is_err());
    }

    #[test]
    fn proc_stat_per_core_lines_by_number() {
        let t = "cpu  9 9 9 9\ncpu0 10 0 5 100 1 0 0 0\ncpu2 1 1 1 50 0 0 0 0 0 0\nintr 5\n";
        let c = parse_proc_stat_cores(t).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[0],
            CoreTicks {
                busy: 15,
                total: 116
            }
        );
        assert_eq!(c[1], CoreTicks::default());
        assert_eq!(c[2].busy, 3);
        assert!(parse_proc_stat_cores("cpu99999 1 2 3 4").is_err());
    }

    #[test]
    fn pid_stat_handles_spaces_in_comm() {
        let t = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 17 4 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_pid_stat(t).unwrap(), 21);
        assert_eq!(parse_task_stat(t).unwrap().processor, None);
        assert!(parse_pid_stat("42 (x) S 1").is_err());
        // A full line of a real kernel: processor is field 39.
        let full = "7 (napi/to-src-9) S 2 0 0 0 -1 2129984 0 0 0 0 3 11 0 0 20 0 1 0 \
                    96 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_task_stat(full).unwrap();
        assert_eq!((s.utime, s.stime, s.processor), (3, 11, Some(1)));
    }

    #[test]
    fn schedstat_first_field_is_nanoseconds() {
        assert_eq!(parse_schedstat("1668237 12803909 3\n").unwrap(), 1668237);
        assert!(parse_schedstat("").is_err());
        assert!(parse_schedstat("x 1 2").is_err());
        assert_eq!(
            parse_schedstat_wait("1668237 12803909 3\n").unwrap(),
            12803909
        );
        assert!(parse_schedstat_wait("1668237").is_err());
    }

    #[test]
    fn recorded_task_falls_back_from_schedstat_to_stat_ticks() {
        let dir = std::env::temp_dir().join(format!("nfx-io-proc-{}", std::process::id()));
        let a = dir.join("10/task/11");
        let b = dir.join("10/task/12");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("schedstat"), "2500000000 0 1\n").unwrap();
        let tck = clk_tck();
        std::fs::write(
            b.join("stat"),
            format!("12 (w) S 1 1 1 0 -1 0 0 0 0 0 {} {} 0 0", tck, tck / 2),
        )
        .unwrap();
        assert_eq!(
            task_cpu_time_in(&dir, 10, 11).unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(
            task_cpu_time_in(&dir, 10, 12).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(task_cpu_time_in(&dir, 10, 13).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_threads_are_listed_and_accrue_time() {
        let pid = std::process::id();
        let tid = gettid();
        assert!(thread_ids(pid).unwrap().contains(&tid));
        let before = task_cpu_time(pid, tid).unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(task_cpu_time(pid, tid).unwrap() > before);
        assert!(process_cpu_time(pid).unwrap() >= task_cpu_time(pid, tid).unwrap());
        assert!(!thread_name(pid, tid).unwrap().is_empty());
    }
}
