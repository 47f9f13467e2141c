//! The chunk cipher of the edge and cloud VNFs: PRESENT-80-CTR, one session per stream,
//! pipelined. The worker hands it batches of chunks (from any streams) and goes back to
//! its sockets; the cipher keeps up to `MAX_IN_FLIGHT` chunks on the engine (on the
//! lookaside device, bursts of ring entries whose keystream the device computes in
//! shared bitsliced passes) and gives chunks back in the order they were handed in, each
//! with its batch's execution time and its own engine time, as their operations
//! complete. On the portable engine the same code runs the chunks in the worker's thread
//! at submission. A chunk whose
//! operation fails is given back failed (the worker drops and counts it); the rest go on.

use anyhow::Context;
use nfx_accel::{Alg, Completion, Direction, Engine, Iv, Layout, Op, SessionId, SessionSpec};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::flow::{Frame, MAX_CHUNK};
/// Chunks submitted to the engine in one call (the device serves up to 64 entries of a
/// queue pair per pass).
pub const WINDOW: usize = 64;
/// Chunks on the engine at once: below the device's ring entries and buffer slots per
/// queue pair (256 each in the experiment), so a submission never meets a full ring or
/// an empty slot pool.
pub const MAX_IN_FLIGHT: usize = 192;
/// Chunks the cipher holds (queued, on the engine, or done and not yet given back):
/// about 160 ms of 100 streams' chunks, so a device descheduled for that long loses
/// nothing (the worker stops reading at the bound, and the sockets buffer the rest);
/// what a full cipher is handed beyond it is dropped and counted.
pub const MAX_HELD: usize = 4096;
/// How long the engine may show no completion, with chunks on it, before the run fails
/// (the lookaside client fails over to its fallback engine long before).
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// One chunk of one stream on its way through a VNF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Index of its stream in the VNF's stream list.
    pub stream: usize,
    /// The chunk's frame; its data is encrypted or decrypted in place.
    pub frame: Frame,
}

/// A chunk given back by the cipher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The chunk, ciphered when `ok`.
    pub chunk: Chunk,
    /// Its batch's time from hand-over until its last operation completed, divided by
    /// the batch's chunks (the amortised execution time per chunk; on the lookaside
    /// device the offload round trip as the worker sees it).
    pub exec_ns: u32,
    /// The engine's own time for this chunk: the device's processing time returned with
    /// the completion, or on an engine running in the worker's thread (the portable
    /// one) its submission call's time per operation; 0 when not ciphered.
    pub engine_ns: u32,
    /// False when its operation failed (refused by the engine, an error status, or no
    /// room in the cipher): the chunk must be dropped.
    pub ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    OnEngine,
    Done,
    Failed,
}

struct Held {
    chunk: Chunk,
    state: State,
    batch: u64,
    engine_ns: u32,
}

/// A batch handed over at `t0`; `left` of its `n` chunks are not finished yet.
struct Batch {
    t0: Instant,
    n: u32,
    left: u32,
    /// Time from hand-over until the batch's last operation completed (or, with no
    /// cipher, until it was given back), divided by `n`; set once.
    exec_ns: Option<u32>,
}

impl Batch {
    fn stamp(&mut self) -> u32 {
        let ns = self.t0.elapsed().as_nanos() / u128::from(self.n);
        *self
            .exec_ns
            .get_or_insert(ns.min(u128::from(u32::MAX)) as u32)
    }
}

/// The chunks between hand-over and give-back, in hand-over order, and their batches.
#[derive(Default)]
struct Line {
    held: VecDeque<Held>,
    /// Ticket of `held[0]` (a chunk's ticket is its operation's `user`).
    first: u64,
    /// Index in `held` of the first chunk not yet submitted (all later ones are queued).
    next: usize,
    /// Batches with chunks still held; `batches[0]` has id `first_batch`.
    batches: VecDeque<Batch>,
    first_batch: u64,
}

impl Line {
    /// Marks the chunk of `ticket`, on the engine, done (its ciphered bytes in `out`) or
    /// failed (`out` is `None` or short); returns whether such a chunk was on the engine.
    fn settle(&mut self, ticket: u64, out: Option<&[u8]>, engine_ns: u32) -> bool {
        let Some(h) = ticket
            .checked_sub(self.first)
            .and_then(|i| self.held.get_mut(usize::try_from(i).ok()?))
        else {
            return false;
        };
        if h.state != State::OnEngine {
            return false;
        }
        h.engine_ns = engine_ns;
        let data = &mut h.chunk.frame.data;
        h.state = match out.and_then(|o| o.get(..data.len())) {
            Some(o) => {
                data.copy_from_slice(o);
                State::Done
            }
            None => State::Failed,
        };
        let b = &mut self.batches[(h.batch - self.first_batch) as usize];
        b.left -= 1;
        if b.left == 0 {
            b.stamp();
        }
        true
    }

