//! A hybrid chain placed by the controller on the multi-host testbed: `nfx testbed up
//! --hosts 2` (every host with a table-tier device), `nfx up`, and a service from YAML
//! whose firewall and NAT are pinned to the table tier and whose DPI runs in a software
//! worker. The agent runs the table-tier functions as a real eBPF `TableChain` on the
//! table device's ports, steered like a worker. Checks: iperf3 TCP passes (both
//! directions through the chain: NAT un-rewrite and tracked replies); the firewall's
//! deny rule stops a denied flow and the table tier's `acl_deny` counter counts it; dst
//! sees the NAT's public address as the source; the DPI instance's counters grow; a
//! DPI pinned to the table tier is refused at plan time with the table tier's reason;
//! then a second service with a table-tier firewall of its own (default deny) on the
//! same table device, its selector another port range: each chain runs only its own
//! service's frames (the first service's NAT leaves the second's source alone, the
//! second's default deny lets the first's iperf3 through), each firewall counts only
//! its own traffic, and destroying the first service leaves the second's open
//! connection flowing; after both destroys no tc program is left on any device port and
//! nothing passes. Last, a port forward before a later stage: a service whose
//! selector names a table-tier NAT's forward by its public endpoint, with a software
//! DPI after the NAT; iperf3 from dst to the public endpoint reaches the server at the
//! forward's target in src through both stages (the hosts match the target inside the
//! NAT), the DPI counts the traffic, and forwards one match cannot express are refused
//! at plan time.
//! A second test migrates a table-tier NAT under traffic through the controller: a
//! testbed of its own whose h1 has two table devices, three UDP flows through the NAT,
//! `nfx migrate` while they run; no datagram is lost, each flow keeps its public port,
//! and the old device's ports keep no program.
//! A third switches table chains in place: firewall → elephant → NAT on two table
//! devices of h1, the elephant detector migrated between them under three UDP flows, so
//! both devices' chains are replaced by `take_over` (no datagram lost, mappings and
//! connection tracking kept); then h1's agent is stopped with SIGTERM (its chains keep
//! forwarding) and the testbed torn down with the service deployed: no pin is left.
//! Needs root; own prefixes and subnets; torn down on failure too.

mod common;
mod hostbed;

use common::eventually;
use hostbed::instances;
use nfx_control::client::{load_token, Client};
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::netns;
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

/// One testbed at a time: three 2-host testbeds with their controllers, agents and paced
/// streams at once starve each other on two cores (an agent that misses its heartbeats
/// is declared down and its services re-placed in the middle of a test).
static SERIAL: Mutex<()> = Mutex::new(());

const PREFIX: &str = "nfxtb-";
const BASE: &str = "234";
const TOKEN: &str = "table-tier-e2e-api-token-0123456";
/// iperf3 (allowed), the denied port, the port whose peer address dst reads.
const PORT: u16 = 5201;
const DENIED: u16 = 5202;
const PEEK: u16 = 5203;
const PUBLIC: &str = "198.51.100.7";
/// The second service's allowed and (by its default) denied port.
const B_PORT: u16 = 5210;
const B_DENIED: u16 = 5211;
/// The port forward's public endpoint and its target port (in src).
const FWD_PUBLIC: &str = "198.51.100.8";
const FWD_PORT: u16 = 8080;
const FWD_TARGET: u16 = 5301;

fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

