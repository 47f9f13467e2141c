//! configs/examples deploys for real, as shipped: `nfx testbed up --infra
//! configs/examples/infrastructure.yaml --allowed-dir /etc/nfx/dpi` builds its four hosts
//! (src — edge — cloud — dst) with their devices and one agent each, `nfx up` runs on
//! the written infrastructure, and each service of configs/examples/services.yaml is
//! deployed through the controller in turn, checked and destroyed:
//! - `web-acme` (firewall on edge's table tier → NAT → DPI): every instance real; a TCP
//!   request to port 80 is answered and the server sees the NAT's public address;
//!   iperf3 on port 443 carries data; port 22 is denied by the firewall; a request
//!   carrying the DPI drop signature of the pattern file gets no answer;
//! - `vpn-globex` (firewall → ESP tunnel edge → cloud on the lookaside devices): IKE is
//!   established at both ends and every UDP datagram from src reaches dst.
//!
//! Left out: configs/examples/transcode.yaml (`nfx plan` covers it in cli.rs). Its
//! selector and output name 10.200.3.2, the third endpoint of a testbed with subnet base
//! 200, which the round-robin attaches to the first host (src), not to dst; and its
//! ffmpeg start-up alone would take most of this test's budget.
//!
//! The DPI's pattern file is where the example says it is, /etc/nfx/dpi/patterns.txt:
//! the test writes configs/dpi/patterns.txt there if nothing is there (and removes what
//! it wrote), and refuses to run over a different file.
//! Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;

use common::eventually;
use hostbed::instances;
use nfx_control::client::{load_services, load_token, Client};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::probe::{tcp_request, PeerEcho, TcpOutcome};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PREFIX: &str = "nfxex-";
const BASE: &str = "227";
const TOKEN: &str = "examples-e2e-api-token-0123456789";
/// Where configs/examples/services.yaml has its DPI read patterns.
const PATTERN_DIR: &str = "/etc/nfx/dpi";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// configs/dpi/patterns.txt at /etc/nfx/dpi/patterns.txt for the test's span: what the
/// test created is removed on drop.
struct Patterns {
    created: Vec<PathBuf>,
}

impl Patterns {
    fn install() -> Self {
        let want = std::fs::read(repo().join("configs/dpi/patterns.txt")).unwrap();
        let file = Path::new(PATTERN_DIR).join("patterns.txt");
        let mut created = Vec::new();
        if let Ok(have) = std::fs::read(&file) {
            assert_eq!(
                have,
                want,
                "{} exists and differs from configs/dpi/patterns.txt",
                file.display()
            );
            return Self { created };
        }
        for d in ["/etc/nfx", PATTERN_DIR] {
            if std::fs::create_dir(d).is_ok() {
                created.push(PathBuf::from(d));
            }
        }
        std::fs::write(&file, want).unwrap();
        created.push(file);
        Self { created }
    }
}

impl Drop for Patterns {
    fn drop(&mut self) {
        for p in self.created.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
}

struct Endpoint {
    netns: String,
    address: Ipv4Addr,
}

fn endpoint(bed: &hostbed::Testbed, name: &str, host: &str) -> Endpoint {
    let (netns, address, at) = bed.endpoint(name);
    assert_eq!(at, host, "{name} is attached to the example's {host} host");
    Endpoint { netns, address }
}

/// Deploys `svc` through the API and waits for its operation; it must complete.
fn deploy(c: &Client, svc: &Value) {
    let op = c.post("/api/v1/services", svc).unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let id = op.body["id"].as_str().unwrap();
    let done = c.wait_operation(id, Duration::from_secs(30)).unwrap();
    assert_eq!(done["state"], "COMPLETED", "{}: {done}", svc["id"]);
}

/// The instance rows of service `id` (`GET /api/v1/instances`).
fn rows_of(c: &Client, id: &str) -> Vec<Value> {
    instances(c)
        .into_iter()
        .filter(|i| {
            i["users"]
                .as_array()
                .is_some_and(|u| u.iter().any(|s| s == id))
        })
        .collect()
}

/// One instance's record and live state (`GET /api/v1/instances/ID`).
fn instance(c: &Client, id: &str) -> Value {
    c.get(&format!("/api/v1/instances/{id}")).unwrap().body
}

/// Destroys service `id` and waits until no instance of it is left.
fn destroy(c: &Client, id: &str) {
    let op = c.delete(&format!("/api/v1/services/{id}")).unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let done = c
        .wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(30))
        .unwrap();
    assert_eq!(done["state"], "COMPLETED", "destroy {id}: {done}");
    assert!(rows_of(c, id).is_empty(), "instances of {id} left");
}

/// The service's instances, each running on an agent (the remote VNFM, which runs
/// workers, table programs and tunnel endpoints for real, never simulated) that reports
/// its live state: (id, function, device) of each.
fn real_instances(c: &Client, id: &str) -> Vec<(String, String, String)> {
    let rows = rows_of(c, id);
    assert!(!rows.is_empty(), "no instance of {id}");
    rows.iter()
        .map(|r| {
            let spec = &r["spec"];
            let iid = spec["id"].as_str().unwrap().to_string();
            let s = instance(c, &iid);
            assert_eq!(s["status"], "running", "{s}");
            assert_eq!(s["vnfm"], "remote", "{s}");
            assert!(
                s["state"]["id"] == iid.as_str(),
                "its agent reports it: {s}"
            );
            let f = spec["function"].as_str().unwrap().to_string();
            (iid, f, spec["device"].as_str().unwrap().to_string())
        })
        .collect()
}

