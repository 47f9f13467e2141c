//! `nfx run --metrics-listen`: the worker's `/metrics` scraped while real traffic crosses
//! the chain, checked against the JSON stats of the control socket (each scrape lies
//! between the stats read just before and just after it, and at rest they are equal),
//! and the CPU one scrape costs. Needs root (network namespaces).

mod scrape;

use nfx_dataplane::Stats;
use nfx_testbed::acl::IPERF_PORT;
use nfx_testbed::cpu::ProcessCpu;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::nfxrun::NfxRun;
use nfx_testbed::runconfig::{Chain, RunSpec};
use nfx_testbed::{Host, Spec, TestbedGuard};
use scrape::{free_addr, parse, scrape};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

const NFX: &str = env!("CARGO_BIN_EXE_nfx");

fn root() -> bool {
    let ok = nfx_testbed::root::effective_uid() == 0;
    if !ok {
        eprintln!("skipped: needs root");
    }
    ok
}

fn stats(nfx: &NfxRun) -> Stats {
    nfx.stats().unwrap()
}

/// Counters (`*_total`) of the scrape lie between those rendered from the JSON stats
/// read before and after it; every series of either is in the scrape.
fn check_between(before: &Stats, scraped: &str, after: &Stats) -> usize {
    let m = parse(scraped);
    let (b, a) = (
        parse(&nfx_dataplane::metrics::render(before)),
        parse(&nfx_dataplane::metrics::render(after)),
    );
    let mut counters = 0;
    for (k, hi) in &a {
        let got = m
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing from /metrics"));
        if k.split('{').next().unwrap().ends_with("_total") {
            let lo = b.get(k).copied().unwrap_or(0.0);
            assert!(lo <= *got && got <= hi, "{k}: {lo} <= {got} <= {hi} fails");
            counters += 1;
        }
    }
    counters
}

#[test]
fn worker_metrics_follow_the_json_stats_under_traffic() {
    if !root() {
        return;
    }
    let tb = TestbedGuard::up(Spec {
        prefix: "hu-met-".into(),
        subnet_base: 158,
    })
    .unwrap();
    tb.set_edge_forwarding(false).unwrap();
    let dir = nfx_testbed::tempfile::tempdir().unwrap();
    let addr: SocketAddr = free_addr();
    let spec = RunSpec {
        name: "hu-met".into(),
        control_socket: dir.path().join("hu-met.sock"),
        events: None,
        vector: 256,
        poll: "adaptive".into(),
        chain: Chain::Full {
            patterns: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/dpi/patterns.txt"),
            elephant_bytes: 1_000_000,
        },
    };
    let listen = addr.to_string();
    let nfx = NfxRun::start(
        Path::new(NFX),
        &tb,
        &spec,
        &["--metrics-listen", &listen],
        dir.path(),
    )
    .unwrap();

    // The scrape's CPU cost: the process's CPU over 100 back-to-back scrapes, less its
    // CPU over the same wall time left alone (measured right before, no traffic).
    let idle = ProcessCpu::start(nfx.pid()).unwrap();
    let t = Instant::now();
    for _ in 0..100 {
        scrape(addr);
    }
    let wall = t.elapsed();
    let busy_cores = idle.cores().unwrap();
    let rest = ProcessCpu::start(nfx.pid()).unwrap();
    std::thread::sleep(wall);
    let rest_cores = rest.cores().unwrap();
    let per_scrape_ms = (busy_cores - rest_cores).max(0.0) * wall.as_secs_f64() * 1e3 / 100.0;
    eprintln!(
        "metrics: 100 scrapes in {:.1} ms wall, {per_scrape_ms:.3} ms CPU per scrape \
         ({:.3} % of a core at 1 scrape/s)",
        wall.as_secs_f64() * 1e3,
        per_scrape_ms / 10.0
    );
    assert!(
        per_scrape_ms < 10.0,
        "a scrape costs {per_scrape_ms:.3} ms of CPU: over 1 % of a core at 1 scrape/s"
    );

    let (src, dst_ns, dst) = (tb.ns(Host::Src), tb.ns(Host::Dst), tb.dst_ip());
    let _srv = IperfServer::start(&dst_ns, dst, IPERF_PORT).unwrap();
    let client = std::thread::spawn(move || {
        iperf::client(&ClientSpec::tcp(&src, dst, IPERF_PORT, 4, 1)).unwrap()
    });
    let mut moved = 0;
    let mut last = 0.0;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        let before = stats(&nfx);
        let text = scrape(addr);
        let after = stats(&nfx);
        assert!(check_between(&before, &text, &after) > 10);
        let key = r#"nfx_node_packets_total{instance="hu-met",node="firewall"}"#;
        let now = parse(&text)[key];
        if now > last {
            moved += 1;
        }
        last = now;
    }
    let tcp = client.join().unwrap();
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    assert!(
        moved >= 3,
        "the firewall's packet counter moved in only {moved} of 6 scrapes"
    );

    // At rest (two equal JSON reads around the scrape) the counters are equal. The
    // workers' CPU figures and latency windows move at rest too (the latency histogram's
    // window turns every second), so they are left out of the comparison.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = stats(&nfx);
        let text = scrape(addr);
        let after = stats(&nfx);
        let strip = |s: &Stats| {
            let mut s = s.clone();
            s.uptime_s = 0.0;
            s.workers.iter_mut().for_each(|w| {
                w.cpu_pct = 0.0;
                w.cpu_s = 0.0;
                w.latency = None;
            });
            s
        };
        if strip(&before) == strip(&after) {
            let m = parse(&text);
            for (k, v) in parse(&nfx_dataplane::metrics::render(&after)) {
                if k.split('{').next().unwrap().ends_with("_total") && !k.contains("cpu") {
                    assert_eq!(m[&k], v, "{k}");
                }
            }
            break;
        }
        assert!(Instant::now() < deadline, "the counters never settled");
        std::thread::sleep(Duration::from_millis(300));
    }
    nfx.stop().unwrap();
}
