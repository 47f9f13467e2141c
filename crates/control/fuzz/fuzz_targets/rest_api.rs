//! Fuzz target: the controller's REST API takes any method, path, token and body from any
//! client that reaches its port. Each input is a session of up to eight requests against a
//! fresh controller (simulated VNFM, its own SQLite journal). Nothing panics; without a
//! token every protected route answers 401 (or 405) and the read-only token never
//! changes anything (403); every answer that is not a success is JSON `{"error": ...}`;
//! afterwards the service list still answers, and when any request could have written
//! (a method other than GET/HEAD with the admin token) the journal reopens and
//! reconciles, holding the same services: a bad request loses no state. Each input's
//! journal starts as a copy of an empty one the controller's own `Store::open` made once
//! per process (as `nfx up` opens the journal its first start made): creating its tables
//! for every input was most of the time of opening the controller.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use nfx_control::api::metrics::ApiMetrics;
use nfx_control::api::{router, ApiState, Tokens};
use nfx_control::server::{build, UpConfig};
use nfx_control::vnfm::sim::SimConfig;
use nfx_control_fuzz::{check_error_json, frames, route, scratch};
use nfx_model::Infrastructure;
use zeroize::Zeroizing;

const ADMIN: &str = "fuzz-admin-token-0123456789";
const READ: &str = "fuzz-read-token-9876543210";

const INFRA: &str = "
hosts: [{ id: edge, cores: 8 }, { id: cloud, cores: 8 }]
devices:
  - { id: sw-edge, host: edge, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
  - { id: tt-edge, host: edge, tier: table, functions: [firewall, nat], latency_us: 2, throughput_gbps: 100, table_entries: 64, cost: 5 }
  - { id: sw-cloud, host: cloud, tier: software, functions: [firewall, nat, dpi], latency_us: 30, throughput_gbps: 10, cpu_cores: 4, cost: 1 }
links: [{ a: edge, b: cloud, latency_us: 20 }]
";

const METHODS: [&str; 5] = ["GET", "POST", "DELETE", "PUT", "HEAD"];

/// Routes behind the tokens; the last byte-chosen index means "path from the input".
const PATHS: [&str; 14] = [
    "/api/v1/plan",
    "/api/v1/projection",
    "/api/v1/optimize",
    "/api/v1/services",
    "/api/v1/services/web",
    "/api/v1/instances",
    "/api/v1/instances/web-firewall-0",
    "/api/v1/instances/web-firewall-0/migrate",
    "/api/v1/operations",
    "/api/v1/operations/1",
    "/api/v1/energy",
    "/api/v1/dashboard",
    "/metrics",
    "/agent/v1/instances",
];

/// The infrastructure, parsed once per process (every input's controller gets a clone).
fn infra() -> Infrastructure {
    static INFRA_PARSED: OnceLock<Infrastructure> = OnceLock::new();
    INFRA_PARSED
        .get_or_init(|| Infrastructure::from_yaml("infra.yaml", INFRA).expect("infrastructure"))
        .clone()
}

/// An empty journal (its tables created by `Store::open`), made once per process.
fn empty_journal() -> &'static Path {
    static JOURNAL: OnceLock<PathBuf> = OnceLock::new();
    JOURNAL.get_or_init(|| {
        let dir = scratch("rest-empty");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let db = dir.join("state.db");
        drop(nfx_control::store::Store::open(&db).expect("empty journal"));
        db
    })
}

fn config(db: PathBuf) -> UpConfig {
    UpConfig {
        db,
        listen: "127.0.0.1:0".parse().expect("address"),
        token: Zeroizing::new(ADMIN.into()),
        read_token: Some(Zeroizing::new(READ.into())),
        infra: infra(),
        sim: SimConfig::default(),
        local: None,
        agents: Vec::new(),
        ready_file: None,
        power_manager: false,
        power_services: Vec::new(),
        power_tuning: Default::default(),
        ssm: None,
    }
}

/// The controller of `cfg`'s journal, reconciled as `nfx up` does after a restart.
fn reopen(cfg: &UpConfig) -> Arc<nfx_control::controller::Controller> {
    let built = build(cfg).expect("controller");
    built.ctl.recover().expect("recover");
    built.ctl
}

