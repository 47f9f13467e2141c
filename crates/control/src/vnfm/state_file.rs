//! The local agent's record of its running workers, kept in two alternating slot files
//! (`local-agent.a`, `local-agent.b`) that are overwritten in place.
//!
//! Why not write-to-temp-and-rename: on ext4 a rename that replaces a file forces the
//! new file's blocks to be allocated at once (`auto_da_alloc`), which costs ~0.3 ms on
//! this VM — a third of the 1 ms deploy budget. Overwriting an existing slot costs a few
//! microseconds. Each slot holds one line of JSON `{"seq": N, "workers": ...}`, a line
//! with the FNV-1a hash of that JSON, and spaces up to the slot's earlier length (a slot
//! never shrinks, so no truncation is needed). A write that a crash cut short fails its
//! hash, and the loader takes the other slot, which holds the previous record: the
//! record is replaced all or nothing.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const SLOTS: [&str; 2] = ["local-agent.a", "local-agent.b"];

/// Writes records into the two slots of one run directory, alternately.
#[derive(Debug)]
pub struct StateFile {
    dir: PathBuf,
    /// Sequence number of the newest record on disk (0: none yet).
    seq: u64,
}

#[derive(Serialize, Deserialize)]
struct Record<T> {
    seq: u64,
    workers: T,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The record in one slot's bytes, if it is whole (hash matches) and parses.
fn parse_slot<T: DeserializeOwned>(bytes: &[u8]) -> Option<Record<T>> {
    let mut lines = bytes.splitn(3, |b| *b == b'\n');
    let json = lines.next()?;
    let hash = std::str::from_utf8(lines.next()?).ok()?;
    if u64::from_str_radix(hash, 16).ok()? != fnv1a(json) {
        return None;
    }
    serde_json::from_slice(json).ok()
}

impl StateFile {
    /// Opens the slots of `dir` and returns the newest whole record in them (`None`
    /// when neither slot holds one, e.g. a fresh directory).
    pub fn open<T: DeserializeOwned>(dir: &Path) -> (StateFile, Option<T>) {
        Self::open_checked(dir, |_: &T| Ok(()))
    }

    /// [`StateFile::open`] taking only records that pass `check`: a record that parses
    /// but does not hold together counts as a broken slot (logged), so the other slot's
    /// record is taken.
    pub fn open_checked<T: DeserializeOwned>(
        dir: &Path,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> (StateFile, Option<T>) {
        let best = SLOTS
            .iter()
            .filter_map(|s| Some((s, std::fs::read(dir.join(s)).ok()?)))
            .filter_map(|(s, b)| {
                let r = parse_slot::<T>(&b)?;
                match check(&r.workers) {
                    Ok(()) => Some(r),
                    Err(e) => {
                        log::warn!("{}: record {} ignored: {e}", dir.join(s).display(), r.seq);
                        None
                    }
                }
            })
            .max_by_key(|r| r.seq);
        let seq = best.as_ref().map_or(0, |r| r.seq);
        (
            StateFile {
                dir: dir.to_path_buf(),
                seq,
            },
            best.map(|r| r.workers),
        )
    }

    /// Writes `workers` as the next record, over the older slot.
    pub fn save<T: Serialize>(&mut self, workers: &T) -> std::io::Result<()> {
        let seq = self.seq + 1;
        let mut text = serde_json::to_vec(&Record { seq, workers })?;
        let hash = fnv1a(&text);
        text.extend_from_slice(format!("\n{hash:016x}\n").as_bytes());
        let path = self.dir.join(SLOTS[(seq % 2) as usize]);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let old_len = f.metadata()?.len() as usize;
        if text.len() < old_len {
            text.resize(old_len, b' ');
        }
        f.write_all_at(&text, 0)?;
        self.seq = seq;
        Ok(())
    }
}

/// The pid of every worker recorded in `run_dir` by device (for tools and tests that
/// must stop workers an agent left behind).
pub fn recorded_pids(run_dir: &Path) -> Vec<(String, u32)> {
    let (_, workers) = StateFile::open::<serde_json::Value>(run_dir);
    workers
        .and_then(|w| {
            w.as_object().map(|m| {
                m.iter()
                    .filter_map(|(d, w)| Some((d.clone(), u32::try_from(w["pid"].as_u64()?).ok()?)))
                    .collect()
            })
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reopen(dir: &Path) -> Option<serde_json::Value> {
        StateFile::open(dir).1
    }

    /// A fresh directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let d = std::env::temp_dir().join(format!("nfx-sf-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn newest_record_wins_and_slots_alternate() {
        let dir = TempDir::new("alternate");
        let (mut f, none) = StateFile::open::<serde_json::Value>(dir.path());
        assert!(none.is_none());
        f.save(&json!({"w0": {"pid": 10}})).unwrap();
        f.save(&json!({"w0": {"pid": 11}, "w1": {"pid": 12}}))
            .unwrap();
        assert!(dir.path().join(SLOTS[0]).exists() && dir.path().join(SLOTS[1]).exists());
        // A shorter record over a longer slot: padded, still read back exactly.
        f.save(&json!({})).unwrap();
        assert_eq!(reopen(dir.path()), Some(json!({})));
        let (mut g, last) = StateFile::open::<serde_json::Value>(dir.path());
        assert_eq!(last, Some(json!({})));
        g.save(&json!({"w2": {"pid": 13}})).unwrap();
        assert_eq!(recorded_pids(dir.path()), vec![("w2".to_string(), 13)]);
    }

    #[test]
    fn a_torn_write_falls_back_to_the_previous_record() {
        let dir = TempDir::new("torn");
        let (mut f, _) = StateFile::open::<serde_json::Value>(dir.path());
        f.save(&json!({"w0": {"pid": 1}})).unwrap();
        f.save(&json!({"w0": {"pid": 2}})).unwrap();
        // Cut the newest slot short, as a crash in the middle of its write would.
        let newest = dir.path().join(SLOTS[0]);
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(reopen(dir.path()), Some(json!({"w0": {"pid": 1}})));
        // A flipped byte inside the JSON fails the hash as well.
        let mut bad = bytes.clone();
        bad[10] ^= 1;
        std::fs::write(&newest, &bad).unwrap();
        assert_eq!(reopen(dir.path()), Some(json!({"w0": {"pid": 1}})));
        std::fs::write(&newest, &bytes).unwrap();
        assert_eq!(reopen(dir.path()), Some(json!({"w0": {"pid": 2}})));
    }

    #[test]
    fn garbage_slots_read_as_no_record() {
        let dir = TempDir::new("garbage");
        std::fs::write(dir.path().join(SLOTS[0]), b"not json\nzz\n").unwrap();
        std::fs::write(dir.path().join(SLOTS[1]), b"").unwrap();
        assert_eq!(reopen(dir.path()), None);
        assert!(recorded_pids(dir.path()).is_empty());
    }
}
