//! A CPU bandwidth limit on threads through the kernel's CFS bandwidth control, in a
//! cgroup under the nfx-owned subtree `nfx/<name>` of the cpu controller:
//!
//! * cgroup v2 (the cpu controller in the unified hierarchy): `cpu.max` = `quota period`
//!   (or `max period`); a process is moved with `cgroup.procs` — v2 keeps the threads of
//!   one process inside its own threaded subtree, so the limit covers the whole process;
//! * cgroup v1 (hybrid hosts, where the cpu controller is still mounted on its own, e.g.
//!   `/sys/fs/cgroup/cpu`): `cpu.cfs_quota_us` and `cpu.cfs_period_us`; single threads
//!   are moved with `tasks`.
//!
//! Both are the same scheduler mechanism: at most `quota` of CPU time per `period`.
//! [`CpuGroup::remove`] moves every thread back where it came from and removes the group.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The nfx-owned directory under the cpu controller's root.
pub const SUBTREE: &str = "nfx";

/// Shortest bandwidth period [`CpuGroup::set_cores`] uses. A thread limited to `q`
/// cores of one may wait up to `(1 − q)` of the period for CPU (the delay a limit adds
/// to a packet), so the period is kept short: 20 ms, not the kernel's default 100 ms.
pub const MIN_PERIOD_US: u64 = 20_000;
/// Longest bandwidth period [`CpuGroup::set_cores`] uses (the kernel's default).
pub const MAX_PERIOD_US: u64 = 100_000;
/// The kernel's smallest quota (`cpu.cfs_quota_us`, `cpu.max`).
pub const MIN_QUOTA_US: u64 = 1_000;
/// Scheduling weight of `nfx` and of every group under it, as a multiple of the
/// kernel's default (v2 `cpu.weight` 100, v1 `cpu.shares` 1024). A limited thread is
/// owed its quota: contention on the host (a build beside it) must not push it below
/// the limit its manager chose, so it wins the CPU whenever it is runnable; the quota
/// caps it, so the weight reserves the limit and no more.
pub const RESERVE_WEIGHT: u64 = 10;

/// The period and quota, µs, of a limit of `cores`: the shortest period from
/// [`MIN_PERIOD_US`] up to [`MAX_PERIOD_US`] whose quota the kernel accepts.
pub fn period_quota_us(cores: f64) -> (u64, u64) {
    let c = cores.max(1e-6);
    let period = ((MIN_QUOTA_US as f64 / c).ceil() as u64).clamp(MIN_PERIOD_US, MAX_PERIOD_US);
    let quota = ((c * period as f64).round() as u64).max(MIN_QUOTA_US);
    (period, quota)
}

/// The longest a single thread limited to `cores` waits for CPU in one period.
pub fn worst_wait(cores: f64) -> Duration {
    let (period, quota) = period_quota_us(cores);
    Duration::from_micros(period.saturating_sub(quota))
}

/// Which cgroup interface the cpu controller speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy (`cpu.max`).
    V2,
    /// The legacy per-controller hierarchy (`cpu.cfs_quota_us`).
    V1,
}

/// Where the cpu controller is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuController {
    /// Interface version.
    pub version: Version,
    /// Root directory of its hierarchy.
    pub root: PathBuf,
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

fn write(p: &Path, v: &str) -> io::Result<()> {
    std::fs::write(p, v)
        .map_err(|e| err(e.kind(), format!("writing {v:?} to {}: {e}", p.display())))
}

fn read(p: &Path) -> io::Result<String> {
    std::fs::read_to_string(p).map_err(|e| err(e.kind(), format!("reading {}: {e}", p.display())))
}

/// Checks a group name: 1–64 characters from `A-Z a-z 0-9 _ . -`, not `.` or `..`.
pub fn check_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(err(
            io::ErrorKind::InvalidInput,
            format!("cgroup name {name:?}: use 1-64 characters from A-Z a-z 0-9 _ . -"),
        ))
    }
}

