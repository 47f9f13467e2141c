//! End-to-end tests of `nfx tunnel`: two endpoints in two network namespaces joined by a
//! veth; ping and TCP through the TUNs, tshark decrypts the captured ESP-in-UDP with the
//! SA keys (and cannot with a wrong key), a UDP sequence stream survives 20 live engine
//! switches and a lookaside device killed mid-stream. SAs come from IKEv2 (PSK) except
//! where a test needs keys it knows (tshark) or tests the static-key mode; captures of
//! the underlay show that no (SPI, sequence number) pair, hence no AES-GCM nonce, is
//! ever sent twice: not across engine switches, rekeys, or restarts of an endpoint.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nfx_testbed::udpgen::set_rcvbuf;
use nfx_tunnel::sys::enter_netns;

const KEY_AB: &str = "0x00112233445566778899aabbccddeeff01020304";
const KEY_BA: &str = "0xffeeddccbbaa99887766554433221100a0b0c0d0";

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run command")
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// How the endpoints get their SAs.
#[derive(Clone, Copy)]
enum Keys<'a> {
    /// Typed-in keys (`insecure_static_keys`, sequence state in the test directory).
    Static(&'a str),
    /// IKEv2 with a PSK: ESP transform and extra `ike:` settings (`k: v, ...`).
    Ike(&'a str, &'a str),
}

/// Two namespaces `<p>a`, `<p>b` joined by veth `va`–`vb` (10.<n>.0.1/.2); removed on drop.
struct Pair {
    a: String,
    b: String,
    n: u8,
    dir: PathBuf,
    procs: Vec<Child>,
    /// The endpoints' processes, side 1 then side 2.
    ends: [Option<Child>; 2],
}

