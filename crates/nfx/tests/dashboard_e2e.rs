//! The dashboard of `nfx up` in a real browser: headless Chromium (Debian's `chromium`,
//! driven over WebDriver by `chromedriver` with the `fantoccini` crate) opens the page,
//! logs in with the admin token and stays on it while a NAT service is deployed over the
//! REST API on a real `nfx run` worker and iperf3 traffic crosses it. Checks: the page
//! shows the new service's chain, the instance marked REAL with its tier, and its packet
//! counter increasing while traffic runs, each change on the page within 1 s of the
//! worker's counter reaching it; then the Migrate button, after its confirmation dialog
//! with the other device chosen, moves the instance to that device; then the Destroy
//! button, after its confirmation dialog, destroys the service. A screenshot taken under traffic is kept as a test artifact:
//! `$NFX_TEST_ARTIFACTS/dashboard.png`, by default `target/tmp/dashboard.png`.
//!
//! Needs root (namespaces) and the browser (`scripts/deps.sh`); without the browser the
//! test is ignored, except in CI (`CI=true`), where it fails.

mod common;
mod up;

use common::eventually;
use fantoccini::{Client, ClientBuilder, Locator};
use nfx_testbed::acl::IPERF_PORT;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::{Host, Spec, TestbedGuard};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "dashboard-e2e-token-0123456789";

/// The edge's two software devices: the Migrate dialog offers the other one.
const DEVICES: [&str; 2] = ["w0", "w1"];

/// Longest a counter change may take to reach the page: the dashboard's freshness target (docs/api.md).
const REACH: Duration = Duration::from_secs(1);

/// A `chromedriver` process, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver on a free port; returns it and its URL.
fn chromedriver() -> (Driver, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "starting chromedriver ({e}): install Debian's chromium-driver (scripts/deps.sh)"
            )
        });
    let d = Driver(child);
    assert!(
        eventually(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "chromedriver never listened"
    );
    (d, format!("http://127.0.0.1:{port}"))
}

/// A headless Chromium session with a fresh profile under `profile`.
async fn browser(driver: &str, profile: &Path) -> Client {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
    ]
    .map(String::from)
    .into_iter()
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": "/usr/bin/chromium", "args": args}),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(driver)
        .await
        .expect("opening a Chromium session")
}

/// Clicks the element matching `css`.
async fn click(b: &Client, css: &str) -> Result<(), String> {
    let e = b
        .find(Locator::Css(css))
        .await
        .map_err(|e| format!("{css}: {e}"))?;
    e.click().await.map_err(|e| format!("clicking {css}: {e}"))
}

/// The text of the first element matching `css`, if any.
async fn text(b: &Client, css: &str) -> Option<String> {
    let v = b
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .await
        .unwrap();
    v.as_str().map(str::to_string)
}

