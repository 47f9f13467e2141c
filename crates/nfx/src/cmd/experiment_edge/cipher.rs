//! The chunk cipher of the edge and cloud VNFs: PRESENT-80-CTR, one session per stream,
//! applied to a whole batch of chunks (from any streams) at once. On the lookaside device
//! a batch is one burst of ring entries — the device runs the bitsliced engine across
//! them in one pass — and its completions are reaped in bursts; on the portable engine
//! the same code runs the chunks one after another in the VNF's thread. A chunk whose
//! operation fails is dropped and counted; the rest of the batch goes on.

use anyhow::Context;
use nfx_accel::{Alg, Completion, Direction, Engine, Iv, Layout, Op, SessionId, SessionSpec};
use std::time::{Duration, Instant};

use super::flow::{Frame, MAX_CHUNK};
/// Chunks submitted to the engine before their completions are reaped (the device
/// serves up to 64 entries of a queue pair per pass).
pub const WINDOW: usize = 64;
/// How long a window's completions may take before the batch fails (the lookaside
/// client fails over to its fallback engine long before).
const REAP_LIMIT: Duration = Duration::from_secs(10);

/// One chunk of one stream on its way through a VNF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Index of its stream in the VNF's stream list.
    pub stream: usize,
    /// The chunk's frame; its data is encrypted or decrypted in place.
    pub frame: Frame,
}

/// PRESENT-80-CTR on an engine with one session per stream, or none (the No-VNF case
/// forwards chunks unchanged through the same code).
pub struct ChunkCipher {
    engine: Option<(Box<dyn Engine>, Vec<SessionId>)>,
    done: Vec<Completion>,
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
            done: Vec::new(),
        })
    }

    /// Encrypts or decrypts every chunk of `chunks` in place. The counter block of chunk
    /// `seq` starts at `seq * 64` (a chunk is at most 64 PRESENT blocks), so no two
    /// chunks of a stream's key share a counter. Chunks whose operation failed (refused
    /// by the engine, or completed with an error status) are removed, the others keep
    /// their order; returns how many were dropped.
    pub fn apply(&mut self, chunks: &mut Vec<Chunk>) -> anyhow::Result<u64> {
        if self.engine.is_none() {
            return Ok(0);
        }
        let mut failed = vec![false; chunks.len()];
        for start in (0..chunks.len()).step_by(WINDOW) {
            let end = (start + WINDOW).min(chunks.len());
            self.window(start, &mut chunks[start..end], &mut failed)?;
        }
        let mut i = 0;
        chunks.retain(|_| {
            i += 1;
            !failed[i - 1]
        });
        Ok(failed.iter().filter(|f| **f).count() as u64)
    }

    /// Submits one window of chunks (`first` is the index of its first chunk in the
    /// batch) as one burst, then reaps every completion.
    fn window(
        &mut self,
        first: usize,
        chunks: &mut [Chunk],
        failed: &mut [bool],
    ) -> anyhow::Result<()> {
        let Some((e, sids)) = self.engine.as_mut() else {
            return Ok(());
        };
        let mut ops = Vec::with_capacity(chunks.len());
        for (i, c) in chunks.iter().enumerate() {
            let f = &c.frame;
            let op = match sids.get(c.stream) {
                Some(sid) if f.data.len() <= MAX_CHUNK => {
                    e.alloc_buf(MAX_CHUNK).and_then(|mut buf| {
                        buf.fill_from(&f.data)?;
                        Ok(Op {
                            session: *sid,
                            iv: Iv::new(&f.seq.wrapping_mul(64).to_be_bytes()),
                            layout: Layout::packed(0, f.data.len()),
                            buf,
                            user: (first + i) as u64,
                        })
                    })
                }
                _ => Err(nfx_accel::AccelError::BadArgument(format!(
                    "chunk of {} bytes for stream {}",
                    f.data.len(),
                    c.stream
                ))),
            };
            match op {
                Ok(op) => ops.push(op),
                Err(_) => failed[first + i] = true,
            }
        }
        let t0 = Instant::now();
        while !ops.is_empty() {
            match e.submit(&mut ops) {
                Ok(0) => {
                    // The ring is full: make room by reaping what is done.
                    e.wait_ready(1, Duration::from_millis(1));
                    self.done.clear();
                    e.poll(&mut self.done, usize::MAX);
                    take(&mut self.done, first, chunks, failed);
                }
                Ok(_) => {}
                Err(_) => {
                    for op in ops.drain(..) {
                        failed[op.user as usize] = true;
                    }
                }
            }
            anyhow::ensure!(t0.elapsed() < REAP_LIMIT, "the engine accepts no work");
        }
        while e.in_flight() > 0 {
            anyhow::ensure!(
                t0.elapsed() < REAP_LIMIT,
                "{} chunk(s) not completed within {REAP_LIMIT:?}",
                e.in_flight()
            );
            e.wait_ready(e.in_flight(), Duration::from_millis(100));
            self.done.clear();
            e.poll(&mut self.done, usize::MAX);
            take(&mut self.done, first, chunks, failed);
        }
        Ok(())
    }
}

