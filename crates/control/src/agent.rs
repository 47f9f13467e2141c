//! The host agent's REST face: the five VNFM calls of one local [`Vnfm`] over HTTP
//! (`/agent/v1/...`), so a controller elsewhere can drive it with
//! [`crate::vnfm::remote::RemoteVnfm`]. The caller puts the routes behind the bearer token
//! ([`crate::api::protect`]).

use crate::api::{parse_body, ApiError, RawBody};
use crate::vnfm::{FlowState, InstanceSpec, Vnfm, VnfmError, MAX_STATE_B64};
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use std::sync::Arc;

struct AgentState {
    vnfm: Arc<dyn Vnfm>,
}

impl From<VnfmError> for ApiError {
    fn from(e: VnfmError) -> Self {
        let code = match &e {
            VnfmError::NotFound(_) => StatusCode::NOT_FOUND,
            VnfmError::Conflict(_) => StatusCode::CONFLICT,
            VnfmError::Invalid(_) => StatusCode::BAD_REQUEST,
            VnfmError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(code, e.to_string())
    }
}

/// Largest body of `PUT /agent/v1/instances/{id}/flows`: a [`FlowState`] of at most
/// [`MAX_STATE_B64`] characters and its few fields (every other route keeps the
/// caller's smaller limit).
pub const STATE_BODY_LIMIT: usize = MAX_STATE_B64 + (64 << 10);

/// Body of `POST /agent/v1/migrations` (the remote VNFM sends it).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MigrateBody {
    /// The instance whose flows move.
    pub(crate) old: String,
    /// The instance they move to.
    pub(crate) new: String,
    /// The flows (empty: all).
    #[serde(default)]
    pub(crate) flows: Vec<String>,
}

type AgentResult = Result<Response, ApiError>;

async fn run<T: serde::Serialize + Send + 'static>(
    code: StatusCode,
    f: impl FnOnce() -> Result<T, VnfmError> + Send + 'static,
) -> AgentResult {
    let v = tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok((code, Json(v)).into_response())
}

/// The agent routes for `vnfm`, not yet authenticated (wrap them in
/// [`crate::api::protect`]).
pub fn router<S: Clone + Send + Sync + 'static>(vnfm: Arc<dyn Vnfm>) -> Router<S> {
    let st = Arc::new(AgentState { vnfm });
    Router::new()
        .route("/agent/v1/instances", get(list).post(deploy))
        .route("/agent/v1/instances/{id}", get(state).delete(destruct))
        .route("/agent/v1/instances/{id}/config", put(configure))
        .route("/agent/v1/migrations", post(migrate))
        .route(
            "/agent/v1/instances/{id}/flows",
            get(export_flows)
                .put(import_flows)
                .layer(DefaultBodyLimit::max(STATE_BODY_LIMIT)),
        )
        .route("/agent/v1/tunnels/{id}/key", put(tunnel_key))
        .with_state(st)
}

async fn list(State(st): State<Arc<AgentState>>) -> AgentResult {
    run(StatusCode::OK, move || st.vnfm.list_instances()).await
}

async fn deploy(State(st): State<Arc<AgentState>>, body: RawBody) -> AgentResult {
    let spec: InstanceSpec = parse_body(&body)?;
    run(StatusCode::CREATED, move || st.vnfm.deploy_instance(&spec)).await
}

async fn state(State(st): State<Arc<AgentState>>, Path(id): Path<String>) -> AgentResult {
    run(StatusCode::OK, move || st.vnfm.get_instance_state(&id)).await
}

async fn destruct(State(st): State<Arc<AgentState>>, Path(id): Path<String>) -> AgentResult {
    tokio::task::spawn_blocking(move || st.vnfm.destruct_instance(&id))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn configure(
    State(st): State<Arc<AgentState>>,
    Path(id): Path<String>,
    body: RawBody,
) -> AgentResult {
    let cfg: serde_json::Value = parse_body(&body)?;
    run(StatusCode::OK, move || {
        st.vnfm.configure_instance(&id, &cfg)
    })
    .await
}

async fn migrate(State(st): State<Arc<AgentState>>, body: RawBody) -> AgentResult {
    let b: MigrateBody = parse_body(&body)?;
    run(StatusCode::OK, move || {
        st.vnfm.migrate_instance(&b.old, &b.new, &b.flows)
    })
    .await
}

/// `GET /agent/v1/instances/{id}/flows`: the instance's flow state for another host.
async fn export_flows(State(st): State<Arc<AgentState>>, Path(id): Path<String>) -> AgentResult {
    run(StatusCode::OK, move || st.vnfm.export_state(&id)).await
}

/// `PUT /agent/v1/instances/{id}/flows`: imports another host's [`FlowState`].
async fn import_flows(
    State(st): State<Arc<AgentState>>,
    Path(id): Path<String>,
    body: RawBody,
) -> AgentResult {
    let state: FlowState = parse_body(&body)?;
    run(StatusCode::OK, move || st.vnfm.import_state(&id, &state)).await
}

/// `PUT /agent/v1/tunnels/{id}/key`: `{"psk": "<hex>"}`, a tunnel endpoint's IKE key.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyBody {
    psk: String,
}

async fn tunnel_key(
    State(st): State<Arc<AgentState>>,
    Path(id): Path<String>,
    body: RawBody,
) -> Result<Response, ApiError> {
    let b: KeyBody = parse_body(&body)?;
    let hex = zeroize::Zeroizing::new(b.psk);
    let psk = decode_hex(&hex).ok_or_else(|| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "request body: psk: expected an even number of hex digits".into(),
        )
    })?;
    tokio::task::spawn_blocking(move || st.vnfm.provision_tunnel_key(&id, &psk))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Hex digits to bytes, wiped when dropped (`None` on anything else).
fn decode_hex(s: &str) -> Option<zeroize::Zeroizing<Vec<u8>>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = zeroize::Zeroizing::new(Vec::with_capacity(s.len() / 2));
    for i in (0..s.len()).step_by(2) {
        out.push(u8::from_str_radix(&s[i..i + 2], 16).ok()?);
    }
    Some(out)
}
