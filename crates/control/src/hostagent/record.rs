//! Durable records of what the agent runs outside its software workers (tunnel
//! endpoints, table-tier instances), so that an agent restarted after a crash brings
//! them back ([`super::tunnels`], [`super::tables`]).
//!
//! One record per instance, one file each: `{"version": 1, "record": ...}` in JSON,
//! written to a temporary file, synced and renamed over the old one, so a crash leaves
//! either the old or the new record, never a mix. A record that cannot be read (torn by
//! a disk fault, edited by hand, written by a newer agent) is an error naming its file;
//! it is moved aside into `damaged/` and every other record still loads.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The record format this agent writes and reads.
pub const VERSION: u32 = 1;

/// An instance a restarted agent could not bring back: `(instance, device, reason)`
/// (reported as lost, so the controller places it again).
pub type NotRestored = (String, String, String);

/// Extension of record files.
const EXT: &str = "json";

#[derive(Serialize)]
struct Envelope<'a, T> {
    version: u32,
    record: &'a T,
}

#[derive(Deserialize)]
struct Versioned {
    version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body<T> {
    #[allow(dead_code)]
    version: u32,
    record: T,
}

/// Writes `record` into `file` atomically (temporary file, fsync, rename), mode 0600.
pub fn save<T: Serialize>(file: &Path, record: &T) -> Result<(), String> {
    let text = serde_json::to_vec(&Envelope {
        version: VERSION,
        record,
    })
    .map_err(|e| format!("{}: {e}", file.display()))?;
    let tmp = file.with_extension("tmp");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(&text)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, file));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", file.display())
    })
}

/// Reads the record in `file`; the error names the file and says what is wrong
/// (unreadable, not a record, a version this agent does not read, a bad field).
pub fn load<T: DeserializeOwned>(file: &Path) -> Result<T, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let v: Versioned = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not a record: {e}", file.display()))?;
    if v.version != VERSION {
        return Err(format!(
            "{}: record version {} (this agent reads version {VERSION})",
            file.display(),
            v.version
        ));
    }
    serde_json::from_slice::<Body<T>>(&bytes)
        .map(|b| b.record)
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// The record file of `name` in `dir`.
pub fn file_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.{EXT}"))
}

/// Every record file directly in `dir` (sorted; none when `dir` does not exist).
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    paths_in(dir, |p| {
        p.is_file() && p.extension().is_some_and(|x| x == EXT)
    })
}

/// Every record file directly in `dir` with the name it records (its stem), sorted.
pub fn named_in(dir: &Path) -> Vec<(String, PathBuf)> {
    files_in(dir)
        .into_iter()
        .map(|f| {
            let name = f.file_stem().map(|s| s.to_string_lossy().into_owned());
            (name.unwrap_or_default(), f)
        })
        .collect()
}

/// Every entry directly in `dir` that `keep` accepts (sorted; none when `dir` does not
/// exist).
pub fn paths_in(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| keep(p))
        .collect();
    paths.sort();
    paths
}

/// Moves `path` (a damaged record, or the directory holding one) into `dir/damaged/`
/// for inspection, replacing an earlier one of the same name; returns where it went.
pub fn set_aside(dir: &Path, path: &Path) -> PathBuf {
    let aside = dir.join("damaged");
    let to = aside.join(path.file_name().unwrap_or_default());
    let _ = std::fs::create_dir_all(&aside);
    let _ = std::fs::remove_dir_all(&to);
    let _ = std::fs::remove_file(&to);
    match std::fs::rename(path, &to) {
        Ok(()) => to,
        Err(_) => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct R {
        id: String,
        n: u64,
    }

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("nfx-record-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    #[test]
    fn a_saved_record_reads_back_and_replaces_the_old_one() {
        let d = dir("roundtrip");
        let f = file_of(&d.0, "a");
        save(
            &f,
            &R {
                id: "a".into(),
                n: 1,
            },
        )
        .unwrap();
        save(
            &f,
            &R {
                id: "a".into(),
                n: 2,
            },
        )
        .unwrap();
        assert_eq!(
            load::<R>(&f).unwrap(),
            R {
                id: "a".into(),
                n: 2
            }
        );
        assert_eq!(files_in(&d.0), vec![f.clone()], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn damaged_and_unknown_version_records_are_errors_naming_the_file() {
        let d = dir("damaged");
        let torn = file_of(&d.0, "torn");
        save(
            &torn,
            &R {
                id: "t".into(),
                n: 7,
            },
        )
        .unwrap();
        let bytes = std::fs::read(&torn).unwrap();
        std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
        let e = load::<R>(&torn).unwrap_err();
        assert!(
            e.contains(&torn.display().to_string()) && e.contains("not a record"),
            "{e}"
        );

        // Written by a newer agent, and a field out of its type's range.
        let refused = |name: &str, text: &[u8], why: &str| {
            let f = file_of(&d.0, name);
            std::fs::write(&f, text).unwrap();
            let e = load::<R>(&f).unwrap_err();
            assert!(
                e.contains(&format!("{name}.json")) && e.contains(why),
                "{e}"
            );
            f
        };
        let newer = refused(
            "newer",
            br#"{"version": 2, "record": {"id": "x", "n": 1}}"#,
            "record version 2",
        );
        let field = refused(
            "field",
            br#"{"version": 1, "record": {"id": "x", "n": -1}}"#,
            "invalid value",
        );

        let good = file_of(&d.0, "good");
        save(
            &good,
            &R {
                id: "g".into(),
                n: 3,
            },
        )
        .unwrap();
        // Set aside, the damaged record leaves the directory; the good one stays whole.
        let to = set_aside(&d.0, &torn);
        assert_eq!(to, d.0.join("damaged").join("torn.json"));
        assert_eq!(std::fs::read(&to).unwrap(), bytes[..bytes.len() / 2]);
        assert_eq!(files_in(&d.0), vec![field, good.clone(), newer]);
        assert_eq!(load::<R>(&good).unwrap().n, 3);
    }
}
