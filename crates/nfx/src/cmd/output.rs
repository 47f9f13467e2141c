//! How every `nfx` command writes: machine output through `--json FILE` / `--json -`,
//! human text through [`say!`](crate::say), progress bars on stderr (drawn only when
//! stderr is a terminal). docs/cli.md states the rules.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// Set once `--json -` was parsed: stdout then carries only the JSON document, and human
/// text goes to stderr.
static STDOUT_IS_JSON: AtomicBool = AtomicBool::new(false);

/// The progress bar being drawn, so text printed meanwhile clears it first.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Where a command writes its machine-readable result: `--json FILE`, or `--json -` for
/// stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonOut {
    /// Standard output (`-`).
    Stdout,
    /// A file, replaced if present.
    File(PathBuf),
}

impl std::str::FromStr for JsonOut {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" => Err("an empty path (use `-` for stdout)".into()),
            "-" => {
                STDOUT_IS_JSON.store(true, Ordering::Relaxed);
                Ok(Self::Stdout)
            }
            p => Ok(Self::File(PathBuf::from(p))),
        }
    }
}

impl JsonOut {
    /// Writes `v` as pretty JSON and a newline.
    pub fn write<T: Serialize + ?Sized>(&self, v: &T) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(v)? + "\n";
        match self {
            Self::Stdout => {
                use std::io::Write;
                suspended(|| {
                    let mut out = std::io::stdout().lock();
                    out.write_all(text.as_bytes())?;
                    out.flush()
                })
                .context("writing JSON to stdout")
            }
            Self::File(p) => {
                std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))
            }
        }
    }
}

/// Runs `f` with any progress bar cleared from the terminal, then redraws it.
fn suspended<R>(f: impl FnOnce() -> R) -> R {
    let bar = ACTIVE.lock().ok().and_then(|g| g.clone());
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}

/// Prints human text: to stdout, or to stderr when stdout carries `--json -`.
pub fn say(args: std::fmt::Arguments<'_>) {
    suspended(|| {
        if STDOUT_IS_JSON.load(Ordering::Relaxed) {
            eprintln!("{args}");
        } else {
            println!("{args}");
        }
    });
}

/// Prints a progress note on stderr without tearing a progress bar.
pub fn note(args: std::fmt::Arguments<'_>) {
    suspended(|| eprintln!("{args}"));
}

/// `println!` for human text (see [`say`]).
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => { $crate::cmd::output::say(format_args!($($t)*)) };
}

/// `eprintln!` for progress notes while a bar may be drawn (see [`note`]).
#[macro_export]
macro_rules! note {
    ($($t:tt)*) => { $crate::cmd::output::note(format_args!($($t)*)) };
}

/// A progress bar on stderr, hidden when stderr is not a terminal; cleared when dropped.
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar of `len` steps named `what`.
    pub fn bar(what: &str, len: u64) -> Self {
        let style = ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta}) {msg}",
        )
        .expect("a valid template");
        Self::start(
            ProgressBar::with_draw_target(Some(len), target()),
            what,
            style,
        )
    }

    /// A spinner named `what` for work of unknown length.
    pub fn spinner(what: &str) -> Self {
        let style = ProgressStyle::with_template("{prefix} {spinner} [{elapsed_precise}] {msg}")
            .expect("a valid template");
        let p = Self::start(ProgressBar::with_draw_target(None, target()), what, style);
        p.0.enable_steady_tick(Duration::from_millis(200));
        p
    }

    fn start(pb: ProgressBar, what: &str, style: ProgressStyle) -> Self {
        pb.set_style(style);
        pb.set_prefix(what.to_string());
        if let Ok(mut g) = ACTIVE.lock() {
            *g = Some(pb.clone());
        }
        Self(pb)
    }

    /// One step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    /// Sets the steps done.
    pub fn set(&self, pos: u64) {
        self.0.set_position(pos);
    }

    /// Changes the total.
    pub fn set_len(&self, len: u64) {
        self.0.set_length(len);
    }

    /// The text after the bar (the current case, instance, phase...).
    pub fn message(&self, msg: impl Into<String>) {
        self.0.set_message(msg.into());
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
        if let Ok(mut g) = ACTIVE.lock() {
            *g = None;
        }
    }
}

/// Stderr at a modest refresh rate; indicatif draws nothing when it is not a terminal.
fn target() -> ProgressDrawTarget {
    ProgressDrawTarget::stderr_with_hz(5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_out_parses_dash_and_paths() {
        assert_eq!(
            "out.json".parse::<JsonOut>().unwrap(),
            JsonOut::File("out.json".into())
        );
        assert!("".parse::<JsonOut>().is_err());
        assert_eq!("-".parse::<JsonOut>().unwrap(), JsonOut::Stdout);
    }

    #[test]
    fn json_out_writes_a_file() {
        let p = std::env::temp_dir().join(format!("nfx-json-out-{}.json", std::process::id()));
        JsonOut::File(p.clone())
            .write(&serde_json::json!({"a": 1}))
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["a"], 1);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn bars_are_hidden_off_a_terminal() {
        // The test harness captures stderr: nothing may be drawn into it.
        let p = Progress::bar("t", 3);
        p.inc();
        assert!(p.0.is_hidden() || std::io::IsTerminal::is_terminal(&std::io::stderr()));
    }
}