/// Whether a TCP connection from namespace `ns` to `to:port` is established within 1 s.
fn connects(ns: &str, to: Ipv4Addr, port: u16) -> bool {
    let addr = SocketAddr::from((to, port));
    netns::in_netns(ns, move || {
        Ok(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
    })
    .unwrap()
}

/// A listener in namespace `ns` on `addr:port`.
fn listen(ns: &str, addr: Ipv4Addr, port: u16) -> TcpListener {
    netns::in_netns(ns, move || Ok(TcpListener::bind((addr, port))?)).unwrap()
}

/// The peer address of the first connection `l` accepts within `limit`.
fn accept_within(l: &TcpListener, limit: Duration) -> Option<SocketAddr> {
    l.set_nonblocking(true).unwrap();
    let mut peer = None;
    eventually(limit, || {
        peer = l.accept().ok().map(|(_, a)| a);
        peer.is_some()
    });
    peer
}

/// The ids of the instances running `function`.
fn ids_of(c: &Client, function: &str) -> Vec<String> {
    instances(c)
        .into_iter()
        .filter(|i| i["spec"]["function"] == function)
        .map(|i| i["spec"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// The live row of instance `id`.
fn row_of(c: &Client, id: &str) -> Value {
    c.get(&format!("/api/v1/instances/{id}")).unwrap().body
}

/// The live row of the (only) instance running `function`.
fn row(c: &Client, function: &str) -> Value {
    let ids = ids_of(c, function);
    assert_eq!(ids.len(), 1, "{function} instances: {ids:?}");
    row_of(c, &ids[0])
}

/// The packets instance `id`'s node counted.
fn packets(c: &Client, id: &str) -> u64 {
    row_of(c, id)["state"]["packets"].as_u64().unwrap()
}

/// tc programs attached to the device ports (`sw*`) of every host.
fn attached_programs(hosts: &[&str]) -> usize {
    let mut n = 0;
    for h in hosts {
        let ns = format!("{PREFIX}{h}");
        let links = netns::exec(&ns, &["ip", "-j", "link"], Duration::from_secs(5)).unwrap();
        let links: Vec<Value> = serde_json::from_str(&links).unwrap();
        for l in links {
            let name = l["ifname"].as_str().unwrap().to_string();
            if name.starts_with("sw") {
                n += netns::in_netns(&ns, move || Ok(nfx_fastpath::table::tcx_programs(&name)?))
                    .unwrap();
            }
        }
    }
    n
}

fn service(src: Ipv4Addr, dst: Ipv4Addr, dpi_tier: &str) -> String {
    format!(
        "services:
  - id: hybrid
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: tcp, dport: {PORT}-{PEEK} }}
    chain:
      - function: firewall
        tier: table
        config:
          default: allow
          max_flows: 1024
          rules: [{{ action: deny, proto: tcp, dport: {DENIED} }}]
      - function: nat
        tier: table
        config: {{ snat: {{ public_ip: {PUBLIC} }}, max_flows: 1024 }}
      - function: dpi
        tier: {dpi_tier}
        config: {{ patterns: patterns.txt }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
"
    )
}

/// The second service: a table-tier firewall alone, default deny, on other ports.
fn service_b(src: Ipv4Addr, dst: Ipv4Addr) -> String {
    format!(
        "services:
  - id: sideb
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: tcp, dport: {B_PORT}-{B_DENIED} }}
    chain:
      - function: firewall
        tier: table
        config:
          default: deny
          max_flows: 256
          rules: [{{ action: allow, proto: tcp, dport: {B_PORT} }}]
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
"
    )
}

/// A port forward's service: forward direction from the target (src) to dst, the
/// selector naming the public endpoint as its source; the table-tier NAT forwards
/// `sports` (each to `to_ip:FWD_TARGET + i`), a software DPI follows it.
fn service_fwd(to: &[Ipv4Addr], dst: Ipv4Addr, sport: &str) -> String {
    let forwards: Vec<String> = to
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            format!(
                "{{ proto: tcp, public_ip: {FWD_PUBLIC}, public_port: {}, to_ip: {ip}, to_port: {} }}",
                FWD_PORT + i as u16,
                FWD_TARGET + 2 * i as u16
            )
        })
        .collect();
    format!(
        "services:
  - id: fwd
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {FWD_PUBLIC}/32, dst: {dst}/32, proto: tcp, sport: {sport} }}
    chain:
      - function: nat
        tier: table
        config: {{ dnat: [{}], max_flows: 1024 }}
      - function: dpi
        tier: software
        config: {{ patterns: patterns.txt }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        forwards.join(", ")
    )
}

/// Deploys the services of YAML `text` (written to `out/name`) through the CLI.
fn deploy(out: &std::path::Path, name: &str, text: &str, url: &str) {
    let file = out.join(name);
    std::fs::write(&file, text).unwrap();
    hostbed::deploy(TOKEN, &file, url)
}

