//! The client side of the lookaside device: a queue pair used through the `Engine`
//! interface, with failover to an in-process engine when the device goes away.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::proto::{self, Msg, Recv};
use super::ring::{
    futex_wait, futex_wake, DoorbellView, Geometry, QpView, SqEntry, DOORBELL_LEN, MAGIC,
};
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

/// A queue pair of a lookaside device (an `Engine`).
pub struct LookasideEngine {
    sock: OwnedFd,
    qp: u32,
    geo: Geometry,
    map: Arc<Mapping>,
    pool: Arc<SlotPool>,
    _doorbell_map: Mapping,
    view: QpView,
    bell: DoorbellView,
    /// Client session id → (spec kept for failover, device session id).
    sessions: Vec<Option<(SessionSpec, u32)>>,
    pending: VecDeque<Pending>,
    /// Completions ready to hand out before the fallback's (set during failover).
    ready: VecDeque<Completion>,
    tail: u64,
    fallback_kind: EngineKind,
    fallback: Option<Fallback>,
    last_progress: Instant,
    last_probe: Instant,
    heartbeat: u64,
    heartbeat_at: Instant,
    stats: EngineStats,
    failover_reason: Option<String>,
}

fn connect_socket(path: &Path) -> Result<OwnedFd, AccelError> {
    let addr = seqpacket::address(path)?;
    let fd = seqpacket::socket()?;
    // SAFETY: valid fd and address.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(AccelError::DeviceGone(format!(
            "connect {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(fd)
}

impl LookasideEngine {
    /// Attaches to the device at `socket` and takes one of its queue pairs; `fallback`
    /// (`soft` or `cpu`) takes over if the device dies. Fails with `Refused` when every
    /// queue pair is taken.
    pub fn connect(socket: &Path, fallback: EngineKind) -> Result<LookasideEngine, AccelError> {
        if fallback == EngineKind::Lookaside {
            return Err(AccelError::BadArgument(
                "the fallback of a lookaside engine must be soft or cpu".into(),
            ));
        }
        let sock = connect_socket(socket)?;
        proto::set_recv_timeout(&sock, CONTROL_TIMEOUT)?;
        let (qp, geo, fds) = match proto::recv(sock.as_raw_fd())? {
            Recv::Msg(Msg::Hello { qp, geo }, fds) if fds.len() == 2 && geo.valid() => {
                (qp, geo, fds)
            }
            Recv::Msg(Msg::Refused(why), _) => return Err(AccelError::Refused(why)),
            Recv::Closed => {
                return Err(AccelError::DeviceGone(
                    "device closed the connection".into(),
                ))
            }
            Recv::Timeout => return Err(AccelError::DeviceGone("device did not answer".into())),
            Recv::Msg(..) => {
                return Err(AccelError::BadArgument("unexpected device greeting".into()))
            }
        };
        let map = Arc::new(Mapping::from_fd(&fds[0], geo.total())?);
        let doorbell_map = Mapping::from_fd(&fds[1], DOORBELL_LEN)?;
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
        let bell = DoorbellView::new(doorbell_map.ptr());
        let now = Instant::now();
        Ok(LookasideEngine {
            sock,
            qp,
            geo,
            pool,
            view,
            bell,
            heartbeat: bell.heartbeat().load(Ordering::Relaxed),
            _doorbell_map: doorbell_map,
            map,
            sessions: Vec::new(),
            pending: VecDeque::with_capacity(geo.ring_size as usize),
            ready: VecDeque::new(),
            tail: 0,
            fallback_kind: fallback,
            fallback: None,
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
            self.fallback_kind
        } else {
            EngineKind::Lookaside
        }
    }

    /// Size of the shared region (for reports).
    pub fn region_bytes(&self) -> usize {
        self.map.len()
    }

    fn request(&mut self, msg: &Msg) -> Result<Result<u32, String>, AccelError> {
        proto::send(self.sock.as_raw_fd(), msg, &[])?;
        match proto::recv(self.sock.as_raw_fd())? {
            Recv::Msg(Msg::Done(id), _) => Ok(Ok(id)),
            Recv::Msg(Msg::Error(e), _) => Ok(Err(e)),
            Recv::Msg(..) => Err(AccelError::DeviceGone("unexpected reply".into())),
            Recv::Closed => Err(AccelError::DeviceGone(
                "device closed the connection".into(),
            )),
            Recv::Timeout => Err(AccelError::DeviceGone("device did not answer".into())),
        }
    }

    /// True if the device looks dead: socket closed, or no heartbeat for STALL_TIMEOUT.
    fn device_dead(&mut self) -> bool {
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
        if n == 0 {
            return true;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return true;
            }
        }
        let hb = self.bell.heartbeat().load(Ordering::Relaxed);
        if hb != self.heartbeat {
            self.heartbeat = hb;
            self.heartbeat_at = Instant::now();
            return false;
        }
        self.heartbeat_at.elapsed() > STALL_TIMEOUT
    }

