//! The SSM against fake EM HTTP servers on loopback speaking the agreed API: scripted CPU,
//! a shared pool of queue pairs (409 when none is free), and an EM that is not there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nfx_ssm::{EmClient, Kind, Policy, PolicyConfig, Ssm};
use zeroize::Zeroizing;

/// The bearer token the fake EMs require (as a real EM does).
const TOKEN: &str = "fake-em-token";

fn client(url: &str, timeout: Duration) -> EmClient {
    EmClient::new(url, Zeroizing::new(TOKEN.into()), timeout)
}

struct Shared {
    free_qps: usize,
    log: Vec<String>,
}

struct FakeEm {
    url: String,
    cpu: Arc<Mutex<f64>>,
    engine: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeEm {
    fn start(name: &'static str, shared: Arc<Mutex<Shared>>) -> FakeEm {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let cpu = Arc::new(Mutex::new(0.0));
        let engine = Arc::new(Mutex::new("soft".to_string()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, e, s) = (cpu.clone(), engine.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(conn) = conn {
                    serve(conn, name, &c, &e, &shared);
                }
            }
        });
        FakeEm {
            url,
            cpu,
            engine,
            stop,
            thread: Some(thread),
        }
    }
    fn set_cpu(&self, v: f64) {
        *self.cpu.lock().unwrap() = v;
    }
    fn engine(&self) -> String {
        self.engine.lock().unwrap().clone()
    }
}

