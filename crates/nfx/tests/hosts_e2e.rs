//! End-to-end on the multi-host testbed, as an operator would run it:
//! `nfx testbed up --hosts 3 --out DIR`, `nfx up --infra DIR/infrastructure.yaml` (the
//! controller reaches the three agents over mutual TLS from the management namespace), a
//! firewall service from YAML between the `src` and `dst` endpoints of endpoints.json.
//! Checks: nothing passes before the deploy; iperf3 passes after it; the controller's
//! `/metrics` federates every agent and the worker's counters; a deploy without the
//! token is 401; a worker killed with SIGKILL is noticed, its isolation tables are gone and
//! the service is re-placed and carries traffic again; the agent of the middle host killed
//! with SIGKILL is noticed and the service is re-routed around that host (which then sees
//! none of its traffic), and the controller's scrape answers with `nfx_agent_up` 0 for it; a client holding another CA's material is refused by an agent;
//! after the destroy nothing passes; `nfx testbed down` leaves no namespace or process.
//! Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;
mod scrape;

use common::eventually;
use nfx_control::client::{load_token, read_token_file, Client};
use nfx_control::netns_exec::NetnsExecutor;
use nfx_control::tls::{self, AgentSubject};
use nfx_control::vnfm::remote::{AgentLink, RemoteVnfm};
use nfx_control::vnfm::state_file::recorded_pids;
use nfx_control::vnfm::VnfmError;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::{netns, udpgen};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PREFIX: &str = "nfxhe-";
const BASE: &str = "236";
const TOKEN: &str = "hosts-e2e-api-token-0123456789";
const PORT: u16 = 5201;

/// Runs `nfx ARGS` with this test's token.
fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

struct Endpoint {
    netns: String,
    address: Ipv4Addr,
    host: String,
}

fn endpoint(v: &Value, name: &str) -> Endpoint {
    let e = &v[name];
    Endpoint {
        netns: e["netns"].as_str().unwrap().into(),
        address: e["address"].as_str().unwrap().parse().unwrap(),
        host: e["host"].as_str().unwrap().into(),
    }
}

