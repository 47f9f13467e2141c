//! The CPU's energy counters where the kernel exposes them:
//!
//! * the powercap RAPL zones (`/sys/class/powercap/intel-rapl:N[:M]`, used by Intel and,
//!   through the same driver, AMD Zen): `name` (`package-N`, `core`, `uncore`, `dram`,
//!   `psys`), `energy_uj` (microjoules, wrapping to 0 after `max_energy_range_uj`);
//! * AMD's `amd_energy` hwmon driver (`/sys/class/hwmon/hwmonN` with `name` =
//!   `amd_energy`): `energyK_input` (microjoules) labelled `Esocket*` or `Ecore*`.
//!
//! The host's energy is the sum of its package and DRAM domains (core and uncore lie
//! inside the package; psys, where present, is used only when there is no package).

use std::io;
use std::path::{Path, PathBuf};

/// What part of the machine a domain measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DomainKind {
    /// A whole CPU package (socket).
    Package,
    /// The cores of a package (inside the package figure).
    Core,
    /// The rest of a package: caches, graphics (inside the package figure).
    Uncore,
    /// Memory attached to a package (outside the package figure).
    Dram,
    /// The whole platform (SoC), where the firmware reports it.
    Psys,
    /// Anything else the driver names.
    Other,
}

impl DomainKind {
    fn from_name(name: &str) -> Self {
        let n = name.to_ascii_lowercase();
        if n.starts_with("package") || n.starts_with("esocket") {
            DomainKind::Package
        } else if n.starts_with("core") || n.starts_with("ecore") {
            DomainKind::Core
        } else if n.starts_with("uncore") {
            DomainKind::Uncore
        } else if n.starts_with("dram") {
            DomainKind::Dram
        } else if n.starts_with("psys") {
            DomainKind::Psys
        } else {
            DomainKind::Other
        }
    }
}

/// One energy counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// Zone directory name (`intel-rapl:0:1`) or hwmon input (`hwmon3/energy2`).
    pub id: String,
    /// The driver's name for it (`package-0`, `dram`, `Esocket0`).
    pub name: String,
    /// What it measures.
    pub kind: DomainKind,
    energy_path: PathBuf,
    /// Value after which the counter wraps to 0 (powercap); `None` for counters that
    /// do not wrap in practice (amd_energy's 64-bit accumulators).
    pub max_range_uj: Option<u64>,
}

fn read_trimmed(p: &Path) -> io::Result<String> {
    Ok(std::fs::read_to_string(p)?.trim().to_string())
}

fn read_u64(p: &Path) -> io::Result<u64> {
    read_trimmed(p)?.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a counter", p.display()),
        )
    })
}

/// Microjoules between two readings of a counter that wraps to 0 after `max_range_uj`.
pub fn delta_uj(prev: u64, now: u64, max_range_uj: Option<u64>) -> u64 {
    if now >= prev {
        return now - prev;
    }
    match max_range_uj {
        // The counter passed its maximum and restarted from zero.
        Some(max) if prev <= max => (max - prev) + now,
        // A counter that went backwards without a known range (driver reload): count
        // from zero rather than invent energy.
        _ => now,
    }
}

/// The energy counters found on a host.
#[derive(Debug, Clone)]
pub struct RaplReader {
    domains: Vec<Domain>,
}

impl RaplReader {
    /// Looks at `/sys/class/powercap` and `/sys/class/hwmon`; `None` when neither has a
    /// readable energy counter (no RAPL, or not allowed to read it).
    pub fn discover() -> Option<Self> {
        Self::discover_in(
            Path::new("/sys/class/powercap"),
            Path::new("/sys/class/hwmon"),
        )
    }

    /// [`RaplReader::discover`] under other roots (tests use recorded trees).
    pub fn discover_in(powercap: &Path, hwmon: &Path) -> Option<Self> {
        let mut domains = powercap_domains(powercap);
        if domains.is_empty() {
            domains = amd_energy_domains(hwmon);
        }
        // Keep only counters this process may read (energy_uj is root-only on kernels
        // with the RAPL side-channel fix).
        domains.retain(|d| read_u64(&d.energy_path).is_ok());
        if domains.is_empty() {
            None
        } else {
            Some(Self { domains })
        }
    }

