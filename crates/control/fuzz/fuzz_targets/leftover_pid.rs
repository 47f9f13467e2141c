//! Fuzz target: the pid files a host agent reads when it starts
//! (`hostagent::leftovers`: `ends/<id>/pid` of a tunnel endpoint, `accel/<id>.pid` of
//! an accelerator device, under its tunnel directory) may be damaged or hostile, and
//! the agent kills what they name as root. Whatever a pid file holds and whatever
//! process the pid is, the agent picks a pid only if the file holds exactly that pid
//! (decimal, above 1, not its own) and the process's command line is the one the agent
//! starts for that file: a program (an interpreter and its script, too), the subcommand
//! (`tunnel` / `accel serve`) as whole arguments, then after them the flag (`--config` /
//! `--socket`) followed by that instance's own path as a whole argument.
//! It also picks it whenever both hold (a real leftover is always stopped). The files
//! are real (a scratch tunnel directory); the process table is the input's: no process
//! is signalled.
//!
//! Input: byte 0 (bit 0: a device, else an endpoint), the instance id, a NUL byte, the
//! pid file's bytes, a NUL byte, then `/proc/<pid>/cmdline` of the process it names.
#![no_main]

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nfx_control::hostagent::leftovers::{leftover, pid_files};

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| nfx_control_fuzz::scratch("leftovers"))
}

/// The pid the target itself reads from the file's bytes.
fn pid_of(text: &[u8]) -> Option<i32> {
    let t = std::str::from_utf8(text)
        .ok()?
        .trim_matches(|c: char| c.is_ascii_whitespace());
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// True when `cmdline` is `program`, `words`, then somewhere `flag path`.
fn is_started(cmdline: &[u8], words: &[&str], flag: &str, path: &Path) -> bool {
    let Some(body) = cmdline.strip_suffix(b"\0") else {
        return false;
    };
    let args: Vec<&[u8]> = body.split(|b| *b == 0).collect();
    let path = path.as_os_str().as_encoded_bytes();
    (1..args.len()).any(|start| {
        let after = start + words.len();
        after <= args.len()
            && words
                .iter()
                .enumerate()
                .all(|(i, w)| args[start + i] == w.as_bytes())
            && (after..args.len().saturating_sub(1))
                .any(|i| args[i] == flag.as_bytes() && args[i + 1] == path)
    })
}

fuzz_target!(|data: &[u8]| {
    let [kind, rest @ ..] = data else { return };
    let mut parts = rest.splitn(3, |b| *b == 0);
    let (Some(id), Some(text), Some(cmdline)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let Ok(id) = std::str::from_utf8(id) else {
        return;
    };
    if id.is_empty() || id.len() > 64 || id.contains('/') || id.starts_with('.') {
        return;
    }
    let device = kind & 1 != 0;
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    let (file, words, flag, path): (PathBuf, &[&str], &str, PathBuf) = if device {
        std::fs::create_dir_all(dir.join("accel").join(id)).expect("device dir");
        (
            dir.join("accel").join(format!("{id}.pid")),
            &["accel", "serve"],
            "--socket",
            dir.join("accel").join(id).join("device.sock"),
        )
    } else {
        std::fs::create_dir_all(dir.join("ends").join(id)).expect("endpoint dir");
        (
            dir.join("ends").join(id).join("pid"),
            &["tunnel"],
            "--config",
            dir.join("ends").join(id).join("tunnel.yaml"),
        )
    };
    std::fs::write(&file, text).expect("pid file");
    let files = pid_files(dir);
    assert_eq!(files.len(), 1, "one pid file written: {files:?}");
    assert_eq!(files[0].file, file);
    let asked = Cell::new(None);
    let picked = leftover(&files[0], |pid| {
        asked.set(Some(pid));
        Some(cmdline.to_vec())
    });
    let expected = pid_of(text)
        .filter(|pid| *pid > 1 && *pid != std::process::id() as i32)
        .filter(|_| is_started(cmdline, words, flag, &path));
    assert_eq!(picked, expected, "pid file {text:?}, cmdline {cmdline:?}");
    if let Some(pid) = picked {
        assert_eq!(
            asked.get(),
            Some(pid),
            "picked a pid whose command line was not read"
        );
    }
});
