//! Fuzz target: what the host agent reads back when it starts. Its workers' record
//! (`run_dir/workers/local-agent.{a,b}`, [`nfx_control::vnfm::state_file`]: a JSON line,
//! its FNV-1a hash, padding) may be cut short by a crash or damaged on disk, and its
//! configuration files (`nfx agent --config`, `nfx local-agent --config`) are operator
//! input. The first byte picks the file:
//!
//! - 0: a whole record of one worker sits in slot `b` (sequence 1); the input, sealed
//!   with its right hash (second byte, bit 0) or as raw bytes, goes into slot `a`; the
//!   local VNFM opens the directory. Nothing panics; unless slot `a` is a sealed record
//!   with a later sequence number, the VNFM holds exactly slot `b`'s worker (a broken
//!   record loses nothing else); every instance it holds then answers a state query,
//!   a configure and a destroy with a result or an error (its worker's socket is gone).
//! - 1, 2: the input is the agent's or the local agent's configuration file: it loads or
//!   fails with an error naming the file.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nfx_control::hostagent::AgentConfig;
use nfx_control::vnfm::local::{LocalConfig, LocalVnfm};
use nfx_control::vnfm::state_file::{recorded_pids, StateFile};
use nfx_control::vnfm::Vnfm;
use nfx_control_fuzz::scratch;

/// The record slot `b` holds: device `sw0` runs instance `keep-fw` (no process).
fn good_record() -> serde_json::Value {
    serde_json::json!({
        "sw0": {
            "instances": [{"id": "keep-fw", "function": "firewall", "device": "sw0",
                           "config": {"default": "accept"}, "throughput_gbps": 1.0,
                           "capacity": 1.0}],
            "nodes": ["keep-fw"],
            "config_versions": [1],
            "pid": null
        }
    })
}

/// FNV-1a, as the state file seals a record.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The sequence number of a sealed slot whose JSON has one, read as leniently as the
/// loader reads a record (other fields are not looked at).
fn sealed_seq(json: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_slice::<Seq>(json).ok().map(|s| s.seq)
}

fn slots(dir: &Path, flags: u8, input: &[u8]) {
    let run = dir.join("workers");
    std::fs::create_dir_all(&run).expect("run dir");
    let (mut sf, none) = StateFile::open::<serde_json::Value>(&run);
    assert!(none.is_none());
    sf.save(&good_record()).expect("slot b");
    let sealed = flags & 1 != 0;
    let bytes = if sealed {
        let mut b = input.to_vec();
        b.extend_from_slice(format!("\n{:016x}\n", fnv1a(input)).as_bytes());
        b
    } else {
        input.to_vec()
    };
    std::fs::write(run.join("local-agent.a"), &bytes).expect("slot a");
    let _ = recorded_pids(&run);
    let vnfm = LocalVnfm::new(LocalConfig {
        run_dir: run,
        nfx_bin: Some(dir.join("no-such-nfx")),
        workers: BTreeMap::new(),
    })
    .expect("local VNFM");
    let ids = vnfm.list_instances().expect("instances");
    let newer = sealed && sealed_seq(input).is_some_and(|s| s > 1);
    if !newer {
        assert_eq!(ids, ["keep-fw"], "slot b's record was lost");
    }
    for id in ids.iter().take(8) {
        let _ = vnfm.get_instance_state(id);
        let _ = vnfm.configure_instance(id, &serde_json::json!({}));
    }
    for id in ids.iter().take(8) {
        let _ = vnfm.destruct_instance(id);
    }
}

fn config_file(dir: &Path, kind: u8, input: &[u8]) {
    let file = dir.join("fuzz.yaml");
    std::fs::write(&file, input).expect("config file");
    let err = if kind == 1 {
        AgentConfig::load(&file).err()
    } else {
        LocalConfig::load(&file).err()
    };
    if let Some(e) = err {
        let msg = format!("{e:#}");
        assert!(msg.contains("fuzz.yaml"), "error without the file: {msg}");
    }
}

fuzz_target!(|data: &[u8]| {
    let [kind, flags, input @ ..] = data else {
        return;
    };
    let dir = scratch("agent-state");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    match kind % 3 {
        0 => slots(&dir, *flags, input),
        k => config_file(&dir, k, input),
    }
    let _ = std::fs::remove_dir_all(&dir);
});