impl Drop for FakeEm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    name: &str,
    cpu: &Mutex<f64>,
    engine: &Mutex<String>,
    shared: &Mutex<Shared>,
) {
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let mut len = 0usize;
    let mut authorized = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        authorized |= h.trim_end() == format!("Authorization: Bearer {TOKEN}");
    }
    let mut body = vec![0u8; len];
    let _ = r.read_exact(&mut body);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut sh = shared.lock().unwrap();
    let mut eng = engine.lock().unwrap();
    let (code, reply) = match (method, path) {
        _ if !authorized => (
            401,
            r#"{"error":"missing or wrong bearer token"}"#.to_string(),
        ),
        ("GET", "/status") => (
            200,
            serde_json::json!({"name": name, "engine": *eng, "alg": "aes-128-gcm",
                "cpu_pct": *cpu.lock().unwrap(), "tx_gbps": 0.5, "rx_gbps": 0.5,
                "mean_packet_bytes": 1380, "workers": []})
            .to_string(),
        ),
        ("POST", "/accelerator/use") => {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if v["device"] != "/run/nfx/test.sock" {
                (400, r#"{"error":"bad device"}"#.to_string())
            } else if *eng == "lookaside" {
                (200, r#"{"engine":"lookaside","switch_us":1}"#.to_string())
            } else if sh.free_qps == 0 {
                (409, r#"{"error":"no free queue pair"}"#.to_string())
            } else {
                sh.free_qps -= 1;
                *eng = "lookaside".into();
                sh.log.push(format!("use {name}"));
                (200, r#"{"engine":"lookaside","switch_us":80}"#.to_string())
            }
        }
        ("POST", "/accelerator/release") => {
            if *eng == "lookaside" {
                sh.free_qps += 1;
                *eng = "soft".into();
                sh.log.push(format!("release {name}"));
            }
            (200, r#"{"engine":"soft","switch_us":50}"#.to_string())
        }
        _ => (404, r#"{"error":"not found"}"#.to_string()),
    };
    let mut w = conn;
    let _ = write!(
        w,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

fn cfg(qps: usize) -> PolicyConfig {
    PolicyConfig {
        upper: 90.0,
        lower: 40.0,
        samples: 2,
        cooldown_ns: 1_000_000_000,
        queue_pairs: qps,
        min_gain: 1.0,
    }
}

const P: u64 = 500_000_000;

#[test]
fn moves_the_queue_pair_revoking_first() {
    let shared = Arc::new(Mutex::new(Shared {
        free_qps: 1,
        log: vec![],
    }));
    let t1 = FakeEm::start("t1", shared.clone());
    let t2 = FakeEm::start("t2", shared.clone());
    let to = Duration::from_secs(2);
    let ems = vec![
        ("t1".to_string(), client(&t1.url, to)),
        ("t2".to_string(), client(&t2.url, to)),
    ];
    let events = Arc::new(Mutex::new(Vec::<u8>::new()));
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut ssm = Ssm::new(Policy::new(cfg(1), None), ems, "/run/nfx/test.sock")
        .with_sink(Box::new(Sink(events.clone())));
    let mut now = 0;
    let mut tick = |ssm: &mut Ssm| {
        let t = now;
        now += P;
        ssm.tick(t, &|| t + 1_000_000)
    };
    t1.set_cpu(99.0);
    t2.set_cpu(5.0);
    tick(&mut ssm);
    assert_eq!(t1.engine(), "soft");
    let d = tick(&mut ssm);
    assert_eq!(t1.engine(), "lookaside");
    let g = d.iter().find(|d| d.decision == Kind::Grant).unwrap();
    assert_eq!(g.reaction_ms, Some(501.0));
    assert_eq!(g.switch_us, Some(80), "the EM's switch time is recorded");
    t1.set_cpu(70.0);
    t2.set_cpu(99.0);
    for _ in 0..3 {
        tick(&mut ssm);
    }
    assert_eq!(t1.engine(), "soft");
    assert_eq!(t2.engine(), "lookaside");
    assert_eq!(
        shared.lock().unwrap().log,
        vec!["use t1", "release t1", "use t2"]
    );
    let text = String::from_utf8(events.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines
        .iter()
        .any(|v| v["decision"] == "revoke" && v["vnf"] == "t1"));
    assert_eq!(lines.len(), ssm.log().len());
    let st = ssm.stats().lock().unwrap().clone();
    assert!(st.vnfs["t2"].holding && !st.vnfs["t1"].holding);
    assert_eq!(st.vnfs["t1"].decisions["grant"], 1);
    assert_eq!(st.vnfs["t1"].decisions["revoke"], 1);
    assert_eq!(st.vnfs["t1"].last_grant, Some((501.0, 80)));
    assert_eq!(st.vnfs["t2"].last, Some((99.0, "lookaside".to_string())));
    assert_eq!(st.polls, 5);
}

#[test]
fn unreachable_em_and_refused_grant_are_events_not_panics() {
    let shared = Arc::new(Mutex::new(Shared {
        free_qps: 0,
        log: vec![],
    }));
    let t1 = FakeEm::start("t1", shared.clone());
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let to = Duration::from_millis(500);
    let ems = vec![
        ("t1".to_string(), client(&t1.url, to)),
        ("dead".to_string(), client(&dead, to)),
    ];
    let mut ssm = Ssm::new(Policy::new(cfg(1), None), ems, "/run/nfx/test.sock");
    t1.set_cpu(99.0);
    for i in 0..3 {
        ssm.tick(i * P, &|| i * P);
    }
    assert_eq!(t1.engine(), "soft");
    assert!(ssm
        .log()
        .iter()
        .any(|d| d.vnf == "t1" && d.decision == Kind::Deny && d.reason.contains("409")));
    assert_eq!(ssm.policy().unreachable_counts()["dead"], 3);
    assert!(ssm.policy().holders().is_empty());
}

#[test]
fn em_client_reports_status_and_errors() {
    let shared = Arc::new(Mutex::new(Shared {
        free_qps: 1,
        log: vec![],
    }));
    let t1 = FakeEm::start("t1", shared);
    t1.set_cpu(42.5);
    let em = client(&format!("{}/", t1.url), Duration::from_secs(2));
    let s = em.status().unwrap();
    assert_eq!((s.engine.as_str(), s.cpu_pct), ("soft", 42.5));
    assert_eq!(s.mean_packet_bytes, 1380.0);
    let e = em.use_accelerator("/wrong").unwrap_err().to_string();
    assert!(e.contains("400") && e.contains("bad device"), "{e}");
    assert_eq!(
        em.use_accelerator("/run/nfx/test.sock").unwrap().engine,
        "lookaside"
    );
    assert_eq!(em.release_accelerator().unwrap().switch_us, 50);
    let stranger = EmClient::new(
        &t1.url,
        Zeroizing::new("other".into()),
        Duration::from_secs(2),
    );
    let e = stranger.status().unwrap_err().to_string();
    assert!(e.contains("401"), "{e}");
}
