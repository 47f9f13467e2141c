//! A multi-host testbed with its TLS agents (`nfx testbed up --hosts N`, in-process) and
//! a controller (`nfx up` as a child process on the written infrastructure.yaml), torn
//! down together on drop — on success, error and Ctrl-C alike. Used by `nfx demo` and
//! `nfx bench control --real`.

use super::testbed_hosts;
use anyhow::{bail, Context};
use nfx_control::client::{read_token_file, Client};
use nfx_control::ops::Operation;
use nfx_testbed::hosts::{EndpointInfo, HostsSpec, Layout};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the controller may take to listen.
const CONTROLLER_START: Duration = Duration::from_secs(20);
/// How long one operation may take.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The testbed, the controller and a client of its API; torn down on drop.
pub struct ControlledBed {
    /// Namespace prefix of the testbed.
    pub prefix: String,
    /// The testbed's `--out` directory (infrastructure.yaml, endpoints.json, PKI, the
    /// controller's database and log); removed on drop.
    pub out: PathBuf,
    /// Client of the controller's API (admin token).
    pub api: Client,
    /// What was built (or, simulated, what the devices stand for).
    pub lay: Layout,
    ctl: Option<Child>,
    /// Whether namespaces were built (and are removed on drop).
    testbed: bool,
}

impl Drop for ControlledBed {
    fn drop(&mut self) {
        if let Some(mut c) = self.ctl.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.testbed {
            if let Err(e) = nfx_testbed::hosts::down(&self.prefix) {
                eprintln!("teardown of {}: {e:#}", self.prefix);
            }
        }
        let _ = std::fs::remove_dir_all(&self.out);
    }
}

impl ControlledBed {
    /// Builds the testbed of `spec` into `out` (emptied first; its agents may read files
    /// under `allowed_dirs`), then starts the controller on it with a new API token and
    /// `controller_args` added to its `nfx up` (e.g. `--ssm`).
    pub fn up(
        spec: &HostsSpec,
        out: &Path,
        allowed_dirs: &[PathBuf],
        controller_args: &[&str],
    ) -> anyhow::Result<Self> {
        // The guard exists before anything is built, so a failure half-way is cleaned up.
        let mut bed = Self::empty(spec, out, true);
        bed.lay = testbed_hosts::up_with(spec, out, allowed_dirs, None)?;
        bed.start_controller(controller_args)?;
        Ok(bed)
    }

    /// No namespaces: the controller on an infrastructure.yaml of `spec`'s hosts without
    /// agents, which it serves with its simulated VNFM (no root needed, no packets).
    pub fn simulated(spec: &HostsSpec, out: &Path) -> anyhow::Result<Self> {
        let mut bed = Self::empty(spec, out, false);
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let infra = testbed_hosts::infrastructure(&bed.lay, 2, false);
        let file = out.join("infrastructure.yaml");
        std::fs::write(&file, serde_yaml_ng::to_string(&infra)?)
            .with_context(|| format!("writing {}", file.display()))?;
        bed.start_controller(&[])?;
        Ok(bed)
    }

    fn empty(spec: &HostsSpec, out: &Path, testbed: bool) -> Self {
        let _ = std::fs::remove_dir_all(out);
        ControlledBed {
            prefix: spec.prefix.clone(),
            out: out.to_path_buf(),
            api: Client::new("http://127.0.0.1:1", None),
            lay: spec.layout(),
            ctl: None,
            testbed,
        }
    }

    /// Starts `nfx up` on out/infrastructure.yaml with a new API token and `extra`
    /// arguments; waits until it listens.
    fn start_controller(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        let out = self.out.clone();
        let api_token = out.join("api-token");
        nfx_control::client::write_new_token(&api_token)?;
        let ready = out.join("ready");
        let log = std::fs::File::create(out.join("controller.log"))?;
        self.ctl = Some(
            Command::new(std::env::current_exe()?)
                .args(["up", "--listen", "127.0.0.1:0"])
                .arg("--db")
                .arg(out.join("state.db"))
                .arg("--infra")
                .arg(out.join("infrastructure.yaml"))
                .arg("--token-file")
                .arg(&api_token)
                .arg("--ready-file")
                .arg(&ready)
                .args(extra)
                .env_remove("NFX_TOKEN")
                .env("RUST_LOG", "info")
                // Its own process group: a Ctrl-C reaches only the driver, which then
                // destroys and tears down in order.
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting the controller")?,
        );
        let addr = self.wait_ready(&ready)?;
        self.api = Client::new(
            &format!("http://{addr}"),
            Some(read_token_file(&api_token)?),
        );
        Ok(())
    }

    fn wait_ready(&mut self, ready: &Path) -> anyhow::Result<String> {
        let t = Instant::now();
        loop {
            if let Ok(a) = std::fs::read_to_string(ready) {
                if !a.trim().is_empty() {
                    return Ok(a.trim().to_string());
                }
            }
            if let Some(Ok(Some(st))) = self.ctl.as_mut().map(Child::try_wait) {
                bail!(
                    "the controller exited ({st}); see {}",
                    self.out.join("controller.log").display()
                );
            }
            if t.elapsed() > CONTROLLER_START {
                bail!(
                    "the controller did not listen; see {}",
                    self.out.join("controller.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The endpoint `name` of the layout.
    pub fn endpoint(&self, name: &str) -> anyhow::Result<&EndpointInfo> {
        self.lay
            .endpoint(name)
            .with_context(|| format!("no endpoint {name:?}"))
    }

    /// The namespace of host `host`.
    pub fn host_ns(&self, host: &str) -> String {
        format!("{}{host}", self.prefix)
    }

    /// Waits for operation `op` to end; fails unless it completed.
    pub fn wait_op(&self, op: &Operation) -> anyhow::Result<Operation> {
        self.api.wait_completed(&op.id, OPERATION_TIMEOUT)
    }
}
