//! Control messages on the device's unix socket (SOCK_SEQPACKET: one message per packet),
//! with file descriptors passed as SCM_RIGHTS. Every message has an exact length: a
//! short, long, truncated or unknown message, or one carrying descriptors it should not,
//! is `Recv::Bad` (the device counts it and answers with an error).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use zeroize::Zeroize;

use super::ring::Geometry;
use crate::{AccelError, Alg, Direction, SecretBytes, SessionSpec};

/// Largest control message.
pub const MAX_MSG: usize = 512;

/// A control message.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    /// Device → client: queue pair granted; two fds follow (the sealed region and this
    /// client's own doorbell eventfd).
    Hello { qp: u32, geo: Geometry },
    /// Device → client: no queue pair (or no more sessions) for you.
    Refused(String),
    /// Client → device: create a session.
    Create(SessionSpec),
    /// Client → device: destroy a session.
    Destroy(u32),
    /// Device → client: the session id created / destroyed.
    Done(u32),
    /// Device → client: the request failed.
    Error(String),
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Text of a `Refused`/`Error` message, cut to fit one message on a character boundary.
fn put_text(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(MAX_MSG - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&s.as_bytes()[..n]);
}

impl Msg {
    /// Serializes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Msg::Hello { qp, geo } => {
                out.push(1);
                put_u32(out, *qp);
                put_u32(out, geo.ring_size);
                put_u32(out, geo.slot_count);
                put_u32(out, geo.slot_size);
            }
            Msg::Refused(s) => {
                out.push(2);
                put_text(out, s);
            }
            Msg::Create(spec) => {
                out.push(3);
                let alg = Alg::ALL.iter().position(|a| *a == spec.alg).unwrap_or(0);
                out.push(alg as u8);
                out.push(matches!(spec.dir, Direction::Decrypt) as u8);
                out.push(spec.tag_len as u8);
                out.push(spec.key.len() as u8);
                out.push(spec.auth_key.len() as u8);
                out.extend_from_slice(spec.key.expose());
                out.extend_from_slice(spec.auth_key.expose());
            }
            Msg::Destroy(id) => {
                out.push(4);
                put_u32(out, *id);
            }
            Msg::Done(id) => {
                out.push(5);
                put_u32(out, *id);
            }
            Msg::Error(s) => {
                out.push(6);
                put_text(out, s);
            }
        }
    }

    /// Parses a message; `None` if it is malformed (unknown type, wrong length, invalid
    /// field value or text that is not UTF-8).
    pub fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() > MAX_MSG {
            return None;
        }
        let exact = |len: usize| (b.len() == len).then_some(());
        let text = |b: &[u8]| std::str::from_utf8(&b[1..]).ok().map(str::to_string);
        Some(match *b.first()? {
            1 => {
                exact(17)?;
                Msg::Hello {
                    qp: get_u32(b, 1)?,
                    geo: Geometry {
                        ring_size: get_u32(b, 5)?,
                        slot_count: get_u32(b, 9)?,
                        slot_size: get_u32(b, 13)?,
                    },
                }
            }
            2 => Msg::Refused(text(b)?),
            3 => {
                let alg = *Alg::ALL.get(*b.get(1)? as usize)?;
                let dir = match b.get(2)? {
                    0 => Direction::Encrypt,
                    1 => Direction::Decrypt,
                    _ => return None,
                };
                let tag_len = *b.get(3)? as usize;
                let kl = *b.get(4)? as usize;
                let al = *b.get(5)? as usize;
                exact(6 + kl + al)?;
                Msg::Create(SessionSpec {
                    alg,
                    dir,
                    key: SecretBytes::from_slice(&b[6..6 + kl]),
                    auth_key: SecretBytes::from_slice(&b[6 + kl..]),
                    tag_len,
                })
            }
            4 => {
                exact(5)?;
                Msg::Destroy(get_u32(b, 1)?)
            }
            5 => {
                exact(5)?;
                Msg::Done(get_u32(b, 1)?)
            }
            6 => Msg::Error(text(b)?),
            _ => return None,
        })
    }
}

/// Sends one message with optional fds; key bytes in the scratch buffer are wiped.
pub(crate) fn send(sock: RawFd, msg: &Msg, fds: &[RawFd]) -> Result<(), AccelError> {
    let mut bytes = Vec::with_capacity(MAX_MSG);
    msg.encode(&mut bytes);
    let r = send_bytes(sock, &bytes, fds);
    bytes.zeroize();
    r
}

