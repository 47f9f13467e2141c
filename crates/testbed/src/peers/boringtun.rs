//! boringtun (Cloudflare's userspace WireGuard in Rust) as a [`Daemon`] for the
//! WireGuard harness: foreground, one worker thread (faster than its default of 4 on
//! this 2-core machine), no privilege drop (it would lose access to its socket dir).

use super::binary;
use super::wireguard::Daemon;

/// boringtun-cli in the foreground with `--threads 1`.
pub(super) fn daemon() -> anyhow::Result<Daemon> {
    Ok(Daemon {
        short: "bt",
        program: binary("boringtun-cli")?,
        args: vec!["-f", "--threads", "1", "--disable-drop-privileges"],
    })
}
