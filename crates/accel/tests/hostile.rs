//! Attacks on the lookaside device by a hostile local client, each as a test: resizing
//! the shared region, stopping the device under load and resuming it after the client
//! failed over, flooding sessions and queue pairs, connecting as another user, and
//! writing garbage on the socket and into the ring. In every case the attacker hurts at
//! most itself: the device keeps serving everyone else, and no client ever sees a
//! corrupted or cleartext result.

mod common;

use std::os::fd::AsRawFd;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use nfx_accel::lookaside::testing::{RawClient, Reply};
use nfx_accel::lookaside::{ClientOptions, Device, DeviceConfig};
use nfx_accel::{
    cpu_engine, AccelError, Alg, Completion, Engine, EngineKind, Iv, Layout, LookasideEngine, Op,
    Status,
};

struct DeviceProcess(Child);

impl Drop for DeviceProcess {
    fn drop(&mut self) {
        // SAFETY: plain signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the device binary with `qps` queue pairs and waits until a client can attach.
fn device_process(tag: &str, qps: usize, extra: &[&str]) -> (DeviceProcess, std::path::PathBuf) {
    let path = socket_path(tag);
    let child = Command::new(env!("CARGO_BIN_EXE_nfx-accel-device"))
        .args(["--socket", path.to_str().unwrap()])
        .args(["--queue-pairs", &qps.to_string()])
        .args(extra)
        .spawn()
        .expect("device process starts");
    let dev = DeviceProcess(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "device never bound its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    (dev, path)
}

/// A new client of the device at `path` is served correctly.
fn assert_device_serves(path: &std::path::Path) {
    let mut e = LookasideEngine::connect(path, EngineKind::Cpu).expect("a good client attaches");
    assert_client_served(&mut e);
}

/// The device still answers `e` correctly: one AES-GCM known answer (NIST case 2).
fn assert_client_served(e: &mut LookasideEngine) {
    let o = run(
        e,
        &enc(Alg::Aes128Gcm, &[0; 16], &[]),
        &[0; 12],
        b"",
        &[0; 16],
        &[],
    );
    assert_eq!(o.status, Status::Ok);
    assert_eq!(o.data, hex("0388dace60b6a392f328c2b971b2fe78"));
    assert_eq!(o.tag, hex("ab6e47d42cec13bdf53a67b21257bddf"));
    assert_eq!(
        e.stats().failovers,
        0,
        "served by the device, not the fallback"
    );
}

#[test]
fn ftruncate_of_the_shared_region_does_not_crash_the_device() {
    let (mut dev, path) = device_process("trunc", 3, &[]);
    let attacker = RawClient::connect(&path).unwrap();
    let fd = attacker.region_fd().as_raw_fd();
    // SAFETY: plain syscalls on the attacker's own fd; they are expected to fail.
    unsafe {
        assert_ne!(libc::ftruncate(fd, 0), 0, "shrinking a sealed region");
        assert_eq!(*libc::__errno_location(), libc::EPERM);
        assert_ne!(libc::ftruncate(fd, 1 << 30), 0, "growing a sealed region");
        // Punching a hole only zeroes the attacker's own pages.
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            attacker.region_len() as libc::off_t,
        );
    }
    // The attacker's ring now holds zeros: submitting makes the device read it.
    attacker.set_tail(4);
    std::thread::sleep(Duration::from_millis(100));
    assert!(dev.0.try_wait().unwrap().is_none(), "the device died");
    assert_device_serves(&path);
    assert!(dev.0.try_wait().unwrap().is_none(), "the device died");
}

/// The stop/resume workload: AES-128-GCM, which encrypts each buffer in place from
/// start to end (no keystream computed ahead), so a device resumed in the middle of one
/// finishes encrypting it — a second pass over what the client already re-encrypted
/// would turn it back into cleartext.
fn spec() -> nfx_accel::SessionSpec {
    enc(Alg::Aes128Gcm, &[9; 16], &[])
}

/// Operation `i` on `buf`: `[data][16-byte tag]`.
fn op(sid: nfx_accel::SessionId, i: usize, buf: nfx_accel::Buf) -> Op {
    Op {
        session: sid,
        iv: Iv::new(&((i as u128) << 16).to_be_bytes()[4..]),
        layout: Layout::packed(0, buf.len() - 16),
        buf,
        user: i as u64,
    }
}

/// Bytes per operation: big enough that the device spends most of its time inside
/// operations, so it can be caught in one.
const LEN: usize = 64000;

/// The input of operation `i`.
fn plaintext(i: usize) -> Vec<u8> {
    (0..LEN).map(|j| (i * 131 + j * 7) as u8).collect()
}

/// Checks completions in order against the cpu engine's results for the same inputs:
/// right status and order, never the cleartext, never anything but the reference.
struct Checker {
    cpu: Box<dyn Engine>,
    sid: nfx_accel::SessionId,
    next: usize,
}

impl Checker {
    fn new() -> Checker {
        let mut cpu = cpu_engine();
        let sid = cpu.create_session(spec()).unwrap();
        Checker { cpu, sid, next: 0 }
    }

    fn check(&mut self, c: &Completion) {
        let i = self.next;
        self.next += 1;
        assert_eq!(
            (c.op.user, c.status),
            (i as u64, Status::Ok),
            "order/status"
        );
        let mut ops = vec![op(self.sid, i, heap(&plaintext(i)))];
        self.cpu.submit(&mut ops).unwrap();
        let mut want = Vec::new();
        self.cpu.drain(&mut want).unwrap();
        let got = c.op.buf.as_slice();
        assert!(
            got[..LEN - 16] != plaintext(i)[..LEN - 16],
            "op {i}: cleartext"
        );
        assert!(got == want[0].op.buf.as_slice(), "op {i}: corrupted output");
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in /proc).
fn all_stopped(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            stat.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('T'))
        })
}

