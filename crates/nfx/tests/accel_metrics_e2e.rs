//! `nfx accel serve --metrics-listen`: the lookaside device process's `/metrics` scraped
//! while a client pushes AES-GCM operations through a queue pair, checked against what
//! the client's engine counted (its `EngineStats`): during the run the device's per
//! queue-pair counters never run ahead of what the client submitted, at rest they equal
//! what it got back; the grant, the session and the release show up. With
//! `--metrics-token-file`, a scrape without the token gets 401 and no series. And
//! `nfx ssm --metrics-listen` polling a live and a dead element manager: its polls,
//! decisions, unreachable counts and the live one's CPU and engine. Needs no root.

mod scrape;

use nfx_accel::{
    Alg, Completion, Direction, Engine, EngineKind, Iv, Layout, LookasideEngine, Op, SessionSpec,
    Status,
};
use nfx_testbed::process::ChildGuard;
use scrape::{free_addr, get_metrics, parse, scrape};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");
const LEN: usize = 1024;

fn ops(e: &mut dyn Engine, sid: nfx_accel::SessionId, n: usize, from: usize) -> Vec<Op> {
    (from..from + n)
        .map(|i| {
            let mut buf = e.alloc_buf(LEN + 16).unwrap();
            buf.fill_from(&vec![i as u8; LEN + 16]).unwrap();
            Op {
                session: sid,
                iv: Iv::new(&(i as u128).to_be_bytes()[4..]),
                layout: Layout::packed(0, LEN),
                buf,
                user: i as u64,
            }
        })
        .collect()
}

/// Starts `nfx accel serve` on a socket in `dir` with metrics on a free loopback port
/// (behind the token in `token_file` when given); returns once both listen.
fn start_device(
    dir: &std::path::Path,
    token_file: Option<&std::path::Path>,
) -> (ChildGuard, std::path::PathBuf, std::net::SocketAddr) {
    let sock = dir.join("accel.sock");
    let addr = free_addr();
    let mut cmd = Command::new(NFX);
    cmd.args([
        "accel",
        "serve",
        "--queue-pairs",
        "2",
        "--ring-size",
        "64",
        "--slots",
        "64",
    ])
    .arg("--socket")
    .arg(&sock)
    .args(["--metrics-listen", &addr.to_string()])
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    if let Some(f) = token_file {
        cmd.arg("--metrics-token-file").arg(f);
    }
    let device = ChildGuard::spawn(cmd).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() || std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the device never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    (device, sock, addr)
}

#[test]
fn device_metrics_need_the_token_when_one_is_set() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let token_file = dir.path().join("metrics.token");
    std::fs::write(&token_file, "s3cret-metrics-token\n").unwrap();
    let (_device, _sock, addr) = start_device(dir.path(), Some(&token_file));
    for wrong in [None, Some("not-the-token")] {
        let (status, body) = get_metrics(addr, wrong);
        assert_eq!(status, 401, "{wrong:?}: {body}");
        assert!(!body.contains("nfx_accel_"), "{wrong:?}: {body}");
    }
    let (status, body) = get_metrics(addr, Some("s3cret-metrics-token"));
    assert_eq!(status, 200, "{body}");
    assert!(parse(&body)
        .keys()
        .any(|k| k.starts_with("nfx_accel_queue_pairs{")));
}