/// The `acl_deny` drops a table-tier firewall's row counts.
fn acl_denies(row: &Value) -> u64 {
    row["state"]["detail"]["node"]["drops"]["acl_deny"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn hybrid_chain_on_the_table_tier_and_a_worker() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 2);
    let out = bed.out.clone();
    let infra = std::fs::read_to_string(out.join("infrastructure.yaml")).unwrap();
    assert!(
        infra.contains("h1-tt0") && infra.contains("tier: table"),
        "{infra}"
    );
    let (src_ns, src, _) = bed.endpoint("src");
    let (dst_ns, dst, _) = bed.endpoint("dst");
    // The DPI worker reads its patterns from its run directory, on either host.
    let patterns =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/dpi/patterns.txt");
    for h in ["h1", "h2"] {
        let dir = out.join("agents").join(h).join("workers");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&patterns, dir.join("patterns.txt")).unwrap();
    }
    let _srv = IperfServer::start(&dst_ns, dst, PORT).unwrap();
    let denied = listen(&dst_ns, dst, DENIED);
    let peek = listen(&dst_ns, dst, PEEK);
    assert!(!connects(&src_ns, dst, PORT), "closed before any deploy");

    let (_ctl, url) = hostbed::controller(&out, TOKEN);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());

    // DPI pinned to the table tier: refused at plan time with the tier's reason.
    let bad = out.join("bad.yaml");
    std::fs::write(&bad, service(src, dst, "table")).unwrap();
    let body = &nfx_control::client::load_services(&bad).unwrap()[0];
    let r = c.post("/api/v1/services", body).unwrap();
    assert_eq!(r.status, 400, "DPI on the table tier: {r:?}");
    assert!(
        r.body.to_string().contains("cannot run on the table tier"),
        "{r:?}"
    );

    deploy(&out, "hybrid.yaml", &service(src, dst, "software"), &url);
    let tiers: Vec<(String, String)> = instances(&c)
        .iter()
        .map(|i| {
            (
                i["spec"]["function"].as_str().unwrap().to_string(),
                i["tier"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (f, t) in [("firewall", "table"), ("nat", "table"), ("dpi", "software")] {
        assert!(tiers.contains(&(f.into(), t.into())), "{tiers:?}");
    }

    let dpi_before = row(&c, "dpi")["state"]["packets"].as_u64().unwrap();
    let r = iperf::client(&ClientSpec::tcp(&src_ns, dst, PORT, 2, 1))
        .expect("iperf3 through the hybrid chain");
    assert!(r.received_bytes > 1_000_000, "{r:?}");

    // NAT: dst sees the public address.
    let client = std::thread::spawn({
        let src_ns = src_ns.clone();
        move || connects(&src_ns, dst, PEEK)
    });
    let peer = accept_within(&peek, Duration::from_secs(3));
    assert!(client.join().unwrap());
    assert_eq!(peer.map(|p| p.ip().to_string()), Some(PUBLIC.to_string()));

    // The deny rule: no connection, counted by the table tier per reason.
    assert!(!connects(&src_ns, dst, DENIED), "the denied port connected");
    drop(denied);
    let fw = row(&c, "firewall");
    assert_eq!(fw["state"]["detail"]["tier"], "table", "{fw}");
    assert!(acl_denies(&fw) >= 1, "{fw}");
    let nat = row(&c, "nat");
    assert!(nat["state"]["flows"].as_u64().unwrap() >= 1, "{nat}");
    assert!(
        eventually(Duration::from_secs(5), || {
            row(&c, "dpi")["state"]["packets"].as_u64().unwrap() > dpi_before + 100
        }),
        "the software DPI saw no traffic: {}",
        row(&c, "dpi")
    );
    assert!(attached_programs(&["h1", "h2"]) >= 2);

    two_services_on_one_table_device(&c, &url, &out, (&src_ns, src), (&dst_ns, dst));
    assert!(instances(&c).is_empty());
    assert_eq!(
        attached_programs(&["h1", "h2"]),
        0,
        "programs left attached"
    );
    assert!(
        !connects(&src_ns, dst, PORT),
        "the path stays open after the destroy"
    );
    port_forward_before_a_later_stage(&c, &url, &out, (&src_ns, src), (&dst_ns, dst));
    drop(_ctl);
    bed.down();
}

/// The second service's chain beside the first's on the same table device: isolation
/// both ways, counters per service, and the first's destroy leaving the second's flows.
/// Destroys both services.
fn two_services_on_one_table_device(
    c: &Client,
    url: &str,
    out: &std::path::Path,
    (src_ns, src): (&str, Ipv4Addr),
    (dst_ns, dst): (&str, Ipv4Addr),
) {
    let a_fw = ids_of(c, "firewall").remove(0);
    let a_drops = || acl_denies(&row_of(c, &a_fw));
    let a_denied = a_drops();
    let b_open = listen(dst_ns, dst, B_PORT);
    let b_denied = listen(dst_ns, dst, B_DENIED);
    deploy(out, "sideb.yaml", &service_b(src, dst), url);
    let b_fw = ids_of(c, "firewall")
        .into_iter()
        .find(|i| *i != a_fw)
        .expect("the second service's firewall");
    let device = |id: &str| row_of(c, id)["spec"]["device"].clone();
    assert_eq!(
        device(&a_fw),
        device(&b_fw),
        "both chains on one table device"
    );
    assert_eq!(
        row_of(c, &b_fw)["state"]["detail"]["service"],
        "sideb",
        "{}",
        row_of(c, &b_fw)
    );

    // B's own flow: allowed by B, not rewritten by A's NAT; held open.
    let held = std::thread::spawn({
        let ns = src_ns.to_string();
        move || {
            netns::in_netns(&ns, move || {
                Ok(TcpStream::connect_timeout(
                    &SocketAddr::from((dst, B_PORT)),
                    Duration::from_secs(2),
                )?)
            })
        }
    });
    b_open.set_nonblocking(true).unwrap();
    let mut accepted = None;
    eventually(Duration::from_secs(3), || {
        accepted = b_open.accept().ok();
        accepted.is_some()
    });
    let mut held = held.join().unwrap().expect("B's allowed port connects");
    let (mut accepted, peer) = accepted.expect("B's connection accepted");
    assert_eq!(
        peer.ip(),
        std::net::IpAddr::from(src),
        "A's NAT touched B's flow"
    );
    // B's default deny: counted by B's firewall, not by A's.
    assert!(
        !connects(src_ns, dst, B_DENIED),
        "B's denied port connected"
    );
    drop(b_denied);
    let b_row = row_of(c, &b_fw);
    assert!(acl_denies(&b_row) >= 1, "{b_row}");
    assert_eq!(a_drops(), a_denied, "B's drop counted by A");

    // A's traffic crosses B's default-deny chain untouched and uncounted.
    let (b_before, a_before) = (packets(c, &b_fw), packets(c, &a_fw));
    let r = iperf::client(&ClientSpec::tcp(src_ns, dst, PORT, 1, 1))
        .expect("A's iperf3 beside B's chain");
    assert!(r.received_bytes > 1_000_000, "{r:?}");
    assert!(packets(c, &a_fw) > a_before + 100, "{}", row_of(c, &a_fw));
    assert_eq!(
        packets(c, &b_fw),
        b_before,
        "B's firewall counted A's frames"
    );

    // A destroyed: B's chain and its tracked connection carry on.
    nfx(&["destroy", "hybrid", "--url", url]);
    assert!(!connects(src_ns, dst, PORT), "A's path stays open");
    accepted.set_nonblocking(false).unwrap();
    accepted
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    use std::io::{Read, Write};
    held.write_all(b"still here").unwrap();
    let mut got = [0u8; 10];
    accepted
        .read_exact(&mut got)
        .expect("B's flow after A's destroy");
    assert_eq!(&got, b"still here");
    assert!(packets(c, &b_fw) > b_before, "{}", row_of(c, &b_fw));
    assert!(attached_programs(&["h1", "h2"]) >= 1, "B's chain detached");
    nfx(&["destroy", "sideb", "--url", url]);
}

/// A table-tier port forward followed by a software DPI: connections from dst to the
/// public endpoint reach the target in src through both stages, whose hosts match the
/// target's frames inside the NAT; forwards to two addresses under one selector are
/// refused at plan time. Destroys the service.
fn port_forward_before_a_later_stage(
    c: &Client,
    url: &str,
    out: &std::path::Path,
    (src_ns, src): (&str, Ipv4Addr),
    (dst_ns, dst): (&str, Ipv4Addr),
) {
    let other = Ipv4Addr::from(u32::from(src) + 1);
    let bad = out.join("fwd-bad.yaml");
    std::fs::write(&bad, service_fwd(&[src, other], dst, "8080-8081")).unwrap();
    let body = &nfx_control::client::load_services(&bad).unwrap()[0];
    let r = c.post("/api/v1/services", body).unwrap();
    assert_eq!(r.status, 400, "forwards to two addresses: {r:?}");
    assert!(r.body.to_string().contains("several addresses"), "{r:?}");

    let public: Ipv4Addr = FWD_PUBLIC.parse().unwrap();
    let _srv = IperfServer::start(src_ns, src, FWD_TARGET).unwrap();
    assert!(
        !connects(dst_ns, public, FWD_PORT),
        "open before the deploy"
    );
    deploy(out, "fwd.yaml", &service_fwd(&[src], dst, "8080"), url);
    let dpi_before = row(c, "dpi")["state"]["packets"].as_u64().unwrap();
    let r = iperf::client(&ClientSpec::tcp(dst_ns, public, FWD_PORT, 1, 1))
        .expect("iperf3 through the port forward and the DPI after it");
    assert!(r.received_bytes > 1_000_000, "{r:?}");
    let nat = row(c, "nat");
    assert!(nat["state"]["flows"].as_u64().unwrap() >= 1, "{nat}");
    assert!(
        eventually(Duration::from_secs(5), || {
            row(c, "dpi")["state"]["packets"].as_u64().unwrap() > dpi_before + 100
        }),
        "the DPI after the NAT saw no traffic: {}",
        row(c, "dpi")
    );
    nfx(&["destroy", "fwd", "--url", url]);
    assert!(
        !connects(dst_ns, public, FWD_PORT),
        "open after the destroy"
    );
}

/// The migration testbed: its own prefix and subnet; h1 has two table devices.
const M_PREFIX: &str = "nfxtm-";
const M_BASE: &str = "235";
/// The migrated NAT's UDP port, its public address, and the flows crossing it.
const M_PORT: u16 = 9100;
const M_PUBLIC: &str = "198.51.100.9";
const M_FLOWS: usize = 3;
/// The NAT's public ports: none of the flows' own source ports (which a NAT keeps when
/// it can), so each mapping is the NAT's allocation and a fresh chain's would differ.
const M_LO: u16 = 20000;
const M_HI: u16 = 20999;
/// Datagrams a second over all flows.
const M_PPS: u64 = 3_000;

/// Two hosts; h1 with two table devices (the NAT moves from one to the other), h2 with
/// none (it only carries the path to dst).
const M_INFRA: &str = "hosts:
  - { id: h1, cores: 1 }
  - { id: h2, cores: 1 }
devices:
  - { id: h1-tt0, host: h1, tier: table, functions: [nat], latency_us: 5, throughput_gbps: 20, cost: 1, table_entries: 4096 }
  - { id: h1-tt1, host: h1, tier: table, functions: [nat], latency_us: 5, throughput_gbps: 20, cost: 1, table_entries: 4096 }
links:
  - { a: h1, b: h2, latency_us: 30 }
";

/// The service whose table-tier NAT is migrated: UDP from src to dst's `M_PORT`.
fn service_nat(src: Ipv4Addr, dst: Ipv4Addr) -> String {
    format!(
        "services:
  - id: natmove
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: udp, dport: {M_PORT} }}
    chain:
      - function: nat
        tier: table
        config: {{ snat: {{ public_ip: {M_PUBLIC}, port_range: [{M_LO}, {M_HI}] }}, max_flows: 1024 }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
"
    )
}

/// What dst received: datagrams per flow and the sources each flow arrived from.
#[derive(Default)]
struct Seen {
    packets: u64,
    sources: Vec<std::collections::BTreeSet<SocketAddr>>,
}

/// Receives datagrams `[flow, seq..]` on `sock` until `stop`, noting each one's source.
fn sink(sock: std::net::UdpSocket, stop: &std::sync::atomic::AtomicBool) -> Seen {
    use std::sync::atomic::Ordering;
    let mut seen = Seen {
        packets: 0,
        sources: vec![Default::default(); M_FLOWS],
    };
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            if n >= 5 && usize::from(buf[0]) < M_FLOWS {
                seen.packets += 1;
                seen.sources[usize::from(buf[0])].insert(from);
            }
        }
    }
    seen
}

