//! The edge and cloud VNFs as workers: one thread serves every stream of a run, as a
//! VNF's worker core serves its ports. Each pass waits for the first message, then takes
//! one message from every readable stream per round (a vector across streams, up to
//! `MAX_ROUNDS` rounds or `MAX_BATCH` chunks), runs the cipher over all the chunks at
//! once (one burst to the lookaside device for HW-VNF) and sends them on. A chunk's
//! execution time is its batch's cipher time divided by the batch's chunks.

use super::cipher::{Chunk, ChunkCipher};
use super::flow::{parse_record, Chunker, Frame, Link, END, FRAME_HDR, MAX_CHUNK, RECORD, REC_HDR};
use nfx_io::Waiter;
use std::time::{Duration, Instant};

/// Rounds of one message per readable stream gathered into one batch.
const MAX_ROUNDS: usize = 16;
/// Chunks after which a batch goes to the cipher without another round.
const MAX_BATCH: usize = 256;

/// One stream's hop through a VNF: where its messages come from and go to.
pub struct Hop {
    /// From `src` (edge) or the edge VNF (cloud).
    pub up: Link,
    /// To the cloud VNF (edge) or `dst` (cloud).
    pub down: Link,
}

/// What a VNF worker counted, per stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VnfCounts {
    /// Messages from upstream that were not well-formed (dropped).
    pub malformed: Vec<u64>,
    /// Chunks the cipher dropped because their operation failed.
    pub dropped: Vec<u64>,
}

impl VnfCounts {
    fn new(n: usize) -> Self {
        Self {
            malformed: vec![0; n],
            dropped: vec![0; n],
        }
    }
}

/// What a worker does with one message of stream `s` (`None`: the upstream closed);
/// returns whether the stream has ended.
type OnMessage<'a> = dyn FnMut(usize, Option<&[u8]>) -> anyhow::Result<bool> + 'a;

/// The upstream links still open, polled together.
struct Inbox {
    live: Vec<bool>,
    /// Waiter slot → stream.
    slots: Vec<usize>,
    waiter: Waiter,
}

impl Inbox {
    fn new(hops: &[Hop]) -> Self {
        let mut inbox = Self {
            live: vec![true; hops.len()],
            slots: Vec::new(),
            waiter: Waiter::new(&[]),
        };
        inbox.rebuild(hops);
        inbox
    }

    fn rebuild(&mut self, hops: &[Hop]) {
        self.slots = (0..hops.len()).filter(|&i| self.live[i]).collect();
        let fds: Vec<_> = self.slots.iter().map(|&i| hops[i].up.fd()).collect();
        self.waiter = Waiter::new(&fds);
    }

