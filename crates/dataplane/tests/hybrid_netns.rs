//! Hybrid chains on real veth links: namespaces `a — m — b`, m's kernel forwarding off,
//! a table-tier firewall + NAT (eBPF, `nfx_fastpath::table`) and an nfx worker running
//! DPI on m's interfaces. Table tier first (forward at tcx ingress of the inside port,
//! handed to the worker's socket; reverse at tcx egress after the worker sent), and the
//! reverse order (worker first, table tier at the outside port). Datagrams carrying a
//! DPI pattern cross translated, raise events in the software part, and their replies
//! come back; what the table-tier firewall denies never reaches the worker.

use nfx_dataplane::{vnf_builder, Dataplane, RunConfig};
use nfx_fastpath::table::{Placement, TableChain};
use nfx_vnf::NodeSpec;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PUBLIC: &str = "192.0.2.1";

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// a (10.net.1.1) — ma | mb — b (10.net.2.2); b reaches the NAT's public address via m.
struct Topo {
    ns: [String; 3],
}

impl Topo {
    fn new(tag: &str, net: u8) -> Self {
        let pid = std::process::id();
        let t = Topo {
            ns: ["a", "m", "b"].map(|n| format!("nfxhy-{tag}-{pid}-{n}")),
        };
        let [a, m, b] = [&t.ns[0], &t.ns[1], &t.ns[2]].map(String::as_str);
        for ns in [a, m, b] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        for (ns, dev, peer, mac) in [
            (a, "veth0", "ma", "02:00:00:05:00:01"),
            (b, "veth0", "mb", "02:00:00:05:00:02"),
        ] {
            sh(&[
                "ip", "-n", ns, "link", "add", dev, "address", mac, "type", "veth", "peer", "name",
                peer, "netns", m,
            ]);
        }
        for (ns, dev, addr) in [
            (a, "veth0", format!("10.{net}.1.1/24")),
            (m, "ma", format!("10.{net}.1.2/24")),
            (m, "mb", format!("10.{net}.2.1/24")),
            (b, "veth0", format!("10.{net}.2.2/24")),
        ] {
            sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", "dev", dev, "up"]);
        }
        sh(&[
            "ip",
            "-n",
            a,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.1.2"),
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "route",
            "add",
            &format!("{PUBLIC}/32"),
            "via",
            &format!("10.{net}.2.1"),
        ]);
        sh(&[
            "ip",
            "netns",
            "exec",
            m,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=0",
        ]);
        t
    }

    fn within<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let ns = self.ns[i].clone();
        std::thread::spawn(move || {
            nfx_io::netns::enter_netns(&ns).unwrap();
            f()
        })
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn spec(yaml: &str) -> NodeSpec {
    let v: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
    serde_json::from_value(v).unwrap()
}

fn patterns() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/dpi/patterns.txt")
        .canonicalize()
        .unwrap()
}

/// The worker on m: DPI only, with the port the table tier shares marked.
fn worker(t: &Topo, net: u8, shared: &str, events: &Path) -> Dataplane {
    let mac = |ns: &str| {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "veth0"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let i = text.find("link/ether ").unwrap() + 11;
        text[i..i + 17].to_string()
    };
    let flag = |side| {
        if side == shared {
            ", table_tier: true"
        } else {
            ""
        }
    };
    let text = format!(
        "name: hybrid-{net}\nnetns: {}\ncontrol_socket: {}\nports:\n  inside: {{iface: ma, peer_mac: '{}'{}}}\n  outside: {{iface: mb, peer_mac: '{}'{}}}\nevents: {}\nchain: [{{dpi: {{patterns: {}}}}}]\n",
        t.ns[1],
        events.with_extension("sock").display(),
        mac(&t.ns[0]),
        flag("inside"),
        mac(&t.ns[2]),
        flag("outside"),
        events.display(),
        patterns().display(),
    );
    let cfg = RunConfig::parse(&text, "hybrid.yaml").unwrap();
    // The pattern file lives with the repository, outside the (inline) config's directory.
    let dir = patterns().parent().unwrap().to_path_buf();
    let files = nfx_vnf::FileScope::new(".").with_allowed([dir]);
    Dataplane::start(&cfg, vnf_builder(files)).unwrap()
}

