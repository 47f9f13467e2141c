//! The host agent's REST face: the VNFM calls of [`crate::agent`] plus the heartbeat and
//! the host's service paths. Every route needs the bearer token; bodies are capped at
//! [`BODY_LIMIT`] (413); every error, a wrong method (405) or an unknown path (404)
//! included, is JSON `{"error": ...}`.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | its workers' and its own metrics ([`super::metrics`]) |
//! | GET | `/agent/v1/health` | [`Health`] |
//! | GET | `/agent/v1/energy` | [`super::power::EnergyReport`] (503 when the host is not metered or before the second sample) |
//! | POST | `/agent/v1/knobs` | set a worker's knob ([`super::knobs::KnobRequest`]); answers [`super::knobs::KnobAnswer`] read back from the kernel (400 bad value, 404 no such worker, 503 refused) |
//! | POST | `/agent/v1/tunnels/{id}/engine` | switch a tunnel endpoint live: `{"lookaside": bool}` ([`super::tunnels::EngineRequest`]); answers [`super::tunnels::EngineSwitch`] (404 no such endpoint, 409 no free queue pair or already attached) |
//! | GET | `/agent/v1/paths` | `{service: HostPath}` |
//! | PUT | `/agent/v1/paths` | replace every path with the body's map (204) |
//! | PUT | `/agent/v1/paths/{service}` | program one path (204) |
//! | DELETE | `/agent/v1/paths/{service}` | remove one path (204) |

use super::steering::{HostPath, SteerError};
use super::HostAgent;
use crate::api::{json_fallbacks, parse_body, protect, ApiError, RawBody, Tokens};
use crate::vnfm::Vnfm;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::collections::BTreeMap;
use std::sync::Arc;
use zeroize::Zeroizing;

struct St {
    agent: Arc<HostAgent>,
}

impl From<SteerError> for ApiError {
    fn from(e: SteerError) -> Self {
        let code = match e {
            SteerError::Invalid(_) => StatusCode::BAD_REQUEST,
            SteerError::Failed(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(code, e.to_string())
    }
}

type Res = Result<Response, ApiError>;

/// Largest request body the agent reads (413 above): a `PUT /agent/v1/paths` of a few
/// thousand services fits.
pub const BODY_LIMIT: usize = 1 << 20;

/// The agent's routes, every one behind `token`.
pub fn router(agent: Arc<HostAgent>, token: Zeroizing<String>) -> Router {
    let vnfm: Arc<dyn Vnfm> = agent.clone();
    let st = Arc::new(St { agent });
    let routes = crate::agent::router(vnfm).merge(
        Router::new()
            .route("/metrics", get(metrics))
            .route("/agent/v1/health", get(health))
            .route("/agent/v1/energy", get(energy))
            .route("/agent/v1/knobs", axum::routing::post(knob))
            .route(
                "/agent/v1/tunnels/{id}/engine",
                axum::routing::post(tunnel_engine),
            )
            .route("/agent/v1/paths", get(paths).put(sync))
            .route(
                "/agent/v1/paths/{service}",
                axum::routing::put(program).delete(withdraw),
            )
            .with_state(st.clone()),
    );
    json_fallbacks(protect(routes, Tokens::admin(token)), "")
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(st, track))
}

/// Middleware: counts every request and its latency by route.
async fn track(
    State(st): State<Arc<St>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    st.agent.api.observe(req, next).await
}

async fn metrics(State(st): State<Arc<St>>) -> Res {
    let text = tokio::task::spawn_blocking(move || st.agent.metrics())
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([("content-type", nfx_metrics::CONTENT_TYPE)], text).into_response())
}

/// Runs a steering change off the async workers (it runs `nft` and `ip`).
async fn blocking(f: impl FnOnce() -> Result<(), SteerError> + Send + 'static) -> Res {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn health(State(st): State<Arc<St>>) -> Res {
    Ok(Json(st.agent.health()).into_response())
}

async fn energy(State(st): State<Arc<St>>) -> Res {
    match st.agent.energy() {
        Ok(Some(r)) => Ok(Json(r).into_response()),
        Ok(None) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "no energy sample yet (the power agent samples once a second)".into(),
        )),
        Err(e) => Err(ApiError(StatusCode::SERVICE_UNAVAILABLE, e)),
    }
}

