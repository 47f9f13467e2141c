//! The edge and cloud VNFs as workers: one thread serves every stream of a run, as a
//! VNF's worker core serves its ports. Each pass waits for the first message, then takes
//! one message from every readable stream per round (a vector across streams, up to
//! `MAX_ROUNDS` rounds or `MAX_BATCH` chunks) and hands them to the pipelined cipher at
//! once (one burst to the lookaside device for HW-VNF); it sends chunks on as the cipher
//! gives them back, in order, and keeps receiving while the device works. A chunk's
//! execution time is its batch's time in the cipher divided by the batch's chunks.

use super::cipher::{Chunk, ChunkCipher, Ready, MAX_HELD};
use super::flow::{parse_record, Chunker, Frame, Link, END, FRAME_HDR, MAX_CHUNK, RECORD, REC_HDR};
use nfx_io::Waiter;
use std::time::Duration;

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

    /// Gathers one batch: waits up to `idle` for a first message (not at all when
    /// `busy`: the worker has chunks in the cipher), then reads one message from each
    /// readable stream per round. `on(stream, message)` gets each
    /// (`None`: the upstream closed, or every stream was idle for `idle` — their end
    /// markers were lost — and all end) and says whether the stream has ended.
    fn gather(
        &mut self,
        hops: &mut [Hop],
        (hdr, max_body): (usize, usize),
        (idle, busy): (Duration, bool),
        full: &dyn Fn() -> bool,
        on: &mut OnMessage<'_>,
    ) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        for round in 0..MAX_ROUNDS {
            let wait = if round == 0 && !busy {
                idle
            } else {
                Duration::ZERO
            };
            if !self.waiter.wait(wait)? {
                if round == 0 && !busy {
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
                if full() {
                    // The streams not read this round stay readable for the next pass.
                    break;
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

/// Sends the chunks the cipher gave back down their streams' hops (the edge stamps each
/// with its execution and engine times); failed ones are dropped and counted.
fn send_ready(
    hops: &mut [Hop],
    ready: &mut Vec<Ready>,
    (counts, held): (&mut VnfCounts, &mut [usize]),
    stamp: bool,
) -> anyhow::Result<()> {
    for r in ready.drain(..) {
        let s = r.chunk.stream;
        held[s] -= 1;
        if !r.ok {
            counts.dropped[s] += 1;
            continue;
        }
        let mut f = r.chunk.frame;
        if stamp {
            f.exec_ns = r.exec_ns;
            f.engine_ns = r.engine_ns;
        }
        hops[s].down.send(&f.encode())?;
    }
    Ok(())
}

fn end_frame() -> Vec<u8> {
    Frame {
        seq: END,
        t_src: 0,
        exec_ns: 0,
        engine_ns: 0,
        data: Vec::new(),
    }
    .encode()
}

/// What a worker makes of one well-delivered message of stream `s`: chunks pushed to the
/// batch, malformed messages counted; returns whether the stream has ended.
type Parse<'a> = dyn FnMut(usize, &[u8], &mut Vec<Chunk>, &mut u64) -> anyhow::Result<bool> + 'a;

/// How long a worker with chunks in the cipher waits for a completion before it looks
/// at its sockets again (the cipher polls, then sleeps on the engine).
const WAIT: Duration = Duration::from_micros(200);

/// The worker loop shared by both VNFs: gather a batch across streams with `parse` and
/// hand it to the cipher, send on what the cipher gives back (in order), and send a
/// stream's end marker once its last chunk is out. While the cipher holds chunks the
/// worker keeps receiving (without blocking) and waits for completions only when no
/// socket has anything, so a slow device never leaves the sockets unread.
fn serve(
    mut hops: Vec<Hop>,
    mut cipher: ChunkCipher,
    (limits, stamp, idle): ((usize, usize), bool, Duration),
    parse: &mut Parse<'_>,
) -> anyhow::Result<VnfCounts> {
    let mut counts = VnfCounts::new(hops.len());
    let mut inbox = Inbox::new(&hops);
    let mut batch = std::cell::RefCell::new(Vec::new());
    // Per stream: chunks in the cipher; streams ended whose end marker is not sent.
    let mut held = vec![0usize; hops.len()];
    let (mut ended, mut ready) = (Vec::new(), Vec::new());
    while inbox.any_live() || cipher.held() > 0 {
        let busy = cipher.held() > 0;
        // A batch ends within one message of MAX_BATCH chunks (a message is at most
        // RECORD bytes, 11 chunks): gathering never overfills the cipher.
        if inbox.any_live() && cipher.held() + 2 * MAX_BATCH <= MAX_HELD {
            let malformed = &mut counts.malformed;
            inbox.gather(
                &mut hops,
                limits,
                (idle, busy),
                &|| batch.borrow().len() >= MAX_BATCH,
                &mut |s, msg| {
                    let end = match msg {
                        Some(m) => parse(s, m, &mut batch.borrow_mut(), &mut malformed[s])?,
                        None => true,
                    };
                    if end {
                        ended.push(s);
                    }
                    Ok(end)
                },
            )?;
        }
        let gathered = !batch.get_mut().is_empty();
        for c in batch.get_mut().iter() {
            held[c.stream] += 1;
        }
        cipher.push(batch.get_mut(), &mut ready);
        cipher.pump()?;
        cipher.take_ready(&mut ready);
        if busy && !gathered && ready.is_empty() {
            cipher.wait(WAIT);
            cipher.take_ready(&mut ready);
        }
        send_ready(&mut hops, &mut ready, (&mut counts, &mut held), stamp)?;
        let mut result = Ok(());
        ended.retain(|&s| {
            if held[s] > 0 || result.is_err() {
                return true;
            }
            result = hops[s].down.send_last(&end_frame());
            false
        });
        result?;
    }
    Ok(counts)
}

/// The edge VNF: records in from every stream's `src`, cut into `chunk`-byte chunks,
/// encrypted in batches across streams, out to the cloud VNF.
pub fn edge(
    hops: Vec<Hop>,
    chunk: usize,
    cipher: ChunkCipher,
    idle: Duration,
) -> anyhow::Result<VnfCounts> {
    let mut chunkers: Vec<Chunker> = (0..hops.len()).map(|_| Chunker::new(chunk)).collect();
    let parse = &mut |s: usize, msg: &[u8], batch: &mut Vec<Chunk>, malformed: &mut u64| {
        let Some((off, t_src, payload)) = parse_record(msg) else {
            *malformed += 1;
            return Ok(false);
        };
        let mut emit = |seq: u64, d: &mut Vec<u8>| {
            batch.push(Chunk {
                stream: s,
                frame: Frame {
                    seq,
                    t_src,
                    exec_ns: 0,
                    engine_ns: 0,
                    data: std::mem::take(d),
                },
            });
            Ok(())
        };
        if payload.is_empty() {
            chunkers[s].finish(off, &mut emit)?;
            return Ok(true);
        }
        chunkers[s].push(off, payload, &mut emit)?;
        Ok(false)
    };
    serve(hops, cipher, ((REC_HDR, RECORD), true, idle), parse)
}

/// The cloud VNF: chunk frames in from the edge VNF on every stream, decrypted in
/// batches across streams, out to each stream's `dst`.
pub fn cloud(hops: Vec<Hop>, cipher: ChunkCipher, idle: Duration) -> anyhow::Result<VnfCounts> {
    let parse = &mut |s: usize, msg: &[u8], batch: &mut Vec<Chunk>, malformed: &mut u64| {
        let Some(frame) = Frame::decode(msg) else {
            *malformed += 1;
            return Ok(false);
        };
        if frame.seq == END {
            return Ok(true);
        }
        batch.push(Chunk { stream: s, frame });
        Ok(false)
    };
    serve(hops, cipher, ((FRAME_HDR, MAX_CHUNK), false, idle), parse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::experiment_edge::flow::{self, Received};
    use nfx_accel::Direction;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Instant;

    fn bound() -> (UdpSocket, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let a = s.local_addr().unwrap();
        (s, a)
    }

    fn to(peer: SocketAddr) -> Link {
        Link::Udp(UdpSocket::bind("127.0.0.1:0").unwrap(), peer)
    }

    #[test]
    fn streams_through_both_workers_arrive_whole_in_order_and_decrypted() {
        let clips: Vec<Vec<u8>> = (0..3u32)
            .map(|k| (0..9000 + k * 777).map(|i| (i * 31 + k) as u8).collect())
            .collect();
        let keys: Vec<Vec<u8>> = (0..3u8).map(|k| vec![k + 1; 10]).collect();
        let limit = Duration::from_secs(5);
        let t0 = Instant::now();
        let (mut edge_hops, mut cloud_hops, mut sinks, mut srcs) = (vec![], vec![], vec![], vec![]);
        for clip in &clips {
            let (dst, dst_at) = bound();
            let (cloud_up, cloud_at) = bound();
            let (edge_up, edge_at) = bound();
            let c = clip.clone();
            sinks.push(std::thread::spawn(move || {
                flow::sink(Link::Udp(dst, dst_at), &c, 256, t0).unwrap()
            }));
            cloud_hops.push(Hop {
                up: Link::Udp(cloud_up, cloud_at),
                down: to(dst_at),
            });
            edge_hops.push(Hop {
                up: Link::Udp(edge_up, edge_at),
                down: to(cloud_at),
            });
            srcs.push((to(edge_at), clip.clone()));
        }
        let enc = ChunkCipher::new(Some(nfx_accel::soft_engine()), &keys, Direction::Encrypt);
        let dec = ChunkCipher::new(
            Some(nfx_accel::bitsliced_engine()),
            &keys,
            Direction::Decrypt,
        );
        let (enc, dec) = (enc.unwrap(), dec.unwrap());
        let cloud = std::thread::spawn(move || cloud(cloud_hops, dec, limit).unwrap());
        let edge = std::thread::spawn(move || edge(edge_hops, 256, enc, limit).unwrap());
        let srcs: Vec<_> = srcs
            .into_iter()
            .map(|(l, c)| std::thread::spawn(move || flow::source(l, &c, 20e6, t0).unwrap()))
            .collect();
        srcs.into_iter().for_each(|t| t.join().unwrap());
        let (e, c) = (edge.join().unwrap(), cloud.join().unwrap());
        assert_eq!(e, VnfCounts::new(3));
        assert_eq!(c, VnfCounts::new(3));
        for (sink, clip) in sinks.into_iter().zip(&clips) {
            let r: Received = sink.join().unwrap();
            assert_eq!((r.lost, r.corrupt), (0, 0));
            assert_eq!(r.ok.len(), clip.len().div_ceil(256));
            assert_eq!(r.stream.as_deref(), Some(clip.as_slice()));
            assert!(
                r.ok.iter()
                    .all(|(exec, engine, _)| *exec > 0 && *engine > 0),
                "execution and engine times stamped"
            );
        }
    }
}
