//! Build-script helpers shared by the nfx crates (a build-dependency, never a runtime one).
//!
//! Tests that need root (network namespaces, BPF, cgroups, raw sockets) carry
//! `#[cfg_attr(nfx_no_root, ignore = "needs root")]`: a build that does not run as root
//! reports them as ignored instead of failing them or letting them pass without checking
//! anything. Each crate with such tests calls [`root_cfg`] from its `build.rs`.

/// Declares the `nfx_no_root` cfg and sets it when the build's effective uid is not 0.
pub fn root_cfg() {
    println!("cargo::rustc-check-cfg=cfg(nfx_no_root)");
    if effective_uid().as_deref() != Some("0") {
        println!("cargo::rustc-cfg=nfx_no_root");
    }
}

/// The effective uid of the build (the second field of `Uid:` in /proc/self/status), if readable.
fn effective_uid() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1).map(str::to_string)
}

/// Declares the `nfx_no_chromium` cfg and sets it when Debian's `chromium` or
/// `chromedriver` is not on `PATH` and the build is not in CI (`CI=true`): browser tests
/// carry `#[cfg_attr(nfx_no_chromium, ignore = "...")]`, so a developer without a browser
/// sees them ignored, while in CI a missing browser fails them.
pub fn chromium_cfg() {
    println!("cargo::rustc-check-cfg=cfg(nfx_no_chromium)");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=PATH");
    let on_path = |bin: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
    };
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let installed = on_path("chromium") && on_path("chromedriver");
    if !(ci || installed) {
        println!("cargo::rustc-cfg=nfx_no_chromium");
    }
}