/// Sends one datagram of an uncounted flow (so the NAT's allocation of the counted ones
/// does not start at the bottom of its range), then `M_PPS` datagrams a second round
/// robin over `M_FLOWS` sockets of namespace `ns` (one source port each) to `to` until
/// `stop`; returns how many of those were sent.
fn paced_flows(ns: &str, to: SocketAddr, stop: &std::sync::atomic::AtomicBool) -> u64 {
    use std::sync::atomic::Ordering;
    let socks: Vec<std::net::UdpSocket> = (0..=M_FLOWS)
        .map(|_| netns::in_netns(ns, || Ok(std::net::UdpSocket::bind("0.0.0.0:0")?)).unwrap())
        .collect();
    socks[M_FLOWS].send_to(&[M_FLOWS as u8; 32], to).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let start = std::time::Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut d = [0u8; 32];
        d[0] = (sent % M_FLOWS as u64) as u8;
        d[1..9].copy_from_slice(&sent.to_le_bytes());
        if socks[usize::from(d[0])].send_to(&d, to).is_ok() {
            sent += 1;
        }
        let due = start + Duration::from_micros(sent * 1_000_000 / M_PPS);
        std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
    }
    sent
}

/// A shaped testbed with its controller and a client holding the admin token (also
/// written to `out/api-token` for the CLI), one service deployed; `src` and `dst` are
/// the endpoints' namespaces and addresses.
struct Deployed {
    bed: hostbed::Testbed,
    ctl: hostbed::Ctl,
    url: String,
    c: Client,
    src: (String, Ipv4Addr),
    dst: (String, Ipv4Addr),
}

