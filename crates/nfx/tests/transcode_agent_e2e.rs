//! The transcoding VNF deployed by the controller like any VNF, on the multi-host testbed
//! (`nfx testbed up --hosts 2`): a service whose chain is one `transcode` function is
//! placed on a host's software device, whose agent starts `nfx transcode` (and its
//! ffmpeg). The transcoder is transparent both ways: an ffmpeg test source in `src`
//! sends a few seconds of MPEG-2 video at 2 Mbit/s as MPEG-TS over UDP to `dst` itself,
//! the transcoder's host redirects it into the transcoder, and `dst` receives the H.264
//! stream the transcoder sends at 200 kbit/s with src's address as its source. Checks:
//! the capture is a valid H.264 stream (ffprobe) at a fraction of the source's bytes;
//! tcpdump at dst sees every packet of it come from src; the agent meters the
//! transcoder's process tree (CPU time > 0, energy > 0 with source `model`) in `nfx
//! status` and `/metrics`; destroying the service leaves no ffmpeg and no redirect or
//! source NAT rule behind. Needs root; own prefix and subnet; torn down on failure too.

mod common;
mod hostbed;
mod scrape;

use common::eventually;
use nfx_control::client::Client;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

const PREFIX: &str = "hx-";
const BASE: &str = "187";
const TOKEN: &str = "transcode-agent-e2e-token-0123456789";
/// UDP port the transcoder listens on (its host's addresses).
const IN_PORT: u16 = 5400;
/// UDP port at dst the source sends to and the transcoded stream arrives at (the
/// service's selector).
const OUT_PORT: u16 = 6400;
/// Seconds of video the source sends.
const SECONDS: u32 = 6;

fn nfx(args: &[&str]) -> String {
    hostbed::nfx(TOKEN, args)
}

/// The source addresses of the UDP packets to `port` in tcpdump's `-n -q -t` lines
/// (`eth0  In  IP 10.1.1.2.40000 > 10.1.2.2.6400: UDP, length 1316`).
fn udp_sources(tcpdump: &[u8], port: u16) -> Vec<String> {
    let to = format!(".{port}:");
    String::from_utf8_lossy(tcpdump)
        .lines()
        .filter_map(|l| {
            let (from, rest) = l.split_once("IP ")?.1.split_once(" > ")?;
            let dst = rest.split_whitespace().next()?;
            dst.ends_with(&to)
                .then(|| from.rsplit_once('.').map(|(a, _)| a.to_string()))?
        })
        .collect()
}

/// The `nfx_steer` table of host namespace `ns`.
fn steer_table(ns: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "nft",
            "list",
            "table",
            "inet",
            "nfx_steer",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `program ARGS` in namespace `ns` with a time limit.
fn in_ns(ns: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["20", "ip", "netns", "exec", ns, program])
        .args(args)
        .stdin(Stdio::null());
    c
}

/// The pids of ffmpeg processes whose command line names `needle`.
fn ffmpegs_naming(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            comm.trim_end() == "ffmpeg" && String::from_utf8_lossy(&cmd).contains(needle)
        })
        .collect()
}