fn open(cfg: &UpConfig) -> (Router, Arc<nfx_control::controller::Controller>) {
    let built = build(cfg).expect("controller");
    built.ctl.recover().expect("recover");
    let ctl = built.ctl.clone();
    let state = Arc::new(ApiState {
        ctl: built.ctl,
        tokens: Tokens {
            admin: Zeroizing::new(ADMIN.into()),
            read: Some(Zeroizing::new(READ.into())),
        },
        metrics: ApiMetrics::federating(None),
    });
    (router(state, Some(built.agent_vnfm)), ctl)
}

/// One request of the session: its method, path, token choice and body.
struct Call {
    method: &'static str,
    path: String,
    token: u8,
    body: Vec<u8>,
}

impl Call {
    /// Whether the call may change the journal: the admin token and a writing method.
    fn may_write(&self) -> bool {
        self.token == 1 && self.method != "GET" && self.method != "HEAD"
    }
}

/// Splits the input into calls: a selector byte (method: bits 0–2, token: bits 3–4,
/// path: bits 5–7 plus the low half of the next byte), a little-endian 16-bit length
/// (at most 4 KiB), then that many bytes of body; a "path from the input" call takes the
/// body's bytes up to a newline.
fn calls(data: &[u8]) -> Vec<Call> {
    frames(data)
        .into_iter()
        .map(|(sel, p, bytes)| {
            let idx = usize::from(sel >> 5) | (usize::from(p & 15) << 3);
            let (path, body) = route(&PATHS, idx, bytes);
            Call {
                method: METHODS[usize::from(sel & 7) % METHODS.len()],
                path,
                token: (sel >> 3) & 3,
                body,
            }
        })
        .collect()
}

fn send(app: &Router, c: &Call) -> Option<(StatusCode, Vec<u8>)> {
    let mut req = Request::builder().method(c.method).uri(c.path.as_str());
    req = match c.token {
        1 => req.header("authorization", format!("Bearer {ADMIN}")),
        2 => req.header("authorization", format!("Bearer {READ}")),
        3 => req.header("authorization", "Bearer fuzz-admin-token-012345678X"),
        _ => req,
    };
    let req = req.body(Body::from(c.body.clone())).ok()?;
    Some(nfx_control_fuzz::send(app, req))
}

fn service_ids(ctl: &nfx_control::controller::Controller) -> Vec<String> {
    let mut ids: Vec<String> = ctl
        .services()
        .expect("services still list")
        .into_iter()
        .map(|s| s.service.id)
        .collect();
    ids.sort();
    ids
}

fuzz_target!(|data: &[u8]| {
    let session = calls(data);
    // The event and dashboard streams never end: they are not requests a session can await.
    if session.is_empty()
        || session
            .iter()
            .any(|c| c.path.contains("stream") || c.path.contains("events"))
    {
        return;
    }
    let dir = scratch("rest");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let db = dir.join("state.db");
    std::fs::copy(empty_journal(), &db).expect("copying the empty journal");
    let cfg = config(db);
    let (app, ctl) = open(&cfg);
    for c in &session {
        let Some((code, answer)) = send(&app, c) else {
            continue;
        };
        let known = PATHS.contains(&c.path.as_str());
        if known && (c.token == 0 || c.token == 3) {
            assert!(
                code == StatusCode::UNAUTHORIZED || code == StatusCode::METHOD_NOT_ALLOWED,
                "{} {} without the token: {code}",
                c.method,
                c.path
            );
        }
        if c.token == 2 && code.is_success() {
            let dry_run = c.method == "POST"
                && matches!(c.path.as_str(), "/api/v1/plan" | "/api/v1/projection");
            assert!(
                c.method == "GET" || c.method == "HEAD" || dry_run,
                "the read-only token did {} {}",
                c.method,
                c.path
            );
        }
        check_error_json(code, c.method, &c.path, &answer);
    }
    let before = service_ids(&ctl);
    drop(app);
    drop(ctl);
    if !session.iter().any(Call::may_write) {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let reopened = reopen(&cfg);
    assert_eq!(
        service_ids(&reopened),
        before,
        "the journal lost or gained services"
    );
    drop(reopened);
    let _ = std::fs::remove_dir_all(&dir);
});
