//! Fuzz target: the element manager's HTTP router takes any method, path, headers and
//! body from a local client. Nothing panics; without the token every request is refused
//! with 401 before its body is read; every answer is JSON `{"error": ...}` unless it
//! is a 200; a body over the limit is refused with 413, never parsed.
#![no_main]

use std::sync::{mpsc, Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use libfuzzer_sys::fuzz_target;
use nfx_accel::EngineKind;
use nfx_tunnel::em::{router, EmAccess, EmState, BODY_LIMIT};
use nfx_tunnel::stats::Counters;
use tower::ServiceExt;
use zeroize::Zeroizing;

const TOKEN: &str = "fuzz-em-token";

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"];
const PATHS: [&str; 5] = [
    "/status",
    "/accelerator/use",
    "/accelerator/release",
    "/engine",
    "/",
];

fn app() -> &'static (Router, tokio::runtime::Runtime) {
    static APP: OnceLock<(Router, tokio::runtime::Runtime)> = OnceLock::new();
    APP.get_or_init(|| {
        // The worker is gone (receiver dropped): switches answer 409 at once.
        let (tx, _) = mpsc::channel();
        let st = EmState::new(
            "fuzz".into(),
            "aes-128-gcm".into(),
            EngineKind::Soft,
            Arc::new(Counters::default()),
            tx,
        );
        // An empty private directory: every device path lies outside it.
        let dir = std::env::temp_dir().join(format!("nfx-fuzz-em-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("device dir");
        let access = EmAccess {
            token: Zeroizing::new(TOKEN.into()),
            device_dir: Some(dir),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        (router(Arc::new(st), access), rt)
    })
}

fuzz_target!(|data: &[u8]| {
    // Byte 0: method (low 3 bits), known path (next 3 bits; 5..=7 = the path is the bytes
    // up to the first newline), token (bit 6: right, bit 7: wrong). Then the body.
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(sel & 7) % METHODS.len()];
    let (path, body) = match usize::from((sel >> 3) & 7) {
        i if i < PATHS.len() => (PATHS[i].to_string(), rest),
        _ => {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let p = String::from_utf8_lossy(&rest[..end]).into_owned();
            (p, rest.get(end + 1..).unwrap_or_default())
        }
    };
    let mut req = Request::builder().method(method).uri(path.as_str());
    let authed = sel & 0x40 != 0;
    if authed {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    } else if sel & 0x80 != 0 {
        req = req.header("authorization", "Bearer fuzz-em-tokem");
    }
    let Ok(req) = req.body(Body::from(body.to_vec())) else {
        return;
    };
    let (app, rt) = app();
    let (code, answer) = rt.block_on(async {
        let resp = app.clone().oneshot(req).await.expect("infallible");
        let code = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("answer body");
        (code, bytes)
    });
    let known = PATHS[..4].contains(&path.as_str());
    // Only the two POST routes that read a body refuse an oversized one; `/status` is
    // GET-only (405) and `/accelerator/release` reads none.
    let reads_body = matches!(path.as_str(), "/accelerator/use" | "/engine");
    if authed && method == "POST" && body.len() > BODY_LIMIT && reads_body {
        assert_eq!(code, 413, "{path}");
    }
    if !authed && known {
        assert!(code == 401 || code == 405, "{method} {path} without the token: {code}");
    }
    if code == 200 {
        // Only reads succeed: the worker is gone and no device path is allowed.
        assert!(authed && (method == "GET" || method == "HEAD"), "{method} {path}");
    } else if method != "HEAD" {
        let v: serde_json::Value = serde_json::from_slice(&answer).expect("JSON error");
        assert!(v["error"].is_string(), "{code}: {v}");
    }
});
