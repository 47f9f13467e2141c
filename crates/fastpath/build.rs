//! Compiles the tc program (bpf/fastpath.bpf.c) with clang for the BPF target.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/fastpath.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("fastpath.bpf.o");
    let arch_include = format!(
        "/usr/include/{}-linux-gnu",
        std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I{arch_include}"))
        .args(["-c", src, "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("running clang for {src}: {e} (install clang and libbpf-dev: scripts/deps.sh)")
        });
    assert!(status.success(), "clang failed on {src}");
}
