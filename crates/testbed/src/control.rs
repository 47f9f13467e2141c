//! Client of a running dataplane's control socket (one JSON request per line, one JSON
//! response per line), as agreed with crates/dataplane.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Sends one request and returns the response; `{"error": ...}` becomes an error.
pub fn request(socket: &Path, req: &Value, timeout: Duration) -> anyhow::Result<Value> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("connecting to control socket {}", socket.display()))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    s.write_all(&line)?;
    let mut resp = String::new();
    BufReader::new(&s)
        .read_line(&mut resp)
        .with_context(|| format!("reading reply from {}", socket.display()))?;
    parse_response(&resp)
}

/// Parses one response line; `{"error": "..."}` is turned into an error.
pub fn parse_response(line: &str) -> anyhow::Result<Value> {
    if line.trim().is_empty() {
        bail!("control socket closed without a reply");
    }
    let v: Value = serde_json::from_str(line.trim()).context("control reply is not JSON")?;
    if let Some(e) = v.get("error") {
        bail!("dataplane: {}", e.as_str().unwrap_or(&e.to_string()));
    }
    Ok(v)
}

/// `{"cmd":"stats"}`.
pub fn stats(socket: &Path) -> anyhow::Result<Value> {
    request(socket, &json!({"cmd": "stats"}), Duration::from_secs(5))
}

/// Waits (bounded) until the socket answers a stats request.
pub fn wait_ready(socket: &Path, limit: Duration) -> anyhow::Result<Value> {
    let deadline = Instant::now() + limit;
    loop {
        match stats(socket) {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("dataplane not ready after {limit:?}")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Reads a counter from a stats document: `port(stats, "inside", "rx_bytes")`.
pub fn port_counter(stats: &Value, port: &str, field: &str) -> u64 {
    stats["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == port))
        .and_then(|p| p[field].as_u64())
        .unwrap_or(0)
}

/// The stats object of node `name`, if present.
pub fn node<'a>(stats: &'a Value, name: &str) -> Option<&'a Value> {
    stats["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["name"] == name))
}

/// Drop count of `reason` at node `name` (0 if absent).
pub fn node_drop(stats: &Value, name: &str, reason: &str) -> u64 {
    node(stats, name)
        .and_then(|n| n["drops"][reason].as_u64())
        .unwrap_or(0)
}

/// Sum of a drop reason over all nodes.
pub fn total_drop(stats: &Value, reason: &str) -> u64 {
    stats["nodes"]
        .as_array()
        .map(|ns| ns.iter().filter_map(|n| n["drops"][reason].as_u64()).sum())
        .unwrap_or(0)
}

/// An event counter (`dpi_match`, `elephant`).
pub fn events(stats: &Value, kind: &str) -> u64 {
    stats["events"][kind].as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        json!({"ports":[{"name":"inside","rx_bytes":1000}],
               "nodes":[{"name":"firewall","drops":{"acl_deny":3}},{"name":"nat","drops":{"acl_deny":1}}],
               "events":{"dpi_match":2}})
    }

    #[test]
    fn counters_are_found() {
        let s = sample();
        assert_eq!(port_counter(&s, "inside", "rx_bytes"), 1000);
        assert_eq!(port_counter(&s, "outside", "rx_bytes"), 0);
        assert_eq!(node_drop(&s, "firewall", "acl_deny"), 3);
        assert_eq!(total_drop(&s, "acl_deny"), 4);
        assert_eq!(events(&s, "dpi_match"), 2);
        assert_eq!(events(&s, "elephant"), 0);
    }

    #[test]
    fn error_replies_become_errors() {
        assert!(parse_response(r#"{"error":"no such node"}"#)
            .unwrap_err()
            .to_string()
            .contains("no such node"));
        assert!(parse_response("").is_err());
        assert_eq!(parse_response("{\"a\":1}\n").unwrap()["a"], 1);
    }

    #[test]
    fn request_round_trip_over_a_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(&s);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), r#"{"cmd":"stats"}"#);
            (&s).write_all(b"{\"name\":\"edge\"}\n").unwrap();
        });
        assert_eq!(stats(&path).unwrap()["name"], "edge");
        t.join().unwrap();
        assert!(stats(&dir.path().join("missing.sock")).is_err());
    }
}