    fn any_live(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Gathers one batch: waits up to `idle` for a first message, then reads one
    /// message from each readable stream per round. `on(stream, message)` gets each
    /// (`None`: the upstream closed, or every stream was idle for `idle` — their end
    /// markers were lost — and all end) and says whether the stream has ended.
    fn gather(
        &mut self,
        hops: &mut [Hop],
        (hdr, max_body): (usize, usize),
        idle: Duration,
        full: &dyn Fn() -> bool,
        on: &mut OnMessage<'_>,
    ) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        for round in 0..MAX_ROUNDS {
            let wait = if round == 0 { idle } else { Duration::ZERO };
            if !self.waiter.wait(wait)? {
                if round == 0 {
                    // Nothing from any stream for `idle`: their ends were lost (UDP).
                    // End them all; `dst` counts what never came as lost.
                    for s in self.slots.clone() {
                        on(s, None)?;
                        self.live[s] = false;
                    }
                    self.rebuild(hops);
                }
                return Ok(());
            }
            let ready: Vec<usize> = (0..self.slots.len())
                .filter(|&k| self.waiter.ready(k))
                .map(|k| self.slots[k])
                .collect();
            let mut ended = false;
            for s in ready {
                let msg = match hops[s].up.recv(hdr, max_body, &mut buf)? {
                    true => Some(buf.as_slice()),
                    false => None,
                };
                if on(s, msg)? {
                    self.live[s] = false;
                    ended = true;
                }
            }
            if ended {
                self.rebuild(hops);
                return Ok(());
            }
            if full() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Runs the cipher over `batch`, stamps each chunk with its share of the batch's time
/// (edge only) and sends every chunk down its stream's hop.
fn run_batch(
    hops: &mut [Hop],
    cipher: &mut ChunkCipher,
    batch: &mut Vec<Chunk>,
    counts: &mut VnfCounts,
    stamp: bool,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    for c in batch.iter() {
        counts.dropped[c.stream] += 1;
    }
    let n = batch.len() as u128;
    let t = Instant::now();
    cipher.apply(batch)?;
    let exec_ns = (t.elapsed().as_nanos() / n).min(u128::from(u32::MAX)) as u32;
    for c in batch.drain(..) {
        counts.dropped[c.stream] -= 1;
        let mut f = c.frame;
        if stamp {
            f.exec_ns = exec_ns;
        }
        hops[c.stream].down.send(&f.encode())?;
    }
    Ok(())
}

fn end_frame() -> Vec<u8> {
    Frame {
        seq: END,
        t_src: 0,
        exec_ns: 0,
        data: Vec::new(),
    }
    .encode()
}

/// The edge VNF: records in from every stream's `src`, cut into `chunk`-byte chunks,
/// encrypted in batches across streams, out to the cloud VNF.
pub fn edge(
    mut hops: Vec<Hop>,
    chunk: usize,
    mut cipher: ChunkCipher,
    idle: Duration,
) -> anyhow::Result<VnfCounts> {
    let n = hops.len();
    let mut counts = VnfCounts::new(n);
    let mut chunkers: Vec<Chunker> = (0..n).map(|_| Chunker::new(chunk)).collect();
    let mut inbox = Inbox::new(&hops);
    let mut batch = std::cell::RefCell::new(Vec::new());
    let mut ended = Vec::new();
    while inbox.any_live() {
        let malformed = &mut counts.malformed;
        inbox.gather(
            &mut hops,
            (REC_HDR, RECORD),
            idle,
            &|| batch.borrow().len() >= MAX_BATCH,
            &mut |s, msg| {
                let Some(msg) = msg else {
                    ended.push(s);
                    return Ok(true);
                };
                let Some((off, t_src, payload)) = parse_record(msg) else {
                    malformed[s] += 1;
                    return Ok(false);
                };
                let mut b = batch.borrow_mut();
                let mut emit = |seq: u64, d: &mut Vec<u8>| {
                    b.push(Chunk {
                        stream: s,
                        frame: Frame {
                            seq,
                            t_src,
                            exec_ns: 0,
                            data: std::mem::take(d),
                        },
                    });
                    Ok(())
                };
                if payload.is_empty() {
                    chunkers[s].finish(off, &mut emit)?;
                    ended.push(s);
                    return Ok(true);
                }
                chunkers[s].push(off, payload, &mut emit)?;
                Ok(false)
            },
        )?;
        run_batch(&mut hops, &mut cipher, batch.get_mut(), &mut counts, true)?;
        for s in ended.drain(..) {
            hops[s].down.send_last(&end_frame())?;
        }
    }
    Ok(counts)
}

/// The cloud VNF: chunk frames in from the edge VNF on every stream, decrypted in
/// batches across streams, out to each stream's `dst`.
pub fn cloud(
    mut hops: Vec<Hop>,
    mut cipher: ChunkCipher,
    idle: Duration,
) -> anyhow::Result<VnfCounts> {
    let n = hops.len();
    let mut counts = VnfCounts::new(n);
    let mut inbox = Inbox::new(&hops);
    let mut batch = std::cell::RefCell::new(Vec::new());
    let mut ended = Vec::new();
    while inbox.any_live() {
        let malformed = &mut counts.malformed;
        inbox.gather(
            &mut hops,
            (FRAME_HDR, MAX_CHUNK),
            idle,
            &|| batch.borrow().len() >= MAX_BATCH,
            &mut |s, msg| {
                let Some(msg) = msg else {
                    ended.push(s);
                    return Ok(true);
                };
                let Some(frame) = Frame::decode(msg) else {
                    malformed[s] += 1;
                    return Ok(false);
                };
                if frame.seq == END {
                    ended.push(s);
                    return Ok(true);
                }
                batch.borrow_mut().push(Chunk { stream: s, frame });
                Ok(false)
            },
        )?;
        run_batch(&mut hops, &mut cipher, batch.get_mut(), &mut counts, false)?;
        for s in ended.drain(..) {
            hops[s].down.send_last(&end_frame())?;
        }
    }
    Ok(counts)
}
