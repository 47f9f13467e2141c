//! The lookaside device process: a fixed number of queue pairs, each a shared region with
//! a submission ring and zero-copy buffer slots; one data thread (on its own core) runs
//! the `cpu` engine's code over every queue pair in turn.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::proto::{self, Msg, Recv};
use super::ring::{
    futex_wait, futex_wake, DoorbellView, Geometry, QpView, SqEntry, DOORBELL_LEN, MAGIC,
};
use super::seqpacket;
use super::shm::Mapping;
use crate::backend::{BatchKeystream, Job, Sessions};
use crate::cpu::CpuBackend;
use crate::{AccelError, Iv, Layout, SessionId, Status, MAX_IV};

/// How the device is started (`nfx accel serve` flags).
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Unix socket clients connect to.
    pub socket: PathBuf,
    /// Number of queue pairs (the device's capacity).
    pub queue_pairs: usize,
    /// CPU core to pin the device to.
    pub core: Option<usize>,
    /// Entries per submission ring (power of two).
    pub ring_size: u32,
    /// Zero-copy buffer slots per queue pair.
    pub slots: u32,
    /// Bytes per slot (the largest buffer a client can submit).
    pub slot_size: u32,
    /// How long the data thread keeps polling after its last work before sleeping.
    pub spin: Duration,
}

impl DeviceConfig {
    /// Defaults: 256-entry rings, 768 slots of 16 KiB, 30 µs of polling before sleeping
    /// (a pipelining client keeps the device fed without it; a longer spin only takes CPU
    /// from the clients on a small machine, docs/experiments/accel-switch.md).
    pub fn new(socket: impl Into<PathBuf>, queue_pairs: usize) -> Self {
        DeviceConfig {
            socket: socket.into(),
            queue_pairs,
            core: None,
            ring_size: 256,
            slots: 768,
            slot_size: 16384,
            spin: Duration::from_micros(30),
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            ring_size: self.ring_size,
            slot_count: self.slots,
            slot_size: self.slot_size,
        }
    }
}

struct Qp {
    map: Mapping,
    view: QpView,
    geo: Geometry,
    sessions: Mutex<Sessions<CpuBackend>>,
}

// SAFETY: `view` points into `map`, which the Qp owns.
unsafe impl Sync for Qp {}

struct Shared {
    cfg: DeviceConfig,
    qps: Mutex<Vec<Option<Arc<Qp>>>>,
    generation: AtomicU64,
    doorbell: Mapping,
    doorbell_fd: OwnedFd,
    stop: AtomicBool,
}

impl Shared {
    fn bell(&self) -> DoorbellView {
        DoorbellView::new(self.doorbell.ptr())
    }
}

/// A running device (threads inside this process).
pub struct Device {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Pins the calling thread (and threads it starts later) to one core.
pub fn pin_to_core(core: usize) -> Result<(), AccelError> {
    // SAFETY: cpu_set_t is plain data manipulated through the libc macros.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(AccelError::last_os(format!("pin device to core {core}")));
        }
    }
    Ok(())
}

fn bind(path: &Path) -> Result<OwnedFd, AccelError> {
    let addr = seqpacket::address(path)?;
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| AccelError::Io {
                context: format!("create {}", dir.display()),
                source: e,
            })?;
        }
    }
    // A stale socket file from a dead device would make bind fail.
    let _ = std::fs::remove_file(path);
    let fd = seqpacket::socket()?;
    // SAFETY: valid fd and address.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(AccelError::last_os(format!("bind {}", path.display())));
    }
    // SAFETY: valid fd.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(AccelError::last_os("listen"));
    }
    Ok(fd)
}

impl Device {
    /// Binds the socket and starts the acceptor and data threads.
    pub fn start(cfg: DeviceConfig) -> Result<Device, AccelError> {
        if cfg.queue_pairs == 0 {
            return Err(AccelError::BadArgument(
                "queue-pairs must be at least 1".into(),
            ));
        }
        if !cfg.geometry().valid() {
            return Err(AccelError::BadArgument(format!(
                "invalid ring geometry {:?} (ring a power of two <= 4096, slots 1..=65536, slot size 64 B..1 MiB)",
                cfg.geometry()
            )));
        }
        let listener = bind(&cfg.socket)?;
        let (doorbell_fd, doorbell) = Mapping::memfd(c"nfx-accel-doorbell", DOORBELL_LEN)?;
        let shared = Arc::new(Shared {
            qps: Mutex::new((0..cfg.queue_pairs).map(|_| None).collect()),
            cfg,
            generation: AtomicU64::new(0),
            doorbell,
            doorbell_fd,
            stop: AtomicBool::new(false),
        });
        let s1 = Arc::clone(&shared);
        let s2 = Arc::clone(&shared);
        let threads = vec![
            std::thread::Builder::new()
                .name("accel-accept".into())
                .spawn(move || accept_loop(&s1, listener))
                .map_err(|e| AccelError::Io {
                    context: "spawn acceptor".into(),
                    source: e,
                })?,
            std::thread::Builder::new()
                .name("accel-data".into())
                .spawn(move || data_loop(&s2))
                .map_err(|e| AccelError::Io {
                    context: "spawn data thread".into(),
                    source: e,
                })?,
        ];
        log::info!(
            "accel device on {} with {} queue pairs",
            shared.cfg.socket.display(),
            shared.cfg.queue_pairs
        );
        Ok(Device { shared, threads })
    }

