//! A blocking client of the controller's REST API, used by `nfx plan|deploy|status|
//! migrate|destroy`, the demo, the benchmarks and the tests. Each route has a typed call
//! that returns the controller's own type ([`Client::deploy`], [`Client::instances`],
//! ...) or a [`Refused`] error with the status and the server's message; the raw
//! [`Client::send`] is for tests that check the wire itself (wrong bodies, tokens,
//! statuses).

use crate::controller::{InstanceStatus, ServiceRow, ServiceStatus};
use crate::energy::EnergySummary;
use crate::mediator::{InstanceRow, Plan};
use crate::ops::{OpState, Operation};
use crate::optimize::{OptimizePlan, OptimizeRun};
use crate::projection::Projection;
use crate::store::EventRecord;
use nfx_model::Service;
use serde::de::DeserializeOwned;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// An HTTP answer as it came: status code and JSON body (`{"error": ...}` on failures),
/// for tests of the wire format; everything else uses the typed calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Parsed body (a string value when the body is not JSON).
    pub body: serde_json::Value,
}

/// A call the controller answered with another status than the route's success: the
/// status and the controller's `error` message (the body itself when it has none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP {status}: {message}")]
pub struct Refused {
    /// HTTP status.
    pub status: u16,
    /// What the controller said.
    pub message: String,
}

/// The body of every error answer.
#[derive(serde::Deserialize)]
struct ErrorBody {
    error: String,
}

/// Body of `POST /api/v1/projection`.
#[derive(serde::Serialize)]
struct ProjectionBody<'a> {
    services: &'a [Service],
}

/// Body of `POST /api/v1/instances/{id}/migrate`.
#[derive(serde::Serialize)]
struct MigrateBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<&'a str>,
}

/// Body of `POST /api/v1/optimize`.
#[derive(serde::Serialize)]
struct OptimizeBody {
    time_limit_s: f64,
}

/// Client of one controller.
pub struct Client {
    base: String,
    token: Option<Zeroizing<String>>,
    agent: ureq::Agent,
}

