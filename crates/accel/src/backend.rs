//! What the in-process engines (soft, cpu) and the lookaside device share: per-family
//! composition (CTR then HMAC, digest), argument checks, and a synchronous engine that
//! runs each operation at submit time and queues its completion.

use std::collections::VecDeque;

use crate::bitsliced::{xor_into, CtrRun, PresentBs};
use crate::op::{split, Parts};
use crate::{
    AccelError, Alg, AlgFamily, Buf, Completion, Direction, Engine, EngineKind, EngineStats, Iv,
    Layout, Op, SessionId, SessionSpec, Status,
};

/// The primitives an implementation provides; composition lives in `execute`.
pub(crate) trait Backend: Send + 'static {
    /// Expanded keys of one session.
    type Session: Send;
    /// Engine kind reported by the synchronous engine built on this backend.
    const KIND: EngineKind;
    /// Expands the keys of a validated spec.
    fn new_session(spec: &SessionSpec) -> Result<Self::Session, AccelError>;
    /// AEAD encrypt in place and write the 16-byte tag.
    fn aead_seal(s: &mut Self::Session, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &mut [u8]);
    /// AEAD verify then decrypt in place; false on tag mismatch.
    fn aead_open(s: &mut Self::Session, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &[u8])
        -> bool;
    /// XOR the counter-mode keystream starting at counter block `iv` into `data`.
    fn ctr_xor(s: &mut Self::Session, iv: &[u8], data: &mut [u8]);
    /// HMAC-SHA-256 (CTR+HMAC) or SHA-256 (digest) over `aad ‖ data`.
    fn mac(s: &mut Self::Session, aad: &[u8], data: &[u8], out: &mut [u8; 32]);
    /// Whether sessions of `alg` can be created (an engine may implement a subset).
    fn supports(alg: Alg) -> bool {
        let _ = alg;
        true
    }
    /// The bitsliced cipher of a session whose keystream is computed for a whole batch
    /// of operations at once (PRESENT on the cpu and bitsliced engines), if it has one.
    fn batcher(s: &Self::Session) -> Option<&PresentBs> {
        let _ = s;
        None
    }
}

/// Constant-time equality of two byte strings of the same length.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Session metadata every backend needs besides its keys.
#[derive(Clone, Copy)]
pub(crate) struct Meta {
    family: AlgFamily,
    iv_len: usize,
    dir: Direction,
    tag_len: usize,
}

impl Meta {
    pub(crate) fn of(spec: &SessionSpec) -> Meta {
        Meta {
            family: spec.alg.family(),
            iv_len: spec.alg.iv_len(),
            dir: spec.dir,
            tag_len: spec.tag_len,
        }
    }
}

/// The counter-mode step: the batch's precomputed keystream when there is one.
fn ctr<B: Backend>(s: &mut B::Session, iv: &[u8], data: &mut [u8], ks: Option<&[u8]>) {
    match ks {
        Some(k) => xor_into(data, k),
        None => B::ctr_xor(s, iv, data),
    }
}

/// Runs one operation on `buf` with a backend session; `ks` is its keystream when the
/// batch computed it ahead (`BatchKeystream`).
pub(crate) fn execute<B: Backend>(
    meta: &Meta,
    s: &mut B::Session,
    iv: &Iv,
    layout: &Layout,
    buf: &mut [u8],
    ks: Option<&[u8]>,
) -> Status {
    if iv.declared_len() != meta.iv_len {
        return Status::BadArgument;
    }
    let Some(Parts { aad, data, tag }) = split(buf, layout, meta.tag_len) else {
        return Status::BadArgument;
    };
    let iv = iv.as_slice();
    let ok = match (meta.family, meta.dir) {
        (AlgFamily::Aead, Direction::Encrypt) => {
            B::aead_seal(s, iv, aad, data, tag);
            true
        }
        (AlgFamily::Aead, Direction::Decrypt) => B::aead_open(s, iv, aad, data, tag),
        (AlgFamily::Cipher, _) => {
            ctr::<B>(s, iv, data, ks);
            true
        }
        (AlgFamily::CtrHmac, Direction::Encrypt) => {
            ctr::<B>(s, iv, data, ks);
            let mut full = [0u8; 32];
            B::mac(s, aad, data, &mut full);
            tag.copy_from_slice(&full[..meta.tag_len]);
            true
        }
        (AlgFamily::CtrHmac, Direction::Decrypt) => {
            let mut full = [0u8; 32];
            B::mac(s, aad, data, &mut full);
            let ok = ct_eq(&full[..meta.tag_len], tag);
            if ok {
                ctr::<B>(s, iv, data, ks);
            }
            ok
        }
        (AlgFamily::Digest, Direction::Encrypt) => {
            let mut full = [0u8; 32];
            B::mac(s, aad, data, &mut full);
            tag.copy_from_slice(&full[..meta.tag_len]);
            true
        }
        (AlgFamily::Digest, Direction::Decrypt) => {
            let mut full = [0u8; 32];
            B::mac(s, aad, data, &mut full);
            return if ct_eq(&full[..meta.tag_len], tag) {
                Status::Ok
            } else {
                Status::AuthFailed
            };
        }
    };
    if ok {
        Status::Ok
    } else {
        data.fill(0);
        Status::AuthFailed
    }
}

