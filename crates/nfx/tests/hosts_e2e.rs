//! End-to-end on the multi-host testbed, as an operator would run it:
//! `nfx testbed up --hosts 3 --out DIR`, `nfx up --infra DIR/infrastructure.yaml` (the
//! controller reaches the three agents over mutual TLS from the management namespace), a
//! firewall service from YAML between the `src` and `dst` endpoints of endpoints.json.
//! Checks: nothing passes before the deploy; iperf3 passes after it; the controller's
//! `/metrics` federates every agent and the worker's counters; a deploy without the
//! token is 401; a worker killed with SIGKILL is noticed, no isolation table of its own is
//! left while the agent's standing tables stay on the device's ports, and
//! the service is re-placed and carries traffic again; the agent of the middle host killed
//! with SIGKILL is noticed and the service is re-routed around that host (which then sees
//! none of its traffic), and the controller's scrape answers with `nfx_agent_up` 0 for it; a client holding another CA's material is refused by an agent;
//! after the destroy nothing passes; `nfx testbed down` leaves no namespace or process.
//! A second test deploys a service with an ESP tunnel between two hosts: the agents start
//! the hosts' lookaside devices and the IKEv2-keyed endpoints, the link carries ESP and
//! no plaintext, every datagram arrives, the controller reports the endpoints' counters,
//! and destroy leaves no process, route or key file.
//! Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;
mod scrape;

use common::eventually;
use hostbed::instances;
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

