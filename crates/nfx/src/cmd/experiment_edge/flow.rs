//! One video stream through the edge-encryption chain: `src` paces the clip out in
//! records, the edge VNF reorganises the bytes into fixed-size chunks and encrypts each
//! (PRESENT-80-CTR, or not at all), the cloud VNF decrypts, and `dst` checks every
//! chunk byte for byte against the clip. Each role is a thread in its namespace; all
//! share one monotonic clock, so a chunk's end-to-end latency is `dst` arrival minus
//! the moment `src` sent the record that completed it.

use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Video bytes per `src` record (seven 188-byte MPEG-TS packets, as video over UDP).
pub const RECORD: usize = 1316;
/// Largest chunk the VNF makes.
pub const MAX_CHUNK: usize = 512;
/// Header of a `src` record: offset u64, send time u64 (ns), payload length u16.
pub const REC_HDR: usize = 18;
/// Header of a chunk frame: seq u64, source time u64, edge exec ns u32, edge engine ns
/// u32, length u16.
pub const FRAME_HDR: usize = 26;
/// End of the stream a record may reach (256 TiB; no clip comes near it): the chunk
/// arithmetic on offsets stays far from overflow.
pub const MAX_STREAM: u64 = 1 << 48;
/// Sequence number of the end-of-stream frame.
pub const END: u64 = u64::MAX;

/// Transport between the hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP (records and frames in a byte stream).
    Tcp,
    /// UDP (one record or frame per datagram).
    Udp,
}

/// A chunk frame between the VNFs and to `dst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Chunk index: bytes `seq * chunk ..` of the clip.
    pub seq: u64,
    /// When `src` sent the record that completed the chunk (ns since the run's start).
    pub t_src: u64,
    /// The edge VNF's execution time for this chunk, ns: its batch's time from the
    /// worker's hand-over to the cipher until the last operation completed, per chunk
    /// (HW-VNF: the offload round trip as the worker sees it).
    pub exec_ns: u32,
    /// The engine's own time for this chunk, ns (SW-VNF: the portable cipher in the
    /// worker; HW-VNF: the device's processing time returned with the completion).
    pub engine_ns: u32,
    /// The chunk (cipher text between the VNFs, clear text to `dst`).
    pub data: Vec<u8>,
}

impl Frame {
    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(FRAME_HDR + self.data.len());
        v.extend_from_slice(&self.seq.to_be_bytes());
        v.extend_from_slice(&self.t_src.to_be_bytes());
        v.extend_from_slice(&self.exec_ns.to_be_bytes());
        v.extend_from_slice(&self.engine_ns.to_be_bytes());
        v.extend_from_slice(&(self.data.len() as u16).to_be_bytes());
        v.extend_from_slice(&self.data);
        v
    }

    /// Parses one frame from a datagram or a header + body read from a stream; `None`
    /// when the bytes are not a well-formed frame (a counted drop, never a panic).
    pub fn decode(b: &[u8]) -> Option<Frame> {
        let (h, data) = (b.get(..FRAME_HDR)?, b.get(FRAME_HDR..)?);
        let len = usize::from(u16::from_be_bytes([h[24], h[25]]));
        if len != data.len() || len > MAX_CHUNK {
            return None;
        }
        Some(Frame {
            seq: u64::from_be_bytes(h[0..8].try_into().ok()?),
            t_src: u64::from_be_bytes(h[8..16].try_into().ok()?),
            exec_ns: u32::from_be_bytes(h[16..20].try_into().ok()?),
            engine_ns: u32::from_be_bytes(h[20..24].try_into().ok()?),
            data: data.to_vec(),
        })
    }
}

/// One end of a hop: a connected TCP stream or a UDP socket with its peer.
pub enum Link {
    /// TCP.
    Tcp(TcpStream),
    /// UDP to `peer`.
    Udp(UdpSocket, SocketAddr),
}

