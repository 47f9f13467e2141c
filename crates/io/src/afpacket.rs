//! AF_PACKET port on one interface (a veth end): raw Ethernet frames with their
//! virtio-net header, so that GSO/GRO super-packets (up to 64 KiB) and partial checksums
//! cross userspace without being segmented. Sends with `sendmmsg` or through a
//! PACKET_MMAP transmit ring ([`crate::txring`], `tx_ring`); receives with `recvmmsg` or
//! from a PACKET_MMAP ring ([`crate::ring`], `rx_ring`).

use crate::isolate::KernelIsolation;
use crate::mmsg::wait_writable;
use crate::mmsg::MsgBatch;
use crate::port::{Port, PortCounters};
use crate::ring::{parse_slot, slot_stamp_ns, RxRing, SlotFrame};
use crate::sys::{check, iface_mac, ifindex, owned, set_buffer, setsockopt_int};
use crate::txring::{Push, TxRing};
use nfx_packet::{Packet, PacketBuf, VnetHdr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

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
    /// PACKET_FANOUT group (CBPF type) to join after binding, so that two processes can
    /// share the interface and traffic can be steered between them ([`crate::fanout`]).
    pub fanout: Option<u16>,
    /// Receive through a PACKET_MMAP ring of at least this many slots instead of
    /// `recvmmsg` (`None`). `batch` still bounds the frames taken per receive.
    pub rx_ring: Option<usize>,
    /// Bytes per receive ring slot: [`crate::ring::SLOT`] (2 KiB, MTU frames; bigger
    /// frames are read from the socket queue) or up to [`crate::ring::GSO_SLOT`]
    /// (68 KiB: GSO super-packets land in the ring too).
    pub rx_slot: usize,
    /// Lend received frames to the packets in place instead of copying them out of
    /// the ring: each packet's buffer points into its slot ([`PacketBuf::attach_external`])
    /// until [`Port::release`], which the caller must make after sending them and
    /// before the next receive. Frames read from the socket queue are copied as before.
    pub rx_in_place: bool,
    /// Send through a PACKET_MMAP transmit ring of at least this many slots (on a
    /// send-only socket of its own) instead of `sendmmsg` (`None`).
    pub tx_ring: Option<usize>,
    /// Keep the kernel's IP stack off the interface while the port is open: an ingress
    /// drop of IPv4/IPv6 behind the packet taps ([`crate::isolate`]). For a dataplane
    /// that forwards what it receives; a generator or a test tap leaves it off. Outside
    /// a fanout group the port then refuses an interface that another live dataplane
    /// already isolates (it would forward a copy of every frame).
    pub isolate_kernel: bool,
    /// A kernel fast path shares the interface (the table tier, `nfx_fastpath`): bind
    /// to IPv4 (ETH_P_IP) instead of every protocol, so that frames reach the socket
    /// after the tc ingress hook, where the fast path takes the flows it forwards, and
    /// (with `isolate_kernel`) drop IPv4 for the kernel at prerouting rather than at
    /// the ingress hook, which runs before the socket. The port carries IPv4 only.
    pub fast_path: bool,
    /// A BPF socket filter (program fd) to attach before the socket binds, so that it
    /// sees every frame the socket is ever offered: the fast path's delivery counter
    /// (`nfx_fastpath::FastPath::socket_filter`).
    pub socket_filter: Option<RawFd>,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        Self {
            batch: nfx_packet::MAX_VECTOR,
            socket_buffer: 32 << 20,
            qdisc_bypass: true,
            tx_retries: 16,
            fanout: None,
            rx_ring: None,
            rx_slot: crate::ring::SLOT,
            rx_in_place: false,
            tx_ring: None,
            isolate_kernel: false,
            fast_path: false,
            socket_filter: None,
        }
    }
}

