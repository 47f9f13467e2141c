//! configs/examples deploys for real, as shipped: `nfx testbed up --infra
//! configs/examples/infrastructure.yaml --allowed-dir /etc/nfx/dpi` builds its four hosts
//! (src — edge — cloud — dst) with their devices and one agent each, `nfx up` runs on
//! the written infrastructure, and each service of configs/examples/services.yaml is
//! deployed through the controller in turn, checked and destroyed:
//! - `web-acme` (firewall on edge's table tier → NAT → DPI): every instance real; a TCP
//!   request to port 80 is answered and the server sees the NAT's public address;
//!   iperf3 on port 443 carries data; port 22 is denied by the firewall; a request
//!   carrying the DPI drop signature of the pattern file gets no answer; `nfx status`
//!   shows its energy with its source and edge's worker with its CPU-wait bound;
//! - `vpn-globex` (firewall → ESP tunnel edge → cloud on the lookaside devices): IKE is
//!   established at both ends and every UDP datagram from src reaches dst.
//!
//! Then configs/examples/transcode.yaml (`video-acme`, its addresses moved from the
//! file's subnet base 200 to this test's, after checking they are src's and dst's there): the
//! transcoder runs on cloud's software device; ffmpeg in src sends 3 s of 320x180
//! MPEG-2 video at 2 Mbit/s as MPEG-TS over UDP to dst (the transcoder is transparent:
//! cloud redirects the stream into it); dst receives the re-encoded stream, every
//! datagram from src's address (cloud restores it on the transcoder's output): whole
//! MPEG-TS packets (sync byte 0x47 every 188 bytes), an H.264 stream of the same width
//! (ffprobe), at a fraction of the source's bitrate.
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
use nfx_model::Service;
use nfx_testbed::iperf::{self, ClientSpec, IperfServer};
use nfx_testbed::probe::{tcp_request, PeerEcho, TcpOutcome};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
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
fn deploy(c: &Client, svc: &Service) {
    let op = c.post("/api/v1/services", svc).unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let id = op.body["id"].as_str().unwrap();
    let done =
        serde_json::to_value(c.wait_operation(id, Duration::from_secs(30)).unwrap()).unwrap();
    assert_eq!(done["state"], "COMPLETED", "{}: {done}", svc.id);
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
    let done = serde_json::to_value(
        c.wait_operation(op.body["id"].as_str().unwrap(), Duration::from_secs(30))
            .unwrap(),
    )
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

fn web_acme(c: &Client, url: &str, svc: &Service, src: &Endpoint, dst: &Endpoint) {
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
    let nat_ip = svc.chain[1].config["snat"]["public_ip"]
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
    energy_shown(url);
    destroy(c, "web-acme");
}

/// `nfx status` shows web-acme's energy with its source and the CPU-wait bound of
/// edge's worker, labelled as a bound (the agents report every second).
fn energy_shown(url: &str) {
    let mut text = String::new();
    let shown = eventually(Duration::from_secs(3), || {
        text = hostbed::nfx(TOKEN, &["status", "--url", url]);
        let line = |f: &dyn Fn(&str) -> bool| text.lines().any(f);
        line(&|l| l.trim_start().starts_with("web-acme") && l.contains(" W  model"))
            && line(&|l| {
                l.contains("worker edge-sw ")
                    && l.contains("cpu-wait bound ≤ ")
                    && l.contains("(bound from the CPU limit, not measured)")
            })
    });
    assert!(shown, "nfx status:\n{text}");
}

fn vpn_globex(c: &Client, svc: &Service, src: &Endpoint, dst: &Endpoint) {
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
    let ids: Vec<&str> = services.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        ["web-acme", "vpn-globex"],
        "a new example service needs a check here"
    );
    // The hosts are run by agents, which forward only a service's selected traffic:
    // a service without a selector is refused at plan, before anything starts.
    let mut unselected = services[0].clone();
    unselected.selector = None;
    let refused = c.post("/api/v1/plan", &unselected).unwrap();
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        refused.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no selector")),
        "{refused:?}"
    );
    web_acme(&c, &url, &services[0], &src, &dst);
    vpn_globex(&c, &services[1], &src, &dst);
    video_acme(&c, &bed, &src, &dst);
    bed.down();
    eprintln!(
        "configs/examples end to end in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// The example's subnet base: the addresses configs/examples name are those of a testbed
/// built with `--subnet-base 200` (the default).
const FILE_BASE: &str = "10.200.";
/// Seconds of video the source sends.
const VIDEO_SECONDS: &str = "3";
/// Bitrate of the source's MPEG-2 stream, kbit/s.
const SOURCE_KBPS: u64 = 2000;

/// Datagrams received on UDP `port` in namespace `ns`, with their arrival times and
/// sources, until
/// `idle` passes without one after the first, or `limit` in all.
fn udp_capture(
    ns: &str,
    port: u16,
    idle: Duration,
    limit: Duration,
) -> JoinHandle<Vec<(Instant, SocketAddr, Vec<u8>)>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let ns = ns.to_string();
    let h = std::thread::spawn(move || {
        nfx_testbed::netns::enter(&ns).unwrap();
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)).unwrap();
        nfx_testbed::udpgen::set_rcvbuf(&s, 4 << 20);
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tx.send(()).unwrap();
        let (t0, mut got) = (Instant::now(), Vec::new());
        let mut buf = vec![0u8; 65536];
        while t0.elapsed() < limit {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                got.push((Instant::now(), from, buf[..n].to_vec()));
            } else if got.last().is_some_and(|(t, _, _)| t.elapsed() > idle) {
                break;
            }
        }
        got
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    h
}

