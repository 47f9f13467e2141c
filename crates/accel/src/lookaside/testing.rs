//! A raw client of the lookaside device that can do anything a local process can do
//! with the socket and the region it is given — send malformed messages, write any
//! bytes into its ring, resize its memfd — for the attack tests and the fuzz targets.
//! Not an API: nfx itself uses `LookasideEngine`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::Ordering;

use nfx_io::Notifier;

pub use super::proto::{Msg, MAX_MSG};
pub use super::ring::Geometry;

pub use super::device::harness::Detached;
use super::proto::{self, Recv};
use super::ring::{QpView, SqEntry, ENTRY};
use super::shm::Mapping;
use crate::{AccelError, Alg, Direction, SessionSpec, Status};

/// What the device answered to a raw message.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// `Done(id)`.
    Done(u32),
    /// An error message.
    Error(String),
    /// A refusal (e.g. the session table is full).
    Refused(String),
    /// Some other message.
    Other,
    /// The device closed the connection.
    Closed,
    /// No answer within the timeout.
    Timeout,
}

/// A connected queue pair used without any of `LookasideEngine`'s discipline.
pub struct RawClient {
    sock: OwnedFd,
    region: OwnedFd,
    bell: Notifier,
    map: Mapping,
    view: QpView,
    geo: Geometry,
}

impl RawClient {
    /// Connects to the device at `path` (no path or credential checks) and maps the
    /// region it hands out; `Refused` when the device turns the connection down.
    pub fn connect(path: &Path) -> Result<RawClient, AccelError> {
        let sock = super::seqpacket::connect(path)?;
        proto::set_timeouts(&sock, std::time::Duration::from_secs(2))?;
        let (geo, mut fds) = match proto::recv(sock.as_raw_fd())? {
            Recv::Msg(Msg::Hello { geo, .. }, fds) if fds.len() == 2 => (geo, fds),
            Recv::Msg(Msg::Refused(why), _) => return Err(AccelError::Refused(why)),
            _ => return Err(AccelError::DeviceGone("no greeting".into())),
        };
        let bell = Notifier::from_fd(fds.pop().expect("two fds")).map_err(|e| AccelError::Io {
            context: "doorbell".into(),
            source: e,
        })?;
        let region = fds.pop().expect("two fds");
        let map = Mapping::from_sealed_fd(&region, geo.total())?;
        let view = QpView::new(map.ptr(), geo);
        Ok(RawClient {
            sock,
            region,
            bell,
            map,
            view,
            geo,
        })
    }

    /// The region's memfd, to attack directly (ftruncate, fallocate, ...).
    pub fn region_fd(&self) -> BorrowedFd<'_> {
        self.region.as_fd()
    }

    /// Entries in the ring.
    pub fn ring_size(&self) -> u32 {
        self.geo.ring_size
    }

    /// Sends `bytes` as one message, with `fds` attached.
    pub fn send_raw(&self, bytes: &[u8], fds: &[RawFd]) -> Result<(), AccelError> {
        proto::send_bytes(self.sock.as_raw_fd(), bytes, fds)
    }

    /// Receives one reply.
    pub fn reply(&self) -> Result<Reply, AccelError> {
        Ok(match proto::recv(self.sock.as_raw_fd())? {
            Recv::Msg(Msg::Done(id), _) => Reply::Done(id),
            Recv::Msg(Msg::Error(e), _) => Reply::Error(e),
            Recv::Msg(Msg::Refused(e), _) => Reply::Refused(e),
            Recv::Msg(..) | Recv::Bad(_) => Reply::Other,
            Recv::Closed => Reply::Closed,
            Recv::Timeout => Reply::Timeout,
        })
    }

    /// Asks for a session and returns the reply.
    pub fn create_session(&self, spec: SessionSpec) -> Result<Reply, AccelError> {
        proto::send(self.sock.as_raw_fd(), &Msg::Create(spec), &[])?;
        self.reply()
    }

    /// Writes 64 raw bytes as ring entry `seq` (modulo the ring).
    pub fn write_entry(&self, seq: u64, bytes: &[u8; ENTRY]) {
        // SAFETY: `SqEntry` is 64 bytes of plain integers; any bit pattern is valid.
        let e: SqEntry = unsafe { std::mem::transmute_copy(bytes) };
        self.view.write_entry(seq, &e);
    }

    /// Publishes a submission tail and rings the doorbell.
    pub fn set_tail(&self, tail: u64) {
        self.view.sq_tail().store(tail, Ordering::SeqCst);
        self.bell.notify();
    }

    /// The device's completion count as written in the region.
    pub fn done(&self) -> u64 {
        self.view.sq_done().load(Ordering::Acquire)
    }

    /// The heartbeat the device writes into this region while it serves it.
    pub fn heartbeat(&self) -> u64 {
        self.view.heartbeat().load(Ordering::SeqCst)
    }

    /// The status the device wrote into entry `seq`.
    pub fn status(&self, seq: u64) -> u32 {
        self.view.read_status(seq)
    }

    /// Size of the mapped region in bytes.
    pub fn region_len(&self) -> usize {
        self.map.len()
    }
}

