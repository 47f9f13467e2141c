//! Client of a VNF's element manager (EM): the HTTP/1.1 JSON API every tunnel endpoint
//! serves (`GET /status`, `POST /accelerator/use`, `POST /accelerator/release`), every call
//! with the EM's bearer token.

use std::time::Duration;

use serde::Deserialize;
use zeroize::Zeroizing;

/// What an EM reports in `GET /status` (only the fields the SSM uses; others are ignored).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct EmStatus {
    /// Engine in use now (`soft`, `cpu` or `lookaside`).
    pub engine: String,
    /// Algorithm of the tunnel's SA (e.g. `aes-128-gcm`).
    #[serde(default)]
    pub alg: String,
    /// CPU utilisation of the VNF over the last sampling interval, in percent of one core.
    pub cpu_pct: f64,
    /// Sent throughput over the same interval.
    #[serde(default)]
    pub tx_gbps: f64,
    /// Received throughput over the same interval.
    #[serde(default)]
    pub rx_gbps: f64,
    /// ESP packets sent since start (for loss accounting).
    #[serde(default)]
    pub tx_packets: u64,
    /// ESP packets received and accepted since start.
    #[serde(default)]
    pub rx_packets: u64,
    /// Mean packet size, which selects the calibration point.
    #[serde(default)]
    pub mean_packet_bytes: f64,
    /// Whether the VNF's data path is up (a tunnel answers before its TUN has its
    /// address); an EM that does not report it is taken as ready.
    #[serde(default = "ready_by_default")]
    pub ready: bool,
}

fn ready_by_default() -> bool {
    true
}

/// Why an EM call failed.
#[derive(Debug, thiserror::Error)]
pub enum EmError {
    /// The EM could not be reached or did not answer in time.
    #[error("EM {url} unreachable: {what}")]
    Unreachable {
        /// Base URL of the EM.
        url: String,
        /// The transport error.
        what: String,
    },
    /// The EM answered with an error status.
    #[error("EM {url} answered {code}: {body}")]
    Refused {
        /// Base URL of the EM.
        url: String,
        /// HTTP status code.
        code: u16,
        /// The error body (`{"error": ...}`).
        body: String,
    },
    /// The EM answered 200 with a body that is not the agreed JSON.
    #[error("EM {url} sent a malformed answer: {what}")]
    Malformed {
        /// Base URL of the EM.
        url: String,
        /// The parse error.
        what: String,
    },
}

/// Answer to use/release: the engine now in use and how long the switch took.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SwitchReply {
    /// Engine in use after the switch.
    pub engine: String,
    /// Duration of the live switch in microseconds.
    #[serde(default)]
    pub switch_us: u64,
}

/// An HTTP client bound to one EM, with a timeout on every call so that a hung VNF
/// cannot stall the SSM loop.
pub struct EmClient {
    base: String,
    token: Zeroizing<String>,
    agent: ureq::Agent,
}

impl EmClient {
    /// A client for the EM at `base` (e.g. `http://127.0.0.1:7301`) sending `token`.
    pub fn new(base: &str, token: Zeroizing<String>, timeout: Duration) -> EmClient {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout(timeout)
            .build();
        EmClient {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent,
        }
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        self.agent
            .request(method, &format!("{}{path}", self.base))
            .set("Authorization", &format!("Bearer {}", self.token.as_str()))
    }

    /// The EM's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// `GET /status`.
    pub fn status(&self) -> Result<EmStatus, EmError> {
        let r = self.request("GET", "/status").call();
        self.json(r)
    }

    /// `POST /accelerator/use` with the lookaside device's socket path.
    pub fn use_accelerator(&self, device: &str) -> Result<SwitchReply, EmError> {
        let body = serde_json::json!({ "device": device }).to_string();
        let r = self
            .request("POST", "/accelerator/use")
            .set("Content-Type", "application/json")
            .send_string(&body);
        self.json(r)
    }

    /// `POST /accelerator/release`.
    pub fn release_accelerator(&self) -> Result<SwitchReply, EmError> {
        let r = self
            .request("POST", "/accelerator/release")
            .set("Content-Type", "application/json")
            .send_string("{}");
        self.json(r)
    }

    fn json<T: for<'de> Deserialize<'de>>(
        &self,
        r: Result<ureq::Response, ureq::Error>,
    ) -> Result<T, EmError> {
        let url = self.base.clone();
        match r {
            Ok(resp) => {
                let text = resp.into_string().map_err(|e| EmError::Unreachable {
                    url: url.clone(),
                    what: e.to_string(),
                })?;
                serde_json::from_str(&text).map_err(|e| EmError::Malformed {
                    url,
                    what: e.to_string(),
                })
            }
            Err(ureq::Error::Status(code, resp)) => Err(EmError::Refused {
                url,
                code,
                body: resp.into_string().unwrap_or_default(),
            }),
            Err(e) => Err(EmError::Unreachable {
                url,
                what: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_read_and_defaults_to_true() {
        let base = r#""engine":"soft","cpu_pct":12.5"#;
        let s: EmStatus = serde_json::from_str(&format!("{{{base}}}")).unwrap();
        assert!(s.ready);
        let s: EmStatus = serde_json::from_str(&format!("{{{base},\"ready\":false}}")).unwrap();
        assert!(!s.ready);
    }
}
