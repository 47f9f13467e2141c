//! Helpers of the end-to-end tests on the multi-host testbed (`nfx testbed up --hosts`):
//! running the CLI with the API token, and guards that tear the testbed and the
//! controller down on failure too.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `nfx` binary under test.
pub const NFX: &str = env!("CARGO_BIN_EXE_nfx");

/// Runs `nfx ARGS` with `NFX_TOKEN=token`, bounded; returns stdout or fails with stderr.
pub fn nfx(token: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(NFX);
    cmd.args(args)
        .env("NFX_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = nfx_testbed::process::output_within(cmd, Duration::from_secs(120)).unwrap();
    assert!(
        out.status.success(),
        "nfx {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the testbed of this prefix (agents and workers with it) on drop.
pub struct Down(pub &'static str);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(NFX)
            .args(["testbed", "down", "--prefix", self.0])
            .status();
    }
}

/// Kills the controller on drop.
pub struct Ctl(pub Child);

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
