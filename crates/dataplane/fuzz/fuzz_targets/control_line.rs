//! Fuzz target: every line a local process sends to a worker's control socket reaches
//! `Controller::handle_line` once the peer-credential check passed, so any local process
//! running as the dataplane's user can send anything. A real dataplane (one worker, the
//! real VNF builder reading files within an empty directory, a firewall → NAT service)
//! runs between two in-memory ports, and the input's lines are sent to it in order.
//! The worker runs on the fuzzing thread (`Dataplane::start_inline`, feature `fuzzing`):
//! each command is served by the worker's own handler as soon as the controller sends
//! it, so an input costs no thread start, wake-up or join, and a new dataplane per input
//! keeps inputs independent (a crash reproduces from its one input).
//!
//! What must hold: no panic; every answer is one line of JSON, an object that is either
//! `{"error": "<text>"}` alone or the fields of the command (a stats document for
//! `stats`, `node`/`bytes`/`data_b64` of that many bytes for `export_state`, `ok: true`
//! for the others); after the whole sequence the dataplane still answers
//! `{"cmd":"stats"}` with a stats document. A `shutdown` that succeeded ends the sequence.
//!
//! Input: lines separated by `\n`, trimmed as the control socket trims them; a line
//! that is not UTF-8 is skipped (the socket closes such a connection).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_dataplane::mem_port::mem_ports;
use nfx_dataplane::{vnf_builder, Controller, Dataplane, RunConfig, Stats};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One worker, a firewall → NAT service and a pass-through service, small tables, and
/// an 8-frame vector: each slot holds a 64 KiB GSO buffer, and zeroing the default 256
/// slots for every input's worker was a third of the target's time (no frame crosses
/// these ports).
const CONFIG: &str = r#"
name: fuzz
vector: 8
ports:
  inside:  { iface: in0, peer_mac: "02:00:00:00:00:01" }
  outside: { iface: out0, peer_mac: "02:00:00:00:00:02" }
poll: interrupt
classifier: { flows: 64, timeout_s: 5 }
services:
  - { id: web, selector: { src: 10.0.0.0/24, proto: tcp, dport: 80 }, chain: [fw, nat] }
  - { id: rest, selector: {}, chain: [el] }
instances:
  fw: { function: firewall, config: { default: allow, max_flows: 64 } }
  nat: { function: nat, config: { snat: { public_ip: 192.0.2.1, port_range: [40000, 40063] }, max_flows: 64 } }
  el: { function: elephant, config: { max_flows: 64 } }
"#;

/// An empty directory the VNF builder reads files within: a spec naming a file finds
/// nothing and fails with an error.
fn files() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nfx-fuzz-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the scratch config directory");
        dir
    })
}

fn config() -> &'static RunConfig {
    static CFG: OnceLock<RunConfig> = OnceLock::new();
    CFG.get_or_init(|| RunConfig::parse(CONFIG, "fuzz.yaml").expect("the fuzz config parses"))
}

/// Checks one answer to `line`; returns whether it was a successful `shutdown`.
fn check(line: &str, answer: &str) -> bool {
    assert!(!answer.contains('\n'), "an answer spans lines: {answer}");
    let v: Value = serde_json::from_str(answer).expect("every answer is JSON");
    let obj = v.as_object().expect("every answer is a JSON object");
    if let Some(e) = obj.get("error") {
        assert!(
            e.is_string() && obj.len() == 1,
            "malformed error answer: {answer}"
        );
        return false;
    }
    let req: Value = serde_json::from_str(line).expect("only a JSON request succeeds");
    match req["cmd"]
        .as_str()
        .expect("only a request with a `cmd` succeeds")
    {
        "stats" => {
            serde_json::from_str::<Stats>(answer).expect("`stats` answers a stats document");
        }
        "export_state" => {
            use base64::Engine;
            let data = base64::engine::general_purpose::STANDARD
                .decode(
                    v["data_b64"]
                        .as_str()
                        .expect("`export_state` answers `data_b64`"),
                )
                .expect("`data_b64` is base64");
            assert_eq!(Some(data.len() as u64), v["bytes"].as_u64(), "{answer}");
            assert_eq!(v["node"], req["node"], "{answer}");
        }
        cmd => {
            assert_eq!(
                v["ok"],
                Value::Bool(true),
                "`{cmd}` succeeded without `ok`: {answer}"
            );
            return cmd == "shutdown";
        }
    }
    false
}

fn run(ctl: &Controller, data: &[u8]) {
    for raw in data.split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(raw) else {
            continue;
        };
        let line = line.trim();
        if check(line, &ctl.handle_line(line)) {
            return;
        }
    }
    let answer = ctl.handle_line(r#"{"cmd":"stats"}"#);
    serde_json::from_str::<Stats>(&answer)
        .unwrap_or_else(|e| panic!("after the sequence `stats` answered {answer}: {e}"));
}

fuzz_target!(|data: &[u8]| {
    let (open, _inside, _outside) = mem_ports();
    let dp = Dataplane::start_inline(config(), vnf_builder(files().as_path()), open)
        .expect("the fuzz dataplane starts");
    run(&dp.controller(), data);
    dp.stop().expect("the worker stops");
});
