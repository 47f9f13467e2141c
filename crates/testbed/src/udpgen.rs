//! A batched UDP packet generator (sendmmsg, one thread inside the source namespace),
//! a sink (recvmmsg inside the destination namespace) that counts and inspects what
//! arrives, and a counting sink that reads the destination kernel's counters instead.
//!
//! iperf3's UDP sender tops out near 0.4 Mpps of 64-byte packets here; this one sends
//! batches of up to 256 datagrams per system call so it can saturate the device under test.

use crate::netns;
use anyhow::{bail, Context};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// UDP payload that makes a 64-byte Ethernet frame (14 + 20 + 8 + 18 + 4 FCS).
pub const UDP64_PAYLOAD: usize = 18;
/// Largest batch handed to one sendmmsg/recvmmsg call.
pub const MAX_BATCH: usize = 256;

/// What to send.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Namespace the generator thread enters.
    pub ns: String,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Destination UDP port.
    pub port: u16,
    /// Payload bytes (the first bytes of `pattern`, zero-padded).
    pub payload: usize,
    /// Leading payload bytes (e.g. a DPI test string); the rest is zero.
    pub pattern: Vec<u8>,
    /// Number of flows (one socket, i.e. one source port, each).
    pub flows: u16,
    /// How long to send.
    pub duration: Duration,
    /// Datagrams per sendmmsg call (1..=256).
    pub batch: usize,
    /// Packets per second to pace to; `None` sends as fast as possible.
    pub pps: Option<u64>,
}

impl GenSpec {
    /// A full-speed 64-byte-frame flood of `duration` from `ns` to `dst:port`.
    pub fn flood(ns: &str, dst: Ipv4Addr, port: u16, duration: Duration) -> Self {
        Self {
            ns: ns.to_string(),
            dst,
            port,
            payload: UDP64_PAYLOAD,
            pattern: Vec::new(),
            flows: 4,
            duration,
            batch: 64,
            pps: None,
        }
    }
}

/// What the generator did.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenReport {
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Send calls that failed (ENOBUFS, EAGAIN, unreachable).
    pub errors: u64,
    /// Seconds spent sending.
    pub secs: f64,
    /// CPU seconds of the sending thread (user + system, which on veth includes the
    /// receiving side's softirq work that the kernel runs inside the sends).
    pub cpu_s: f64,
}

impl GenReport {
    /// Offered load in million packets per second.
    pub fn mpps(&self) -> f64 {
        self.sent as f64 / self.secs.max(1e-9) / 1e6
    }

    /// The sending thread's CPU microseconds per accepted frame; `None` when nothing was
    /// sent or no CPU time was taken.
    pub fn cpu_us_per_frame(&self) -> Option<f64> {
        (self.sent > 0 && self.cpu_s > 0.0).then(|| self.cpu_s * 1e6 / self.sent as f64)
    }
}

