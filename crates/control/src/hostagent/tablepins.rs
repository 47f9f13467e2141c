//! Where the agent pins its table chains in the BPF file system, and the manifest that
//! says what each pinned chain was built from, so that a restarted agent takes back
//! only a chain that is still the one its records describe ([`super::tables`]).
//!
//! Every agent pins under its own directory of the host's bpffs,
//! `/sys/fs/bpf/nfx/<host>-<hash of its run_dir>` (the bpffs is mounted on
//! `/sys/fs/bpf` when nothing is), so two agents on one machine never meet; one
//! subdirectory per chain (`<device>-<n>`, a new one for each chain a device runs; a
//! device runs one chain per service). A bpffs holds no regular files, so the manifest
//! of a chain is a record in the run directory (`tables/chains/<device>@<service>.json`);
//! it names the pin directory, the service, its instances with their configuration
//! versions, the tables' sizes, the ports the chain is attached to and the frames it
//! takes there.

use super::record;
use nfx_fastpath::table::{Selection, Shape};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the host's bpffs is (mounted there when it is not).
pub const BPF_FS: &str = "/sys/fs/bpf";

/// What a device's pinned chain was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The table device.
    pub device: String,
    /// The service whose chain it is.
    pub service: String,
    /// Its instances in chain order, each with the configuration version it runs.
    pub instances: Vec<(String, u64)>,
    /// Its tables' sizes.
    pub shape: Shape,
    /// Its pin directory.
    pub pins: PathBuf,
    /// The device's (inside, outside) ports it is attached to.
    pub ports: (String, String),
    /// The frames of its service it takes on those ports (none: every frame).
    #[serde(default)]
    pub selection: Option<Selection>,
}

impl Manifest {
    /// Why the chain cannot be taken back by an agent whose pins are under `root`, whose
    /// device `device` has ports `ports`, and where `recorded(id)` is the (device,
    /// configuration version) of a recorded instance; `None` when it can.
    pub fn mismatch(
        &self,
        root: &Path,
        device: &str,
        ports: (&str, &str),
        recorded: impl Fn(&str) -> Option<(String, u64)>,
    ) -> Option<String> {
        if self.device != device {
            return Some(format!("it names device {:?}", self.device));
        }
        if !within(root, &self.pins) {
            return Some(format!(
                "its pins {} are not under {}",
                self.pins.display(),
                root.display()
            ));
        }
        if (self.ports.0.as_str(), self.ports.1.as_str()) != ports {
            return Some(format!("it is attached to {:?}, not {ports:?}", self.ports));
        }
        if self.service.is_empty() || self.instances.is_empty() {
            return Some("it names no service or no instance".into());
        }
        for (k, (id, version)) in self.instances.iter().enumerate() {
            if self.instances[..k].iter().any(|(i, _)| i == id) {
                return Some(format!("it names instance {id} twice"));
            }
            match recorded(id) {
                None => return Some(format!("instance {id} is not recorded")),
                Some((d, _)) if d != device => {
                    return Some(format!("instance {id} is recorded on {d}"))
                }
                Some((_, v)) if v != *version => {
                    return Some(format!(
                        "instance {id} runs configuration version {version}, recorded {v}"
                    ))
                }
                Some(_) => {}
            }
        }
        None
    }

    /// The instance ids in chain order.
    pub fn ids(&self) -> Vec<String> {
        self.instances.iter().map(|(i, _)| i.clone()).collect()
    }
}

/// True when `path` is a directory directly under `root`, named without `..`.
fn within(root: &Path, path: &Path) -> bool {
    path.parent() == Some(root)
        && path
            .file_name()
            .is_some_and(|n| n != ".." && n != "." && !n.is_empty())
}

/// The pin directory of the agent of `host` with run directory `run_dir`, under `fs`
/// (named by the table tier, so that a testbed finds its agents' pins by the same name).
pub use nfx_fastpath::table::agent_root as root_of;

/// The agent's pin directory, on the host's bpffs (mounted on [`BPF_FS`] if none is),
/// created; `None`, with the reason logged, when the host has no bpffs to pin in (then
/// table chains live only as long as the agent).
pub fn prepare_root(host: &str, run_dir: &Path) -> Option<PathBuf> {
    let fs = Path::new(BPF_FS);
    match nfx_io::bpf::ensure_bpffs(fs) {
        Ok(true) => log::info!("mounted a BPF file system on {BPF_FS}"),
        Ok(false) => {}
        Err(e) => {
            log::warn!(
                "no BPF file system on {BPF_FS} ({e}): table chains will not outlive the agent"
            );
            return None;
        }
    }
    let root = root_of(fs, host, run_dir);
    match std::fs::create_dir_all(&root) {
        Ok(()) => Some(root),
        Err(e) => {
            log::warn!(
                "{}: {e}: table chains will not outlive the agent",
                root.display()
            );
            None
        }
    }
}

