//! Batched datagram I/O shared by the socket ports: preallocated `mmsghdr`/`iovec`
//! arrays aimed at the packets' own buffers for each `recvmmsg`/`sendmmsg` call, with
//! or without the 10-byte virtio-net header in front of every frame, and a bounded
//! retry when the kernel queue is full (then `TxError` drops, counted).

use crate::port::PortCounters;
use nfx_packet::{DropReason, Packet, VnetHdr};
use std::io;
use std::os::fd::RawFd;

/// Scratch space for one batch of messages.
pub(crate) struct MsgBatch {
    vnet: bool,
    hdrs: Vec<[u8; VnetHdr::LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside `iovs`/`msgs` are scratch space, rewritten before every
// syscall from live borrows and never dereferenced by Rust code.
unsafe impl Send for MsgBatch {}

impl MsgBatch {
    /// Room for `batch` messages; `vnet` puts a virtio-net header before each frame.
    pub(crate) fn new(batch: usize, vnet: bool) -> Self {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Self {
            vnet,
            hdrs: vec![[0; VnetHdr::LEN]; batch],
            iovs: vec![[empty; 2]; batch],
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            msgs: vec![unsafe { std::mem::zeroed() }; batch],
        }
    }

    /// Most messages per call.
    pub(crate) fn batch(&self) -> usize {
        self.msgs.len()
    }

    /// Points message `i` at header `i` (if any) and at `data` (`len` bytes).
    fn aim(&mut self, i: usize, data: *mut u8, len: usize) {
        self.aim_with(i, data, len, self.vnet);
    }

    /// Points message `i` at `data` (`len` bytes), preceded by header `i` when
    /// `separate_hdr` (else `data` is all there is: a frame with its header in front).
    fn aim_with(&mut self, i: usize, data: *mut u8, len: usize, separate_hdr: bool) {
        let frame = libc::iovec {
            iov_base: data.cast(),
            iov_len: len,
        };
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        if separate_hdr {
            let h = libc::iovec {
                iov_base: self.hdrs[i].as_mut_ptr().cast(),
                iov_len: VnetHdr::LEN,
            };
            self.iovs[i] = [h, frame];
            hdr.msg_iovlen = 2;
        } else {
            self.iovs[i][0] = frame;
            hdr.msg_iovlen = 1;
        }
        hdr.msg_iov = self.iovs[i].as_mut_ptr();
        self.msgs[i] = libc::mmsghdr {
            msg_hdr: hdr,
            msg_len: 0,
        };
    }

    /// Receives up to `slots.len()` datagrams, each into a slot's buffer from byte
    /// `offset` on; returns how many slots hold one (truncated ones are dropped and counted).
    pub(crate) fn recv(
        &mut self,
        fd: RawFd,
        slots: &mut [Packet],
        offset: usize,
        c: &mut PortCounters,
    ) -> io::Result<usize> {
        let n = slots.len().min(self.batch());
        for (i, p) in slots[..n].iter_mut().enumerate() {
            let storage = &mut p.buf.storage_mut()[offset..];
            let (ptr, len) = (storage.as_mut_ptr(), storage.len());
            self.aim(i, ptr, len);
        }
        // SAFETY: the first `n` messages point at live buffers borrowed for this call.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => {
                    c.rx_errors += 1;
                    Err(e)
                }
            };
        }
        let head = if self.vnet { VnetHdr::LEN } else { 0 };
        let mut kept = 0;
        c.rx_taken += got as u64;
        for i in 0..got as usize {
            let m = &self.msgs[i];
            let total = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || total < head {
                c.drop(DropReason::Truncated);
                continue;
            }
            let p = &mut slots[i];
            p.buf.set_len(offset + total - head);
            p.buf.vnet = if self.vnet {
                VnetHdr::from_bytes(&self.hdrs[i])
            } else {
                VnetHdr::default()
            };
            c.rx_packets += 1;
            c.rx_bytes += (total - head) as u64;
            slots.swap(kept, i);
            kept += 1;
        }
        Ok(kept)
    }

    /// Sends every packet's frame from byte `offset` on, in order. After `retries`
    /// fruitless attempts on a full queue the rest get `TxError`; a frame the kernel
    /// refuses outright gets `TxError` alone. Returns how many were sent.
    pub(crate) fn send(
        &mut self,
        fd: RawFd,
        pkts: &mut [Packet],
        offset: usize,
        retries: u32,
        c: &mut PortCounters,
    ) -> usize {
        let mut done = 0;
        let mut tries = 0;
        while done < pkts.len() {
            let n = (pkts.len() - done).min(self.batch());
            for i in 0..n {
                let p = &mut pkts[done + i];
                if self.vnet && offset == 0 {
                    // A frame lent from a receive ring has room for its header in
                    // front: one buffer per message, which the kernel imports faster.
                    if let Some(whole) = p.buf.vnet_and_frame() {
                        let (ptr, len) = (whole.as_ptr().cast_mut(), whole.len());
                        self.aim_with(i, ptr, len, false);
                        continue;
                    }
                }
                self.hdrs[i] = p.buf.vnet.to_bytes();
                let frame = p.buf.frame().get(offset..).unwrap_or_default();
                self.aim(i, frame.as_ptr().cast_mut(), frame.len());
            }
            // SAFETY: the first `n` messages point at live frames; sendmmsg only reads them.
            let sent =
                unsafe { libc::sendmmsg(fd, self.msgs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT) };
            if sent > 0 {
                for p in &pkts[done..done + sent as usize] {
                    c.tx_packets += 1;
                    c.tx_bytes += p.buf.len().saturating_sub(offset) as u64;
                }
                done += sent as usize;
                tries = 0;
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) if tries < retries => {
                    tries += 1;
                    c.tx_retries += 1;
                    wait_writable(fd);
                }
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                _ => {
                    pkts[done].drop = Some(DropReason::TxError);
                    c.drop(DropReason::TxError);
                    done += 1;
                }
            }
        }
        for p in &mut pkts[done..] {
            p.drop = Some(DropReason::TxError);
            c.drop(DropReason::TxError);
        }
        pkts.iter().filter(|p| p.drop.is_none()).count()
    }
}

/// Waits up to 1 ms for room in the send queue of `fd`.
pub(crate) fn wait_writable(fd: RawFd) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd. The result only decides whether to retry, which the
    // caller bounds anyway.
    unsafe { libc::poll(&mut pfd, 1, 1) };
}
