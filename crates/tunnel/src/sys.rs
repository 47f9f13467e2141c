//! Thin OS wrappers the endpoint needs: the TUN device, batched UDP I/O
//! (recvmmsg/sendmmsg), entering a network namespace and per-thread CPU time.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Command;

use nfx_io::tun::{open_queue, set_offload};

use crate::config::TunConfig;

/// `TUN_F_CSUM`: the kernel may hand us packets with a partial checksum.
pub const TUN_F_CSUM: u32 = 0x01;
/// `TUN_F_TSO4`: TCP/IPv4 super-packets.
pub const TUN_F_TSO4: u32 = 0x02;
/// `TUN_F_TSO6`: TCP/IPv6 super-packets.
pub const TUN_F_TSO6: u32 = 0x04;
/// `TUN_F_USO4`: UDP/IPv4 super-packets (Linux 6.2+).
pub const TUN_F_USO4: u32 = 0x20;
/// `TUN_F_USO6`: UDP/IPv6 super-packets (Linux 6.2+).
pub const TUN_F_USO6: u32 = 0x40;

/// An open TUN device (IFF_TUN | IFF_NO_PI, non-blocking; with `IFF_VNET_HDR` every
/// read and write carries a `virtio_net_hdr` first).
pub struct Tun {
    fd: OwnedFd,
    /// Interface name the kernel assigned.
    pub name: String,
    /// Whether packets carry a virtio_net_hdr.
    pub vnet: bool,
    /// The `TUN_F_*` offloads the kernel accepted (0: none, per-packet reads).
    pub offloads: u32,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        anyhow::bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Tun {
    /// Creates the TUN `cfg` names in the calling thread's namespace with `queues`
    /// queues (`IFF_MULTI_QUEUE` when more than one: the kernel spreads flows over
    /// them by hash, each flow staying on one queue), sets MTU, queue length and
    /// address, up. With `vnet`, asks for a virtio_net_hdr and the checksum/TSO/USO
    /// offloads (USO only if the kernel takes it; none if it refuses them all: see
    /// `offloads`).
    pub fn open(cfg: &TunConfig, mtu: u32, vnet: bool, queues: usize) -> anyhow::Result<Vec<Tun>> {
        let name = cfg.name.as_str();
        let multi = queues > 1;
        let tso = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        let wants: &[u32] = if vnet {
            &[tso | TUN_F_USO4 | TUN_F_USO6, tso]
        } else {
            &[]
        };
        let mut out = Vec::with_capacity(queues.max(1));
        for q in 0..queues.max(1) {
            let fd = open_queue(name, vnet, multi)
                .map_err(|e| anyhow::anyhow!("TUN {name} queue {q}: {e}"))?;
            let offloads = set_offload(&fd, wants);
            out.push(Tun {
                fd,
                name: name.to_string(),
                vnet,
                offloads,
            });
        }
        let (mtu, qlen) = (mtu.to_string(), cfg.queue_len.to_string());
        ip(&[
            "link",
            "set",
            "dev",
            name,
            "mtu",
            &mtu,
            "txqueuelen",
            &qlen,
            "up",
        ])?;
        ip(&["addr", "add", cfg.address.as_str(), "dev", name])?;
        Ok(out)
    }

    /// Reads one packet into `buf`; `Ok(None)` when nothing is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: read into a valid, writable slice.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        nonblocking(n)
    }