    /// Moves the chunks at the front whose batch is finished to `out`.
    fn release(&mut self, out: &mut Vec<Ready>) {
        while let Some(h) = self.held.front() {
            let b = &mut self.batches[(h.batch - self.first_batch) as usize];
            if b.left > 0 {
                break;
            }
            let exec_ns = b.stamp();
            let h = self.held.pop_front().expect("front exists");
            self.first += 1;
            self.next = self.next.saturating_sub(1);
            out.push(Ready {
                chunk: h.chunk,
                exec_ns,
                engine_ns: h.engine_ns,
                ok: h.state == State::Done,
            });
        }
        while !self.batches.is_empty()
            && self.held.front().is_none_or(|h| h.batch > self.first_batch)
        {
            self.batches.pop_front();
            self.first_batch += 1;
        }
    }
}

/// PRESENT-80-CTR on an engine with one session per stream, or none (the No-VNF case
/// forwards chunks unchanged through the same code).
pub struct ChunkCipher {
    engine: Option<(Box<dyn Engine>, Vec<SessionId>)>,
    line: Line,
    on_engine: usize,
    /// Operations built but not yet accepted by the engine (submitted first next time).
    spill: Vec<Op>,
    done: Vec<Completion>,
    /// The last submission call's time per operation it took, ns: the engine time of an
    /// engine that ciphers in the caller's thread (its completions carry no device time).
    submit_ns_per_op: u32,
    last_progress: Instant,
}

impl ChunkCipher {
    /// A cipher on `engine` with one session per key of `keys` (10 bytes each) in
    /// direction `dir`; `None`: no cipher.
    pub fn new(
        engine: Option<Box<dyn Engine>>,
        keys: &[Vec<u8>],
        dir: Direction,
    ) -> anyhow::Result<Self> {
        let engine = match engine {
            Some(mut e) => {
                let mut sids = Vec::with_capacity(keys.len());
                for key in keys {
                    sids.push(
                        e.create_session(SessionSpec::new(Alg::Present80Ctr, dir, key, &[]))
                            .context("PRESENT-80-CTR session")?,
                    );
                }
                Some((e, sids))
            }
            None => None,
        };
        Ok(Self {
            engine,
            line: Line::default(),
            on_engine: 0,
            spill: Vec::new(),
            done: Vec::new(),
            submit_ns_per_op: 0,
            last_progress: Instant::now(),
        })
    }

    /// Chunks held: handed over and not yet given back.
    pub fn held(&self) -> usize {
        self.line.held.len()
    }

    /// Hands over `chunks` (drained) as one batch. The counter block of chunk `seq`
    /// starts at `seq * 64` (a chunk is at most 64 PRESENT blocks), so no two chunks of
    /// a stream's key share a counter. Chunks beyond `MAX_HELD` go to `out` at once,
    /// failed.
    pub fn push(&mut self, chunks: &mut Vec<Chunk>, out: &mut Vec<Ready>) {
        let take = chunks.len().min(MAX_HELD.saturating_sub(self.held()));
        for chunk in chunks.drain(take..) {
            out.push(Ready {
                chunk,
                exec_ns: 0,
                engine_ns: 0,
                ok: false,
            });
        }
        if take == 0 {
            return;
        }
        let (state, left) = match self.engine {
            Some(_) => (State::Queued, take as u32),
            None => (State::Done, 0),
        };
        let line = &mut self.line;
        let batch = line.first_batch + line.batches.len() as u64;
        line.batches.push_back(Batch {
            t0: Instant::now(),
            n: take as u32,
            left,
            exec_ns: None,
        });
        line.held.extend(chunks.drain(..).map(|chunk| Held {
            chunk,
            state,
            batch,
            engine_ns: 0,
        }));
    }

    /// Submits queued chunks while fewer than `MAX_IN_FLIGHT` are on the engine and
    /// collects what completed; never blocks. Errs when the engine has made no progress
    /// for `STALL_LIMIT` with chunks on it.
    pub fn pump(&mut self) -> anyhow::Result<()> {
        while self.submit_some() + self.reap() > 0 {}
        anyhow::ensure!(
            self.on_engine == 0 || self.last_progress.elapsed() < STALL_LIMIT,
            "{} chunk(s) not completed within {STALL_LIMIT:?}",
            self.on_engine
        );
        Ok(())
    }