impl Pair {
    fn new(tag: &str, n: u8) -> Pair {
        let p = format!("nt{}{tag}", std::process::id() % 10000);
        let pair = Pair {
            a: format!("{p}a"),
            b: format!("{p}b"),
            n,
            dir: std::env::temp_dir().join(format!("{p}-tunnel")),
            procs: Vec::new(),
            ends: [None, None],
        };
        std::fs::create_dir_all(&pair.dir).unwrap();
        for ns in [&pair.a, &pair.b] {
            let _ = sh(&["ip", "netns", "del", ns]);
            ok(&["ip", "netns", "add", ns]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        ok(&[
            "ip", "-n", &pair.a, "link", "add", "va", "type", "veth", "peer", "name", "vb",
            "netns", &pair.b,
        ]);
        for (ns, dev, host) in [(&pair.a, "va", 1), (&pair.b, "vb", 2)] {
            ok(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("10.{n}.0.{host}/24"),
                "dev",
                dev,
            ]);
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        pair
    }

    fn inner(&self, host: u8) -> String {
        format!("192.168.{}.{host}", self.n)
    }

    fn em_port(&self, side: u8) -> u16 {
        20000 + (std::process::id() % 20000) as u16 + self.n as u16 * 4 + side as u16
    }

    /// Writes endpoint `side`'s configuration (`extra`: more top-level lines).
    fn write_config(&self, side: u8, keys: Keys<'_>, extra: &str) -> PathBuf {
        let (ns, peer, n) = (if side == 1 { &self.a } else { &self.b }, 3 - side, self.n);
        let keying = match keys {
            Keys::Static(alg) => {
                let (out_spi, in_spi, out_key, in_key) = if side == 1 {
                    (0x1001, 0x1002, KEY_AB, KEY_BA)
                } else {
                    (0x1002, 0x1001, KEY_BA, KEY_AB)
                };
                format!(
                    "alg: {alg}\ninsecure_static_keys: true\nseq_state: t{side}.seq\n\
                     outbound: {{spi: {out_spi}, key: '{out_key}'}}\ninbound: {{spi: {in_spi}, key: '{in_key}'}}\n"
                )
            }
            Keys::Ike(alg, ike_extra) => {
                let psk = self.dir.join("tunnel.psk");
                std::fs::write(&psk, "nfx-e2e-test-pre-shared-key").unwrap();
                std::fs::set_permissions(&psk, std::fs::Permissions::from_mode(0o600)).unwrap();
                let role = if side == 1 { "initiator" } else { "responder" };
                format!(
                    "ike: {{role: {role}, local_id: t{side}.nfx, remote_id: t{peer}.nfx, psk_file: tunnel.psk, \
                     esp: [{alg}], retransmit_ms: 100, restart_s: 0.2{sep}{ike_extra}}}\n",
                    sep = if ike_extra.is_empty() { "" } else { ", " }
                )
            }
        };
        std::fs::write(self.dir.join("em-token"), EM_TOKEN).unwrap();
        let cfg = format!(
            "name: t{side}\nnetns: {ns}\nem_listen: '127.0.0.1:{em}'\nem_token_file: em-token\nengine: cpu\n\
             tun: {{name: esp{n}, address: 192.168.{n}.{side}/24}}\n\
             underlay: {{local: '10.{n}.0.{side}:4500', peer: '10.{n}.0.{peer}:4500'}}\n{keying}{extra}",
            em = self.em_port(side)
        );
        let path = self.dir.join(format!("t{side}.yaml"));
        std::fs::write(&path, cfg).unwrap();
        path
    }

    /// Starts (or restarts) endpoint `side` and waits until it is ready.
    fn start_side(&mut self, nfx: &str, side: u8, keys: Keys<'_>, extra: &str) {
        let path = self.write_config(side, keys, extra);
        let child = Command::new(nfx)
            .args([
                "tunnel",
                "--config",
                path.to_str().unwrap(),
                "--duration",
                "60",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.ends[side as usize - 1] = Some(child);
        // The EM answers before the worker has its TUN device and socket: wait for
        // `ready` (TUN up with its address, underlay bound).
        self.wait_status(side, Duration::from_secs(20), |st| st["ready"] == true);
    }

    /// Waits until endpoint `side`'s status satisfies `ok`.
    fn wait_status(&self, side: u8, limit: Duration, ok: impl Fn(&serde_json::Value) -> bool) {
        let t0 = Instant::now();
        loop {
            if let Ok((200, st)) = http(self.em_port(side), "GET", "/status", "") {
                if ok(&st) {
                    return;
                }
                assert!(
                    t0.elapsed() < limit,
                    "endpoint {side}: condition not met: {st}"
                );
            }
            assert!(t0.elapsed() < limit, "endpoint {side} does not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts both endpoints (A's config gets `extra_a` lines); with IKE, waits until
    /// both have a CHILD_SA.
    fn start(&mut self, nfx: &str, keys: Keys<'_>, extra_a: &str) {
        self.start_side(nfx, 1, keys, extra_a);
        self.start_side(nfx, 2, keys, "");
        if let Keys::Ike(..) = keys {
            for side in [1, 2] {
                self.wait_status(side, Duration::from_secs(20), |st| {
                    st["ike"]["child"].is_object()
                });
            }
        }
    }

    /// Kills endpoint `side` (SIGKILL: no chance to clean up, as a crash).
    fn kill_side(&mut self, side: u8) {
        if let Some(mut c) = self.ends[side as usize - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Pair {
    /// Where a stream's packets may have gone: the interfaces' and UDP's drop counters
    /// in both namespaces and both endpoints' drop counts (printed when a stream has gaps).
    fn drop_report(&self) -> String {
        let mut r = String::new();
        for ns in [&self.a, &self.b] {
            let link = sh(&["ip", "-n", ns, "-s", "link"]);
            let udp = sh(&[
                "ip",
                "netns",
                "exec",
                ns,
                "nstat",
                "-az",
                "UdpInErrors",
                "UdpRcvbufErrors",
                "UdpSndbufErrors",
            ]);
            r += &format!(
                "--- {ns}\n{}{}",
                String::from_utf8_lossy(&link.stdout),
                String::from_utf8_lossy(&udp.stdout)
            );
        }
        for side in [1, 2] {
            if let Ok((_, st)) = http(self.em_port(side), "GET", "/status", "") {
                r += &format!("--- endpoint {side} drops: {}\n", st["drops"]);
            }
        }
        r
    }

    /// Asserts that `got` is exactly `0..sent`, in order, with a drop report if not.
    fn assert_complete(&self, sent: u32, got: &[u32]) {
        let expect: Vec<u32> = (0..sent).collect();
        assert!(
            got == expect,
            "sent {sent}, got {} (first gap at {:?})\n{}",
            got.len(),
            got.iter().enumerate().find(|(i, &s)| *i as u32 != s),
            self.drop_report()
        );
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in self.procs.iter_mut().chain(self.ends.iter_mut().flatten()) {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.a, &self.b] {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The endpoints' element-manager bearer token.
const EM_TOKEN: &str = "nfx-e2e-em-token";

/// One HTTP/1.1 request to the EM on 127.0.0.1:port with the token; returns (status,
/// JSON body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, serde_json::Value)> {
    http_as(port, Some(EM_TOKEN), method, path, body)
}

/// One HTTP/1.1 request to the EM, with `token` if any.
fn http_as(
    port: u16,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, serde_json::Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut r = String::new();
    s.read_to_string(&mut r)?;
    let code = r.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let json = r.split("\r\n\r\n").nth(1).unwrap_or("null");
    Ok((
        code,
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    ))
}

fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_netns(&ns).unwrap();
        f()
    })
}

fn nfx() -> &'static str {
    env!("CARGO_BIN_EXE_nfx")
}

/// Sends numbered UDP datagrams A → B until `until` is set (plus 300 more) and returns
/// what B received, in arrival order.
fn udp_stream(p: &Pair, until: Arc<AtomicBool>) -> (u32, Vec<u32>) {
    let dst = format!("{}:5555", p.inner(2));
    let rx = in_ns(&p.b, {
        let bind = format!("{}:5555", p.inner(2));
        move || {
            let s = UdpSocket::bind(bind).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            // The test is root: a receive buffer beyond rmem_max (208 KiB, ~20 ms of
            // this stream) so that a descheduled test thread on a busy machine does not
            // drop what the tunnel delivered.
            set_rcvbuf(&s, 16 << 20);
            let mut got = Vec::new();
            let mut b = [0u8; 256];
            while let Ok(n) = s.recv(&mut b) {
                if n >= 4 {
                    got.push(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                }
            }
            got
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let tx = in_ns(&p.a, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let mut seq = 0u32;
        let mut extra = 0;
        let t0 = Instant::now();
        while extra < 300 && t0.elapsed() < Duration::from_secs(30) {
            let mut m = [0u8; 200];
            m[..4].copy_from_slice(&seq.to_be_bytes());
            s.send_to(&m, &dst).unwrap();
            seq += 1;
            if until.load(Ordering::SeqCst) && seq > 500 {
                extra += 1;
            }
            if seq.is_multiple_of(10) {
                // Pace the stream so kernel socket queues never overflow.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        seq
    });
    let sent = tx.join().unwrap();
    (sent, rx.join().unwrap())
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn ping_tcp_and_tshark_decrypt() {
    let mut p = Pair::new("p", 151);
    // The endpoints send UDP GSO super-datagrams; the capture turns the veths' UDP
    // segmentation off so the kernel cuts them before the capture point, as a NIC
    // would. nfx's own offload stays on.
    let mut cap = Capture::start(&p);
    let pcap = cap.path.clone();
    p.start(nfx(), Keys::Static("aes-128-gcm"), "");
    let o = sh(&[
        "ip",
        "netns",
        "exec",
        &p.a,
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        &p.inner(2),
    ]);
    assert!(
        o.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    // TCP: 2 MB with a known pattern from A to B through the tunnel.
    let bind = format!("{}:5001", p.inner(2));
    let server = in_ns(&p.b, move || {
        let l = TcpListener::bind(bind).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        v
    });
    std::thread::sleep(Duration::from_millis(200));
    let dst = format!("{}:5001", p.inner(2));
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = data.clone();
    in_ns(&p.a, move || {
        let mut s = TcpStream::connect(dst).unwrap();
        s.write_all(&sent).unwrap();
    })
    .join()
    .unwrap();
    assert!(
        server.join().unwrap() == data,
        "TCP data through the tunnel differs"
    );
    let (_, st) = http(p.em_port(2), "GET", "/status", "").unwrap();
    assert_eq!(st["drops"]["auth_failed"], 0);
    assert!(st["rx_packets"].as_u64().unwrap() > 100, "{st}");
    // The transfer went through the offload path: GSO sends, GRO receives and TCP
    // segments joined again before the TUN.
    assert_eq!(st["offload"]["udp_gso"], true, "{st}");
    assert!(st["offload"]["coalesced"].as_u64().unwrap() > 0, "{st}");
    assert!(st["offload"]["scattered"].as_u64().unwrap() > 0, "{st}");
    let (_, sa) = http(p.em_port(1), "GET", "/status", "").unwrap();
    assert!(sa["offload"]["tun_scattered"].as_u64().unwrap() > 0, "{sa}");
    cap.stop();
    let decode = |key: &str| -> String {
        let uat = |src: &str, dst: &str, spi: &str, key: &str| {
            format!("uat:esp_sa:\"IPv4\",\"{src}\",\"{dst}\",\"{spi}\",\"AES-GCM with 16 octet ICV [RFC4106]\",\"{key}\",\"NULL\",\"\"")
        };
        let n = p.n;
        let o = sh(&[
            "tshark",
            "-n",
            "-r",
            pcap.to_str().unwrap(),
            "-o",
            "esp.enable_encryption_decode:TRUE",
            "-o",
            &uat(
                &format!("10.{n}.0.1"),
                &format!("10.{n}.0.2"),
                "0x00001001",
                key,
            ),
            "-o",
            &uat(
                &format!("10.{n}.0.2"),
                &format!("10.{n}.0.1"),
                "0x00001002",
                KEY_BA,
            ),
            "-d",
            "udp.port==4500,udpencap",
            "-Y",
            "icmp",
            "-T",
            "fields",
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "icmp.type",
        ]);
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let good = decode(KEY_AB);
    let want = format!("10.{0}.0.1,192.168.{0}.1\t10.{0}.0.2,192.168.{0}.2\t8", p.n);
    assert!(
        good.lines().filter(|l| *l == want).count() >= 3,
        "tshark with the right key:\n{good}"
    );
    let bad = decode("0x00000000000000000000000000000000000000ff");
    assert!(
        !bad.lines().any(|l| l.ends_with("\t8")),
        "tshark decoded with a wrong key:\n{bad}"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn udp_stream_survives_20_engine_switches() {
    let mut p = Pair::new("s", 152);
    let cap = Capture::start(&p);
    p.start(nfx(), Keys::Ike("aes-128-gcm", ""), "");
    let done = Arc::new(AtomicBool::new(false));
    let port = p.em_port(1);
    let flag = Arc::clone(&done);
    let switcher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut us = Vec::new();
        for i in 0..20 {
            let e = if i % 2 == 0 { "soft" } else { "cpu" };
            let (code, v) =
                http(port, "POST", "/engine", &format!("{{\"engine\":\"{e}\"}}")).unwrap();
            assert_eq!((code, v["engine"].as_str()), (200, Some(e)), "{v}");
            us.push(v["switch_us"].as_u64().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
        flag.store(true, Ordering::SeqCst);
        us
    });
    let (sent, got) = udp_stream(&p, done);
    let us = switcher.join().unwrap();
    p.assert_complete(sent, &got);
    let (_, st) = http(port, "GET", "/status", "").unwrap();
    assert_eq!(st["engine_switches"], 20, "{st}");
    eprintln!("switch_us: {us:?}");
    // One sequence space across the engines: no (SPI, sequence) sent twice.
    let esp = cap.finish();
    assert!(
        esp.len() as u32 >= sent,
        "captured {} ESP packets",
        esp.len()
    );
    assert_no_repeats(&esp);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn lookaside_device_killed_mid_stream_loses_nothing() {
    let mut p = Pair::new("l", 153);
    // A runs the per-packet path, B the offload path: they interoperate.
    let sock = p.dir.join("accel.sock");
    let mut dev = Command::new(nfx())
        .args([
            "accel",
            "serve",
            "--queue-pairs",
            "1",
            "--socket",
            sock.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !Path::new(&sock).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    p.start(nfx(), Keys::Ike("aes-128-gcm", ""), "offload: false\n");
    let port = p.em_port(1);
    let body = format!("{{\"device\":\"{}\"}}", sock.display());
    for token in [None, Some("not-the-token")] {
        let (code, v) = http_as(port, token, "POST", "/accelerator/use", &body).unwrap();
        assert_eq!(code, 401, "{v}");
    }
    let (code, v) = http(port, "POST", "/accelerator/use", &body).unwrap();
    assert_eq!(
        (code, v["engine"].as_str()),
        (200, Some("lookaside")),
        "{v}"
    );
    let (code, v) = http(p.em_port(2), "POST", "/accelerator/use", &body).unwrap();
    assert_eq!(
        (code, v["error"].as_str()),
        (409, Some("no free queue pair")),
        "{v}"
    );
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let _ = dev.kill();
        let _ = dev.wait();
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::SeqCst);
    });
    let (sent, got) = udp_stream(&p, done);
    killer.join().unwrap();
    p.assert_complete(sent, &got);
    let (_, st) = http(port, "GET", "/status", "").unwrap();
    assert_eq!(st["failovers"], 1, "{st}");
    assert_eq!(st["engine"], "cpu", "the fallback engine is reported: {st}");
}

/// Kills the lookaside device process when the test ends, however it ends.
struct DeviceGuard(Child);

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn udp_stream_survives_20_lookaside_grants_and_releases() {
    let mut p = Pair::new("g", 154);
    let sock = p.dir.join("accel.sock");
    let _dev = DeviceGuard(
        Command::new(nfx())
            .args([
                "accel",
                "serve",
                "--queue-pairs",
                "1",
                "--socket",
                sock.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !Path::new(&sock).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The pipelined lookaside path (batches left in flight between rounds) must hand
    // every packet over in order at each grant and release.
    p.start(nfx(), Keys::Ike("aes-128-gcm", ""), "");
    let done = Arc::new(AtomicBool::new(false));
    let port = p.em_port(1);
    let body = format!("{{\"device\":\"{}\"}}", sock.display());
    let flag = Arc::clone(&done);
    let switcher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..20 {
            let (code, v) = if i % 2 == 0 {
                http(port, "POST", "/accelerator/use", &body).unwrap()
            } else {
                http(port, "POST", "/accelerator/release", "").unwrap()
            };
            let want = if i % 2 == 0 { "lookaside" } else { "cpu" };
            assert_eq!((code, v["engine"].as_str()), (200, Some(want)), "{v}");
            std::thread::sleep(Duration::from_millis(30));
        }
        flag.store(true, Ordering::SeqCst);
    });
    let (sent, got) = udp_stream(&p, done);
    switcher.join().unwrap();
    p.assert_complete(sent, &got);
    let (_, st) = http(port, "GET", "/status", "").unwrap();
    assert_eq!(st["engine_switches"], 20, "{st}");
    assert_eq!(st["failovers"], 0, "{st}");
}

/// One captured ESP-in-UDP packet's header.
#[derive(Debug, Clone, Copy)]
struct Esp {
    /// Sent by endpoint 1 (A).
    from_a: bool,
    spi: u32,
    seq: u32,
    /// The explicit IV (nfx: the 64-bit sequence number).
    iv: u64,
}

/// tcpdump on B's veth (both directions), with the veths' UDP segmentation offload
/// off so the capture holds wire datagrams, as a NIC would send them.
struct Capture {
    proc: Child,
    path: PathBuf,
    a_ip: [u8; 4],
}

impl Capture {
    fn start(p: &Pair) -> Capture {
        for (ns, dev) in [(&p.a, "va"), (&p.b, "vb")] {
            ok(&[
                "ip",
                "netns",
                "exec",
                ns,
                "ethtool",
                "-K",
                dev,
                "tx-udp-segmentation",
                "off",
            ]);
        }
        let path = p.dir.join(format!("esp{}.pcap", p.n));
        let mut proc = Command::new("ip")
            .args([
                "netns", "exec", &p.b, "tcpdump", "-i", "vb", "-U", "-B", "16384", "-w",
            ])
            .arg(&path)
            .args(["udp", "port", "4500"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // tcpdump says "listening on ..." once it captures.
        let mut line = [0u8; 64];
        let _ = proc.stderr.as_mut().unwrap().read(&mut line);
        Capture {
            proc,
            path,
            a_ip: [10, p.n, 0, 1],
        }
    }

    /// Stops tcpdump (SIGINT, so it flushes the file).
    fn stop(&mut self) {
        let _ = sh(&["kill", "-INT", &self.proc.id().to_string()]);
        let _ = self.proc.wait();
    }

    /// Stops and returns the ESP headers captured, in order (IKE and keepalives left out).
    fn finish(mut self) -> Vec<Esp> {
        self.stop();
        let data = std::fs::read(&self.path).unwrap();
        parse_pcap(&data, self.a_ip)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// The ESP headers in a classic pcap file of Ethernet frames.
fn parse_pcap(data: &[u8], a_ip: [u8; 4]) -> Vec<Esp> {
    let u32le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    assert_eq!(
        u32le(&data[..4]),
        0xa1b2c3d4,
        "pcap magic (microseconds, little endian)"
    );
    assert_eq!(u32le(&data[20..24]), 1, "Ethernet link type");
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= data.len() {
        let incl = u32le(&data[off + 8..off + 12]) as usize;
        let f = &data[off + 16..(off + 16 + incl).min(data.len())];
        off += 16 + incl;
        if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &f[14..];
        let ihl = (ip[0] & 0x0f) as usize * 4;
        if ip[9] != 17 || ip.len() < ihl + 8 + 16 {
            continue;
        }
        let esp = &ip[ihl + 8..];
        if esp[..4] == [0, 0, 0, 0] {
            continue; // IKE (non-ESP marker)
        }
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        out.push(Esp {
            from_a: ip[12..16] == a_ip,
            spi: be32(&esp[..4]),
            seq: be32(&esp[4..8]),
            iv: u64::from_be_bytes(esp[8..16].try_into().unwrap()),
        });
    }
    out
}

/// No (SPI, sequence number) and no (SPI, IV) pair occurs twice: the AEAD nonce
/// (salt ‖ IV) never repeats under a key.
fn assert_no_repeats(esp: &[Esp]) {
    let mut seqs = HashSet::new();
    let mut ivs = HashSet::new();
    for e in esp {
        assert!(
            seqs.insert((e.spi, e.seq)),
            "(SPI {:#x}, sequence {}) sent twice",
            e.spi,
            e.seq
        );
        assert!(
            ivs.insert((e.spi, e.iv)),
            "(SPI {:#x}, IV {:#x}) sent twice",
            e.spi,
            e.iv
        );
    }
}

/// Sends numbered UDP datagrams A → B for `dur` at ~5,000/s, ignoring errors (the
/// tunnel may be down for a while); returns how many were sent.
fn blast(p: &Pair, dur: Duration) -> std::thread::JoinHandle<u32> {
    let dst = format!("{}:5556", p.inner(2));
    in_ns(&p.a, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let t0 = Instant::now();
        let mut seq = 0u32;
        while t0.elapsed() < dur {
            let mut m = [0u8; 200];
            m[..4].copy_from_slice(&seq.to_be_bytes());
            let _ = s.send_to(&m, &dst);
            seq += 1;
            if seq.is_multiple_of(10) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        seq
    })
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn ike_child_rekeys_under_traffic_lose_nothing() {
    let mut p = Pair::new("r", 155);
    let cap = Capture::start(&p);
    p.start(nfx(), Keys::Ike("aes-128-gcm", "child_lifetime_s: 0.8"), "");
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(3500));
        flag.store(true, Ordering::SeqCst);
    });
    let (sent, got) = udp_stream(&p, done);
    timer.join().unwrap();
    p.assert_complete(sent, &got);
    let (_, st) = http(p.em_port(1), "GET", "/status", "").unwrap();
    let (_, sb) = http(p.em_port(2), "GET", "/status", "").unwrap();
    let rekeys =
        st["ike"]["child_rekeys"].as_u64().unwrap() + sb["ike"]["child_rekeys"].as_u64().unwrap();
    assert!(rekeys >= 3, "rekeys during the stream: {st}");
    let esp = cap.finish();
    let spis: HashSet<u32> = esp.iter().filter(|e| e.from_a).map(|e| e.spi).collect();
    assert!(spis.len() >= 3, "A sent on {} SAs", spis.len());
    assert_no_repeats(&esp);
}

/// Kills endpoint A (SIGKILL) while it sends and starts it again; the capture shows no
/// (SPI, sequence) pair sent twice. Returns the ESP headers A sent.
fn restart_under_traffic(p: &mut Pair, keys: Keys<'_>) -> Vec<Esp> {
    let cap = Capture::start(p);
    p.start(nfx(), keys, "");
    let tx = blast(p, Duration::from_millis(3000));
    std::thread::sleep(Duration::from_millis(1000));
    p.kill_side(1);
    p.start_side(nfx(), 1, keys, "");
    if let Keys::Ike(..) = keys {
        p.wait_status(1, Duration::from_secs(10), |st| {
            st["ike"]["child"].is_object()
        });
    }
    assert!(tx.join().unwrap() > 1000);
    std::thread::sleep(Duration::from_millis(200));
    let (_, st) = http(p.em_port(1), "GET", "/status", "").unwrap();
    assert!(
        st["tx_packets"].as_u64().unwrap() > 100,
        "the restarted end sent: {st}"
    );
    let esp = cap.finish();
    assert_no_repeats(&esp);
    esp.into_iter().filter(|e| e.from_a).collect()
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn restart_with_ike_repeats_no_nonce() {
    let mut p = Pair::new("i", 156);
    let a = restart_under_traffic(&mut p, Keys::Ike("aes-128-gcm", ""));
    let spis: HashSet<u32> = a.iter().map(|e| e.spi).collect();
    assert!(spis.len() >= 2, "a new SA after the restart: {spis:x?}");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn restart_with_static_keys_repeats_no_nonce() {
    let mut p = Pair::new("k", 157);
    let a = restart_under_traffic(&mut p, Keys::Static("aes-128-gcm"));
    assert!(a.iter().all(|e| e.spi == 0x1001));
    // The same key before and after the restart: the second process starts past the
    // block the first one had reserved.
    let jump = a
        .windows(2)
        .find(|w| w[1].seq < w[0].seq || w[1].seq > w[0].seq + 1000);
    let w = jump.expect("the sequence jumps at the restart");
    assert!(w[1].seq > w[0].seq, "sequence went back: {w:?}");
    assert!(
        w[1].seq as u64 >= 1 << 22,
        "restart skips to the next reserved block: {w:?}"
    );
}

/// Sixteen UDP flows from A, whose endpoint runs two sending lanes on a two-queue TUN,
/// through child SA rekeys: every flow arrives complete and in its own order (the
/// kernel keeps a flow on one queue, one lane serves a queue), B's replay window takes
/// the lanes' interleaved sequence numbers without a drop, and the capture shows no
/// (SPI, sequence number) sent twice across the lanes.
#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn multi_queue_keeps_flows_in_order_and_sequence_numbers_unique() {
    const FLOWS: u16 = 16;
    let mut p = Pair::new("q", 158);
    let cap = Capture::start(&p);
    p.start(
        nfx(),
        Keys::Ike("aes-128-gcm", "child_lifetime_s: 0.8"),
        "threads: 3\n",
    );
    let rx = in_ns(&p.b, {
        let bind = format!("{}:5557", p.inner(2));
        move || {
            let s = UdpSocket::bind(bind).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            set_rcvbuf(&s, 16 << 20);
            let mut got: Vec<Vec<u32>> = vec![Vec::new(); FLOWS as usize];
            let mut b = [0u8; 256];
            while let Ok(n) = s.recv(&mut b) {
                if n >= 6 {
                    let flow = u16::from_be_bytes([b[0], b[1]]) as usize;
                    got[flow % FLOWS as usize].push(u32::from_be_bytes([b[2], b[3], b[4], b[5]]));
                }
            }
            got
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let dst = format!("{}:5557", p.inner(2));
    let sent = in_ns(&p.a, move || {
        // One socket (one source port, one flow hash) per flow.
        let socks: Vec<UdpSocket> = (0..FLOWS)
            .map(|_| UdpSocket::bind("0.0.0.0:0").unwrap())
            .collect();
        let t0 = Instant::now();
        let mut seq = 0u32;
        while t0.elapsed() < Duration::from_millis(2500) {
            for (f, s) in socks.iter().enumerate() {
                let mut m = [0u8; 200];
                m[..2].copy_from_slice(&(f as u16).to_be_bytes());
                m[2..6].copy_from_slice(&seq.to_be_bytes());
                s.send_to(&m, &dst).unwrap();
            }
            seq += 1;
            if seq.is_multiple_of(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        seq
    })
    .join()
    .unwrap();
    let got = rx.join().unwrap();
    let expect: Vec<u32> = (0..sent).collect();
    for (f, g) in got.iter().enumerate() {
        assert!(
            *g == expect,
            "flow {f}: sent {sent}, got {} (first difference at {:?})\n{}",
            g.len(),
            g.iter().enumerate().find(|(i, &s)| *i as u32 != s),
            p.drop_report()
        );
    }
    let (_, sb) = http(p.em_port(2), "GET", "/status", "").unwrap();
    assert_eq!(sb["drops"]["replay"], 0, "{sb}");
    // Both of A's lanes carried flows (16 flows all hashed to one queue: 1 in 32768).
    let (_, sa) = http(p.em_port(1), "GET", "/status", "").unwrap();
    assert_eq!(sa["lanes"]["sending"], 2, "{sa}");
    let per_lane = sa["lanes"]["tx_packets"].as_array().unwrap();
    assert!(
        per_lane[1].as_u64().unwrap() > 100 && per_lane[2].as_u64().unwrap() > 100,
        "{sa}"
    );
    let esp = cap.finish();
    let spis: HashSet<u32> = esp.iter().filter(|e| e.from_a).map(|e| e.spi).collect();
    assert!(spis.len() >= 2, "A sent on {} SAs", spis.len());
    assert_no_repeats(&esp);
}