impl CpuController {
    /// Finds the cpu controller on this host: the unified hierarchy at `/sys/fs/cgroup`
    /// or `/sys/fs/cgroup/unified` when it lists `cpu`, else a v1 mount
    /// (`/sys/fs/cgroup/cpu`, `/sys/fs/cgroup/cpu,cpuacct`).
    pub fn detect() -> io::Result<Self> {
        Self::detect_in(Path::new("/sys/fs/cgroup"))
    }

    /// [`CpuController::detect`] under another root (tests use recorded trees).
    pub fn detect_in(base: &Path) -> io::Result<Self> {
        for dir in [base.to_path_buf(), base.join("unified")] {
            if let Ok(c) = std::fs::read_to_string(dir.join("cgroup.controllers")) {
                if c.split_whitespace().any(|x| x == "cpu") {
                    return Ok(Self {
                        version: Version::V2,
                        root: dir,
                    });
                }
            }
        }
        for name in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
            let dir = base.join(name);
            if dir.join("cpu.cfs_quota_us").exists() {
                return Ok(Self {
                    version: Version::V1,
                    root: dir,
                });
            }
        }
        Err(err(
            io::ErrorKind::NotFound,
            format!(
                "no cpu cgroup controller under {} (neither cgroup v2 with `cpu` in cgroup.controllers nor a v1 cpu mount)",
                base.display()
            ),
        ))
    }

    /// The CPU limit in force on thread `tid` as `(quota, period)`, read from the
    /// kernel: its cgroup in this hierarchy (`/proc/<tid>/cgroup`) and that group's
    /// `cpu.max` (v2) or CFS quota (v1). `None` when unlimited (the root group has no
    /// limit file).
    pub fn thread_limit(&self, tid: u32) -> io::Result<Option<(Duration, Duration)>> {
        let cg = current_cgroup(self.version, tid);
        let rel = cg.strip_prefix("/").unwrap_or(&cg);
        if rel.as_os_str().is_empty() {
            return Ok(None);
        }
        let (q, p) = read_limit(self.version, &self.root.join(rel))?;
        Ok(q.map(|q| (q, p)))
    }

    /// Creates (or reuses) the group `nfx/<name>`. On v2 it first enables the cpu
    /// controller for the children of the root and of `nfx`.
    pub fn create(&self, name: &str) -> io::Result<CpuGroup> {
        check_name(name)?;
        let sub = self.root.join(SUBTREE);
        if self.version == Version::V2 {
            enable_cpu(&self.root)?;
            std::fs::create_dir_all(&sub)?;
            enable_cpu(&sub)?;
        } else {
            std::fs::create_dir_all(&sub)?;
        }
        let path = sub.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(e.kind(), format!("creating {}: {e}", path.display()))),
        }
        for dir in [&sub, &path] {
            reserve(self.version, dir)?;
        }
        Ok(CpuGroup {
            version: self.version,
            root: self.root.clone(),
            path,
            moved: Vec::new(),
        })
    }
}

/// The CPU bandwidth limit of the cgroup directory `dir`: `(quota, period)`, quota
/// `None` when unlimited.
fn read_limit(version: Version, dir: &Path) -> io::Result<(Option<Duration>, Duration)> {
    let bad = |p: &Path| {
        err(
            io::ErrorKind::InvalidData,
            format!("{}: unexpected content", p.display()),
        )
    };
    match version {
        Version::V2 => {
            let p = dir.join("cpu.max");
            let text = read(&p)?;
            let mut f = text.split_whitespace();
            let q = f.next().ok_or_else(|| bad(&p))?;
            let per: u64 = f
                .next()
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| bad(&p))?;
            let quota = match q {
                "max" => None,
                n => Some(Duration::from_micros(n.parse().map_err(|_| bad(&p))?)),
            };
            Ok((quota, Duration::from_micros(per)))
        }
        Version::V1 => {
            let (qp, pp) = (dir.join("cpu.cfs_quota_us"), dir.join("cpu.cfs_period_us"));
            let q: i64 = read(&qp)?.trim().parse().map_err(|_| bad(&qp))?;
            let per: u64 = read(&pp)?.trim().parse().map_err(|_| bad(&pp))?;
            let quota = u64::try_from(q).ok().map(Duration::from_micros);
            Ok((quota, Duration::from_micros(per)))
        }
    }
}