    /// Gives back, in hand-over order, the chunks whose whole batch is finished.
    pub fn take_ready(&mut self, out: &mut Vec<Ready>) {
        self.line.release(out);
    }

    /// Waits up to `limit` for a completion, asleep on the engine's completion signal
    /// (polling instead takes the core from the device and the other hops on a small
    /// machine: docs/benchmarks/edge-video.md).
    pub fn wait(&mut self, limit: Duration) {
        if let Some((e, _)) = self.engine.as_mut().filter(|_| self.on_engine > 0) {
            e.wait_ready(1, limit);
        }
        self.reap();
    }

    /// Builds the operations of up to one window of queued chunks (within
    /// `MAX_IN_FLIGHT`) and submits what is built; returns how many chunks moved.
    fn submit_some(&mut self) -> usize {
        let Some((e, sids)) = self.engine.as_mut() else {
            return 0;
        };
        let line = &mut self.line;
        let room = MAX_IN_FLIGHT.saturating_sub(self.on_engine).min(WINDOW);
        let mut moved = 0;
        while moved < room && line.next < line.held.len() {
            let ticket = line.first + line.next as u64;
            let h = &mut line.held[line.next];
            line.next += 1;
            moved += 1;
            h.state = State::OnEngine;
            self.on_engine += 1;
            match build_op(e.as_mut(), sids, &h.chunk, ticket) {
                Ok(op) => self.spill.push(op),
                Err(_) => {
                    line.settle(ticket, None, 0);
                    self.on_engine -= 1;
                }
            }
        }
        if moved > 0 && self.on_engine == self.spill.len() {
            self.last_progress = Instant::now();
        }
        let t = Instant::now();
        match e.submit(&mut self.spill) {
            Ok(n) => {
                if n > 0 {
                    let ns = t.elapsed().as_nanos() / n as u128;
                    self.submit_ns_per_op = ns.min(u128::from(u32::MAX)) as u32;
                }
                moved + n
            }
            Err(_) => {
                for op in std::mem::take(&mut self.spill) {
                    if line.settle(op.user, None, 0) {
                        self.on_engine -= 1;
                    }
                    moved += 1;
                }
                moved
            }
        }
    }

    /// Collects completed operations into their chunks; returns how many.
    fn reap(&mut self) -> usize {
        let Some((e, _)) = self.engine.as_mut() else {
            return 0;
        };
        self.done.clear();
        let n = e.poll(&mut self.done, usize::MAX);
        for c in self.done.drain(..) {
            let ok = c.status == nfx_accel::Status::Ok;
            let engine_ns = c.device_ns.unwrap_or(self.submit_ns_per_op);
            if self
                .line
                .settle(c.op.user, ok.then(|| c.op.buf.as_slice()), engine_ns)
            {
                self.on_engine -= 1;
            }
        }
        if n > 0 {
            self.last_progress = Instant::now();
        }
        n
    }
}

