//! The controller's REST API (axum): services, instances, operations, events, plan, plus
//! `/openapi.json`, `/metrics` and `/healthz`, and the host agent's `/agent/v1` routes for
//! the embedded agent, and the live dashboard ([`dashboard`]). Errors are JSON
//! `{"error": "..."}` with 400/401/403/404/409; every route but `/healthz` and the
//! dashboard's static page needs `Authorization: Bearer <token>`: the admin token anywhere,
//! the optional read-only token on reads only (see [`Tokens`]).

pub mod dashboard;
pub mod metrics;
pub mod openapi;

use crate::agent;
use crate::controller::{Controller, CtlError};
use crate::vnfm::Vnfm;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics::ApiMetrics;
use std::collections::HashMap;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Shared state of the handlers.
pub struct ApiState {
    /// The controller.
    pub ctl: Arc<Controller>,
    /// The bearer tokens the API accepts.
    pub tokens: Tokens,
    /// Request metrics.
    pub metrics: ApiMetrics,
}

/// A JSON error answer.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({"error": self.1}))).into_response()
    }
}

impl From<CtlError> for ApiError {
    fn from(e: CtlError) -> Self {
        let code = match &e {
            CtlError::BadRequest(_) => StatusCode::BAD_REQUEST,
            CtlError::NotFound(_) => StatusCode::NOT_FOUND,
            CtlError::Conflict(_) => StatusCode::CONFLICT,
            CtlError::Internal(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(code, e.to_string())
    }
}

type ApiResult = Result<Response, ApiError>;

/// The bearer tokens a server accepts: `admin` on every route, `read` (optional) only on
/// requests that change nothing ([`is_read`]).
#[derive(Clone)]
pub struct Tokens {
    /// Allowed everywhere.
    pub admin: Zeroizing<String>,
    /// Allowed on GET/HEAD and the dry-run `POST /api/v1/plan` and `/api/v1/projection`.
    pub read: Option<Zeroizing<String>>,
}

impl Tokens {
    /// Only an admin token (the host agent's API).
    pub fn admin(admin: Zeroizing<String>) -> Self {
        Tokens { admin, read: None }
    }
}

/// Whether `headers` carry the bearer `token` (compared in constant time).
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let h = headers.get("authorization").and_then(|v| v.to_str().ok());
    nfx_io::token::bearer_matches(h, token)
}

/// Whether a request of `method` on `path` only reads: GET, HEAD, the dry-run plan and
/// the projections.
pub fn is_read(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        || (*method == Method::POST && matches!(path, "/api/v1/plan" | "/api/v1/projection"))
}

/// Admits a request carrying the admin token, or the read token on a read; 401 without a
/// known token, 403 for the read token on a call that changes state.
pub fn check_access(
    tokens: &Tokens,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
) -> Result<(), ApiError> {
    if authorized(headers, &tokens.admin) {
        return Ok(());
    }
    match &tokens.read {
        Some(r) if authorized(headers, r) => {
            if is_read(method, path) {
                Ok(())
            } else {
                Err(ApiError(
                    StatusCode::FORBIDDEN,
                    format!("the read-only token cannot {method} {path}; use the admin token"),
                ))
            }
        }
        _ => Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (send `Authorization: Bearer <token>`)".into(),
        )),
    }
}

async fn authenticate(State(t): State<Arc<Tokens>>, req: Request, next: Next) -> Response {
    match check_access(&t, req.headers(), req.method(), req.uri().path()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Puts every route `r` has so far behind `tokens` (routes added afterwards stay open).
pub fn protect<S: Clone + Send + Sync + 'static>(r: Router<S>, tokens: Tokens) -> Router<S> {
    r.route_layer(axum::middleware::from_fn_with_state(
        Arc::new(tokens),
        authenticate,
    ))
}

/// A request body as a handler takes it: the bytes, or why they could not be read (over
/// the router's body limit: 413), which [`parse_body`] answers in JSON like every error.
pub type RawBody = Result<Bytes, BytesRejection>;

impl From<&BytesRejection> for ApiError {
    fn from(r: &BytesRejection) -> Self {
        ApiError(r.status(), format!("request body: {}", r.body_text()))
    }
}

/// Parses a JSON body into `T`; the message names the field and the problem.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &RawBody) -> Result<T, ApiError> {
    let body = body.as_ref().map_err(ApiError::from)?;
    if body.is_empty() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "request body: expected a JSON document, got nothing".into(),
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("request body: {e}")))
}

/// Runs a blocking controller call off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CtlError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
}

fn ok<T: serde::Serialize>(code: StatusCode, v: T) -> ApiResult {
    Ok((code, Json(v)).into_response())
}

/// The whole router: controller API, agent API for `agent_vnfm` (if any), docs, metrics,
/// and the dashboard (its page open, its data behind the tokens).
pub fn router(state: Arc<ApiState>, agent_vnfm: Option<Arc<dyn Vnfm>>) -> Router {
    let (page, live) = dashboard::routes(dashboard::Dashboard::new(
        state.ctl.clone(),
        state.tokens.admin.clone(),
    ));
    let api = Router::new()
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .route("/metrics", get(metrics_handler))
        .route("/api/v1/plan", post(plan))
        .route("/api/v1/projection", post(projection))
        .route("/api/v1/optimize", get(optimize_plan).post(optimize))
        .route("/api/v1/services", get(list_services).post(deploy))
        .route("/api/v1/services/{id}", get(get_service).delete(destroy))
        .route("/api/v1/instances", get(list_instances))
        .route("/api/v1/instances/{id}", get(get_instance))
        .route("/api/v1/instances/{id}/migrate", post(migrate))
        .route("/api/v1/operations", get(list_operations))
        .route("/api/v1/energy", get(energy))
        .route("/api/v1/operations/{id}", get(get_operation))
        .route("/api/v1/events", get(events))
        .with_state(state.clone())
        .merge(live);
    let api = match agent_vnfm {
        Some(v) => api.merge(agent::router(v)),
        None => api,
    };
    let api = protect(api, state.tokens.clone())
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .merge(page);
    json_fallbacks(api, "; see /openapi.json")
        .layer(axum::middleware::from_fn_with_state(state, track))
}

