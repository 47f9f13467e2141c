//! Shared set-up of the control fuzz targets: the runtime their routers run on, a
//! scratch directory per process, one request through a router, and the check every
//! answer of the controller's and the agent's APIs meets.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use tower::ServiceExt;

/// One current-thread runtime for every input (blocking calls go to its pool).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// A scratch directory of this process named `name`, in memory where the host has
/// `/dev/shm` (journals and state files sync every write).
pub fn scratch(name: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("nfx-fuzz-{name}-{}", std::process::id()))
}

/// Sends `req` through `app`; returns the status and the whole answer.
pub fn send(app: &Router, req: Request<Body>) -> (StatusCode, Vec<u8>) {
    runtime().block_on(async {
        let resp = app.clone().oneshot(req).await.expect("infallible");
        let code = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 8 << 20)
            .await
            .expect("answer body");
        (code, bytes.to_vec())
    })
}

/// Splits a session input into at most eight requests, each a selector byte, a path
/// byte, a little-endian 16-bit length (at most 4 KiB), then that many bytes; returns
/// (selector, path byte, bytes) of each.
pub fn frames(mut data: &[u8]) -> Vec<(u8, u8, &[u8])> {
    let mut out = Vec::new();
    while out.len() < 8 {
        let [sel, p, lo, hi, rest @ ..] = data else {
            break;
        };
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(4096);
        let (bytes, tail) = rest.split_at(len.min(rest.len()));
        data = tail;
        out.push((*sel, *p, bytes));
    }
    out
}

/// The path and body of a request: route `idx` of `paths` with `bytes` as the body, or,
/// past the routes, the bytes up to a newline as the path and the rest as the body.
pub fn route(paths: &[&str], idx: usize, bytes: &[u8]) -> (String, Vec<u8>) {
    if let Some(p) = paths.get(idx) {
        return (p.to_string(), bytes.to_vec());
    }
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len());
    let path = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (path, bytes.get(end + 1..).unwrap_or_default().to_vec())
}

/// Every answer that is not a success (but to HEAD, which has no body) is JSON
/// `{"error": ...}`.
pub fn check_error_json(code: StatusCode, method: &str, path: &str, answer: &[u8]) {
    if code.is_success() || method == "HEAD" {
        return;
    }
    let v: serde_json::Value = serde_json::from_slice(answer)
        .unwrap_or_else(|e| panic!("{code} {method} {path}: not JSON ({e})"));
    assert!(v["error"].is_string(), "{code}: {v}");
}
