//! Worker and controller tests over in-memory ports: forwarding both ways, poll modes,
//! scalar mode, reconfiguration under load without loss or reordering, the control
//! protocol and socket.

use crate::config::RunConfig;
use crate::runtime::{Dataplane, PortOpener};
use crate::testkit::{
    feed, seq_of, start_on_mem_ports, tag_builder, trace_of, udp_frame, wait_tx, MemPort, WireEnd,
};
use nfx_io::Port;
use std::time::{Duration, Instant};

struct Rig {
    dp: Dataplane,
    inside: WireEnd,
    outside: WireEnd,
}

fn config(poll: &str, vector: usize, chain: &str) -> RunConfig {
    let text = format!(
        "name: t\nports:\n  inside: {{iface: in0, peer_mac: '02:00:00:00:00:01'}}\n  outside: {{iface: out0, peer_mac: '02:00:00:00:00:02'}}\nvector: {vector}\npoll: {poll}\nchain: {chain}\n"
    );
    RunConfig::parse(&text, "test.yaml").unwrap()
}

fn rig(poll: &str, vector: usize, chain: &str) -> Rig {
    let (dp, inside, outside) = start_on_mem_ports(&config(poll, vector, chain));
    Rig {
        dp,
        inside,
        outside,
    }
}

#[test]
fn forwards_both_ways_in_every_poll_mode() {
    for poll in ["busy", "interrupt", "adaptive"] {
        let r = rig(poll, 256, "[{tag: {id: 1}}, {tag: {id: 2}}]");
        MemPort::inject(&r.inside.0, &r.inside.1, (0..500).map(udp_frame));
        MemPort::inject(&r.outside.0, &r.outside.1, (1000..1100).map(udp_frame));
        let out = wait_tx(&r.outside.0, 500);
        let back = wait_tx(&r.inside.0, 100);
        assert_eq!(out.len(), 500, "{poll}");
        assert_eq!(back.len(), 100, "{poll}");
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, f)| seq_of(f) == i as u32 && trace_of(f) == [1, 2]));
        assert!(back
            .iter()
            .all(|f| trace_of(f) == [2, 1] && f[..6] == [2, 0, 0, 0, 0, 1]));
        let st = r.dp.stop().unwrap();
        assert_eq!(st.poll, poll);
        assert_eq!(st.workers[0].rx_packets, 600);
        assert_eq!(st.workers[0].tx_packets, 600);
        assert_eq!(st.ports[0].rx_packets, 500);
        assert_eq!(st.ports[1].tx_packets, 500);
        assert_eq!(st.node("tag").unwrap().packets, 600);
    }
}

#[test]
fn scalar_mode_moves_one_packet_per_vector() {
    let r = rig("busy", 1, "[]");
    MemPort::inject(&r.inside.0, &r.inside.1, (0..50).map(udp_frame));
    assert_eq!(wait_tx(&r.outside.0, 50).len(), 50);
    let st = r.dp.stop().unwrap();
    assert_eq!(st.mode, "scalar");
    assert_eq!(st.workers[0].vectors, 50);
    assert_eq!(st.workers[0].mean_vector, 1.0);
}

#[test]
fn reconfigure_under_load_loses_and_reorders_nothing() {
    let r = rig("adaptive", 64, "[{tag: {id: 1}}]");
    let ctl = r.dp.controller();
    const N: u32 = 20_000;
    let feeder = feed(r.inside.clone(), N, udp_frame);
    let mut swaps = 0;
    while r.outside.0.lock().unwrap().tx.len() < N as usize / 2 {
        let id = 2 + (swaps % 2);
        let names = ctl
            .reconfigure(&[serde_json::json!({"tag": {"id": id}})])
            .unwrap()
            .names;
        assert_eq!(names, ["tag"]);
        swaps += 1;
    }
    feeder.join().unwrap();
    let out = wait_tx(&r.outside.0, N as usize);
    assert_eq!(
        out.len(),
        N as usize,
        "packets lost across {swaps} reconfigurations"
    );
    for (i, f) in out.iter().enumerate() {
        assert_eq!(seq_of(f), i as u32, "reordered at {i}");
        assert_eq!(trace_of(f).len(), 1, "a packet went through two chains");
    }
    assert!(swaps > 0);
    let st = r.dp.stop().unwrap();
    assert_eq!(
        st.nodes
            .iter()
            .map(|n| n.name.as_str())
            .filter(|n| n.starts_with("tag"))
            .count(),
        1
    );
}

