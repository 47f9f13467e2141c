//! The root check every namespace operation starts with.

/// The message shown when a testbed operation is attempted without root.
pub const NEED_ROOT: &str = "nfx testbed needs root (network namespaces): run with sudo";

/// Fails with [`NEED_ROOT`] unless the effective uid is 0.
///
/// Checked before anything is touched so a non-root user gets one clear line
/// instead of a cascade of `ip` errors.
pub fn require_root() -> anyhow::Result<()> {
    check_euid(effective_uid())
}

/// The effective uid of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The decision of [`require_root`] for a given effective uid (separate so it is testable).
pub fn check_euid(euid: u32) -> anyhow::Result<()> {
    if euid == 0 {
        Ok(())
    } else {
        anyhow::bail!(NEED_ROOT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_passes_and_others_get_the_message() {
        assert!(check_euid(0).is_ok());
        let err = check_euid(1000).unwrap_err().to_string();
        assert_eq!(err, NEED_ROOT);
    }
}
