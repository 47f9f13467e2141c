//! Helpers shared by the integration tests: engines of every kind and one-shot ops.

#![allow(dead_code)]

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use nfx_accel::lookaside::Device;
use nfx_accel::{
    cpu_engine, soft_engine, Alg, Buf, Direction, Engine, EngineKind, Iv, Layout, LookasideEngine,
    Op, SessionSpec, Status,
};

/// This test process's private socket directory (mode 0700, as device sockets need),
/// created on first use; directories left by earlier test processes that are gone are
/// removed then.
pub fn socket_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("nfx-accel-t-") {
                if !std::path::Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = tmp.join(format!("nfx-accel-t-{}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&dir)
            .expect("create the test socket directory");
        dir
    })
    .clone()
}

/// A unique unix socket path for this test process, in its private directory.
pub fn socket_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    socket_dir().join(format!("{tag}-{n}.sock"))
}

/// An in-process device plus one lookaside client on it.
pub struct Lookaside {
    pub device: Device,
    pub engine: LookasideEngine,
}

/// Starts an in-process device with `qps` queue pairs and connects one client.
pub fn lookaside(qps: usize) -> Lookaside {
    let path = socket_path("la");
    let mut cfg = nfx_accel::DeviceConfig::new(&path, qps);
    cfg.slots = 64;
    cfg.ring_size = 64;
    let device = Device::start(cfg).expect("device starts");
    let engine = LookasideEngine::connect(&path, EngineKind::Cpu).expect("client connects");
    Lookaside { device, engine }
}

/// Every engine kind, the lookaside one backed by an in-process device.
pub fn all_engines() -> (Vec<Box<dyn Engine>>, Lookaside) {
    (vec![soft_engine(), cpu_engine()], lookaside(2))
}

/// Result of one operation.
#[derive(Debug, PartialEq, Eq)]
pub struct Out {
    pub status: Status,
    pub data: Vec<u8>,
    pub tag: Vec<u8>,
}

/// Runs one op `[aad][data][tag]` through `e` and returns data and tag.
pub fn run(
    e: &mut dyn Engine,
    spec: &SessionSpec,
    iv: &[u8],
    aad: &[u8],
    data: &[u8],
    tag_in: &[u8],
) -> Out {
    let tag_len = spec.tag_len;
    let sid = e.create_session(spec.clone()).expect("session");
    let mut buf = e
        .alloc_buf(aad.len() + data.len() + tag_len)
        .expect("buffer");
    buf.set_len(aad.len() + data.len() + tag_len).unwrap();
    {
        let b = buf.as_mut_slice();
        b[..aad.len()].copy_from_slice(aad);
        b[aad.len()..aad.len() + data.len()].copy_from_slice(data);
        let t = &mut b[aad.len() + data.len()..];
        t.fill(0);
        t[..tag_in.len().min(tag_len)].copy_from_slice(&tag_in[..tag_in.len().min(tag_len)]);
    }
    let mut ops = vec![Op {
        session: sid,
        iv: Iv::new(iv),
        layout: Layout::packed(aad.len(), data.len()),
        buf,
        user: 7,
    }];
    assert_eq!(e.submit(&mut ops).unwrap(), 1);
    let mut out = Vec::new();
    e.drain(&mut out).unwrap();
    e.destroy_session(sid).unwrap();
    assert_eq!(out.len(), 1);
    let c = out.pop().unwrap();
    assert_eq!(c.op.user, 7);
    assert_eq!(c.op.session, sid);
    let b = c.op.buf.as_slice();
    Out {
        status: c.status,
        data: b[aad.len()..aad.len() + data.len()].to_vec(),
        tag: b[aad.len() + data.len()..].to_vec(),
    }
}

/// Encrypt-direction spec.
pub fn enc(alg: Alg, key: &[u8], auth: &[u8]) -> SessionSpec {
    SessionSpec::new(alg, Direction::Encrypt, key, auth)
}

/// Decrypt-direction spec.
pub fn dec(alg: Alg, key: &[u8], auth: &[u8]) -> SessionSpec {
    SessionSpec::new(alg, Direction::Decrypt, key, auth)
}

/// Hex to bytes.
pub fn hex(s: &str) -> Vec<u8> {
    ::hex::decode(s).expect("a test vector in hex")
}

/// A heap buffer with `data` (for tests that bring their own buffers).
pub fn heap(data: &[u8]) -> Buf {
    Buf::from_slice(data)
}
