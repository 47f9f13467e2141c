//! The client side of the lookaside device: a queue pair used through the `Engine`
//! interface, with failover to an in-process engine when the device goes away, and a
//! fence that keeps a stalled device's late writes away from anything the caller sees.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nfx_io::peer::{euid, peer_cred, validate_socket_path};
use nfx_io::Notifier;

use super::proto::{self, Msg, Recv};
use super::ring::{futex_wait, Geometry, QpView, SqEntry, MAGIC};
use super::seqpacket;
use super::shm::Mapping;
use crate::buf::SlotPool;
use crate::{
    cpu_engine, soft_engine, AccelError, Buf, Completion, Engine, EngineKind, EngineStats, Op,
    SessionId, SessionSpec, Status,
};

/// How long the device may show no heartbeat while work is pending before the client
/// declares it hung and fails over (long enough for a device starved by a loaded
/// machine; a device that dies is noticed at once through its socket).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Reply timeout of control requests (session create/destroy).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an idle-looking client probes the socket and heartbeat.
const PROBE_EVERY: Duration = Duration::from_millis(1);

/// How a client attaches to a device.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The engine (`soft` or `cpu`) that takes over if the device dies or hangs.
    pub fallback: EngineKind,
    /// The directory device sockets must lie in (`validate_device_path`); `None`
    /// accepts the socket's own directory if it is private to this user or root.
    pub device_dir: Option<PathBuf>,
    /// How long a device may show no heartbeat, with work pending, before failover.
    pub stall_timeout: Duration,
}

impl ClientOptions {
    /// Defaults: no configured directory, `STALL_TIMEOUT`.
    pub fn new(fallback: EngineKind) -> Self {
        ClientOptions {
            fallback,
            device_dir: None,
            stall_timeout: STALL_TIMEOUT,
        }
    }
}

/// Checks a device socket path before anything connects to it: the path must name a
/// unix socket owned by this user or root, inside `dir` (after resolving symlinks), and
/// `dir` and the socket's directory must be writable only by this user or root — so
/// nobody else can have put a fake device there. Returns the resolved path.
pub fn validate_device_path(path: &Path, dir: &Path) -> Result<PathBuf, AccelError> {
    validate_socket_path(path, dir)
        .map_err(|why| AccelError::BadArgument(format!("device path refused: {why}")))
}

struct Pending {
    op: Op,
    /// Ring sequence number, or `None` for an op rejected before reaching the ring.
    seq: Option<u64>,
    /// Shared-memory copy for a buffer that did not come from this device's pool.
    bounce: Option<Buf>,
}

struct Fallback {
    engine: Box<dyn Engine>,
    /// Client session id → fallback session id.
    fwd: Vec<Option<SessionId>>,
    /// Fallback session id → client session id.
    back: Vec<Option<SessionId>>,
}

impl Fallback {
    fn map(table: &[Option<SessionId>], id: SessionId) -> Option<SessionId> {
        table.get(id.0 as usize).copied().flatten()
    }

    fn link(&mut self, client: SessionId, fb: SessionId) {
        if self.back.len() <= fb.0 as usize {
            self.back.resize(fb.0 as usize + 1, None);
        }
        self.back[fb.0 as usize] = Some(client);
    }
}

/// A queue pair of a lookaside device (an `Engine`).
pub struct LookasideEngine {
    sock: OwnedFd,
    qp: u32,
    geo: Geometry,
    map: Arc<Mapping>,
    pool: Arc<SlotPool>,
    view: QpView,
    bell: Notifier,
    /// Client session id → (spec kept for failover, device session id).
    sessions: Vec<Option<(SessionSpec, u32)>>,
    pending: VecDeque<Pending>,
    /// Completions ready to hand out before the fallback's (set during failover).
    ready: VecDeque<Completion>,
    tail: u64,
    opts: ClientOptions,
    fallback: Option<Fallback>,
    /// Buffers a revoked device may still write (the entry it was working on): held
    /// back from the caller and the pool until the device acknowledges or is gone.
    fenced: Vec<Buf>,
    last_progress: Instant,
    last_probe: Instant,
    heartbeat: u64,
    heartbeat_at: Instant,
    stats: EngineStats,
    failover_reason: Option<String>,
}