/// Whether a TCP connection from `from` to `to:PORT` is established within 1 s.
fn connects(from: &Endpoint, to: &Endpoint) -> bool {
    let addr = std::net::SocketAddr::from((to.address, PORT));
    netns::in_netns(&from.netns, move || {
        Ok(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
    })
    .unwrap()
}

/// iperf3 for 2 s from src to dst; the bytes dst received.
fn iperf_bytes(src: &Endpoint, dst: &Endpoint) -> u64 {
    let r = iperf::client(&ClientSpec::tcp(&src.netns, dst.address, PORT, 2, 1))
        .expect("iperf3 through the service");
    r.received_bytes
}

fn instances(c: &Client) -> Vec<Value> {
    c.get("/api/v1/instances")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .clone()
}

fn events(c: &Client) -> Vec<Value> {
    c.get("/api/v1/events?limit=1000")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .clone()
}

/// The completed re-placements of `svc`.
fn replaced(c: &Client, svc: &str) -> usize {
    hostbed::operations(c, "replace", svc)
        .iter()
        .filter(|o| o["state"] == "COMPLETED")
        .count()
}

fn rx_packets(ns: &str, iface: &str) -> u64 {
    udpgen::ns_counters(ns, iface, udpgen::Counted::UdpNoPorts)
        .map(|c| c.iface_rx)
        .unwrap_or(0)
}

fn pid_file(dir: &Path, host: &str) -> u32 {
    std::fs::read_to_string(dir.join("agents").join(format!("{host}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// One scrape of the controller sees every agent up and, re-exported by the agent of the
/// instance's host with `host` and `worker` labels, the worker's counters — at rest equal
/// to the packets the instance's live state (the worker's JSON stats) reports.
fn federated_metrics_match_the_instance(c: &Client) {
    let inst = instances(c);
    let id = inst[0]["spec"]["id"].as_str().unwrap().to_string();
    let ok = eventually(Duration::from_secs(10), || {
        let row = c.get(&format!("/api/v1/instances/{id}")).unwrap().body;
        let m = match c.get("/metrics").unwrap().body {
            Value::String(t) => scrape::parse(&t),
            other => panic!("/metrics: {other}"),
        };
        for h in ["h1", "h2", "h3"] {
            assert_eq!(
                m.get(&format!("nfx_agent_up{{host=\"{h}\"}}")),
                Some(&1.0),
                "{h}"
            );
        }
        let st = &row["state"];
        let key = format!(
            "nfx_node_packets_total{{host=\"{}\",worker=\"{}\",instance=\"{}\",node=\"{}\"}}",
            row["host"].as_str().unwrap(),
            row["spec"]["device"].as_str().unwrap(),
            st["detail"]["worker"].as_str().unwrap(),
            st["detail"]["node"]["name"].as_str().unwrap(),
        );
        let host_workers = format!(
            "nfx_agent_workers{{host=\"{}\"}}",
            row["host"].as_str().unwrap()
        );
        assert_eq!(m.get(&host_workers), Some(&1.0), "{host_workers}");
        let packets = st["packets"].as_f64().unwrap();
        assert!(packets > 0.0, "{row}");
        m.get(&key) == Some(&packets)
    });
    assert!(
        ok,
        "the federated node counter never matched the instance's live state"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn three_hosts_deploy_fail_over_and_tear_down() {
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 3);
    let (out, eps) = (bed.out.clone(), bed.eps.clone());
    let out_s = out.to_str().unwrap();
    let (src, dst) = (endpoint(&eps, "src"), endpoint(&eps, "dst"));
    assert_eq!((src.host.as_str(), dst.host.as_str()), ("h1", "h3"));
    let _srv = IperfServer::start(&dst.netns, dst.address, PORT).unwrap();
    assert!(
        !connects(&src, &dst),
        "the testbed must be closed before any deploy"
    );

    let (_ctl, url) = hostbed::controller(&out, TOKEN);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());

    let svc = format!(
        "services:
  - id: web
    tenant: acme
    ingress: {}
    egress: {}
    selector: {{ src: {}/32, dst: {}/32, proto: tcp, dport: {PORT} }}
    chain:
      - function: firewall
        config: {{ default: deny, rules: [{{ action: allow, proto: tcp, dport: {PORT} }}] }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        src.host, dst.host, src.address, dst.address
    );
    let svc_file = out.join("web.yaml");
    std::fs::write(&svc_file, &svc).unwrap();
    let body = &nfx_control::client::load_services(&svc_file).unwrap()[0];
    let anon = Client::new(&url, None)
        .post("/api/v1/services", body)
        .unwrap();
    assert_eq!(anon.status, 401, "{anon:?}");

    let op: Value = serde_json::from_str(&nfx(&[
        "deploy",
        svc_file.to_str().unwrap(),
        "--json",
        "--url",
        &url,
    ]))
    .unwrap();
    assert_eq!(op["state"], "COMPLETED", "{op}");
    assert!(iperf_bytes(&src, &dst) > 1_000_000);
    federated_metrics_match_the_instance(&c);

    // A worker killed with SIGKILL: lost, cleaned up, re-placed.
    let inst = instances(&c);
    assert_eq!(inst.len(), 1, "{inst:?}");
    let (old_id, host) = (
        inst[0]["spec"]["id"].as_str().unwrap().to_string(),
        inst[0]["host"].as_str().unwrap().to_string(),
    );
    let host_ns = format!("{PREFIX}{host}");
    let pids = recorded_pids(&out.join("agents").join(&host).join("workers"));
    assert_eq!(pids.len(), 1, "{pids:?}");
    let wpid = pids[0].1;
    // SAFETY: kill(2) of the worker this test's testbed started.
    unsafe { libc::kill(wpid as i32, libc::SIGKILL) };
    assert!(
        eventually(Duration::from_secs(10), || replaced(&c, "web") == 1),
        "the killed worker's service was not re-placed: {:?}",
        instances(&c)
    );
    assert!(events(&c)
        .iter()
        .any(|e| e["kind"] == "instance.lost" && e["detail"]["instances"][0] == old_id.as_str()));
    let inst = instances(&c);
    assert!(
        inst.len() == 1
            && inst[0]["spec"]["id"] != old_id.as_str()
            && inst[0]["status"] == "running",
        "{inst:?}"
    );
    let tables = netns::exec(&host_ns, &["nft", "list", "tables"], Duration::from_secs(5)).unwrap();
    assert!(
        !tables.contains(&format!("nfx_isolate_{wpid}_")),
        "the dead worker's isolation tables are left: {tables}"
    );
    assert!(iperf_bytes(&src, &dst) > 1_000_000);

    // The agent of the middle host killed: its host is routed around.
    let h2_rx = || rx_packets(&format!("{PREFIX}h2"), "to-h1");
    // SAFETY: kill(2) of the agent this test's testbed started.
    unsafe { libc::kill(pid_file(&out, "h2") as i32, libc::SIGKILL) };
    assert!(
        eventually(Duration::from_secs(10), || replaced(&c, "web") == 2),
        "the service was not re-placed after h2's agent died: {:?}",
        events(&c).iter().rev().take(10).collect::<Vec<_>>()
    );
    assert!(events(&c)
        .iter()
        .any(|e| e["kind"] == "agent.down" && e["detail"]["host"] == "h2"));
    // The controller's scrape still answers, in bounded time, with h2 down.
    let t = std::time::Instant::now();
    let m = match c.get("/metrics").unwrap().body {
        Value::String(t) => scrape::parse(&t),
        other => panic!("/metrics: {other}"),
    };
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(m.get(r#"nfx_agent_up{host="h2"}"#), Some(&0.0));
    assert_eq!(m.get(r#"nfx_agent_up{host="h1"}"#), Some(&1.0));
    let before = h2_rx();
    assert!(iperf_bytes(&src, &dst) > 1_000_000);
    assert!(
        h2_rx() - before < 1_000,
        "h2 still carries the service's traffic"
    );
    let status: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", &url])).unwrap();
    assert_eq!(status["services"][0]["status"], "active", "{status}");

    // Another CA's material gets nothing from an agent.
    let other = tls::generate(
        &out.join("other-pki"),
        &[AgentSubject {
            name: "h1".into(),
            ips: vec!["10.236.201.2".parse().unwrap()],
        }],
    )
    .unwrap();
    let exec = NetnsExecutor::start(&format!("{PREFIX}mgmt"), 1).unwrap();
    let foreign = RemoteVnfm::with_link(AgentLink {
        base: "https://10.236.201.2:7443".into(),
        token: Some(read_token_file(&out.join("token")).unwrap()),
        tls: Some(tls::client_config(&other.controller).unwrap()),
        exec: Some(exec),
        timeout: Duration::from_secs(5),
    });
    let e = foreign.health().unwrap_err();
    assert!(matches!(e, VnfmError::Unavailable(_)), "{e}");

    nfx(&["destroy", "web", "--url", &url]);
    assert!(instances(&c).is_empty());
    assert!(
        !connects(&src, &dst),
        "the path stays open after the destroy"
    );
    drop(_ctl);
    bed.down();
    let left: Vec<String> = netns::list()
        .into_iter()
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    let procs = Command::new("pgrep").args(["-f", out_s]).output().unwrap();
    assert!(
        procs.stdout.is_empty(),
        "processes left: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
}
