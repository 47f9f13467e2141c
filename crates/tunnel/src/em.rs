//! The element-manager HTTP endpoint of one tunnel process (the API agreed with the SSM):
//! `GET /status`, `POST /accelerator/use`, `POST /accelerator/release`, `POST /engine`.
//! A small blocking HTTP/1.1 server on its own thread, off the packet path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nfx_accel::{AccelError, EngineKind, LookasideEngine};
use serde_json::{json, Value};

use crate::ike::IkeShared;
use crate::stats::Counters;
use crate::sys::{poll_readable, thread_cpu_s};
use crate::worker::{SwitchCmd, Switched, Target};

/// How often rates and CPU are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Rates over the last sampling interval.
#[derive(Default, Clone, Copy)]
struct Sample {
    cpu_pct: f64,
    tx_gbps: f64,
    rx_gbps: f64,
}

/// What the EM needs from the endpoint.
pub struct EmState {
    /// Endpoint name.
    pub name: String,
    /// Transform name.
    pub alg: String,
    /// Configured software engine (lookaside fallback).
    pub base: EngineKind,
    /// Shared counters.
    pub counters: Arc<Counters>,
    /// Switch requests to the worker.
    pub cmds: Sender<SwitchCmd>,
    /// IKE state, when the SAs are negotiated.
    pub ike: Option<Arc<IkeShared>>,
    sample: Mutex<Sample>,
}

impl EmState {
    /// EM state for an endpoint.
    pub fn new(
        name: String,
        alg: String,
        base: EngineKind,
        counters: Arc<Counters>,
        cmds: Sender<SwitchCmd>,
    ) -> Self {
        EmState {
            name,
            alg,
            base,
            counters,
            cmds,
            ike: None,
            sample: Mutex::new(Sample::default()),
        }
    }
}

/// Binds the EM listener (call before entering the data-path namespace).
pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("EM listen on {addr}: {e}"))
}

/// Samples CPU and throughput every `SAMPLE_EVERY` until `stop`.
pub fn sampler(st: Arc<EmState>, stop: Arc<AtomicBool>) {
    let c = &st.counters;
    let mut last = (
        Instant::now(),
        0.0,
        c.tx_bytes.load(Relaxed),
        c.rx_bytes.load(Relaxed),
    );
    while !stop.load(Relaxed) {
        std::thread::park_timeout(SAMPLE_EVERY);
        let tid = c.worker_tid.load(Relaxed);
        let cpu = if tid > 0 {
            thread_cpu_s(tid).unwrap_or(last.1)
        } else {
            0.0
        };
        let now = Instant::now();
        let (tx, rx) = (c.tx_bytes.load(Relaxed), c.rx_bytes.load(Relaxed));
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let s = Sample {
            cpu_pct: ((cpu - last.1) / dt * 100.0).max(0.0),
            tx_gbps: (tx - last.2) as f64 * 8.0 / dt / 1e9,
            rx_gbps: (rx - last.3) as f64 * 8.0 / dt / 1e9,
        };
        *st.sample.lock().unwrap_or_else(|e| e.into_inner()) = s;
        last = (now, cpu, tx, rx);
    }
}

/// Serves requests on `listener` until `stop`.
pub fn serve(listener: TcpListener, st: Arc<EmState>, stop: Arc<AtomicBool>) {
    while !stop.load(Relaxed) {
        match poll_readable(&[listener.as_raw_fd()], 100) {
            Ok(r) if r[0] => {}
            Ok(_) => continue,
            Err(e) => {
                log::error!("EM poll: {e}");
                return;
            }
        }
        if let Ok((s, _)) = listener.accept() {
            if let Err(e) = handle(s, &st) {
                log::warn!("EM request: {e}");
            }
        }
    }
}

fn read_request(s: &mut TcpStream) -> std::io::Result<(String, String, Vec<u8>)> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 16 << 10 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let clen = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(64 << 10);
    let mut body = buf[head_end..].to_vec();
    while body.len() < clen {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(clen);
    Ok((method, path, body))
}

fn handle(mut s: TcpStream, st: &EmState) -> std::io::Result<()> {
    let (method, path, body) = read_request(&mut s)?;
    let (code, v) = route(st, &method, &path, &body);
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Error",
    };
    let body = v.to_string();
    write!(
        s,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn err(code: u16, msg: impl Into<String>) -> (u16, Value) {
    (code, json!({"error": msg.into()}))
}

/// Answers one request (separate from the socket code so it can be unit-tested).
pub fn route(st: &EmState, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    match (method, path) {
        ("GET", "/status") => (200, status(st)),
        ("POST", "/accelerator/use") => {
            let device = match serde_json::from_slice::<Value>(body) {
                Ok(v) => v.get("device").and_then(Value::as_str).map(PathBuf::from),
                Err(_) => None,
            };
            let Some(device) = device else {
                return err(400, "body must be {\"device\": \"/path/to/accel.sock\"}");
            };
            if st.counters.engine() == EngineKind::Lookaside {
                return err(409, "a queue pair is already attached");
            }
            match LookasideEngine::connect(&device, st.base) {
                Ok(e) => switch(st, Target::Lookaside(Box::new(e))),
                Err(AccelError::Refused(_)) => err(409, "no free queue pair"),
                Err(e) => err(409, format!("cannot attach {}: {e}", device.display())),
            }
        }
        ("POST", "/accelerator/release") => switch(st, Target::Release),
        ("POST", "/engine") => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            match v.get("engine").and_then(Value::as_str) {
                Some("soft") => switch(st, Target::Local(EngineKind::Soft)),
                Some("cpu") => switch(st, Target::Local(EngineKind::Cpu)),
                _ => err(400, "body must be {\"engine\": \"soft\"|\"cpu\"}"),
            }
        }
        (_, "/status" | "/accelerator/use" | "/accelerator/release" | "/engine") => {
            err(400, format!("method {method} not allowed on {path}"))
        }
        _ => err(404, format!("no such endpoint {path}")),
    }
}

