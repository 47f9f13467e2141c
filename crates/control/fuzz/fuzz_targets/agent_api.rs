//! Fuzz target: the host agent's REST API (`nfx agent`) takes any method, path, token and
//! body from anything that reaches its management address. Each input is a session of
//! up to eight requests against a fresh agent ([`HostAgent::unplugged`], feature
//! `fuzzing`): its run directory on a scratch directory, two neighbors, no software or
//! accelerator device and a worker binary that does not exist, so every deploy is
//! refused before a process could start, and its steering renders real nftables
//! scripts into tools that change nothing. Nothing panics; without the token every
//! known route answers 401 (or 405) before the body is read; every answer that is not
//! a success is JSON `{"error": ...}`; a body over the agent's limit is refused with 413
//! (but by `PUT /agent/v1/instances/{id}/flows`, whose flow state has a larger limit);
//! a failed call leaves the programmed paths as they were; no deploy succeeds.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use nfx_control::hostagent::api::{router, BODY_LIMIT};
use nfx_control::hostagent::steering::NeighborLink;
use nfx_control::hostagent::{AgentConfig, HostAgent};
use nfx_control::vnfm::Vnfm;
use nfx_control_fuzz::{check_error_json, frames, route, scratch};
use zeroize::Zeroizing;

const TOKEN: &str = "fuzz-agent-token-0123456789";

const METHODS: [&str; 6] = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"];

/// The agent's routes; an index past them means "path from the input".
const PATHS: [&str; 13] = [
    "/metrics",
    "/agent/v1/health",
    "/agent/v1/energy",
    "/agent/v1/knobs",
    "/agent/v1/tunnels/web-esp-0/engine",
    "/agent/v1/paths",
    "/agent/v1/paths/web",
    "/agent/v1/instances",
    "/agent/v1/instances/web-firewall-0",
    "/agent/v1/instances/web-firewall-0/config",
    "/agent/v1/migrations",
    "/agent/v1/tunnels/web-esp-0/key",
    "/agent/v1/instances/web-firewall-0/flows",
];

/// The (method, path) pairs whose handler reads a body with the agent's limit
/// (`PUT .../flows` takes flow state up to a larger limit of its own).
const BODY_ROUTES: [(&str, &str); 8] = [
    ("POST", "/agent/v1/knobs"),
    ("POST", "/agent/v1/tunnels/web-esp-0/engine"),
    ("PUT", "/agent/v1/paths"),
    ("PUT", "/agent/v1/paths/web"),
    ("POST", "/agent/v1/instances"),
    ("PUT", "/agent/v1/instances/web-firewall-0/config"),
    ("POST", "/agent/v1/migrations"),
    ("PUT", "/agent/v1/tunnels/web-esp-0/key"),
];

fn config(dir: &Path) -> AgentConfig {
    let link = |iface: &str, peer: [u8; 4]| NeighborLink {
        iface: iface.into(),
        peer: peer.into(),
    };
    AgentConfig {
        host: "h1".into(),
        listen: "127.0.0.1:0".parse().expect("address"),
        tls: None,
        token_file: dir.join("token"),
        run_dir: dir.join("run"),
        nfx_bin: Some(dir.join("no-such-nfx")),
        software: Vec::new(),
        neighbors: BTreeMap::from([
            ("h0".to_string(), link("fz-h0", [10, 9, 0, 1])),
            ("h2".to_string(), link("fz-h2", [10, 9, 2, 1])),
        ]),
        ready_file: None,
        allowed_dirs: Vec::new(),
        power: None,
        accelerators: Vec::new(),
        tables: Vec::new(),
    }
}

/// One request of the session.
struct Call {
    method: &'static str,
    path: String,
    /// 0: none, 1: the agent's, 2: a wrong one, 3: the agent's without `Bearer`.
    token: u8,
    /// The body is made larger than the agent's limit.
    oversized: bool,
    body: Vec<u8>,
}

/// Splits the input into calls: a selector byte (method: bits 0–2, token: bits 3–4,
/// oversized body: bit 5), a path byte (an index into [`PATHS`], past it: the path is
/// the body's bytes up to a newline), a little-endian 16-bit length (at most 4 KiB),
/// then that many bytes of body.
fn calls(data: &[u8]) -> Vec<Call> {
    frames(data)
        .into_iter()
        .map(|(sel, p, bytes)| {
            let (path, body) = route(&PATHS, usize::from(p), bytes);
            Call {
                method: METHODS[usize::from(sel & 7) % METHODS.len()],
                path,
                token: (sel >> 3) & 3,
                oversized: sel & 0x20 != 0,
                body,
            }
        })
        .collect()
}

fn send(app: &axum::Router, c: &Call) -> Option<(StatusCode, Vec<u8>)> {
    let mut req = Request::builder().method(c.method).uri(c.path.as_str());
    req = match c.token {
        1 => req.header("authorization", format!("Bearer {TOKEN}")),
        2 => req.header("authorization", "Bearer fuzz-agent-token-012345678X"),
        3 => req.header("authorization", TOKEN),
        _ => req,
    };
    let mut body = c.body.clone();
    if c.oversized {
        body.resize(BODY_LIMIT + 1, b' ');
    }
    let req = req.body(Body::from(body)).ok()?;
    Some(nfx_control_fuzz::send(app, req))
}

/// Checks one answer against what must hold for every request.
fn check(c: &Call, code: StatusCode, answer: &[u8]) {
    let known = PATHS.contains(&c.path.as_str());
    if known && c.token != 1 {
        assert!(
            code == StatusCode::UNAUTHORIZED || code == StatusCode::METHOD_NOT_ALLOWED,
            "{} {} without the token: {code}",
            c.method,
            c.path
        );
    }
    let reads_body = BODY_ROUTES.contains(&(c.method, c.path.as_str()));
    if reads_body && c.token == 1 && c.oversized {
        assert_eq!(
            code,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{} {}",
            c.method,
            c.path
        );
    }
    check_error_json(code, c.method, &c.path, answer);
    if c.method == "POST" && c.path == "/agent/v1/instances" {
        assert!(!code.is_success(), "a deploy succeeded: {code}");
    }
}

fuzz_target!(|data: &[u8]| {
    let session = calls(data);
    if session.is_empty() {
        return;
    }
    let dir = scratch("agent");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let agent: Arc<HostAgent> = HostAgent::unplugged(&config(&dir)).expect("agent");
    let app = router(agent.clone(), Zeroizing::new(TOKEN.into()));
    for c in &session {
        let before = agent.paths();
        let Some((code, answer)) = send(&app, c) else {
            continue;
        };
        check(c, code, &answer);
        if !code.is_success() {
            assert_eq!(
                agent.paths(),
                before,
                "{code} {} {} changed the paths",
                c.method,
                c.path
            );
        }
    }
    assert!(
        agent.list_instances().expect("instances").is_empty(),
        "an instance was deployed"
    );
    drop(app);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
});