/// The operation ciphering `c` in a buffer of the engine's, tagged with `ticket`.
fn build_op(
    e: &mut dyn Engine,
    sids: &[SessionId],
    c: &Chunk,
    ticket: u64,
) -> Result<Op, nfx_accel::AccelError> {
    let f = &c.frame;
    let sid = match sids.get(c.stream) {
        Some(sid) if f.data.len() <= MAX_CHUNK => *sid,
        _ => {
            return Err(nfx_accel::AccelError::BadArgument(format!(
                "chunk of {} bytes for stream {}",
                f.data.len(),
                c.stream
            )))
        }
    };
    let mut buf = e.alloc_buf(MAX_CHUNK)?;
    buf.fill_from(&f.data)?;
    Ok(Op {
        session: sid,
        iv: Iv::new(&f.seq.wrapping_mul(64).to_be_bytes()),
        layout: Layout::packed(0, f.data.len()),
        buf,
        user: ticket,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_accel::{AccelError, Buf, EngineKind, EngineStats, Status};

    fn chunk(stream: usize, seq: u64, data: &[u8]) -> Chunk {
        Chunk {
            stream,
            frame: Frame {
                seq,
                t_src: seq,
                exec_ns: 0,
                engine_ns: 0,
                data: data.to_vec(),
            },
        }
    }

    fn clear(n: usize) -> Vec<Chunk> {
        (0..n)
            .map(|i| {
                let d: Vec<u8> = (0..512u32).map(|b| (b as usize * 7 + i) as u8).collect();
                chunk(i % 3, i as u64 / 3, &d[..128 + (i * 37) % 385])
            })
            .collect()
    }

    const KEYS: [[u8; 10]; 3] = [[7; 10], [8; 10], [9; 10]];

    fn keys() -> Vec<Vec<u8>> {
        KEYS.iter().map(|k| k.to_vec()).collect()
    }

    fn cipher(e: Box<dyn Engine>, dir: Direction) -> ChunkCipher {
        ChunkCipher::new(Some(e), &keys(), dir).unwrap()
    }

    /// Hands `chunks` over as one batch and waits until all are back: the ciphered ones
    /// replace `chunks`, in order; returns how many failed.
    fn apply(c: &mut ChunkCipher, chunks: &mut Vec<Chunk>) -> u64 {
        let mut out = Vec::new();
        c.push(chunks, &mut out);
        while c.held() > 0 {
            c.pump().unwrap();
            c.take_ready(&mut out);
            c.wait(Duration::from_millis(10));
        }
        let failed = out.iter().filter(|r| !r.ok).count() as u64;
        chunks.extend(out.into_iter().filter(|r| r.ok).map(|r| r.chunk));
        failed
    }

    #[test]
    fn batches_round_trip_across_streams_and_windows_in_order() {
        // 150 chunks: two full windows and a partial one, three streams interleaved.
        let plain = clear(150);
        let mut enc = cipher(nfx_accel::soft_engine(), Direction::Encrypt);
        let mut got = plain.clone();
        assert_eq!(apply(&mut enc, &mut got), 0);
        assert_eq!(got.len(), plain.len());
        for (g, p) in got.iter().zip(&plain) {
            let (gf, pf) = (&g.frame, &p.frame);
            assert_eq!(
                (g.stream, gf.seq, gf.data.len()),
                (p.stream, pf.seq, pf.data.len())
            );
            assert_ne!(gf.data, pf.data);
        }
        // Chunk by chunk on the bitsliced engine gives the same cipher text.
        let mut one = cipher(nfx_accel::bitsliced_engine(), Direction::Encrypt);
        for (g, p) in got.iter().zip(&plain) {
            let mut v = vec![p.clone()];
            apply(&mut one, &mut v);
            assert_eq!(v[0], *g, "chunk {} of stream {}", p.frame.seq, p.stream);
        }
        let mut dec = cipher(nfx_accel::bitsliced_engine(), Direction::Decrypt);
        assert_eq!(apply(&mut dec, &mut got), 0);
        assert_eq!(got, plain);
        // Streams have their own keys: the same chunk differs between streams.
        let mut a = vec![chunk(0, 5, &[1; 64]), chunk(1, 5, &[1; 64])];
        apply(&mut enc, &mut a);
        assert_ne!(a[0].frame.data, a[1].frame.data);
    }

    #[test]
    fn no_cipher_forwards_chunks_unchanged() {
        let plain = clear(5);
        let mut none = ChunkCipher::new(None, &keys(), Direction::Encrypt).unwrap();
        let mut got = plain.clone();
        assert_eq!(apply(&mut none, &mut got), 0);
        assert_eq!(got, plain);
    }

    /// The portable engine behind a device that fails chosen operations and hands
    /// completions back newest first.
    struct Faulty {
        inner: Box<dyn Engine>,
        fail: Vec<u64>,
        refuse_after: Option<usize>,
        submitted: usize,
        out: Vec<Completion>,
        /// While set, nothing completes (a device descheduled or busy).
        hold: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Engine for Faulty {
        fn kind(&self) -> EngineKind {
            EngineKind::Lookaside
        }
        fn create_session(&mut self, spec: SessionSpec) -> Result<SessionId, AccelError> {
            self.inner.create_session(spec)
        }
        fn destroy_session(&mut self, id: SessionId) -> Result<(), AccelError> {
            self.inner.destroy_session(id)
        }
        fn alloc_buf(&mut self, capacity: usize) -> Result<Buf, AccelError> {
            self.inner.alloc_buf(capacity)
        }
        fn submit(&mut self, ops: &mut Vec<Op>) -> Result<usize, AccelError> {
            if self.refuse_after.is_some_and(|n| self.submitted >= n) {
                return Err(AccelError::DeviceGone("test: device lost".into()));
            }
            // A small ring: at most 16 operations per call.
            let take = ops.len().min(16);
            let mut part: Vec<Op> = ops.drain(..take).collect();
            self.inner.submit(&mut part)?;
            self.submitted += take;
            let mut done = Vec::new();
            self.inner.poll(&mut done, usize::MAX);
            for mut c in done {
                // Each listed operation fails once.
                if let Some(k) = self.fail.iter().position(|u| *u == c.op.user) {
                    self.fail.remove(k);
                    c.status = Status::BadArgument;
                }
                self.out.push(c);
            }
            Ok(take)
        }
        fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
            if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
                return 0;
            }
            let n = self.out.len().min(max);
            out.extend(self.out.drain(..n).rev());
            n
        }
        fn in_flight(&self) -> usize {
            self.out.len()
        }
        fn stats(&self) -> EngineStats {
            self.inner.stats()
        }
    }

    fn faulty(fail: Vec<u64>, refuse_after: Option<usize>) -> ChunkCipher {
        cipher(
            Box::new(Faulty {
                inner: nfx_accel::soft_engine(),
                fail,
                refuse_after,
                submitted: 0,
                out: Vec::new(),
                hold: Default::default(),
            }),
            Direction::Encrypt,
        )
    }

    #[test]
    fn a_device_error_mid_batch_drops_only_its_chunks_and_keeps_the_cipher_usable() {
        let plain = clear(100);
        let mut want = plain.clone();
        apply(
            &mut cipher(nfx_accel::soft_engine(), Direction::Encrypt),
            &mut want,
        );
        // Operations 3, 40 and 70 fail (in two windows); completions come back reversed.
        let mut c = faulty(vec![3, 40, 70], None);
        let mut got = plain.clone();
        assert_eq!(apply(&mut c, &mut got), 3);
        let kept: Vec<Chunk> = want
            .iter()
            .enumerate()
            .filter(|(i, _)| ![3, 40, 70].contains(i))
            .map(|(_, c)| c.clone())
            .collect();
        assert_eq!(got, kept);
        // The next batch on the same cipher is whole: no state was lost.
        let mut again = plain[..10].to_vec();
        assert_eq!(apply(&mut c, &mut again), 0);
        assert_eq!(again, want[..10]);
    }

    #[test]
    fn a_device_lost_mid_batch_drops_the_rest_counted() {
        let plain = clear(40);
        let mut want = plain.clone();
        apply(
            &mut cipher(nfx_accel::soft_engine(), Direction::Encrypt),
            &mut want,
        );
        let mut c = faulty(Vec::new(), Some(32));
        let mut got = plain.clone();
        assert_eq!(apply(&mut c, &mut got), 8);
        assert_eq!(got, want[..32]);
        // Oversized chunks and unknown streams are refused before the engine sees them.
        let mut bad = vec![chunk(0, 1, &[0; 600]), chunk(9, 1, &[0; 16])];
        let mut ok = cipher(nfx_accel::soft_engine(), Direction::Encrypt);
        assert_eq!(apply(&mut ok, &mut bad), 2);
        assert!(bad.is_empty());
    }

    #[test]
    fn batches_pipeline_come_back_in_order_and_stay_bounded() {
        let plain = clear(MAX_HELD + 126);
        let mut want = plain.clone();
        apply(
            &mut cipher(nfx_accel::soft_engine(), Direction::Encrypt),
            &mut want,
        );
        let hold = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut c = cipher(
            Box::new(Faulty {
                inner: nfx_accel::soft_engine(),
                fail: Vec::new(),
                refuse_after: None,
                submitted: 0,
                out: Vec::new(),
                hold: hold.clone(),
            }),
            Direction::Encrypt,
        );
        // Three batches handed over while the engine completes nothing: at most
        // MAX_IN_FLIGHT go to the engine, MAX_HELD are held, the excess fails at once.
        let mut out = Vec::new();
        for (from, to) in [(0, 100), (100, 250), (250, MAX_HELD + 126)] {
            c.push(&mut plain[from..to].to_vec(), &mut out);
            c.pump().unwrap();
            c.take_ready(&mut out);
            assert_eq!(c.on_engine, to.min(MAX_IN_FLIGHT));
        }
        assert_eq!(c.held(), MAX_HELD);
        assert_eq!(out.len(), 126);
        assert!(out.iter().all(|r| !r.ok));
        assert_eq!(out[0].chunk, plain[MAX_HELD]);
        out.clear();
        hold.store(false, std::sync::atomic::Ordering::SeqCst);
        while c.held() > 0 {
            c.pump().unwrap();
            c.take_ready(&mut out);
        }
        let got: Vec<Chunk> = out.iter().map(|r| r.chunk.clone()).collect();
        assert_eq!(got, want[..MAX_HELD]);
        assert!(out.iter().all(|r| r.ok && r.exec_ns > 0 && r.engine_ns > 0));
    }
}
