//! Remote VNFM: a client of a host agent's REST API (`/agent/v1/...`, served by
//! [`crate::agent`] and [`crate::hostagent::api`]), so the mediator can drive
//! infrastructure on another host through the same trait; also the agent's heartbeat and
//! path calls. Over HTTPS it verifies the agent against the CA and presents the
//! controller's certificate ([`crate::tls`]); with a management namespace every socket is
//! opened from a thread inside it ([`NetnsExecutor`]).

use super::{FlowImport, FlowState, InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError};
use crate::hostagent::steering::HostPath;
use crate::hostagent::Health;
use crate::netns_exec::NetnsExecutor;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use zeroize::Zeroizing;

/// Largest `/metrics` answer accepted from an agent.
pub const MAX_METRICS: u64 = 16 << 20;

/// How the controller reaches one agent.
#[derive(Clone)]
pub struct AgentLink {
    /// Base URL, `https://addr:port`.
    pub base: String,
    /// Bearer token sent on every call.
    pub token: Option<Zeroizing<String>>,
    /// TLS client configuration (required for `https://`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Namespace threads to open the connections from.
    pub exec: Option<Arc<NetnsExecutor>>,
    /// Time limit of one call.
    pub timeout: Duration,
}

/// A host agent reached over HTTP(S).
pub struct RemoteVnfm {
    base: String,
    token: Option<Zeroizing<String>>,
    agent: ureq::Agent,
    exec: Option<Arc<NetnsExecutor>>,
}

impl RemoteVnfm {
    /// `base` like `http://127.0.0.1:8181`; `token` is sent as a bearer token.
    pub fn new(base: &str, token: Option<String>) -> Self {
        Self::with_link(AgentLink {
            base: base.into(),
            token: token.map(Zeroizing::new),
            tls: None,
            exec: None,
            timeout: Duration::from_secs(30),
        })
    }

    /// A client for `link`.
    pub fn with_link(link: AgentLink) -> Self {
        let mut b = ureq::AgentBuilder::new().timeout(link.timeout);
        if let Some(t) = link.tls {
            b = b.tls_config(t);
        }
        RemoteVnfm {
            base: link.base.trim_end_matches('/').to_string(),
            token: link.token,
            agent: b.build(),
            exec: link.exec,
        }
    }

    fn req(&self, method: &str, path: &str) -> ureq::Request {
        let r = self
            .agent
            .request(method, &format!("{}/agent/v1{path}", self.base));
        match &self.token {
            Some(t) => r.set("Authorization", &format!("Bearer {}", t.as_str())),
            None => r,
        }
    }

    /// Sends `r` without a body from the management namespace if there is one.
    fn send(&self, r: ureq::Request) -> Result<serde_json::Value, VnfmError> {
        self.on_link(move || call(r.call()))
    }

    /// Sends `r` with `body` as JSON, serialized straight into the request's text (a
    /// flow state of up to 64 MiB is not copied into a JSON value first).
    fn send_json<B: serde::Serialize + ?Sized>(
        &self,
        r: ureq::Request,
        body: &B,
    ) -> Result<serde_json::Value, VnfmError> {
        let text = serde_json::to_string(body).map_err(|e| VnfmError::Invalid(e.to_string()))?;
        let r = r.set("Content-Type", "application/json");
        self.on_link(move || call(r.send_string(&text)))
    }

    /// Runs `go` (which opens a connection) from the management namespace if there is one.
    fn on_link<T: Send + 'static>(
        &self,
        go: impl FnOnce() -> Result<T, VnfmError> + Send + 'static,
    ) -> Result<T, VnfmError> {
        match &self.exec {
            Some(x) => x.run(go).unwrap_or_else(|| {
                Err(VnfmError::Unavailable(format!(
                    "no thread left in namespace {}",
                    x.netns()
                )))
            }),
            None => go(),
        }
    }

    /// The agent's `/metrics` text (at most [`MAX_METRICS`] bytes).
    pub fn metrics(&self) -> Result<String, VnfmError> {
        let mut r = self.agent.get(&format!("{}/metrics", self.base));
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {}", t.as_str()));
        }
        self.on_link(move || {
            let resp = r
                .call()
                .map_err(|e| VnfmError::Unavailable(format!("agent /metrics: {e}")))?;
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(resp.into_reader(), MAX_METRICS + 1),
                &mut text,
            )
            .map_err(|e| VnfmError::Unavailable(format!("agent /metrics: {e}")))?;
            if text.len() as u64 > MAX_METRICS {
                return Err(VnfmError::Unavailable(format!(
                    "agent /metrics: larger than {MAX_METRICS} bytes"
                )));
            }
            Ok(text)
        })
    }

    /// The agent's heartbeat.
    pub fn health(&self) -> Result<Health, VnfmError> {
        decode(self.send(self.req("GET", "/health"))?)
    }

    /// Sets one worker's power knob; the answer is read back from the kernel.
    pub fn set_knob(
        &self,
        req: &crate::hostagent::knobs::KnobRequest,
    ) -> Result<crate::hostagent::knobs::KnobAnswer, VnfmError> {
        decode(self.send_json(self.req("POST", "/knobs"), req)?)
    }

    /// Switches tunnel endpoint `id` live onto its device's queue pair or to its CPU
    /// engine (the controller's SSM).
    pub fn set_tunnel_engine(
        &self,
        id: &str,
        req: crate::hostagent::tunnels::EngineRequest,
    ) -> Result<crate::hostagent::tunnels::EngineSwitch, VnfmError> {
        decode(self.send_json(
            self.req("POST", &format!("/tunnels/{}/engine", seg(id))),
            &req,
        )?)
    }

    /// Programs the host's part of `service`'s path.
    pub fn put_path(&self, service: &str, path: &HostPath) -> Result<(), VnfmError> {
        self.send_json(self.req("PUT", &format!("/paths/{}", seg(service))), path)
            .map(|_| ())
    }

    /// Removes `service`'s path from the host.
    pub fn delete_path(&self, service: &str) -> Result<(), VnfmError> {
        self.send(self.req("DELETE", &format!("/paths/{}", seg(service))))
            .map(|_| ())
    }

    /// Makes the host's paths exactly `paths`.
    pub fn sync_paths(&self, paths: &BTreeMap<String, HostPath>) -> Result<(), VnfmError> {
        self.send_json(self.req("PUT", "/paths"), paths).map(|_| ())
    }
}