/// Fills the ring up to 200 operations numbered from `*next` (below `limit`), all
/// buffers filled first and submitted in one call, so the device sees them at once.
fn top_up(e: &mut LookasideEngine, sid: nfx_accel::SessionId, next: &mut usize, limit: usize) {
    let room = 200usize.saturating_sub(e.in_flight()).min(limit - *next);
    let mut ops: Vec<Op> = (*next..*next + room)
        .map(|i| {
            let mut b = e.alloc_buf(LEN).unwrap();
            b.fill_from(&plaintext(i)).unwrap();
            op(sid, i, b)
        })
        .collect();
    *next += room;
    while !ops.is_empty() {
        e.submit(&mut ops).unwrap();
    }
}

/// Stops the device while it is inside an operation: SIGSTOP when the region shows an
/// entry started and not completed, kept only if it still shows one once every thread
/// has stopped. Returns false if the ring ran dry first.
fn stop_mid_entry(e: &LookasideEngine, pid: i32) -> bool {
    loop {
        let (claim, done, tail) = e.ring_progress();
        if done >= tail {
            return false;
        }
        if claim <= done {
            continue;
        }
        // SAFETY: signals to our own child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        while !all_stopped(pid) {
            std::thread::yield_now();
        }
        let (claim, done, _) = e.ring_progress();
        if claim > done {
            return true;
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
}

/// One client under load: the device is stopped in the middle of an operation, the
/// client fails over and goes on with 400 more operations on its fallback, then the
/// device is resumed. Completions before the stop are checked and dropped as they come
/// (their slots are reused); those after are held until the device has acknowledged
/// the revocation, so a late write by the resumed device into any buffer handed back
/// would show when they are checked. Returns whether a buffer was fenced.
fn run_across_sigstop(path: &std::path::Path, pid: i32) -> bool {
    let mut opts = ClientOptions::new(EngineKind::Cpu);
    opts.stall_timeout = Duration::from_millis(300);
    let mut e = LookasideEngine::connect_with(path, &opts).unwrap();
    let sid = e.create_session(spec()).unwrap();
    let mut checker = Checker::new();
    let (mut next, mut limit) = (0, usize::MAX);
    let mut out = Vec::new();
    let mut fenced = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while checker.next + out.len() < limit {
        assert!(Instant::now() < deadline, "stuck at {next}");
        top_up(&mut e, sid, &mut next, limit);
        if limit == usize::MAX && next > 400 && stop_mid_entry(&e, pid) {
            limit = next + 400;
        }
        e.poll(&mut out, usize::MAX);
        if limit == usize::MAX {
            out.drain(..).for_each(|c| checker.check(&c));
        }
        if fenced.is_none() && e.stats().failovers > 0 {
            fenced = Some(e.fenced_buffers() > 0);
        }
    }
    assert!(fenced.is_some(), "the client never failed over");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // The resumed device finishes the entry it held, acknowledges the revocation, and
    // the fenced buffer is released.
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.fenced_buffers() > 0 {
        assert!(Instant::now() < deadline, "revocation never acknowledged");
        e.poll(&mut out, usize::MAX);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    out.iter().for_each(|c| checker.check(c));
    assert_eq!(checker.next, limit);
    assert_eq!(e.stats().failovers, 1);
    fenced.unwrap_or(false)
}

#[test]
fn sigstop_and_sigcont_of_the_device_under_load_corrupt_nothing() {
    let (dev, path) = device_process("stop", 4, &["--slot-size", "65536"]);
    for round in 0..3 {
        assert!(
            run_across_sigstop(&path, dev.0.id() as i32),
            "round {round}: no buffer was fenced"
        );
    }
    assert_device_serves(&path);
}

fn in_process_device(
    tag: &str,
    qps: usize,
    f: impl FnOnce(&mut DeviceConfig),
) -> (Device, std::path::PathBuf) {
    let path = socket_path(tag);
    let mut cfg = DeviceConfig::new(&path, qps);
    cfg.slots = 16;
    cfg.ring_size = 16;
    f(&mut cfg);
    (Device::start(cfg).unwrap(), path)
}

#[test]
fn a_session_flood_and_a_queue_pair_grab_are_refused_at_their_bounds() {
    let (dev, path) = in_process_device("flood", 4, |c| {
        c.sessions_per_qp = 8;
        c.qps_per_client = 2;
    });
    let mut e = LookasideEngine::connect(&path, EngineKind::Cpu).unwrap();
    let spec = enc(Alg::Aes128Gcm, &[1; 16], &[]);
    let ids: Vec<_> = (0..8)
        .map(|_| e.create_session(spec.clone()).unwrap())
        .collect();
    match e.create_session(spec.clone()) {
        Err(AccelError::Refused(why)) => assert!(why.contains("session table full"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(e.stats().failovers, 0, "a full table is not a dead device");
    e.destroy_session(ids[3]).unwrap();
    e.create_session(spec).unwrap();
    assert_eq!(dev.stats().sessions_refused, 1);
    let _second = LookasideEngine::connect(&path, EngineKind::Cpu).unwrap();
    match LookasideEngine::connect(&path, EngineKind::Cpu) {
        Err(AccelError::Refused(why)) => assert!(why.contains("limit 2 per client"), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert_eq!(dev.stats().refused_capacity, 1);
    assert_eq!(dev.queue_pairs_in_use(), 2);
}

#[test]
fn garbage_on_the_socket_and_in_the_ring_gives_counted_errors() {
    let (dev, path) = in_process_device("garbage", 3, |_| {});
    let mut good = LookasideEngine::connect(&path, EngineKind::Cpu).unwrap();
    let attacker = RawClient::connect(&path).unwrap();
    // Socket: unknown type, truncated create, trailing bytes, oversize, fds attached.
    let mut msgs: Vec<Vec<u8>> = vec![vec![0x99], vec![3, 0, 0, 16, 16], vec![4, 1, 0, 0, 0, 7]];
    msgs.push(vec![6; 4096]);
    for m in &msgs {
        attacker.send_raw(m, &[]).unwrap();
        assert!(
            matches!(attacker.reply().unwrap(), Reply::Error(_)),
            "{m:?}"
        );
    }
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    attacker
        .send_raw(&[4, 0, 0, 0, 0], &[a.as_raw_fd()])
        .unwrap();
    assert!(matches!(attacker.reply().unwrap(), Reply::Error(_)));
    assert_eq!(dev.stats().bad_messages, 5);
    // Ring: random entries complete with BadArgument, in order, counted.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for seq in 0..8u64 {
        let mut e = [0u8; 64];
        for b in e.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        attacker.write_entry(seq, &e);
    }
    attacker.set_tail(8);
    let deadline = Instant::now() + Duration::from_secs(5);
    while attacker.done() < 8 {
        assert!(
            Instant::now() < deadline,
            "device did not complete the garbage"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    for seq in 0..8 {
        assert_eq!(attacker.status(seq), Status::BadArgument as u32);
    }
    assert_eq!(dev.stats().bad_entries, 8);
    // A tail outside the ring: the device stops serving that queue pair only.
    attacker.set_tail(u64::MAX / 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while dev.stats().protocol_violations == 0 {
        assert!(Instant::now() < deadline, "violation not noticed");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The device no longer writes that region (its heartbeat stops).
    std::thread::sleep(Duration::from_millis(20));
    let hb = attacker.heartbeat();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        attacker.heartbeat(),
        hb,
        "the device still writes a stopped region"
    );
    assert_client_served(&mut good);
}

#[test]
#[cfg_attr(nfx_no_root, ignore = "needs root")]
fn a_process_of_another_user_is_refused() {
    let (dev, path) = in_process_device("uid", 2, |_| {});
    use std::os::unix::fs::PermissionsExt;
    // Open the directory and socket to everyone so that only the credential check
    // stands between nobody and the device.
    let dir = path.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    use std::os::unix::process::CommandExt;
    let out = Command::new(env!("CARGO_BIN_EXE_nfx-accel-device"))
        .args(["--probe", path.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nobody attached: {err}");
    assert!(err.contains("uid 65534"), "{err}");
    assert_eq!(dev.stats().refused_peers, 1);
    assert_eq!(dev.stats().admitted, 0);
    assert_device_serves(&path);
}