impl Link {
    /// Listens on `local` and returns the link once the upstream hop connects (TCP) or
    /// at once (UDP: bound, receiving from anyone).
    pub fn accept(proto: Proto, local: SocketAddr, limit: Duration) -> anyhow::Result<Link> {
        match proto {
            Proto::Tcp => {
                let l =
                    TcpListener::bind(local).with_context(|| format!("listening on {local}"))?;
                l.set_nonblocking(true)?;
                let end = Instant::now() + limit;
                loop {
                    match l.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(false)?;
                            s.set_nodelay(true)?;
                            s.set_read_timeout(Some(limit))?;
                            return Ok(Link::Tcp(s));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if Instant::now() > end {
                                bail!("nothing connected to {local} within {limit:?}");
                            }
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Proto::Udp => {
                let s = UdpSocket::bind(local).with_context(|| format!("binding {local}"))?;
                s.set_read_timeout(Some(limit))?;
                Ok(Link::Udp(s, local))
            }
        }
    }

    /// Connects to the downstream hop at `peer` (retrying while it starts listening).
    pub fn connect(proto: Proto, peer: SocketAddr, limit: Duration) -> anyhow::Result<Link> {
        match proto {
            Proto::Tcp => {
                let end = Instant::now() + limit;
                loop {
                    match TcpStream::connect_timeout(&peer, Duration::from_millis(500)) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            return Ok(Link::Tcp(s));
                        }
                        Err(e) if Instant::now() > end => {
                            return Err(e).with_context(|| format!("connecting to {peer}"))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
            Proto::Udp => {
                let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                Ok(Link::Udp(s, peer))
            }
        }
    }

    /// The socket's descriptor (a worker polls many links at once).
    pub fn fd(&self) -> RawFd {
        match self {
            Link::Tcp(s) => s.as_raw_fd(),
            Link::Udp(s, _) => s.as_raw_fd(),
        }
    }

    /// Sends one message (a length-prefixed unit on TCP, a datagram on UDP).
    pub fn send(&mut self, msg: &[u8]) -> anyhow::Result<()> {
        match self {
            Link::Tcp(s) => s.write_all(msg)?,
            Link::Udp(s, peer) => {
                s.send_to(msg, *peer)?;
            }
        }
        Ok(())
    }

    /// Sends the end-of-stream message: once on TCP (the receiver closes after it), three
    /// times on UDP (a datagram may be lost).
    pub fn send_last(&mut self, msg: &[u8]) -> anyhow::Result<()> {
        let n = if matches!(self, Link::Tcp(_)) { 1 } else { 3 };
        for _ in 0..n {
            self.send(msg)?;
        }
        Ok(())
    }

    /// Receives one message whose header is `hdr` bytes with its body length in the
    /// header's last two bytes (bounded by `max_body`); `None` at the end of the stream.
    pub fn recv(&mut self, hdr: usize, max_body: usize, buf: &mut Vec<u8>) -> anyhow::Result<bool> {
        match self {
            Link::Tcp(s) => {
                buf.resize(hdr, 0);
                match s.read_exact(&mut buf[..hdr]) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
                    Err(e) => return Err(e.into()),
                }
                let len = usize::from(u16::from_be_bytes([buf[hdr - 2], buf[hdr - 1]]));
                anyhow::ensure!(
                    len <= max_body,
                    "message body of {len} bytes (at most {max_body})"
                );
                buf.resize(hdr + len, 0);
                s.read_exact(&mut buf[hdr..])?;
                Ok(true)
            }
            Link::Udp(s, _) => {
                buf.resize(hdr + max_body + 1, 0);
                let n = s.recv(buf)?;
                buf.truncate(n);
                Ok(true)
            }
        }
    }
}

/// Nanoseconds since `t0`.
pub fn ns_since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// The `src` role: sends `clip` in records at `bits_per_s`, then the end marker.
pub fn source(mut link: Link, clip: &[u8], bits_per_s: f64, t0: Instant) -> anyhow::Result<()> {
    let per_record = Duration::from_secs_f64(RECORD as f64 * 8.0 / bits_per_s);
    let start = Instant::now();
    for (i, part) in clip.chunks(RECORD).enumerate() {
        let due = start + per_record * i as u32;
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        link.send(&record((i * RECORD) as u64, ns_since(t0), part))?;
    }
    link.send_last(&record(clip.len() as u64, ns_since(t0), &[]))
}

fn record(offset: u64, t: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(REC_HDR + payload.len());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&t.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Reassembles the byte stream from records into chunks of `size`; a chunk with a gap
/// (a lost record on UDP) is dropped, and `dst` counts it lost.
pub struct Chunker {
    size: usize,
    cur: u64,
    buf: Vec<u8>,
    broken: bool,
}

impl Chunker {
    /// A chunker of `size`-byte chunks.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            cur: 0,
            buf: Vec::with_capacity(size),
            broken: false,
        }
    }

    /// Feeds the record at `offset`; calls `emit(seq, chunk)` for every chunk it completes.
    /// A record reaching past [`MAX_STREAM`] is ignored (`parse_record` refuses it).
    pub fn push(
        &mut self,
        offset: u64,
        mut payload: &[u8],
        emit: &mut dyn FnMut(u64, &mut Vec<u8>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if !within_stream(offset, payload.len()) {
            return Ok(());
        }
        let c = self.size as u64;
        let mut pos = offset;
        while !payload.is_empty() {
            let k = pos / c;
            if k != self.cur {
                self.cur = k;
                self.buf.clear();
                self.broken = false;
            }
            if pos != k * c + self.buf.len() as u64 {
                self.broken = true;
            }
            let n = ((k + 1) * c - pos).min(payload.len() as u64) as usize;
            self.buf.extend_from_slice(&payload[..n]);
            payload = &payload[n..];
            pos += n as u64;
            if pos == (k + 1) * c {
                if !self.broken && self.buf.len() == self.size {
                    emit(k, &mut self.buf)?;
                }
                self.cur = k + 1;
                self.buf.clear();
                self.broken = false;
            }
        }
        Ok(())
    }

    /// The end of the stream at `total` bytes: emits the last, short chunk if whole.
    pub fn finish(
        &mut self,
        total: u64,
        emit: &mut dyn FnMut(u64, &mut Vec<u8>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let c = self.size as u64;
        if !total.is_multiple_of(c)
            && self.cur == total / c
            && !self.broken
            && self.cur * c + self.buf.len() as u64 == total
        {
            emit(self.cur, &mut self.buf)?;
        }
        self.buf.clear();
        Ok(())
    }
}

/// Whether `len` bytes at `offset` end within [`MAX_STREAM`].
fn within_stream(offset: u64, len: usize) -> bool {
    offset
        .checked_add(len as u64)
        .is_some_and(|end| end <= MAX_STREAM)
}

/// Parses a `src` record: (offset, send time, payload); `None` when malformed or when it
/// reaches past [`MAX_STREAM`].
pub fn parse_record(b: &[u8]) -> Option<(u64, u64, &[u8])> {
    let h = b.get(..REC_HDR)?;
    let len = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let payload = b.get(REC_HDR..)?;
    let offset = u64::from_be_bytes(h[0..8].try_into().ok()?);
    if payload.len() != len || len > RECORD || !within_stream(offset, len) {
        return None;
    }
    Some((
        offset,
        u64::from_be_bytes(h[8..16].try_into().ok()?),
        payload,
    ))
}

/// What `dst` saw of one stream.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// Per chunk received intact: (edge exec ns, edge engine ns, end-to-end ns).
    pub ok: Vec<(u32, u32, u64)>,
    /// Chunks that arrived different from the clip, twice, or out of range.
    pub corrupt: u64,
    /// Chunks that never arrived.
    pub lost: u64,
    /// The received chunks reassembled in order, when nothing was lost or corrupt.
    pub stream: Option<Vec<u8>>,
}

/// The `dst` role: checks every chunk against `clip` and reassembles it.
pub fn sink(mut up: Link, clip: &[u8], chunk: usize, t0: Instant) -> anyhow::Result<Received> {
    let n = clip.len().div_ceil(chunk);
    let mut got: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut r = Received::default();
    let mut buf = Vec::new();
    loop {
        match up.recv(FRAME_HDR, MAX_CHUNK, &mut buf) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if is_timeout(&e) => break,
            Err(e) => return Err(e),
        }
        let Some(f) = Frame::decode(&buf) else {
            r.corrupt += 1;
            continue;
        };
        if f.seq == END {
            break;
        }
        let now = ns_since(t0);
        let k = f.seq as usize;
        let want = clip.get(k.saturating_mul(chunk)..clip.len().min((k + 1).saturating_mul(chunk)));
        match want {
            Some(w) if k < n && got[k].is_none() && w == f.data.as_slice() => {
                r.ok.push((f.exec_ns, f.engine_ns, now.saturating_sub(f.t_src)));
                got[k] = Some(f.data);
            }
            _ => r.corrupt += 1,
        }
    }
    r.lost = got.iter().filter(|s| s.is_none()).count() as u64;
    if r.lost == 0 && r.corrupt == 0 {
        // The stream as received, chunk by chunk in sequence order: what ffmpeg decodes.
        r.stream = Some(got.into_iter().flatten().flatten().collect());
    }
    Ok(r)
}

fn is_timeout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_malformed_ones_are_refused() {
        let f = Frame {
            seq: 7,
            t_src: 99,
            exec_ns: 5,
            engine_ns: 5,
            data: vec![1, 2, 3],
        };
        let b = f.encode();
        assert_eq!(Frame::decode(&b), Some(f));
        assert!(Frame::decode(&b[..b.len() - 1]).is_none());
        assert!(Frame::decode(&b[..10]).is_none());
        let mut long = b.clone();
        long.push(0);
        assert!(Frame::decode(&long).is_none());
        let mut huge = Frame {
            seq: 1,
            t_src: 1,
            exec_ns: 1,
            engine_ns: 1,
            data: vec![0; 600],
        }
        .encode();
        huge.truncate(FRAME_HDR + 600);
        assert!(
            Frame::decode(&huge).is_none(),
            "bodies over MAX_CHUNK are refused"
        );
    }

    #[test]
    fn records_past_the_stream_limit_are_refused_and_ignored() {
        let far = record(u64::MAX - 5, 1, &[7; 64]);
        assert!(parse_record(&far).is_none());
        let edge = record(MAX_STREAM - 64, 1, &[7; 64]);
        assert!(parse_record(&edge).is_some());
        assert!(parse_record(&record(MAX_STREAM - 63, 1, &[7; 64])).is_none());
        let mut c = Chunker::new(128);
        let mut n = 0;
        c.push(u64::MAX - 5, &[7; 64], &mut |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    fn chunks_of(records: &[(u64, Vec<u8>)], size: usize, total: u64) -> Vec<(u64, Vec<u8>)> {
        let mut got = Vec::new();
        let mut c = Chunker::new(size);
        let mut emit = |k: u64, d: &mut Vec<u8>| {
            got.push((k, d.clone()));
            Ok(())
        };
        for (o, p) in records {
            c.push(*o, p, &mut emit).unwrap();
        }
        c.finish(total, &mut emit).unwrap();
        got
    }

    #[test]
    fn chunker_cuts_the_stream_at_chunk_boundaries_and_drops_chunks_with_gaps() {
        let clip: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let records: Vec<(u64, Vec<u8>)> = clip
            .chunks(RECORD)
            .enumerate()
            .map(|(i, p)| ((i * RECORD) as u64, p.to_vec()))
            .collect();
        for size in [128, 256, 512] {
            let got = chunks_of(&records, size, clip.len() as u64);
            let want: Vec<(u64, Vec<u8>)> = clip
                .chunks(size)
                .enumerate()
                .map(|(k, d)| (k as u64, d.to_vec()))
                .collect();
            assert_eq!(got, want, "size {size}");
        }
        // Lose the second record (bytes 1316..2632): chunks touching it disappear,
        // every other chunk is intact.
        let lossy: Vec<(u64, Vec<u8>)> = records
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, r)| r.clone())
            .collect();
        let got = chunks_of(&lossy, 512, clip.len() as u64);
        let ks: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(ks, [0, 1, 6, 7, 8, 9]);
        for (k, d) in got {
            let s = k as usize * 512;
            assert_eq!(d, clip[s..(s + 512).min(clip.len())]);
        }
    }

    #[test]
    fn sink_verifies_every_chunk_against_the_clip() {
        let clip: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let to = rx.local_addr().unwrap();
        let mut tx = Link::connect(Proto::Udp, to, Duration::from_secs(1)).unwrap();
        let frame = |seq: u64, d: &[u8]| {
            Frame {
                seq,
                t_src: 0,
                exec_ns: 1,
                engine_ns: 1,
                data: d.to_vec(),
            }
            .encode()
        };
        tx.send(&frame(1, &clip[256..512])).unwrap();
        tx.send(&frame(0, &clip[..256])).unwrap();
        tx.send(&frame(0, &clip[..256])).unwrap(); // a duplicate
        let mut bad = clip[512..].to_vec();
        bad[3] ^= 1;
        tx.send(&frame(2, &bad)).unwrap(); // one flipped bit
        tx.send(&frame(1, &clip[..256])).unwrap(); // in the wrong place
        tx.send(&[0u8; 5]).unwrap(); // not a frame
        tx.send_last(&frame(END, &[])).unwrap();
        let r = sink(Link::Udp(rx, to), &clip, 256, Instant::now()).unwrap();
        assert_eq!((r.ok.len(), r.corrupt, r.lost), (2, 4, 1));
        assert!(r.stream.is_none());
    }
}