/// Brings up the testbed `(prefix, subnet base)` shaped by infrastructure `infra` and
/// deploys `service(src, dst)` from file `name` through the CLI.
fn deployed(
    infra: &str,
    (prefix, base): (&'static str, &str),
    name: &str,
    service: fn(Ipv4Addr, Ipv4Addr) -> String,
) -> Deployed {
    let shape_dir = nfx_testbed::tempfile::tempdir().unwrap();
    let shape = shape_dir.path().join("infrastructure.yaml");
    std::fs::write(&shape, infra).unwrap();
    let bed =
        hostbed::testbed_up_shaped(TOKEN, prefix, base, &["--infra", shape.to_str().unwrap()]);
    let out = bed.out.clone();
    let (src_ns, src, _) = bed.endpoint("src");
    let (dst_ns, dst, _) = bed.endpoint("dst");
    let (ctl, url) = hostbed::controller(&out, TOKEN);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());
    deploy(&out, name, &service(src, dst), &url);
    Deployed {
        bed,
        ctl,
        url,
        c,
        src: (src_ns, src),
        dst: (dst_ns, dst),
    }
}

/// [`paced_flows`] from a source namespace to a [`sink`] bound in the destination's,
/// running until [`Flows::stop`].
struct Flows {
    stop_send: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop_sink: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::thread::JoinHandle<u64>,
    seen: std::thread::JoinHandle<Seen>,
}

