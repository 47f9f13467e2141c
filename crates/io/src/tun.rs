//! TUN port (IFF_TUN | IFF_NO_PI | IFF_VNET_HDR): the inner side of a tunnel endpoint.
//! The kernel hands over IP packets (GSO super-packets included, with their virtio-net
//! header); the port stores each behind a synthetic 14-byte Ethernet header so that the
//! graph parses TUN and Ethernet frames alike, and strips it again on transmit. A TUN
//! descriptor is not a socket, so a batch is a run of `readv`/`writev` calls.

use crate::port::{Port, PortCounters};
use crate::sys::{check, ifreq, owned};
use nfx_packet::{DropReason, Packet, VnetHdr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Length of the synthetic Ethernet header in front of every TUN packet.
pub const FAKE_ETH: usize = 14;

/// An open TUN interface.
pub struct TunPort {
    fd: OwnedFd,
    name: String,
    batch: usize,
    counters: PortCounters,
}

impl TunPort {
    /// Creates (or attaches to) TUN interface `name` in the calling thread's namespace
    /// with GSO offloads on, and sets it up. `batch` packets at most per receive call.
    pub fn open(name: &str, batch: usize) -> io::Result<Self> {
        let with = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("TUN port `{name}`: {what}: {e}"))
        };
        let fd = open_queue(name, true, false).map_err(|e| with("open", e))?;
        let offload = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        if set_offload(&fd, &[offload]) == 0 {
            return Err(with("TUNSETOFFLOAD", io::Error::last_os_error()));
        }
        set_up(name).map_err(|e| with("set up", e))?;
        Ok(Self {
            fd,
            name: name.to_string(),
            batch: batch.clamp(1, nfx_packet::MAX_VECTOR),
            counters: PortCounters::default(),
        })
    }
}

/// Opens one queue of TUN interface `name` (creating the interface, or attaching to
/// it) in the calling thread's namespace: non-blocking, IP packets without packet
/// info; with `vnet` every packet carries a `virtio_net_hdr`. With `multi_queue`
/// (`IFF_MULTI_QUEUE`) each call adds a queue and the kernel steers each flow (by its
/// hash) to one of them, so threads that each serve one queue see every flow's packets
/// in order. Needs CAP_NET_ADMIN.
pub fn open_queue(name: &str, vnet: bool, multi_queue: bool) -> io::Result<OwnedFd> {
    let mut req = ifreq(name)?;
    // SAFETY: opening the TUN clone device.
    let fd = owned(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })?;
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
    if vnet {
        flags |= libc::IFF_VNET_HDR;
    }
    if multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads the name and flags from `req`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    if vnet {
        let hdr_len = VnetHdr::LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one c_int.
        check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr_len) })?;
    }
    Ok(fd)
}

/// Asks the kernel for the first of `wants` (`TUN_F_*` sets, best first) it accepts on
/// the TUN queue `fd`; returns the set taken (0: none, the caller reads packet by
/// packet).
pub fn set_offload(fd: &OwnedFd, wants: &[u32]) -> u32 {
    for &want in wants {
        // SAFETY: TUNSETOFFLOAD takes the flags as the integer argument.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, want as libc::c_ulong) } == 0 {
            return want;
        }
    }
    0
}

/// Sets interface `name` administratively up.
fn set_up(name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    // SAFETY: plain datagram socket used only for the ioctls below.
    let sock =
        owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: SIOCGIFFLAGS / SIOCSIFFLAGS read and write `req` in place.
    unsafe {
        check(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req))?;
    }
    Ok(())
}

impl Port for TunPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn mac(&self) -> [u8; 6] {
        [0; 6]
    }

    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn recv(&mut self, slots: &mut [Packet]) -> io::Result<usize> {
        let mut n = 0;
        let want = slots.len().min(self.batch);
        while n < want {
            let p = &mut slots[n];
            let mut hdr = [0u8; VnetHdr::LEN];
            let storage = p.buf.storage_mut();
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr().cast(),
                    iov_len: VnetHdr::LEN,
                },
                libc::iovec {
                    iov_base: storage[FAKE_ETH..].as_mut_ptr().cast(),
                    iov_len: storage.len() - FAKE_ETH,
                },
            ];
            // SAFETY: both iovecs point at live, writable buffers of the stated sizes.
            let got = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if got < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(n),
                    _ => {
                        self.counters.rx_errors += 1;
                        if n > 0 {
                            Ok(n)
                        } else {
                            Err(e)
                        }
                    }
                };
            }
            self.counters.rx_taken += 1;
            let got = got as usize;
            if got <= VnetHdr::LEN {
                self.counters.drop(DropReason::Truncated);
                continue;
            }
            let ip_len = got - VnetHdr::LEN;
            let version = storage[FAKE_ETH] >> 4;
            storage[..12].fill(0);
            storage[12..14].copy_from_slice(if version == 6 {
                &[0x86, 0xdd]
            } else {
                &[0x08, 0x00]
            });
            let mut vnet = VnetHdr::from_bytes(&hdr);
            if vnet.needs_csum() {
                vnet.csum_start += FAKE_ETH as u16;
            }
            if vnet.hdr_len > 0 {
                vnet.hdr_len += FAKE_ETH as u16;
            }
            p.buf.set_len(FAKE_ETH + ip_len);
            p.buf.vnet = vnet;
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += ip_len as u64;
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, pkts: &mut [Packet]) -> usize {
        let mut sent = 0;
        for p in pkts.iter_mut() {
            let frame = p.buf.frame();
            if frame.len() <= FAKE_ETH {
                p.drop = Some(DropReason::Truncated);
                self.counters.drop(DropReason::Truncated);
                continue;
            }
            let mut vnet = p.buf.vnet;
            vnet.csum_start = vnet.csum_start.saturating_sub(FAKE_ETH as u16);
            vnet.hdr_len = vnet.hdr_len.saturating_sub(FAKE_ETH as u16);
            let hdr = vnet.to_bytes();
            let ip = &frame[FAKE_ETH..];
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr().cast_mut().cast(),
                    iov_len: VnetHdr::LEN,
                },
                libc::iovec {
                    iov_base: ip.as_ptr().cast_mut().cast(),
                    iov_len: ip.len(),
                },
            ];
            // SAFETY: both iovecs point at live buffers; writev only reads them. A TUN
            // write never blocks on a full queue: the kernel takes or refuses the packet.
            let rc = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if rc < 0 {
                p.drop = Some(DropReason::TxError);
                self.counters.drop(DropReason::TxError);
            } else {
                sent += 1;
                self.counters.tx_packets += 1;
                self.counters.tx_bytes += ip.len() as u64;
            }
        }
        sent
    }

    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}
