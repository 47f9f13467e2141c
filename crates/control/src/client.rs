//! A blocking client of the controller's REST API, used by `nfx plan|deploy|status|
//! migrate|destroy` and by the tests.

use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// An HTTP answer: status code and JSON body (`{"error": ...}` on failures).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Parsed body (a string value when the body is not JSON).
    pub body: serde_json::Value,
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

    /// Sends a request with an optional raw body.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Answer> {
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
        let text = resp.into_string()?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Ok(Answer { status, body })
    }

    /// GET.
    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.send("GET", path, None)
    }

    /// POST a body serialized as JSON (a typed request such as a
    /// [`nfx_model::Service`], or an ad-hoc object).
    pub fn post<T: serde::Serialize + ?Sized>(
        &self,
        path: &str,
        body: &T,
    ) -> anyhow::Result<Answer> {
        self.send("POST", path, Some(&serde_json::to_string(body)?))
    }

    /// DELETE.
    pub fn delete(&self, path: &str) -> anyhow::Result<Answer> {
        self.send("DELETE", path, None)
    }

    /// Polls an operation until it reaches a final state or `timeout` passes.
    pub fn wait_operation(&self, id: &str, timeout: Duration) -> anyhow::Result<serde_json::Value> {
        let start = Instant::now();
        loop {
            let a = self.get(&format!("/api/v1/operations/{id}"))?;
            if a.status != 200 {
                anyhow::bail!("operation {id}: HTTP {}: {}", a.status, a.body);
            }
            let state = a.body["state"].as_str().unwrap_or_default();
            if matches!(state, "COMPLETED" | "ROLLED_BACK" | "FAILED") {
                return Ok(a.body);
            }
            if start.elapsed() > timeout {
                anyhow::bail!("operation {id} still {state} after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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