/// A raw packet socket bound to one interface, in promiscuous mode, that ignores its own
/// transmissions and carries the virtio-net header with every frame.
pub struct AfPacketPort {
    fd: OwnedFd,
    iface: String,
    mac: [u8; 6],
    retries: u32,
    batch: MsgBatch,
    ring: Option<RxRing>,
    /// Most frames one receive takes from the ring.
    ring_batch: usize,
    /// Received frames stay in their ring slots until [`Port::release`].
    in_place: bool,
    /// The kernel's receive time of each frame the last ring receive returned.
    stamps: Vec<u64>,
    tx_ring: Option<TxRing>,
    counters: PortCounters,
    /// The ingress drop that keeps the kernel stack off the interface, if asked for;
    /// removed when the port closes.
    isolation: Option<KernelIsolation>,
}

const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();
const ETH_P_IP_BE: u16 = (libc::ETH_P_IP as u16).to_be();

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
        if let Some(prog) = opts.socket_filter {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_ATTACH_BPF, prog)
                .map_err(|e| with("SO_ATTACH_BPF", e))?;
        }
        // SAFETY: sockaddr_ll is plain old data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = if opts.fast_path {
            ETH_P_IP_BE
        } else {
            ETH_P_ALL_BE
        };
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
        let mut ring = match opts.rx_ring {
            Some(frames) => Some(
                RxRing::new(raw, frames, opts.rx_slot).map_err(|e| with("PACKET_RX_RING", e))?,
            ),
            None => None,
        };
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
        if let Some(group) = opts.fanout {
            crate::fanout::join(raw, group).map_err(|e| with("PACKET_FANOUT", e))?;
            // Between bind and join the socket received copies of frames that another
            // member owns, and a receive that began before the join may still be queueing
            // one (the kernel unhooks the socket without waiting): wait for those to land,
            // then discard them all, or a standby would forward them a second time when it
            // takes over. Until the group's program points here, nothing else arrives.
            crate::sys::rcu_grace_period()
                .map_err(|e| with("waiting for receives in flight before the fanout join", e))?;
            discard_queued(raw);
            if let Some(r) = &mut ring {
                r.discard();
            }
        }
        let tx_ring = match opts.tx_ring {
            Some(frames) => Some(
                TxRing::open(index, frames, opts.qdisc_bypass)
                    .map_err(|e| with("PACKET_TX_RING", e))?,
            ),
            None => None,
        };
        let isolation = if opts.isolate_kernel {
            Some(
                KernelIsolation::install(iface, index, opts.fast_path, opts.fanout.is_none())
                    .map_err(|e| with("kernel stack isolation", e))?,
            )
        } else {
            None
        };
        let batch = opts.batch.clamp(1, nfx_packet::MAX_VECTOR);
        Ok(Self {
            fd,
            iface: iface.to_string(),
            mac,
            retries: opts.tx_retries,
            batch: MsgBatch::new(batch, true),
            ring,
            ring_batch: batch,
            in_place: opts.rx_in_place,
            stamps: Vec::with_capacity(if opts.rx_ring.is_some() { batch } else { 0 }),
            tx_ring,
            counters: PortCounters::default(),
            isolation,
        })
    }
}

impl AfPacketPort {
    /// Hands the port the kernel-stack isolation of its interface, installed by the
    /// caller (for several ports in one `nft` run, see
    /// [`KernelIsolation::install_all`]) instead of by `open`; removed with the port.
    pub fn set_isolation(&mut self, isolation: KernelIsolation) {
        self.isolation = Some(isolation);
    }

    /// The nftables table of the kernel-stack isolation, when the port installed one.
    pub fn isolation_table(&self) -> Option<&str> {
        self.isolation.as_ref().map(KernelIsolation::table)
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
        // Frames a full send queue left in the transmit ring go out now, not only with
        // the next vector.
        if let Some(tx) = &mut self.tx_ring {
            if tx.pending() > 0 && tx.kick().is_err() {
                self.counters.tx_retries += 1;
            }
        }
        if self.ring.is_some() {
            return Ok(self.recv_ring(slots));
        }
        self.batch
            .recv(self.fd.as_raw_fd(), slots, 0, &mut self.counters)
    }

    fn send(&mut self, pkts: &mut [Packet]) -> usize {
        if self.tx_ring.is_some() {
            return self.send_ring(pkts);
        }
        self.batch.send(
            self.fd.as_raw_fd(),
            pkts,
            0,
            self.retries,
            &mut self.counters,
        )
    }

    fn counters(&self) -> &PortCounters {
        &self.counters
    }