fn connect_socket(path: &Path) -> Result<OwnedFd, AccelError> {
    let fd = seqpacket::connect(path)?;
    // The device must run as this user or as root: anyone else could be a fake device
    // collecting the session keys.
    let cred = peer_cred(fd.as_fd()).map_err(|e| AccelError::Io {
        context: "read the device's credentials".into(),
        source: e,
    })?;
    if cred.uid != euid() && cred.uid != 0 {
        return Err(AccelError::BadArgument(format!(
            "device at {} runs as uid {}, neither this user nor root",
            path.display(),
            cred.uid
        )));
    }
    Ok(fd)
}

/// Receives the device's greeting: the queue pair, its geometry, the sealed region and
/// this client's doorbell.
fn greeting(sock: &OwnedFd) -> Result<(u32, Geometry, Mapping, Notifier), AccelError> {
    let (qp, geo, mut fds) = match proto::recv(sock.as_raw_fd())? {
        Recv::Msg(Msg::Hello { qp, geo }, fds) if fds.len() == 2 && geo.valid() => (qp, geo, fds),
        Recv::Msg(Msg::Refused(why), _) => return Err(AccelError::Refused(why)),
        Recv::Closed => {
            return Err(AccelError::DeviceGone(
                "device closed the connection".into(),
            ))
        }
        Recv::Timeout => return Err(AccelError::DeviceGone("device did not answer".into())),
        Recv::Msg(..) | Recv::Bad(_) => {
            return Err(AccelError::BadArgument("unexpected device greeting".into()))
        }
    };
    let bell_fd = fds.pop().expect("two fds");
    let map = Mapping::from_sealed_fd(&fds[0], geo.total())?;
    let bell = Notifier::from_fd(bell_fd)
        .map_err(|e| AccelError::BadArgument(format!("device doorbell: {e}")))?;
    Ok((qp, geo, map, bell))
}

impl LookasideEngine {
    /// Attaches to the device at `socket` and takes one of its queue pairs; `fallback`
    /// (`soft` or `cpu`) takes over if the device dies. Fails with `Refused` when every
    /// queue pair is taken. See `connect_with` for the checks made.
    pub fn connect(socket: &Path, fallback: EngineKind) -> Result<LookasideEngine, AccelError> {
        Self::connect_with(socket, &ClientOptions::new(fallback))
    }

    /// Attaches as `connect` does, with options. The socket path must pass
    /// `validate_device_path` (against `opts.device_dir`, or the socket's own directory),
    /// the device process must run as this user or root, and the region it passes must
    /// be a memfd sealed against resizing, of exactly the announced size.
    pub fn connect_with(
        socket: &Path,
        opts: &ClientOptions,
    ) -> Result<LookasideEngine, AccelError> {
        if opts.fallback == EngineKind::Lookaside || opts.fallback == EngineKind::Bitsliced {
            return Err(AccelError::BadArgument(
                "the fallback of a lookaside engine must be soft or cpu".into(),
            ));
        }
        let own_dir = match socket.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let socket = validate_device_path(socket, opts.device_dir.as_deref().unwrap_or(own_dir))?;
        let sock = connect_socket(&socket)?;
        proto::set_timeouts(&sock, CONTROL_TIMEOUT)?;
        let (qp, geo, map, bell) = greeting(&sock)?;
        let map = Arc::new(map);
        let view = QpView::new(map.ptr(), geo);
        if view.magic().load(Ordering::SeqCst) != MAGIC {
            return Err(AccelError::BadArgument(
                "shared region has a wrong magic number".into(),
            ));
        }
        let pool = Arc::new(SlotPool::new(
            Arc::clone(&map),
            geo.slots_off(),
            geo.slot_size as usize,
            geo.slot_count,
        ));
        let now = Instant::now();
        Ok(LookasideEngine {
            sock,
            qp,
            geo,
            pool,
            heartbeat: view.heartbeat().load(Ordering::Relaxed),
            view,
            bell,
            map,
            sessions: Vec::new(),
            pending: VecDeque::with_capacity(geo.ring_size as usize),
            ready: VecDeque::new(),
            tail: 0,
            opts: opts.clone(),
            fallback: None,
            fenced: Vec::new(),
            last_progress: now,
            last_probe: now,
            heartbeat_at: now,
            stats: EngineStats::default(),
            failover_reason: None,
        })
    }