/// A table of sessions indexed by `SessionId`, holding at most `limit` at once.
pub(crate) struct Sessions<B: Backend> {
    slots: Vec<Option<(Meta, B::Session)>>,
    limit: usize,
}

impl<B: Backend> Sessions<B> {
    /// An unbounded table (an in-process engine: the caller owns its memory).
    pub(crate) fn new() -> Self {
        Self::with_limit(usize::MAX)
    }

    /// A table of at most `limit` sessions (the lookaside device's, per queue pair).
    pub(crate) fn with_limit(limit: usize) -> Self {
        Sessions {
            slots: Vec::new(),
            limit,
        }
    }

    /// Validates the spec, expands keys, returns the new id (reusing freed ids); a full
    /// table is `Refused`.
    pub(crate) fn create(&mut self, spec: &SessionSpec) -> Result<SessionId, AccelError> {
        spec.validate()?;
        let free = self.slots.iter().position(Option::is_none);
        if free.is_none() && self.slots.len() >= self.limit {
            return Err(AccelError::Refused(format!(
                "session table full: {} sessions per queue pair",
                self.limit
            )));
        }
        let entry = Some((Meta::of(spec), B::new_session(spec)?));
        if let Some(i) = free {
            self.slots[i] = entry;
            return Ok(SessionId(i as u32));
        }
        self.slots.push(entry);
        Ok(SessionId(self.slots.len() as u32 - 1))
    }

    /// Sessions open.
    pub(crate) fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Drops a session (the backend's key types zeroize themselves).
    pub(crate) fn destroy(&mut self, id: SessionId) -> Result<(), AccelError> {
        match self.slots.get_mut(id.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(AccelError::NoSession(id.0)),
        }
    }

    /// Runs one operation on raw buffer bytes, with its batch keystream if any.
    pub(crate) fn run(
        &mut self,
        id: SessionId,
        iv: &Iv,
        layout: &Layout,
        buf: &mut [u8],
        ks: Option<&[u8]>,
    ) -> Status {
        match self.slots.get_mut(id.0 as usize) {
            Some(Some((meta, s))) => execute::<B>(meta, s, iv, layout, buf, ks),
            _ => Status::NoSession,
        }
    }

    /// Computes, for every operation of a batch whose session batches its keystream,
    /// that keystream: consecutive operations of one session share bitsliced passes.
    pub(crate) fn prepare(&mut self, jobs: &[Job], ks: &mut BatchKeystream) {
        ks.clear(jobs.len());
        let mut start = 0;
        while start < jobs.len() {
            let id = jobs[start].session;
            let end = start + jobs[start..].iter().take_while(|j| j.session == id).count();
            if let Some(Some((meta, s))) = self.slots.get(id.0 as usize) {
                if let Some(p) = B::batcher(s) {
                    ks.add_group(p, meta, start, &jobs[start..end]);
                }
            }
            start = end;
        }
    }
}

/// What `Sessions::prepare` needs to know of one operation of a batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Job {
    /// Session of the operation.
    pub session: SessionId,
    /// Its IV (the initial counter block).
    pub iv: Iv,
    /// Its layout (for the data length).
    pub layout: Layout,
    /// Length of its buffer (the layout must fit in it).
    pub buf_len: usize,
}

/// Most keystream bytes one batch precomputes; operations beyond it run one by one.
const BATCH_KEYSTREAM_MAX: usize = 1 << 20;

/// Keystream precomputed for the operations of one batch (reused between batches, so
/// no allocation per operation once it has grown).
#[derive(Default)]
pub(crate) struct BatchKeystream {
    bytes: Vec<u8>,
    /// Per operation of the batch: where its keystream is in `bytes`.
    spans: Vec<Option<(usize, usize)>>,
    runs: Vec<CtrRun>,
}