/// CPU seconds (user + system) the calling thread has used so far.
pub fn thread_cpu_s() -> f64 {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: passes a live rusage; RUSAGE_THREAD cannot fail for the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs the generator on a new thread inside `spec.ns` and waits for it to finish.
pub fn generate(spec: GenSpec) -> anyhow::Result<GenReport> {
    if spec.batch == 0 || spec.batch > MAX_BATCH || spec.flows == 0 {
        bail!("generator batch must be 1..={MAX_BATCH} and flows ≥ 1");
    }
    if spec.duration > Duration::from_secs(3600) {
        bail!("generator duration {:?} is over one hour", spec.duration);
    }
    let ns = spec.ns.clone();
    netns::in_netns(&ns, move || send_here(&spec)).context("UDP generator")
}

fn send_here(spec: &GenSpec) -> anyhow::Result<GenReport> {
    let mut socks = Vec::new();
    for _ in 0..spec.flows {
        let s = UdpSocket::bind("0.0.0.0:0")?;
        s.connect(SocketAddrV4::new(spec.dst, spec.port))?;
        s.set_nonblocking(true)?;
        socks.push(s);
    }
    let mut payload = vec![0u8; spec.payload];
    let n = spec.pattern.len().min(payload.len());
    payload[..n].copy_from_slice(&spec.pattern[..n]);
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: an all-zero mmsghdr is valid (null name/control).
    let mut msgs: Vec<libc::mmsghdr> = (0..spec.batch)
        .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
        .collect();
    for m in &mut msgs {
        m.msg_hdr.msg_iov = &mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut rep = GenReport::default();
    let cpu0 = thread_cpu_s();
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut i = 0usize;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let mut want = spec.batch;
        if let Some(pps) = spec.pps {
            let due = (now - start).as_secs_f64() * pps as f64;
            let ahead = rep.sent as f64 - due;
            if ahead >= 0.0 {
                let wait = Duration::from_secs_f64((ahead + 1.0) / pps as f64);
                std::thread::sleep(wait.min(deadline - now));
                continue;
            }
            want = want.min((-ahead).ceil() as usize).max(1);
        }
        let fd = socks[i % socks.len()].as_raw_fd();
        i += 1;
        // SAFETY: msgs has `want` initialised headers pointing at live iov/payload.
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), want as u32, 0) };
        if r < 0 {
            rep.errors += 1;
            // Back-pressure (ENOBUFS/EAGAIN) or a transient ICMP error: yield and retry.
            std::thread::yield_now();
        } else {
            rep.sent += r as u64;
        }
    }
    rep.secs = start.elapsed().as_secs_f64();
    rep.cpu_s = thread_cpu_s() - cpu0;
    Ok(rep)
}

/// Distinct source addresses a [`Sink`] records; further ones are not kept.
pub const MAX_SOURCES: usize = 8;

/// Counts of a [`Sink`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Datagrams received.
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams whose payload started with the pattern the sink was asked to look for.
    pub matched: u64,
    /// The distinct source addresses datagrams came from, in order of first arrival (at
    /// most [`MAX_SOURCES`]): what a NAT on the path rewrote the sender's address to.
    pub sources: Vec<Ipv4Addr>,
}

/// A UDP receiver running on its own thread inside a namespace.
pub struct Sink {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    handle: Option<JoinHandle<anyhow::Result<SinkReport>>>,
}