impl Flows {
    /// Binds the sink on `dst:port` in `dst_ns`, then starts sending from `src_ns`.
    fn start(src_ns: &str, (dst_ns, dst): (&str, Ipv4Addr), port: u16) -> Flows {
        let sock =
            netns::in_netns(dst_ns, move || Ok(std::net::UdpSocket::bind((dst, port))?)).unwrap();
        nfx_testbed::udpgen::set_rcvbuf(&sock, 8 << 20);
        let stop_sink = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop_send = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::thread::spawn({
            let stop = stop_sink.clone();
            move || sink(sock, &stop)
        });
        let sent = std::thread::spawn({
            let (stop, ns) = (stop_send.clone(), src_ns.to_string());
            move || paced_flows(&ns, SocketAddr::from((dst, port)), &stop)
        });
        Flows {
            stop_send,
            stop_sink,
            sent,
            seen,
        }
    }

    /// Stops the sender, gives the last datagrams 300 ms to arrive, stops the sink:
    /// how many were sent and what arrived.
    fn stop(self) -> (u64, Seen) {
        use std::sync::atomic::Ordering;
        self.stop_send.store(true, Ordering::Relaxed);
        let sent = self.sent.join().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        self.stop_sink.store(true, Ordering::Relaxed);
        (sent, self.seen.join().unwrap())
    }
}

/// The ports of table device `device` of h1 (no software devices there: the table
/// devices are its stages 0 and 1).
fn device_ports(device: &str) -> [String; 2] {
    let k = device.trim_start_matches("h1-tt");
    [format!("sw{k}i"), format!("sw{k}o")]
}

/// tc programs on `device`'s ports in h1.
fn programs_on(device: &str) -> usize {
    let ns = format!("{M_PREFIX}h1");
    device_ports(device)
        .into_iter()
        .map(|p| netns::in_netns(&ns, move || Ok(nfx_fastpath::table::tcx_programs(&p)?)).unwrap())
        .sum()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_table_tier_nat_migrates_under_traffic_through_the_controller() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Deployed {
        mut bed,
        ctl,
        url,
        c,
        src,
        dst,
    } = deployed(M_INFRA, (M_PREFIX, M_BASE), "natmove.yaml", service_nat);
    let old = row(&c, "nat");
    let old_id = old["spec"]["id"].as_str().unwrap().to_string();
    let old_dev = old["spec"]["device"].as_str().unwrap().to_string();
    assert_eq!(old["tier"], "table", "{old}");
    let flows = Flows::start(&src.0, (&dst.0, dst.1), M_PORT);
    // Every flow has its mapping on the old device before the move.
    assert!(
        eventually(Duration::from_secs(3), || {
            row_of(&c, &old_id)["state"]["flows"].as_u64().unwrap_or(0) > M_FLOWS as u64
        }),
        "{}",
        row_of(&c, &old_id)
    );
    std::thread::sleep(Duration::from_millis(200));
    nfx(&["migrate", &old_id, "--url", &url]);
    std::thread::sleep(Duration::from_millis(300));
    let (sent, seen) = flows.stop();

    assert!(sent > 1000, "{sent}");
    assert_eq!(seen.packets, sent, "datagrams lost across the migration");
    let mut ports = std::collections::BTreeSet::new();
    for (f, s) in seen.sources.iter().enumerate() {
        assert_eq!(s.len(), 1, "flow {f}'s mapping changed: {s:?}");
        let from = s.first().unwrap();
        assert_eq!(from.ip().to_string(), M_PUBLIC, "flow {f}");
        assert!((M_LO..=M_HI).contains(&from.port()), "flow {f}: {from}");
        ports.insert(from.port());
    }
    assert_eq!(ports.len(), M_FLOWS, "one public port per flow");

    let new = row(&c, "nat");
    let new_dev = new["spec"]["device"].as_str().unwrap();
    assert_ne!(new["spec"]["id"], old_id.as_str(), "{new}");
    assert_ne!(new_dev, old_dev, "{new}");
    assert_eq!(new["tier"], "table", "{new}");
    let moved = &new["state"]["detail"]["migrated"];
    assert_eq!(moved["from"], old_id.as_str(), "{new}");
    assert!(moved["flows"].as_u64().unwrap() >= M_FLOWS as u64, "{new}");
    assert_eq!(moved["remapped"], 0, "{new}");
    let ops = hostbed::operations(&c, "migrate", &old_id);
    assert!(
        ops.iter().any(|o| o["state"] == "COMPLETED"),
        "the migration's operation: {ops:?}"
    );
    assert_eq!(programs_on(&old_dev), 0, "the old device keeps a chain");
    assert!(programs_on(new_dev) >= 2, "the new device runs no chain");
    nfx(&["destroy", "natmove", "--url", &url]);
    assert_eq!(programs_on(new_dev), 0, "a chain left after the destroy");
    drop(ctl);
    bed.down();
}

