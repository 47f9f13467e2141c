//! The lookaside device process: a fixed number of queue pairs, each a sealed shared
//! region with a submission ring and zero-copy buffer slots plus the client's own
//! doorbell; one data thread (on its own core) runs the `cpu` engine's code over every
//! queue pair in turn. Clients are admitted by peer credentials, bounded in queue pairs
//! and sessions, and whatever they write into their region can only hurt themselves.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nfx_io::peer::{check_private_dir, restrict_socket, PeerPolicy};
use nfx_io::{Notifier, Waiter};
use serde::Serialize;

use super::proto::{self, Msg, Recv};
use super::ring::{futex_wake, Geometry, QpView, SqEntry, MAGIC};
use super::seqpacket;
use super::shm::Mapping;
use crate::backend::{BatchKeystream, Job, Sessions};
use crate::cpu::CpuBackend;
use crate::engine::EngineStats;
use crate::{AccelError, Iv, Layout, SessionId, Status, MAX_IV};

/// How the device is started (`nfx accel serve` flags).
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Unix socket clients connect to; its directory must be private to this user (the
    /// device creates it, mode 0700 — 0750 with `group` — when it does not exist).
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
    /// Sessions one queue pair may hold at once.
    pub sessions_per_qp: usize,
    /// Queue pairs one client process may hold at once.
    pub qps_per_client: usize,
    /// A group (gid) whose members may use the device besides its own user.
    pub group: Option<u32>,
}

impl DeviceConfig {
    /// Defaults: 256-entry rings, 768 slots of 16 KiB, 30 µs of polling before sleeping
    /// (a pipelining client keeps the device fed without it; a longer spin only takes CPU
    /// from the clients on a small machine, docs/experiments/accel-switch.md), 1024
    /// sessions per queue pair, 4 queue pairs per client process, no extra group.
    pub fn new(socket: impl Into<PathBuf>, queue_pairs: usize) -> Self {
        DeviceConfig {
            socket: socket.into(),
            queue_pairs,
            core: None,
            ring_size: 256,
            slots: 768,
            slot_size: 16384,
            spin: Duration::from_micros(30),
            sessions_per_qp: 1024,
            qps_per_client: 4,
            group: None,
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            ring_size: self.ring_size,
            slot_count: self.slots,
            slot_size: self.slot_size,
        }
    }

    fn validate(&self) -> Result<(), AccelError> {
        let bad = |s: String| Err(AccelError::BadArgument(s));
        if self.queue_pairs == 0 {
            return bad("queue-pairs must be at least 1".into());
        }
        if self.sessions_per_qp == 0 || self.qps_per_client == 0 {
            return bad(
                "sessions per queue pair and queue pairs per client must be at least 1".into(),
            );
        }
        if !self.geometry().valid() {
            return bad(format!(
                "invalid ring geometry {:?} (ring a power of two <= 4096, slots 1..=65536, slot size 64 B..1 MiB)",
                self.geometry()
            ));
        }
        Ok(())
    }
}

/// What the device counts (all since it started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceStats {
    /// Clients given a queue pair.
    pub admitted: u64,
    /// Connections refused by the peer-credential check.
    pub refused_peers: u64,
    /// Connections refused because every queue pair, or the client's share, is taken.
    pub refused_capacity: u64,
    /// Control messages that were malformed, unexpected or carried descriptors.
    pub bad_messages: u64,
    /// Session creations refused because the queue pair's table is full.
    pub sessions_refused: u64,
    /// Ring entries that failed the device's checks (sequence, slot, length, IV).
    pub bad_entries: u64,
    /// Queue pairs the device stopped serving because the client broke the ring
    /// protocol (a tail behind the device or more than a ring ahead).
    pub protocol_violations: u64,
    /// Queue pairs revoked by their client (failover) and acknowledged.
    pub revocations: u64,
    /// Ring entries completed, with any status.
    pub ops: u64,
}

