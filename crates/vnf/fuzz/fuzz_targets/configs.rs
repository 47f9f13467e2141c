//! Fuzz target: chain entries of any text, as YAML (the run config) or JSON (REST and
//! `reconfigure` bodies), deserialize into a node spec and build, or fail with an
//! error; never a panic, and no error ever shows a byte of a file the spec names.
//! Files are read within a scratch config directory that holds valid files, files
//! holding a canary, and a symlink out of it (see `scratch_scope`).
//!
//! Input: byte 0 bit 0 picks YAML (0) or JSON (1); the rest is the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_vnf::{build, NodeSpec};
use nfx_vnf_fuzz::{scratch_scope, CANARY};

/// Caps the sizes a spec asks for, so that one input cannot allocate gigabytes.
fn shrink(spec: &mut NodeSpec) {
    match spec {
        NodeSpec::Firewall(c) => c.max_flows = c.max_flows.min(4096),
        NodeSpec::Nat(c) => c.max_flows = c.max_flows.min(4096),
        NodeSpec::Dpi(c) => {
            c.stream_flows = c.stream_flows.min(1024);
            c.event_table = c.event_table.min(1024);
            c.depth_flows = c.depth_flows.min(1024);
        }
        NodeSpec::Elephant(c) => c.max_flows = c.max_flows.min(4096),
    }
}

fuzz_target!(|data: &[u8]| {
    let [format, text @ ..] = data else {
        return;
    };
    let value: Option<serde_json::Value> = if format & 1 == 0 {
        serde_yaml_ng::from_slice(text).ok()
    } else {
        serde_json::from_slice(text).ok()
    };
    let Some(value) = value else { return };
    let Ok(mut spec) = serde_json::from_value::<NodeSpec>(value) else {
        return;
    };
    shrink(&mut spec);
    // A spec that names the canary itself may see it echoed (names are config text).
    let names_canary = text.windows(CANARY.len()).any(|w| w == CANARY.as_bytes());
    if let Err(e) = build(&spec, spec.kind(), scratch_scope()) {
        let shown = e.to_string();
        assert!(
            names_canary || !shown.contains(CANARY),
            "an error shows a file's content: {shown}"
        );
    }
});