/// The table tier on m: firewall (UDP 5000 only) + NAT, placed as `placement`.
fn table(t: &Topo, placement: Placement) -> TableChain {
    t.within(1, move || {
        let fns = vec![
            (
                "firewall".to_string(),
                spec("firewall: {default: deny, max_flows: 64, rules: [{action: allow, proto: udp, dport: 5000}]}"),
            ),
            ("nat".to_string(), spec(&format!("nat: {{snat: {{public_ip: {PUBLIC}}}, max_flows: 64}}"))),
        ];
        let mut c = TableChain::deploy(&fns, Path::new(".")).unwrap();
        c.attach(&placement).unwrap();
        c
    })
    .join()
    .unwrap()
}

/// a sends `n` datagrams carrying the DPI test pattern to b:5000 and one to b:6000; b
/// echoes what reaches it. Returns the sources b saw and the replies a got.
fn exchange(t: &Topo, net: u8, n: usize) -> (Vec<SocketAddr>, usize) {
    let b_addr: SocketAddr = format!("10.{net}.2.2:5000").parse().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let server = t.within(2, move || {
        let s = UdpSocket::bind(b_addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok((k, from)) = s.recv_from(&mut buf) {
            seen.push(from);
            s.send_to(&buf[..k], from).unwrap();
        }
        seen
    });
    ready.recv().unwrap();
    let replies = t
        .within(0, move || {
            let s = UdpSocket::bind("0.0.0.0:7000").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut got = 0;
            let mut buf = [0u8; 2048];
            for i in 0..n {
                s.send_to(format!("hello NFX-DPI-TEST {i}").as_bytes(), b_addr)
                    .unwrap();
                if s.recv(&mut buf).is_ok() {
                    got += 1;
                }
            }
            s.send_to(b"not allowed", SocketAddr::new(b_addr.ip(), 6000))
                .unwrap();
            got
        })
        .join()
        .unwrap();
    (server.join().unwrap(), replies)
}

/// `worker_sees`: frames the worker's DPI runs on (the denied datagram too when the
/// software part comes first).
fn check(t: &Topo, net: u8, table: &TableChain, dp: Dataplane, events: &Path, worker_sees: u64) {
    let (seen, replies) = exchange(t, net, 20);
    assert_eq!(replies, 20, "every reply came back through both tiers");
    assert_eq!(seen.len(), 20);
    assert!(
        seen.iter().all(|s| s.ip().to_string() == PUBLIC),
        "b sees the NAT address: {seen:?}"
    );
    let st = table.stats().unwrap();
    assert_eq!(st.nodes[1].drops["acl_deny"], 1, "{st:?}");
    assert!(
        st.nodes[1].packets >= 41,
        "both directions through the table tier: {st:?}"
    );
    assert_eq!(st.functions[1].created, 1);
    let stats = dp.stop().unwrap();
    let out = stats.nodes.iter().find(|n| n.name == "output").unwrap();
    assert_eq!(
        out.drops["tx_error"], 0,
        "a table-tier drop at egress is not a send error"
    );
    let dpi = stats.nodes.iter().find(|n| n.name == "dpi").unwrap();
    assert_eq!(
        dpi.packets, worker_sees,
        "the 20 datagrams and their replies"
    );
    let text = std::fs::read_to_string(events).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("\"dpi_match\"") && l.contains("nfx-test-alert")),
        "DPI events from the software part: {text}"
    );
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn table_tier_first_then_software_dpi() {
    let net = 157;
    let t = Topo::new("tfirst", net);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let table = table(&t, Placement::BeforeSoftware { iface: "ma".into() });
    let dp = worker(&t, net, "inside", &events);
    check(&t, net, &table, dp, &events, 40);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn software_dpi_first_then_table_tier() {
    let net = 158;
    let t = Topo::new("sfirst", net);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let table = table(&t, Placement::AfterSoftware { iface: "mb".into() });
    let dp = worker(&t, net, "outside", &events);
    check(&t, net, &table, dp, &events, 41);
}