    /// The queue pair number the device granted.
    pub fn queue_pair(&self) -> u32 {
        self.qp
    }

    /// The engine now doing the work: `lookaside`, or the fallback after a failover.
    pub fn active(&self) -> EngineKind {
        if self.fallback.is_some() {
            self.opts.fallback
        } else {
            EngineKind::Lookaside
        }
    }

    /// Size of the shared region (for reports).
    pub fn region_bytes(&self) -> usize {
        self.map.len()
    }

    /// Buffers held back after a failover until the device acknowledges the revocation
    /// or is gone (0 or 1 in practice: the entry the device was working on).
    pub fn fenced_buffers(&self) -> usize {
        self.fenced.len()
    }

    /// The ring's progress as the region shows it: (entries the device started,
    /// entries it completed, entries submitted). For the tests that stop the device in
    /// the middle of an operation.
    #[doc(hidden)]
    pub fn ring_progress(&self) -> (u64, u64, u64) {
        let claim = self.view.claim().load(Ordering::SeqCst);
        (claim, self.view.sq_done().load(Ordering::SeqCst), self.tail)
    }

    /// Sends a session request; `Err(DeviceGone)` (and I/O errors) mean the device is
    /// unusable, `BadArgument`/`Refused` that it declined the request.
    fn request(&mut self, msg: &Msg) -> Result<u32, AccelError> {
        proto::send(self.sock.as_raw_fd(), msg, &[])?;
        match proto::recv(self.sock.as_raw_fd())? {
            Recv::Msg(Msg::Done(id), _) => Ok(id),
            Recv::Msg(Msg::Error(e), _) => Err(AccelError::BadArgument(e)),
            Recv::Msg(Msg::Refused(e), _) => Err(AccelError::Refused(e)),
            Recv::Msg(..) | Recv::Bad(_) => Err(AccelError::DeviceGone("unexpected reply".into())),
            Recv::Closed => Err(AccelError::DeviceGone(
                "device closed the connection".into(),
            )),
            Recv::Timeout => Err(AccelError::DeviceGone("device did not answer".into())),
        }
    }