/// `nfx deploy FILE` through the CLI; the operation must complete.
fn deploy(file: &std::path::Path, url: &str) {
    hostbed::deploy(TOKEN, file, url)
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

    deploy(&svc_file, &url);
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
    let workers = out.join("agents").join(&host).join("workers");
    let run_file = workers.join(format!("{}.yaml", pids[0].0));
    let rc = nfx_proto::RunConfig::parse(
        &std::fs::read_to_string(&run_file).unwrap(),
        &run_file.display().to_string(),
    )
    .unwrap();
    assert_eq!(
        rc.kernel_stack,
        nfx_proto::run_config::KernelStack::External
    );
    let ports = [rc.ports.inside.iface, rc.ports.outside.iface];
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
    // The agent's standing tables keep the kernel off the device's ports, worker or not.
    for p in &ports {
        assert!(
            tables.contains(&format!(
                "table netdev {}",
                nfx_io::isolate::standing_table(p)
            )),
            "no standing isolation on {p}: {tables}"
        );
    }
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

const TUN_PREFIX: &str = "nfxtn-";
const TUN_BASE: &str = "237";
/// The inner payload's first bytes: found at `dst`, never on the tunnel's link.
const PLAINTEXT: &[u8] = b"NFX-TUNNEL-PLAINTEXT";

/// The processes running inside namespace `ns` whose command line contains `what`.
fn procs_in(ns: &str, what: &str) -> Vec<u32> {
    netns::pids(ns)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(what)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Frames of `pcap` matching the display filter, ESP-in-UDP decoded on `port`.
fn tshark_count(pcap: &Path, port: u16, filter: &str) -> usize {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args(["-d", &format!("udp.port=={port},udpencap"), "-Y", filter])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A service `id` from `src` to `dst` (UDP to `port`): an allow-all firewall, an
/// AES-GCM-128 tunnel h1 → h2, and `gbps` of throughput in its SLA.
fn tunnel_service(id: &str, src: &Endpoint, dst: &Endpoint, port: u16, gbps: f64) -> String {
    format!(
        "services:
  - id: {id}
    tenant: globex
    ingress: {}
    egress: {}
    selector: {{ src: {}/32, dst: {}/32, proto: udp, dport: {port} }}
    chain:
      - {{ function: firewall, config: {{ default: allow }} }}
    tunnel: {{ from: h1, to: h2, alg: aes-128-gcm }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: {gbps} }}
",
        src.host, dst.host, src.address, dst.address
    )
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn tunnel_service_carries_esp_between_two_hosts() {
    let mut bed = hostbed::testbed_up(TOKEN, TUN_PREFIX, TUN_BASE, 3);
    let (out, eps) = (bed.out.clone(), bed.eps.clone());
    let (src, dst) = (endpoint(&eps, "src"), endpoint(&eps, "dst"));
    let (_ctl, url) = hostbed::controller(&out, TOKEN);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());
    let port = 5300;
    let svc_file = out.join("vpn.yaml");
    std::fs::write(&svc_file, tunnel_service("vpn", &src, &dst, port, 1.0)).unwrap();
    deploy(&svc_file, &url);
    let ends = ["vpn-esp-h1", "vpn-esp-h2"];
    let state = |id: &str| c.get(&format!("/api/v1/instances/{id}")).unwrap().body;
    let up = eventually(Duration::from_secs(10), || {
        ends.iter()
            .all(|e| state(e)["state"]["detail"]["ike"] == "established")
    });
    assert!(
        up,
        "IKE never came up: {} {}",
        state(ends[0]),
        state(ends[1])
    );
    for (e, host) in ends.iter().zip(["h1", "h2"]) {
        let s = state(e);
        assert_eq!(s["host"], host, "{s}");
        assert_ne!(s["vnfm"], "simulated", "{s}");
        let d = &s["state"]["detail"];
        assert_eq!(d["vnfm"], "real", "{s}");
        assert_eq!(d["engine"], "lookaside", "{s}");
        assert!(d["queue_pair"].is_u64(), "{s}");
        assert!(
            d["device_kind"].as_str().unwrap().contains("modelled"),
            "{s}"
        );
        assert_eq!(
            procs_in(&format!("{TUN_PREFIX}{host}"), "accel serve").len(),
            1
        );
        let key = out.join(format!("agents/{host}/tunnels/ends/{e}/ike.psk"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", key.display());
    }
    let psk =
        std::fs::read_to_string(out.join("agents/h1/tunnels/ends/vpn-esp-h1/ike.psk")).unwrap();
    for f in [
        "controller.log",
        "state.db",
        "agents/h1.log",
        "agents/h2.log",
    ] {
        let text = String::from_utf8_lossy(&std::fs::read(out.join(f)).unwrap()).into_owned();
        assert!(!text.contains(psk.trim()), "the tunnel key is in {f}");
    }
    let underlay = state(ends[0])["state"]["detail"]["underlay"]["local"]
        .as_str()
        .unwrap()
        .to_string();
    let esp_port: u16 = underlay.rsplit(':').next().unwrap().parse().unwrap();

    // Bounded traffic: 2,000 datagrams in 1 s, captured on h2's link from h1 (UDP
    // segmentation off at h1 so the capture holds wire datagrams).
    let h1 = format!("{TUN_PREFIX}h1");
    let h2 = format!("{TUN_PREFIX}h2");
    netns::exec(
        &h1,
        &["ethtool", "-K", "to-h2", "tx-udp-segmentation", "off"],
        Duration::from_secs(5),
    )
    .unwrap();
    let pcap = out.join("link.pcap");
    let mut dump = Command::new("ip")
        .args(["netns", "exec", &h2, "tcpdump", "-i", "to-h1", "-U", "-w"])
        .arg(&pcap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 64];
    let _ = std::io::Read::read(dump.stderr.as_mut().unwrap(), &mut line);
    let (sent, got) = hostbed::paced_udp(
        (&src.netns, &dst.netns),
        (dst.address, port),
        (200, PLAINTEXT),
        (2000, 1.0),
    );
    assert!(sent > 500, "{sent}");
    let _ = Command::new("kill")
        .args(["-INT", &dump.id().to_string()])
        .status();
    let _ = dump.wait();
    assert_eq!((got.packets, got.matched), (sent, sent), "plaintext at dst");
    let esp = tshark_count(&pcap, esp_port, "esp");
    let plain = tshark_count(&pcap, esp_port, "frame contains \"NFX-TUNNEL-PLAINTEXT\"");
    // The capture is a witness, not a counter (tcpdump may miss frames on a loaded
    // host); the endpoints' counters below are exact.
    assert!(
        esp as u64 >= sent * 9 / 10,
        "{esp} ESP frames for {sent} datagrams"
    );
    assert_eq!(plain, 0, "plaintext on the tunnel's link");
    let tx = state(ends[0])["state"]["detail"]["tx_packets"]
        .as_u64()
        .unwrap();
    let rx = state(ends[1])["state"]["detail"]["rx_packets"]
        .as_u64()
        .unwrap();
    assert!(tx >= sent && rx >= sent, "tx {tx} rx {rx} sent {sent}");
    assert_eq!(state(ends[1])["state"]["detail"]["drops"]["auth_failed"], 0);

    // A second tunnel over the same devices without the throughput left: refused at plan.
    let mut more = nfx_control::client::load_services(&svc_file)
        .unwrap()
        .remove(0);
    more.id = "vpn2".into();
    more.sla.min_throughput_gbps = 1.5;
    let r = c.post("/api/v1/plan", &more).unwrap();
    let e = r.body["error"].as_str().unwrap_or_default().to_string();
    assert!(r.status == 409 && e.contains("no free queue pair"), "{r:?}");

    let tuns: Vec<String> = ends
        .iter()
        .map(|e| {
            state(e)["state"]["detail"]["tun"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    nfx(&["destroy", "vpn", "--url", &url]);
    assert!(instances(&c).is_empty());
    for ((host, ns), tun) in [("h1", &h1), ("h2", &h2)].into_iter().zip(&tuns) {
        assert!(
            procs_in(ns, "tunnel --config").is_empty(),
            "tunnel left on {host}"
        );
        assert!(
            procs_in(ns, "accel serve").is_empty(),
            "device left on {host}"
        );
        let rules = netns::exec(
            ns,
            &["ip", "rule", "show", "pref", "1000"],
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(rules.trim().is_empty(), "rules left on {host}: {rules}");
        let links = netns::exec(ns, &["ip", "-o", "link"], Duration::from_secs(5)).unwrap();
        assert!(!links.contains(tun.as_str()), "TUN {tun} left on {host}");
        let left: Vec<_> = std::fs::read_dir(out.join(format!("agents/{host}/tunnels/ends")))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "endpoint files left on {host}");
    }
    drop(_ctl);
    bed.down();
}

const SSM_PREFIX: &str = "nfxss-";
const SSM_BASE: &str = "239";

/// Sends `pps` datagrams a second for `secs` from src to dst:`port` while a sink counts
/// them at dst; returns (sent, received, matched).
fn udp_through(src: &Endpoint, dst: &Endpoint, port: u16, pps: u64, secs: u64) -> (u64, u64, u64) {
    let (sent, got) = hostbed::paced_udp(
        (&src.netns, &dst.netns),
        (dst.address, port),
        (1000, PLAINTEXT),
        (pps, secs as f64),
    );
    (sent, got.packets, got.matched)
}

/// Two tunnels h1 → h2 over accelerator devices the controller sees with ONE queue pair
/// each (the testbed's devices serve two; the descriptor offers one): the second tunnel
/// is placed on its CPU engine; the controller's SSM revokes the idle tunnel's queue pair
/// and, once the second is loaded, grants it to the loaded one, live, with no datagram lost at
/// dst across the switch; loading the first moves it back. Status, the operations
/// journal and the metrics show each grant and revoke.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn controller_ssm_moves_the_queue_pair_to_the_loaded_tunnel() {
    let mut bed = hostbed::testbed_up(TOKEN, SSM_PREFIX, SSM_BASE, 2);
    let (out, eps) = (bed.out.clone(), bed.eps.clone());
    let (src, dst) = (endpoint(&eps, "src"), endpoint(&eps, "dst"));
    let infra_file = out.join("infrastructure.yaml");
    let infra = std::fs::read_to_string(&infra_file).unwrap();
    assert_eq!(infra.matches("queue_pairs: 2").count(), 2, "{infra}");
    std::fs::write(
        &infra_file,
        infra.replace("queue_pairs: 2", "queue_pairs: 1"),
    )
    .unwrap();
    let ssm = [
        "--ssm",
        "--ssm-period-ms",
        "250",
        "--ssm-upper",
        "4",
        "--ssm-lower",
        "1.5",
        "--ssm-samples",
        "2",
        "--ssm-cooldown-ms",
        "1000",
    ];
    let (_ctl, url) = hostbed::controller_with(&out, TOKEN, &ssm);
    std::fs::write(out.join("api-token"), TOKEN).unwrap();
    let c = Client::new(&url, load_token(Some(&out.join("api-token"))).unwrap());
    for (id, port) in [("vpna", 5300), ("vpnb", 5301)] {
        let f = out.join(format!("{id}.yaml"));
        std::fs::write(&f, tunnel_service(id, &src, &dst, port, 0.5)).unwrap();
        deploy(&f, &url);
    }
    let state = |id: &str| c.get(&format!("/api/v1/instances/{id}")).unwrap().body;
    let engine = |id: &str| state(id)["state"]["detail"]["engine"].clone();
    let ends = ["vpna-esp-h1", "vpna-esp-h2", "vpnb-esp-h1", "vpnb-esp-h2"];
    let up = eventually(Duration::from_secs(10), || {
        ends.iter()
            .all(|e| state(e)["state"]["detail"]["ike"] == "established")
    });
    assert!(up, "IKE never came up: {}", state(ends[2]));
    // vpna was placed on the queue pairs (the SSM may already have taken them back from
    // it, idle); vpnb on CPU.
    for e in &ends[..2] {
        let s = state(e);
        let why = s["placement"]["reason"].as_str().unwrap();
        assert!(why.contains("one queue pair"), "{s}");
    }
    for e in &ends[2..] {
        let s = state(e);
        assert_eq!(s["state"]["detail"]["engine"], "cpu", "{s}");
        assert_eq!(s["spec"]["capacity"], 0.0, "{s}");
        assert!(
            s["placement"]["reason"]
                .as_str()
                .unwrap()
                .contains("CPU engine"),
            "{s}"
        );
    }

    // Load vpnb (on CPU) while vpna idles: the queue pairs go to vpnb mid-stream.
    let moved = |to: &[&str], from: &[&str]| {
        to.iter().all(|e| engine(e) == "lookaside") && from.iter().all(|e| engine(e) == "cpu")
    };
    let load = std::thread::scope(|s| {
        let h = s.spawn(|| udp_through(&src, &dst, 5301, 2_500, 6));
        let ok = eventually(Duration::from_secs(6), || moved(&ends[2..], &ends[..2]));
        (ok, h.join().unwrap())
    });
    let (ok, (sent, got, matched)) = load;
    assert!(
        ok,
        "the SSM did not move the queue pair to vpnb: {}",
        state(ends[2])
    );
    assert!(sent > 5_000, "{sent}");
    let detail = |e: &str| state(e)["state"]["detail"].clone();
    assert_eq!(
        (got, matched),
        (sent, sent),
        "datagrams at dst across the switch: {} {}",
        detail(ends[2]),
        detail(ends[3])
    );
    for e in &ends[2..] {
        assert_eq!(state(e)["spec"]["capacity"], 1.0);
        let g = hostbed::operations(&c, "grant", e);
        assert!(g.iter().any(|o| o["state"] == "COMPLETED"), "{g:?}");
    }
    for e in &ends[..2] {
        assert_eq!(state(e)["spec"]["capacity"], 0.0);
        let r = hostbed::operations(&c, "revoke", e);
        assert!(r.iter().any(|o| o["state"] == "COMPLETED"), "{r:?}");
    }

    // Then load vpna: the queue pairs come back to it.
    let load = std::thread::scope(|s| {
        let h = s.spawn(|| udp_through(&src, &dst, 5300, 2_500, 6));
        let ok = eventually(Duration::from_secs(6), || moved(&ends[..2], &ends[2..]));
        (ok, h.join().unwrap())
    });
    let (ok, (sent, got, matched)) = load;
    assert!(
        ok,
        "the SSM did not move the queue pair back: {}",
        state(ends[0])
    );
    assert_eq!(
        (got, matched),
        (sent, sent),
        "datagrams at dst across the switch: {} {}",
        detail(ends[0]),
        detail(ends[1])
    );
    let status = nfx(&["status", "--url", &url]);
    let line = |kind: &str, e: &str| {
        status
            .lines()
            .any(|l| l.contains(&format!(" {kind} ")) && l.contains(e) && l.contains("COMPLETED"))
    };
    for e in &ends {
        assert!(line("grant", e) && line("revoke", e), "{e}: {status}");
    }
    let m = match c.get("/metrics").unwrap().body {
        Value::String(t) => scrape::parse(&t),
        other => panic!("/metrics: {other}"),
    };
    let applied = |d: &str| {
        let key = format!("nfx_ssm_decisions_total{{decision=\"{d}\",outcome=\"applied\"}}");
        m.get(&key).copied().unwrap_or(0.0)
    };
    assert!(applied("grant") >= 4.0 && applied("revoke") >= 4.0, "{m:?}");
    drop(_ctl);
    bed.down();
}
