//! The element-manager HTTP endpoint of one tunnel process (the API agreed with the SSM):
//! `GET /status`, `POST /accelerator/use`, `POST /accelerator/release`, `POST /engine`.
//! Served by axum on its own thread (a single-threaded tokio runtime), off the packet path.
//! Every route needs the bearer token; bodies are capped at [`BODY_LIMIT`]; errors are
//! JSON `{"error": ...}`.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nfx_accel::{AccelError, ClientOptions, EngineKind, LookasideEngine};
use serde::Deserialize;
use serde_json::{json, Value};
use zeroize::Zeroizing;

use crate::ike::IkeShared;
use crate::stats::Counters;
use crate::sys::thread_cpu_s;
use crate::worker::{SwitchCmd, Switched, Target};

/// How often rates and CPU are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Largest request body the EM reads (its requests are a few dozen bytes).
pub const BODY_LIMIT: usize = 4096;

/// Rates over the last sampling interval.
#[derive(Default, Clone, Copy)]
struct Sample {
    cpu_pct: f64,
    tx_gbps: f64,
    rx_gbps: f64,
}

/// What the EM needs from the endpoint.
pub struct EmState {
    /// Endpoint name.
    pub name: String,
    /// Transform name.
    pub alg: String,
    /// Configured software engine (lookaside fallback).
    pub base: EngineKind,
    /// Shared counters.
    pub counters: Arc<Counters>,
    /// Switch requests to the worker.
    pub cmds: Sender<SwitchCmd>,
    /// IKE state, when the SAs are negotiated.
    pub ike: Option<Arc<IkeShared>>,
    sample: Mutex<Sample>,
}

impl EmState {
    /// EM state for an endpoint.
    pub fn new(
        name: String,
        alg: String,
        base: EngineKind,
        counters: Arc<Counters>,
        cmds: Sender<SwitchCmd>,
    ) -> Self {
        EmState {
            name,
            alg,
            base,
            counters,
            cmds,
            ike: None,
            sample: Mutex::new(Sample::default()),
        }
    }
}

/// Who may use the EM and which devices it may attach.
pub struct EmAccess {
    /// Bearer token every request must carry.
    pub token: Zeroizing<String>,
    /// The directory `POST /accelerator/use` device sockets must lie in; `None` accepts a
    /// socket whose own directory only this user or root can change.
    pub device_dir: Option<PathBuf>,
}

/// Binds the EM listener (call before entering the data-path namespace).
pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("EM listen on {addr}: {e}"))
}

/// Samples CPU and throughput every `SAMPLE_EVERY` until `stop`.
pub fn sampler(st: Arc<EmState>, stop: Arc<AtomicBool>) {
    let c = &st.counters;
    let mut last = (
        Instant::now(),
        0.0,
        c.tx_bytes.load(Relaxed),
        c.rx_bytes.load(Relaxed),
    );
    while !stop.load(Relaxed) {
        std::thread::park_timeout(SAMPLE_EVERY);
        let tid = c.worker_tid.load(Relaxed);
        let cpu = if tid > 0 {
            let lanes = c
                .lane_tids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            std::iter::once(tid)
                .chain(lanes)
                .map(|t| thread_cpu_s(t).ok())
                .sum::<Option<f64>>()
                .unwrap_or(last.1)
        } else {
            0.0
        };
        let now = Instant::now();
        let (tx, rx) = (c.tx_bytes.load(Relaxed), c.rx_bytes.load(Relaxed));
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let s = Sample {
            cpu_pct: ((cpu - last.1) / dt * 100.0).max(0.0),
            tx_gbps: (tx - last.2) as f64 * 8.0 / dt / 1e9,
            rx_gbps: (rx - last.3) as f64 * 8.0 / dt / 1e9,
        };
        *st.sample.lock().unwrap_or_else(|e| e.into_inner()) = s;
        last = (now, cpu, tx, rx);
    }
}

