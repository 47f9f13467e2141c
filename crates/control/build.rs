//! Sets `cfg(nfx_no_root)` when the build is not root, so root-only tests are ignored.

fn main() {
    nfx_buildcfg::root_cfg();
}
