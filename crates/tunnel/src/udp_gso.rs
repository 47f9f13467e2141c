//! UDP segmentation offload on the underlay: one `sendmsg` with a `UDP_SEGMENT` cmsg
//! carries a run of equal-size ESP datagrams (the last may be shorter) and the kernel
//! (or the NIC) cuts them; with `UDP_GRO` one receive returns several datagrams of one
//! flow back to back with their size in a cmsg. Both cut per-datagram syscall and
//! stack cost, as wireguard-go does on Linux.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;

use crate::sys::Underlay;

const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Most datagrams the kernel takes in one GSO send (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGS: usize = 64;
/// Bytes of payload one GSO send may carry (IPv4 total length minus headers).
pub const MAX_GSO_BYTES: usize = 65_507;
/// Receive buffer for one coalesced (GRO) read.
pub const GRO_BUF: usize = 65_536;
const CMSG_SPACE: usize = 64;

/// Datagram lengths grouped into GSO sends: each group is `(first index, count, size)`,
/// all of `size` bytes but the last, which may be shorter (the kernel's rule).
pub fn group(lens: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    let mut open = false;
    for (i, &n) in lens.iter().enumerate() {
        if let Some(g) = out.last_mut() {
            if open && n <= g.2 && g.1 < MAX_SEGS && (g.1 + 1) * g.2 <= MAX_GSO_BYTES {
                g.1 += 1;
                open = n == g.2;
                continue;
            }
        }
        out.push((i, 1, n));
        open = true;
    }
    out
}

/// Splits one received buffer of `len` bytes with GRO segment size `seg` (0: one
/// datagram) into datagram ranges.
pub fn split(len: usize, seg: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = if seg == 0 { len.max(1) } else { seg };
    (0..len).step_by(step).map(move |s| s..(s + step).min(len))
}

fn set_int(fd: i32, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: setsockopt with an int option.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

impl Underlay {
    /// Turns on UDP GRO for receives; `false` if the kernel refuses.
    pub fn enable_gro(&self) -> bool {
        set_int(self.sock.as_raw_fd(), SOL_UDP, UDP_GRO, 1)
    }

    /// Whether this kernel takes `UDP_SEGMENT` on this socket (probed with setsockopt
    /// of the per-socket default size, then reset to 0).
    pub fn probe_gso(&self) -> bool {
        let fd = self.sock.as_raw_fd();
        set_int(fd, SOL_UDP, UDP_SEGMENT, 1400) && set_int(fd, SOL_UDP, UDP_SEGMENT, 0)
    }

    /// Sends `pkts` to the peer in order, runs of equal size as one GSO send each
    /// (one `sendmmsg` for all); returns how many datagrams were sent before an error.
    pub fn send_gso(&self, pkts: &[&[u8]]) -> (usize, Option<io::Error>) {
        let lens: Vec<usize> = pkts.iter().map(|p| p.len()).collect();
        self.send_runs(pkts, &group(&lens))
    }

    /// Sends every packet to the peer in order, one datagram per message (the path
    /// without UDP GSO); returns how many were sent before an error.
    pub fn send_batch(&self, pkts: &[&[u8]]) -> (usize, Option<io::Error>) {
        let singles: Vec<(usize, usize, usize)> = pkts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, 1, p.len()))
            .collect();
        self.send_runs(pkts, &singles)
    }

    /// One `sendmmsg` (retried until all are out) with one message per run
    /// `(first index, count, size)` of `pkts`; runs longer than one carry a
    /// `UDP_SEGMENT` cmsg.
    fn send_runs(
        &self,
        pkts: &[&[u8]],
        groups: &[(usize, usize, usize)],
    ) -> (usize, Option<io::Error>) {
        let mut iov: Vec<libc::iovec> = pkts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let mut ctl = vec![[0u64; CMSG_SPACE / 8]; groups.len()];
        let mut peer = self.peer;
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(groups.len());
        for (g, c) in groups.iter().zip(ctl.iter_mut()) {
            // SAFETY: mmsghdr is plain data.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov[g.0..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = g.1;
            m.msg_hdr.msg_name = (&mut peer.0 as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = peer.1;
            if g.1 > 1 {
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE only computes a size.
                m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: the control buffer is CMSG_SPACE bytes, aligned, and large
                // enough for one cmsghdr with a u16.
                unsafe {
                    let h = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*h).cmsg_level = SOL_UDP;
                    (*h).cmsg_type = UDP_SEGMENT;
                    (*h).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<u16>(), g.2 as u16);
                }
            }
            msgs.push(m);
        }
        let mut done_msgs = 0;
        while done_msgs < msgs.len() {
            // SAFETY: valid mmsghdr array; iov, ctl and peer outlive the call.
            let n = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs[done_msgs..].as_mut_ptr(),
                    (msgs.len() - done_msgs) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let sent = groups[..done_msgs].iter().map(|g| g.1).sum();
                return (sent, Some(e));
            }
            done_msgs += n as usize;
        }
        (pkts.len(), None)
    }

    /// Receives up to `bufs.len()` buffers without blocking (with GRO on, each may hold
    /// several coalesced datagrams); `out` gets `(length, segment size or 0)` per
    /// buffer filled.
    pub fn recv_batch(
        &self,
        bufs: &mut [&mut [u8]],
        out: &mut Vec<(usize, usize)>,
    ) -> io::Result<()> {
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
            bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
        let mut msgs: Vec<&mut [IoSliceMut<'_>]> =
            iovs.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.recv_vectored(&mut msgs, out)
    }

    /// Receives up to `msgs.len()` messages without blocking, message `i` scattered over
    /// the slices of `msgs[i]` in order (so the datagrams of one coalesced message can
    /// land in separate buffers); `out` gets `(length, segment size or 0)` per message.
    pub fn recv_vectored(
        &self,
        msgs: &mut [&mut [IoSliceMut<'_>]],
        out: &mut Vec<(usize, usize)>,
    ) -> io::Result<()> {
        out.clear();
        let mut ctl = vec![[0u64; CMSG_SPACE / 8]; msgs.len()];
        let mut hdrs: Vec<libc::mmsghdr> = msgs
            .iter_mut()
            .zip(ctl.iter_mut())
            .map(|(v, c)| {
                // SAFETY: mmsghdr is plain data.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                // `IoSliceMut` is ABI-compatible with `iovec`.
                m.msg_hdr.msg_iov = v.as_mut_ptr().cast();
                m.msg_hdr.msg_iovlen = v.len();
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CMSG_SPACE;
                m
            })
            .collect();
        // SAFETY: hdrs/iovecs/ctl describe valid writable buffers for the call.
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        for m in &hdrs[..n as usize] {
            let mut seg = 0usize;
            // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_* walk it.
            unsafe {
                let mut h = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                while !h.is_null() {
                    if (*h).cmsg_level == SOL_UDP && (*h).cmsg_type == UDP_GRO {
                        seg = std::ptr::read_unaligned(libc::CMSG_DATA(h).cast::<u16>()) as usize;
                    }
                    h = libc::CMSG_NXTHDR(&m.msg_hdr, h);
                }
            }
            out.push((m.msg_len as usize, seg));
        }
        Ok(())
    }
}

/// How many datagrams of a received message of `len` bytes with GRO segment size `seg`
/// (0: one datagram) lie one per slot in `slots` slots of `size` bytes each, or `None`
/// if they do not (another segment size, or more than the slots hold): then the message
/// has to be gathered and split by copying.
pub fn scattered(len: usize, seg: usize, size: usize, slots: usize) -> Option<usize> {
    let aligned = seg == size || (seg == 0 && len <= size);
    (size > 0 && aligned && len <= size * slots).then(|| len.div_ceil(size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::poll_readable;

    /// A receiver with GRO requested (and whether the kernel took it) and a sender
    /// aimed at it, on loopback.
    fn loopback_pair() -> (Underlay, Underlay, bool) {
        let a = Underlay::bind(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
        )
        .unwrap();
        let b =
            Underlay::bind("127.0.0.1:0".parse().unwrap(), a.sock.local_addr().unwrap()).unwrap();
        let gro = a.enable_gro();
        (a, b, gro)
    }

    #[test]
    fn groups_follow_the_kernel_rule() {
        assert_eq!(group(&[]), vec![]);
        assert_eq!(group(&[100, 100, 100]), vec![(0, 3, 100)]);
        assert_eq!(group(&[100, 100, 60, 100]), vec![(0, 3, 100), (3, 1, 100)]);
        assert_eq!(group(&[60, 100, 100]), vec![(0, 1, 60), (1, 2, 100)]);
        let many = vec![1000; 150];
        let g = group(&many);
        assert_eq!(g.iter().map(|x| x.1).collect::<Vec<_>>(), vec![64, 64, 22]);
        let big = vec![1500; 50];
        assert!(group(&big).iter().all(|x| x.1 * x.2 <= MAX_GSO_BYTES));
    }

    #[test]
    fn split_cuts_at_the_segment_size() {
        assert_eq!(split(10, 4).collect::<Vec<_>>(), vec![0..4, 4..8, 8..10]);
        assert_eq!(split(10, 0).collect::<Vec<_>>(), vec![0..10]);
        assert_eq!(split(0, 0).count(), 0);
    }

    #[test]
    fn gso_send_and_gro_receive_on_loopback() {
        let (a, b, gro) = loopback_pair();
        assert!(b.probe_gso());
        let data: Vec<Vec<u8>> = (0..10u8)
            .map(|i| vec![i; if i == 6 || i == 9 { 300 } else { 500 }])
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let (n, e) = b.send_gso(&refs);
        assert_eq!((n, e.is_none()), (10, true));
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut bufs = vec![vec![0u8; GRO_BUF]; 4];
        let mut lens = Vec::new();
        for _ in 0..50 {
            if got.len() == 10 {
                break;
            }
            poll_readable(&[a.sock.as_raw_fd()], 200).unwrap();
            let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            a.recv_batch(&mut slices, &mut lens).unwrap();
            for (k, &(len, seg)) in lens.iter().enumerate() {
                for r in split(len, seg) {
                    got.push(bufs[k][r].to_vec());
                }
            }
        }
        assert_eq!(got, data, "gro enabled: {gro}");
    }

    #[test]
    fn scatter_fits_only_datagrams_of_the_slot_size() {
        assert_eq!(scattered(1000, 250, 250, 4), Some(4));
        assert_eq!(scattered(900, 250, 250, 4), Some(4));
        assert_eq!(scattered(1001, 250, 250, 4), None);
        assert_eq!(scattered(1000, 200, 250, 8), None);
        assert_eq!(scattered(200, 0, 250, 1), Some(1));
        assert_eq!(scattered(251, 0, 250, 4), None);
        assert_eq!(scattered(0, 0, 250, 4), Some(0));
        assert_eq!(scattered(100, 0, 0, 0), None);
    }

    #[test]
    fn vectored_receive_puts_each_coalesced_datagram_in_its_own_slot() {
        let (a, b, gro) = loopback_pair();
        let data: Vec<Vec<u8>> = (0..8u8)
            .map(|i| vec![i + 1; if i == 7 { 120 } else { 400 }])
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        assert_eq!(b.send_gso(&refs).0, 8);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut lens = Vec::new();
        for _ in 0..50 {
            if got.len() == 8 {
                break;
            }
            poll_readable(&[a.sock.as_raw_fd()], 200).unwrap();
            let mut slots = vec![vec![0u8; 400]; 8];
            let mut rest = vec![0u8; GRO_BUF];
            {
                let mut iov: Vec<IoSliceMut<'_>> = slots
                    .iter_mut()
                    .map(|s| IoSliceMut::new(s))
                    .chain(std::iter::once(IoSliceMut::new(&mut rest)))
                    .collect();
                a.recv_vectored(&mut [iov.as_mut_slice()], &mut lens)
                    .unwrap();
            }
            for &(len, seg) in &lens {
                let n = scattered(len, seg, 400, 8).expect("datagrams of the slot size");
                for (i, s) in slots.iter().take(n).enumerate() {
                    got.push(s[..(len - i * 400).min(400)].to_vec());
                }
            }
        }
        assert_eq!(got, data, "gro enabled: {gro}");
    }
}