/// Serves `app` on `listener` until `stop` (checked every 100 ms).
pub fn serve(listener: TcpListener, app: Router, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        listener.set_nonblocking(true)?;
        let l = tokio::net::TcpListener::from_std(listener)?;
        axum::serve(l, app)
            .with_graceful_shutdown(async move {
                while !stop.load(Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await?;
        Ok(())
    })
}

/// A JSON error answer.
struct EmError(StatusCode, String);

impl IntoResponse for EmError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<BytesRejection> for EmError {
    fn from(r: BytesRejection) -> Self {
        EmError(r.status(), format!("request body: {}", r.body_text()))
    }
}

type EmResult = Result<Response, EmError>;

struct Shared {
    st: Arc<EmState>,
    access: EmAccess,
}

/// The EM's routes for `st`, every one behind `access.token`.
pub fn router(st: Arc<EmState>, access: EmAccess) -> Router {
    let shared = Arc::new(Shared { st, access });
    Router::new()
        .route("/status", get(status_route))
        .route("/metrics", get(metrics_route))
        .route("/accelerator/use", post(use_route))
        .route("/accelerator/release", post(release_route))
        .route("/engine", post(engine_route))
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            authenticate,
        ))
        .method_not_allowed_fallback(|req: Request| async move {
            EmError(
                StatusCode::METHOD_NOT_ALLOWED,
                format!(
                    "method {} not allowed on {}",
                    req.method(),
                    req.uri().path()
                ),
            )
        })
        .fallback(|req: Request| async move {
            EmError(
                StatusCode::NOT_FOUND,
                format!("no such endpoint {}", req.uri().path()),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

async fn authenticate(State(sh): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let h = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if nfx_io::token::bearer_matches(h, &sh.access.token) {
        next.run(req).await
    } else {
        EmError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (send `Authorization: Bearer <token>`)".into(),
        )
        .into_response()
    }
}

/// Parses a JSON body into `T`; the message says what is wrong.
fn parse<T: serde::de::DeserializeOwned>(body: &Bytes, expected: &str) -> Result<T, EmError> {
    serde_json::from_slice(body).map_err(|e| {
        EmError(
            StatusCode::BAD_REQUEST,
            format!("request body: {e}; expected {expected}"),
        )
    })
}

/// Runs a blocking worker exchange off the async thread.
async fn blocking(f: impl FnOnce() -> EmResult + Send + 'static) -> EmResult {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EmError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

async fn status_route(State(sh): State<Arc<Shared>>) -> Response {
    Json(status(&sh.st)).into_response()
}

/// `GET /metrics`: the tunnel's counters, drops and engine in the Prometheus text format
/// (the same counters `/status` reports), behind the token like every route.
async fn metrics_route(State(sh): State<Arc<Shared>>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, nfx_metrics::CONTENT_TYPE)],
        crate::metrics::render(&sh.st.name, &sh.st.counters),
    )
        .into_response()
}

/// Body of `POST /accelerator/use`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UseBody {
    device: PathBuf,
}

/// Body of `POST /engine`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineBody {
    engine: String,
}

