//! Reachability probes that need no external tool: a UDP probe (answered by the
//! target kernel's ICMP port-unreachable) and an ICMP echo ("ping") over a raw socket.

use crate::netns;
use anyhow::{bail, Context};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// A port nothing listens on, so the target answers with ICMP port unreachable.
const PROBE_PORT: u16 = 9;

/// Proves two-way reachability from namespace `ns` to `target` (and resolves ARP on
/// the way): sends UDP datagrams to a closed port until the ICMP port-unreachable
/// comes back, within `limit`.
pub fn udp_reachable(ns: &str, target: Ipv4Addr, limit: Duration) -> anyhow::Result<()> {
    netns::in_netns(ns, move || {
        let sock = UdpSocket::bind("0.0.0.0:0")?;
        sock.connect(SocketAddrV4::new(target, PROBE_PORT))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 16];
        while Instant::now() < deadline {
            // A send error here is the refusal of a previous probe; keep going to recv.
            let _ = sock.send(b"nfx-probe");
            match sock.recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(()),
                Ok(_) => return Ok(()),
                Err(_) => continue,
            }
        }
        bail!("{target} not reachable within {limit:?}")
    })
    .with_context(|| format!("probing {target} from {ns}"))
}

/// Result of [`icmp_echo`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EchoResult {
    /// Echo requests sent.
    pub sent: u32,
    /// Matching echo replies received.
    pub received: u32,
    /// Round-trip time of the first reply, microseconds.
    pub first_rtt_us: Option<f64>,
}

