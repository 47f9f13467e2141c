//! The live web dashboard of `nfx up`: a page embedded in the binary (`/`, its script and
//! style; static, no data, no token) and, behind the API's tokens, one snapshot
//! (`GET /api/v1/dashboard`) and a stream of them as server-sent events
//! (`GET /api/v1/dashboard/stream`). The page keeps the token the operator types in
//! `sessionStorage` and reads the stream with `fetch` so the token travels in the
//! `Authorization` header, never in a URL (docs/security.md).
//!
//! One sampler thread per controller reads a snapshot every [`PERIOD`] while at least one
//! stream is open and stops when the last one closes; every stream gets the newest.

pub mod snapshot;

use super::{authorized, ApiError};
use crate::controller::Controller;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::{Deserialize, Serialize};
use snapshot::{Previous, Snapshot};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use zeroize::Zeroizing;

/// How often the sampler reads a snapshot while a stream is open (a counter change
/// reaches the page within this plus one sample's time).
pub const PERIOD: Duration = Duration::from_millis(500);

/// The page, its script and style, and their content types.
const ASSETS: [(&str, &str, &str); 3] = [
    ("/", "text/html; charset=utf-8", include_str!("index.html")),
    (
        "/dashboard/app.js",
        "text/javascript; charset=utf-8",
        include_str!("app.js"),
    ),
    (
        "/dashboard/app.css",
        "text/css; charset=utf-8",
        include_str!("app.css"),
    ),
];

/// Served with every asset: scripts and styles from this origin only, no frames, and no
/// `Referer` leaving the page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The first event of a stream: what the token may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// `admin` (may migrate and destroy) or `read`.
    pub role: String,
    /// Sampling period, ms.
    pub period_ms: u64,
}

/// The sampler shared by every stream of one controller.
pub struct Dashboard {
    ctl: Arc<Controller>,
    admin: Zeroizing<String>,
    tx: watch::Sender<Arc<Snapshot>>,
    sampling: Mutex<bool>,
}

impl Dashboard {
    /// A dashboard of `ctl`; `admin` tells which streams may act.
    pub fn new(ctl: Arc<Controller>, admin: Zeroizing<String>) -> Arc<Self> {
        Arc::new(Dashboard {
            ctl,
            admin,
            tx: watch::Sender::new(Arc::new(Snapshot::default())),
            sampling: Mutex::new(false),
        })
    }

    /// A receiver of snapshots; starts the sampler if none runs.
    fn subscribe(self: &Arc<Self>) -> watch::Receiver<Arc<Snapshot>> {
        let mut on = self.sampling.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.tx.subscribe();
        if !*on {
            *on = true;
            let me = self.clone();
            std::thread::spawn(move || me.sample());
        }
        rx
    }

    /// The sampler loop: one snapshot per period until no stream is left.
    fn sample(&self) {
        let mut prev = Previous::default();
        let mut seq = self.tx.borrow().seq;
        loop {
            {
                let mut on = self.sampling.lock().unwrap_or_else(|e| e.into_inner());
                if self.tx.receiver_count() == 0 {
                    *on = false;
                    return;
                }
            }
            seq += 1;
            match snapshot::take(&self.ctl, seq, &mut prev) {
                Ok(s) => {
                    self.tx.send_replace(Arc::new(s));
                }
                Err(e) => log::warn!("dashboard sample: {e}"),
            }
            std::thread::sleep(PERIOD);
        }
    }
}

/// The dashboard's routes: assets open, the rest to be put behind the tokens.
pub fn routes(d: Arc<Dashboard>) -> (Router, Router) {
    let mut open = Router::new();
    for (path, ctype, body) in ASSETS {
        open = open.route(path, get(move || async move { asset(ctype, body) }));
    }
    let api = Router::new()
        .route("/api/v1/dashboard", get(one))
        .route("/api/v1/dashboard/stream", get(stream_handler))
        .with_state(d);
    (open, api)
}

fn asset(ctype: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, ctype),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn one(State(d): State<Arc<Dashboard>>) -> Result<Response, ApiError> {
    let ctl = d.ctl.clone();
    let s = tokio::task::spawn_blocking(move || snapshot::take(&ctl, 0, &mut Previous::default()))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(s).into_response())
}

/// Query of the stream.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    /// End the stream after this many snapshots (default: never).
    max_events: Option<u64>,
}

async fn stream_handler(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    if q.max_events == Some(0) {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "query `max_events`: must be at least 1".into(),
        ));
    }
    let hello = Hello {
        role: if authorized(&headers, &d.admin) {
            "admin"
        } else {
            "read"
        }
        .into(),
        period_ms: PERIOD.as_millis() as u64,
    };
    let rx = d.subscribe();
    Ok(
        Sse::new(events(hello, rx, q.max_events.unwrap_or(u64::MAX)))
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

/// `hello`, then every new snapshot as event `snapshot`, `left` of them.
fn events(
    hello: Hello,
    rx: watch::Receiver<Arc<Snapshot>>,
    left: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = stream::once(async move { Ok(json_event("hello", &hello)) });
    let rest = stream::unfold((rx, left, true), |(mut rx, left, first)| async move {
        if left == 0 {
            return None;
        }
        if !first {
            rx.changed().await.ok()?;
        }
        loop {
            let s = rx.borrow_and_update().clone();
            if s.seq > 0 {
                return Some((Ok(json_event("snapshot", &*s)), (rx, left - 1, false)));
            }
            rx.changed().await.ok()?;
        }
    });
    stream::StreamExt::chain(first, rest)
}

fn json_event<T: Serialize>(name: &str, v: &T) -> Event {
    Event::default()
        .event(name)
        .json_data(v)
        .unwrap_or_else(|e| Event::default().comment(format!("encoding {name}: {e}")))
}