impl Sink {
    /// Binds `0.0.0.0:port` inside `ns` and starts counting; returns once bound, so
    /// traffic may start immediately. Datagrams starting with `pattern` (if non-empty)
    /// are counted separately in [`SinkReport::matched`].
    pub fn start(ns: &str, port: u16, pattern: &[u8]) -> anyhow::Result<Sink> {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let (ns2, st, pk, pat) = (
            ns.to_string(),
            stop.clone(),
            packets.clone(),
            pattern.to_vec(),
        );
        let handle = std::thread::spawn(move || -> anyhow::Result<SinkReport> {
            let bound = (|| -> anyhow::Result<UdpSocket> {
                netns::enter(&ns2)?;
                let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
                    .with_context(|| format!("binding UDP port {port} in {ns2}"))?;
                set_rcvbuf(&s, 16 << 20);
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            })();
            let sock = match bound {
                Ok(s) => {
                    let _ = tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    let _ = tx.send(Err(e));
                    bail!(msg);
                }
            };
            recv_loop(&sock, &st, &pk, &pat)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .context("UDP sink did not start")??;
        Ok(Sink {
            stop,
            packets,
            handle: Some(handle),
        })
    }

    /// Datagrams received so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Stops the sink and returns its totals.
    pub fn finish(mut self) -> anyhow::Result<SinkReport> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .context("sink already finished")?
            .join()
            .map_err(|_| anyhow::anyhow!("UDP sink thread panicked"))?
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Gives `s` a receive buffer of `bytes` beyond `net.core.rmem_max` (root), so that a
/// receiver descheduled on a busy machine does not drop what arrived.
pub fn set_rcvbuf(s: &UdpSocket, bytes: libc::c_int) {
    // SAFETY: setsockopt with a c_int option value; failure only means a smaller buffer.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn recv_loop(
    sock: &UdpSocket,
    stop: &AtomicBool,
    packets: &AtomicU64,
    pattern: &[u8],
) -> anyhow::Result<SinkReport> {
    const SLOT: usize = 2048;
    let mut bufs = vec![0u8; SLOT * MAX_BATCH];
    let mut iovs: Vec<libc::iovec> = bufs
        .chunks_mut(SLOT)
        .map(|c| libc::iovec {
            iov_base: c.as_mut_ptr().cast(),
            iov_len: SLOT,
        })
        .collect();
    // SAFETY: all-zero mmsghdr and sockaddr_in are valid.
    let mut msgs: Vec<libc::mmsghdr> = (0..MAX_BATCH)
        .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
        .collect();
    let mut names: Vec<libc::sockaddr_in> = (0..MAX_BATCH)
        .map(|_| unsafe { std::mem::zeroed::<libc::sockaddr_in>() })
        .collect();
    for ((m, iov), name) in msgs.iter_mut().zip(iovs.iter_mut()).zip(names.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_name = (name as *mut libc::sockaddr_in).cast();
    }
    let mut rep = SinkReport::default();
    while !stop.load(Ordering::Relaxed) {
        for m in msgs.iter_mut() {
            // The kernel shortens it to the address it wrote; every call offers the whole.
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        // SAFETY: msgs/iovs/bufs are live and sized MAX_BATCH; SO_RCVTIMEO bounds the wait.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                MAX_BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            continue;
        }
        for (k, m) in msgs.iter().take(n as usize).enumerate() {
            let len = m.msg_len as usize;
            rep.bytes += len as u64;
            if !pattern.is_empty() && bufs[k * SLOT..k * SLOT + len].starts_with(pattern) {
                rep.matched += 1;
            }
            let from = Ipv4Addr::from(u32::from_be(names[k].sin_addr.s_addr));
            if rep.sources.len() < MAX_SOURCES && !rep.sources.contains(&from) {
                rep.sources.push(from);
            }
        }
        rep.packets += n as u64;
        packets.store(rep.packets, Ordering::Relaxed);
    }
    Ok(rep)
}

/// The kernel counter a [`CountingSink`] counts the flood with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// `Udp: NoPorts`: datagrams for a local UDP port nothing listens on (the flood's
    /// destination host).
    UdpNoPorts,
    /// `Ip: InAddrErrors`: datagrams for another host that a router with forwarding
    /// turned off refuses (the device under test's next hop, forwarding off).
    IpInAddrErrors,
}

impl Counted {
    /// (`/proc/net/snmp` section, column).
    fn snmp_field(self) -> (&'static str, &'static str) {
        match self {
            Counted::UdpNoPorts => ("Udp", "NoPorts"),
            Counted::IpInAddrErrors => ("Ip", "InAddrErrors"),
        }
    }
}

/// Counters of one namespace that a [`CountingSink`] reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsCounters {
    /// Frames received by the interface (`rx_packets` of `/proc/net/dev`).
    pub iface_rx: u64,
    /// The [`Counted`] counter of `/proc/net/snmp`.
    pub counted: u64,
}

/// Parses `rx_packets` of `iface` from `/proc/net/dev` text.
pub fn parse_net_dev_rx(text: &str, iface: &str) -> anyhow::Result<u64> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim() == iface)
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .with_context(|| format!("no interface {iface} in /proc/net/dev"))?
        .parse()
        .context("bad rx_packets in /proc/net/dev")
}

/// Parses column `field` of section `section` (`Udp`, `Ip`, ...) from `/proc/net/snmp`
/// text (per section a header line, then a value line).
pub fn parse_snmp(text: &str, section: &str, field: &str) -> anyhow::Result<u64> {
    let prefix = format!("{section}: ");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = lines
        .next()
        .zip(lines.next())
        .with_context(|| format!("no {section} lines in /proc/net/snmp"))?;
    let i = names
        .split_whitespace()
        .position(|n| n == field)
        .with_context(|| format!("no {section} {field} column in /proc/net/snmp"))?;
    values
        .split_whitespace()
        .nth(i)
        .with_context(|| format!("short {section} line in /proc/net/snmp"))?
        .parse()
        .with_context(|| format!("bad {section} {field} in /proc/net/snmp"))
}

