//! AF_PACKET port on one interface (a veth end): raw Ethernet frames with their
//! virtio-net header, so that GSO/GRO super-packets (up to 64 KiB) and partial checksums
//! cross userspace without being segmented. Batched with `recvmmsg`/`sendmmsg`.

use crate::port::{Port, PortCounters};
use crate::sys::{check, iface_mac, ifindex, owned, set_buffer, setsockopt_int};
use nfx_packet::{DropReason, Packet, VnetHdr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// How an [`AfPacketPort`] is opened.
#[derive(Debug, Clone)]
pub struct AfPacketOptions {
    /// Most frames moved by one `recvmmsg`/`sendmmsg` call (1 = scalar mode).
    pub batch: usize,
    /// SO_RCVBUF and SO_SNDBUF size in bytes.
    pub socket_buffer: usize,
    /// Send straight to the driver, skipping the qdisc layer (PACKET_QDISC_BYPASS).
    pub qdisc_bypass: bool,
    /// How many times a send that hits a full queue is tried again before the frames
    /// are dropped with `TxError`.
    pub tx_retries: u32,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        Self {
            batch: nfx_packet::MAX_VECTOR,
            socket_buffer: 32 << 20,
            qdisc_bypass: true,
            tx_retries: 16,
        }
    }
}

/// A raw packet socket bound to one interface, in promiscuous mode, that ignores its own
/// transmissions and carries the virtio-net header with every frame.
pub struct AfPacketPort {
    fd: OwnedFd,
    iface: String,
    mac: [u8; 6],
    opts: AfPacketOptions,
    hdrs: Vec<[u8; VnetHdr::LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
    counters: PortCounters,
}

// SAFETY: the raw pointers inside `iovs`/`msgs` are scratch space, rewritten before every
// syscall from live borrows and never dereferenced by Rust code; moving the port to the
// worker thread is therefore sound.
unsafe impl Send for AfPacketPort {}

const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

impl AfPacketPort {
    /// Opens the port on `iface` in the calling thread's network namespace.
    pub fn open(iface: &str, opts: AfPacketOptions) -> io::Result<Self> {
        let with = |what: &str, e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("AF_PACKET port on `{iface}`: {what}: {e}"),
            )
        };
        let index = ifindex(iface)?;
        let mac = iface_mac(iface)?;
        // Protocol 0: receive nothing until bound, so no frame of another interface slips in.
        // SAFETY: plain socket(2) call.
        let fd = owned(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })
        .map_err(|e| with("socket (needs CAP_NET_RAW)", e))?;
        let raw = fd.as_raw_fd();
        setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
            .map_err(|e| with("PACKET_VNET_HDR", e))?;
        setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
            .map_err(|e| with("PACKET_IGNORE_OUTGOING", e))?;
        if opts.qdisc_bypass {
            setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
                .map_err(|e| with("PACKET_QDISC_BYPASS", e))?;
        }
        set_buffer(
            raw,
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            opts.socket_buffer,
        );
        set_buffer(
            raw,
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            opts.socket_buffer,
        );
        // SAFETY: sockaddr_ll is plain old data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL_BE;
        sll.sll_ifindex = index as i32;
        // SAFETY: passes a live sockaddr_ll and its size.
        check(unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(|e| with("bind", e))?;
        let mreq = libc::packet_mreq {
            mr_ifindex: index as i32,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        // SAFETY: passes a live packet_mreq and its size.
        check(unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mreq as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        })
        .map_err(|e| with("promiscuous membership", e))?;
        let batch = opts.batch.clamp(1, nfx_packet::MAX_VECTOR);
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Ok(Self {
            fd,
            iface: iface.to_string(),
            mac,
            opts: AfPacketOptions { batch, ..opts },
            hdrs: vec![[0; VnetHdr::LEN]; batch],
            iovs: vec![[empty_iov; 2]; batch],
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            msgs: vec![unsafe { std::mem::zeroed() }; batch],
            counters: PortCounters::default(),
        })
    }

    /// Points message `i` at header `i` and at `data` (`len` bytes).
    fn aim(&mut self, i: usize, data: *mut u8, len: usize) {
        self.iovs[i] = [
            libc::iovec {
                iov_base: self.hdrs[i].as_mut_ptr().cast(),
                iov_len: VnetHdr::LEN,
            },
            libc::iovec {
                iov_base: data.cast(),
                iov_len: len,
            },
        ];
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = self.iovs[i].as_mut_ptr();
        hdr.msg_iovlen = 2;
        self.msgs[i] = libc::mmsghdr {
            msg_hdr: hdr,
            msg_len: 0,
        };
    }

    /// Waits up to 1 ms for room in the socket's send queue.
    fn wait_writable(&self) {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one live pollfd. The result only decides whether to retry, which the
        // caller bounds anyway.
        unsafe { libc::poll(&mut pfd, 1, 1) };
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.iface
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn recv(&mut self, slots: &mut [Packet]) -> io::Result<usize> {
        let n = slots.len().min(self.opts.batch);
        for (i, p) in slots[..n].iter_mut().enumerate() {
            let storage = p.buf.storage_mut();
            let (ptr, len) = (storage.as_mut_ptr(), storage.len());
            self.aim(i, ptr, len);
        }
        // SAFETY: the first `n` messages point at live buffers borrowed for this call.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
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
                    self.counters.rx_errors += 1;
                    Err(e)
                }
            };
        }
        let mut kept = 0;
        for i in 0..got as usize {
            let m = &self.msgs[i];
            let total = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || total < VnetHdr::LEN {
                self.counters.drop(DropReason::Truncated);
                continue;
            }
            let p = &mut slots[i];
            p.buf.set_len(total - VnetHdr::LEN);
            p.buf.vnet = VnetHdr::from_bytes(&self.hdrs[i]);
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += (total - VnetHdr::LEN) as u64;
            slots.swap(kept, i);
            kept += 1;
        }
        Ok(kept)
    }

    fn send(&mut self, pkts: &mut [Packet]) -> usize {
        let mut done = 0;
        let mut retries = 0;
        while done < pkts.len() {
            let n = (pkts.len() - done).min(self.opts.batch);
            for i in 0..n {
                let p = &pkts[done + i];
                self.hdrs[i] = p.buf.vnet.to_bytes();
                let frame = p.buf.frame();
                self.aim(i, frame.as_ptr().cast_mut(), frame.len());
            }
            // SAFETY: the first `n` messages point at live frames; sendmmsg only reads them.
            let sent = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.msgs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if sent > 0 {
                for p in &pkts[done..done + sent as usize] {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += p.buf.len() as u64;
                }
                done += sent as usize;
                retries = 0;
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) if retries < self.opts.tx_retries => {
                    retries += 1;
                    self.counters.tx_retries += 1;
                    self.wait_writable();
                }
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                _ => {
                    // This frame itself is refused (too big, bad offload header): drop it alone.
                    pkts[done].drop = Some(DropReason::TxError);
                    self.counters.drop(DropReason::TxError);
                    done += 1;
                }
            }
        }
        for p in &mut pkts[done..] {
            p.drop = Some(DropReason::TxError);
            self.counters.drop(DropReason::TxError);
        }
        pkts.iter().filter(|p| p.drop.is_none()).count()
    }

    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}