    /// Queue pairs currently held by clients.
    pub fn queue_pairs_in_use(&self) -> usize {
        lock(&self.shared.qps)
            .iter()
            .filter(|q| q.is_some())
            .count()
    }

    /// Stops the threads and removes the socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Blocks until the device stops (it stops only when killed or on a fatal error).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let bell = self.shared.bell();
        bell.bell().fetch_add(1, Ordering::SeqCst);
        super::ring::futex_wake(bell.bell());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.shared.cfg.socket);
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shutdown();
        }
    }
}

/// Runs a device in this process until it is killed: `nfx accel serve`.
pub fn serve(cfg: DeviceConfig) -> Result<(), AccelError> {
    if let Some(core) = cfg.core {
        pin_to_core(core)?;
    }
    Device::start(cfg)?.wait();
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(shared: &Arc<Shared>, listener: OwnedFd) {
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        // SAFETY: valid listening socket.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            continue;
        }
        // SAFETY: fresh fd from accept.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Err(e) = admit(shared, conn) {
            log::warn!("accel device: client set-up failed: {e}");
        }
    }
}

fn admit(shared: &Arc<Shared>, conn: OwnedFd) -> Result<(), AccelError> {
    let mut qps = lock(&shared.qps);
    let Some(index) = qps.iter().position(Option::is_none) else {
        let n = qps.len();
        drop(qps);
        let why = format!("all {n} queue pairs are in use");
        log::info!("accel device: refused a client: {why}");
        return proto::send(conn.as_raw_fd(), &Msg::Refused(why), &[]);
    };
    let geo = shared.cfg.geometry();
    let (fd, map) = Mapping::memfd(c"nfx-accel-qp", geo.total())?;
    let view = QpView::new(map.ptr(), geo);
    view.magic().store(MAGIC, Ordering::SeqCst);
    let qp = Arc::new(Qp {
        map,
        view,
        geo,
        sessions: Mutex::new(Sessions::new()),
    });
    proto::send(
        conn.as_raw_fd(),
        &Msg::Hello {
            qp: index as u32,
            geo,
        },
        &[fd.as_raw_fd(), shared.doorbell_fd.as_raw_fd()],
    )?;
    qps[index] = Some(Arc::clone(&qp));
    drop(qps);
    shared.generation.fetch_add(1, Ordering::SeqCst);
    proto::set_recv_timeout(&conn, Duration::from_millis(200))?;
    let s = Arc::clone(shared);
    std::thread::Builder::new()
        .name(format!("accel-qp{index}"))
        .spawn(move || control_loop(&s, conn, index, qp))
        .map_err(|e| AccelError::Io {
            context: "spawn control thread".into(),
            source: e,
        })?;
    Ok(())
}

fn control_loop(shared: &Shared, conn: OwnedFd, index: usize, qp: Arc<Qp>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let reply = match proto::recv(conn.as_raw_fd()) {
            Ok(Recv::Timeout) => continue,
            Ok(Recv::Closed) | Err(_) => break,
            Ok(Recv::Msg(Msg::Create(spec), _)) => match lock(&qp.sessions).create(&spec) {
                Ok(id) => Msg::Done(id.0),
                Err(e) => Msg::Error(e.to_string()),
            },
            Ok(Recv::Msg(Msg::Destroy(id), _)) => match lock(&qp.sessions).destroy(SessionId(id)) {
                Ok(()) => Msg::Done(id),
                Err(e) => Msg::Error(e.to_string()),
            },
            Ok(Recv::Msg(..)) => Msg::Error("unexpected message".into()),
        };
        if proto::send(conn.as_raw_fd(), &reply, &[]).is_err() {
            break;
        }
    }
    lock(&shared.qps)[index] = None;
    shared.generation.fetch_add(1, Ordering::SeqCst);
    log::info!("accel device: queue pair {index} released");
}

fn data_loop(shared: &Shared) {
    let bell = shared.bell();
    let mut active: Vec<Arc<Qp>> = Vec::new();
    let mut seen_gen = u64::MAX;
    let mut last_work = Instant::now();
    let mut scratch = Scratch::default();
    while !shared.stop.load(Ordering::SeqCst) {
        let g = shared.generation.load(Ordering::SeqCst);
        if g != seen_gen {
            seen_gen = g;
            active = lock(&shared.qps).iter().flatten().cloned().collect();
        }
        bell.heartbeat().fetch_add(1, Ordering::Relaxed);
        let mut did = 0;
        for qp in &active {
            did += process(qp, 64, &mut scratch);
        }
        if did > 0 {
            last_work = Instant::now();
            continue;
        }
        if last_work.elapsed() < shared.cfg.spin {
            std::hint::spin_loop();
            continue;
        }
        // Announce sleep, re-check (clients check `sleeping` after publishing), then wait.
        let seen = bell.bell().load(Ordering::SeqCst);
        bell.sleeping().store(1, Ordering::SeqCst);
        let pending = active.iter().any(|q| {
            q.view.sq_tail().load(Ordering::SeqCst) != q.view.sq_done().load(Ordering::SeqCst)
        });
        if !pending && shared.generation.load(Ordering::SeqCst) == seen_gen {
            futex_wait(bell.bell(), seen, Duration::from_millis(5));
        }
        bell.sleeping().store(0, Ordering::SeqCst);
    }
}

