//! The persisted sequence reservation of a statically keyed outbound SA
//! (`insecure_static_keys: true`). A static key lives across restarts, so its sequence
//! numbers (the AEAD nonces) must too: before the first packet of a block is sent,
//! `next = first + block` is written to the state file and fsynced; a restart starts
//! at the stored `next`, so no (SPI, sequence) pair, and no (key, nonce) pair, is ever
//! used twice, whatever happens to the process. At most one block per restart is
//! skipped.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A reserved range of sequence numbers backed by a state file.
#[derive(Debug)]
pub struct SeqState {
    path: PathBuf,
    block: u64,
    /// First sequence number not reserved yet.
    until: u64,
}

/// Why the state file cannot be used (the endpoint refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum SeqStateError {
    /// Reading or writing failed.
    #[error("sequence state {}: {err}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        err: io::Error,
    },
    /// The file exists but does not hold `next = N` (its content is not quoted).
    #[error("sequence state {}: not an nfx sequence state file; refusing to guess a sequence number", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
    },
}

const MAGIC: &str = "nfx-esp-seq-v1 next=";

impl SeqState {
    /// Opens (or creates) the state at `path`, reserves the first block and returns
    /// the state with the first sequence number to use.
    pub fn open(path: &Path, block: u64) -> Result<(SeqState, u64), SeqStateError> {
        let io = |err| SeqStateError::Io {
            path: path.into(),
            err,
        };
        let start = match std::fs::read_to_string(path) {
            Ok(text) => text
                .trim()
                .strip_prefix(MAGIC)
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| SeqStateError::Corrupt { path: path.into() })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 1,
            Err(e) => return Err(io(e)),
        };
        let mut st = SeqState {
            path: path.into(),
            block: block.max(1),
            until: start,
        };
        st.reserve_from(start).map_err(io)?;
        Ok((st, start))
    }

    /// First sequence number not covered by the reservation.
    pub fn until(&self) -> u64 {
        self.until
    }

    /// Reserves `[seq, seq + block)`: the file says `next = seq + block`, durably,
    /// before this returns (write to a temporary file, fsync, rename, fsync the
    /// directory).
    pub fn reserve_from(&mut self, seq: u64) -> io::Result<()> {
        let next = seq.saturating_add(self.block);
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            writeln!(f, "{MAGIC}{next}")?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)?.sync_all()?;
        self.until = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "nfx-seq-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn restarts_continue_past_the_reservation() {
        let p = dir().join("s1");
        let _ = std::fs::remove_file(&p);
        let (mut s, start) = SeqState::open(&p, 100).unwrap();
        assert_eq!((start, s.until()), (1, 101));
        s.reserve_from(101).unwrap();
        assert_eq!(s.until(), 201);
        // A crash here: the next process starts at 201, beyond anything used.
        let (s2, start2) = SeqState::open(&p, 100).unwrap();
        assert_eq!((start2, s2.until()), (201, 301));
    }

    #[test]
    fn a_corrupt_file_is_refused_without_quoting_it() {
        let p = dir().join("s2");
        std::fs::write(&p, "SECRET-STUFF").unwrap();
        let e = SeqState::open(&p, 10).unwrap_err().to_string();
        assert!(e.contains("refusing") && !e.contains("SECRET"), "{e}");
        std::fs::write(&p, format!("{MAGIC}0\n")).unwrap();
        assert!(SeqState::open(&p, 10).is_err());
    }
}
