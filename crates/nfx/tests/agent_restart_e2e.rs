//! An agent restart brings every tier back: on `nfx testbed up --hosts 2` (with table
//! tier) and `nfx up`, two services from YAML — `vpn` (UDP through an ESP tunnel h1 → h2
//! whose endpoints run on the hosts' accelerator devices) and `tab` (TCP through a
//! firewall and a NAT on the table tier) — carry traffic, and one TCP connection
//! through the NAT is kept open. Both agents are killed with SIGKILL: the table chain
//! stays attached (pinned in bpffs), the kept connection and new ones still pass while
//! the agents are down. Both are started again at once with the same configuration;
//! each agent lists the same instances as before, the tunnel endpoints are adopted
//! (same pids, the tunnel never renegotiated), the table chain is taken back from its
//! pins (its instances say `adopted`, their packet counters went on from where they
//! were) and the kept connection still carries data (its NAT mapping survived: the
//! destination sees the same source port), and real packets pass through both
//! services; a paced UDP stream through the tunnel across the kill and the restart
//! loses no datagram (the restarted agents load their recorded steering again). Then h1's agent and its endpoint are killed together: the restarted agent
//! starts the endpoint again (new pid, IKE established again) and the tunnel carries
//! traffic again. Destroying the table service leaves no program and no pin behind.
//! Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;

use common::eventually;
use nfx_control::client::{load_token, read_token_file, Client};
use nfx_control::hostagent::{tablepins, AgentConfig};
use nfx_control::netns_exec::NetnsExecutor;
use nfx_control::tls;
use nfx_control::vnfm::remote::{AgentLink, RemoteVnfm};
use nfx_control::vnfm::Vnfm;
use nfx_model::TlsFiles;
use nfx_testbed::{netns, udpgen};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "nfxar-";
const BASE: &str = "229";
const TOKEN: &str = "agent-restart-e2e-api-token-0123";
/// The tunnel service's UDP port and the table service's TCP port.
const UDP_PORT: u16 = 5300;
const TCP_PORT: u16 = 5203;
const PUBLIC: &str = "198.51.100.9";
const PATTERN: &[u8] = b"NFX-AGENT-RESTART";

fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

fn services(src: Ipv4Addr, dst: Ipv4Addr) -> String {
    format!(
        "services:
  - id: vpn
    tenant: globex
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: udp, dport: {UDP_PORT} }}
    chain:
      - {{ function: firewall, config: {{ default: allow }} }}
    tunnel: {{ from: h1, to: h2, alg: aes-128-gcm }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
  - id: tab
    tenant: acme
    ingress: h1
    egress: h2
    selector: {{ src: {src}/32, dst: {dst}/32, proto: tcp, dport: {TCP_PORT} }}
    chain:
      - function: firewall
        tier: table
        config: {{ default: allow, max_flows: 1024 }}
      - function: nat
        tier: table
        config: {{ snat: {{ public_ip: {PUBLIC} }}, max_flows: 1024 }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
"
    )
}

/// 200 datagrams in 0.2 s from `src_ns` to `dst:UDP_PORT`: whether every one arrived.
fn udp_passes(src_ns: &str, dst_ns: &str, dst: Ipv4Addr) -> bool {
    let sink = udpgen::Sink::start(dst_ns, UDP_PORT, PATTERN).unwrap();
    let sent = udpgen::generate(udpgen::GenSpec {
        ns: src_ns.to_string(),
        dst,
        port: UDP_PORT,
        payload: 200,
        pattern: PATTERN.to_vec(),
        flows: 1,
        duration: Duration::from_millis(200),
        batch: 8,
        pps: Some(1000),
    })
    .unwrap()
    .sent;
    eventually(Duration::from_secs(1), || sink.packets() >= sent);
    let got = sink.finish().unwrap();
    sent > 100 && got.matched == sent
}

/// 500 datagrams a second through the tunnel, in 250 ms pieces until stopped, counted
/// at `dst`.
struct Stream {
    sink: udpgen::Sink,
    stop: Arc<AtomicBool>,
    sender: std::thread::JoinHandle<u64>,
}

impl Stream {
    /// How long the stream goes on after the agents listen again: past the
    /// controller's re-sent paths (its heartbeat is 250 ms).
    const AFTER: Duration = Duration::from_secs(1);