/// Maps an HTTP answer back onto the VNFM error kinds.
fn call(res: Result<ureq::Response, ureq::Error>) -> Result<serde_json::Value, VnfmError> {
    match res {
        Ok(r) if r.status() == 204 => Ok(serde_json::Value::Null),
        Ok(r) => r
            .into_json()
            .map_err(|e| VnfmError::Unavailable(format!("agent answer: {e}"))),
        Err(ureq::Error::Status(code, r)) => {
            let body: serde_json::Value = r.into_json().unwrap_or_default();
            let msg = body["error"].as_str().unwrap_or("no message").to_string();
            Err(match code {
                404 => VnfmError::NotFound(msg),
                409 => VnfmError::Conflict(msg),
                400 | 401 | 422 => VnfmError::Invalid(msg),
                _ => VnfmError::Unavailable(format!("agent HTTP {code}: {msg}")),
            })
        }
        Err(e) => Err(VnfmError::Unavailable(format!("agent: {e}"))),
    }
}

/// An agent's [`FlowState`] answer, read up to [`crate::agent::STATE_BODY_LIMIT`] bytes
/// (larger: refused, never truncated).
fn flow_state(res: Result<ureq::Response, ureq::Error>) -> Result<FlowState, VnfmError> {
    let r = match res {
        Ok(r) => r,
        Err(e) => return call(Err(e)).and_then(decode),
    };
    let limit = crate::agent::STATE_BODY_LIMIT as u64;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(r.into_reader(), limit + 1),
        &mut text,
    )
    .map_err(|e| VnfmError::Unavailable(format!("agent flow state: {e}")))?;
    if text.len() as u64 > limit {
        return Err(VnfmError::Conflict(format!(
            "agent flow state: larger than {limit} bytes"
        )));
    }
    serde_json::from_str(&text)
        .map_err(|e| VnfmError::Unavailable(format!("agent flow state: {e}")))
}

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, VnfmError> {
    serde_json::from_value(v).map_err(|e| VnfmError::Unavailable(format!("agent answer: {e}")))
}

/// Percent-encodes an id for a URL path segment.
fn seg(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Vnfm for RemoteVnfm {
    fn kind(&self) -> &'static str {
        "remote"
    }

    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError> {
        decode(self.send_json(self.req("POST", "/instances"), spec)?)
    }

    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        self.send(self.req("DELETE", &format!("/instances/{}", seg(id))))
            .map(|_| ())
    }

    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        decode(self.send_json(
            self.req("PUT", &format!("/instances/{}/config", seg(id))),
            config,
        )?)
    }

    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        let body = crate::agent::MigrateBody {
            old: old.into(),
            new: new.into(),
            flows: flows.to_vec(),
        };
        decode(self.send_json(self.req("POST", "/migrations"), &body)?)
    }

    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        decode(self.send(self.req("GET", &format!("/instances/{}", seg(id))))?)
    }

    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        decode(self.send(self.req("GET", "/instances"))?)
    }

    /// `GET /agent/v1/instances/{id}/flows`.
    fn export_state(&self, id: &str) -> Result<FlowState, VnfmError> {
        let r = self.req("GET", &format!("/instances/{}/flows", seg(id)));
        self.on_link(move || flow_state(r.call()))
    }

    /// `PUT /agent/v1/instances/{id}/flows`.
    fn import_state(&self, id: &str, state: &FlowState) -> Result<FlowImport, VnfmError> {
        decode(self.send_json(
            self.req("PUT", &format!("/instances/{}/flows", seg(id))),
            state,
        )?)
    }

    /// `PUT /agent/v1/tunnels/{id}/key` over the agent's mutual-TLS link; the body is
    /// built and dropped zeroized.
    fn provision_tunnel_key(&self, id: &str, psk: &[u8]) -> Result<(), VnfmError> {
        let hex: String = psk.iter().map(|b| format!("{b:02x}")).collect();
        let body = Zeroizing::new(format!("{{\"psk\":\"{}\"}}", Zeroizing::new(hex).as_str()));
        let r = self
            .req("PUT", &format!("/tunnels/{}/key", seg(id)))
            .set("Content-Type", "application/json");
        self.on_link(move || call(r.send_string(body.as_str())))
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_escaped_and_dead_agents_are_unavailable() {
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        let v = RemoteVnfm::new("http://127.0.0.1:1/", None);
        assert!(matches!(
            v.get_instance_state("x").unwrap_err(),
            VnfmError::Unavailable(_)
        ));
    }
}
