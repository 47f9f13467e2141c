//! Drives an `nfx run` dataplane process on the testbed's edge: writes its config,
//! starts it, waits for its control socket, reads stats, stops it and collects the
//! final stats it prints.

use crate::process::ChildGuard;
use crate::runconfig::{self, RunSpec};
use crate::{control, Testbed};
use anyhow::{bail, Context};
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
        if let Err(e) = control::wait_ready(&run.socket, Duration::from_secs(15)) {
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
    pub fn stats(&self) -> anyhow::Result<Value> {
        control::stats(&self.socket)
    }

    /// The last lines of its stderr log (for error messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(15);
        format!("--- nfx run log ({}) ---\n{}", self.log.display(), lines[from..].join("\n"))
    }

    /// Stops it with SIGINT (bounded) and returns the final stats JSON it printed.
    pub fn stop(mut self) -> anyhow::Result<Value> {
        let status = self.child.interrupt(Duration::from_secs(10))?;
        let out = self.child.take().wait_with_output()?;
        if !status.success() {
            bail!("nfx run exited with {status}\n{}", self.log_tail());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let start = text.find('{').context("nfx run printed no final stats")?;
        serde_json::from_str(text[start..].trim())
            .with_context(|| format!("final stats of nfx run are not JSON: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runconfig::Chain;
    use crate::Spec;

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