/// The take-over testbed: its own prefix and subnet; h1 has two table devices, one
/// that runs the firewall, one that runs the NAT, and both the elephant detector.
const K_PREFIX: &str = "nfxtk-";
const K_BASE: &str = "246";
/// The service's UDP port and its NAT's public address.
const K_PORT: u16 = 9200;
const K_PUBLIC: &str = "198.51.100.10";
/// What the datagrams sent while h1's agent is stopped start with.
const K_PATTERN: &[u8] = b"NFX-TAKEOVER";

const K_INFRA: &str = "hosts:
  - { id: h1, cores: 1 }
  - { id: h2, cores: 1 }
devices:
  - { id: h1-tt0, host: h1, tier: table, functions: [firewall, elephant], latency_us: 5, throughput_gbps: 20, cost: 1, table_entries: 8192 }
  - { id: h1-tt1, host: h1, tier: table, functions: [elephant, nat], latency_us: 5, throughput_gbps: 20, cost: 1, table_entries: 8192 }
links:
  - { a: h1, b: h2, latency_us: 30 }
";

/// Firewall → elephant → NAT on the table tier, UDP from src to dst's `K_PORT`: the
/// firewall lands on h1-tt0, the NAT on h1-tt1, the elephant detector on either.
fn service_takeover(src: Ipv4Addr, dst: Ipv4Addr) -> String {
    format!(
        "services:
  - id: takeover
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: udp, dport: {K_PORT} }}
    chain:
      - function: firewall
        tier: table
        config: {{ default: deny, max_flows: 1024, rules: [{{ action: allow, proto: udp, dport: {K_PORT} }}] }}
      - function: elephant
        tier: table
        config: {{ max_flows: 1024 }}
      - function: nat
        tier: table
        config: {{ snat: {{ public_ip: {K_PUBLIC}, port_range: [{M_LO}, {M_HI}] }}, max_flows: 1024 }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
"
    )
}

/// tc programs on table device `device`'s ports in h1 of the testbed `prefix`.
fn programs_in(prefix: &str, device: &str) -> usize {
    let ns = format!("{prefix}h1");
    device_ports(device)
        .into_iter()
        .map(|p| netns::in_netns(&ns, move || Ok(nfx_fastpath::table::tcx_programs(&p)?)).unwrap())
        .sum()
}

/// The flows the live row of instance `id` reports.
fn flows(c: &Client, id: &str) -> u64 {
    row_of(c, id)["state"]["flows"].as_u64().unwrap_or(0)
}