/// Reads the counters of `iface` inside `ns` (from a thread in that namespace, whose
/// `/proc/thread-self/net` shows the namespace's own counters).
pub fn ns_counters(ns: &str, iface: &str, what: Counted) -> anyhow::Result<NsCounters> {
    let iface = iface.to_string();
    netns::in_netns(ns, move || {
        let dev = std::fs::read_to_string("/proc/thread-self/net/dev")?;
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        let (section, field) = what.snmp_field();
        Ok(NsCounters {
            iface_rx: parse_net_dev_rx(&dev, &iface)?,
            counted: parse_snmp(&snmp, section, field)?,
        })
    })
}

/// A receiver with no process on the hot path: the kernel of the receiving namespace
/// drops each datagram early and its own counters say how many arrived. Either the
/// destination host with the flood's port unbound ([`Counted::UdpNoPorts`]: dropped
/// after the socket lookup) or a router with forwarding off ([`Counted::IpInAddrErrors`]:
/// dropped after the route lookup); ICMP errors either sends are rate-limited by the
/// kernel. The counter rises only for such datagrams, i.e. the generator's; the
/// interface's `rx_packets` is the cross-check.
pub struct CountingSink {
    ns: String,
    iface: String,
    what: Counted,
    base: NsCounters,
}

/// What a [`CountingSink`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountReport {
    /// Datagrams that reached the destination's UDP layer for an unbound port.
    pub packets: u64,
    /// Frames the interface received in the same interval (≥ `packets`).
    pub iface_rx: u64,
}

impl CountReport {
    /// Frames received that were not the flood (ARP, other traffic).
    pub fn other(&self) -> u64 {
        self.iface_rx.saturating_sub(self.packets)
    }
}

impl CountingSink {
    /// Takes the baseline of `Udp: NoPorts` at the destination host; fails if something
    /// listens on UDP `port` in `ns` (its datagrams would be socket work, not `NoPorts`).
    pub fn start(ns: &str, iface: &str, port: u16) -> anyhow::Result<Self> {
        if netns::listening(ns, port, true)? {
            bail!("UDP port {port} is bound in {ns}: a counting sink needs it unbound");
        }
        Self::with(ns, iface, Counted::UdpNoPorts)
    }

    /// Takes the baseline of `Ip: InAddrErrors` at a router; fails unless the router's
    /// IPv4 forwarding is off (its datagrams would be forwarded, not counted).
    pub fn at_router(ns: &str, iface: &str) -> anyhow::Result<Self> {
        if netns::sysctl_get(ns, "net/ipv4/ip_forward")? != "0" {
            bail!("{ns} forwards IPv4: a counting sink at a router needs forwarding off");
        }
        Self::with(ns, iface, Counted::IpInAddrErrors)
    }

    fn with(ns: &str, iface: &str, what: Counted) -> anyhow::Result<Self> {
        Ok(Self {
            ns: ns.to_string(),
            iface: iface.to_string(),
            what,
            base: ns_counters(ns, iface, what)?,
        })
    }

    /// Counts since the baseline.
    pub fn read(&self) -> anyhow::Result<CountReport> {
        let now = ns_counters(&self.ns, &self.iface, self.what)?;
        Ok(CountReport {
            packets: now.counted.saturating_sub(self.base.counted),
            iface_rx: now.iface_rx.saturating_sub(self.base.iface_rx),
        })
    }