/// Builds an ICMP echo request with identifier `id`, sequence `seq` and `payload`.
pub fn echo_request(id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![8, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(payload);
    let c = nfx_packet::checksum::checksum(&p);
    p[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// If `pkt` (an IPv4 packet as a raw socket returns it) is an echo reply with `id`,
/// returns its sequence number.
pub fn parse_echo_reply(pkt: &[u8], id: u16) -> Option<u16> {
    let ihl = usize::from(*pkt.first()? & 0x0f) * 4;
    let icmp = pkt.get(ihl..)?;
    if icmp.len() < 8 || icmp[0] != 0 || u16::from_be_bytes([icmp[4], icmp[5]]) != id {
        return None;
    }
    Some(u16::from_be_bytes([icmp[6], icmp[7]]))
}

/// Sends `count` ICMP echo requests from namespace `ns` to `target`, `interval` apart,
/// and counts replies (waiting at most `interval` + 1 s after the last).
pub fn icmp_echo(
    ns: &str,
    target: Ipv4Addr,
    count: u16,
    interval: Duration,
) -> anyhow::Result<EchoResult> {
    netns::in_netns(ns, move || echo_here(target, count, interval))
        .with_context(|| format!("ICMP echo {target} from {ns}"))
}

fn echo_here(target: Ipv4Addr, count: u16, interval: Duration) -> anyhow::Result<EchoResult> {
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    if fd < 0 {
        bail!("raw ICMP socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh valid descriptor that nothing else owns.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let id = (std::process::id() as u16) ^ 0x6e66;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(target).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut res = EchoResult {
        sent: 0,
        received: 0,
        first_rtt_us: None,
    };
    let mut sent_at = Vec::with_capacity(usize::from(count));
    let mut buf = [0u8; 1500];
    for seq in 0..count {
        let req = echo_request(id, seq, b"nfx-echo-payload");
        // SAFETY: req and addr outlive the call; lengths are theirs.
        let n = unsafe {
            libc::sendto(
                fd,
                req.as_ptr().cast(),
                req.len(),
                0,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n >= 0 {
            res.sent += 1;
        }
        sent_at.push(Instant::now());
        let wait = if seq + 1 == count {
            interval + Duration::from_secs(1)
        } else {
            interval
        };
        let until = Instant::now() + wait;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
                break;
            }
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                continue;
            }
            if let Some(s) = parse_echo_reply(&buf[..n as usize], id) {
                if let Some(t) = sent_at.get(usize::from(s)) {
                    res.received += 1;
                    if res.first_rtt_us.is_none() {
                        res.first_rtt_us = Some(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                if res.received == u32::from(count) {
                    return Ok(res);
                }
            }
        }
    }
    Ok(res)
}

/// How a TCP request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOutcome {
    /// Connected; the server's reply (until it closed).
    Reply(String),
    /// The peer refused (RST): the packets got through but nothing listens.
    Refused,
    /// No answer within the limit: the SYN (or its reply) was dropped on the way.
    TimedOut,
}

/// Connects from namespace `ns` to `addr:port` within `limit`, sends `msg` and reads
/// the reply until the server closes (also within `limit`).
pub fn tcp_request(
    ns: &str,
    addr: Ipv4Addr,
    port: u16,
    msg: &[u8],
    limit: Duration,
) -> anyhow::Result<TcpOutcome> {
    use std::io::{ErrorKind, Read, Write};
    let msg = msg.to_vec();
    netns::in_netns(ns, move || {
        let sa = std::net::SocketAddr::V4(SocketAddrV4::new(addr, port));
        let mut s = match std::net::TcpStream::connect_timeout(&sa, limit) {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Ok(TcpOutcome::Refused),
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                return Ok(TcpOutcome::TimedOut)
            }
            Err(e) => return Err(e.into()),
        };
        s.set_read_timeout(Some(limit))?;
        s.write_all(&msg)?;
        s.shutdown(std::net::Shutdown::Write)?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        Ok(TcpOutcome::Reply(reply))
    })
    .with_context(|| format!("TCP request to {addr}:{port} from {ns}"))
}

/// A TCP server inside a namespace that answers every connection with the address it
/// sees the client coming from (to prove NAT), after reading the client's message.
pub struct PeerEcho {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl PeerEcho {
    /// Listens on `0.0.0.0:port` inside `ns`; returns once listening.
    pub fn start(ns: &str, port: u16) -> anyhow::Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (ns2, st) = (ns.to_string(), stop.clone());
        let handle = std::thread::spawn(move || {
            let l = match netns::enter(&ns2)
                .and_then(|_| Ok(std::net::TcpListener::bind(("0.0.0.0", port))?))
                .and_then(|l| {
                    l.set_nonblocking(true)?;
                    Ok(l)
                }) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(format!("{e:#}")));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, peer)) => serve_peer(s, peer),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(5))
            .context("peer-echo server did not start")?
            .map_err(|e| anyhow::anyhow!("peer-echo server in {ns}: {e}"))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

fn serve_peer(mut s: std::net::TcpStream, peer: std::net::SocketAddr) {
    use std::io::{Read, Write};
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4096];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    let _ = s.write_all(peer.ip().to_string().as_bytes());
}

impl Drop for PeerEcho {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_has_valid_checksum() {
        let p = echo_request(0x1234, 7, b"abc");
        assert_eq!(nfx_packet::checksum::sum16(&p, 0), 0xffff);
        assert_eq!(&p[4..8], &[0x12, 0x34, 0, 7]);
    }

    #[test]
    fn echo_reply_is_recognised_only_with_our_id() {
        let mut ip = vec![0x45u8; 1];
        ip.extend_from_slice(&[0; 19]);
        let mut reply = echo_request(0x1234, 3, b"x");
        reply[0] = 0;
        ip.extend_from_slice(&reply);
        assert_eq!(parse_echo_reply(&ip, 0x1234), Some(3));
        assert_eq!(parse_echo_reply(&ip, 0x9999), None);
        assert_eq!(parse_echo_reply(&ip[..22], 0x1234), None);
        assert_eq!(parse_echo_reply(&[], 1), None);
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn loopback_echo_and_probe() {
        let ns = "nfxut-probe-ns";
        let _ = crate::process::run(&["ip", "netns", "del", ns], Duration::from_secs(5));
        crate::process::run(&["ip", "netns", "add", ns], Duration::from_secs(5)).unwrap();
        let r = (|| -> anyhow::Result<EchoResult> {
            netns::ip(ns, &["link", "set", "lo", "up"])?;
            udp_reachable(ns, Ipv4Addr::LOCALHOST, Duration::from_secs(2))?;
            let _echo = PeerEcho::start(ns, 7001)?;
            let got = tcp_request(ns, Ipv4Addr::LOCALHOST, 7001, b"hi", Duration::from_secs(2))?;
            assert_eq!(got, TcpOutcome::Reply("127.0.0.1".into()));
            let refused =
                tcp_request(ns, Ipv4Addr::LOCALHOST, 7002, b"hi", Duration::from_secs(2))?;
            assert_eq!(refused, TcpOutcome::Refused);
            icmp_echo(ns, Ipv4Addr::LOCALHOST, 2, Duration::from_millis(50))
        })();
        crate::process::run(&["ip", "netns", "del", ns], Duration::from_secs(5)).unwrap();
        let r = r.unwrap();
        assert_eq!((r.sent, r.received), (2, 2));
    }
}