/// One held queue pair as the device sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QpStats {
    /// Its index among the device's queue pairs.
    pub index: usize,
    /// The holding client's process id.
    pub pid: i32,
    /// Sessions open on it.
    pub sessions: usize,
    /// Ring entries submitted and not yet completed (at most `ring_size`).
    pub in_flight: u64,
    /// Entries the ring holds.
    pub ring_size: u32,
    /// Whether the device still serves it (not revoked, not broken by its client).
    pub served: bool,
    /// What its completed entries did.
    pub work: EngineStats,
}

/// A view of a running device's counters that outlives the borrow of [`Device`] (the
/// metrics endpoint reads it while [`serve`] waits on the device).
#[derive(Clone)]
pub struct DeviceProbe(Arc<Shared>);

impl DeviceProbe {
    /// The device's counters.
    pub fn stats(&self) -> DeviceStats {
        self.0.counters.snapshot()
    }

    /// Queue pairs configured.
    pub fn queue_pairs(&self) -> usize {
        self.0.cfg.queue_pairs
    }

    /// The held queue pairs.
    pub fn held(&self) -> Vec<QpStats> {
        lock(&self.0.qps)
            .iter()
            .enumerate()
            .filter_map(|(index, q)| q.as_ref().map(|q| (index, Arc::clone(q))))
            .map(|(index, q)| qp_stats(index, &q))
            .collect()
    }
}

fn qp_stats(index: usize, q: &Qp) -> QpStats {
    let done = q.done.load(Ordering::Relaxed);
    let tail = q.view.sq_tail().load(Ordering::Relaxed);
    QpStats {
        index,
        pid: q.pid,
        sessions: q.sessions().live(),
        // The tail is the client's to write: clamp what a broken client may claim.
        in_flight: tail.wrapping_sub(done).min(u64::from(q.geo.ring_size)),
        ring_size: q.geo.ring_size,
        served: !q.stopped.load(Ordering::Relaxed),
        work: *lock(&q.work),
    }
}

#[derive(Default)]
struct Counters {
    admitted: AtomicU64,
    refused_peers: AtomicU64,
    refused_capacity: AtomicU64,
    bad_messages: AtomicU64,
    sessions_refused: AtomicU64,
    bad_entries: AtomicU64,
    protocol_violations: AtomicU64,
    revocations: AtomicU64,
    ops: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> DeviceStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DeviceStats {
            admitted: g(&self.admitted),
            refused_peers: g(&self.refused_peers),
            refused_capacity: g(&self.refused_capacity),
            bad_messages: g(&self.bad_messages),
            sessions_refused: g(&self.sessions_refused),
            bad_entries: g(&self.bad_entries),
            protocol_violations: g(&self.protocol_violations),
            revocations: g(&self.revocations),
            ops: g(&self.ops),
        }
    }
}

/// One client's queue pair. Its connection closes only when the last holder drops it —
/// the data thread, after it stopped looking at the region — so a client that sees
/// end-of-file knows the device will not touch its memory again.
pub(super) struct Qp {
    map: Mapping,
    view: QpView,
    geo: Geometry,
    sessions: Mutex<Sessions<CpuBackend>>,
    bell: Notifier,
    conn: OwnedFd,
    pid: i32,
    /// Entries completed: the device's own count (the shared `sq_done` is only a copy).
    done: AtomicU64,
    /// What the completed entries did (ops, bytes, failures), for the device's metrics.
    work: Mutex<EngineStats>,
    /// The device no longer serves the region (revoked by its client, or broken by it).
    stopped: AtomicBool,
    /// The client's connection ended; the queue pair is being released.
    closing: AtomicBool,
}

// SAFETY: `view` points into `map`, which the Qp owns; cross-process fields are atomics.
unsafe impl Sync for Qp {}

