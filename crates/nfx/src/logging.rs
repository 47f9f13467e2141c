//! Where the `log` records of every crate go: stderr, as text (the default) or, with
//! `NFX_LOG_FORMAT=json`, one JSON object per line (`ts`, `level`, `target`, `msg`) for
//! log collectors. The level filter is `NFX_LOG`, or `RUST_LOG` without it, else `warn`.
//! Without a logger the controller's, agents' and workers' warnings would be lost.

use serde::Serialize;
use std::io::Write;

/// The variable that picks the line format.
pub const FORMAT_VAR: &str = "NFX_LOG_FORMAT";

/// One log record as a JSON line.
#[derive(Serialize)]
struct JsonLine<'a> {
    ts: &'a str,
    level: &'a str,
    target: &'a str,
    msg: &'a str,
}

/// The JSON line (no newline) of one record.
pub fn json_line(ts: &str, level: log::Level, target: &str, msg: &str) -> String {
    let line = JsonLine {
        ts,
        level: level.as_str(),
        target,
        msg,
    };
    // Four strings always serialize.
    serde_json::to_string(&line).unwrap_or_default()
}

/// Installs the logger. An unknown `NFX_LOG_FORMAT` falls back to text and says so.
pub fn init() {
    let env = env_logger::Env::new().filter_or(
        "NFX_LOG",
        std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
    );
    let mut b = env_logger::Builder::from_env(env);
    b.format_timestamp_millis();
    let format = std::env::var(FORMAT_VAR).unwrap_or_default();
    if format == "json" {
        b.format(|buf, r| {
            let ts = buf.timestamp_millis().to_string();
            let msg = r.args().to_string();
            writeln!(buf, "{}", json_line(&ts, r.level(), r.target(), &msg))
        });
    }
    b.init();
    if !matches!(format.as_str(), "" | "text" | "json") {
        log::warn!("{FORMAT_VAR}={format:?} is not `text` or `json`; logging text");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_escape_and_carry_every_field() {
        let line = json_line(
            "2026-01-02T03:04:05.678Z",
            log::Level::Warn,
            "nfx_control::agent",
            "worker \"w0\" ended\nexit 1",
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ts"], "2026-01-02T03:04:05.678Z");
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["target"], "nfx_control::agent");
        assert_eq!(v["msg"], "worker \"w0\" ended\nexit 1");
        assert!(!line.contains('\n'));
    }
}