    /// True once the device's socket reports end-of-file or an error: the device
    /// process has exited, or has dropped this queue pair for good.
    fn socket_closed(&self) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: valid socket and a 1-byte buffer.
        let n = unsafe {
            libc::recv(
                self.sock.as_raw_fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
            || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
    }

    /// True if the device looks dead: socket closed, or no heartbeat for the stall timeout.
    fn device_dead(&mut self) -> bool {
        if self.socket_closed() {
            return true;
        }
        let hb = self.view.heartbeat().load(Ordering::Relaxed);
        if hb != self.heartbeat {
            self.heartbeat = hb;
            self.heartbeat_at = Instant::now();
            return false;
        }
        self.heartbeat_at.elapsed() > self.opts.stall_timeout
    }

    /// Releases the fenced buffers once the device acknowledged the revocation or is
    /// gone.
    fn resolve_fence(&mut self) {
        if !self.fenced.is_empty()
            && (self.view.revoke_ack().load(Ordering::SeqCst) != 0 || self.socket_closed())
        {
            self.fenced.clear();
        }
    }

    /// The pre-image of the zero-copy buffer of entry `seq`, which the device may be
    /// working on at this moment: the undo copy once the device published it (it is
    /// never rewritten after the fence), else the slot itself, read and then confirmed
    /// untouched (the device publishes the undo copy before it changes the slot).
    fn pre_image(&self, seq: u64, buf: &Buf) -> Buf {
        let v = &self.view;
        let mut copy = Buf::heap(buf.capacity());
        let len = buf.len();
        copy.set_len(len).expect("same capacity");
        let from_undo = |copy: &mut Buf| {
            let n = len.min(v.undo_len().load(Ordering::Acquire) as usize);
            // SAFETY: the undo area is one slot long and `n <= slot_size`.
            let undo = unsafe { std::slice::from_raw_parts(v.undo_ptr(), n) };
            copy.as_mut_slice()[..n].copy_from_slice(undo);
        };
        if v.undo_seq().load(Ordering::Acquire) == seq + 1 {
            from_undo(&mut copy);
            return copy;
        }
        copy.as_mut_slice().copy_from_slice(buf.as_slice());
        std::sync::atomic::fence(Ordering::Acquire);
        if v.undo_seq().load(Ordering::Acquire) == seq + 1 {
            from_undo(&mut copy);
        }
        copy
    }

    /// Re-creates every session on a new fallback engine.
    fn start_fallback(&self) -> Fallback {
        let mut fb = Fallback {
            engine: match self.opts.fallback {
                EngineKind::Soft => soft_engine(),
                _ => cpu_engine(),
            },
            fwd: Vec::with_capacity(self.sessions.len()),
            back: Vec::new(),
        };
        for (i, spec) in self.sessions.iter().enumerate() {
            let id = spec
                .as_ref()
                .and_then(|(s, _)| fb.engine.create_session(s.clone()).ok());
            if let Some(f) = id {
                fb.link(SessionId(i as u32), f);
            }
            fb.fwd.push(id);
        }
        fb
    }

    /// Switches to the fallback engine. The queue pair is revoked first; then the
    /// entries the device completed are kept, the entry it may still be working on has
    /// its buffer replaced by the pre-image and the shared one fenced off, and every
    /// unfinished operation is re-run on the fallback in its original order.
    fn fail_over(&mut self, why: &str) {
        if self.fallback.is_some() {
            return;
        }
        self.view.revoked().store(1, Ordering::SeqCst);
        // Entries at or past `claim` will never be started; those below `done` are
        // complete; at most the one in between is in the device's hands.
        let claim = self.view.claim().load(Ordering::SeqCst).min(self.tail);
        let done = self.view.sq_done().load(Ordering::Acquire).min(claim);
        let mut fb = self.start_fallback();
        let mut resubmit = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            let seq = match p.seq {
                Some(seq) if seq < done => {
                    let c = self.finish(p, seq);
                    self.ready.push_back(c);
                    continue;
                }
                None => {
                    self.ready.push_back(Completion {
                        op: p.op,
                        status: Status::BadArgument,
                        device_ns: None,
                    });
                    continue;
                }
                Some(seq) => seq,
            };
            let mut op = p.op;
            if seq < claim {
                // In the device's hands: a bounced op still has its own untouched
                // buffer; a zero-copy op gets the pre-image in a buffer of its own.
                match p.bounce {
                    Some(b) => self.fenced.push(b),
                    None => {
                        let copy = self.pre_image(seq, &op.buf);
                        self.fenced.push(std::mem::replace(&mut op.buf, copy));
                    }
                }
            }
            match Fallback::map(&fb.fwd, op.session) {
                Some(f) => {
                    op.session = f;
                    resubmit.push(op);
                }
                None => self.ready.push_back(Completion {
                    op,
                    status: Status::NoSession,
                    device_ns: None,
                }),
            }
        }
        let n = resubmit.len();
        while !resubmit.is_empty() {
            if fb.engine.submit(&mut resubmit).unwrap_or(0) == 0 {
                let mut out = Vec::new();
                fb.engine.poll(&mut out, usize::MAX);
                for mut c in out {
                    c.op.session = Fallback::map(&fb.back, c.op.session).unwrap_or(c.op.session);
                    crate::backend::count(&mut self.stats, c.status, c.op.layout.data_len);
                    self.ready.push_back(c);
                }
            }
        }
        self.stats.failovers += 1;
        self.stats.resubmitted += n as u64;
        log::warn!(
            "lookaside queue pair {}: device lost ({why}); {} engine takes over, {n} in-flight operations re-run, {} buffer(s) fenced",
            self.qp,
            self.opts.fallback,
            self.fenced.len()
        );
        self.fallback = Some(fb);
        self.failover_reason = Some(why.to_string());
        self.resolve_fence();
    }