#[test]
fn device_metrics_follow_the_client_counts() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let (_device, sock, addr) = start_device(dir.path(), None);
    let dev = sock.display().to_string();
    let at_rest = parse(&scrape(addr));
    assert_eq!(
        at_rest[&format!("nfx_accel_queue_pairs{{device=\"{dev}\"}}")],
        2.0
    );
    assert_eq!(
        at_rest[&format!("nfx_accel_grants_total{{device=\"{dev}\"}}")],
        0.0
    );

    let mut e = LookasideEngine::connect(&sock, EngineKind::Cpu).unwrap();
    let spec = SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[7; 16], &[]);
    let sid = e.create_session(spec).unwrap();
    let qp = |m: &std::collections::BTreeMap<String, f64>, what: &str| -> f64 {
        let pre = format!("nfx_accel_qp_{what}{{device=\"{dev}\",qp=\"");
        let pid = format!("pid=\"{}\"}}", std::process::id());
        let found: Vec<f64> = m
            .iter()
            .filter(|(k, _)| k.starts_with(&pre) && k.ends_with(&pid))
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(found.len(), 1, "{what}: {found:?}");
        found[0]
    };
    let mut out: Vec<Completion> = Vec::new();
    let (mut submitted, mut completed) = (0usize, 0usize);
    for round in 0..40 {
        let mut batch = ops(&mut e, sid, 24, submitted);
        let n = batch.len();
        while !batch.is_empty() {
            if e.submit(&mut batch).unwrap() == 0 {
                e.poll(&mut out, usize::MAX);
            }
        }
        submitted += n;
        let done_before = e.stats().ops;
        let m = parse(&scrape(addr));
        let dev_ops = qp(&m, "ops_total");
        assert!(
            dev_ops <= submitted as f64,
            "round {round}: device {dev_ops} > submitted {submitted}"
        );
        assert!(dev_ops >= done_before as f64, "round {round}");
        let occ = qp(&m, "occupancy_ratio");
        assert!((0.0..=1.0).contains(&occ), "{occ}");
        // Completions hold their pool buffers until dropped.
        e.drain(&mut out).unwrap();
        assert!(out.iter().all(|c| c.status == Status::Ok));
        completed += out.len();
        out.clear();
    }
    assert_eq!(completed, submitted);
    let client = e.stats();
    let m = parse(&scrape(addr));
    assert_eq!(qp(&m, "ops_total"), client.ops as f64);
    assert_eq!(qp(&m, "bytes_total"), client.bytes as f64);
    assert_eq!(client.bytes, (submitted * LEN) as u64);
    assert_eq!(qp(&m, "sessions"), 1.0);
    assert_eq!(qp(&m, "in_flight"), 0.0);
    assert_eq!(qp(&m, "served"), 1.0);
    let d = |name: &str| m[&format!("{name}{{device=\"{dev}\"}}")];
    assert_eq!(d("nfx_accel_ops_total"), client.ops as f64);
    assert_eq!(d("nfx_accel_grants_total"), 1.0);
    assert_eq!(d("nfx_accel_queue_pairs_held"), 1.0);
    assert_eq!(
        m[&format!("nfx_accel_info{{device=\"{dev}\",engine=\"cpu\"}}")],
        1.0
    );

    // Releasing the queue pair removes its series; the grant stays counted.
    drop(e);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = parse(&scrape(addr));
        if m[&format!("nfx_accel_queue_pairs_held{{device=\"{dev}\"}}")] == 0.0 {
            assert!(!m.keys().any(|k| k.starts_with("nfx_accel_qp_")));
            assert_eq!(
                m[&format!("nfx_accel_grants_total{{device=\"{dev}\"}}")],
                1.0
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the queue pair was never released"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A minimal element manager: answers every request with a `soft`-engine status at
/// 12.5 % CPU, and counts the requests that carried `token`.
fn fake_em(token: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let authorized = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = authorized.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok) {
            let mut req = [0u8; 4096];
            let n = s.read(&mut req).unwrap_or(0);
            let head = String::from_utf8_lossy(&req[..n]).to_ascii_lowercase();
            if head.contains(&format!("authorization: bearer {token}")) {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let body =
                r#"{"engine":"soft","alg":"aes-128-gcm","cpu_pct":12.5,"mean_packet_bytes":1400}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, authorized)
}

#[test]
fn ssm_metrics_count_its_polls_per_em_behind_a_token() {
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let em_token = dir.path().join("em.token");
    std::fs::write(&em_token, "em-token-1\n").unwrap();
    let metrics_token = dir.path().join("metrics.token");
    std::fs::write(&metrics_token, "ssm-metrics-token\n").unwrap();
    let (live, authorized) = fake_em("em-token-1");
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let addr = free_addr();
    let mut cmd = Command::new(NFX);
    cmd.args(["ssm", "--queue-pairs", "1", "--period-ms", "100"])
        .arg(format!("--em=live={live}"))
        .arg(format!("--em=dead={dead}"))
        .arg("--device")
        .arg(dir.path().join("accel.sock"))
        .arg("--em-token-file")
        .arg(&em_token)
        .args(["--metrics-listen", &addr.to_string()])
        .arg("--metrics-token-file")
        .arg(&metrics_token)
        .arg("--events")
        .arg(dir.path().join("events.jsonl"))
        .args(["--duration-s", "20"])
        .env_remove("NFX_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let _ssm = ChildGuard::spawn(cmd).unwrap();
    let polls = format!(
        "nfx_ssm_polls_total{{device=\"{}\"}}",
        dir.path().join("accel.sock").display()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let token = Some("ssm-metrics-token");
    let m = loop {
        assert!(Instant::now() < deadline, "the SSM never polled 5 times");
        std::thread::sleep(Duration::from_millis(100));
        let (status, body) = get_metrics(addr, token);
        if status != 200 {
            continue;
        }
        let m = parse(&body);
        if m.get(&polls).is_some_and(|&p| p >= 5.0) {
            break m;
        }
    };
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("{k} missing: {m:?}"));
    let noops_live = get(r#"nfx_ssm_decisions_total{vnf="live",decision="noop"}"#);
    let unreachable = get(r#"nfx_ssm_em_unreachable_total{vnf="dead"}"#);
    assert!(noops_live >= 5.0 && unreachable >= 5.0, "{m:?}");
    assert_eq!(get(r#"nfx_ssm_vnf_cpu_percent{vnf="live"}"#), 12.5);
    assert_eq!(
        get(r#"nfx_ssm_vnf_engine_info{vnf="live",engine="soft"}"#),
        1.0
    );
    assert_eq!(get(r#"nfx_ssm_holding{vnf="live"}"#), 0.0);
    assert!(!m.contains_key(r#"nfx_ssm_vnf_cpu_percent{vnf="dead"}"#));
    assert!(
        authorized.load(std::sync::atomic::Ordering::Relaxed) as f64 >= noops_live,
        "every poll of the EM carries its token"
    );
    for wrong in [None, Some("not-the-token")] {
        let (status, body) = get_metrics(addr, wrong);
        assert_eq!(status, 401, "{wrong:?}: {body}");
        assert!(!body.contains("nfx_ssm_"), "{wrong:?}: {body}");
    }
}
