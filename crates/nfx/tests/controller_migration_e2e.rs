//! The controller migrates under traffic, on the multi-host testbed: `nfx testbed up
//! --hosts 3`, `nfx up` on it, two services from YAML (a UDP one and a TCP one, each a
//! firewall that allows only its own traffic) whose firewalls run on the same device (the
//! TCP one migrated there if the placer chose another), so one worker classifies both. While a paced UDP stream (2,000 datagrams/s)
//! and an iperf3 TCP stream cross the testbed, `nfx migrate` moves the UDP service's
//! firewall to the host's other device, then the TCP service's. Checks: every datagram
//! sent arrives (0 lost: each service's frames only ever meet its own firewall, the new
//! worker classifies the service's frames before the host steers them to it, the old one
//! keeps them until its instance goes); iperf3 ends without a reset and carries data; the
//! new instances run on the other device and the old ones are gone. Then, with the two
//! firewalls on the host's two devices, `nfx deploy --optimize` moves one beside the
//! other (the offline optimum: one device instead of two) under both streams at once:
//! one completed migration, no datagram lost, iperf3 without a reset. Needs root; own
//! prefix and subnet; torn down on failure too.

mod hostbed;

use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::udpgen::{self, GenSpec, Sink};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

/// One testbed at a time: two 3-host testbeds with their controllers, iperf3 and paced
/// streams at once starve each other's workers on two cores, and both tests count every
/// datagram.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const PREFIX: &str = "nfxcm-";
const BASE: &str = "238";
const TOKEN: &str = "ctl-migration-e2e-token-0123456789";
const UDP_PORT: u16 = 9000;
const TCP_PORT: u16 = 5201;
/// Rate of the UDP stream. A loaded 2-core CI machine can starve a worker for tens of ms
/// while another worker process starts; what it then loses is set by its receive ring
/// (512 slots), not by the migration. At this rate the ring holds 250 ms, while a switch
/// that leaves no receiver for even a few ms still loses datagrams.
const PPS: u64 = 2_000;

/// Runs `nfx ARGS` with this test's token.
fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

/// The id and device of `service`'s only instance.
fn instance_of(url: &str, service: &str) -> (String, String) {
    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", url])).unwrap();
    let inst = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| {
            i["users"]
                .as_array()
                .is_some_and(|u| u.iter().any(|s| s == service))
        })
        .unwrap_or_else(|| panic!("no instance of {service}: {st}"));
    (
        inst["spec"]["id"].as_str().unwrap().into(),
        inst["spec"]["device"].as_str().unwrap().into(),
    )
}

/// An endpoint of endpoints.json: namespace, address, host.
type Endpoint = (String, Ipv4Addr, String);

/// A paced UDP stream of `flows` flows at [`PPS`] for `secs` from `src` to `dst`'s
/// [`UDP_PORT`], and the sink counting it there.
fn paced(
    src: &Endpoint,
    dst: &Endpoint,
    flows: u16,
    secs: u64,
) -> (Sink, JoinHandle<anyhow::Result<udpgen::GenReport>>) {
    let sink = Sink::start(&dst.0, UDP_PORT, b"").unwrap();
    let spec = GenSpec {
        ns: src.0.clone(),
        dst: dst.1,
        port: UDP_PORT,
        payload: 64,
        pattern: Vec::new(),
        flows,
        duration: Duration::from_secs(secs),
        batch: 1,
        pps: Some(PPS),
    };
    (sink, std::thread::spawn(move || udpgen::generate(spec)))
}