    /// Turns a finished ring entry into a completion (copying a bounce buffer back).
    fn finish(&mut self, p: Pending, seq: u64) -> Completion {
        let status = Status::from_u32(self.view.read_status(seq));
        let device_ns = Some(self.view.read_device_ns(seq));
        let mut op = p.op;
        if let Some(b) = p.bounce {
            op.buf.as_mut_slice().copy_from_slice(b.as_slice());
        }
        crate::backend::count(&mut self.stats, status, op.layout.data_len);
        Completion {
            op,
            status,
            device_ns,
        }
    }

    fn ring_room(&self) -> usize {
        self.geo.ring_size as usize - self.pending.len()
    }

    /// Writes one op into the ring (copying it into a free slot when its buffer is not
    /// one of the device's) or queues it as rejected when it cannot go there.
    fn enqueue(&mut self, op: Op) -> Result<(), AccelError> {
        let len = op.buf.len();
        let (slot, bounce) = match op.buf.slot_in(&self.pool) {
            Some(s) => (Some(s), None),
            None if len <= self.geo.slot_size as usize => match self.pool.take() {
                Ok(mut b) => {
                    b.fill_from(op.buf.as_slice())?;
                    (b.slot_in(&self.pool), Some(b))
                }
                Err(_) => (None, None),
            },
            None => (None, None),
        };
        let Some(slot) = slot else {
            self.pending.push_back(Pending {
                op,
                seq: None,
                bounce: None,
            });
            return Ok(());
        };
        let iv = op.iv.as_slice();
        let mut e = SqEntry {
            seq: self.tail,
            session: self
                .sessions
                .get(op.session.0 as usize)
                .and_then(|s| s.as_ref())
                .map_or(u32::MAX, |(_, d)| *d),
            slot,
            len: len as u32,
            aad_off: op.layout.aad_off,
            aad_len: op.layout.aad_len,
            data_off: op.layout.data_off,
            data_len: op.layout.data_len,
            tag_off: op.layout.tag_off,
            iv_len: op.iv.declared_len().min(u8::MAX as usize) as u8,
            ..SqEntry::default()
        };
        e.iv[..iv.len()].copy_from_slice(iv);
        self.view.write_entry(self.tail, &e);
        self.pending.push_back(Pending {
            op,
            seq: Some(self.tail),
            bounce,
        });
        self.tail += 1;
        Ok(())
    }

    /// Hands out the finished ring entries at the front, in order.
    fn collect(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let done = self.view.sq_done().load(Ordering::Acquire).min(self.tail);
        let mut n = 0;
        while n < max {
            let seq = match self.pending.front() {
                Some(p) => p.seq,
                None => break,
            };
            match seq {
                Some(s) if s < done => {
                    let p = self.pending.pop_front().expect("front exists");
                    let c = self.finish(p, s);
                    out.push(c);
                }
                None => {
                    let p = self.pending.pop_front().expect("front exists");
                    self.stats.ops += 1;
                    self.stats.rejected += 1;
                    out.push(Completion {
                        op: p.op,
                        status: Status::BadArgument,
                        device_ns: None,
                    });
                }
                Some(_) => break,
            }
            n += 1;
        }
        n
    }
}