/// The weight file of a group and the value [`RESERVE_WEIGHT`] gives it.
pub fn weight_file(version: Version) -> (&'static str, u64) {
    match version {
        Version::V2 => ("cpu.weight", 100 * RESERVE_WEIGHT),
        Version::V1 => ("cpu.shares", 1024 * RESERVE_WEIGHT),
    }
}

/// Gives the group `dir` the reserving weight ([`RESERVE_WEIGHT`]).
fn reserve(version: Version, dir: &Path) -> io::Result<()> {
    let (file, w) = weight_file(version);
    write(&dir.join(file), &w.to_string())
}

/// Adds `+cpu` to `dir/cgroup.subtree_control` unless it is there.
fn enable_cpu(dir: &Path) -> io::Result<()> {
    let p = dir.join("cgroup.subtree_control");
    if read(&p)?.split_whitespace().any(|c| c == "cpu") {
        return Ok(());
    }
    write(&p, "+cpu")
}

/// What was moved into a group, and from where, to put it back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Moved {
    Thread { tid: u32, from: PathBuf },
    Process { pid: u32, from: PathBuf },
}

/// One cgroup `nfx/<name>` with a CPU bandwidth limit.
#[derive(Debug)]
pub struct CpuGroup {
    version: Version,
    root: PathBuf,
    path: PathBuf,
    moved: Vec<Moved>,
}

/// The cgroup of `tid` in the cpu hierarchy (from `/proc/<tid>/cgroup`), as a path under
/// the controller's root; `/` when not found.
fn current_cgroup(version: Version, tid: u32) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{tid}/cgroup")).unwrap_or_default();
    PathBuf::from(parse_proc_cgroup(&text, version).unwrap_or("/"))
}

/// The path of the cpu controller's cgroup in `/proc/<pid>/cgroup` text: the `0::` line
/// for v2, the line whose controller list contains `cpu` for v1.
pub fn parse_proc_cgroup(text: &str, version: Version) -> Option<&str> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let hit = match version {
            Version::V2 => ctrls.is_empty(),
            Version::V1 => ctrls.split(',').any(|c| c == "cpu"),
        };
        hit.then_some(path)
    })
}

impl CpuGroup {
    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Interface version.
    pub fn version(&self) -> Version {
        self.version
    }

    fn dir_of(&self, cg: &Path) -> PathBuf {
        self.root.join(cg.strip_prefix("/").unwrap_or(cg))
    }

    /// Moves thread `tid` of process `pid` into the group (v2: the whole process).
    pub fn add_thread(&mut self, pid: u32, tid: u32) -> io::Result<()> {
        match self.version {
            Version::V1 => {
                let from = current_cgroup(self.version, tid);
                write(&self.path.join("tasks"), &tid.to_string())?;
                self.moved.push(Moved::Thread { tid, from });
                Ok(())
            }
            Version::V2 => self.add_process(pid),
        }
    }

    /// Moves every thread of process `pid` into the group.
    pub fn add_process(&mut self, pid: u32) -> io::Result<()> {
        if self
            .moved
            .iter()
            .any(|m| matches!(m, Moved::Process { pid: p, .. } if *p == pid))
        {
            return Ok(());
        }
        let from = current_cgroup(self.version, pid);
        write(&self.path.join("cgroup.procs"), &pid.to_string())?;
        self.moved.push(Moved::Process { pid, from });
        Ok(())
    }

    /// Limits the group to `quota` of CPU time per `period` (`None`: no limit). The
    /// kernel takes periods of 1 ms to 1 s and quotas of at least 1 ms.
    pub fn set_limit(&self, quota: Option<Duration>, period: Duration) -> io::Result<()> {
        let p = period.as_micros().clamp(1_000, 1_000_000) as u64;
        let q = quota.map(|q| (q.as_micros() as u64).max(1_000));
        match self.version {
            Version::V2 => {
                let v = match q {
                    Some(q) => format!("{q} {p}"),
                    None => format!("max {p}"),
                };
                write(&self.path.join("cpu.max"), &v)
            }
            Version::V1 => {
                // Lift the quota first: a quota above the new period's is refused otherwise.
                write(&self.path.join("cpu.cfs_quota_us"), "-1")?;
                write(&self.path.join("cpu.cfs_period_us"), &p.to_string())?;
                if let Some(q) = q {
                    write(&self.path.join("cpu.cfs_quota_us"), &q.to_string())?;
                }
                Ok(())
            }
        }
    }