#[test]
fn control_protocol_answers_and_rejects_clearly() {
    let r = rig("interrupt", 256, "[{tag: {id: 1}}]");
    let ctl = r.dp.controller();
    let st: serde_json::Value =
        serde_json::from_str(&ctl.handle_line(r#"{"cmd":"stats"}"#)).unwrap();
    assert_eq!(st["name"], "t");
    assert_eq!(st["mode"], "vector");
    assert_eq!(st["nodes"][1]["name"], "tag");
    for (req, needle) in [
        ("not json", "not JSON"),
        (r#"{"cmd":"dance"}"#, "unknown cmd"),
        (r#"{"nocmd":1}"#, "cmd"),
        (r#"{"cmd":"export_state","node":"nat"}"#, "no node `nat`"),
        (r#"{"cmd":"export_state"}"#, "node"),
        (
            r#"{"cmd":"import_state","node":"tag","data_b64":"@@"}"#,
            "base64",
        ),
        (
            r#"{"cmd":"reconfigure","chain":[{"bogus":{}}]}"#,
            "chain[0]",
        ),
        (r#"{"cmd":"reconfigure"}"#, "chain"),
    ] {
        let v: serde_json::Value = serde_json::from_str(&ctl.handle_line(req)).unwrap();
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{req} gave {v}"));
        assert!(e.contains(needle), "{req}: {e}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&ctl.handle_line(r#"{"cmd":"shutdown"}"#)).unwrap();
    assert_eq!(v["ok"], true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r.dp.finished() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(r.dp.finished());
}

#[test]
fn control_socket_serves_stats_to_clients() {
    let r = rig("adaptive", 256, "[]");
    let path = std::env::temp_dir().join(format!("nfx-dp-test-{}.sock", std::process::id()));
    let server = crate::ControlServer::start(&path, r.dp.controller(), None).unwrap();
    MemPort::inject(&r.inside.0, &r.inside.1, (0..10).map(udp_frame));
    wait_tx(&r.outside.0, 10);
    let st = nfx_proto::Client::connect(server.path())
        .unwrap()
        .stats()
        .unwrap();
    assert_eq!(st.workers[0].tx_packets, 10);
    assert!(
        crate::ControlServer::start(&path, r.dp.controller(), None).is_err(),
        "a second server took a live socket"
    );
    drop(server);
    assert!(!path.exists());
    let err = nfx_proto::Client::connect(&path).err().unwrap();
    assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
}

#[test]
fn bad_chain_fails_start_with_the_entry_named() {
    let a = MemPort::new("in0", [0; 6]);
    let b = MemPort::new("out0", [0; 6]);
    let open: PortOpener = Box::new(move |_| Ok([Box::new(a) as Box<dyn Port>, Box::new(b)]));
    let err = Dataplane::start_with_ports(&config("busy", 8, "[{tag: {}}]"), tag_builder(), open)
        .err()
        .unwrap();
    assert!(err.to_string().contains("chain[0].tag.id"), "{err}");
}

#[test]
fn port_open_failure_is_reported() {
    let open: PortOpener = Box::new(|_| Err(anyhow::anyhow!("no such interface in0")));
    let err = Dataplane::start_with_ports(&config("busy", 8, "[]"), tag_builder(), open)
        .err()
        .unwrap();
    assert!(err.to_string().contains("in0"), "{err}");
}

#[test]
fn poll_mode_changes_live_and_the_kernel_sees_the_worker_spin() {
    let r = rig("interrupt", 256, "[{tag: {id: 1}}]");
    let ctl = r.dp.controller();
    let st = ctl.stats().unwrap();
    let (tid, pid) = (st.workers[0].tid, std::process::id());
    assert!(tid > 0 && tid != pid, "{:?}", st.workers[0]);
    assert_eq!(st.workers[0].poll, "interrupt");
    let cpu = || nfx_io::cpu::task_cpu_time(pid, tid).unwrap();
    let window = Duration::from_millis(300);
    let (c0, t0) = (cpu(), Instant::now());
    std::thread::sleep(window);
    let idle = (cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let resp: serde_json::Value =
        serde_json::from_str(&ctl.handle_line(r#"{"cmd":"poll","mode":"busy"}"#)).unwrap();
    assert_eq!(resp, serde_json::json!({"ok": true, "poll": "busy"}));
    assert_eq!(ctl.stats().unwrap().workers[0].poll, "busy");
    let (c0, t0) = (cpu(), Instant::now());
    std::thread::sleep(window);
    let busy = (cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    // An idle interrupt-mode worker sleeps in poll(2); a busy one spins (on a shared
    // machine it still gets a large share of a core).
    assert!(
        idle < 0.05,
        "interrupt worker used {idle:.3} of a core while idle"
    );
    assert!(
        busy > 0.2 && busy > 5.0 * idle,
        "busy {busy:.3} vs idle {idle:.3}"
    );
    // Still forwards after the change.
    MemPort::inject(&r.inside.0, &r.inside.1, (0..50).map(udp_frame));
    assert_eq!(wait_tx(&r.outside.0, 50).len(), 50);
    for (bad, want) in [
        (r#"{"cmd":"poll","mode":"spin"}"#, "unknown poll mode"),
        (r#"{"cmd":"poll"}"#, "`mode`"),
        (r#"{"cmd":"poll","mode":"busy","worker":3}"#, "no worker 3"),
        (r#"{"cmd":"poll","mode":"busy","worker":-1}"#, "`worker`"),
    ] {
        let e = ctl.handle_line(bad);
        assert!(e.contains("error") && e.contains(want), "{bad} → {e}");
    }
    assert_eq!(ctl.stats().unwrap().workers[0].poll, "busy");
}

/// Connects to the unix socket at `path` as `uid`/`gid` (a forked child that drops its
/// privileges) and sends a stats request: `Some(true)` when an answer came back,
/// `Some(false)` when the server closed the connection without one, `None` when the
/// child could not connect or drop privileges.
fn stats_as(path: &std::path::Path, uid: u32, gid: u32) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    // Everything the child needs is prepared before fork(2): it only makes system calls.
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let req = b"{\"cmd\":\"stats\"}\n";
    // SAFETY: the child runs only async-signal-safe calls on prepared data, then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: system calls on stack data; the child never returns.
        unsafe {
            libc::alarm(10);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(2);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 || libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
                libc::_exit(3);
            }
            libc::write(fd, req.as_ptr().cast(), req.len());
            let mut buf = [0u8; 64];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::_exit(if n > 0 { 0 } else { 1 });
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child ended by a signal: {status}");
    match libc::WEXITSTATUS(status) {
        0 => Some(true),
        1 => Some(false),
        _ => None,
    }
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn control_socket_refuses_other_users_and_admits_its_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let r = rig("adaptive", 256, "[]");
    let dir = std::env::temp_dir().join(format!("nfx-dp-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("ctl.sock");
    let nobody = 65534;

    let server = crate::ControlServer::start(&path, r.dp.controller(), None).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    // The file mode alone keeps nobody out.
    assert_eq!(stats_as(&path, nobody, nobody), None);
    // Opened to everyone, only the credential check stands between nobody and the worker.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(stats_as(&path, nobody, nobody), Some(false));
    let st = nfx_proto::Client::connect(&path).unwrap().stats().unwrap();
    assert_eq!(
        st.control_rejected, 1,
        "root is served and the refusal counted"
    );
    drop(server);

    // With a control group: the socket is 0660, owned by it, and its members are served.
    let server = crate::ControlServer::start(&path, r.dp.controller(), Some(nobody)).unwrap();
    let md = std::fs::metadata(&path).unwrap();
    assert_eq!((md.mode() & 0o777, md.gid()), (0o660, nobody));
    assert_eq!(stats_as(&path, nobody, nobody), Some(true));
    // Another user outside the group gets nothing even through an open file mode.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(stats_as(&path, 65533, 65533), Some(false));
    assert_eq!(
        nfx_proto::Client::connect(&path)
            .unwrap()
            .stats()
            .unwrap()
            .control_rejected,
        2
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `control_line` fuzz target's seed session, on a worker with real VNFs (the
/// builder `nfx run` uses): each line gets the answer it should, so the seed takes the
/// fuzzer into every command's success and error paths.
#[test]
fn control_seed_session_reaches_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RunConfig::parse(
        "name: t\nports:\n  inside: {iface: in0, peer_mac: '02:00:00:00:00:01'}\n  outside: {iface: out0, peer_mac: '02:00:00:00:00:02'}\npoll: interrupt\nservices:\n  - {id: web, selector: {}, chain: [fw, nat]}\ninstances:\n  fw: {function: firewall, config: {default: allow}}\n  nat: {function: nat, config: {snat: {public_ip: 192.0.2.1}}}\n",
        "test.yaml",
    )
    .unwrap();
    let session = include_str!("../fuzz/seeds/control_line/session.txt");
    // The worker on its own thread, then on the caller's (the fuzz target's way): the
    // same answers but for the clocks of the stats.
    let mut runs = Vec::new();
    for inline in [false, true] {
        let (open, _inside, _outside) = crate::mem_port::mem_ports();
        let builder = crate::vnf_builder(dir.path());
        let dp = if inline {
            Dataplane::start_inline(&cfg, builder, open)
        } else {
            Dataplane::start_with_ports(&cfg, builder, open)
        }
        .unwrap();
        let ctl = dp.controller();
        let answers: Vec<serde_json::Value> = session
            .lines()
            .map(|l| serde_json::from_str(&ctl.handle_line(l.trim())).unwrap())
            .collect();
        let errors: Vec<bool> = answers.iter().map(|a| a.get("error").is_some()).collect();
        // stats, export fw, import "AAAA" (not a blob), hold, release, drain, release,
        // steer, poll, reconfigure (services), reconfigure (chain), export firewall,
        // bogus, not JSON
        let want = [
            false, false, true, false, false, false, false, true, false, false, false, false, true,
            true,
        ];
        assert_eq!(errors, want, "inline: {inline}: {answers:#?}");
        assert!(answers[0].get("workers").is_some());
        assert_eq!(answers[11]["node"], "firewall");
        let shutdown: serde_json::Value =
            serde_json::from_str(&ctl.handle_line(r#"{"cmd":"shutdown"}"#)).unwrap();
        assert_eq!(shutdown["ok"], true);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dp.finished() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let after = ctl.handle_line(r#"{"cmd":"stats"}"#);
        assert!(after.contains("has stopped"), "inline: {inline}: {after}");
        let last = dp.stop().unwrap();
        assert_eq!(
            last.node("firewall").map(|n| n.name.as_str()),
            Some("firewall")
        );
        runs.push((answers, last.poll));
    }
    let without_clocks = |answers: &[serde_json::Value]| -> Vec<serde_json::Value> {
        answers
            .iter()
            .map(|a| {
                let mut a = a.clone();
                for key in ["uptime_s", "workers", "cpu_pct"] {
                    if let Some(o) = a.as_object_mut() {
                        o.remove(key);
                    }
                }
                a
            })
            .collect()
    };
    assert_eq!(without_clocks(&runs[0].0), without_clocks(&runs[1].0));
    assert_eq!(runs[0].1, runs[1].1);
}