impl Qp {
    /// A queue pair with a fresh sealed region, doorbell and session table.
    pub(super) fn new(
        geo: Geometry,
        sessions: usize,
        conn: OwnedFd,
        pid: i32,
    ) -> Result<(Qp, OwnedFd), AccelError> {
        let (fd, map) = Mapping::memfd(c"nfx-accel-qp", geo.total())?;
        let view = QpView::new(map.ptr(), geo);
        view.magic().store(MAGIC, Ordering::SeqCst);
        let bell = Notifier::new().map_err(|e| AccelError::Io {
            context: "create doorbell eventfd".into(),
            source: e,
        })?;
        let qp = Qp {
            map,
            view,
            geo,
            sessions: Mutex::new(Sessions::with_limit(sessions)),
            bell,
            conn,
            pid,
            done: AtomicU64::new(0),
            work: Mutex::new(EngineStats::default()),
            stopped: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        };
        Ok((qp, fd))
    }

    /// The region's submission/completion view (tests and fuzzing write it directly).
    pub(super) fn view(&self) -> QpView {
        self.view
    }

    /// The session table (tests and fuzzing create sessions directly).
    pub(super) fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions<CpuBackend>> {
        lock(&self.sessions)
    }

    /// Raw pointer to the first byte of `slot` (callers checked `slot < slot_count`).
    pub(super) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        // SAFETY: slot < slot_count, so the slot lies inside the region.
        unsafe {
            self.map
                .ptr()
                .add(self.geo.slots_off() + slot as usize * self.geo.slot_size as usize)
        }
    }
}

struct Shared {
    cfg: DeviceConfig,
    policy: PeerPolicy,
    qps: Mutex<Vec<Option<Arc<Qp>>>>,
    generation: AtomicU64,
    /// Wakes the data thread when the set of queue pairs changes or the device stops.
    wake: Notifier,
    stop: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.wake.notify();
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

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> AccelError {
    move |source| AccelError::Io { context, source }
}

/// Creates the socket's directory private (0700, or 0750 owned by `group`) when it does
/// not exist, and refuses one that others could write to.
fn prepare_dir(dir: &Path, group: Option<u32>) -> Result<(), AccelError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(if group.is_some() { 0o750 } else { 0o700 })
            .create(dir)
            .map_err(io_err(format!("create {}", dir.display())))?;
        if let Some(g) = group {
            std::os::unix::fs::chown(dir, None, Some(g))
                .map_err(io_err(format!("chown {} to group {g}", dir.display())))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
                .map_err(io_err(format!("chmod {}", dir.display())))?;
        }
    }
    check_private_dir(dir).map_err(|e| AccelError::BadArgument(format!("socket directory: {e}")))
}

fn bind(path: &Path, group: Option<u32>) -> Result<OwnedFd, AccelError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    prepare_dir(dir, group)?;
    // A stale socket file from a dead device would make bind fail.
    let _ = std::fs::remove_file(path);
    let fd = seqpacket::bind(path)?;
    restrict_socket(path, group).map_err(io_err(format!("restricting {}", path.display())))?;
    // SAFETY: valid fd.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(AccelError::last_os("listen"));
    }
    Ok(fd)
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, AccelError> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(io_err(format!("spawn {name}")))
}