    /// The domains, in a stable order (by id).
    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }

    /// Current counter values, µJ, in [`RaplReader::domains`] order.
    pub fn read(&self) -> io::Result<Vec<u64>> {
        self.domains
            .iter()
            .map(|d| read_u64(&d.energy_path))
            .collect()
    }

    /// Joules per domain between two readings (wrap-around handled).
    pub fn joules_between(&self, prev: &[u64], now: &[u64]) -> Vec<f64> {
        self.domains
            .iter()
            .zip(prev.iter().zip(now))
            .map(|(d, (&p, &n))| delta_uj(p, n, d.max_range_uj) as f64 / 1e6)
            .collect()
    }

    /// The host's joules from per-domain joules: packages plus DRAM, else psys.
    pub fn host_joules(&self, per_domain: &[f64]) -> f64 {
        let sum = |kinds: &[DomainKind]| -> Option<f64> {
            let v: Vec<f64> = self
                .domains
                .iter()
                .zip(per_domain)
                .filter(|(d, _)| kinds.contains(&d.kind))
                .map(|(_, j)| *j)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum())
        };
        sum(&[DomainKind::Package, DomainKind::Dram])
            .or_else(|| sum(&[DomainKind::Psys]))
            .unwrap_or(0.0)
    }
}

/// Zones `intel-rapl:N` and `intel-rapl:N:M` (the bare `intel-rapl` entry is the
/// control type and has no counter).
fn powercap_domains(root: &Path) -> Vec<Domain> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<Domain> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_string();
            if !id.contains(':') || !(id.starts_with("intel-rapl") || id.starts_with("amd-rapl")) {
                return None;
            }
            let dir = e.path();
            let name = read_trimmed(&dir.join("name")).ok()?;
            if read_trimmed(&dir.join("enabled")).is_ok_and(|s| s == "0") {
                return None;
            }
            Some(Domain {
                kind: DomainKind::from_name(&name),
                max_range_uj: read_u64(&dir.join("max_energy_range_uj")).ok(),
                energy_path: dir.join("energy_uj"),
                name,
                id,
            })
        })
        .collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

/// Inputs `energyK_input` of every hwmon device whose `name` is `amd_energy`.
fn amd_energy_domains(root: &Path) -> Vec<Domain> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for dev in rd.filter_map(|e| e.ok()) {
        let dir = dev.path();
        if read_trimmed(&dir.join("name")).ok().as_deref() != Some("amd_energy") {
            continue;
        }
        let Ok(files) = std::fs::read_dir(&dir) else {
            continue;
        };
        for f in files.filter_map(|e| e.ok()) {
            let Some(file) = f.file_name().to_str().map(String::from) else {
                continue;
            };
            let Some(k) = file
                .strip_prefix("energy")
                .and_then(|r| r.strip_suffix("_input"))
            else {
                continue;
            };
            let label = read_trimmed(&dir.join(format!("energy{k}_label")))
                .unwrap_or_else(|_| format!("energy{k}"));
            v.push(Domain {
                id: format!("{}/energy{k}", dev.file_name().to_string_lossy()),
                kind: DomainKind::from_name(&label),
                name: label,
                energy_path: f.path(),
                max_range_uj: None,
            });
        }
    }
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_around_counts_through_the_maximum() {
        assert_eq!(delta_uj(100, 350, Some(1000)), 250);
        // 900 → max 1000 → 0 → 50: 100 + 50 µJ.
        assert_eq!(delta_uj(900, 50, Some(1000)), 150);
        assert_eq!(delta_uj(900, 50, None), 50);
        // A previous value above the range (corrupt) is not extrapolated.
        assert_eq!(delta_uj(5000, 50, Some(1000)), 50);
    }

    #[test]
    fn domain_names_map_to_kinds() {
        for (n, k) in [
            ("package-0", DomainKind::Package),
            ("core", DomainKind::Core),
            ("uncore", DomainKind::Uncore),
            ("dram", DomainKind::Dram),
            ("psys", DomainKind::Psys),
            ("Esocket1", DomainKind::Package),
            ("Ecore007", DomainKind::Core),
            ("gpu", DomainKind::Other),
        ] {
            assert_eq!(DomainKind::from_name(n), k, "{n}");
        }
    }

    #[test]
    fn nothing_to_find_is_none() {
        let missing = Path::new("/nonexistent/nfx-rapl");
        assert!(RaplReader::discover_in(missing, missing).is_none());
    }
}