fn web_acme(c: &Client, svc: &Value, src: &Endpoint, dst: &Endpoint) {
    deploy(c, svc);
    let placed = real_instances(c, "web-acme");
    assert!(
        placed
            .iter()
            .any(|(_, f, d)| f == "firewall" && d == "edge-table"),
        "the firewall runs in edge's table tier: {placed:?}"
    );
    let limit = Duration::from_secs(2);
    let echo = PeerEcho::start(&dst.netns, 80).unwrap();
    let nat_ip = svc["chain"][1]["config"]["snat"]["public_ip"]
        .as_str()
        .unwrap()
        .to_string();
    let got = tcp_request(
        &src.netns,
        dst.address,
        80,
        b"GET / HTTP/1.0\r\n\r\n",
        limit,
    );
    assert_eq!(
        got.unwrap(),
        TcpOutcome::Reply(nat_ip.clone()),
        "port 80 passes, seen from the NAT's public address"
    );
    // The echo answers once it has read the client's message to its end, or after 2 s
    // of waiting for it: a client that gives up after 1 s gets an answer only if the
    // DPI let the message through.
    let dropped = tcp_request(
        &src.netns,
        dst.address,
        80,
        b"NFX-DPI-DROP-TEST\r\n",
        Duration::from_secs(1),
    );
    assert!(
        !matches!(dropped, Ok(TcpOutcome::Reply(ref r)) if !r.is_empty()),
        "the DPI drop signature was answered: {dropped:?}"
    );
    let dpi = placed.iter().find(|(_, f, _)| f == "dpi").unwrap();
    let dpi_drops = &instance(c, &dpi.0)["state"]["detail"]["node"]["drops"]["dpi_drop"];
    assert!(dpi_drops.as_u64().unwrap_or(0) > 0, "{dpi_drops}");
    drop(echo);
    let denied = tcp_request(&src.netns, dst.address, 22, b"x", Duration::from_secs(1));
    assert_eq!(denied.unwrap(), TcpOutcome::TimedOut, "port 22 is denied");
    let _srv = IperfServer::start(&dst.netns, dst.address, 443).unwrap();
    let r = iperf::client(&ClientSpec::tcp(&src.netns, dst.address, 443, 1, 1)).unwrap();
    assert!(r.received_bytes > 1_000_000, "iperf3 on 443: {r:?}");
    eprintln!("web-acme: iperf3 on port 443 {:.2} Gbit/s", r.gbps);
    destroy(c, "web-acme");
}

fn vpn_globex(c: &Client, svc: &Value, src: &Endpoint, dst: &Endpoint) {
    deploy(c, svc);
    let placed = real_instances(c, "vpn-globex");
    let ends: Vec<&String> = ["edge-lookaside", "cloud-lookaside"]
        .iter()
        .map(|dev| {
            placed
                .iter()
                .find(|(_, f, d)| f == "esp" && d == dev)
                .map(|(id, _, _)| id)
                .unwrap_or_else(|| panic!("no tunnel endpoint on {dev}: {placed:?}"))
        })
        .collect();
    let up = eventually(Duration::from_secs(10), || {
        ends.iter()
            .all(|e| instance(c, e)["state"]["detail"]["ike"] == "established")
    });
    assert!(up, "IKE never came up");
    let port = 7000;
    let (sent, got) = hostbed::paced_udp(
        (&src.netns, &dst.netns),
        (dst.address, port),
        (200, b""),
        (2000, 0.5),
    );
    assert!(sent > 500, "{sent}");
    assert_eq!(got.packets, sent, "every datagram through the tunnel");
    destroy(c, "vpn-globex");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn every_example_service_deploys_and_carries_traffic() {
    let t0 = Instant::now();
    let _patterns = Patterns::install();
    let infra = repo().join("configs/examples/infrastructure.yaml");
    let infra = infra.to_str().unwrap();
    let shape = ["--infra", infra, "--allowed-dir", PATTERN_DIR];
    let mut bed = hostbed::testbed_up_shaped(TOKEN, PREFIX, BASE, &shape);
    let (src, dst) = (endpoint(&bed, "src", "src"), endpoint(&bed, "dst", "dst"));
    let (_ctl, url) = hostbed::controller(&bed.out, TOKEN);
    std::fs::write(bed.out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&bed.out.join("api-token"))).unwrap());
    let services = load_services(&repo().join("configs/examples/services.yaml")).unwrap();
    let ids: Vec<&str> = services.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["web-acme", "vpn-globex"],
        "a new example service needs a check here"
    );
    // The hosts are run by agents, which forward only a service's selected traffic:
    // a service without a selector is refused at plan, before anything starts.
    let mut unselected = services[0].clone();
    unselected.as_object_mut().unwrap().remove("selector");
    let refused = c.post("/api/v1/plan", &unselected).unwrap();
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        refused.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no selector")),
        "{refused:?}"
    );
    web_acme(&c, &services[0], &src, &dst);
    vpn_globex(&c, &services[1], &src, &dst);
    bed.down();
    eprintln!(
        "configs/examples end to end in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