    fn start(src_ns: &str, dst_ns: &str, dst: Ipv4Addr) -> Self {
        let sink = udpgen::Sink::start(dst_ns, UDP_PORT, PATTERN).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, halt) = (src_ns.to_string(), stop.clone());
        let sender = std::thread::spawn(move || {
            let mut sent = 0;
            while !halt.load(Ordering::Relaxed) {
                let piece = udpgen::generate(udpgen::GenSpec {
                    ns: ns.clone(),
                    dst,
                    port: UDP_PORT,
                    payload: 200,
                    pattern: PATTERN.to_vec(),
                    flows: 1,
                    duration: Duration::from_millis(250),
                    batch: 1,
                    pps: Some(500),
                });
                sent += piece.unwrap().sent;
            }
            sent
        });
        Stream { sink, stop, sender }
    }

    /// Goes on for [`Stream::AFTER`] past `restarted`, then: every datagram arrived.
    fn check(self, restarted: Instant) {
        std::thread::sleep((restarted + Self::AFTER).saturating_duration_since(Instant::now()));
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.join().unwrap();
        eventually(Duration::from_secs(2), || self.sink.packets() >= sent);
        let got = self.sink.finish().unwrap().matched;
        println!("stream across the restart: {got} of {sent} datagrams");
        assert!(sent >= 500, "the stream sent only {sent}");
        assert_eq!(got, sent, "datagrams lost across the agent restart");
    }
}

/// Whether a TCP connection from `src_ns` reaches `listener` through the NAT (dst sees
/// the public address) within 1 s.
fn tcp_passes(src_ns: &str, dst: Ipv4Addr, listener: &TcpListener) -> bool {
    let addr = SocketAddr::from((dst, TCP_PORT));
    let connected = netns::in_netns(src_ns, move || {
        Ok(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
    })
    .unwrap();
    let mut peer = None;
    eventually(Duration::from_secs(1), || {
        peer = listener.accept().ok().map(|(_, a)| a.ip().to_string());
        peer.is_some()
    });
    connected && peer.as_deref() == Some(PUBLIC)
}

/// A TCP connection from `src_ns` through the NAT to `listener`, kept open: (client end,
/// server end, the source address the destination sees).
fn keep_connection(
    src_ns: &str,
    dst: Ipv4Addr,
    listener: &TcpListener,
) -> (TcpStream, TcpStream, SocketAddr) {
    let addr = SocketAddr::from((dst, TCP_PORT));
    let client = netns::in_netns(src_ns, move || {
        Ok(TcpStream::connect_timeout(&addr, Duration::from_secs(1))?)
    })
    .unwrap();
    let mut accepted = None;
    assert!(eventually(Duration::from_secs(1), || {
        accepted = listener.accept().ok();
        accepted.is_some()
    }));
    let (server, peer) = accepted.unwrap();
    server.set_nonblocking(false).unwrap();
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    (client, server, peer)
}

/// Whether `tag` written on the kept connection's client end arrives at its server end.
fn kept_carries(client: &mut TcpStream, server: &mut TcpStream, tag: &[u8]) -> bool {
    let mut got = vec![0u8; tag.len()];
    client.write_all(tag).is_ok() && server.read_exact(&mut got).is_ok() && got == tag
}

/// Pin directories of `host`'s agent (one per table chain it pinned).
fn pinned_chains(out: &Path, host: &str) -> usize {
    let cfg = AgentConfig::load(&out.join("agents").join(format!("{host}.yaml"))).unwrap();
    let root = tablepins::root_of(Path::new(tablepins::BPF_FS), host, &cfg.run_dir);
    tablepins::pin_dirs(&root).len()
}

/// tc programs on the device ports (`sw*`) of `host`.
fn attached_programs(host: &str) -> usize {
    let ns = format!("{PREFIX}{host}");
    let links = netns::exec(&ns, &["ip", "-j", "link"], Duration::from_secs(5)).unwrap();
    let links: Vec<Value> = serde_json::from_str(&links).unwrap();
    let mut n = 0;
    for l in links {
        let name = l["ifname"].as_str().unwrap().to_string();
        if name.starts_with("sw") {
            n += netns::in_netns(&ns, move || Ok(nfx_fastpath::table::tcx_programs(&name)?))
                .unwrap();
        }
    }
    n
}

/// The pid in `out/agents/<host>.pid`.
fn agent_pid(out: &Path, host: &str) -> i32 {
    let f = out.join("agents").join(format!("{host}.pid"));
    std::fs::read_to_string(f).unwrap().trim().parse().unwrap()
}

/// Starts `host`'s agent again with the configuration `nfx testbed up` wrote, as the
/// testbed does (its own session inside the host's namespace; `nfx testbed down` stops
/// it through the pid file), and waits until it listens.
fn restart_agent(out: &Path, host: &str) {
    let dir = out.join("agents");
    let cfg_file = dir.join(format!("{host}.yaml"));
    let ready = AgentConfig::load(&cfg_file).unwrap().ready_file.unwrap();
    let _ = std::fs::remove_file(&ready);
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(format!("{host}.log")))
        .unwrap();
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!(
        "--net={}",
        nfx_io::netns::netns_path(&format!("{PREFIX}{host}"))
    ))
    .arg("--")
    .arg(hostbed::NFX)
    .arg("agent")
    .arg("--config")
    .arg(&cfg_file)
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(log.try_clone().unwrap())
    .stderr(log);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) in the child before exec; async-signal-safe, touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    std::fs::write(dir.join(format!("{host}.pid")), child.id().to_string()).unwrap();
    // Reaped whenever it ends (killed by this test or by `nfx testbed down`).
    std::thread::spawn(move || child.wait());
    let t = Instant::now();
    while !ready.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the agent of {host} did not listen again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client of `host`'s agent as the controller reaches it (mutual TLS from the