impl BatchKeystream {
    fn clear(&mut self, n: usize) {
        self.bytes.clear();
        self.spans.clear();
        self.spans.resize(n, None);
    }

    /// Computes the keystream of the valid operations of one session's group, whose
    /// first operation is number `first` of the batch.
    fn add_group(&mut self, p: &PresentBs, meta: &Meta, first: usize, jobs: &[Job]) {
        self.runs.clear();
        let start = self.bytes.len();
        let mut at = start;
        for (i, j) in jobs.iter().enumerate() {
            let len = j.layout.data_len as usize;
            let fits = j.iv.declared_len() == meta.iv_len
                && j.layout.span(meta.tag_len) <= j.buf_len as u64
                && at + len <= BATCH_KEYSTREAM_MAX;
            let Ok(ctr) = <[u8; 8]>::try_from(j.iv.as_slice()) else {
                continue;
            };
            if !fits {
                continue;
            }
            let blocks = len.div_ceil(8);
            self.runs.push(CtrRun {
                ctr: u64::from_be_bytes(ctr),
                blocks,
            });
            self.spans[first + i] = Some((at, len));
            at += blocks * 8;
        }
        if at > start {
            self.bytes.resize(at, 0);
            p.keystream(&self.runs, &mut self.bytes[start..]);
        }
    }

    /// The keystream of operation `i` of the batch, if it was computed.
    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        let (at, len) = (*self.spans.get(i)?)?;
        Some(&self.bytes[at..at + len])
    }
}

/// Most operations a synchronous engine holds before `poll` must be called.
pub const SYNC_QUEUE_DEPTH: usize = 1024;

/// An engine that does the work inside `submit` and hands completions out in order.
pub(crate) struct SyncEngine<B: Backend> {
    sessions: Sessions<B>,
    done: VecDeque<Completion>,
    stats: EngineStats,
    jobs: Vec<Job>,
    keystream: BatchKeystream,
}

impl<B: Backend> SyncEngine<B> {
    pub(crate) fn new() -> Self {
        SyncEngine {
            sessions: Sessions::new(),
            done: VecDeque::with_capacity(SYNC_QUEUE_DEPTH),
            stats: EngineStats::default(),
            jobs: Vec::new(),
            keystream: BatchKeystream::default(),
        }
    }
}

/// Adds one completion's outcome to the counters.
pub(crate) fn count(stats: &mut EngineStats, status: Status, data_len: u32) {
    stats.ops += 1;
    match status {
        Status::Ok => stats.bytes += data_len as u64,
        Status::AuthFailed => stats.auth_failures += 1,
        _ => stats.rejected += 1,
    }
}

impl<B: Backend> Engine for SyncEngine<B> {
    fn kind(&self) -> EngineKind {
        B::KIND
    }

    fn create_session(&mut self, spec: SessionSpec) -> Result<SessionId, AccelError> {
        if !B::supports(spec.alg) {
            return Err(AccelError::BadArgument(format!(
                "the {} engine does not implement {}",
                B::KIND,
                spec.alg
            )));
        }
        self.sessions.create(&spec)
    }

    fn supports(&self, alg: Alg) -> bool {
        B::supports(alg)
    }

    fn destroy_session(&mut self, id: SessionId) -> Result<(), AccelError> {
        self.sessions.destroy(id)
    }

    fn alloc_buf(&mut self, capacity: usize) -> Result<Buf, AccelError> {
        Ok(Buf::heap(capacity))
    }

    fn submit(&mut self, ops: &mut Vec<Op>) -> Result<usize, AccelError> {
        let n = ops.len().min(SYNC_QUEUE_DEPTH - self.done.len());
        self.jobs.clear();
        self.jobs.extend(ops[..n].iter().map(|op| Job {
            session: op.session,
            iv: op.iv,
            layout: op.layout,
            buf_len: op.buf.len(),
        }));
        self.sessions.prepare(&self.jobs, &mut self.keystream);
        for (i, mut op) in ops.drain(..n).enumerate() {
            let status = self.sessions.run(
                op.session,
                &op.iv,
                &op.layout,
                op.buf.as_mut_slice(),
                self.keystream.get(i),
            );
            count(&mut self.stats, status, op.layout.data_len);
            self.done.push_back(Completion {
                op,
                status,
                device_ns: None,
            });
        }
        Ok(n)
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let n = max.min(self.done.len());
        out.extend(self.done.drain(..n));
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn stats(&self) -> EngineStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_compares() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
