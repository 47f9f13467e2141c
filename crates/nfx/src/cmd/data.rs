//! The repository's data files that commands read by default, compiled into the binary so
//! an installed `nfx` (`cargo install --path crates/nfx`) works outside the repository.
//! A file on disk wins: relative to the current directory or above the binary
//! ([`locate`]); otherwise the embedded copy is written into the caller's private
//! directory and that path is used.

use std::path::{Path, PathBuf};

use anyhow::Context;
use nfx_testbed::runconfig::locate;

/// Repository-relative path and contents of every embedded data file.
const EMBEDDED: &[(&str, &str)] = &[
    (
        "configs/demo/tenant-a.yaml",
        include_str!("../../../../configs/demo/tenant-a.yaml"),
    ),
    (
        "configs/demo/tenant-b.yaml",
        include_str!("../../../../configs/demo/tenant-b.yaml"),
    ),
    (
        "configs/dpi/patterns.txt",
        include_str!("../../../../configs/dpi/patterns.txt"),
    ),
    (
        "configs/energy/infrastructure.yaml",
        include_str!("../../../../configs/energy/infrastructure.yaml"),
    ),
];

/// `rel` found on disk, else its embedded copy written into `dir` (a directory the caller
/// owns, e.g. its run's temporary directory). An absolute `rel` is used as it is.
pub fn resolve(rel: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let missing = match locate(rel) {
        Ok(p) => return Ok(p),
        Err(e) => e,
    };
    let Some((name, text)) = EMBEDDED.iter().find(|(r, _)| Path::new(r) == rel) else {
        return Err(missing);
    };
    let file = Path::new(name).file_name().context("embedded file name")?;
    let path = dir.join(file);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nfx-data-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn embedded_copies_equal_the_repository_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (rel, text) in EMBEDDED {
            assert_eq!(
                std::fs::read_to_string(root.join(rel)).unwrap(),
                *text,
                "{rel}"
            );
        }
    }

    #[test]
    fn unknown_missing_files_stay_errors() {
        let d = tmp("missing");
        assert!(resolve(Path::new("configs/no/such.txt"), &d).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn an_absolute_path_is_kept() {
        let d = tmp("abs");
        let p = d.join("mine.txt");
        assert_eq!(resolve(&p, &d).unwrap(), p);
        std::fs::remove_dir_all(d).unwrap();
    }
}
