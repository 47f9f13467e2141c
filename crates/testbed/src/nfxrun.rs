//! Drives an `nfx run` dataplane process on the testbed's edge: writes its config,
//! starts it, waits for its control socket, reads stats, stops it and collects the
//! final stats it prints.

use crate::process::ChildGuard;
use crate::runconfig::{self, RunSpec};
use crate::Testbed;
use anyhow::{bail, Context};
use nfx_proto::{Client, Stats};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A running `nfx run`; killed when dropped.
pub struct NfxRun {
    child: ChildGuard,
    socket: PathBuf,
    log: PathBuf,
    config: PathBuf,
}

impl NfxRun {
    /// Writes the run config into `dir`, starts `<nfx_bin> run --config FILE <extra>`
    /// and waits (bounded) until its control socket answers.
    pub fn start(
        nfx_bin: &Path,
        tb: &Testbed,
        spec: &RunSpec,
        extra: &[&str],
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let config = dir.join(format!("{}.yaml", spec.name));
        runconfig::write_yaml(&config, &runconfig::run_config(tb, spec)?)?;
        let log = dir.join(format!("{}.log", spec.name));
        let _ = std::fs::remove_file(&spec.control_socket);
        let mut cmd = Command::new(nfx_bin);
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).context("creating dataplane log")?);
        let child = ChildGuard::spawn(cmd)?;
        let mut run = Self {
            child,
            socket: spec.control_socket.clone(),
            log,
            config,
        };
        if let Err(e) = Client::wait_ready(&run.socket, Duration::from_secs(15)) {
            let exited = run.child.exited();
            bail!(
                "nfx run did not come up ({}): {e:#}\n{}",
                if exited { "it exited" } else { "still running" },
                run.log_tail()
            );
        }
        Ok(run)
    }

    /// Path of the config file it runs.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Live stats from the control socket.
    pub fn stats(&self) -> anyhow::Result<Stats> {
        Ok(Client::connect(&self.socket)?
            .with_timeout(Duration::from_secs(5))
            .stats()?)
    }

    /// The last lines of its stderr log (for error messages).
    pub fn log_tail(&self) -> String {
        log_tail("nfx run", &self.log)
    }

    /// Stops it with SIGINT (bounded) and returns the final stats it printed.
    pub fn stop(self) -> anyhow::Result<Stats> {
        let v = stop_for_json(self.child, "nfx run", &self.log, "final stats")?;
        serde_json::from_value(v)
            .context("the final stats of nfx run do not match the stats format")
    }
}

/// The last 15 lines of the stderr log `log` of the nfx process `what`.
pub(crate) fn log_tail(what: &str, log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(15);
    format!(
        "--- {what} log ({}) ---\n{}",
        log.display(),
        lines[from..].join("\n")
    )
}

/// Stops the nfx process `what` with SIGINT (bounded) and parses the JSON object
/// (`output`, e.g. its final stats) it printed last on stdout.
pub(crate) fn stop_for_json(
    mut child: ChildGuard,
    what: &str,
    log: &Path,
    output: &str,
) -> anyhow::Result<Value> {
    let status = child.interrupt(Duration::from_secs(10))?;
    let out = child.take().wait_with_output()?;
    if !status.success() {
        bail!("{what} exited with {status}\n{}", log_tail(what, log));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text
        .find('{')
        .with_context(|| format!("{what} printed no {output}"))?;
    serde_json::from_str(text[start..].trim())
        .with_context(|| format!("{output} of {what} are not JSON: {text}"))
}

/// Reads a JSON-lines event file (missing file = no events; bad lines are skipped
/// with their count returned as the second value).
pub fn read_events(path: &Path) -> (Vec<Value>, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut bad = 0;
    let evs = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v = serde_json::from_str(l).ok();
            bad += usize::from(v.is_none());
            v
        })
        .collect();
    (evs, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runconfig::Chain;
    use crate::Spec;

    #[test]
    fn events_file_is_read_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.jsonl");
        std::fs::write(
            &p,
            "{\"kind\":\"elephant\"}\nnot json\n\n{\"kind\":\"dpi_match\"}\n",
        )
        .unwrap();
        let (evs, bad) = read_events(&p);
        assert_eq!(evs.len(), 2);
        assert_eq!(bad, 1);
        assert_eq!(evs[1]["kind"], "dpi_match");
        assert!(read_events(&dir.path().join("none")).0.is_empty());
    }

    #[test]
    fn a_binary_that_exits_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let tb = Testbed::attach(Spec {
            prefix: "nfxut-absent-".into(),
            subnet_base: 9,
        })
        .unwrap();
        let spec = RunSpec {
            name: "t".into(),
            control_socket: dir.path().join("t.sock"),
            events: None,
            vector: 256,
            poll: "busy".into(),
            chain: Chain::Empty,
        };
        // No testbed exists, so reading the peer MACs fails before anything starts.
        assert!(NfxRun::start(Path::new("/bin/false"), &tb, &spec, &[], dir.path()).is_err());
    }
}
