//! The dashboard of `nfx up` on the simulated VNFM: the embedded page is small, open,
//! self-contained and served with a strict content security policy; its data (one
//! snapshot, or the server-sent event stream) needs a token and tells the page which
//! role the token has; the stream sends a new snapshot every period with the deployed
//! service's chain, tiers and VNFM kind. The browser test is `crates/nfx/tests/dashboard_e2e.rs`.

use crate::common::{authed, reader, service, start, tmp, READ_TOKEN, TOKEN};
use nfx_control::api::dashboard::snapshot::Snapshot;
use nfx_control::api::dashboard::{Hello, PERIOD};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// The events of `GET /api/v1/dashboard/stream?max_events=N` with `token`: (name, data,
/// when it arrived).
fn stream(base: &str, token: &str, n: u32) -> Vec<(String, String, Instant)> {
    let r = ureq::get(&format!("{base}/api/v1/dashboard/stream?max_events={n}"))
        .set("Authorization", &format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(r.content_type(), "text/event-stream");
    let mut out = Vec::new();
    let (mut name, mut data) = (String::new(), String::new());
    for line in BufReader::new(r.into_reader()).lines() {
        let line = line.unwrap();
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().into();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        } else if line.is_empty() && !data.is_empty() {
            out.push((
                std::mem::take(&mut name),
                std::mem::take(&mut data),
                Instant::now(),
            ));
        }
    }
    out
}

#[test]
fn the_page_is_open_small_self_contained_and_locked_down() {
    let dir = tmp("dash-page");
    let base = start(&dir, Duration::ZERO);
    let mut total = 0;
    for (path, ctype) in [
        ("/", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
    ] {
        let r = ureq::get(&format!("{base}{path}")).call().unwrap();
        assert_eq!(r.content_type(), ctype, "{path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
            "{path}: {csp}"
        );
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
        let body = r.into_string().unwrap();
        for remote in [
            "src=\"http",
            "href=\"http",
            "url(http",
            "fetch('http",
            "//cdn",
        ] {
            assert!(
                !body.contains(remote),
                "{path} loads from the network: {remote}"
            );
        }
        assert!(
            !body.contains("innerHTML"),
            "{path}: data must go in as text"
        );
        total += body.len();
    }
    assert!(total < 1_000_000, "page weighs {total} bytes");
}

#[test]
fn the_stream_needs_a_token_names_its_role_and_follows_the_controller() {
    let dir = tmp("dash-stream");
    let base = start(&dir, Duration::ZERO);
    for path in ["/api/v1/dashboard", "/api/v1/dashboard/stream?max_events=1"] {
        let a = nfx_control::client::Client::new(&base, None)
            .get(path)
            .unwrap();
        assert_eq!(a.status, 401, "{path}: {a:?}");
    }
    for (q, what) in [("max_events=0", "at least 1"), ("every=1", "unknown field")] {
        let a = reader(&base)
            .get(&format!("/api/v1/dashboard/stream?{q}"))
            .unwrap();
        assert_eq!(a.status, 400, "{q}: {a:?}");
        assert!(a.body["error"].as_str().unwrap().contains(what), "{a:?}");
    }

    let c = authed(&base);
    let op = c
        .post("/api/v1/services", &service("web", "edge", "cloud", 500.0))
        .unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    c.wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(10))
        .unwrap();

    let one: Snapshot =
        serde_json::from_value(reader(&base).get("/api/v1/dashboard").unwrap().body).unwrap();
    let web = one.services.iter().find(|s| s.id == "web").unwrap();
    assert_eq!(web.status, "active");
    assert!(!web.hops.is_empty(), "{web:?}");
    assert_eq!(one.hosts.len(), 2);
    assert_eq!(one.links.len(), 1);
    assert!(one
        .instances
        .iter()
        .all(|i| i.simulated && i.vnfm == "simulated"));
    assert!(one.instances.iter().all(|i| i.live.is_some()), "{one:?}");
    assert!(web
        .hops
        .iter()
        .all(|h| one.instances.iter().any(|i| i.id == h.instance)));
    assert!(!one.energy.reported && one.energy.reason.starts_with("not reported"));
    assert_eq!(one.operations[0].kind, "deploy");
    assert_eq!(one.operations[0].state, "COMPLETED");

    for (token, role) in [(READ_TOKEN, "read"), (TOKEN, "admin")] {
        let ev = stream(&base, token, 3);
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert_eq!(ev[0].0, "hello");
        let hello: Hello = serde_json::from_str(&ev[0].1).unwrap();
        assert_eq!(hello.role, role);
        let snaps: Vec<Snapshot> = ev[1..]
            .iter()
            .map(|(n, d, _)| {
                assert_eq!(n, "snapshot");
                serde_json::from_str(d).unwrap()
            })
            .collect();
        assert!(snaps.windows(2).all(|w| w[1].seq > w[0].seq), "seq");
        assert!(snaps.iter().all(|s| s.services.len() == 1));
        let gap = ev[3].2 - ev[2].2;
        assert!(
            gap >= PERIOD / 2 && gap < PERIOD * 3,
            "snapshots {gap:?} apart, period {PERIOD:?}"
        );
    }
}