/// Polls `css`'s text every 20 ms until `ok` accepts it or `limit` passes.
async fn wait_text(b: &Client, css: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if text(b, css).await.is_some_and(|t| ok(&t)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Clicks the instance's Migrate button, picks the other device in the confirmation
/// dialog and confirms; returns the new instance's id once the controller has moved it
/// (nothing moves before the confirmation).
async fn migrate_from_the_page(
    b: &Client,
    c: &nfx_control::client::Client,
    id: &str,
) -> Result<String, String> {
    let spec = |c: &nfx_control::client::Client| {
        c.get("/api/v1/instances").unwrap().body[0]["spec"].clone()
    };
    let from = spec(c)["device"].as_str().unwrap_or_default().to_string();
    let to = DEVICES.iter().find(|d| **d != from).unwrap().to_string();
    click(b, &format!("button[data-instance=\"{id}\"]")).await?;
    if !wait_text(b, "#confirm-text", Duration::from_secs(2), |t| {
        t.contains(&format!("Migrate instance {id}"))
    })
    .await
    {
        return Err("no confirmation dialog for Migrate".into());
    }
    b.find(Locator::Css("#confirm-target"))
        .await
        .map_err(|e| e.to_string())?
        .select_by_value(&to)
        .await
        .map_err(|e| format!("choosing {to}: {e}"))?;
    if spec(c)["id"] != id {
        return Err("migrated before confirming".into());
    }
    click(b, "#confirm-ok").await?;
    let moved = || {
        let all = c.get("/api/v1/instances").unwrap().body;
        all.as_array().is_some_and(|a| a.len() == 1) && all[0]["spec"]["device"] == to.as_str()
    };
    if !eventually(Duration::from_secs(30), moved) {
        return Err(format!(
            "the instance never moved to {to}: {}",
            c.get("/api/v1/operations").unwrap().body
        ));
    }
    if !wait_text(b, "#action-result", Duration::from_secs(2), |t| {
        t.contains("/migrate: operation")
    })
    .await
    {
        return Err(format!(
            "the page did not report the operation: {:?}",
            text(b, "#action-result").await
        ));
    }
    let new_id = spec(c)["id"].as_str().unwrap_or_default().to_string();
    if new_id == id {
        return Err("the migration kept the instance id".into());
    }
    Ok(new_id)
}

/// The packets the instance's worker reports through the API.
fn worker_packets(c: &nfx_control::client::Client, id: &str) -> u64 {
    c.get(&format!("/api/v1/instances/{id}")).unwrap().body["state"]["packets"]
        .as_u64()
        .unwrap_or(0)
}

fn artifact_dir() -> PathBuf {
    std::env::var_os("NFX_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
#[cfg_attr(
    nfx_no_chromium,
    ignore = "needs Debian's chromium and chromium-driver (scripts/deps.sh); in CI they are required"
)]
fn browser_sees_the_deploy_and_the_counters_move_under_traffic() {
    let tb = TestbedGuard::up(Spec {
        prefix: "hd-dash-".into(),
        subnet_base: 165,
    })
    .unwrap();
    tb.set_edge_forwarding(false).unwrap();
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let up = up::start(&tb, dir.path(), &DEVICES, TOKEN, 3365);
    let (_driver, driver_url) = chromedriver();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = rt.block_on(browser(&driver_url, &dir.path().join("profile")));
    let result = rt.block_on(drive(&b, &tb, &up));
    let _ = rt.block_on(b.close());
    result.unwrap();
}

/// The browser part, separate so the session is closed whatever it finds.
async fn drive(b: &Client, tb: &TestbedGuard, up: &up::Up) -> Result<(), String> {
    let c = &up.client;
    b.goto(&format!("{}/", up.base))
        .await
        .map_err(|e| e.to_string())?;
    let form = b
        .find(Locator::Css("#token"))
        .await
        .map_err(|e| e.to_string())?;
    form.send_keys(TOKEN).await.map_err(|e| e.to_string())?;
    click(b, "#login-btn").await?;
    if !wait_text(b, "#conn", Duration::from_secs(5), |t| t == "live").await {
        return Err(format!(
            "page never went live: {:?}",
            text(b, "#conn").await
        ));
    }
    if !wait_text(b, "#role", Duration::from_secs(5), |t| {
        t.starts_with("admin")
    })
    .await
    {
        return Err("the admin token was not recognised".into());
    }

    up.deploy_nat(tb, "masq");
    let id = c.get("/api/v1/instances").unwrap().body[0]["spec"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    if !wait_text(b, "#svc-masq h3", Duration::from_secs(2), |t| {
        t.contains("active")
    })
    .await
    {
        return Err(format!(
            "the page does not show the service: {:?}",
            text(b, "#chains").await
        ));
    }
    let row = format!("#nodes tr[data-instance=\"{id}\"]");
    let row_text = text(b, &row).await.unwrap_or_default();
    if !(row_text.contains("REAL local") && row_text.contains("software")) {
        return Err(format!("instance row: {row_text:?}"));
    }

    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    let _srv = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let client =
        std::thread::spawn(move || iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 4, 1)));
    let cell = format!("td.packets[data-instance=\"{id}\"]");
    let page = |t: &str| t.parse::<u64>().unwrap_or(0);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let want = worker_packets(c, &id).max(1);
        let t = Instant::now();
        let reached = wait_text(b, &cell, Duration::from_secs(3), |v| page(v) >= want).await;
        seen.push((want, t.elapsed()));
        if !reached {
            return Err(format!(
                "page counter never reached {want}: {:?}",
                text(b, &cell).await
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let shot = b.screenshot().await.map_err(|e| e.to_string())?;
    let dir = artifact_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dashboard.png"), &shot).unwrap();
    eprintln!(
        "dashboard: counter reached the page after {:?} (worker packets {:?}); screenshot {}",
        seen.iter().map(|s| s.1).collect::<Vec<_>>(),
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        dir.join("dashboard.png").display()
    );
    let tcp = client.join().unwrap().expect("iperf3 across the NAT");
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    assert!(
        seen.windows(2).all(|w| w[1].0 > w[0].0),
        "counter did not move: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| s.1 <= REACH),
        "slower than {REACH:?}: {seen:?}"
    );
    assert!(
        shot.starts_with(b"\x89PNG") && shot.len() > 10_000,
        "screenshot of {} bytes",
        shot.len()
    );

    let id = migrate_from_the_page(b, c, &id).await?;
    let row = format!("#nodes tr[data-instance=\"{id}\"]");
    if !wait_text(b, &row, Duration::from_secs(2), |t| {
        t.contains("REAL local")
    })
    .await
    {
        return Err(format!(
            "the page does not show the migrated instance {id}: {:?}",
            text(b, "#nodes").await
        ));
    }

    click(b, "button[data-service=\"masq\"]").await?;
    if !wait_text(b, "#confirm-text", Duration::from_secs(2), |t| {
        t.contains("Destroy service masq")
    })
    .await
    {
        return Err("no confirmation dialog".into());
    }
    assert_eq!(
        c.get("/api/v1/services")
            .unwrap()
            .body
            .as_array()
            .map(Vec::len),
        Some(1),
        "destroyed before confirming"
    );
    click(b, "#confirm-ok").await?;
    if !eventually(Duration::from_secs(20), || {
        c.get("/api/v1/services")
            .unwrap()
            .body
            .as_array()
            .is_some_and(Vec::is_empty)
    }) {
        return Err("the service survived the confirmed Destroy".into());
    }
    if !wait_text(b, "#chains", Duration::from_secs(2), |t| {
        t.contains("No service deployed")
    })
    .await
    {
        return Err("the page still shows the destroyed service".into());
    }
    Ok(())
}