impl Client {
    /// `base` like `http://127.0.0.1:7878`.
    pub fn new(base: &str, token: Option<Zeroizing<String>>) -> Self {
        Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
        }
    }

    /// The same client waiting up to `timeout` per request (for calls that carry out
    /// long operations before they answer, such as `POST /api/v1/optimize`).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.agent = ureq::AgentBuilder::new().timeout(timeout).build();
        self
    }

    /// Sends a request with an optional raw JSON body: the status and the body's text.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, String)> {
        let mut r = self.agent.request(method, &format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {}", t.as_str()));
        }
        let res = match body {
            Some(b) => r.set("Content-Type", "application/json").send_string(b),
            None => r.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => anyhow::bail!("{} {}{path}: {e}", method, self.base),
        };
        let status = resp.status();
        Ok((status, resp.into_string()?))
    }

    /// Sends a request with an optional raw body; the answer as it came.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Answer> {
        let (status, text) = self.exchange(method, path, body)?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Ok(Answer { status, body })
    }

    /// GET, the answer as it came.
    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.send("GET", path, None)
    }

    /// POST a body serialized as JSON (a typed request such as a
    /// [`nfx_model::Service`], or an ad-hoc object), the answer as it came.
    pub fn post<T: serde::Serialize + ?Sized>(
        &self,
        path: &str,
        body: &T,
    ) -> anyhow::Result<Answer> {
        self.send("POST", path, Some(&serde_json::to_string(body)?))
    }

    /// DELETE, the answer as it came.
    pub fn delete(&self, path: &str) -> anyhow::Result<Answer> {
        self.send("DELETE", path, None)
    }

    /// Sends a request and reads its answer as `T` when the status is `want`; any other
    /// status is [`Refused`] (inside the `anyhow` error, for callers that look at the
    /// status), an answer that is not a `T` an error naming the route.
    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        want: u16,
    ) -> anyhow::Result<T> {
        let (status, text) = self.exchange(method, path, body)?;
        if status != want {
            let message = serde_json::from_str::<ErrorBody>(&text)
                .map(|b| b.error)
                .unwrap_or(text);
            return Err(Refused { status, message }.into());
        }
        serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{method} {path}: the controller's answer does not match its format: {e}"
            )
        })
    }

    /// `GET path` read as `T`: for readers with views of their own of an answer (e.g.
    /// the demo's live counters of an instance).
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.call("GET", path, None, 200)
    }

    /// `POST /api/v1/plan`: the dry run of deploying `svc`.
    pub fn plan(&self, svc: &Service) -> anyhow::Result<Plan> {
        self.call(
            "POST",
            "/api/v1/plan",
            Some(&serde_json::to_string(svc)?),
            200,
        )
    }

    /// `POST /api/v1/projection`: the `nfx place` and `nfx chain` inputs of `services`.
    pub fn projection(&self, services: &[Service]) -> anyhow::Result<Projection> {
        let body = serde_json::to_string(&ProjectionBody { services })?;
        self.call("POST", "/api/v1/projection", Some(&body), 200)
    }

    /// `POST /api/v1/services`: starts deploying `svc`; the operation as accepted.
    pub fn deploy(&self, svc: &Service) -> anyhow::Result<Operation> {
        self.call(
            "POST",
            "/api/v1/services",
            Some(&serde_json::to_string(svc)?),
            202,
        )
    }

    /// `DELETE /api/v1/services/{id}`: starts destroying the service.
    pub fn destroy(&self, service: &str) -> anyhow::Result<Operation> {
        self.call("DELETE", &format!("/api/v1/services/{service}"), None, 202)
    }

    /// `POST /api/v1/instances/{id}/migrate`: starts moving the instance to `device` (none:
    /// the best device on its host).
    pub fn migrate(&self, instance: &str, device: Option<&str>) -> anyhow::Result<Operation> {
        let body = serde_json::to_string(&MigrateBody { device })?;
        let path = format!("/api/v1/instances/{instance}/migrate");
        self.call("POST", &path, Some(&body), 202)
    }

    /// `GET /api/v1/services`.
    pub fn services(&self) -> anyhow::Result<Vec<ServiceRow>> {
        self.call("GET", "/api/v1/services", None, 200)
    }

    /// `GET /api/v1/services/{id}`: the service with its path.
    pub fn service(&self, id: &str) -> anyhow::Result<ServiceStatus> {
        self.call("GET", &format!("/api/v1/services/{id}"), None, 200)
    }

    /// `GET /api/v1/instances`.
    pub fn instances(&self) -> anyhow::Result<Vec<InstanceRow>> {
        self.call("GET", "/api/v1/instances", None, 200)
    }

    /// `GET /api/v1/instances/{id}`: the instance with its placement and live state.
    pub fn instance(&self, id: &str) -> anyhow::Result<InstanceStatus> {
        self.call("GET", &format!("/api/v1/instances/{id}"), None, 200)
    }

    /// `GET /api/v1/operations`.
    pub fn operations(&self) -> anyhow::Result<Vec<Operation>> {
        self.call("GET", "/api/v1/operations", None, 200)
    }

    /// `GET /api/v1/operations/{id}`.
    pub fn operation(&self, id: &str) -> anyhow::Result<Operation> {
        self.call("GET", &format!("/api/v1/operations/{id}"), None, 200)
    }

    /// `GET /api/v1/energy`: energy and power per host and per service.
    pub fn energy(&self) -> anyhow::Result<EnergySummary> {
        self.call("GET", "/api/v1/energy", None, 200)
    }

    /// `GET /api/v1/events?limit=N`: the newest `limit` events.
    pub fn events(&self, limit: usize) -> anyhow::Result<Vec<EventRecord>> {
        self.call("GET", &format!("/api/v1/events?limit={limit}"), None, 200)
    }

    /// `GET /api/v1/optimize`: the exact re-placement of every deployed service, not
    /// carried out.
    pub fn optimize_plan(&self, time_limit_s: f64) -> anyhow::Result<OptimizePlan> {
        let path = format!("/api/v1/optimize?time_limit_s={time_limit_s}");
        self.call("GET", &path, None, 200)
    }

    /// `POST /api/v1/optimize`: the exact re-placement, carried out by migrations (the
    /// answer comes once they have run: give the client a long timeout).
    pub fn optimize(&self, time_limit_s: f64) -> anyhow::Result<OptimizeRun> {
        let body = serde_json::to_string(&OptimizeBody { time_limit_s })?;
        self.call("POST", "/api/v1/optimize", Some(&body), 200)
    }

    /// Polls an operation until it reaches a final state or `timeout` passes.
    pub fn wait_operation(&self, id: &str, timeout: Duration) -> anyhow::Result<Operation> {
        let start = Instant::now();
        loop {
            let op = self
                .operation(id)
                .map_err(|e| e.context(format!("operation {id}")))?;
            if op.state.is_final() {
                return Ok(op);
            }
            if start.elapsed() > timeout {
                anyhow::bail!(
                    "operation {id} still {} after {timeout:?}",
                    op.state.as_str()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for an operation like [`Client::wait_operation`] and fails unless it
    /// `COMPLETED`, naming its final state and the error it recorded.
    pub fn wait_completed(&self, id: &str, timeout: Duration) -> anyhow::Result<Operation> {
        let done = self.wait_operation(id, timeout)?;
        if done.state != OpState::Completed {
            anyhow::bail!(
                "operation {id} ended {}: {}",
                done.state.as_str(),
                done.error.as_deref().unwrap_or("no error recorded")
            );
        }
        Ok(done)
    }
}

/// The token from `NFX_TOKEN`, else from `file` (trimmed); errors name the file.
pub fn load_token(file: Option<&std::path::Path>) -> anyhow::Result<Option<Zeroizing<String>>> {
    if let Ok(t) = std::env::var("NFX_TOKEN") {
        if !t.is_empty() {
            return Ok(Some(Zeroizing::new(t)));
        }
    }
    file.map(read_token_file).transpose()
}

/// The token in `file` (trimmed, not empty); errors name the file.
pub fn read_token_file(f: &std::path::Path) -> anyhow::Result<Zeroizing<String>> {
    nfx_io::token::read_file(f).map_err(anyhow::Error::msg)
}

/// Reads a service descriptor file (`services: [...]`) into typed services ready to
/// POST; errors name the file and the field.
pub fn load_services(path: &std::path::Path) -> anyhow::Result<Vec<nfx_model::Service>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
    let set: nfx_model::ServiceSet =
        serde_yaml_ng::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(set.services)
}

/// The token for `nfx up`: `NFX_TOKEN`, else `file` if it exists, else a new random token
/// written to `file` (mode 0600). Returns the token and where it came from.
pub fn ensure_token(file: &std::path::Path) -> anyhow::Result<(Zeroizing<String>, String)> {
    if let Some(t) = load_token(None)? {
        return Ok((t, "NFX_TOKEN".into()));
    }
    token_file_or_new(file)
}

/// The token in `file`, or a new random one written there (mode 0600) when `file` does not
/// exist. Returns the token and where it came from.
pub fn token_file_or_new(file: &std::path::Path) -> anyhow::Result<(Zeroizing<String>, String)> {
    if file.exists() {
        return Ok((read_token_file(file)?, file.display().to_string()));
    }
    let t = write_new_token(file)?;
    Ok((t, format!("{} (new)", file.display())))
}

/// Writes a new random bearer token (24 bytes from the kernel, hex) to `file` (replacing
/// it), mode 0600. Returns the token.
pub fn write_new_token(file: &std::path::Path) -> anyhow::Result<Zeroizing<String>> {
    let t = nfx_io::token::random().map_err(anyhow::Error::msg)?;
    nfx_io::token::write_private(file, t.as_bytes())
        .map_err(|e| anyhow::anyhow!("token file {e}"))?;
    Ok(t)
}
