//! The host agent's REST face: the VNFM calls of [`crate::agent`] plus the heartbeat and
//! the host's service paths. Every route needs the bearer token.
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
use crate::api::{parse_body, protect, ApiError, Tokens};
use crate::vnfm::Vnfm;
use axum::body::Bytes;
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
    protect(routes, Tokens::admin(token)).layer(axum::middleware::from_fn_with_state(st, track))
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

async fn knob(State(st): State<Arc<St>>, body: Bytes) -> Res {
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

async fn tunnel_engine(State(st): State<Arc<St>>, Path(id): Path<String>, body: Bytes) -> Res {
    let req: super::tunnels::EngineRequest = parse_body(&body)?;
    let answer = tokio::task::spawn_blocking(move || st.agent.switch_tunnel_engine(&id, req))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(answer).into_response())
}

async fn paths(State(st): State<Arc<St>>) -> Res {
    Ok(Json(st.agent.paths()).into_response())
}

async fn sync(State(st): State<Arc<St>>, body: Bytes) -> Res {
    let paths: BTreeMap<String, HostPath> = parse_body(&body)?;
    blocking(move || st.agent.sync(&paths)).await
}

async fn program(State(st): State<Arc<St>>, Path(service): Path<String>, body: Bytes) -> Res {
    let path: HostPath = parse_body(&body)?;
    blocking(move || st.agent.program(&service, &path)).await
}

async fn withdraw(State(st): State<Arc<St>>, Path(service): Path<String>) -> Res {
    blocking(move || st.agent.withdraw(&service)).await
}