/// The manifest file of `service`'s chain on `device` in `dir` (service ids hold no
/// `@`: [`device_of`] finds the device back).
pub fn file_of(dir: &Path, device: &str, service: &str) -> PathBuf {
    record::file_of(dir, &format!("{device}@{service}"))
}

/// The device a manifest file's name (its stem) is of.
pub fn device_of(name: &str) -> &str {
    name.rsplit_once('@').map_or(name, |(d, _)| d)
}

/// Every pin directory under `root` (none when it does not exist).
pub fn pin_dirs(root: &Path) -> Vec<PathBuf> {
    record::paths_in(root, Path::is_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(root: &Path) -> Manifest {
        Manifest {
            device: "tt0".into(),
            service: "tab".into(),
            instances: vec![("fw".into(), 2), ("nat".into(), 1)],
            shape: Shape::default(),
            pins: root.join("tt0-1"),
            ports: ("sw0i".into(), "sw0o".into()),
            selection: None,
        }
    }

    fn recorded(id: &str) -> Option<(String, u64)> {
        match id {
            "fw" => Some(("tt0".into(), 2)),
            "nat" => Some(("tt0".into(), 1)),
            "other" => Some(("tt1".into(), 1)),
            _ => None,
        }
    }

    #[test]
    fn a_manifest_matching_the_records_is_adoptable_and_every_difference_is_named() {
        let root = Path::new("/sys/fs/bpf/nfx/h1-0");
        let ports = ("sw0i", "sw0o");
        let m = manifest(root);
        assert_eq!(m.mismatch(root, "tt0", ports, recorded), None);
        assert_eq!(m.ids(), ["fw", "nat"]);
        let why = |f: &dyn Fn(&mut Manifest)| {
            let mut m = manifest(root);
            f(&mut m);
            m.mismatch(root, "tt0", ports, recorded).unwrap()
        };
        assert!(why(&|m| m.instances[0].1 = 1).contains("version 1, recorded 2"));
        assert!(why(&|m| m.instances[1].0 = "gone".into()).contains("gone is not recorded"));
        assert!(why(&|m| m.instances[1].0 = "other".into()).contains("recorded on tt1"));
        assert!(why(&|m| m.instances[1].0 = "fw".into()).contains("twice"));
        assert!(why(&|m| m.instances.clear()).contains("no instance"));
        assert!(why(&|m| m.device = "tt1".into()).contains("names device"));
        assert!(why(&|m| m.ports.1 = "sw1o".into()).contains("attached to"));
        for bad in [
            "/etc",
            "/sys/fs/bpf/nfx/h1-0/../x",
            "/sys/fs/bpf/nfx/h1-0/a/b",
        ] {
            assert!(
                why(&|m| m.pins = bad.into()).contains("are not under"),
                "{bad}"
            );
        }
        assert!(
            manifest(root)
                .mismatch(root, "tt0", ("sw0i", "sw0o"), |_| None)
                .is_some(),
            "nothing recorded: nothing to adopt"
        );
    }

    #[test]
    fn a_damaged_manifest_is_an_error_naming_its_file() {
        let dir = std::env::temp_dir().join(format!("nfx-tablepins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = Path::new("/r");
        let file = file_of(&dir, "tt0", "tab");
        assert_eq!(device_of("tt0@tab"), "tt0");
        record::save(&file, &manifest(root)).unwrap();
        assert_eq!(record::load::<Manifest>(&file).unwrap(), manifest(root));
        for bad in [
            &b"{\"version\": 1, \"record\": {\"device\""[..],
            b"{\"version\": 1, \"record\": {\"device\": \"tt0\", \"extra\": 1}}",
            b"{\"version\": 7, \"record\": {}}",
        ] {
            std::fs::write(&file, bad).unwrap();
            let e = record::load::<Manifest>(&file).unwrap_err();
            assert!(e.contains("tt0@tab.json"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn agents_with_other_run_directories_or_hosts_pin_apart() {
        let fs = Path::new("/sys/fs/bpf");
        let a = root_of(fs, "h1", Path::new("/tmp/bed-a/h1/run"));
        assert_eq!(a, root_of(fs, "h1", Path::new("/tmp/bed-a/h1/run")));
        assert_ne!(a, root_of(fs, "h1", Path::new("/tmp/bed-b/h1/run")));
        assert_ne!(a, root_of(fs, "h2", Path::new("/tmp/bed-a/h1/run")));
        assert!(
            a.to_string_lossy().starts_with("/sys/fs/bpf/nfx/h1-"),
            "{a:?}"
        );
        let odd = root_of(fs, "../h/1", Path::new("/r"));
        assert_eq!(odd.parent(), Some(fs.join("nfx").as_path()), "{odd:?}");
    }
}