/// Decodes `data` as a control message the way the device does; a message that decodes
/// must encode back to one that decodes to the same thing, and the device's answer to
/// it (on a detached queue pair with a 4-session table) must be a reply, never a panic.
pub fn control_message(harness: &Detached, data: &[u8]) {
    let Some(msg) = Msg::decode(data) else {
        return;
    };
    let mut again = Vec::new();
    msg.encode(&mut again);
    assert_eq!(
        Msg::decode(&again).as_ref(),
        Some(&msg),
        "encode/decode round trip"
    );
    match harness.answer(msg) {
        Msg::Done(_) | Msg::Error(_) | Msg::Refused(_) => {}
        other => panic!("the device answered {other:?}"),
    }
}

/// The device's processing of a ring a client filled with arbitrary bytes, on a queue
/// pair with no client process (ring of 8 entries, 4 slots of 512 bytes, sessions 0–3:
/// AES-128-GCM seal, PRESENT-80-CTR, AES-128-CTR+HMAC open, SHA-256).
pub struct RingHarness {
    dev: Detached,
}

impl RingHarness {
    /// The ring's geometry.
    pub const GEOMETRY: Geometry = Geometry {
        ring_size: 8,
        slot_count: 4,
        slot_size: 512,
    };

    /// A detached queue pair with its four sessions.
    pub fn new() -> Result<RingHarness, AccelError> {
        let dev = Detached::new(Self::GEOMETRY, 4)?;
        let specs = [
            SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[1; 16], &[]),
            SessionSpec::new(Alg::Present80Ctr, Direction::Encrypt, &[2; 10], &[]),
            SessionSpec::new(
                Alg::Aes128CtrHmacSha256,
                Direction::Decrypt,
                &[3; 16],
                &[4; 32],
            ),
            SessionSpec::new(Alg::Sha256, Direction::Encrypt, &[], &[]),
        ];
        for s in specs {
            dev.qp.sessions().create(&s)?;
        }
        Ok(RingHarness { dev })
    }

    /// A detached queue pair for `control_message` (4-session table, no sessions).
    pub fn control() -> Result<Detached, AccelError> {
        Detached::new(Self::GEOMETRY, 4)
    }

    /// Writes `data` into the region as a client could — byte 0: how far the tail moves
    /// (0–255, so past the ring too); byte 1: bit 0 sets `revoked`, bit 1 moves the tail
    /// backwards, bit 2 gives each entry its right sequence number; byte 2: the pass
    /// budget; then up to 8 entries of 64 bytes, then slot bytes — and runs the device
    /// until it makes no more progress. Checks that the device completes entries only
    /// in order and within the ring, each with a valid status, and stops serving the
    /// queue pair exactly when it was revoked or its tail left the ring.
    pub fn run(&mut self, data: &[u8]) {
        self.dev.reset();
        let v = self.dev.qp.view();
        let get = |i: usize| data.get(i).copied().unwrap_or(0);
        let (moved, flags, budget) = (get(0) as u64, get(1), get(2) as usize + 1);
        let base = self.dev.done();
        let rest = data.get(3..).unwrap_or(&[]);
        let ring = Self::GEOMETRY.ring_size as u64;
        let (entries, slots) = rest.split_at(rest.len().min(ring as usize * ENTRY));
        for (i, chunk) in entries.chunks(ENTRY).enumerate() {
            let mut bytes = [0u8; ENTRY];
            bytes[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: `SqEntry` is 64 bytes of plain integers; any bit pattern is valid.
            let mut e: SqEntry = unsafe { std::mem::transmute_copy(&bytes) };
            if flags & 4 != 0 {
                e.seq = base + i as u64;
            }
            v.write_entry(base + i as u64, &e);
        }
        let size = Self::GEOMETRY.slot_size as usize;
        for (slot, chunk) in slots
            .chunks(size)
            .take(Self::GEOMETRY.slot_count as usize)
            .enumerate()
        {
            // SAFETY: slot < slot_count and the chunk fits one slot.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.dev.qp.slot_ptr(slot as u32),
                    chunk.len(),
                )
            };
        }
        let revoked = flags & 1 != 0;
        if revoked {
            v.revoked().store(1, Ordering::SeqCst);
        }
        let backwards = flags & 2 != 0;
        let tail = if backwards {
            base.wrapping_sub(moved)
        } else {
            base + moved
        };
        v.sq_tail().store(tail, Ordering::SeqCst);
        while self.dev.process(budget) > 0 {}
        let done = self.dev.done();
        let violated = moved != 0 && (backwards || moved > ring);
        let served = !revoked && !violated;
        assert_eq!(
            done,
            if served { tail } else { base },
            "completed the wrong entries"
        );
        for seq in base..done {
            assert!(
                v.read_status(seq) <= Status::DeviceGone as u32,
                "invalid status"
            );
        }
        assert_eq!(v.sq_done().load(Ordering::SeqCst), done);
        assert_eq!(self.dev.stopped(), revoked || violated);
        assert_eq!(v.revoke_ack().load(Ordering::SeqCst) != 0, revoked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    /// A well-formed entry: AES-128-GCM under session id 0 sealing 48 bytes in slot `slot`.
    fn gcm_entry(slot: u32) -> [u8; ENTRY] {
        let l = Layout::packed(0, 48);
        let e = SqEntry {
            seq: 0,
            session: 0,
            slot,
            len: 64,
            aad_off: l.aad_off,
            aad_len: l.aad_len,
            data_off: l.data_off,
            data_len: l.data_len,
            tag_off: l.tag_off,
            iv_len: 12,
            ..SqEntry::default()
        };
        // SAFETY: `SqEntry` is 64 bytes of plain integers.
        unsafe { std::mem::transmute_copy(&e) }
    }

    #[test]
    fn the_ring_harness_checks_valid_garbage_revoked_and_broken_rings() {
        let mut h = RingHarness::new().unwrap();
        // Two valid entries (sequence numbers filled in), then slot bytes.
        let mut input = vec![2, 4, 63];
        input.extend_from_slice(&gcm_entry(0));
        input.extend_from_slice(&gcm_entry(1));
        input.extend_from_slice(&[0x5a; 6 * ENTRY + 1024]);
        h.run(&input);
        let v = h.dev.qp.view();
        assert_eq!(v.read_status(0), Status::Ok as u32);
        assert_eq!(v.read_status(1), Status::Ok as u32);
        // Garbage entries complete as bad arguments and are counted.
        h.run(&[8, 0, 0, 0xff, 0xee, 0xdd]);
        assert_eq!(h.dev.stats().bad_entries, 8);
        // A revoked ring is acknowledged and left alone; a broken tail stops it.
        h.run(&[3, 1, 0]);
        assert_eq!(h.dev.stats().revocations, 1);
        h.run(&[9, 0, 0]);
        h.run(&[1, 2, 0]);
        assert_eq!(h.dev.stats().protocol_violations, 2);
        // And it serves again after a reset.
        h.run(&input);
    }

    #[test]
    fn control_messages_get_answers_and_the_table_stays_bounded() {
        let h = RingHarness::control().unwrap();
        let mut b = Vec::new();
        Msg::Create(SessionSpec::new(
            Alg::Aes128Gcm,
            Direction::Encrypt,
            &[1; 16],
            &[],
        ))
        .encode(&mut b);
        for _ in 0..6 {
            control_message(&h, &b);
        }
        assert_eq!(h.stats().sessions_refused, 2);
        for garbage in [&[5u8, 0, 0, 0, 0][..], &[1; 17], &[3, 0, 0, 16, 15, 0], &[]] {
            control_message(&h, garbage);
        }
        assert_eq!(h.stats().bad_messages, 2, "Done and Hello are not requests");
    }
}