/// management namespace).
fn agent_client(out: &Path, host: &str) -> RemoteVnfm {
    let cfg = AgentConfig::load(&out.join("agents").join(format!("{host}.yaml"))).unwrap();
    let pki = out.join("pki");
    RemoteVnfm::with_link(AgentLink {
        base: format!("https://{}", cfg.listen),
        token: Some(read_token_file(&out.join("token")).unwrap()),
        tls: Some(
            tls::client_config(&TlsFiles {
                ca: pki.join(tls::CA_FILE),
                cert: pki.join("controller.pem"),
                key: pki.join("controller.key"),
            })
            .unwrap(),
        ),
        exec: Some(NetnsExecutor::start(&format!("{PREFIX}mgmt"), 1).unwrap()),
        timeout: Duration::from_secs(5),
    })
}

/// Every instance `host`'s agent lists, sorted.
fn listing(out: &Path, host: &str) -> Vec<String> {
    let mut ids = agent_client(out, host).list_instances().unwrap();
    ids.sort();
    ids
}

fn detail(c: &Client, id: &str) -> Value {
    c.get(&format!("/api/v1/instances/{id}")).unwrap().body["state"]["detail"].clone()
}

/// Whether both tunnel endpoints report their IKE SA established.
fn ike_up(c: &Client) -> bool {
    ["vpn-esp-h1", "vpn-esp-h2"]
        .iter()
        .all(|e| detail(c, e)["ike"] == "established")
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn an_agent_restart_brings_back_tunnels_and_table_chains() {
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 2);
    let out = bed.out.clone();
    let infra = std::fs::read_to_string(out.join("infrastructure.yaml")).unwrap();
    assert!(infra.contains("tier: table"), "no table tier here: {infra}");
    let (src_ns, src, _) = bed.endpoint("src");
    let (dst_ns, dst, _) = bed.endpoint("dst");
    let listener =
        netns::in_netns(&dst_ns, move || Ok(TcpListener::bind((dst, TCP_PORT))?)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let (_ctl, url) = hostbed::controller(&out, TOKEN);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());
    let file = out.join("services.yaml");
    std::fs::write(&file, services(src, dst)).unwrap();
    let ops = nfx(&["deploy", file.to_str().unwrap(), "--json", "--url", &url]);
    for line in ops.lines().filter(|l| !l.trim().is_empty()) {
        let op: Value = serde_json::from_str(line).unwrap();
        assert_eq!(op["state"], "COMPLETED", "{op}");
    }
    assert!(eventually(Duration::from_secs(10), || ike_up(&c)));
    assert!(
        udp_passes(&src_ns, &dst_ns, dst),
        "the tunnel carries nothing"
    );
    assert!(
        tcp_passes(&src_ns, dst, &listener),
        "the table chain carries nothing"
    );
    let before = [listing(&out, "h1"), listing(&out, "h2")];
    assert!(before[0].contains(&"vpn-esp-h1".to_string()), "{before:?}");
    let programs = attached_programs("h1") + attached_programs("h2");
    assert!(programs >= 2, "{programs}");
    let pids = [
        detail(&c, "vpn-esp-h1")["pid"].clone(),
        detail(&c, "vpn-esp-h2")["pid"].clone(),
    ];
    assert_eq!(pinned_chains(&out, "h1") + pinned_chains(&out, "h2"), 1);
    let (mut client, mut server, mapped) = keep_connection(&src_ns, dst, &listener);
    assert_eq!(mapped.ip().to_string(), PUBLIC, "not NATed: {mapped}");
    assert!(kept_carries(&mut client, &mut server, b"before"));
    let table_ids: Vec<String> = before
        .concat()
        .into_iter()
        .filter(|i| i.starts_with("tab"))
        .collect();
    assert_eq!(table_ids.len(), 2, "{before:?}");
    let packets = |id: &str| {
        c.get(&format!("/api/v1/instances/{id}")).unwrap().body["state"]["packets"]
            .as_u64()
            .unwrap_or(0)
    };
    let counted: Vec<u64> = table_ids.iter().map(|i| packets(i)).collect();
    assert!(counted.iter().all(|n| *n > 0), "{counted:?}");

    // Both agents killed: the pinned table chain stays attached and carries the kept
    // connection and new ones while they are down; both start again at once (within
    // the controller's 2 s, so it sees a restart, not a dead host). A paced stream
    // through the tunnel spans the kill, the restart and the controller's re-sent
    // paths: the restarted agents keep their recorded steering, so none is lost.
    let stream = Stream::start(&src_ns, &dst_ns, dst);
    for h in ["h1", "h2"] {
        // SAFETY: kill(2) of the agent this test's testbed started.
        unsafe { libc::kill(agent_pid(&out, h), libc::SIGKILL) };
    }
    assert_eq!(attached_programs("h1") + attached_programs("h2"), programs);
    assert!(
        kept_carries(&mut client, &mut server, b"while the agents are down"),
        "the kept connection stopped with the agents"
    );
    assert!(
        tcp_passes(&src_ns, dst, &listener),
        "the table chain stopped with the agents"
    );
    let t = Instant::now();
    for h in ["h1", "h2"] {
        restart_agent(&out, h);
    }
    println!("both agents listening again after {:?}", t.elapsed());
    let restarted = Instant::now();
    assert_eq!([listing(&out, "h1"), listing(&out, "h2")], before);
    let again = [
        detail(&c, "vpn-esp-h1")["pid"].clone(),
        detail(&c, "vpn-esp-h2")["pid"].clone(),
    ];
    assert_eq!(again, pids, "the endpoints were adopted, not restarted");
    for (id, n) in table_ids.iter().zip(&counted) {
        assert_eq!(detail(&c, id)["adopted"], true, "{id}: {}", detail(&c, id));
        assert!(packets(id) > *n, "{id}: its counters restarted");
    }
    assert!(
        kept_carries(&mut client, &mut server, b"after the restart"),
        "the kept connection lost its NAT mapping"
    );
    stream.check(restarted);
    assert!(
        eventually(Duration::from_secs(5), || udp_passes(&src_ns, &dst_ns, dst)),
        "the tunnel carries nothing after the restart"
    );
    assert!(
        eventually(Duration::from_secs(5), || tcp_passes(
            &src_ns, dst, &listener
        )),
        "the table chain carries nothing after the restart"
    );
    assert_eq!(attached_programs("h1") + attached_programs("h2"), programs);
    assert_eq!(pinned_chains(&out, "h1") + pinned_chains(&out, "h2"), 1);
    println!("both services carry traffic again after {:?}", t.elapsed());
    let (mut client2, mut server2, mapped2) = keep_connection(&src_ns, dst, &listener);
    assert!(kept_carries(&mut client2, &mut server2, b"new"));
    assert_ne!(mapped2, mapped, "a new flow got the kept flow's mapping");
    assert!(
        kept_carries(&mut client, &mut server, b"still"),
        "the kept connection lost its NAT mapping"
    );
    for id in &table_ids {
        assert_eq!(
            detail(&c, id)["adopted"],
            true,
            "{id}: the re-sent paths loaded the chain again"
        );
    }

    // h1's agent and its endpoint killed together: the endpoint is started again and
    // negotiates new SAs.
    let old = pids[0].as_u64().unwrap() as i32;
    // SAFETY: kill(2) of the agent and the tunnel endpoint this test's testbed started.
    unsafe {
        libc::kill(agent_pid(&out, "h1"), libc::SIGKILL);
        libc::kill(old, libc::SIGKILL);
    }
    restart_agent(&out, "h1");
    assert_eq!(listing(&out, "h1"), before[0]);
    let new = detail(&c, "vpn-esp-h1")["pid"].clone();
    assert!(new.is_u64() && new != pids[0], "{new} {}", pids[0]);
    assert!(eventually(Duration::from_secs(10), || ike_up(&c)));
    assert!(
        eventually(Duration::from_secs(5), || udp_passes(&src_ns, &dst_ns, dst)),
        "the restarted endpoint carries nothing"
    );
    let events = c.get("/api/v1/events?limit=1000").unwrap().body;
    assert!(
        !events.to_string().contains("agent.down"),
        "the controller took a restart for a dead host"
    );

    nfx(&["destroy", "vpn", "--url", &url]);
    nfx(&["destroy", "tab", "--url", &url]);
    assert_eq!(attached_programs("h1") + attached_programs("h2"), 0);
    assert_eq!(pinned_chains(&out, "h1") + pinned_chains(&out, "h2"), 0);
    drop(_ctl);
    bed.down();
}
