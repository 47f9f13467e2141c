//! Remote VNFM: a client of a host agent's REST API (`/agent/v1/...`, served by
//! [`crate::agent`]), so the mediator can drive infrastructure on another host through the
//! same trait.

use super::{InstanceSpec, InstanceState, MigrateReport, Vnfm, VnfmError};
use std::time::Duration;

/// A host agent reached over HTTP.
pub struct RemoteVnfm {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl RemoteVnfm {
    /// `base` like `http://127.0.0.1:8181`; `token` is sent as a bearer token.
    pub fn new(base: &str, token: Option<String>) -> Self {
        RemoteVnfm {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
        }
    }

    fn req(&self, method: &str, path: &str) -> ureq::Request {
        let r = self
            .agent
            .request(method, &format!("{}/agent/v1{path}", self.base));
        match &self.token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
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
        decode(call(self.req("POST", "/instances").send_json(spec))?)
    }

    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError> {
        call(
            self.req("DELETE", &format!("/instances/{}", seg(id)))
                .call(),
        )
        .map(|_| ())
    }

    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError> {
        decode(call(
            self.req("PUT", &format!("/instances/{}/config", seg(id)))
                .send_json(config),
        )?)
    }

    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError> {
        decode(call(self.req("POST", "/migrations").send_json(
            serde_json::json!({"old": old, "new": new, "flows": flows}),
        ))?)
    }

    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError> {
        decode(call(
            self.req("GET", &format!("/instances/{}", seg(id))).call(),
        )?)
    }

    fn list_instances(&self) -> Result<Vec<String>, VnfmError> {
        decode(call(self.req("GET", "/instances").call())?)
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