impl Engine for LookasideEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Lookaside
    }

    fn create_session(&mut self, spec: SessionSpec) -> Result<SessionId, AccelError> {
        spec.validate()?;
        if self.fallback.is_none() {
            match self.request(&Msg::Create(spec.clone())) {
                Ok(dev_id) => {
                    self.sessions.push(Some((spec, dev_id)));
                    return Ok(SessionId(self.sessions.len() as u32 - 1));
                }
                Err(e @ (AccelError::BadArgument(_) | AccelError::Refused(_))) => return Err(e),
                Err(e) => self.fail_over(&e.to_string()),
            }
        }
        let id = SessionId(self.sessions.len() as u32);
        let fb = self.fallback.as_mut().expect("failed over above");
        let f = fb.engine.create_session(spec.clone())?;
        self.sessions.push(Some((spec, u32::MAX)));
        fb.fwd.push(Some(f));
        fb.link(id, f);
        Ok(id)
    }

    fn destroy_session(&mut self, id: SessionId) -> Result<(), AccelError> {
        let dev_id = match self.sessions.get_mut(id.0 as usize).map(Option::take) {
            Some(Some((_, dev_id))) => dev_id,
            _ => return Err(AccelError::NoSession(id.0)),
        };
        if let Some(fb) = &mut self.fallback {
            if let Some(Some(f)) = fb.fwd.get_mut(id.0 as usize).map(Option::take) {
                fb.back[f.0 as usize] = None;
                return fb.engine.destroy_session(f);
            }
            return Ok(());
        }
        match self.request(&Msg::Destroy(dev_id)) {
            Ok(_) | Err(AccelError::BadArgument(_) | AccelError::Refused(_)) => Ok(()),
            Err(e) => {
                self.fail_over(&e.to_string());
                Ok(())
            }
        }
    }

    fn alloc_buf(&mut self, capacity: usize) -> Result<Buf, AccelError> {
        if capacity > self.geo.slot_size as usize {
            return Err(AccelError::BadArgument(format!(
                "buffer of {capacity} bytes exceeds the device slot size {}",
                self.geo.slot_size
            )));
        }
        self.pool.take()
    }

    fn submit(&mut self, ops: &mut Vec<Op>) -> Result<usize, AccelError> {
        if let Some(fb) = &mut self.fallback {
            for op in ops.iter_mut() {
                op.session = Fallback::map(&fb.fwd, op.session).unwrap_or(SessionId(u32::MAX));
            }
            let n = fb.engine.submit(ops)?;
            for op in ops.iter_mut() {
                op.session = Fallback::map(&fb.back, op.session).unwrap_or(op.session);
            }
            return Ok(n);
        }
        let room = self.ring_room();
        let n = ops.len().min(room);
        for op in ops.drain(..n) {
            self.enqueue(op)?;
        }
        self.view.sq_tail().store(self.tail, Ordering::SeqCst);
        if self.view.dev_sleeping().load(Ordering::SeqCst) != 0 {
            self.bell.notify();
        }
        if n > 0 && self.pending.len() == n {
            self.last_progress = Instant::now();
        }
        Ok(n)
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.ready.pop_front() else {
                break;
            };
            out.push(c);
            n += 1;
        }
        if let Some(fb) = &mut self.fallback {
            let start = out.len();
            let got = fb.engine.poll(out, max - n);
            for c in &mut out[start..] {
                c.op.session = Fallback::map(&fb.back, c.op.session).unwrap_or(c.op.session);
                crate::backend::count(&mut self.stats, c.status, c.op.layout.data_len);
            }
            let now = Instant::now();
            if !self.fenced.is_empty() && now.duration_since(self.last_probe) > PROBE_EVERY {
                self.last_probe = now;
                self.resolve_fence();
            }
            return n + got;
        }
        n += self.collect(out, max - n);
        let now = Instant::now();
        if n > 0 {
            self.last_progress = now;
        } else if !self.pending.is_empty()
            && now.duration_since(self.last_progress) > PROBE_EVERY
            && now.duration_since(self.last_probe) > PROBE_EVERY
        {
            self.last_probe = now;
            if self.device_dead() {
                self.fail_over("socket closed or heartbeat lost");
                return n + self.poll(out, max - n);
            }
        }
        n
    }

    fn wait_ready(&mut self, n: usize, timeout: Duration) {
        if self.fallback.is_some() || n <= self.ready.len() {
            return;
        }
        // The ring entry whose completion makes `n` completions pollable.
        let k = n - self.ready.len();
        let Some(want) = self
            .pending
            .iter()
            .take(k)
            .rev()
            .find_map(|p| p.seq)
            .map(|s| s + 1)
        else {
            return;
        };
        let v = &self.view;
        let bell = v.cq_bell().load(Ordering::SeqCst);
        v.cq_want().store(want, Ordering::SeqCst);
        if v.sq_done().load(Ordering::SeqCst) < want && v.revoked().load(Ordering::SeqCst) == 0 {
            futex_wait(v.cq_bell(), bell, timeout);
        }
        v.cq_want().store(0, Ordering::SeqCst);
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
            + self.ready.len()
            + self.fallback.as_ref().map_or(0, |f| f.engine.in_flight())
    }

    fn stats(&self) -> EngineStats {
        self.stats
    }

    fn failover_reason(&self) -> Option<&str> {
        self.failover_reason.as_deref()
    }
}