/// Per-pass working memory of the data thread (reused, so nothing is allocated per
/// operation once it has grown).
#[derive(Default)]
struct Scratch {
    entries: Vec<SqEntry>,
    jobs: Vec<Job>,
    keystream: BatchKeystream,
}

/// Whether an entry's slot, length and IV length fit the queue pair's geometry.
fn entry_ok(e: &SqEntry, seq: u64, geo: &Geometry) -> bool {
    e.seq == seq && e.slot < geo.slot_count && e.len <= geo.slot_size && e.iv_len as usize <= MAX_IV
}

fn entry_layout(e: &SqEntry) -> Layout {
    Layout {
        aad_off: e.aad_off,
        aad_len: e.aad_len,
        data_off: e.data_off,
        data_len: e.data_len,
        tag_off: e.tag_off,
    }
}

/// Runs up to `budget` submitted operations of one queue pair, in order. The entries are
/// copied out of shared memory first, so that the keystream of the whole pass can be
/// computed at once (bitsliced PRESENT across packets).
fn process(qp: &Qp, budget: usize, scratch: &mut Scratch) -> usize {
    let v = &qp.view;
    if v.revoked().load(Ordering::Acquire) != 0 {
        return 0;
    }
    let tail = v.sq_tail().load(Ordering::Acquire);
    let mut done = v.sq_done().load(Ordering::Relaxed);
    if tail == done {
        return 0;
    }
    // A tail that runs ahead of the ring is a client bug: only look at one ring's worth.
    let tail = tail.min(done + qp.geo.ring_size as u64);
    let n = ((tail - done) as usize).min(budget);
    scratch.entries.clear();
    scratch.jobs.clear();
    for seq in done..done + n as u64 {
        let e = v.read_entry(seq);
        let ok = entry_ok(&e, seq, &qp.geo);
        scratch.jobs.push(Job {
            session: SessionId(e.session),
            iv: Iv::new(&e.iv[..(e.iv_len as usize).min(MAX_IV)]),
            layout: entry_layout(&e),
            buf_len: if ok { e.len as usize } else { 0 },
        });
        scratch.entries.push(e);
    }
    let mut sessions = lock(&qp.sessions);
    sessions.prepare(&scratch.jobs, &mut scratch.keystream);
    for (i, e) in scratch.entries.iter().enumerate() {
        let status = if !entry_ok(e, done, &qp.geo) {
            Status::BadArgument
        } else {
            let slot_ptr = slot_ptr(qp, e.slot);
            // SAFETY: slot and len were bounds-checked against the geometry; the undo
            // area is one slot long.
            unsafe {
                std::ptr::copy_nonoverlapping(slot_ptr, v.undo_ptr(), e.len as usize);
            }
            v.undo_slot().store(e.slot, Ordering::Relaxed);
            v.undo_len().store(e.len, Ordering::Relaxed);
            v.undo_seq().store(done + 1, Ordering::Release);
            // SAFETY: the client gave this slot to the device until the entry completes.
            let buf = unsafe { std::slice::from_raw_parts_mut(slot_ptr, e.len as usize) };
            let job = &scratch.jobs[i];
            sessions.run(
                job.session,
                &job.iv,
                &job.layout,
                buf,
                scratch.keystream.get(i),
            )
        };
        v.write_status(done, status as u32);
        done += 1;
        v.sq_done().store(done, Ordering::Release);
    }
    drop(sessions);
    // A client asleep on its completions (`LookasideEngine::wait_ready`) is woken once
    // the entry it waits for is done. Pairs with the client's store of cq_want before
    // it re-reads sq_done: one of the two sides sees the other's write.
    std::sync::atomic::fence(Ordering::SeqCst);
    let want = v.cq_want().load(Ordering::SeqCst);
    if want != 0
        && done >= want
        && v.cq_want()
            .compare_exchange(want, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        v.cq_bell().fetch_add(1, Ordering::SeqCst);
        futex_wake(v.cq_bell());
    }
    n
}

fn slot_ptr(qp: &Qp, slot: u32) -> *mut u8 {
    // SAFETY: callers checked slot < slot_count; the region holds every slot.
    unsafe {
        qp.map
            .ptr()
            .add(qp.geo.slots_off() + slot as usize * qp.geo.slot_size as usize)
    }
}
