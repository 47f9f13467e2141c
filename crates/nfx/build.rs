//! Sets `cfg(nfx_no_root)` when the build is not root, so root-only tests are ignored, and
//! `cfg(nfx_no_chromium)` when no headless browser is installed outside CI.

fn main() {
    nfx_buildcfg::root_cfg();
    nfx_buildcfg::chromium_cfg();
}
