//! The lookaside device: capacity refusal, zero-copy and bounce buffers, ordering of
//! completions, drain-then-switch, and failover when the device process is killed
//! mid-batch (every operation still completes correctly).

mod common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use nfx_accel::{
    cpu_engine, AccelError, Alg, Completion, Engine, EngineKind, Iv, Layout, LookasideEngine, Op,
    SessionId, Status,
};

fn ops_for(
    e: &mut dyn Engine,
    sid: SessionId,
    n: usize,
    len: usize,
    from_pool: bool,
    iv_len: usize,
) -> Vec<Op> {
    (0..n)
        .map(|i| {
            let mut buf = if from_pool {
                e.alloc_buf(len + 16).unwrap()
            } else {
                heap(&[0; 0])
            };
            let data: Vec<u8> = (0..len + 16).map(|j| (i * 7 + j) as u8).collect();
            if from_pool {
                buf.fill_from(&data).unwrap();
            } else {
                buf = heap(&data);
            }
            Op {
                session: sid,
                iv: Iv::new(&(i as u128).to_be_bytes()[16 - iv_len..]),
                layout: Layout::packed(0, len),
                buf,
                user: i as u64,
            }
        })
        .collect()
}

fn submit_all(e: &mut dyn Engine, mut ops: Vec<Op>, out: &mut Vec<Completion>) {
    while !ops.is_empty() {
        if e.submit(&mut ops).unwrap() == 0 {
            e.poll(out, usize::MAX);
        }
    }
    e.drain(out).unwrap();
}

/// The reference result of op `i` computed on the cpu engine.
fn reference(alg: Alg, n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut cpu = cpu_engine();
    let sid = cpu.create_session(enc(alg, &[4; 16], &[8; 32])).unwrap();
    let ops = ops_for(cpu.as_mut(), sid, n, len, false, alg.iv_len());
    let mut out = Vec::new();
    submit_all(cpu.as_mut(), ops, &mut out);
    assert!(out.iter().all(|c| c.status == Status::Ok));
    out.into_iter()
        .map(|c| c.op.buf.as_slice().to_vec())
        .collect()
}