/// Copies completed chunks back into the window (matched by their `user` index, so the
/// order completions come in does not matter) and marks failed ones.
fn take(done: &mut Vec<Completion>, first: usize, chunks: &mut [Chunk], failed: &mut [bool]) {
    for c in done.drain(..) {
        let i = c.op.user as usize;
        let Some(chunk) = i.checked_sub(first).and_then(|k| chunks.get_mut(k)) else {
            continue;
        };
        let data = &mut chunk.frame.data;
        match c.op.buf.as_slice().get(..data.len()) {
            Some(out) if c.status == nfx_accel::Status::Ok => data.copy_from_slice(out),
            _ => failed[i] = true,
        }
    }
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

    #[test]
    fn batches_round_trip_across_streams_and_windows_in_order() {
        // 150 chunks: two full windows and a partial one, three streams interleaved.
        let plain = clear(150);
        let mut enc = cipher(nfx_accel::soft_engine(), Direction::Encrypt);
        let mut got = plain.clone();
        assert_eq!(enc.apply(&mut got).unwrap(), 0);
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
            one.apply(&mut v).unwrap();
            assert_eq!(v[0], *g, "chunk {} of stream {}", p.frame.seq, p.stream);
        }
        let mut dec = cipher(nfx_accel::bitsliced_engine(), Direction::Decrypt);
        assert_eq!(dec.apply(&mut got).unwrap(), 0);
        assert_eq!(got, plain);
        // Streams have their own keys: the same chunk differs between streams.
        let mut a = vec![chunk(0, 5, &[1; 64]), chunk(1, 5, &[1; 64])];
        enc.apply(&mut a).unwrap();
        assert_ne!(a[0].frame.data, a[1].frame.data);
    }

    #[test]
    fn no_cipher_forwards_chunks_unchanged() {
        let plain = clear(5);
        let mut none = ChunkCipher::new(None, &keys(), Direction::Encrypt).unwrap();
        let mut got = plain.clone();
        assert_eq!(none.apply(&mut got).unwrap(), 0);
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
            }),
            Direction::Encrypt,
        )
    }

    #[test]
    fn a_device_error_mid_batch_drops_only_its_chunks_and_keeps_the_cipher_usable() {
        let plain = clear(100);
        let mut want = plain.clone();
        cipher(nfx_accel::soft_engine(), Direction::Encrypt)
            .apply(&mut want)
            .unwrap();
        // Operations 3, 40 and 70 fail (in two windows); completions come back reversed.
        let mut c = faulty(vec![3, 40, 70], None);
        let mut got = plain.clone();
        assert_eq!(c.apply(&mut got).unwrap(), 3);
        let kept: Vec<Chunk> = want
            .iter()
            .enumerate()
            .filter(|(i, _)| ![3, 40, 70].contains(i))
            .map(|(_, c)| c.clone())
            .collect();
        assert_eq!(got, kept);
        // The next batch on the same cipher is whole: no state was lost.
        let mut again = plain[..10].to_vec();
        assert_eq!(c.apply(&mut again).unwrap(), 0);
        assert_eq!(again, want[..10]);
    }

    #[test]
    fn a_device_lost_mid_batch_drops_the_rest_counted() {
        let plain = clear(40);
        let mut want = plain.clone();
        cipher(nfx_accel::soft_engine(), Direction::Encrypt)
            .apply(&mut want)
            .unwrap();
        let mut c = faulty(Vec::new(), Some(32));
        let mut got = plain.clone();
        assert_eq!(c.apply(&mut got).unwrap(), 8);
        assert_eq!(got, want[..32]);
        // Oversized chunks and unknown streams are refused before the engine sees them.
        let mut bad = vec![chunk(0, 1, &[0; 600]), chunk(9, 1, &[0; 16])];
        let mut ok = cipher(nfx_accel::soft_engine(), Direction::Encrypt);
        assert_eq!(ok.apply(&mut bad).unwrap(), 2);
        assert!(bad.is_empty());
    }
}