impl Device {
    /// Binds the socket and starts the acceptor and data threads.
    pub fn start(cfg: DeviceConfig) -> Result<Device, AccelError> {
        cfg.validate()?;
        let listener = bind(&cfg.socket, cfg.group)?;
        let shared = Arc::new(Shared {
            qps: Mutex::new((0..cfg.queue_pairs).map(|_| None).collect()),
            policy: PeerPolicy { group: cfg.group },
            cfg,
            generation: AtomicU64::new(0),
            wake: Notifier::new().map_err(io_err("create wake eventfd".into()))?,
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let s1 = Arc::clone(&shared);
        let s2 = Arc::clone(&shared);
        let threads = vec![
            spawn("accel-accept".into(), move || accept_loop(&s1, listener))?,
            spawn("accel-data".into(), move || data_loop(&s2))?,
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

    /// The device's counters.
    pub fn stats(&self) -> DeviceStats {
        self.shared.counters.snapshot()
    }

    /// A probe of the device's counters and queue pairs.
    pub fn probe(&self) -> DeviceProbe {
        DeviceProbe(Arc::clone(&self.shared))
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
        self.shared.wake.notify();
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

/// Runs a device in this process until it is killed: `nfx accel serve`. `started` gets
/// a probe of the device once it listens (a metrics endpoint keeps it).
pub fn serve(cfg: DeviceConfig, started: impl FnOnce(DeviceProbe)) -> Result<(), AccelError> {
    if let Some(core) = cfg.core {
        pin_to_core(core)?;
    }
    let dev = Device::start(cfg)?;
    started(dev.probe());
    // Listening now: tell systemd (`Type=notify`) when it started this process.
    nfx_io::notify::ready().map_err(|source| AccelError::Io {
        context: "notifying systemd ($NOTIFY_SOCKET)".into(),
        source,
    })?;
    dev.wait();
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

/// Refuses a connection with a reason (the message is best effort: the peer may be gone).
fn refuse(conn: &OwnedFd, counter: &AtomicU64, why: String) -> Result<(), AccelError> {
    bump(counter);
    log::info!("accel device: refused a client: {why}");
    let _ = proto::set_timeouts(conn, Duration::from_millis(100));
    let _ = proto::send(conn.as_raw_fd(), &Msg::Refused(why), &[]);
    Ok(())
}

fn admit(shared: &Arc<Shared>, conn: OwnedFd) -> Result<(), AccelError> {
    let c = &shared.counters;
    let cred = match shared.policy.check(conn.as_fd()) {
        Ok(cred) => cred,
        Err(why) => return refuse(&conn, &c.refused_peers, why),
    };
    let mut qps = lock(&shared.qps);
    let held = qps.iter().flatten().filter(|q| q.pid == cred.pid).count();
    if held >= shared.cfg.qps_per_client {
        let why = format!(
            "client pid {} already holds {held} queue pairs (limit {} per client)",
            cred.pid, shared.cfg.qps_per_client
        );
        drop(qps);
        return refuse(&conn, &c.refused_capacity, why);
    }
    let Some(index) = qps.iter().position(Option::is_none) else {
        let why = format!("all {} queue pairs are in use", qps.len());
        drop(qps);
        return refuse(&conn, &c.refused_capacity, why);
    };
    proto::set_timeouts(&conn, Duration::from_millis(200))?;
    let geo = shared.cfg.geometry();
    let (qp, region) = Qp::new(geo, shared.cfg.sessions_per_qp, conn, cred.pid)?;
    proto::send(
        qp.conn.as_raw_fd(),
        &Msg::Hello {
            qp: index as u32,
            geo,
        },
        &[region.as_raw_fd(), qp.bell.as_fd().as_raw_fd()],
    )?;
    let qp = Arc::new(qp);
    qps[index] = Some(Arc::clone(&qp));
    drop(qps);
    bump(&c.admitted);
    shared.changed();
    let s = Arc::clone(shared);
    spawn(format!("accel-qp{index}"), move || {
        control_loop(&s, &qp);
        qp.closing.store(true, Ordering::SeqCst);
        lock(&s.qps)[index] = None;
        drop(qp);
        s.changed();
        log::info!("accel device: queue pair {index} released");
    })?;
    Ok(())
}

/// Serves one client's session requests until it disconnects or the device stops.
fn control_loop(shared: &Shared, qp: &Qp) {
    let conn = qp.conn.as_raw_fd();
    while !shared.stop.load(Ordering::SeqCst) {
        let received = match proto::recv(conn) {
            Ok(Recv::Timeout) => continue,
            Ok(Recv::Closed) | Err(_) => break,
            Ok(r) => r,
        };
        let reply = answer(&shared.counters, qp, received);
        if proto::send(conn, &reply, &[]).is_err() {
            break;
        }
    }
}

/// The device's answer to one message from a client: sessions are created in the
/// client's bounded table; anything else is an error, counted.
fn answer(c: &Counters, qp: &Qp, received: Recv) -> Msg {
    match received {
        Recv::Msg(_, fds) if !fds.is_empty() => {
            bump(&c.bad_messages);
            Msg::Error("control messages to the device carry no descriptors".into())
        }
        Recv::Msg(Msg::Create(spec), _) => match qp.sessions().create(&spec) {
            Ok(id) => Msg::Done(id.0),
            Err(AccelError::Refused(why)) => {
                bump(&c.sessions_refused);
                Msg::Refused(why)
            }
            Err(e) => Msg::Error(e.to_string()),
        },
        Recv::Msg(Msg::Destroy(id), _) => match qp.sessions().destroy(SessionId(id)) {
            Ok(()) => Msg::Done(id),
            Err(e) => Msg::Error(e.to_string()),
        },
        Recv::Bad(why) => {
            bump(&c.bad_messages);
            Msg::Error(why.into())
        }
        Recv::Msg(..) | Recv::Closed | Recv::Timeout => {
            bump(&c.bad_messages);
            Msg::Error("unexpected message".into())
        }
    }
}

fn data_loop(shared: &Shared) {
    let mut active: Vec<Arc<Qp>> = Vec::new();
    let mut waiter = Waiter::new(&[shared.wake.fd()]);
    let mut seen_gen = u64::MAX;
    let mut last_work = Instant::now();
    let mut scratch = Scratch::default();
    let mut beat = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let g = shared.generation.load(Ordering::SeqCst);
        if g != seen_gen {
            seen_gen = g;
            // Queue pairs the device stopped serving are left out: it never writes their
            // regions again and does not wake for their doorbells.
            active = lock(&shared.qps)
                .iter()
                .flatten()
                .filter(|q| !q.stopped.load(Ordering::Relaxed))
                .cloned()
                .collect();
            let mut fds = vec![shared.wake.fd()];
            fds.extend(active.iter().map(|q| q.bell.fd()));
            waiter = Waiter::new(&fds);
        }
        beat += 1;
        for qp in &active {
            qp.view.heartbeat().store(beat, Ordering::Relaxed);
        }
        let mut did = 0;
        for qp in &active {
            did += process(qp, 64, &mut scratch, &shared.counters);
        }
        if active.iter().any(|q| q.stopped.load(Ordering::Relaxed)) {
            seen_gen = u64::MAX;
        }
        if did > 0 {
            last_work = Instant::now();
            continue;
        }
        if last_work.elapsed() < shared.cfg.spin {
            std::hint::spin_loop();
            continue;
        }
        sleep(shared, &active, &mut waiter, seen_gen);
    }
}

/// Announces sleep in every served region (`active` holds only served ones: a queue
/// pair stopped during the last pass forced a rebuild), re-checks for work (clients
/// check the flag after publishing their tail), then waits for a doorbell, a change or
/// 5 ms.
fn sleep(shared: &Shared, active: &[Arc<Qp>], waiter: &mut Waiter, seen_gen: u64) {
    if seen_gen == u64::MAX {
        return;
    }
    for qp in active {
        qp.view.dev_sleeping().store(1, Ordering::SeqCst);
    }
    let pending = active
        .iter()
        .any(|q| q.view.sq_tail().load(Ordering::SeqCst) != q.done.load(Ordering::Relaxed));
    if !pending && shared.generation.load(Ordering::SeqCst) == seen_gen {
        let _ = waiter.wait(Duration::from_millis(5));
    }
    for qp in active {
        qp.view.dev_sleeping().store(0, Ordering::SeqCst);
        qp.bell.clear();
    }
    shared.wake.clear();
}

/// Per-pass working memory of the data thread (reused, so nothing is allocated per
/// operation once it has grown).
#[derive(Default)]
struct Scratch {
    entries: Vec<SqEntry>,
    jobs: Vec<Job>,
    keystream: BatchKeystream,
}

fn add_work(total: &mut EngineStats, w: &EngineStats) {
    total.ops += w.ops;
    total.bytes += w.bytes;
    total.auth_failures += w.auth_failures;
    total.rejected += w.rejected;
}

/// Whether an entry's sequence number, slot, length and IV length fit the queue pair.
fn entry_ok(e: &SqEntry, seq: u64, geo: &Geometry) -> bool {
    e.seq == seq && e.slot < geo.slot_count && e.len <= geo.slot_size && e.iv_len as usize <= MAX_IV
}

fn entry_job(e: &SqEntry, ok: bool) -> Job {
    Job {
        session: SessionId(e.session),
        iv: Iv::new(&e.iv[..(e.iv_len as usize).min(MAX_IV)]),
        layout: Layout {
            aad_off: e.aad_off,
            aad_len: e.aad_len,
            data_off: e.data_off,
            data_len: e.data_len,
            tag_off: e.tag_off,
        },
        buf_len: if ok { e.len as usize } else { 0 },
    }
}

/// Stops serving a queue pair whose client revoked it, and says so in its region.
fn acknowledge_revocation(qp: &Qp, c: &Counters) {
    if !qp.stopped.swap(true, Ordering::SeqCst) {
        qp.view.revoke_ack().store(1, Ordering::SeqCst);
        bump(&c.revocations);
        log::info!("accel device: a client revoked its queue pair (failover)");
    }
}

/// Runs up to `budget` submitted operations of one queue pair, in order. The entries are
/// copied out of shared memory and checked first, so the keystream of the whole pass
/// can be computed at once (bitsliced PRESENT across packets) and nothing the client
/// writes later changes what the device does. Returns the number of entries completed.
fn process(qp: &Qp, budget: usize, scratch: &mut Scratch, c: &Counters) -> usize {
    let v = &qp.view;
    if qp.stopped.load(Ordering::Relaxed) {
        return 0;
    }
    if v.revoked().load(Ordering::SeqCst) != 0 {
        acknowledge_revocation(qp, c);
        return 0;
    }
    let start = qp.done.load(Ordering::Relaxed);
    let ahead = v.sq_tail().load(Ordering::Acquire).wrapping_sub(start);
    if ahead == 0 {
        return 0;
    }
    if ahead > qp.geo.ring_size as u64 {
        qp.stopped.store(true, Ordering::SeqCst);
        bump(&c.protocol_violations);
        log::warn!(
            "accel device: client pid {} moved its ring tail outside the ring; its queue pair is no longer served",
            qp.pid
        );
        return 0;
    }
    let n = (ahead as usize).min(budget);
    scratch.entries.clear();
    scratch.jobs.clear();
    for seq in start..start + n as u64 {
        let e = v.read_entry(seq);
        scratch.jobs.push(entry_job(&e, entry_ok(&e, seq, &qp.geo)));
        scratch.entries.push(e);
    }
    let mut sessions = qp.sessions();
    // The device's own processing time per entry (returned with its status): its share
    // of the pass's keystream (bitsliced across the pass's entries) plus its own XOR.
    let pass = Instant::now();
    sessions.prepare(&scratch.jobs, &mut scratch.keystream);
    let shared_ns = pass.elapsed().as_nanos() / n as u128;
    let mut done = start;
    let mut work = EngineStats::default();
    for (i, e) in scratch.entries.iter().enumerate() {
        // The failover fence: claim the entry, then look for a revocation.
        v.claim().store(done + 1, Ordering::SeqCst);
        if v.revoked().load(Ordering::SeqCst) != 0 {
            acknowledge_revocation(qp, c);
            break;
        }
        let own_ns;
        let status = if entry_ok(e, done, &qp.geo) {
            let slot = qp.slot_ptr(e.slot);
            // SAFETY: slot and len were checked against the geometry; the undo area is
            // one slot long.
            unsafe { std::ptr::copy_nonoverlapping(slot, v.undo_ptr(), e.len as usize) };
            v.undo_slot().store(e.slot, Ordering::Relaxed);
            v.undo_len().store(e.len, Ordering::Relaxed);
            v.undo_seq().store(done + 1, Ordering::Release);
            // SAFETY: the slot lies in the sealed region, which stays mapped while `qp`
            // lives. The client may write it concurrently; that only garbles its own
            // result, as with a buffer it changes under a DMA engine.
            let buf = unsafe { std::slice::from_raw_parts_mut(slot, e.len as usize) };
            let job = &scratch.jobs[i];
            let ks = scratch.keystream.get(i);
            let t = Instant::now();
            let status = sessions.run(job.session, &job.iv, &job.layout, buf, ks);
            own_ns = shared_ns + t.elapsed().as_nanos();
            status
        } else {
            bump(&c.bad_entries);
            own_ns = 0;
            Status::BadArgument
        };
        crate::backend::count(&mut work, status, scratch.jobs[i].layout.data_len);
        v.write_device_ns(done, own_ns.min(u128::from(u32::MAX)) as u32);
        v.write_status(done, status as u32);
        done += 1;
        qp.done.store(done, Ordering::Relaxed);
        v.sq_done().store(done, Ordering::Release);
        bump(&c.ops);
    }
    drop(sessions);
    add_work(&mut lock(&qp.work), &work);
    wake_waiting_client(v, done);
    (done - start) as usize
}

/// A client asleep on its completions (`LookasideEngine::wait_ready`) is woken once the
/// entry it waits for is done. Pairs with the client's store of cq_want before it
/// re-reads sq_done: one of the two sides sees the other's write.
fn wake_waiting_client(v: &QpView, done: u64) {
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
}

/// Test and fuzzing access to the device's ring processing without a socket.
pub mod harness {
    use super::*;

    /// A queue pair with no client process, its counters and the data thread's scratch.
    pub struct Detached {
        pub(in crate::lookaside) qp: Qp,
        scratch: Scratch,
        counters: Counters,
    }

    impl Detached {
        /// A queue pair of geometry `geo` with a session table of `sessions` entries.
        pub fn new(geo: Geometry, sessions: usize) -> Result<Detached, AccelError> {
            let mut fds = [0; 2];
            // SAFETY: valid out-array for two fds.
            if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) }
                != 0
            {
                return Err(AccelError::last_os("socketpair"));
            }
            // SAFETY: fresh fds owned by nobody else; the peer end is closed at once.
            let (conn, _peer) =
                unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            let (qp, _region) = Qp::new(geo, sessions, conn, 0)?;
            Ok(Detached {
                qp,
                scratch: Scratch::default(),
                counters: Counters::default(),
            })
        }

        /// One pass of the data thread over the queue pair.
        pub fn process(&mut self, budget: usize) -> usize {
            process(&self.qp, budget, &mut self.scratch, &self.counters)
        }

        /// The device's answer to a control message from this queue pair's client.
        pub fn answer(&self, msg: Msg) -> Msg {
            answer(&self.counters, &self.qp, Recv::Msg(msg, Vec::new()))
        }

        /// Serves the queue pair again after a revocation or violation (so one harness
        /// can run many fuzz inputs).
        pub fn reset(&mut self) {
            let v = self.qp.view();
            v.revoked().store(0, Ordering::SeqCst);
            v.revoke_ack().store(0, Ordering::SeqCst);
            v.sq_tail().store(self.done(), Ordering::SeqCst);
            self.qp.stopped.store(false, Ordering::SeqCst);
        }

        /// The device-side count of completed entries.
        pub fn done(&self) -> u64 {
            self.qp.done.load(Ordering::Relaxed)
        }

        /// Whether the device stopped serving the queue pair.
        pub fn stopped(&self) -> bool {
            self.qp.stopped.load(Ordering::Relaxed)
        }

        /// The counters.
        pub fn stats(&self) -> DeviceStats {
            self.counters.snapshot()
        }
    }
}