/// The transcoder's row in the service's energy of `nfx status --json`.
fn transcoder_energy(url: &str) -> Option<Value> {
    let st: Value = serde_json::from_str(&nfx(&["status", "--json", "--url", url])).unwrap();
    st["energy"]["services"]
        .as_array()?
        .iter()
        .find(|s| s["service"] == "xc-svc")?["instances"]
        .as_array()?
        .first()
        .cloned()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn the_controller_deploys_a_metered_transcoder_that_leaves_nothing_behind() {
    let mut bed = hostbed::testbed_up(TOKEN, PREFIX, BASE, 2);
    let (src, dst) = (bed.endpoint("src"), bed.endpoint("dst"));
    let (ctl, url) = hostbed::controller(&bed.out, TOKEN);
    let file = bed.out.join("xc.yaml");
    std::fs::write(
        &file,
        format!(
            "services:
  - id: xc-svc
    tenant: acme
    ingress: {}
    egress: {}
    selector: {{ src: {}/32, dst: {}/32, proto: udp, dport: {OUT_PORT} }}
    chain:
      - function: transcode
        capacity_need: 1
        config: {{ listen_port: {IN_PORT}, output: {}:{OUT_PORT}, bitrate_kbps: 200 }}
    sla: {{ max_latency_us: 1000, min_throughput_gbps: 0.001 }}
",
            src.2, dst.2, src.1, dst.1, dst.1
        ),
    )
    .unwrap();
    nfx(&["deploy", file.to_str().unwrap(), "--url", &url]);
    let c = Client::new(&url, Some(TOKEN.to_string().into()));
    let row = hostbed::instances(&c)
        .into_iter()
        .find(|i| i["spec"]["function"] == "transcode")
        .expect("no transcode instance");
    let (id, host) = (
        row["spec"]["id"].as_str().unwrap().to_string(),
        row["host"].as_str().unwrap_or_default().to_string(),
    );
    let input = format!("udp://0.0.0.0:{IN_PORT}");
    assert_eq!(ffmpegs_naming(&input).len(), 1, "one encoder for {id}");
    // The source's host runs it (the ingress host meets the budget first); the source
    // addresses its stream to dst, as if there were no transcoder.
    assert_eq!(host, src.2, "{row}");
    let host_ns = format!("{PREFIX}{host}");
    let table = steer_table(&host_ns);
    let snat = format!("snat ip to {}", src.1);
    assert!(table.contains("redirect to :5400"), "{table}");
    assert!(table.contains(&snat), "{table}");
    let to = format!("udp://{}:{OUT_PORT}?pkt_size=1316", dst.1);

    let capture = bed.out.join("capture.ts");
    let cap_url = format!("udp://0.0.0.0:{OUT_PORT}?timeout=4000000");
    // The capture takes 2 s less media than the source sends (the transcoder's probing
    // delays its stream), so it ends on its own.
    let (cap_s, src_s) = ((SECONDS - 2).to_string(), SECONDS.to_string());
    // The source addresses of the stream's first 50 packets at dst (about 2 s of it).
    let port = OUT_PORT.to_string();
    let dump = in_ns(
        &dst.0,
        "tcpdump",
        &["-n", "-q", "-t", "-l", "-c", "50", "-i", "any"],
    )
    .args(["udp", "and", "dst", "port", &port])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut cap = in_ns(&dst.0, "ffmpeg", &["-hide_banner", "-loglevel", "error"])
        .args(["-i", &cap_url, "-c", "copy", "-t", &cap_s, "-y"])
        .arg(&capture)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let lavfi = "testsrc=size=320x240:rate=25";
    let source = in_ns(&src.0, "ffmpeg", &["-hide_banner", "-loglevel", "error"])
        .args(["-re", "-f", "lavfi", "-i", lavfi, "-t", &src_s])
        .args(["-c:v", "mpeg2video", "-b:v", "2M", "-minrate", "2M"])
        .args(["-maxrate", "2M", "-bufsize", "1M"])
        .args(["-progress", "pipe:1", "-f", "mpegts", &to])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    // While it streams: the agent meters the transcoder's processes (the busiest
    // interval kept: the encoder idles until the stream arrives).
    let mut metered: Option<Value> = None;
    let cores = |v: &Option<Value>| v.as_ref().and_then(|i| i["cpu_cores"].as_f64());
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(SECONDS as u64) {
        std::thread::sleep(Duration::from_millis(500));
        let now = transcoder_energy(&url);
        if cores(&now).unwrap_or(0.0) > cores(&metered).unwrap_or(0.0) {
            metered = now;
        }
    }
    let seen = metered.is_some();
    let source_out = source.wait_with_output().unwrap();
    let sent = common::ffmpeg_total_size(&source_out.stdout);
    assert!(cap.wait().unwrap().success(), "the capture failed");
    let dumped = dump.wait_with_output().unwrap();
    let sources = udp_sources(&dumped.stdout, OUT_PORT);
    let src_addr = src.1.to_string();
    assert!(sources.len() >= 50, "tcpdump at dst saw {sources:?}");
    assert!(
        sources.iter().all(|a| *a == src_addr),
        "the stream at dst must come from src {src_addr}: {sources:?}"
    );
    assert!(seen, "the transcoder's CPU was never metered");
    let m = metered.unwrap();
    assert_eq!(
        (m["instance"].as_str(), m["source"].as_str()),
        (Some(id.as_str()), Some("model")),
        "{m}"
    );
    assert!(m["energy_j"].as_f64().unwrap() > 0.0, "{m}");
    // An encoder at work: well above an idle process's CPU.
    assert!(m["cpu_cores"].as_f64().unwrap() > 0.02, "{m}");

    // The capture: a valid H.264 stream, at a fraction of what the source sent.
    let stream = common::first_stream(&capture);
    assert_eq!(stream["codec_name"], "h264", "{stream}");
    assert_eq!(stream["width"], 320, "{stream}");
    let got = std::fs::metadata(&capture).unwrap().len();
    eprintln!(
        "transcode_agent_e2e: source sent {sent} B to dst, dst received {got} B of H.264 in {} packets from {src_addr}; transcoder {:.3} cores, {:.2} W, {:.2} J ({})",
        sources.len(), m["cpu_cores"], m["power_w"], m["energy_j"], m["source"]
    );
    assert!(sent > 500_000, "the source sent {sent} B");
    assert!(
        got > 20_000 && got * 3 < sent,
        "dst received {got} B of {sent} B"
    );

    // /metrics carries the instance's energy with its source.
    let text = match c.get("/metrics").unwrap().body {
        Value::String(t) => scrape::parse(&t),
        other => panic!("/metrics: {other}"),
    };
    let key = format!("nfx_energy_joules_total{{host=\"{host}\",vnf=\"{id}\",source=\"model\"}}");
    assert!(text.get(&key).is_some_and(|j| *j > 0.0), "{key} missing");

    nfx(&["destroy", "xc-svc", "--url", &url]);
    assert!(
        eventually(Duration::from_secs(3), || ffmpegs_naming(&input).is_empty()),
        "an encoder outlived its instance: {:?}",
        ffmpegs_naming(&input)
    );
    let table = steer_table(&host_ns);
    assert!(
        !table.contains("redirect") && !table.contains("snat"),
        "rules outlived the transcoder: {table}"
    );
    drop(ctl);
    bed.down();
}
