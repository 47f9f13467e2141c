//! Fuzz target: a worker's whole run configuration (`nfx run --config FILE`, read as
//! root; a host agent writes one per worker, an operator writes their own), in the
//! chain form or the services form. Whatever the text, it parses into a configuration
//! or fails with an error naming the file, never a panic. An accepted configuration
//! writes back to YAML that parses to the same configuration (the agent writes its
//! workers' files that way), names its control socket, and each of its instances
//! builds through the builder `nfx run` uses (`vnf_builder(cfg.file_scope())`) or fails
//! with an error; files are read within a scratch config directory holding valid
//! files, files holding a canary and a symlink out of it, and no error shows the canary
//! unless the text itself names it. (`services` drives the services form's frames,
//! `configs` one chain entry in isolation.)
//!
//! Input: the YAML text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_dataplane::{config, vnf_builder};
use nfx_vnf_fuzz::{scratch_scope, CANARY};

/// Caps the table sizes a spec asks for, so that one input cannot allocate gigabytes.
fn shrink(v: &mut serde_json::Value) {
    const SIZES: [&str; 4] = ["max_flows", "stream_flows", "event_table", "depth_flows"];
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if SIZES.contains(&k.as_str()) && x.as_u64().is_some_and(|n| n > 4096) {
                    *x = 4096.into();
                } else {
                    shrink(x);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(shrink),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let files = scratch_scope();
    let file = files.base().join("run.yaml").display().to_string();
    let cfg = match config::parse(text, &file) {
        Ok(cfg) => cfg,
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with(&file), "error without the file: {shown}");
            return;
        }
    };
    let yaml = serde_yaml_ng::to_string(&cfg).expect("a parsed config serializes");
    let again = config::parse(&yaml, &file)
        .unwrap_or_else(|e| panic!("the written config does not parse: {e}\n{yaml}"));
    assert_eq!(
        again, cfg,
        "the written config parses to another one:\n{yaml}"
    );
    assert_eq!(cfg.file_scope().base(), files.base());
    let sock = cfg.socket_path();
    if cfg.control_socket.is_none() {
        assert_eq!(sock.parent(), Some(std::path::Path::new("/run/nfx")));
        assert_eq!(
            sock.file_name().and_then(|n| n.to_str()),
            Some(&*format!("{}.sock", cfg.name))
        );
    }
    let _ = cfg.control_gid();
    let topo = config::topology(&cfg).expect("a parsed config has its topology");
    let build = vnf_builder(cfg.file_scope());
    let names_canary = text.contains(CANARY);
    for i in &topo.instances {
        let mut spec = i.spec.clone();
        shrink(&mut spec);
        match build(&i.id, &spec) {
            Ok(node) => assert_eq!(node.name(), i.id),
            Err(e) => {
                let shown = e.to_string();
                assert!(
                    names_canary || !shown.contains(CANARY),
                    "an error shows a file's content: {shown}"
                );
            }
        }
    }
});