/// The MPEG-TS packets of `datagram`: its length is a multiple of 188 bytes and each
/// packet starts with the sync byte 0x47 (None otherwise).
fn ts_packets(datagram: &[u8]) -> Option<usize> {
    let whole = !datagram.is_empty() && datagram.len().is_multiple_of(188);
    (whole && datagram.chunks(188).all(|p| p[0] == 0x47)).then_some(datagram.len() / 188)
}

/// configs/examples/transcode.yaml with its addresses moved to this test's subnet base,
/// after checking that the file's output and selector name dst there, and its selector
/// src.
fn video_service(bed: &hostbed::Testbed, src: &Endpoint, dst: &Endpoint) -> Service {
    let text = std::fs::read_to_string(repo().join("configs/examples/transcode.yaml")).unwrap();
    let ours = format!("10.{BASE}.");
    let at_file_base = |e: &Endpoint| e.address.to_string().replacen(&ours, FILE_BASE, 1);
    for named in [
        format!("output: {}:", at_file_base(dst)),
        format!("dst: {}/32", at_file_base(dst)),
        format!("src: {}/32", at_file_base(src)),
    ] {
        assert!(
            text.contains(&named),
            "transcode.yaml does not name dst as {named}"
        );
    }
    let file = bed.out.join("transcode.yaml");
    std::fs::write(&file, text.replace(FILE_BASE, &ours)).unwrap();
    let mut svcs = load_services(&file).unwrap();
    assert_eq!(svcs.len(), 1);
    svcs.remove(0)
}

fn video_acme(c: &Client, bed: &hostbed::Testbed, src: &Endpoint, dst: &Endpoint) {
    let t0 = Instant::now();
    let svc = video_service(bed, src, dst);
    let cfg = &svc.chain[0].config;
    let kbps = cfg["bitrate_kbps"].as_u64().unwrap();
    let out_port: u16 = cfg["output"]
        .as_str()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    deploy(c, &svc);
    let placed = real_instances(c, "video-acme");
    assert!(
        matches!(&placed[..], [(_, f, d)] if f == "transcode" && d == "cloud-sw"),
        "the transcoder runs on cloud's software device: {placed:?}"
    );
    // To dst, as if there were no transcoder: cloud takes the stream in.
    let to = format!("udp://{}:{out_port}?pkt_size=1316", dst.address);
    let capture = udp_capture(
        &dst.netns,
        out_port,
        Duration::from_millis(1500),
        Duration::from_secs(10),
    );
    let rate = format!("{SOURCE_KBPS}k");
    let source = Command::new("timeout")
        .args([
            "15",
            "ip",
            "netns",
            "exec",
            &src.netns,
            "ffmpeg",
            "-hide_banner",
        ])
        .args(["-loglevel", "error", "-nostdin", "-re", "-f", "lavfi"])
        .args(["-i", "testsrc=size=320x180:rate=25", "-t", VIDEO_SECONDS])
        .args([
            "-c:v",
            "mpeg2video",
            "-b:v",
            &rate,
            "-minrate",
            &rate,
            "-maxrate",
            &rate,
        ])
        .args(["-bufsize", "1M", "-progress", "pipe:1", "-f", "mpegts", &to])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(source.status.success(), "the source failed: {source:?}");
    let sent = common::ffmpeg_total_size(&source.stdout);
    let got = capture.join().unwrap();
    let bad = got
        .iter()
        .filter(|(_, _, d)| ts_packets(d).is_none())
        .count();
    assert!(
        got.len() > 20 && bad == 0,
        "{} datagrams at dst, {bad} not MPEG-TS",
        got.len()
    );
    let froms: BTreeSet<IpAddr> = got.iter().map(|(_, from, _)| from.ip()).collect();
    assert_eq!(
        froms,
        BTreeSet::from([IpAddr::V4(src.address)]),
        "the transcoded stream reaches dst from src's address"
    );
    let ts: usize = got.iter().filter_map(|(_, _, d)| ts_packets(d)).sum();
    let bytes: Vec<u8> = got.iter().flat_map(|(_, _, d)| d.iter().copied()).collect();
    let span = got.last().unwrap().0 - got[0].0;
    let out_kbps = bytes.len() as f64 * 8.0 / span.as_secs_f64().max(0.1) / 1000.0;
    let file = bed.out.join("video-acme.ts");
    std::fs::write(&file, &bytes).unwrap();
    let stream = common::first_stream(&file);
    assert_eq!(stream["codec_name"], "h264", "{stream}");
    assert_eq!(stream["width"], 320, "{stream}");
    eprintln!(
        "video-acme: src sent {sent} B of MPEG-2 ({SOURCE_KBPS} kbit/s); dst received {} B of H.264 in {ts} TS packets over {:.1} s, {out_kbps:.0} kbit/s (asked {kbps})",
        bytes.len(),
        span.as_secs_f64()
    );
    assert!(sent > 300_000, "the source sent {sent} B");
    assert!(
        (bytes.len() as u64) * 3 < sent && out_kbps * 3.0 < SOURCE_KBPS as f64,
        "dst received {} B ({out_kbps:.0} kbit/s) of {sent} B",
        bytes.len()
    );
    destroy(c, "video-acme");
    eprintln!("video-acme in {:.1} s", t0.elapsed().as_secs_f64());
}