/// Sends `bytes` as one message with optional fds.
pub(crate) fn send_bytes(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> Result<(), AccelError> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    if !fds.is_empty() {
        mh.msg_control = cbuf.as_mut_ptr().cast();
        mh.msg_controllen = space as _;
        // SAFETY: the control buffer is large enough for one header with `fds`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    // SAFETY: valid socket and message header.
    let n = unsafe { libc::sendmsg(sock, &mh, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(AccelError::last_os("send to accelerator socket"));
    }
    Ok(())
}

/// Outcome of a receive.
pub(crate) enum Recv {
    /// A message and the fds that came with it.
    Msg(Msg, Vec<OwnedFd>),
    /// A message that is not one (malformed, truncated, or with truncated fds); any fds
    /// it carried are closed.
    Bad(&'static str),
    /// The peer closed the socket.
    Closed,
    /// Nothing arrived before the socket's receive timeout.
    Timeout,
}

/// Receives one message (blocking, subject to SO_RCVTIMEO).
pub(crate) fn recv(sock: RawFd) -> Result<Recv, AccelError> {
    let mut bytes = [0u8; MAX_MSG];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: plain data; pointers outlive the call.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.as_mut_ptr().cast();
    mh.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: valid socket and header.
    let n = unsafe { libc::recvmsg(sock, &mut mh, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Ok(Recv::Timeout),
            std::io::ErrorKind::Interrupted => Ok(Recv::Timeout),
            _ => Err(AccelError::Io {
                context: "receive from accelerator socket".into(),
                source: e,
            }),
        };
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(Recv::Closed);
    }
    if mh.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        bytes.zeroize();
        return Ok(Recv::Bad("truncated control message"));
    }
    let msg = Msg::decode(&bytes[..n as usize]);
    bytes.zeroize();
    match msg {
        Some(m) => Ok(Recv::Msg(m, fds)),
        None => Ok(Recv::Bad("malformed control message")),
    }
}

/// Sets the socket's receive and send timeouts (a peer that stops reading cannot block
/// the sender for longer).
pub(crate) fn set_timeouts(sock: &OwnedFd, t: std::time::Duration) -> Result<(), AccelError> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: valid fd and option value.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(AccelError::last_os("set socket timeouts"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let mut b = Vec::new();
        let spec = SessionSpec::new(
            Alg::Aes128CtrHmacSha256,
            Direction::Decrypt,
            &[1; 16],
            &[2; 20],
        );
        Msg::Create(spec).encode(&mut b);
        match Msg::decode(&b) {
            Some(Msg::Create(s)) => {
                assert_eq!(s.alg, Alg::Aes128CtrHmacSha256);
                assert_eq!(s.dir, Direction::Decrypt);
                assert_eq!(s.key.expose(), &[1; 16]);
                assert_eq!(s.auth_key.expose(), &[2; 20]);
                assert_eq!(s.tag_len, 16);
            }
            _ => panic!("not a create"),
        }
        let geo = Geometry {
            ring_size: 64,
            slot_count: 3,
            slot_size: 128,
        };
        Msg::Hello { qp: 2, geo }.encode(&mut b);
        assert!(matches!(Msg::decode(&b), Some(Msg::Hello { qp: 2, geo: g }) if g == geo));
        assert!(Msg::decode(&[3, 99]).is_none());
        assert!(Msg::decode(&[3, 0, 0, 16, 200, 0]).is_none());
        assert!(Msg::decode(&[]).is_none());
    }

    #[test]
    fn wrong_lengths_and_bad_text_are_malformed() {
        let mut b = Vec::new();
        Msg::Destroy(7).encode(&mut b);
        b.push(0);
        assert!(Msg::decode(&b).is_none(), "trailing byte");
        assert!(Msg::decode(&b[..3]).is_none(), "short");
        assert!(Msg::decode(&[6, 0xff, 0xfe]).is_none(), "not UTF-8");
        let spec = SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[1; 16], &[]);
        Msg::Create(spec).encode(&mut b);
        b.push(9);
        assert!(
            Msg::decode(&b).is_none(),
            "key bytes beyond the declared lengths"
        );
        assert!(Msg::decode(&vec![6; MAX_MSG + 1]).is_none());
        // A long error text is cut on a character boundary and still decodes.
        Msg::Error("é".repeat(400)).encode(&mut b);
        assert!(b.len() <= MAX_MSG);
        assert!(matches!(Msg::decode(&b), Some(Msg::Error(_))));
    }
}
