//! Compiles the tc programs with clang for the BPF target: the fast path
//! (bpf/fastpath.bpf.c) and the table-tier VNFs (bpf/hvnf.bpf.c and its headers).

use std::path::PathBuf;
use std::process::Command;

fn compile(src: &str, out: &str, extra: &[&str], deps: &[&str]) {
    for d in std::iter::once(&src).chain(deps) {
        println!("cargo:rerun-if-changed={d}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join(out);
    let arch_include = format!(
        "/usr/include/{}-linux-gnu",
        std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .args(extra)
        .arg(format!("-I{arch_include}"))
        .args(["-c", src, "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("running clang for {src}: {e} (install clang and libbpf-dev: scripts/deps.sh)")
        });
    assert!(status.success(), "clang failed on {src}");
}

fn main() {
    nfx_buildcfg::root_cfg();
    compile("bpf/fastpath.bpf.c", "fastpath.bpf.o", &[], &[]);
    // BPF ISA v3: 32-bit atomics and compare-and-swap (connection-tracking transitions).
    compile(
        "bpf/hvnf.bpf.c",
        "hvnf.bpf.o",
        &["-mcpu=v3"],
        &[
            "bpf/hvnf.h",
            "bpf/hvnf_common.h",
            "bpf/hvnf_parse.h",
            "bpf/hvnf_fw.h",
            "bpf/hvnf_rewrite.h",
            "bpf/hvnf_nat.h",
            "bpf/hvnf_ele.h",
        ],
    );
}
