//! CPU frequency through the kernel's cpufreq sysfs interface
//! (`/sys/devices/system/cpu/cpuN/cpufreq/`): the current frequency of each core, its
//! hardware limits, and the two ways to lower it — `scaling_max_freq` (a ceiling any
//! governor honours) and `scaling_setspeed` (a fixed speed under the `userspace`
//! governor). Hosts without cpufreq (most VMs) have no such directory:
//! [`CpuFreq::available`] says so and every setter fails with `NotFound`.

use std::io;
use std::path::{Path, PathBuf};

/// The cpufreq tree of a host (or a recorded copy of one).
#[derive(Debug, Clone)]
pub struct CpuFreq {
    root: PathBuf,
}

impl Default for CpuFreq {
    fn default() -> Self {
        Self::system()
    }
}

impl CpuFreq {
    /// The running kernel's tree, `/sys/devices/system/cpu`.
    pub fn system() -> Self {
        Self::at(Path::new("/sys/devices/system/cpu"))
    }

    /// The tree under `root` (tests use recorded trees).
    pub fn at(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    fn file(&self, cpu: u32, name: &str) -> PathBuf {
        self.root.join(format!("cpu{cpu}/cpufreq/{name}"))
    }

    fn read_khz(&self, cpu: u32, name: &str) -> io::Result<u64> {
        let p = self.file(cpu, name);
        std::fs::read_to_string(&p)?.trim().parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a frequency", p.display()),
            )
        })
    }

    fn write(&self, cpu: u32, name: &str, value: &str) -> io::Result<()> {
        let p = self.file(cpu, name);
        if !p.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: this host has no cpufreq control", p.display()),
            ));
        }
        std::fs::write(&p, value)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", p.display())))
    }

    /// Cores that have a cpufreq directory, ascending.
    pub fn cpus(&self) -> Vec<u32> {
        let Ok(rd) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut v: Vec<u32> = rd
            .filter_map(|e| {
                let e = e.ok()?;
                let n: u32 = e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok()?;
                e.path().join("cpufreq").is_dir().then_some(n)
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether the host exposes cpufreq at all.
    pub fn available(&self) -> bool {
        !self.cpus().is_empty()
    }

    /// Current frequency of `cpu`, kHz.
    pub fn cur_khz(&self, cpu: u32) -> io::Result<u64> {
        self.read_khz(cpu, "scaling_cur_freq")
    }

    /// Mean current frequency over the cores, MHz; `None` without cpufreq.
    pub fn mean_cur_mhz(&self) -> Option<u32> {
        let f: Vec<u64> = self
            .cpus()
            .into_iter()
            .filter_map(|c| self.cur_khz(c).ok())
            .collect();
        if f.is_empty() {
            return None;
        }
        u32::try_from(f.iter().sum::<u64>() / f.len() as u64 / 1000).ok()
    }

    /// Hardware limits of `cpu` (`cpuinfo_min_freq`, `cpuinfo_max_freq`), kHz.
    pub fn limits_khz(&self, cpu: u32) -> io::Result<(u64, u64)> {
        Ok((
            self.read_khz(cpu, "cpuinfo_min_freq")?,
            self.read_khz(cpu, "cpuinfo_max_freq")?,
        ))
    }

    /// The ceiling in force (`scaling_max_freq`), kHz.
    pub fn max_khz(&self, cpu: u32) -> io::Result<u64> {
        self.read_khz(cpu, "scaling_max_freq")
    }

    /// Caps `cpu` at `khz` (clamped to its hardware limits) through `scaling_max_freq`.
    pub fn set_max_khz(&self, cpu: u32, khz: u64) -> io::Result<u64> {
        let (lo, hi) = self.limits_khz(cpu)?;
        let k = khz.clamp(lo, hi);
        self.write(cpu, "scaling_max_freq", &k.to_string())?;
        Ok(k)
    }

    /// The governor of `cpu` (`performance`, `ondemand`, `userspace`, ...).
    pub fn governor(&self, cpu: u32) -> io::Result<String> {
        Ok(std::fs::read_to_string(self.file(cpu, "scaling_governor"))?
            .trim()
            .to_string())
    }

    /// Runs `cpu` at `khz` (clamped) under the `userspace` governor, switching to it.
    pub fn set_speed_khz(&self, cpu: u32, khz: u64) -> io::Result<u64> {
        let (lo, hi) = self.limits_khz(cpu)?;
        let k = khz.clamp(lo, hi);
        if self.governor(cpu)? != "userspace" {
            self.write(cpu, "scaling_governor", "userspace")?;
        }
        self.write(cpu, "scaling_setspeed", &k.to_string())?;
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (PathBuf, CpuFreq) {
        let root = std::env::temp_dir().join(format!(
            "nfx-cpufreq-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        for (cpu, cur) in [(0, 3_400_000u64), (1, 1_700_000)] {
            let d = root.join(format!("cpu{cpu}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("scaling_cur_freq", cur.to_string()),
                ("cpuinfo_min_freq", "800000".into()),
                ("cpuinfo_max_freq", "3400000".into()),
                ("scaling_max_freq", "3400000".into()),
                ("scaling_governor", "ondemand".into()),
                ("scaling_setspeed", "<unsupported>".into()),
            ] {
                std::fs::write(d.join(f), v + "\n").unwrap();
            }
        }
        std::fs::create_dir_all(root.join("cpufreq")).unwrap();
        std::fs::create_dir_all(root.join("cpu2")).unwrap();
        let f = CpuFreq::at(&root);
        (root, f)
    }

    #[test]
    fn reads_cores_and_mean_frequency() {
        let (root, f) = tree();
        assert!(f.available());
        assert_eq!(f.cpus(), vec![0, 1]);
        assert_eq!(f.mean_cur_mhz(), Some(2550));
        assert_eq!(f.limits_khz(1).unwrap(), (800_000, 3_400_000));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn setters_clamp_and_switch_governor() {
        let (root, f) = tree();
        assert_eq!(f.set_max_khz(0, 100).unwrap(), 800_000);
        assert_eq!(f.max_khz(0).unwrap(), 800_000);
        assert_eq!(f.set_speed_khz(1, 2_000_000).unwrap(), 2_000_000);
        assert_eq!(f.governor(1).unwrap(), "userspace");
        let speed = std::fs::read_to_string(root.join("cpu1/cpufreq/scaling_setspeed")).unwrap();
        assert_eq!(speed, "2000000");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn no_cpufreq_is_reported_not_invented() {
        let f = CpuFreq::at(Path::new("/nonexistent/nfx-cpufreq"));
        assert!(!f.available());
        assert_eq!(f.mean_cur_mhz(), None);
        assert!(f.set_max_khz(0, 1_000_000).is_err());
    }
}