/// A path change that switches both of a host's table chains in place: the elephant
/// detector migrates between h1's two table devices while three UDP flows cross the
/// chain, so each device's chain for the service is replaced by one with another
/// instance list (`TableChain::take_over`; the path's stages stay h1-tt0, h1-tt1 and
/// the steering does not change). No datagram is lost, every flow keeps its NAT
/// mapping (the NAT's table went along with the take-over, as did the firewall's
/// connection tracking: both report the flows from before the switch, among them one
/// that sent nothing since), and the new elephant detector counts the traffic. Then
/// h1's agent stops cleanly (SIGTERM): its chains stay pinned and keep forwarding. Last,
/// the testbed is torn down with the service still deployed: no pin of its agents is
/// left in the BPF file system.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_path_change_takes_over_table_chains_in_place_and_teardown_unpins() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Deployed {
        mut bed,
        ctl,
        url,
        c,
        src,
        dst,
    } = deployed(
        K_INFRA,
        (K_PREFIX, K_BASE),
        "takeover.yaml",
        service_takeover,
    );
    let device = |id: &str| {
        row_of(&c, id)["spec"]["device"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (fw, nat) = (row(&c, "firewall"), row(&c, "nat"));
    let fw = fw["spec"]["id"].as_str().unwrap().to_string();
    let nat = nat["spec"]["id"].as_str().unwrap().to_string();
    let ele = ids_of(&c, "elephant").remove(0);
    assert_eq!(
        (device(&fw).as_str(), device(&nat).as_str()),
        ("h1-tt0", "h1-tt1")
    );
    let to = if device(&ele) == "h1-tt0" {
        "h1-tt1"
    } else {
        "h1-tt0"
    };

    let flows_of = Flows::start(&src.0, (&dst.0, dst.1), K_PORT);
    // Every flow (and the uncounted one) is tracked and mapped before the switch.
    assert!(
        eventually(Duration::from_secs(3), || {
            flows(&c, &nat) > M_FLOWS as u64 && flows(&c, &fw) > M_FLOWS as u64
        }),
        "{} {}",
        row_of(&c, &nat),
        row_of(&c, &fw)
    );
    std::thread::sleep(Duration::from_millis(200));
    nfx(&["migrate", &ele, "--device", to, "--url", &url]);
    let ele_new = ids_of(&c, "elephant")
        .into_iter()
        .find(|i| *i != ele)
        .expect("the migrated elephant detector");
    let counted = packets(&c, &ele_new);
    std::thread::sleep(Duration::from_millis(500));
    let (sent, seen) = flows_of.stop();

    assert!(sent > 1000, "{sent}");
    assert_eq!(seen.packets, sent, "datagrams lost across the take-over");
    for (f, s) in seen.sources.iter().enumerate() {
        assert_eq!(s.len(), 1, "flow {f}'s mapping changed: {s:?}");
        assert_eq!(s.first().unwrap().ip().to_string(), K_PUBLIC, "flow {f}");
    }
    // The kept instances' tables went along: the uncounted flow's entries too.
    for id in [&nat, &fw] {
        assert!(flows(&c, id) > M_FLOWS as u64, "{}", row_of(&c, id));
    }
    let new = row_of(&c, &ele_new);
    assert_eq!(new["spec"]["device"], to, "{new}");
    assert_eq!(
        new["state"]["detail"]["migrated"]["from"],
        ele.as_str(),
        "{new}"
    );
    assert!(packets(&c, &ele_new) > counted + 100, "{new}");
    assert_eq!(ids_of(&c, "elephant"), std::slice::from_ref(&ele_new));
    for d in ["h1-tt0", "h1-tt1"] {
        assert!(programs_in(K_PREFIX, d) >= 2, "{d} runs no chain");
    }

    let out = bed.out.clone();
    stopped_agent_keeps_its_chains(&out, (&src.0, &dst.0), dst.1);
    drop(ctl);
    let cfg = nfx_control::hostagent::AgentConfig::load(&out.join("agents/h1.yaml")).unwrap();
    let pins = nfx_control::hostagent::tablepins::root_of(
        std::path::Path::new(nfx_control::hostagent::tablepins::BPF_FS),
        "h1",
        &cfg.run_dir,
    );
    bed.down();
    assert!(!pins.exists(), "{} left after the teardown", pins.display());
}

/// Stops h1's agent with SIGTERM: its two chains stay pinned and paced datagrams still
/// cross them, none lost.
fn stopped_agent_keeps_its_chains(
    out: &std::path::Path,
    (src_ns, dst_ns): (&str, &str),
    dst: Ipv4Addr,
) {
    use nfx_control::hostagent::{tablepins, AgentConfig};
    let pid: u32 = std::fs::read_to_string(out.join("agents/h1.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ns = format!("{K_PREFIX}h1");
    assert!(netns::pids(&ns).contains(&pid), "h1's agent is not running");
    // SAFETY: kill(2) on the agent this testbed started (checked to run in h1).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    assert!(
        eventually(Duration::from_secs(5), || !netns::pids(&ns).contains(&pid)),
        "h1's agent did not stop on SIGTERM"
    );
    let cfg = AgentConfig::load(&out.join("agents/h1.yaml")).unwrap();
    let root = tablepins::root_of(std::path::Path::new(tablepins::BPF_FS), "h1", &cfg.run_dir);
    assert_eq!(tablepins::pin_dirs(&root).len(), 2, "{}", root.display());
    let (sent, got) = hostbed::paced_udp(
        (src_ns, dst_ns),
        (dst, K_PORT),
        (32, K_PATTERN),
        (1000, 0.5),
    );
    assert!(sent > 300, "{sent}");
    assert_eq!((got.packets, got.matched), (sent, sent), "{got:?}");
}