fn switch(st: &EmState, target: Target) -> (u16, Value) {
    let (tx, rx) = mpsc::channel();
    if st.cmds.send(SwitchCmd { target, reply: tx }).is_err() {
        return err(409, "the packet worker has stopped");
    }
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(Switched { engine, switch_us })) => (
            200,
            json!({"engine": engine.as_str(), "switch_us": switch_us}),
        ),
        Ok(Err(e)) => err(409, e),
        Err(_) => err(409, "the packet worker did not answer"),
    }
}

fn status(st: &EmState) -> Value {
    let c = &st.counters;
    let s = *st.sample.lock().unwrap_or_else(|e| e.into_inner());
    let pk = c.tx_packets.load(Relaxed) + c.rx_packets.load(Relaxed);
    let by = c.tx_bytes.load(Relaxed) + c.rx_bytes.load(Relaxed);
    let mean = by.checked_div(pk).unwrap_or(0);
    let r2 = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "name": st.name,
        "ready": c.ready.load(Relaxed),
        "engine": c.engine().as_str(),
        "alg": st.ike.as_ref().map_or(st.alg.as_str(), |i| i.alg().unwrap_or("none")),
        "ike": st.ike.as_ref().map_or(Value::Null, |i| i.json()),
        "cpu_pct": r2(s.cpu_pct),
        "workers": [{"id": 0, "cpu_pct": r2(s.cpu_pct)}],
        "tx_gbps": r2(s.tx_gbps * 1000.0) / 1000.0,
        "rx_gbps": r2(s.rx_gbps * 1000.0) / 1000.0,
        "tx_packets": c.tx_packets.load(Relaxed),
        "rx_packets": c.rx_packets.load(Relaxed),
        "mean_packet_bytes": mean,
        "drops": c.drops_json(),
        "engine_switches": c.engine_switches.load(Relaxed),
        "failovers": c.failovers.load(Relaxed),
        "offload": c.offload_json(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (EmState, mpsc::Receiver<SwitchCmd>) {
        let (tx, rx) = mpsc::channel();
        (
            EmState::new(
                "t1".into(),
                "aes-128-gcm".into(),
                EngineKind::Cpu,
                Arc::new(Counters::default()),
                tx,
            ),
            rx,
        )
    }

    #[test]
    fn status_has_agreed_fields() {
        let (st, _rx) = state();
        let (code, v) = route(&st, "GET", "/status", b"");
        assert_eq!(code, 200);
        for k in [
            "name",
            "ready",
            "engine",
            "alg",
            "cpu_pct",
            "workers",
            "tx_gbps",
            "rx_gbps",
            "tx_packets",
            "rx_packets",
            "mean_packet_bytes",
            "drops",
            "engine_switches",
            "failovers",
            "offload",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["drops"]["auth_failed"], 0);
    }

    #[test]
    fn bad_requests_are_4xx() {
        let (st, _rx) = state();
        assert_eq!(route(&st, "GET", "/nope", b"").0, 404);
        assert_eq!(
            route(&st, "POST", "/engine", b"{\"engine\":\"gpu\"}").0,
            400
        );
        assert_eq!(route(&st, "POST", "/engine", b"junk").0, 400);
        assert_eq!(route(&st, "POST", "/accelerator/use", b"{}").0, 400);
        assert_eq!(route(&st, "DELETE", "/status", b"").0, 400);
        let (code, v) = route(
            &st,
            "POST",
            "/accelerator/use",
            b"{\"device\":\"/nonexistent/accel.sock\"}",
        );
        assert_eq!(code, 409, "{v}");
    }

    #[test]
    fn engine_switch_is_forwarded_to_worker() {
        let (st, rx) = state();
        let worker = std::thread::spawn(move || {
            let c = rx.recv().unwrap();
            assert!(matches!(c.target, Target::Local(EngineKind::Soft)));
            c.reply
                .send(Ok(Switched {
                    engine: EngineKind::Soft,
                    switch_us: 7,
                }))
                .unwrap();
        });
        let (code, v) = route(&st, "POST", "/engine", b"{\"engine\":\"soft\"}");
        worker.join().unwrap();
        assert_eq!(
            (code, v["engine"].as_str(), v["switch_us"].as_u64()),
            (200, Some("soft"), Some(7))
        );
    }
}