/// Answers a wrong method on a known route (405) and an unknown route (404) in JSON like
/// every other error, with `hint` after the message.
pub fn json_fallbacks(r: Router, hint: &'static str) -> Router {
    r.method_not_allowed_fallback(move |req: Request| async move {
        ApiError(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "method {} not allowed on {}{hint}",
                req.method(),
                req.uri().path()
            ),
        )
    })
    .fallback(move || async move {
        ApiError(StatusCode::NOT_FOUND, format!("no such route{hint}"))
    })
}

/// Middleware: counts every request and its latency by route.
async fn track(State(st): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    st.metrics.observe(req, next).await
}

async fn metrics_handler(State(st): State<Arc<ApiState>>) -> ApiResult {
    let text = blocking(move || st.metrics.scrape(&st.ctl)).await?;
    Ok(([("content-type", nfx_metrics::CONTENT_TYPE)], text).into_response())
}

async fn plan(State(st): State<Arc<ApiState>>, body: RawBody) -> ApiResult {
    let svc = parse_body(&body)?;
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.plan(&svc)).await?)
}

async fn projection(State(st): State<Arc<ApiState>>, body: RawBody) -> ApiResult {
    let req: crate::projection::ProjectionRequest = parse_body(&body)?;
    let ctl = st.ctl.clone();
    ok(
        StatusCode::OK,
        blocking(move || ctl.projection(&req.services)).await?,
    )
}

/// Longest exact re-placement `optimize` accepts, seconds.
const MAX_OPTIMIZE_S: f64 = 600.0;

/// The exact solver's time limit of `optimize`: `time_limit_s` (default 10) in (0, 600].
fn time_limit(v: Option<&str>) -> Result<std::time::Duration, ApiError> {
    let s = v.unwrap_or("10");
    s.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0 && *t <= MAX_OPTIMIZE_S)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| {
            ApiError(
                StatusCode::BAD_REQUEST,
                format!("time_limit_s: {s:?} is not a number of seconds in (0, {MAX_OPTIMIZE_S}]"),
            )
        })
}

async fn optimize_plan(
    State(st): State<Arc<ApiState>>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let limit = time_limit(q.get("time_limit_s").map(String::as_str))?;
    let ctl = st.ctl.clone();
    ok(
        StatusCode::OK,
        blocking(move || ctl.optimize_plan(limit)).await?,
    )
}

/// Body of `POST /api/v1/optimize` (optional).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OptimizeBody {
    /// The exact solver's time limit, seconds.
    #[serde(default)]
    time_limit_s: Option<f64>,
}

async fn optimize(State(st): State<Arc<ApiState>>, body: RawBody) -> ApiResult {
    let b: OptimizeBody = if body.as_ref().is_ok_and(|b| b.is_empty()) {
        OptimizeBody { time_limit_s: None }
    } else {
        parse_body(&body)?
    };
    let limit = time_limit(b.time_limit_s.map(|t| t.to_string()).as_deref())?;
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.optimize(limit)).await?)
}

async fn deploy(State(st): State<Arc<ApiState>>, body: RawBody) -> ApiResult {
    let svc = parse_body(&body)?;
    let ctl = st.ctl.clone();
    ok(
        StatusCode::ACCEPTED,
        blocking(move || ctl.deploy(svc)).await?,
    )
}

async fn list_services(State(st): State<Arc<ApiState>>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.services()).await?)
}

async fn get_service(State(st): State<Arc<ApiState>>, Path(id): Path<String>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.service(&id)).await?)
}

async fn destroy(State(st): State<Arc<ApiState>>, Path(id): Path<String>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(
        StatusCode::ACCEPTED,
        blocking(move || ctl.destroy(&id)).await?,
    )
}

async fn list_instances(State(st): State<Arc<ApiState>>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.instances()).await?)
}

async fn get_instance(State(st): State<Arc<ApiState>>, Path(id): Path<String>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.instance(&id)).await?)
}

/// Body of `POST /api/v1/instances/{id}/migrate`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrateBody {
    /// Target device; absent = best device on the same host.
    #[serde(default)]
    device: Option<String>,
}

async fn migrate(
    State(st): State<Arc<ApiState>>,
    Path(id): Path<String>,
    body: RawBody,
) -> ApiResult {
    let b: MigrateBody = if body.as_ref().is_ok_and(|b| b.is_empty()) {
        MigrateBody { device: None }
    } else {
        parse_body(&body)?
    };
    let ctl = st.ctl.clone();
    ok(
        StatusCode::ACCEPTED,
        blocking(move || ctl.migrate(&id, b.device.as_deref())).await?,
    )
}

async fn list_operations(State(st): State<Arc<ApiState>>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.operations()).await?)
}

async fn energy(State(st): State<Arc<ApiState>>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.energy()).await?)
}

async fn get_operation(State(st): State<Arc<ApiState>>, Path(id): Path<String>) -> ApiResult {
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.operation(&id)).await?)
}

async fn events(
    State(st): State<Arc<ApiState>>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let limit = match q.get("limit") {
        None => 100,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| {
                ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("query `limit`: {s:?} is not an integer in 1..=10000"),
                )
            })?,
    };
    let ctl = st.ctl.clone();
    ok(StatusCode::OK, blocking(move || ctl.events(limit)).await?)
}