async fn use_route(State(sh): State<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> EmResult {
    let b: UseBody = parse(&body?, r#"{"device": "/path/to/accel.sock"}"#)?;
    if sh.st.counters.engine() == EngineKind::Lookaside {
        return Err(EmError(
            StatusCode::CONFLICT,
            "a queue pair is already attached".into(),
        ));
    }
    blocking(move || {
        let opts = ClientOptions {
            device_dir: sh.access.device_dir.clone(),
            ..ClientOptions::new(sh.st.base)
        };
        match LookasideEngine::connect_with(&b.device, &opts) {
            Ok(e) => {
                sh.st.counters.set_queue_pair(e.queue_pair());
                switch(&sh.st, Target::Lookaside(Box::new(e)))
            }
            Err(AccelError::BadArgument(why)) => Err(EmError(StatusCode::FORBIDDEN, why)),
            Err(AccelError::Refused(_)) => {
                Err(EmError(StatusCode::CONFLICT, "no free queue pair".into()))
            }
            Err(e) => Err(EmError(
                StatusCode::CONFLICT,
                format!("cannot attach {}: {e}", b.device.display()),
            )),
        }
    })
    .await
}

async fn release_route(State(sh): State<Arc<Shared>>) -> EmResult {
    blocking(move || switch(&sh.st, Target::Release)).await
}

async fn engine_route(
    State(sh): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> EmResult {
    let b: EngineBody = parse(&body?, r#"{"engine": "soft"|"cpu"}"#)?;
    let kind = match b.engine.as_str() {
        "soft" => EngineKind::Soft,
        "cpu" => EngineKind::Cpu,
        other => {
            return Err(EmError(
                StatusCode::BAD_REQUEST,
                format!("engine {other:?} is not soft or cpu"),
            ))
        }
    };
    blocking(move || switch(&sh.st, Target::Local(kind))).await
}

fn switch(st: &EmState, target: Target) -> EmResult {
    let (tx, rx) = mpsc::channel();
    let gone = |m: &str| EmError(StatusCode::CONFLICT, m.to_string());
    if st.cmds.send(SwitchCmd { target, reply: tx }).is_err() {
        return Err(gone("the packet worker has stopped"));
    }
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(Switched { engine, switch_us })) => {
            Ok(Json(json!({"engine": engine.as_str(), "switch_us": switch_us})).into_response())
        }
        Ok(Err(e)) => Err(gone(&e)),
        Err(_) => Err(gone("the packet worker did not answer")),
    }
}

fn status(st: &EmState) -> Value {
    let c = &st.counters;
    let s = *st.sample.lock().unwrap_or_else(|e| e.into_inner());
    let pk = c.tx_packets.load(Relaxed) + c.rx_packets.load(Relaxed);
    let by = c.tx_bytes.load(Relaxed) + c.rx_bytes.load(Relaxed);
    let mean = by.checked_div(pk).unwrap_or(0);
    let r2 = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "name": st.name,
        "ready": c.ready.load(Relaxed),
        "engine": c.engine().as_str(),
        "queue_pair": c.queue_pair(),
        "alg": st.ike.as_ref().map_or(st.alg.as_str(), |i| i.alg().unwrap_or("none")),
        "ike": st.ike.as_ref().map_or(Value::Null, |i| i.json()),
        "cpu_pct": r2(s.cpu_pct),
        "workers": [{"id": 0, "cpu_pct": r2(s.cpu_pct)}],
        "tx_gbps": r2(s.tx_gbps * 1000.0) / 1000.0,
        "rx_gbps": r2(s.rx_gbps * 1000.0) / 1000.0,
        "tx_packets": c.tx_packets.load(Relaxed),
        "rx_packets": c.rx_packets.load(Relaxed),
        "tx_bytes": c.tx_bytes.load(Relaxed),
        "rx_bytes": c.rx_bytes.load(Relaxed),
        "mean_packet_bytes": mean,
        "drops": c.drops_json(),
        "engine_switches": c.engine_switches.load(Relaxed),
        "failovers": c.failovers.load(Relaxed),
        "offload": c.offload_json(),
        "lanes": c.lanes_json(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use std::os::unix::fs::PermissionsExt;
    use tower::ServiceExt;

    const TOKEN: &str = "em-test-token";

    fn state(device_dir: Option<PathBuf>) -> (Router, mpsc::Receiver<SwitchCmd>) {
        let (tx, rx) = mpsc::channel();
        let st = EmState::new(
            "t1".into(),
            "aes-128-gcm".into(),
            EngineKind::Cpu,
            Arc::new(Counters::default()),
            tx,
        );
        let access = EmAccess {
            token: Zeroizing::new(TOKEN.into()),
            device_dir,
        };
        (router(Arc::new(st), access), rx)
    }

    /// Sends one request through the router; returns the status and the JSON body.
    fn call(
        app: &Router,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        let (code, bytes) = call_raw(app, method, path, token, body);
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Sends one request through the router; returns the status and the body's bytes.
    fn call_raw(
        app: &Router,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Body::from(body.to_vec())).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let resp = app.clone().oneshot(req).await.unwrap();
            let code = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            (code, bytes.to_vec())
        })
    }

    fn authed(app: &Router, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        call(app, method, path, Some(TOKEN), body)
    }

    #[test]
    fn status_has_agreed_fields() {
        let (app, _rx) = state(None);
        let (code, v) = authed(&app, "GET", "/status", b"");
        assert_eq!(code, 200);
        for k in [
            "name",
            "ready",
            "engine",
            "alg",
            "cpu_pct",
            "workers",
            "tx_gbps",
            "rx_gbps",
            "tx_packets",
            "rx_packets",
            "mean_packet_bytes",
            "drops",
            "engine_switches",
            "failovers",
            "offload",
            "lanes",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["drops"]["auth_failed"], 0);
    }

    #[test]
    fn every_route_needs_the_token() {
        let (app, _rx) = state(None);
        for (method, path) in [
            ("GET", "/status"),
            ("GET", "/metrics"),
            ("POST", "/accelerator/use"),
            ("POST", "/accelerator/release"),
            ("POST", "/engine"),
        ] {
            for token in [None, Some("wrong"), Some("em-test-token2")] {
                let (code, v) = call(&app, method, path, token, b"{}");
                assert_eq!(code, 401, "{method} {path} {token:?}: {v}");
                assert!(v["error"].as_str().unwrap().contains("bearer token"));
            }
        }
    }

    #[test]
    fn metrics_are_the_counters_status_reports() {
        let (tx, _rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        counters.tx_packets.store(1234, Relaxed);
        counters.rx_bytes.store(99_000, Relaxed);
        let st = EmState::new(
            "t1".into(),
            "aes-128-gcm".into(),
            EngineKind::Cpu,
            counters,
            tx,
        );
        let access = EmAccess {
            token: Zeroizing::new(TOKEN.into()),
            device_dir: None,
        };
        let app = router(Arc::new(st), access);
        let (_, status) = authed(&app, "GET", "/status", b"");
        let (code, text) = call_raw(&app, "GET", "/metrics", Some(TOKEN), b"");
        assert_eq!(code, 200);
        let text = String::from_utf8(text).unwrap();
        for line in [
            format!(
                r#"nfx_tunnel_tx_packets_total{{tunnel="t1"}} {}"#,
                status["tx_packets"]
            ),
            r#"nfx_tunnel_rx_bytes_total{tunnel="t1"} 99000"#.to_string(),
            format!(
                r#"nfx_tunnel_engine{{tunnel="t1",engine={}}} 1"#,
                status["engine"]
            ),
        ] {
            assert!(text.contains(&line), "missing {line}:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn bad_requests_get_json_errors() {
        let (app, _rx) = state(None);
        let (code, v) = authed(&app, "GET", "/nope", b"");
        assert_eq!((code, v["error"].as_str().is_some()), (404, true));
        let (code, v) = authed(&app, "POST", "/engine", b"{\"engine\":\"gpu\"}");
        assert_eq!(code, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains("gpu"));
        let (code, v) = authed(&app, "POST", "/engine", b"junk");
        assert_eq!(code, 400);
        assert!(v["error"].as_str().unwrap().contains("expected"), "{v}");
        assert_eq!(authed(&app, "POST", "/accelerator/use", b"{}").0, 400);
        let (code, v) = authed(&app, "DELETE", "/status", b"");
        assert_eq!(code, 405);
        assert!(v["error"].as_str().unwrap().contains("DELETE"));
        let big = vec![b' '; BODY_LIMIT + 1];
        let (code, v) = authed(&app, "POST", "/engine", &big);
        assert_eq!(code, 413, "{v}");
        assert!(v["error"].as_str().is_some());
        let (code, v) = authed(
            &app,
            "POST",
            "/accelerator/use",
            b"{\"device\":\"/nonexistent/accel.sock\"}",
        );
        assert!(code == 403 || code == 409, "{code} {v}");
    }

    #[test]
    fn device_paths_outside_the_configured_directory_are_refused() {
        let base = std::env::temp_dir().join(format!("nfx-em-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (allowed, other) = (base.join("allowed"), base.join("other"));
        for d in [&base, &allowed, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let fake = other.join("accel.sock");
        let _l = std::os::unix::net::UnixListener::bind(&fake).unwrap();
        let (app, _rx) = state(Some(allowed.clone()));
        let body = serde_json::to_vec(&json!({"device": fake})).unwrap();
        let (code, v) = authed(&app, "POST", "/accelerator/use", &body);
        assert_eq!(code, 403, "{v}");
        assert!(v["error"].as_str().unwrap().contains("outside"), "{v}");
        // A `..` detour out of the allowed directory is resolved and refused too.
        let detour = allowed.join("..").join("other").join("accel.sock");
        let body = serde_json::to_vec(&json!({"device": detour})).unwrap();
        assert_eq!(authed(&app, "POST", "/accelerator/use", &body).0, 403);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn engine_switch_is_forwarded_to_worker() {
        let (app, rx) = state(None);
        let worker = std::thread::spawn(move || {
            let c = rx.recv().unwrap();
            assert!(matches!(c.target, Target::Local(EngineKind::Soft)));
            c.reply
                .send(Ok(Switched {
                    engine: EngineKind::Soft,
                    switch_us: 7,
                }))
                .unwrap();
        });
        let (code, v) = authed(&app, "POST", "/engine", b"{\"engine\":\"soft\"}");
        worker.join().unwrap();
        assert_eq!(
            (code, v["engine"].as_str(), v["switch_us"].as_u64()),
            (200, Some("soft"), Some(7))
        );
    }
}