    fn rx_stamps(&self) -> &[u64] {
        &self.stamps
    }

    fn unsent_bytes(&self) -> io::Result<usize> {
        let mut total = outq(self.fd.as_raw_fd())?;
        if let Some(t) = &self.tx_ring {
            total += outq(t.fd())?;
        }
        Ok(total)
    }

    fn release(&mut self, pkts: &mut [Packet]) {
        if let Some(ring) = &mut self.ring {
            if ring.held() > 0 {
                for p in pkts.iter_mut() {
                    p.buf.detach();
                }
                ring.release_held();
            }
        }
    }
}

impl AfPacketPort {
    /// Writes every packet into the transmit ring, then kicks the kernel once. A frame
    /// that finds the ring full (its slot still queued or in flight) or is too big for
    /// a slot is dropped with `TxError`/`TooBig`; a kick the send queue refuses is
    /// retried (bounded), and what is still marked after that goes with the next kick.
    fn send_ring(&mut self, pkts: &mut [Packet]) -> usize {
        let Some(tx) = &mut self.tx_ring else {
            return 0;
        };
        let c = &mut self.counters;
        let mut sent = 0;
        for p in pkts.iter_mut() {
            let frame = p.buf.frame();
            let len = frame.len();
            let mut pushed = tx.push(&p.buf.vnet, frame);
            if pushed == Push::Full && tx.pending() > 0 {
                // Hand the marked slots over; the kernel returns each as it is done.
                let _ = tx.kick();
                pushed = tx.push(&p.buf.vnet, frame);
            }
            match pushed {
                Push::Queued => {
                    c.tx_packets += 1;
                    c.tx_bytes += len as u64;
                    sent += 1;
                }
                Push::Full => {
                    p.drop = Some(nfx_packet::DropReason::TxError);
                    c.drop(nfx_packet::DropReason::TxError);
                }
                Push::TooBig => {
                    p.drop = Some(nfx_packet::DropReason::TooBig);
                    c.drop(nfx_packet::DropReason::TooBig);
                }
            }
        }
        let mut tries = 0;
        while let Err(e) = tx.kick() {
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
                    if tries < self.retries =>
                {
                    tries += 1;
                    c.tx_retries += 1;
                    wait_writable(tx.fd());
                }
                _ => break,
            }
        }
        sent
    }

    /// Takes up to `slots.len()` (at most `batch`) frames from the receive ring, copying
    /// each into a slot's buffer or, with `in_place`, lending each packet its frame in
    /// the ring slot (held from the kernel until [`Port::release`]); oversize frames
    /// come from the socket queue.
    fn recv_ring(&mut self, slots: &mut [Packet]) -> usize {
        let fd = self.fd.as_raw_fd();
        let in_place = self.in_place;
        let Some(ring) = &mut self.ring else {
            return 0;
        };
        if ring.held() > 0 {
            // The caller did not release the previous receive: end those loans (the
            // caller passes the same packets again) before the slots go back.
            for p in slots.iter_mut() {
                p.buf.detach();
            }
            ring.release_held();
        }
        let c = &mut self.counters;
        let want = slots.len().min(self.ring_batch);
        self.stamps.clear();
        let mut kept = 0;
        let mut taken = 0;
        while taken < want {
            let Some(status) = ring.ready() else {
                break;
            };
            taken += 1;
            c.rx_taken += 1;
            let p = &mut slots[kept];
            let stamp = slot_stamp_ns(ring.head_slot());
            let got = match parse_slot(ring.head_slot(), status) {
                Ok(SlotFrame::InSlot { mac, len }) => {
                    let slot = ring.head_slot();
                    let mut h = [0u8; VnetHdr::LEN];
                    h.copy_from_slice(&slot[mac - VnetHdr::LEN..mac]);
                    p.buf.vnet = VnetHdr::from_bytes(&h);
                    if in_place {
                        lend(&mut p.buf, ring.head_ptr(), ring.slot_size(), mac, len);
                        Ok(len)
                    } else {
                        let storage = p.buf.storage_mut();
                        if len > storage.len() {
                            Err(nfx_packet::DropReason::TooBig)
                        } else {
                            storage[..len].copy_from_slice(&slot[mac..mac + len]);
                            p.buf.set_len(len);
                            Ok(len)
                        }
                    }
                }
                Ok(SlotFrame::Queued) => recv_one(fd, p, c),
                Err(reason) => Err(reason),
            };
            if in_place {
                ring.take_head();
            } else {
                ring.release_head();
            }
            match got {
                Ok(len) => {
                    c.rx_packets += 1;
                    c.rx_bytes += len as u64;
                    kept += 1;
                    // Within capacity: `want` ≤ `ring_batch`, the capacity.
                    self.stamps.push(stamp);
                }
                Err(reason) => {
                    p.buf.detach();
                    c.drop(reason);
                }
            }
        }
        kept
    }
}