    /// Limits the group to `cores` cores' worth of CPU time (0.3 = 30 % of one core) per
    /// period ([`period_quota_us`]); `None` lifts the limit.
    pub fn set_cores(&self, cores: Option<f64>) -> io::Result<()> {
        match cores {
            Some(c) => {
                let (period, quota) = period_quota_us(c);
                self.set_limit(
                    Some(Duration::from_micros(quota)),
                    Duration::from_micros(period),
                )
            }
            None => self.set_limit(None, Duration::from_micros(MIN_PERIOD_US)),
        }
    }

    /// The limit in force, read back from the kernel: `(quota, period)`, quota `None`
    /// when unlimited.
    pub fn limit(&self) -> io::Result<(Option<Duration>, Duration)> {
        read_limit(self.version, &self.path)
    }

    /// The limit files as the kernel shows them: `cpu.max=<text>` (v2) or
    /// `cpu.cfs_quota_us=<q> cpu.cfs_period_us=<p>` (v1), for read-back in answers.
    pub fn limit_text(&self) -> io::Result<String> {
        let file = |f: &str| -> io::Result<String> {
            Ok(format!("{f}={}", read(&self.path.join(f))?.trim()))
        };
        match self.version {
            Version::V2 => file("cpu.max"),
            Version::V1 => Ok(format!(
                "{} {}",
                file("cpu.cfs_quota_us")?,
                file("cpu.cfs_period_us")?
            )),
        }
    }