/// Stops the controller, tears the testbed down and checks that no process started
/// from its directory is left.
fn down_leaving_nothing(mut bed: hostbed::Testbed, ctl: hostbed::Ctl) {
    let out = bed.out.clone();
    drop(ctl);
    bed.down();
    let procs = Command::new("pgrep")
        .args(["-f", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        procs.stdout.is_empty(),
        "processes left: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
}

/// A firewall service from `src` to `dst` allowing only `proto`/`port`.
fn service(id: &str, proto: &str, port: u16, src: &Endpoint, dst: &Endpoint) -> String {
    format!(
        "  - id: {id}
    tenant: acme
    ingress: {}
    egress: {}
    selector: {{ src: {}/32, dst: {}/32, proto: {proto}, dport: {port} }}
    chain:
      - function: firewall
        capacity_need: 0.25
        config: {{ default: deny, rules: [{{ action: allow, proto: {proto}, dport: {port} }}] }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        src.2, dst.2, src.1, dst.1
    )
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn controller_migrations_under_traffic_lose_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 3);
    let out = bed.out.clone();
    let (src, dst) = (bed.endpoint("src"), bed.endpoint("dst"));
    let (ctl, url) = hostbed::controller(&out, TOKEN);

    for (id, proto, port) in [("udp-svc", "udp", UDP_PORT), ("tcp-svc", "tcp", TCP_PORT)] {
        let file = out.join(format!("{id}.yaml"));
        let yaml = format!("services:\n{}", service(id, proto, port, &src, &dst));
        std::fs::write(&file, yaml).unwrap();
        nfx(&["deploy", file.to_str().unwrap(), "--json", "--url", &url]);
    }
    let (udp_old, udp_dev) = instance_of(&url, "udp-svc");
    let (mut tcp_old, mut tcp_dev) = instance_of(&url, "tcp-svc");
    if tcp_dev != udp_dev {
        nfx(&["migrate", &tcp_old, "--device", &udp_dev, "--url", &url]);
        (tcp_old, tcp_dev) = instance_of(&url, "tcp-svc");
    }
    assert_eq!(udp_dev, tcp_dev, "one worker must run both firewalls");

    // Both migrations under the paced UDP stream: not one datagram lost.
    let (sink, gen) = paced(&src, &dst, 1, 3);
    std::thread::sleep(Duration::from_millis(1000));
    nfx(&["migrate", &udp_old, "--url", &url]);
    std::thread::sleep(Duration::from_millis(300));
    nfx(&["migrate", &tcp_old, "--url", &url]);
    let sent = gen.join().unwrap().unwrap().sent;
    std::thread::sleep(Duration::from_millis(300));
    let got = sink.finish().unwrap().packets;
    assert!(sent > 5_000, "the generator sent only {sent}");
    assert_eq!(
        got,
        sent,
        "datagrams lost across the migrations: {}",
        sent - got.min(sent)
    );
    let (udp_new, udp_dev2) = instance_of(&url, "udp-svc");
    let (tcp_new, tcp_dev2) = instance_of(&url, "tcp-svc");
    assert!(udp_new != udp_old && tcp_new != tcp_old);
    assert!(
        udp_dev2 != udp_dev && tcp_dev2 != tcp_dev,
        "{udp_dev2} {tcp_dev2}"
    );

    // A migration under iperf3 TCP: the connection survives (no reset) and carries data.
    let _srv = IperfServer::start(&dst.0, dst.1, TCP_PORT).unwrap();
    let tcp = {
        let spec = ClientSpec::tcp(&src.0, dst.1, TCP_PORT, 3, 1);
        std::thread::spawn(move || iperf::client(&spec))
    };
    std::thread::sleep(Duration::from_millis(1000));
    nfx(&["migrate", &tcp_new, "--url", &url]);
    let tcp = tcp
        .join()
        .unwrap()
        .expect("iperf3 across the migration (reset?)");
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    let (tcp_now, tcp_dev3) = instance_of(&url, "tcp-svc");
    assert_ne!(tcp_now, tcp_new);

    // The two firewalls now run on the host's two devices: `nfx deploy --optimize` puts
    // them on one (cost 2 → 1) with one migration, under both streams at once.
    assert_ne!(tcp_dev3, udp_dev2, "the optimum has nothing to move");
    let (sink, gen) = paced(&src, &dst, 1, 3);
    let tcp = {
        let spec = ClientSpec::tcp(&src.0, dst.1, TCP_PORT, 3, 1);
        std::thread::spawn(move || iperf::client(&spec))
    };
    std::thread::sleep(Duration::from_millis(1000));
    let run: Value =
        serde_json::from_str(&nfx(&["deploy", "--optimize", "--json", "--url", &url])).unwrap();
    let sent = gen.join().unwrap().unwrap().sent;
    let tcp = tcp
        .join()
        .unwrap()
        .expect("iperf3 across the optimization (reset?)");
    std::thread::sleep(Duration::from_millis(300));
    let got = sink.finish().unwrap().packets;
    assert!(run["error"].is_null(), "{run}");
    let ops = run["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{run}");
    assert_eq!(ops[0]["state"], "COMPLETED", "{run}");
    assert_eq!(got, sent, "datagrams lost across the optimization");
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");
    assert_eq!(
        instance_of(&url, "udp-svc").1,
        instance_of(&url, "tcp-svc").1,
        "{run}"
    );

    nfx(&["destroy", "udp-svc", "--url", &url]);
    nfx(&["destroy", "tcp-svc", "--url", &url]);
    down_leaving_nothing(bed, ctl);
}

/// Prefix and subnet base of the cross-host test's testbed.
const X_PREFIX: &str = "nfxcx-";
const X_BASE: &str = "249";
/// UDP flows of the cross-host test's paced stream (one source port each).
const X_FLOWS: u16 = 8;
/// Datagrams the move to another host may lose (of ~8,000, 0.5 %): the re-steer is
/// make-before-break and 0 were lost in every recorded run (docs/migration.md), but
/// unlike the handoff of one host nothing holds the frames inside the old worker when
/// the old host's route switches, so a starved worker may lose the few it holds then.
const X_LOSS_BOUND: u64 = 40;

/// `nfx status --instance ID --json`: the record with the VNFM's state.
fn instance_status(url: &str, id: &str) -> Value {
    let out = nfx(&["status", "--instance", id, "--json", "--url", url]);
    serde_json::from_str(out.lines().next().unwrap_or_default()).unwrap()
}

/// An elephant detector → firewall service between `src` and `dst` (one selector for
/// both protocols): the firewall admits UDP to `UDP_PORT` and TCP to `TCP_PORT` only.
fn two_function_service(src: &Endpoint, dst: &Endpoint) -> String {
    format!(
        "services:
  - id: x-svc
    tenant: acme
    ingress: {}
    egress: {}
    selector: {{ src: {}/32, dst: {}/32 }}
    chain:
      - function: elephant
        capacity_need: 0.25
        config: {{ min_bytes: 1000000 }}
      - function: firewall
        capacity_need: 0.25
        config: {{ default: deny, rules: [{{ action: allow, proto: udp, dport: {UDP_PORT} }}, {{ action: allow, proto: tcp, dport: {TCP_PORT} }}] }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 1 }}
",
        src.2, dst.2, src.1, dst.1
    )
}

/// A firewall migrates to another host under traffic: `nfx testbed up --hosts 3`, an
/// elephant detector → firewall service from `src` (h1) to `dst` (h3), both placed on
/// h1, 8 paced UDP flows and an iperf3 TCP connection opened before the move;
/// `nfx migrate FW --device D` with D a free software device of h2 (the path becomes
/// h1 → h2 → h3; a path back through h1 is refused at plan time). Checks: the operation completes with the final
/// copy journaled; the TCP connection survives (no reset) and carries data; the UDP
/// datagrams lost stay within [`X_LOSS_BOUND`]; the old instance is gone and the new
/// one runs on the other host holding the flows the old one tracked; then `nfx deploy
/// --optimize` puts the detector and the firewall on one device with one migration
/// across hosts; `nfx destroy` leaves no instance and no process.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_firewall_moves_to_another_host_with_its_flows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = hostbed::testbed_up(TOKEN, X_PREFIX, X_BASE, 3);
    let out = bed.out.clone();
    let (src, dst) = (bed.endpoint("src"), bed.endpoint("dst"));
    let (ctl, url) = hostbed::controller(&out, TOKEN);
    let file = out.join("x-svc.yaml");
    std::fs::write(&file, two_function_service(&src, &dst)).unwrap();
    nfx(&["deploy", file.to_str().unwrap(), "--json", "--url", &url]);

    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", &url])).unwrap();
    let insts = st["instances"].as_array().unwrap().clone();
    let fw = insts
        .iter()
        .find(|i| i["spec"]["function"] == "firewall")
        .unwrap_or_else(|| panic!("no firewall: {st}"));
    let fw_old = fw["spec"]["id"].as_str().unwrap().to_string();
    let fw_host = fw["host"].as_str().unwrap().to_string();
    let hosts: Vec<&str> = insts.iter().filter_map(|i| i["host"].as_str()).collect();
    assert_eq!(hosts, ["h1", "h1"], "{st}");
    let to_host = "h2";
    let used: Vec<&str> = insts
        .iter()
        .filter_map(|i| i["spec"]["device"].as_str())
        .collect();
    let target = [format!("{to_host}-sw0"), format!("{to_host}-sw1")]
        .into_iter()
        .find(|d| !used.contains(&d.as_str()))
        .unwrap();

    let _srv = IperfServer::start(&dst.0, dst.1, TCP_PORT).unwrap();
    let (sink, gen) = paced(&src, &dst, X_FLOWS, 4);
    let tcp = {
        let spec = ClientSpec::tcp(&src.0, dst.1, TCP_PORT, 4, 1);
        std::thread::spawn(move || iperf::client(&spec))
    };
    std::thread::sleep(Duration::from_millis(1500));
    let before = instance_status(&url, &fw_old);
    let old_flows = before["state"]["flows"].as_u64().unwrap_or(0);
    let t = std::time::Instant::now();
    let op = nfx(&[
        "migrate", &fw_old, "--device", &target, "--json", "--url", &url,
    ]);
    let took = t.elapsed();
    let sent = gen.join().unwrap().unwrap().sent;
    let tcp = tcp
        .join()
        .unwrap()
        .expect("iperf3 across the migration to another host (reset?)");
    std::thread::sleep(Duration::from_millis(300));
    let got = sink.finish().unwrap().packets;

    let op: Value = serde_json::from_str(op.lines().last().unwrap()).unwrap();
    assert_eq!(op["state"], "COMPLETED", "{op}");
    let labels: Vec<&str> = op["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["step"].as_str())
        .collect();
    assert!(labels.contains(&"copy_state"), "{labels:?}");
    let lost = sent - got.min(sent);
    eprintln!(
        "cross-host migration {fw_old} ({fw_host}) -> {target}: {:.0} ms; {lost} of {sent} \
         datagrams lost; old firewall tracked {old_flows} flows; TCP {} bytes",
        took.as_secs_f64() * 1e3,
        tcp.received_bytes
    );
    assert!(sent > 5_000, "the generator sent only {sent}");
    assert!(
        lost <= X_LOSS_BOUND,
        "{lost} of {sent} datagrams lost across the move to another host"
    );
    assert!(tcp.received_bytes > 1_000_000, "{tcp:?}");

    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", &url])).unwrap();
    let ids: Vec<&str> = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["spec"]["id"].as_str())
        .collect();
    assert!(
        !ids.contains(&fw_old.as_str()),
        "old firewall still recorded: {ids:?}"
    );
    let new = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["spec"]["function"] == "firewall")
        .unwrap();
    assert_eq!(new["spec"]["device"], target.as_str(), "{new}");
    assert_eq!(new["host"], to_host);
    let after = instance_status(&url, new["spec"]["id"].as_str().unwrap());
    let new_flows = after["state"]["flows"].as_u64().unwrap_or(0);
    // Every UDP flow and the iperf3 connections were tracked before the move and are
    // held by the new firewall (its own table), none opened there anew: the firewall
    // would have admitted the UDP flows, but the TCP data connection only mid-stream.
    assert!(
        old_flows > u64::from(X_FLOWS) && new_flows >= old_flows,
        "old tracked {old_flows}, new holds {new_flows}: {after}"
    );

    // The detector (h1) and the firewall (h2) now take two devices: `nfx deploy
    // --optimize` puts them on one with one migration across hosts (either moves: both
    // may, and h1 → h2 → h3 and h1 → h3 are valid paths within the bound).
    let run: Value =
        serde_json::from_str(&nfx(&["deploy", "--optimize", "--json", "--url", &url])).unwrap();
    assert!(run["error"].is_null(), "{run}");
    let moves = run["plan"]["migrations"].as_array().unwrap();
    assert_eq!(moves.len(), 1, "{run}");
    assert_ne!(moves[0]["host"], moves[0]["to_host"], "{run}");
    assert_eq!(run["operations"][0]["state"], "COMPLETED", "{run}");
    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", &url])).unwrap();
    let devs: Vec<&str> = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["spec"]["device"].as_str())
        .collect();
    assert_eq!(devs.len(), 2, "{st}");
    assert_eq!(devs[0], devs[1], "{run}");

    nfx(&["destroy", "x-svc", "--url", &url]);
    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", &url])).unwrap();
    assert!(st["instances"].as_array().unwrap().is_empty(), "{st}");
    down_leaving_nothing(bed, ctl);
}