/// Lends `buf` the frame of `len` bytes at offset `mac` of the ring slot at `slot`
/// (`slot_size` bytes; [`parse_slot`] checked that the frame lies inside it, behind
/// the slot header and the virtio-net header), with the virtio-net header's bytes in
/// front of it, so that the send can hand header and frame over as one buffer.
fn lend(buf: &mut PacketBuf, slot: *mut u8, slot_size: usize, mac: usize, len: usize) {
    // SAFETY: `mac` < `slot_size`, so the pointer stays inside the slot, which is
    // non-null (inside the mapping).
    let frame = unsafe { NonNull::new_unchecked(slot.add(mac)) };
    // SAFETY: the slot's bytes from `mac - VnetHdr::LEN` (after the slot header, as
    // `parse_slot` checked) to its end stay mapped (the ring lives as long as the port)
    // and userspace's: the ring holds the slot from the kernel (`take_head`) until
    // `release`, which first detaches every packet it lent.
    unsafe { buf.attach_external(frame, VnetHdr::LEN, slot_size - mac, len) };
}

/// Reads one frame (with its virtio-net header) from the socket queue into `p`: the full
/// copy of a frame too big for a ring slot. `Truncated` when none is queued (the kernel
/// had no buffer room for the copy) or it did not fit.
fn recv_one(
    fd: RawFd,
    p: &mut Packet,
    c: &mut PortCounters,
) -> Result<usize, nfx_packet::DropReason> {
    let mut h = [0u8; VnetHdr::LEN];
    let storage = p.buf.storage_mut();
    let mut iov = [
        libc::iovec {
            iov_base: h.as_mut_ptr().cast(),
            iov_len: h.len(),
        },
        libc::iovec {
            iov_base: storage.as_mut_ptr().cast(),
            iov_len: storage.len(),
        },
    ];
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2;
    // SAFETY: the message points at two live buffers borrowed for this call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        if io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            c.rx_errors += 1;
        }
        return Err(nfx_packet::DropReason::Truncated);
    }
    let n = n as usize;
    if msg.msg_flags & libc::MSG_TRUNC != 0 || n < VnetHdr::LEN {
        return Err(nfx_packet::DropReason::Truncated);
    }
    let len = n - VnetHdr::LEN;
    p.buf.set_len(len);
    p.buf.vnet = VnetHdr::from_bytes(&h);
    Ok(len)
}

/// Reads and throws away every frame queued on the non-blocking socket `fd`.
fn discard_queued(fd: RawFd) {
    let mut scratch = [0u8; 64];
    loop {
        // SAFETY: reads into a live buffer of the given size; MSG_TRUNC only discards the rest.
        let n = unsafe {
            libc::recv(
                fd,
                scratch.as_mut_ptr().cast(),
                scratch.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            return;
        }
    }
}

/// Bytes of sent frames the kernel still holds for socket `fd` (SIOCOUTQ, which is
/// TIOCOUTQ).
fn outq(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: the ioctl writes one int to the pointer, which is live for the call.
    check(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// Frames the kernel dropped on packet socket `fd` because its receive buffer was full,
/// since the previous call (PACKET_STATISTICS resets on read). Errors for descriptors
/// that are not packet sockets.
pub fn socket_drops(fd: RawFd) -> io::Result<u64> {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: passes a live tpacket_stats and its size; the kernel writes at most `len`.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    })?;
    Ok(u64::from(st.tp_drops))
}