#[test]
fn capacity_is_enforced_and_released() {
    let la = lookaside(1);
    let path = socket_path("cap");
    drop(la);
    let mut cfg = nfx_accel::DeviceConfig::new(&path, 1);
    cfg.slots = 8;
    cfg.ring_size = 8;
    let dev = nfx_accel::lookaside::Device::start(cfg).unwrap();
    let first = LookasideEngine::connect(&path, EngineKind::Cpu).unwrap();
    match LookasideEngine::connect(&path, EngineKind::Cpu) {
        Err(AccelError::Refused(why)) => {
            assert!(why.contains("all 1 queue pairs are in use"), "{why}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert_eq!(dev.queue_pairs_in_use(), 1);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match LookasideEngine::connect(&path, EngineKind::Cpu) {
            Ok(_) => break,
            Err(AccelError::Refused(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("queue pair not released: {e}"),
        }
    }
    assert!(LookasideEngine::connect(&socket_path("none"), EngineKind::Cpu).is_err());
    assert!(LookasideEngine::connect(&path, EngineKind::Lookaside).is_err());
}

#[test]
fn zero_copy_and_bounce_buffers_complete_in_order() {
    let mut la = lookaside(1);
    let e = &mut la.engine;
    let sid = e
        .create_session(enc(Alg::Aes128CtrHmacSha256, &[4; 16], &[8; 32]))
        .unwrap();
    let want = reference(Alg::Aes128CtrHmacSha256, 60, 700);
    for from_pool in [true, false] {
        let ops = ops_for(e, sid, 60, 700, from_pool, 16);
        let mut out = Vec::new();
        submit_all(e, ops, &mut out);
        assert_eq!(out.len(), 60);
        for (i, c) in out.iter().enumerate() {
            assert_eq!(c.op.user, i as u64, "order");
            assert_eq!(c.status, Status::Ok);
            assert_eq!(c.op.buf.as_slice(), &want[i][..], "op {i} pool={from_pool}");
        }
    }
    // An op whose buffer cannot fit a device slot is rejected in order, not lost.
    let mut ops = vec![Op {
        session: sid,
        iv: Iv::new(&[0; 16]),
        layout: Layout::packed(0, 10),
        buf: heap(&vec![0; 70_000]),
        user: 99,
    }];
    let mut out = Vec::new();
    submit_all(e, std::mem::take(&mut ops), &mut out);
    assert_eq!(out[0].status, Status::BadArgument);
    assert_eq!(e.stats().failovers, 0);
    assert!(e.alloc_buf(1 << 20).is_err());
}

#[test]
fn wait_ready_is_woken_by_the_device_per_batch() {
    let mut la = lookaside(1);
    let e = &mut la.engine;
    let alg = Alg::Aes128CtrHmacSha256;
    let sid = e.create_session(enc(alg, &[4; 16], &[8; 32])).unwrap();
    let (n, len) = (60, 16000);
    let want = reference(alg, n, len);
    // Nothing in flight: returns at once.
    let t0 = Instant::now();
    e.wait_ready(1, Duration::from_secs(2));
    assert!(t0.elapsed() < Duration::from_secs(1));
    // Three batches in flight at once, collected batch by batch as a pipelined tunnel does.
    let mut ops = ops_for(e, sid, n, len, true, 16);
    while !ops.is_empty() {
        assert!(
            e.submit(&mut ops).unwrap() > 0,
            "ring and slots hold all ops"
        );
    }
    let mut out = Vec::new();
    for batch in 0..3 {
        let t0 = Instant::now();
        while out.len() < (batch + 1) * 20 {
            let missing = (batch + 1) * 20 - out.len();
            e.wait_ready(missing, Duration::from_secs(2));
            e.poll(&mut out, missing);
        }
        // A device that never rang the completion bell leaves the client asleep for
        // the whole 2 s timeout.
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "batch {batch}: {:?}",
            t0.elapsed()
        );
    }
    assert_eq!(e.in_flight(), 0);
    for (i, c) in out.iter().enumerate() {
        assert_eq!((c.op.user, c.status), (i as u64, Status::Ok), "order");
        assert_eq!(c.op.buf.as_slice(), &want[i][..], "op {i}");
    }
}

#[test]
fn drain_then_switch_engine_keeps_order() {
    let mut la = lookaside(1);
    let mut soft = nfx_accel::soft_engine();
    let spec = enc(Alg::Aes128Gcm, &[1; 16], &[]);
    let s_la = la.engine.create_session(spec.clone()).unwrap();
    let s_soft = soft.create_session(spec).unwrap();
    let mut out = Vec::new();
    let mut next = 0u64;
    for round in 0..6 {
        let (e, sid): (&mut dyn Engine, SessionId) = if round % 2 == 0 {
            (&mut la.engine, s_la)
        } else {
            (soft.as_mut(), s_soft)
        };
        let mut ops: Vec<Op> = (0..40)
            .map(|_| {
                next += 1;
                let mut nonce = [0u8; 12];
                nonce[4..].copy_from_slice(&next.to_be_bytes());
                Op {
                    session: sid,
                    iv: Iv::new(&nonce),
                    layout: Layout::packed(8, 100),
                    buf: heap(&[next as u8; 124]),
                    user: next,
                }
            })
            .collect();
        while !ops.is_empty() {
            e.submit(&mut ops).unwrap();
        }
        e.drain(&mut out).unwrap();
        assert_eq!(e.in_flight(), 0);
    }
    let users: Vec<u64> = out.iter().map(|c| c.op.user).collect();
    assert_eq!(users, (1..=240).collect::<Vec<_>>());
    assert!(out.iter().all(|c| c.status == Status::Ok));
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn killing_the_device_mid_batch_loses_nothing() {
    let path = socket_path("kill");
    let child = Command::new(env!("CARGO_BIN_EXE_nfx-accel-device"))
        .args(["--socket", path.to_str().unwrap(), "--queue-pairs", "1"])
        .spawn()
        .expect("device process starts");
    let mut dev = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut e = loop {
        match LookasideEngine::connect(&path, EngineKind::Cpu) {
            Ok(e) => break e,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("device never came up: {e}"),
        }
    };
    // PRESENT is slow enough that the device is still busy when it is killed.
    let alg = Alg::Present128CtrHmacSha256;
    let n = 600;
    let len = 8000;
    let sid = e.create_session(enc(alg, &[4; 16], &[8; 32])).unwrap();
    let want = reference(alg, n, len);
    let mut half_pool = ops_for(&mut e, sid, 300, len, true, 8);
    let heap_ops = ops_for(&mut e, sid, 300, len, false, 8);
    // Re-number the heap ops so users/IVs continue from 300 as in the reference.
    let mut ops: Vec<Op> = Vec::new();
    ops.append(&mut half_pool);
    for (k, mut op) in heap_ops.into_iter().enumerate() {
        let i = 300 + k;
        let data: Vec<u8> = (0..len + 16).map(|j| (i * 7 + j) as u8).collect();
        op.buf = heap(&data);
        op.iv = Iv::new(&(i as u64).to_be_bytes());
        op.user = i as u64;
        ops.push(op);
    }
    let mut out = Vec::new();
    let mut killed_with_in_flight = 0;
    while !ops.is_empty() || e.in_flight() > 0 {
        e.submit(&mut ops).unwrap();
        e.poll(&mut out, usize::MAX);
        if killed_with_in_flight == 0 && out.len() >= 20 {
            killed_with_in_flight = e.in_flight();
            dev.0.kill().unwrap();
            dev.0.wait().unwrap();
        }
        assert!(Instant::now() < deadline + Duration::from_secs(60), "stuck");
    }
    assert!(
        killed_with_in_flight > 0,
        "device finished before it was killed"
    );
    assert_eq!(out.len(), n);
    for (i, c) in out.iter().enumerate() {
        assert_eq!(c.op.user, i as u64, "completion order");
        assert_eq!(c.status, Status::Ok, "op {i}");
        assert_eq!(c.op.buf.as_slice(), &want[i][..], "op {i} content");
    }
    let st = e.stats();
    assert_eq!(st.failovers, 1);
    assert!(st.resubmitted > 0);
    assert_eq!(e.active(), EngineKind::Cpu);
    // Sessions keep working on the fallback, including new ones.
    let s2 = e
        .create_session(enc(Alg::Aes128Gcm, &[2; 16], &[]))
        .unwrap();
    let o = run(
        &mut e,
        &enc(Alg::Aes128Gcm, &[2; 16], &[]),
        &[0; 12],
        b"",
        b"abc",
        &[],
    );
    assert_eq!(o.status, Status::Ok);
    e.destroy_session(s2).unwrap();
}

#[test]
fn device_sockets_in_open_directories_are_refused_on_both_sides() {
    use std::os::unix::fs::PermissionsExt;
    let la = lookaside(1);
    let dir = socket_dir().join("open");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The device will not listen where anyone could replace its socket...
    match nfx_accel::lookaside::Device::start(nfx_accel::DeviceConfig::new(dir.join("d.sock"), 1)) {
        Err(AccelError::BadArgument(why)) => {
            assert!(why.contains("writable by group or others"), "{why}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // ...and a client will not connect to a socket found there (here: a link to a
    // real device's socket, which is also not a socket itself).
    std::os::unix::fs::symlink(socket_dir().join("la-0.sock"), dir.join("link.sock")).unwrap();
    assert!(matches!(
        LookasideEngine::connect(&dir.join("link.sock"), EngineKind::Cpu),
        Err(AccelError::BadArgument(_))
    ));
    // With a configured device directory, a socket outside it is refused.
    let mut opts = nfx_accel::ClientOptions::new(EngineKind::Cpu);
    opts.device_dir = Some(dir.clone());
    let path = socket_path("outside");
    let dev = nfx_accel::lookaside::Device::start(nfx_accel::DeviceConfig::new(&path, 1)).unwrap();
    match LookasideEngine::connect_with(&path, &opts) {
        Err(AccelError::BadArgument(why)) => assert!(why.contains("outside"), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    opts.device_dir = Some(socket_dir());
    assert!(LookasideEngine::connect_with(&path, &opts).is_ok());
    drop((dev, la));
    std::fs::remove_dir_all(&dir).unwrap();
}