    /// Switches to the fallback engine: finished ring entries are kept, the buffer the
    /// device was working on is restored from the undo area, and every unfinished
    /// operation is re-run on the fallback in its original order.
    fn fail_over(&mut self, why: &str) {
        if self.fallback.is_some() {
            return;
        }
        self.view.revoked().store(1, Ordering::SeqCst);
        let done = self.view.sq_done().load(Ordering::Acquire);
        let mut engine = match self.fallback_kind {
            EngineKind::Soft => soft_engine(),
            _ => cpu_engine(),
        };
        let mut fb = Fallback {
            fwd: Vec::with_capacity(self.sessions.len()),
            back: Vec::new(),
            engine: soft_engine(),
        };
        for spec in &self.sessions {
            let id = spec
                .as_ref()
                .and_then(|(s, _)| engine.create_session(s.clone()).ok());
            if let Some(f) = id {
                if fb.back.len() <= f.0 as usize {
                    fb.back.resize(f.0 as usize + 1, None);
                }
                fb.back[f.0 as usize] = Some(SessionId(fb.fwd.len() as u32));
            }
            fb.fwd.push(id);
        }
        fb.engine = engine;
        // Restore the buffer of the entry the device may have been changing in place.
        if self.view.undo_seq().load(Ordering::Acquire) == done + 1 {
            let slot = self.view.undo_slot().load(Ordering::Relaxed);
            let len = self.view.undo_len().load(Ordering::Relaxed) as usize;
            if slot < self.geo.slot_count && len <= self.geo.slot_size as usize {
                // SAFETY: bounds checked; the device is dead or revoked, so nobody else
                // writes the slot, and the undo area is one slot long.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.view.undo_ptr(),
                        self.pool.slot_ptr(slot),
                        len,
                    );
                }
            }
        }
        let mut resubmit = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            match p.seq {
                Some(seq) if seq < done => {
                    let c = self.finish(p, seq);
                    self.ready.push_back(c);
                }
                None => self.ready.push_back(Completion {
                    op: p.op,
                    status: Status::BadArgument,
                }),
                Some(_) => {
                    let mut op = p.op;
                    match fb.fwd.get(op.session.0 as usize).copied().flatten() {
                        Some(f) => {
                            op.session = f;
                            resubmit.push(op);
                        }
                        None => self.ready.push_back(Completion {
                            op,
                            status: Status::NoSession,
                        }),
                    }
                }
            }
        }
        let n = resubmit.len();
        while !resubmit.is_empty() {
            if fb.engine.submit(&mut resubmit).unwrap_or(0) == 0 {
                let mut out = Vec::new();
                fb.engine.poll(&mut out, usize::MAX);
                for mut c in out {
                    c.op.session = fb.back[c.op.session.0 as usize].unwrap_or(c.op.session);
                    crate::backend::count(&mut self.stats, c.status, c.op.layout.data_len);
                    self.ready.push_back(c);
                }
            }
        }
        self.stats.failovers += 1;
        self.stats.resubmitted += n as u64;
        log::warn!(
            "lookaside queue pair {}: device lost ({why}); {} engine takes over, {n} in-flight operations re-run",
            self.qp,
            self.fallback_kind
        );
        self.fallback = Some(fb);
        self.failover_reason = Some(why.to_string());
    }

    /// Turns a finished ring entry into a completion (copying a bounce buffer back).
    fn finish(&mut self, p: Pending, seq: u64) -> Completion {
        let status = Status::from_u32(self.view.read_status(seq));
        let mut op = p.op;
        if let Some(b) = p.bounce {
            op.buf.as_mut_slice().copy_from_slice(b.as_slice());
        }
        crate::backend::count(&mut self.stats, status, op.layout.data_len);
        Completion { op, status }
    }

    fn ring_room(&self) -> usize {
        self.geo.ring_size as usize - self.pending.len()
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
                Ok(Ok(dev_id)) => {
                    self.sessions.push(Some((spec, dev_id)));
                    return Ok(SessionId(self.sessions.len() as u32 - 1));
                }
                Ok(Err(e)) => return Err(AccelError::BadArgument(e)),
                Err(e) => self.fail_over(&e.to_string()),
            }
        }
        let id = SessionId(self.sessions.len() as u32);
        let fb = self.fallback.as_mut().expect("failed over above");
        let f = fb.engine.create_session(spec.clone())?;
        self.sessions.push(Some((spec, u32::MAX)));
        fb.fwd.push(Some(f));
        if fb.back.len() <= f.0 as usize {
            fb.back.resize(f.0 as usize + 1, None);
        }
        fb.back[f.0 as usize] = Some(id);
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
        if let Err(e) = self.request(&Msg::Destroy(dev_id)) {
            self.fail_over(&e.to_string());
        }
        Ok(())
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
                op.session = fb
                    .fwd
                    .get(op.session.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(SessionId(u32::MAX));
            }
            let n = fb.engine.submit(ops)?;
            for op in ops.iter_mut() {
                op.session = fb
                    .back
                    .get(op.session.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(op.session);
            }
            return Ok(n);
        }
        let mut n = 0;
        let room = self.ring_room();
        for op in ops.drain(..ops.len().min(room)) {
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
                n += 1;
                continue;
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
            n += 1;
        }
        self.view.sq_tail().store(self.tail, Ordering::SeqCst);
        if self.bell.sleeping().load(Ordering::SeqCst) != 0 {
            self.bell.bell().fetch_add(1, Ordering::SeqCst);
            futex_wake(self.bell.bell());
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
                c.op.session = fb
                    .back
                    .get(c.op.session.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(c.op.session);
                crate::backend::count(&mut self.stats, c.status, c.op.layout.data_len);
            }
            return n + got;
        }
        let done = self.view.sq_done().load(Ordering::Acquire);
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
                    });
                }
                Some(_) => break,
            }
            n += 1;
        }
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
