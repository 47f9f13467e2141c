//! Interoperability of `nfx tunnel` (IKEv2 + ESP-in-UDP) with strongSwan: Debian's
//! charon with the kernel-libipsec plugin (ESP in userspace over its own TUN, no kernel
//! IPsec needed) runs in one namespace, nfx in another. nfx as initiator and as
//! responder, PSK and X.509 certificates, AES-GCM-128/256, ChaCha20-Poly1305 and
//! AES-CTR + HMAC-SHA-256-128: the SA comes up, ping and iperf3 pass both ways, CHILD_SA
//! rekeys (started by either side) under an iperf3 UDP stream lose no datagram, nfx
//! rekeys the IKE SA, and DPD on either side notices a killed peer. Root; every process
//! and namespace is removed by a guard.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The nfx endpoint's element-manager bearer token.
const EM_TOKEN: &str = "swan-interop-em-token";

const PSK: &str = "nfx-strongswan-interop-psk-0123456789";

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run command")
}

fn ok(args: &[&str]) -> String {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// strongSwan's ESP proposal and nfx's name of the same transform.
#[derive(Clone, Copy)]
struct Alg {
    swan: &'static str,
    nfx: &'static str,
}

const GCM128: Alg = Alg {
    swan: "aes128gcm16",
    nfx: "aes-128-gcm",
};
const GCM256: Alg = Alg {
    swan: "aes256gcm16",
    nfx: "aes-256-gcm",
};
const CHACHA: Alg = Alg {
    swan: "chacha20poly1305",
    nfx: "chacha20-poly1305",
};
const CTR: Alg = Alg {
    swan: "aes128ctr-sha256",
    nfx: "aes-128-ctr-hmac-sha256",
};

/// How the two sides authenticate.
#[derive(Clone, Copy, PartialEq)]
enum Auth {
    Psk,
    Cert,
}

/// Namespaces `<p>n` (nfx, 10.N.0.1, inner 192.168.N.1) and `<p>s` (strongSwan,
/// 10.N.0.2, inner 192.168.N.2 on lo), charon and nfx processes; all removed on drop.
struct Bed {
    nfx_ns: String,
    swan_ns: String,
    n: u8,
    dir: PathBuf,
    charon: Option<Child>,
    nfx: Option<Child>,
    em: u16,
}

impl Bed {
    fn new(tag: &str, n: u8) -> Bed {
        let p = format!("sw{}{tag}", std::process::id() % 10000);
        let bed = Bed {
            nfx_ns: format!("{p}n"),
            swan_ns: format!("{p}s"),
            n,
            dir: std::env::temp_dir().join(format!("{p}-swan")),
            charon: None,
            nfx: None,
            em: 21000 + (std::process::id() % 20000) as u16 + n as u16,
        };
        let _ = std::fs::remove_dir_all(&bed.dir);
        for d in ["", "x509", "x509ca", "private"] {
            std::fs::create_dir_all(bed.dir.join(d)).unwrap();
        }
        for ns in [&bed.nfx_ns, &bed.swan_ns] {
            let _ = sh(&["ip", "netns", "del", ns]);
            ok(&["ip", "netns", "add", ns]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        ok(&[
            "ip",
            "-n",
            &bed.nfx_ns,
            "link",
            "add",
            "vn",
            "type",
            "veth",
            "peer",
            "name",
            "vs",
            "netns",
            &bed.swan_ns,
        ]);
        for (ns, dev, host) in [(&bed.nfx_ns, "vn", 1), (&bed.swan_ns, "vs", 2)] {
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
        // This kernel refuses dummy interfaces: strongSwan's inner address sits on lo.
        ok(&[
            "ip",
            "-n",
            &bed.swan_ns,
            "addr",
            "add",
            &format!("192.168.{n}.2/32"),
            "dev",
            "lo",
        ]);
        bed
    }

    fn vici(&self) -> String {
        format!("unix://{}", self.dir.join("charon.vici").display())
    }

    /// Starts charon with `conn` as its swanctl configuration.
    fn start_charon(&mut self, auth: Auth, alg: Alg, nfx_initiates: bool) {
        let n = self.n;
        let conf = format!(
            "charon {{\n  load_modular = no\n  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey \
             curve25519 aes sha1 sha2 hmac gcm chapoly ctr kdf kernel-libipsec kernel-netlink socket-default vici\n  \
             install_routes = yes\n  retransmit_timeout = 1\n  retransmit_tries = 2\n  \
             plugins {{ vici {{ socket = {} }} }}\n  \
             filelog {{ log {{ path = {} \n time_format = %T\n default = 1\n ike = 2 }} }}\n}}\n",
            self.vici(),
            self.dir.join("charon.log").display()
        );
        std::fs::write(self.dir.join("strongswan.conf"), conf).unwrap();
        let (lauth, rauth, secrets) = match auth {
            Auth::Psk => (
                "auth = psk".to_string(),
                "auth = psk",
                format!(
                    "secrets {{ ike-1 {{ id-1 = a.nfx\n id-2 = b.nfx\n secret = \"{PSK}\" }} }}\n"
                ),
            ),
            Auth::Cert => (
                "auth = pubkey\n certs = b.crt".to_string(),
                "auth = pubkey",
                String::new(),
            ),
        };
        let swan = format!(
            "connections {{ nfx {{ version = 2\n encap = yes\n local_addrs = 10.{n}.0.2\n \
             remote_addrs = 10.{n}.0.1\n local_port = 4500\n remote_port = 4500\n \
             proposals = aes128gcm16-prfsha256-x25519\n dpd_delay = 1\n \
             local {{ {lauth}\n id = b.nfx }}\n remote {{ {rauth}\n id = a.nfx }}\n \
             children {{ c {{ local_ts = 192.168.{n}.2/32\n remote_ts = 192.168.{n}.1/32\n \
             esp_proposals = {}-x25519\n mode = tunnel\n {} }} }} }} }}\n{secrets}",
            alg.swan,
            if nfx_initiates {
                ""
            } else {
                "start_action = none"
            }
        );
        std::fs::write(self.dir.join("swanctl.conf"), swan).unwrap();
        if let Some(mut c) = self.charon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.dir.join("charon.vici"));
        self.charon = Some(
            Command::new("ip")
                .args(["netns", "exec", &self.swan_ns, "/usr/sbin/charon-systemd"])
                .env("STRONGSWAN_CONF", self.dir.join("strongswan.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("charon-systemd (scripts/deps.sh installs strongSwan)"),
        );
        let t0 = Instant::now();
        while !self.dir.join("charon.vici").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "charon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let conf = self.dir.join("swanctl.conf");
        let t0 = Instant::now();
        loop {
            let o = self.swanctl(&["--load-all", "--file", conf.to_str().unwrap()]);
            if o.status.success() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "swanctl --load-all: {o:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn swanctl(&self, args: &[&str]) -> std::process::Output {
        let vici = self.vici();
        let mut a = vec!["ip", "netns", "exec", &self.swan_ns, "swanctl"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--uri", &vici]);
        sh(&a)
    }

    /// Starts `nfx tunnel` (`initiator` or responder); `ike_extra`: more `ike:` keys.
    fn start_nfx(&mut self, auth: Auth, alg: Alg, initiator: bool, ike_extra: &str) {
        if let Some(mut c) = self.nfx.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let creds = match auth {
            Auth::Psk => {
                let p = self.dir.join("nfx.psk");
                std::fs::write(&p, PSK).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
                "psk_file: nfx.psk".to_string()
            }
            Auth::Cert => "cert: a.crt, key: a.key, ca: x509ca/ca.crt".to_string(),
        };
        let n = self.n;
        std::fs::write(self.dir.join("em-token"), EM_TOKEN).unwrap();
        let cfg = format!(
            "name: swan-interop\nnetns: {}\nem_listen: '127.0.0.1:{}'\nem_token_file: em-token\n\
             tun: {{name: nfxsw{n}, address: 192.168.{n}.1/24}}\n\
             underlay: {{local: '10.{n}.0.1:4500', peer: '10.{n}.0.2:4500'}}\n\
             ike: {{role: {}, local_id: a.nfx, remote_id: b.nfx, {creds}, esp: [{}], \
             proposals: [aes128gcm16-prfsha256-x25519], retransmit_ms: 200, retransmit_tries: 3{}{ike_extra}}}\n",
            self.nfx_ns,
            self.em,
            if initiator { "initiator" } else { "responder" },
            alg.nfx,
            if ike_extra.is_empty() { "" } else { ", " },
        );
        let path = self.dir.join("nfx.yaml");
        std::fs::write(&path, cfg).unwrap();
        self.nfx = Some(
            Command::new(env!("CARGO_BIN_EXE_nfx"))
                .args([
                    "tunnel",
                    "--config",
                    path.to_str().unwrap(),
                    "--duration",
                    "60",
                ])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        self.wait_nfx(Duration::from_secs(10), "ready", |st| st["ready"] == true);
    }

    fn status(&self) -> Option<Value> {
        let mut s = TcpStream::connect(("127.0.0.1", self.em)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {EM_TOKEN}\r\n\
             Connection: close\r\nContent-Length: 0\r\n\r\n"
        )
        .ok()?;
        let mut r = String::new();
        s.read_to_string(&mut r).ok()?;
        serde_json::from_str(r.split("\r\n\r\n").nth(1)?).ok()
    }

    fn wait_nfx(&self, limit: Duration, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.status() {
                if ok(&st) {
                    return st;
                }
                assert!(
                    t0.elapsed() < limit,
                    "nfx did not reach {what}: {st}\n{}",
                    self.log()
                );
            }
            assert!(t0.elapsed() < limit, "nfx EM does not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        let l = std::fs::read_to_string(self.dir.join("charon.log")).unwrap_or_default();
        let lines: Vec<&str> = l.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn up(&self, alg: Alg) -> Value {
        let st = self.wait_nfx(Duration::from_secs(10), "a CHILD_SA", |st| {
            st["ike"]["child"].is_object()
        });
        assert_eq!(st["ike"]["child"]["alg"], alg.nfx, "{st}");
        st
    }

    /// ping through the tunnel in both directions.
    fn ping_both_ways(&self) {
        let n = self.n;
        for (ns, src, dst) in [
            (
                &self.nfx_ns,
                format!("192.168.{n}.1"),
                format!("192.168.{n}.2"),
            ),
            (
                &self.swan_ns,
                format!("192.168.{n}.2"),
                format!("192.168.{n}.1"),
            ),
        ] {
            let o = sh(&[
                "ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", &src,
                &dst,
            ]);
            assert!(
                o.status.success(),
                "ping {src} -> {dst}: {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                self.log()
            );
        }
    }

    /// strongSwan narrows the selectors to the two inner hosts (/32 each): a packet nfx's
    /// TUN routes to another host of its /24 leaves through no SA and is counted as a
    /// `selector` drop, not encrypted.
    fn outside_selectors_dropped(&self) {
        let n = self.n;
        let before = self.status().unwrap()["drops"]["selector"]
            .as_u64()
            .unwrap();
        let o = sh(&[
            "ip",
            "netns",
            "exec",
            &self.nfx_ns,
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "1",
            &format!("192.168.{n}.5"),
        ]);
        assert!(!o.status.success(), "a host outside the selectors answered");
        let st = self.status().unwrap();
        let after = st["drops"]["selector"].as_u64().unwrap();
        assert!(
            after >= before + 3,
            "selector drops {before} -> {after}: {st}"
        );
    }

    /// iperf3 (`args`, e.g. TCP or `-u -b 20M`) with the server behind nfx and the
    /// client at strongSwan; `reverse` sends nfx → strongSwan. Returns the JSON report.
    fn iperf(&self, args: &[&str], secs: &str, reverse: bool) -> Value {
        let n = self.n;
        let mut server = Command::new("ip")
            .args(["netns", "exec", &self.nfx_ns, "iperf3", "-s", "-1", "-B"])
            .arg(format!("192.168.{n}.1"))
            .args(["-p", "5301"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (src, dst) = (format!("192.168.{n}.2"), format!("192.168.{n}.1"));
        let mut a = vec![
            "ip",
            "netns",
            "exec",
            &self.swan_ns,
            "timeout",
            "20",
            "iperf3",
            "-J",
            "-c",
            &dst,
            "-B",
            &src,
            "-p",
            "5301",
            "-t",
            secs,
        ];
        a.extend_from_slice(args);
        if reverse {
            a.push("-R");
        }
        let o = sh(&a);
        let _ = server.kill();
        let _ = server.wait();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        assert!(
            v["error"].is_null() && !v["end"].is_null(),
            "iperf3 {args:?}: {v}\n{}",
            self.log()
        );
        v
    }

    fn iperf_both_ways(&self) {
        for reverse in [false, true] {
            let v = self.iperf(&[], "1", reverse);
            let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
            assert!(
                bytes > 1_000_000,
                "iperf3 TCP (reverse {reverse}) moved {bytes} bytes"
            );
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for c in [self.nfx.take(), self.charon.take()].into_iter().flatten() {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.nfx_ns, &self.swan_ns] {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Lost datagrams of an iperf3 UDP report, after checking some arrived.
fn udp_lost(v: &Value) -> u64 {
    let s = &v["end"]["sum"];
    assert!(s["packets"].as_u64().unwrap_or(0) > 500, "{s}");
    s["lost_packets"].as_u64().unwrap()
}

/// Fails unless strongSwan is installed (scripts/deps.sh installs it).
fn require_strongswan() {
    assert!(
        Path::new("/usr/sbin/charon-systemd").exists(),
        "strongSwan is missing: run scripts/deps.sh"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn nfx_initiator_psk_every_transform_rekey_and_dpd() {
    require_strongswan();
    let mut b = Bed::new("i", 161);
    for alg in [GCM128, GCM256, CHACHA, CTR] {
        b.start_charon(Auth::Psk, alg, true);
        b.start_nfx(Auth::Psk, alg, true, "");
        let st = b.up(alg);
        // nfx offers ESN and 32-bit sequence numbers; strongSwan (libipsec has no ESN)
        // only the latter: ESN is used only where both offer it.
        assert_eq!(st["ike"]["child"]["esn"], false, "{st}");
        eprintln!(
            "{}: IKE SA + CHILD_SA in {} ms",
            alg.nfx, st["ike"]["setup_ms"]
        );
        assert!(st["ike"]["setup_ms"].as_f64().unwrap() < 1000.0, "{st}");
        b.ping_both_ways();
    }
    b.outside_selectors_dropped();
    b.iperf_both_ways();
    // nfx rekeys its CHILD_SA every ~0.7 s during a UDP stream strongSwan sends to
    // it and one it sends to strongSwan: not a datagram lost.
    b.start_nfx(Auth::Psk, CTR, true, "child_lifetime_s: 0.7");
    b.up(CTR);
    for reverse in [false, true] {
        let before = b.status().unwrap()["ike"]["child_rekeys"].as_u64().unwrap();
        let v = b.iperf(&["-u", "-b", "10M", "-l", "1000"], "3", reverse);
        let after = b.status().unwrap()["ike"]["child_rekeys"].as_u64().unwrap();
        assert!(
            after >= before + 3,
            "rekeys during the stream: {before} -> {after}"
        );
        assert_eq!(
            udp_lost(&v),
            0,
            "datagrams lost across rekeys (reverse {reverse})\n{}",
            b.log()
        );
    }
    // DPD: strongSwan is killed; nfx notices within a few intervals.
    b.start_nfx(Auth::Psk, CTR, true, "dpd_s: 0.5");
    b.up(CTR);
    let mut c = b.charon.take().unwrap();
    let _ = c.kill();
    let _ = c.wait();
    let st = b.wait_nfx(Duration::from_secs(10), "peer death", |st| {
        st["ike"]["peer_dead"].as_u64().unwrap_or(0) >= 1
    });
    assert_ne!(st["ike"]["state"], "established", "{st}");
    assert!(st["ike"]["child"].is_null(), "{st}");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn nfx_responder_psk_every_transform_and_strongswan_rekey() {
    require_strongswan();
    let mut b = Bed::new("r", 162);
    for alg in [GCM128, GCM256, CTR] {
        b.start_charon(Auth::Psk, alg, false);
        b.start_nfx(Auth::Psk, alg, false, "");
        let t0 = Instant::now();
        let o = b.swanctl(&["--initiate", "--child", "c", "--timeout", "10"]);
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        assert!(o.status.success(), "swanctl --initiate: {o:?}\n{}", b.log());
        let st = b.up(alg);
        eprintln!(
            "{}: strongSwan initiated; nfx answered IKE_SA_INIT to IKE_AUTH in {} ms \
             (swanctl --initiate: {ms:.0} ms wall, with process start-up)",
            alg.nfx, st["ike"]["setup_ms"]
        );
        b.ping_both_ways();
    }
    b.iperf_both_ways();
    // strongSwan rekeys the CHILD_SA three times during a UDP stream each way.
    for reverse in [false, true] {
        let vici = b.vici();
        let ns = b.swan_ns.clone();
        let rekeys = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(700));
                let o = sh(&[
                    "ip", "netns", "exec", &ns, "swanctl", "--rekey", "--child", "c", "--uri",
                    &vici,
                ]);
                assert!(o.status.success(), "swanctl --rekey: {o:?}");
            }
        });
        let v = b.iperf(&["-u", "-b", "10M", "-l", "1000"], "3", reverse);
        rekeys.join().unwrap();
        assert_eq!(
            udp_lost(&v),
            0,
            "datagrams lost across rekeys (reverse {reverse})\n{}",
            b.log()
        );
    }
    let st = b.status().unwrap();
    assert!(st["ike"]["child_rekeys"].as_u64().unwrap() >= 6, "{st}");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn nfx_rekeys_the_ike_sa_with_strongswan() {
    require_strongswan();
    let mut b = Bed::new("k", 164);
    b.start_charon(Auth::Psk, GCM128, true);
    b.start_nfx(Auth::Psk, GCM128, true, "ike_lifetime_s: 1");
    let first = b.up(GCM128)["ike"]["ike_spi"].clone();
    // The IKE SA is rekeyed (CREATE_CHILD_SA with a new IKE SPI); its CHILD_SA moves
    // over and still carries traffic both ways.
    let st = b.wait_nfx(Duration::from_secs(10), "two IKE rekeys", |st| {
        st["ike"]["ike_rekeys"].as_u64().unwrap_or(0) >= 2
    });
    assert_ne!(st["ike"]["ike_spi"], first, "{st}");
    assert_eq!(st["ike"]["state"], "established", "{st}");
    b.ping_both_ways();
    let st = b.status().unwrap();
    assert!(st["ike"]["child"].is_object(), "{st}");
    assert_eq!(st["ike"]["peer_dead"], 0, "{st}");
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn strongswan_dpd_notices_a_killed_nfx() {
    require_strongswan();
    let mut b = Bed::new("d", 165);
    b.start_charon(Auth::Psk, GCM128, true);
    b.start_nfx(Auth::Psk, GCM128, true, "");
    b.up(GCM128);
    let has_sa = |b: &Bed| {
        let o = b.swanctl(&["--list-sas"]);
        String::from_utf8_lossy(&o.stdout).contains("nfx:")
    };
    assert!(has_sa(&b), "strongSwan lists no SA\n{}", b.log());
    // nfx dies without a Delete (SIGKILL); strongSwan's DPD (1 s, 2 retransmissions of
    // 1 s · 1.8^n) must tear its SAs down.
    let mut c = b.nfx.take().unwrap();
    let _ = c.kill();
    let _ = c.wait();
    let t0 = Instant::now();
    while has_sa(&b) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "strongSwan still lists the SA\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "strongSwan dropped the SA {:?} after nfx was killed",
        t0.elapsed()
    );
}

/// A CA and certificates for a.nfx (nfx) and b.nfx (strongSwan), ECDSA P-256, written
/// where each side reads them.
fn write_certs(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nfx interop CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    std::fs::write(dir.join("x509ca/ca.crt"), ca.pem()).unwrap();
    for (name, cert, key) in [
        ("a.nfx", "a.crt", "a.key"),
        ("b.nfx", "x509/b.crt", "private/b.key"),
    ] {
        let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let c = params.signed_by(&k, &ca).unwrap();
        std::fs::write(dir.join(cert), c.pem()).unwrap();
        std::fs::write(dir.join(key), k.serialize_pem()).unwrap();
        std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn certificates_both_roles() {
    require_strongswan();
    let mut b = Bed::new("c", 163);
    write_certs(&b.dir);
    b.start_charon(Auth::Cert, GCM128, true);
    b.start_nfx(Auth::Cert, GCM128, true, "");
    b.up(GCM128);
    b.ping_both_ways();
    b.start_charon(Auth::Cert, CTR, false);
    b.start_nfx(Auth::Cert, CTR, false, "");
    let o = b.swanctl(&["--initiate", "--child", "c", "--timeout", "10"]);
    assert!(o.status.success(), "swanctl --initiate: {o:?}\n{}", b.log());
    b.up(CTR);
    b.ping_both_ways();
    b.iperf_both_ways();
}