    /// Reads one packet scattered over `parts` in order; `Ok(None)` when nothing is
    /// waiting.
    pub fn recv_vectored(&self, parts: &mut [IoSliceMut<'_>]) -> io::Result<Option<usize>> {
        let cnt = libc::c_int::try_from(parts.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` and every slice is valid
        // for writes for the duration of the call.
        let n = unsafe { libc::readv(self.fd.as_raw_fd(), parts.as_ptr().cast(), cnt) };
        nonblocking(n)
    }

    /// Writes one packet.
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
        // SAFETY: write from a valid slice.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes one packet gathered from `parts` (a coalesced frame is its header and
    /// the payloads of the segments it joins, written without copying them together).
    pub fn send_vectored(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
        let cnt = libc::c_int::try_from(parts.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` and every slice is valid for
        // reads for the duration of the call.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), parts.as_ptr().cast(), cnt) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The file descriptor (for poll).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The result of a non-blocking read returning `n`: `Ok(None)` for "nothing waiting".
fn nonblocking(n: isize) -> io::Result<Option<usize>> {
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(e)
    }
}

fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above for sockaddr_in6.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin.sin6_port = v6.port().to_be();
            sin.sin6_addr.s6_addr = v6.ip().octets();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The UDP underlay socket (blocking sends, non-blocking batched receives).
pub struct Underlay {
    pub(crate) sock: UdpSocket,
    pub(crate) peer: (libc::sockaddr_storage, libc::socklen_t),
}

/// Sets a socket buffer size with `force` (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, which
/// root may use beyond `net.core.rmem_max`/`wmem_max`, 208 KiB by default: a few
/// milliseconds of a busy tunnel), else with `opt` up to that limit.
fn set_buf(fd: RawFd, force: libc::c_int, opt: libc::c_int, bytes: libc::c_int) {
    let set = |o: libc::c_int| {
        // SAFETY: setsockopt with an int option; failure only leaves the size as it was.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                o,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    };
    if !set(force) {
        set(opt);
    }
}

impl Underlay {
    /// Binds `local` and remembers `peer` as the destination.
    pub fn bind(local: SocketAddr, peer: SocketAddr) -> anyhow::Result<Underlay> {
        let sock = UdpSocket::bind(local).map_err(|e| anyhow::anyhow!("bind UDP {local}: {e}"))?;
        let fd = sock.as_raw_fd();
        set_buf(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, 4 << 20);
        set_buf(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, 4 << 20);
        Ok(Underlay {
            sock,
            peer: sockaddr(&peer),
        })
    }

    /// The file descriptor (for poll).
    pub fn raw(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Another handle on the same socket (for a lane that only sends).
    pub fn try_clone(&self) -> io::Result<Underlay> {
        Ok(Underlay {
            sock: self.sock.try_clone()?,
            peer: self.peer,
        })
    }
}

/// Moves the calling thread into network namespace `name` (`/var/run/netns/NAME`).
pub fn enter_netns(name: &str) -> anyhow::Result<()> {
    let path = format!("/var/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|e| anyhow::anyhow!("open {path}: {e}"))?;
    // SAFETY: setns on an open namespace fd.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })
        .map_err(|e| anyhow::anyhow!("setns {path}: {e}"))?;
    Ok(())
}

/// Sets the calling thread's timer slack (how late the kernel may wake its sleeps).
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes the value as the second argument.
    cvt(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) }).map(|_| ())
}

/// The calling thread's kernel id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// CPU seconds (user + system) the kernel has charged to thread `tid` of this process.
pub fn thread_cpu_s(tid: i32) -> io::Result<f64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    parse_stat_cpu(&text)
        .map(|ticks| ticks as f64 / clock_ticks())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad /proc stat line"))
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime (clock ticks) from a `/proc/.../stat` line.
pub fn parse_stat_cpu(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime field 14, stime field 15.
    let ut: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    Some(ut + st)
}

/// Waits until one of `fds` is readable or `timeout_ms` passes; returns readability.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: valid pollfd array.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(p.iter()
        .map(|x| x.revents & (libc::POLLIN | libc::POLLERR) != 0)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing() {
        let line = "123 (my (odd) prog) R 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu(line), Some(300));
        assert_eq!(parse_stat_cpu("garbage"), None);
    }

    #[test]
    fn timer_slack_is_accepted() {
        set_timer_slack_ns(1000).unwrap();
    }

    #[test]
    fn own_thread_cpu_is_readable() {
        assert!(thread_cpu_s(gettid()).unwrap() >= 0.0);
    }

    #[test]
    fn udp_batch_loopback() {
        let a = Underlay::bind(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
        )
        .unwrap();
        let b_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b =
            Underlay::bind("127.0.0.1:0".parse().unwrap(), a.sock.local_addr().unwrap()).unwrap();
        drop(b_sock);
        let (n, e) = b.send_batch(&[b"one", b"two", b"three"]);
        assert_eq!((n, e.is_none()), (3, true));
        let mut store = vec![[0u8; 64]; 4];
        let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|s| &mut s[..]).collect();
        let mut got = Vec::new();
        poll_readable(&[a.raw()], 1000).unwrap();
        a.recv_batch(&mut bufs, &mut got).unwrap();
        let lens: Vec<usize> = got.iter().map(|&(len, _)| len).collect();
        assert_eq!(lens, vec![3, 3, 5]);
        assert_eq!(&store[2][..5], b"three");
    }
}