async fn knob(State(st): State<Arc<St>>, body: RawBody) -> Res {
    use super::knobs::{KnobError, KnobRequest};
    let req: KnobRequest = parse_body(&body)?;
    let answer = tokio::task::spawn_blocking(move || st.agent.set_knob(&req))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            let code = match e {
                KnobError::Invalid(_) => StatusCode::BAD_REQUEST,
                KnobError::NotFound(_) => StatusCode::NOT_FOUND,
                KnobError::Failed(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            ApiError(code, e.to_string())
        })?;
    Ok(Json(answer).into_response())
}

async fn tunnel_engine(State(st): State<Arc<St>>, Path(id): Path<String>, body: RawBody) -> Res {
    let req: super::tunnels::EngineRequest = parse_body(&body)?;
    let answer = tokio::task::spawn_blocking(move || st.agent.switch_tunnel_engine(&id, req))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(answer).into_response())
}

async fn paths(State(st): State<Arc<St>>) -> Res {
    Ok(Json(st.agent.paths()).into_response())
}

async fn sync(State(st): State<Arc<St>>, body: RawBody) -> Res {
    let paths: BTreeMap<String, HostPath> = parse_body(&body)?;
    blocking(move || st.agent.sync(&paths)).await
}

async fn program(State(st): State<Arc<St>>, Path(service): Path<String>, body: RawBody) -> Res {
    let path: HostPath = parse_body(&body)?;
    blocking(move || st.agent.program(&service, &path)).await
}

async fn withdraw(State(st): State<Arc<St>>, Path(service): Path<String>) -> Res {
    blocking(move || st.agent.withdraw(&service)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostagent::AgentConfig;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    const TOKEN: &str = "agent-api-test-token-0123";

    /// One request through `app`: its status and its answer as JSON.
    async fn call(
        app: &Router,
        method: &str,
        path: &str,
        token: bool,
        body: Vec<u8>,
    ) -> (u16, serde_json::Value) {
        let mut req = Request::builder().method(method).uri(path);
        if token {
            req = req.header("authorization", format!("Bearer {TOKEN}"));
        }
        let resp = app
            .clone()
            .oneshot(req.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: {code}, not JSON ({e})"));
        (code, v)
    }

    /// What the `agent_api` fuzz target checks on every answer: a wrong method (405), an
    /// unknown path (404), a body over the limit (413), no token (401) and a bad body
    /// (400) all answer JSON `{"error": ...}`.
    #[tokio::test]
    async fn every_refusal_is_a_json_error() {
        let dir = std::env::temp_dir().join(format!("nfx-agent-api-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = AgentConfig {
            host: "h1".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: None,
            token_file: dir.join("token"),
            run_dir: dir.join("run"),
            nfx_bin: Some(dir.join("no-such-nfx")),
            software: Vec::new(),
            neighbors: BTreeMap::new(),
            ready_file: None,
            allowed_dirs: Vec::new(),
            power: None,
            accelerators: Vec::new(),
            tables: Vec::new(),
        };
        let app = router(
            HostAgent::unplugged(&cfg).unwrap(),
            Zeroizing::new(TOKEN.into()),
        );
        let big = vec![b' '; BODY_LIMIT + 1];
        // A flow-state import may be larger than every other body, up to its own limit.
        let state = serde_json::json!({
            "instance": "a", "function": "firewall", "bytes": 0,
            "data_b64": "A".repeat(2 * BODY_LIMIT),
        });
        let state = serde_json::to_vec(&state).unwrap();
        let huge = vec![b' '; crate::agent::STATE_BODY_LIMIT + 1];
        for (method, path, token, body, want) in [
            ("PUT", "/agent/v1/instances/x/flows", true, state, 404),
            ("PUT", "/agent/v1/instances/x/flows", true, huge, 413),
            ("GET", "/agent/v1/instances/x/flows", true, Vec::new(), 404),
            ("PATCH", "/agent/v1/paths", true, Vec::new(), 405),
            ("GET", "/agent/v1/nothing", true, Vec::new(), 404),
            ("PUT", "/agent/v1/paths", true, big.clone(), 413),
            ("POST", "/agent/v1/instances", true, big.clone(), 413),
            ("PUT", "/agent/v1/paths", false, big, 401),
            ("POST", "/agent/v1/instances", true, b"{}".to_vec(), 400),
        ] {
            let (code, v) = call(&app, method, path, token, body).await;
            assert_eq!(code, want, "{method} {path}: {v}");
            assert!(v["error"].is_string(), "{method} {path}: {v}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