    /// Thread ids in the group (v1 `tasks`, v2 `cgroup.threads`).
    pub fn threads(&self) -> io::Result<Vec<u32>> {
        let f = match self.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.threads",
        };
        Ok(read(&self.path.join(f))?
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect())
    }

    /// Moves everything back to the cgroups it came from (threads that exited are
    /// skipped) and removes the group directory.
    pub fn remove(mut self) -> io::Result<()> {
        self.restore()
    }

    fn restore(&mut self) -> io::Result<()> {
        let mut first_err = None;
        for m in std::mem::take(&mut self.moved).into_iter().rev() {
            let (file, id, from) = match m {
                Moved::Thread { tid, from } => ("tasks", tid, from),
                Moved::Process { pid, from } => ("cgroup.procs", pid, from),
            };
            let dir = self.dir_of(&from);
            if let Err(e) = write(&dir.join(file), &id.to_string()) {
                // ESRCH: it exited meanwhile, nothing to restore.
                if e.raw_os_error() != Some(libc::ESRCH) && first_err.is_none() {
                    first_err = Some(e);
                }
            }
        }
        match std::fs::remove_dir(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                first_err.get_or_insert(err(
                    e.kind(),
                    format!("removing {}: {e}", self.path.display()),
                ));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        if self.path.exists() {
            let _ = self.restore();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_use_the_shortest_period_the_kernels_minimum_quota_allows() {
        assert_eq!(period_quota_us(0.25), (20_000, 5_000));
        assert_eq!(period_quota_us(0.05), (20_000, 1_000));
        assert_eq!(period_quota_us(0.04), (25_000, 1_000));
        assert_eq!(period_quota_us(0.001), (100_000, 1_000));
        assert_eq!(period_quota_us(1.5), (20_000, 30_000));
        assert_eq!(worst_wait(0.08), Duration::from_micros(18_400));
        assert_eq!(worst_wait(2.0), Duration::ZERO);
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nfx-cgroup-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_are_checked() {
        for ok in ["edge", "nat-1", "a.b_c"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "x y", &"n".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn detects_v2_then_hybrid_v1_and_reports_none() {
        let d = tmp("detect");
        assert!(CpuController::detect_in(&d)
            .unwrap_err()
            .to_string()
            .contains("no cpu cgroup"));
        std::fs::create_dir_all(d.join("cpu")).unwrap();
        std::fs::write(d.join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::create_dir_all(d.join("unified")).unwrap();
        std::fs::write(d.join("unified/cgroup.controllers"), "hugetlb\n").unwrap();
        // Hybrid: the unified hierarchy lacks cpu, so v1 is used.
        let c = CpuController::detect_in(&d).unwrap();
        assert_eq!((c.version, c.root.clone()), (Version::V1, d.join("cpu")));
        std::fs::write(d.join("cgroup.controllers"), "cpuset cpu io memory\n").unwrap();
        let c = CpuController::detect_in(&d).unwrap();
        assert_eq!((c.version, c.root.clone()), (Version::V2, d.clone()));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn v2_limit_is_written_as_cpu_max_and_read_back() {
        // A plain directory stands in for cgroupfs: the files the kernel would create
        // are written first.
        let d = tmp("v2");
        std::fs::write(d.join("cgroup.subtree_control"), "").unwrap();
        std::fs::create_dir_all(d.join("nfx")).unwrap();
        std::fs::write(d.join("nfx/cgroup.subtree_control"), "cpu\n").unwrap();
        let c = CpuController {
            version: Version::V2,
            root: d.clone(),
        };
        let g = c.create("nat").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("cgroup.subtree_control")).unwrap(),
            "+cpu"
        );
        for dir in [d.join("nfx"), g.path().to_path_buf()] {
            assert_eq!(
                std::fs::read_to_string(dir.join("cpu.weight")).unwrap(),
                "1000"
            );
        }
        g.set_cores(Some(0.25)).unwrap();
        assert_eq!(
            std::fs::read_to_string(g.path().join("cpu.max")).unwrap(),
            "5000 20000"
        );
        assert_eq!(
            g.limit().unwrap(),
            (Some(Duration::from_millis(5)), Duration::from_millis(20))
        );
        assert_eq!(g.limit_text().unwrap(), "cpu.max=5000 20000");
        g.set_cores(None).unwrap();
        assert_eq!(g.limit().unwrap().0, None);
        assert!(c.create("../escape").is_err());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn proc_cgroup_lines_by_version() {
        let t = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/\n1:cpu:/nfx/nat\n0::/user.slice\n";
        assert_eq!(parse_proc_cgroup(t, Version::V1), Some("/nfx/nat"));
        assert_eq!(parse_proc_cgroup(t, Version::V2), Some("/user.slice"));
        assert_eq!(
            parse_proc_cgroup("1:cpu,cpuacct:/a\n", Version::V1),
            Some("/a")
        );
        assert_eq!(parse_proc_cgroup("", Version::V1), None);
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn a_spinning_thread_is_held_to_its_quota_and_restored() {
        let ctl = match CpuController::detect() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let h = std::thread::spawn(move || {
            tx.send(crate::cpu::gettid()).unwrap();
            while !s2.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let (pid, tid) = (std::process::id(), rx.recv().unwrap());
        let before = current_cgroup(ctl.version, tid);
        let mut g = ctl.create(&format!("io-unit-{pid}")).unwrap();
        g.add_thread(pid, tid).unwrap();
        g.set_cores(Some(0.2)).unwrap();
        assert_eq!(
            g.limit().unwrap(),
            (Some(Duration::from_millis(4)), Duration::from_millis(20))
        );
        assert!(g.threads().unwrap().contains(&tid));
        // The group and `nfx` are reserved their limit by weight (read from the kernel).
        let (file, w) = weight_file(ctl.version);
        for dir in [ctl.root.join(SUBTREE), g.path().to_path_buf()] {
            assert_eq!(read(&dir.join(file)).unwrap().trim(), w.to_string());
        }
        let c0 = crate::cpu::task_cpu_time(pid, tid).unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let used = crate::cpu::task_cpu_time(pid, tid).unwrap() - c0;
        // 20 % of 600 ms is 120 ms; allow one period of slack.
        assert!(
            used <= Duration::from_millis(220),
            "used {used:?} under a 20 % quota"
        );
        let path = g.path().to_path_buf();
        g.remove().unwrap();
        assert!(!path.exists());
        assert_eq!(current_cgroup(ctl.version, tid), before);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }
}