    /// Waits until the count stops rising (queued datagrams delivered, at most 1 s)
    /// and returns the totals.
    pub fn finish(self) -> anyhow::Result<CountReport> {
        let until = Instant::now() + Duration::from_secs(1);
        let mut last = self.read()?;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.read()?;
            if now == last {
                break;
            }
            last = now;
        }
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_cpu_per_frame() {
        let r = GenReport {
            sent: 500_000,
            errors: 0,
            secs: 1.0,
            cpu_s: 1.25,
        };
        assert!((r.cpu_us_per_frame().unwrap() - 2.5).abs() < 1e-9);
        assert_eq!(GenReport { sent: 0, ..r }.cpu_us_per_frame(), None);
        assert_eq!(GenReport { cpu_s: 0.0, ..r }.cpu_us_per_frame(), None);
        let t0 = thread_cpu_s();
        let mut x = 0u64;
        while thread_cpu_s() - t0 < 0.02 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_s() >= t0 + 0.02);
    }

    #[test]
    fn bad_specs_are_rejected() {
        let mut s = GenSpec::flood("x", Ipv4Addr::LOCALHOST, 9, Duration::from_millis(1));
        s.batch = 0;
        assert!(generate(s.clone()).is_err());
        s.batch = 300;
        assert!(generate(s.clone()).is_err());
        s.batch = 8;
        s.flows = 0;
        assert!(generate(s).is_err());
    }

    #[test]
    fn kernel_counters_parse() {
        let dev = "Inter-|   Receive\n face |bytes    packets errs\n    lo: 100 2 0 0\n veth0: 5000 77 0 0 0\n";
        assert_eq!(parse_net_dev_rx(dev, "veth0").unwrap(), 77);
        assert_eq!(parse_net_dev_rx(dev, "lo").unwrap(), 2);
        assert!(parse_net_dev_rx(dev, "eth9").is_err());
        let snmp = "Tcp: A B\nTcp: 1 2\nUdp: InDatagrams NoPorts InErrors\nUdp: 5 42 0\nUdpLite: InDatagrams NoPorts\nUdpLite: 0 0\n";
        assert_eq!(parse_snmp(snmp, "Udp", "NoPorts").unwrap(), 42);
        assert_eq!(parse_snmp(snmp, "Tcp", "B").unwrap(), 2);
        let ip =
            "Ip: Forwarding InReceives InAddrErrors\nIp: 2 100 7\nIpExt: InAddrErrors\nIpExt: 9\n";
        assert_eq!(parse_snmp(ip, "Ip", "InAddrErrors").unwrap(), 7);
        assert!(parse_snmp("Udp: InDatagrams\nUdp: 5\n", "Udp", "NoPorts").is_err());
        assert!(parse_snmp("Udp: InDatagrams NoPorts\nUdp: 5\n", "Udp", "NoPorts").is_err());
        assert!(parse_snmp("Tcp: A\n", "Udp", "NoPorts").is_err());
        assert_eq!(
            CountReport {
                packets: 10,
                iface_rx: 13
            }
            .other(),
            3
        );
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn loopback_flood_and_paced_stream_arrive() {
        let ns = "nfxut-udpgen-ns";
        struct Del(&'static str);
        impl Drop for Del {
            fn drop(&mut self) {
                let _ =
                    crate::process::run(&["ip", "netns", "del", self.0], Duration::from_secs(5));
            }
        }
        let _ = crate::process::run(&["ip", "netns", "del", ns], Duration::from_secs(5));
        crate::process::run(&["ip", "netns", "add", ns], Duration::from_secs(5)).unwrap();
        let _del = Del(ns);
        netns::ip(ns, &["link", "set", "lo", "up"]).unwrap();

        let sink = Sink::start(ns, 5999, b"MARK").unwrap();
        let mut spec = GenSpec::flood(ns, Ipv4Addr::LOCALHOST, 5999, Duration::from_millis(300));
        spec.pattern = b"MARK".to_vec();
        let g = generate(spec.clone()).unwrap();
        assert!(g.sent > 1000, "{g:?}");
        let deadline = Instant::now() + Duration::from_secs(2);
        while sink.packets() < g.sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = sink.finish().unwrap();
        assert!(r.packets > 0 && r.packets <= g.sent, "{r:?} {g:?}");
        assert_eq!(r.matched, r.packets);
        assert_eq!(r.bytes, r.packets * UDP64_PAYLOAD as u64);
        assert_eq!(r.sources, [Ipv4Addr::LOCALHOST], "{r:?}");

        spec.pps = Some(1000);
        spec.duration = Duration::from_millis(200);
        let g = generate(spec).unwrap();
        assert!((1..=260).contains(&g.sent), "paced sent {}", g.sent);
    }
}
