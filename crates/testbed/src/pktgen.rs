//! A 64-byte-frame generator on a raw AF_PACKET socket: pre-built Ethernet/IPv4/UDP frames
//! (valid checksums, one source port per flow) go straight to the driver of one interface
//! (PACKET_QDISC_BYPASS), skipping the sender's UDP/IP stack, routing and ARP.
//!
//! Two transmit methods, both batched: `sendmmsg` (one system call per batch, each
//! frame copied into an skb) and a `PACKET_TX_RING` (TPACKET_V2; frames are written into
//! the shared ring once, and each batch costs one status store per frame plus one
//! `send()` per flush). The sendmmsg UDP-socket generator stays in [`crate::udpgen`].

use crate::netns;
use crate::udpgen::{GenReport, UDP64_PAYLOAD};
use anyhow::{bail, Context};
use nfx_packet::checksum::{checksum, pseudo_header_sum, sum16};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Largest batch handed to one sendmmsg call or one ring flush.
pub const MAX_BATCH: usize = 256;
/// Frames in the transmit ring (a power of two, a multiple of every allowed batch).
const RING_FRAMES: usize = 1024;
/// Ethernet + IPv4 + UDP header bytes.
const HEADERS: usize = 14 + 20 + 8;

/// How frames are handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxMethod {
    /// `sendmmsg` of up to [`MAX_BATCH`] frames per call.
    Mmsg,
    /// A TPACKET_V2 transmit ring flushed with one `send()` per batch.
    Ring,
}

impl TxMethod {
    /// Name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TxMethod::Mmsg => "mmsg",
            TxMethod::Ring => "ring",
        }
    }
}

/// The frames to send: one per flow, differing only in the UDP source port.
#[derive(Debug, Clone)]
pub struct FrameSpec {
    /// Source MAC (the sending interface's own).
    pub src_mac: [u8; 6],
    /// Destination MAC (the next hop: the device under test's receiving port).
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst: Ipv4Addr,
    /// Source port of flow 0; flow i uses `src_port + i`.
    pub src_port: u16,
    /// Destination UDP port.
    pub dst_port: u16,
    /// Number of flows (1..).
    pub flows: u16,
    /// UDP payload bytes (18 makes a 64-byte frame with FCS).
    pub payload: usize,
    /// Leading payload bytes; the rest is zero.
    pub pattern: Vec<u8>,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("MAC address {s:?} does not have six colon-separated bytes");
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).with_context(|| format!("MAC address {s:?}"))?;
    }
    Ok(mac)
}

/// Builds one Ethernet/IPv4/UDP frame per flow with valid IPv4 and UDP checksums.
pub fn build_frames(spec: &FrameSpec) -> anyhow::Result<Vec<Vec<u8>>> {
    if spec.flows == 0 {
        bail!("generator needs at least one flow");
    }
    if spec.payload > 1472 {
        bail!(
            "UDP payload {} exceeds 1472 bytes (1500-byte MTU)",
            spec.payload
        );
    }
    if u32::from(spec.src_port) + u32::from(spec.flows) > 65536 || spec.src_port == 0 {
        bail!(
            "source ports {}..{} leave the range 1..=65535",
            spec.src_port,
            u32::from(spec.src_port) + u32::from(spec.flows)
        );
    }
    let mut payload = vec![0u8; spec.payload];
    let n = spec.pattern.len().min(payload.len());
    payload[..n].copy_from_slice(&spec.pattern[..n]);
    let udp_len = (8 + spec.payload) as u16;
    let (src, dst) = (u32::from(spec.src), u32::from(spec.dst));
    Ok((0..spec.flows)
        .map(|i| {
            let mut f = Vec::with_capacity(HEADERS + spec.payload);
            f.extend_from_slice(&spec.dst_mac);
            f.extend_from_slice(&spec.src_mac);
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&spec.src.octets());
            ip[16..20].copy_from_slice(&spec.dst.octets());
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
            let mut udp = Vec::with_capacity(usize::from(udp_len));
            udp.extend_from_slice(&(spec.src_port + i).to_be_bytes());
            udp.extend_from_slice(&spec.dst_port.to_be_bytes());
            udp.extend_from_slice(&udp_len.to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            udp.extend_from_slice(&payload);
            let pseudo = pseudo_header_sum(src, dst, 17, udp_len);
            let c = match !sum16(&udp, u32::from(pseudo)) {
                0 => 0xffff,
                c => c,
            };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&udp);
            f
        })
        .collect())
}

/// What to send, from where, for how long.
#[derive(Debug, Clone)]
pub struct PktGenSpec {
    /// Namespace the generator thread enters.
    pub ns: String,
    /// Interface the frames leave on.
    pub iface: String,
    /// The frames.
    pub frames: FrameSpec,
    /// Upper bound on sending time.
    pub duration: Duration,
    /// Stop after exactly this many frames were accepted (`None`: until `duration`).
    pub count: Option<u64>,
    /// Frames per sendmmsg call or ring flush (1..=256).
    pub batch: usize,
    /// Frames per second to pace to; `None` sends as fast as possible.
    pub pps: Option<u64>,
    /// sendmmsg or TX ring.
    pub method: TxMethod,
}

impl PktGenSpec {
    /// A full-speed flood of 64-byte frames from src's `veth0` to `dst:port` through the
    /// testbed (destination MAC = edge's `to-src`), 4 flows.
    pub fn flood(
        tb: &crate::Testbed,
        port: u16,
        duration: Duration,
        method: TxMethod,
    ) -> anyhow::Result<Self> {
        use crate::Host;
        Ok(Self {
            ns: tb.ns(Host::Src),
            iface: "veth0".into(),
            frames: FrameSpec {
                src_mac: parse_mac(&tb.mac(Host::Src, "veth0")?)?,
                dst_mac: parse_mac(&tb.mac(Host::Edge, "to-src")?)?,
                src: tb.src_ip(),
                dst: tb.dst_ip(),
                src_port: 41000,
                dst_port: port,
                flows: 4,
                payload: UDP64_PAYLOAD,
                pattern: Vec::new(),
            },
            duration,
            count: None,
            batch: 64,
            pps: None,
            method,
        })
    }
}

/// Runs the generator on a new thread inside `spec.ns` and waits for it to finish.
/// `sent` counts frames the kernel accepted (a frame the veth peer refused is retried
/// by the ring, and counted as an error and not sent by sendmmsg).
pub fn generate(spec: PktGenSpec) -> anyhow::Result<GenReport> {
    if spec.batch == 0 || spec.batch > MAX_BATCH {
        bail!("generator batch must be 1..={MAX_BATCH}");
    }
    if spec.duration > Duration::from_secs(3600) {
        bail!("generator duration {:?} is over one hour", spec.duration);
    }
    if spec.pps == Some(0) {
        bail!("generator rate must be at least 1 packet/s");
    }
    let frames = build_frames(&spec.frames)?;
    let (ns, iface) = (spec.ns.clone(), spec.iface.clone());
    netns::in_netns(&ns, move || {
        let fd = open_socket(&spec.iface)?;
        let mut tx: Box<dyn Tx> = match spec.method {
            TxMethod::Mmsg => Box::new(MmsgTx::new(fd, frames)),
            TxMethod::Ring => Box::new(RingTx::new(fd, &frames).context("PACKET_TX_RING")?),
        };
        Ok(run(&spec, tx.as_mut()))
    })
    .with_context(|| format!("AF_PACKET generator on {iface} in {ns}"))
}

/// One transmit method: submit up to `n` frames, report how many were accepted.
trait Tx {
    /// Hands up to `n` frames to the kernel; returns (accepted, error happened).
    fn send(&mut self, n: usize) -> (usize, bool);
    /// Frames handed over whose outcome is not known yet (ring only).
    fn pending(&self) -> usize;
    /// The socket, for waiting until it can send.
    fn fd(&self) -> RawFd;
}

/// The send loop shared by both methods: deadline, exact count, pacing.
fn run(spec: &PktGenSpec, tx: &mut dyn Tx) -> GenReport {
    let mut rep = GenReport::default();
    let cpu0 = crate::udpgen::thread_cpu_s();
    let start = Instant::now();
    let deadline = start + spec.duration;
    let limit = spec.count.unwrap_or(u64::MAX);
    loop {
        let now = Instant::now();
        let queued = rep.sent + tx.pending() as u64;
        if now >= deadline || queued >= limit {
            break;
        }
        let mut want = spec
            .batch
            .min((limit - queued).min(MAX_BATCH as u64) as usize);
        if let Some(pps) = spec.pps {
            let due = (now - start).as_secs_f64() * pps as f64;
            let ahead = queued as f64 - due;
            if ahead >= 0.0 {
                let wait = Duration::from_secs_f64((ahead + 1.0) / pps as f64);
                std::thread::sleep(wait.min(deadline - now));
                continue;
            }
            want = want.min((-ahead).ceil() as usize).max(1);
        }
        let (ok, err) = tx.send(want);
        rep.sent += ok as u64;
        if err {
            rep.errors += 1;
        }
        if ok == 0 {
            wait_writable(tx.fd());
        }
    }
    // Frames already in the ring are finished (bounded), so `sent` is final.
    let until = Instant::now() + Duration::from_secs(1);
    while tx.pending() > 0 && Instant::now() < until {
        let (ok, err) = tx.send(0);
        rep.sent += ok as u64;
        rep.errors += u64::from(err);
        if ok == 0 {
            wait_writable(tx.fd());
        }
    }
    rep.secs = start.elapsed().as_secs_f64();
    rep.cpu_s = crate::udpgen::thread_cpu_s() - cpu0;
    rep
}

/// Waits up to 1 ms until the socket can take more frames.
fn wait_writable(fd: RawFd) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd; the result only shortens a wait the caller bounds anyway.
    unsafe { libc::poll(&mut pfd, 1, 1) };
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: passes a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A raw packet socket that transmits on `iface` and receives nothing (protocol 0).
fn open_socket(iface: &str) -> anyhow::Result<OwnedFd> {
    let name = std::ffi::CString::new(iface).context("interface name has a NUL byte")?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        bail!("no interface {iface:?} here");
    }
    // SAFETY: plain socket(2).
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error()).context("AF_PACKET socket (needs root)");
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    setsockopt_int(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
        .context("PACKET_QDISC_BYPASS")?;
    // Room for many frames in flight; failure only means the default buffer.
    let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20);
    // SAFETY: sockaddr_ll is plain old data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = index as i32;
    // SAFETY: passes a live sockaddr_ll and its size.
    let rc = unsafe {
        libc::bind(
            raw,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("binding to the interface");
    }
    Ok(fd)
}

/// sendmmsg of pre-built frames, flows in rotation.
struct MmsgTx {
    fd: OwnedFd,
    frames: Vec<Vec<u8>>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    next: usize,
}

impl MmsgTx {
    fn new(fd: OwnedFd, mut frames: Vec<Vec<u8>>) -> Self {
        // One iovec per (flow, slot) pair would waste memory; instead the iovecs of a
        // batch are re-aimed before each call (cheap pointer stores).
        let iovs = frames
            .iter_mut()
            .map(|f| libc::iovec {
                iov_base: f.as_mut_ptr().cast(),
                iov_len: f.len(),
            })
            .collect();
        // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
        let msgs = (0..MAX_BATCH)
            .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
            .collect();
        Self {
            fd,
            frames,
            iovs,
            msgs,
            next: 0,
        }
    }
}

impl Tx for MmsgTx {
    fn send(&mut self, n: usize) -> (usize, bool) {
        if n == 0 {
            return (0, false);
        }
        let flows = self.frames.len();
        for (k, m) in self.msgs[..n].iter_mut().enumerate() {
            m.msg_hdr.msg_iov = &mut self.iovs[(self.next + k) % flows];
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first n headers point at iovecs of frames that live in self.
        let r = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return (0, true);
        }
        let r = r as usize;
        self.next = (self.next + r) % flows;
        // Fewer than asked means the next frame met a full queue or a refusing peer.
        (r, r < n)
    }

    fn pending(&self) -> usize {
        0
    }

    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A TPACKET_V2 transmit ring whose slots hold the frames permanently (slot i carries
/// flow i mod flows); sending a slot is one status store, a flush is one `send()`.
struct RingTx {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    /// Next slot to hand over.
    head: usize,
    /// Slots handed over (SEND_REQUEST) whose transmission the kernel has not begun.
    submitted: usize,
    /// Slots transmitted but not yet released by the kernel (TP_STATUS_SENDING).
    in_flight: usize,
}

// SAFETY: the mapping is owned by this struct alone and only touched by its owner thread.
unsafe impl Send for RingTx {}

impl RingTx {
    fn new(fd: OwnedFd, frames: &[Vec<u8>]) -> anyhow::Result<Self> {
        let raw = fd.as_raw_fd();
        let data_off = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();
        let longest = frames.iter().map(Vec::len).max().unwrap_or(0);
        let frame_size = (data_off + longest).next_power_of_two().max(128);
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        if frame_size > page {
            bail!("frame of {longest} bytes does not fit a ring slot");
        }
        if frames.is_empty() || frames.len() > RING_FRAMES {
            bail!(
                "the TX ring carries 1..={RING_FRAMES} flows, not {}",
                frames.len()
            );
        }
        setsockopt_int(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as i32,
        )
        .context("PACKET_VERSION TPACKET_V2")?;
        let per_block = page / frame_size;
        let req = libc::tpacket_req {
            tp_block_size: page as u32,
            tp_block_nr: (RING_FRAMES / per_block) as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: RING_FRAMES as u32,
        };
        // SAFETY: passes a live tpacket_req and its size.
        let rc = unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_TX_RING,
                (&req as *const libc::tpacket_req).cast(),
                std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error()).context("setting up the ring");
        }
        let map_len = RING_FRAMES * frame_size;
        // SAFETY: maps the ring the kernel just allocated for this socket.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mapping the ring");
        }
        let ring = Self {
            fd,
            map: map.cast(),
            map_len,
            frame_size,
            head: 0,
            submitted: 0,
            in_flight: 0,
        };
        for i in 0..RING_FRAMES {
            let f = &frames[i % frames.len()];
            // SAFETY: slot i lies inside the mapping; the kernel does not read a slot
            // before its status says SEND_REQUEST, and every status is still AVAILABLE.
            unsafe {
                let slot = ring.map.add(i * frame_size);
                let hdr = slot.cast::<libc::tpacket2_hdr>();
                (*hdr).tp_len = f.len() as u32;
                std::ptr::copy_nonoverlapping(f.as_ptr(), slot.add(data_off), f.len());
            }
        }
        Ok(ring)
    }

    fn status(&self, slot: usize) -> &AtomicU32 {
        // SAFETY: tp_status is the first, 4-byte-aligned u32 of a slot inside the
        // mapping, shared with the kernel, so it is accessed atomically.
        unsafe { &*self.map.add(slot * self.frame_size).cast::<AtomicU32>() }
    }
}

impl Tx for RingTx {
    fn send(&mut self, n: usize) -> (usize, bool) {
        // Release slots the kernel is done with (in ring order).
        while self.in_flight > 0 {
            let oldest = (self.head + RING_FRAMES - self.submitted - self.in_flight) % RING_FRAMES;
            if self.status(oldest).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                break;
            }
            self.in_flight -= 1;
        }
        let free = RING_FRAMES - self.submitted - self.in_flight;
        for _ in 0..n.min(free) {
            self.status(self.head)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.head = (self.head + 1) % RING_FRAMES;
            self.submitted += 1;
        }
        if self.submitted == 0 {
            return (0, false);
        }
        // SAFETY: a send with no buffer flushes the ring's SEND_REQUEST slots.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        // The kernel works through slots in ring order and leaves a slot it could not
        // transmit (full peer queue) at SEND_REQUEST for the next flush.
        let mut done = 0;
        let mut bad = false;
        while self.submitted > 0 {
            let oldest = (self.head + RING_FRAMES - self.submitted) % RING_FRAMES;
            let st = self.status(oldest).load(Ordering::Acquire);
            if st == libc::TP_STATUS_SEND_REQUEST {
                break;
            }
            self.submitted -= 1;
            if st & libc::TP_STATUS_WRONG_FORMAT != 0 {
                bad = true;
                self.status(oldest)
                    .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
            } else {
                done += 1;
            }
            self.in_flight += 1;
        }
        (done, r < 0 || bad)
    }

    fn pending(&self) -> usize {
        self.submitted
    }

    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for RingTx {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; the socket closes after.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
    use std::collections::BTreeMap;

    fn spec() -> FrameSpec {
        FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(10, 9, 1, 1),
            dst: Ipv4Addr::new(10, 9, 3, 2),
            src_port: 41000,
            dst_port: 9000,
            flows: 4,
            payload: UDP64_PAYLOAD,
            pattern: b"NFX".to_vec(),
        }
    }

    /// Checks one frame with an independent parser: IPv4 and UDP checksums valid, the
    /// addresses and ports of `s`. Returns the source port.
    fn check_frame(f: &[u8], s: &FrameSpec) -> u16 {
        let h = PacketHeaders::from_ethernet_slice(f).expect("parses");
        let eth = h
            .link
            .clone()
            .and_then(|l| l.ethernet2())
            .expect("ethernet");
        assert_eq!((eth.source, eth.destination), (s.src_mac, s.dst_mac));
        let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        assert_eq!(
            (ip.source, ip.destination),
            (s.src.octets(), s.dst.octets())
        );
        let Some(TransportHeader::Udp(u)) = &h.transport else {
            panic!("not UDP")
        };
        let payload = h.payload.slice();
        assert_eq!(payload.len(), s.payload);
        assert!(payload.starts_with(&s.pattern));
        assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, payload).unwrap());
        assert_eq!(u.destination_port, s.dst_port);
        u.source_port
    }

    #[test]
    fn frames_are_64_bytes_with_valid_checksums() {
        let s = spec();
        let frames = build_frames(&s).unwrap();
        assert_eq!(frames.len(), 4);
        let ports: Vec<u16> = frames
            .iter()
            .map(|f| {
                assert_eq!(f.len() + 4, 64, "64 bytes with the FCS");
                check_frame(f, &s)
            })
            .collect();
        assert_eq!(ports, [41000, 41001, 41002, 41003]);
    }

    #[test]
    fn bad_specs_are_rejected() {
        let mut s = spec();
        s.flows = 0;
        assert!(build_frames(&s).is_err());
        s.flows = 10;
        s.src_port = 65530;
        assert!(build_frames(&s).is_err());
        s = spec();
        s.payload = 1473;
        assert!(build_frames(&s).is_err());
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("02:00:00:00:00:zz").is_err());
        assert_eq!(
            parse_mac("02:0a:00:00:00:ff").unwrap(),
            [2, 10, 0, 0, 0, 255]
        );
        let mut g = PktGenSpec {
            ns: "nfxut-absent".into(),
            iface: "veth0".into(),
            frames: spec(),
            duration: Duration::from_millis(1),
            count: None,
            batch: 0,
            pps: None,
            method: TxMethod::Mmsg,
        };
        assert!(generate(g.clone()).is_err());
        g.batch = MAX_BATCH + 1;
        assert!(generate(g.clone()).is_err());
        g.batch = 8;
        g.pps = Some(0);
        assert!(generate(g.clone()).is_err());
        g.pps = None;
        let e = format!("{:#}", generate(g).unwrap_err());
        assert!(e.contains("nfxut-absent"), "{e}");
    }

    /// A namespace with a veth pair `ga` ↔ `gb`, removed on drop (also on failure).
    struct Pair(String);

    impl Pair {
        fn new(ns: &str) -> Self {
            let limit = Duration::from_secs(5);
            let _ = crate::process::run(&["ip", "netns", "del", ns], limit);
            crate::process::run(&["ip", "netns", "add", ns], limit).unwrap();
            let p = Pair(ns.to_string());
            let _ = netns::sysctl_set(ns, "net/ipv6/conf/all/disable_ipv6", "1");
            let _ = netns::sysctl_set(ns, "net/ipv6/conf/default/disable_ipv6", "1");
            netns::ip(
                ns,
                &["link", "add", "ga", "type", "veth", "peer", "name", "gb"],
            )
            .unwrap();
            for i in ["ga", "gb"] {
                netns::ip(ns, &["link", "set", i, "up"]).unwrap();
            }
            p
        }
    }

    impl Drop for Pair {
        fn drop(&mut self) {
            let _ = crate::process::run(&["ip", "netns", "del", &self.0], Duration::from_secs(5));
        }
    }

    /// Captures frames on `gb` (raw socket, started before it returns) until `want`
    /// UDP frames to the spec's port arrived or nothing came for 500 ms.
    fn capture(ns: &str, want: usize) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let ns = ns.to_string();
        let h = std::thread::spawn(move || {
            netns::enter(&ns).unwrap();
            let proto = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: plain socket(2).
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto.into()) };
            assert!(raw >= 0);
            // SAFETY: fresh descriptor.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20).unwrap();
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 50_000,
            };
            // SAFETY: passes a live timeval and its size.
            unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            // SAFETY: sockaddr_ll is plain old data.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            // SAFETY: a valid C string.
            sll.sll_ifindex = unsafe { libc::if_nametoindex(c"gb".as_ptr()) } as i32;
            // SAFETY: passes a live sockaddr_ll and its size.
            let rc = unsafe {
                libc::bind(
                    raw,
                    (&sll as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
            tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 2048];
            let mut idle_since = Instant::now();
            while got.len() < want && idle_since.elapsed() < Duration::from_millis(500) {
                // SAFETY: buf is live and writable for its length.
                let n =
                    unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n > 0 {
                    idle_since = Instant::now();
                    let f = &buf[..n as usize];
                    // IPv4 (0x0800), UDP (17), destination port 9000.
                    if f.len() >= 42
                        && f[12..14] == [8, 0]
                        && f[23] == 17
                        && f[36..38] == [0x23, 0x28]
                    {
                        got.push(f.to_vec());
                    }
                }
            }
            got
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        h
    }

    fn exact_count(method: TxMethod, ns: &str) {
        let _pair = Pair::new(ns);
        let mut frames = spec();
        frames.src_mac = parse_mac(&netns::mac(ns, "ga").unwrap()).unwrap();
        frames.dst_mac = parse_mac(&netns::mac(ns, "gb").unwrap()).unwrap();
        let want = 3000;
        let cap = capture(ns, want + 10);
        let g = generate(PktGenSpec {
            ns: ns.into(),
            iface: "ga".into(),
            frames: frames.clone(),
            duration: Duration::from_secs(5),
            count: Some(want as u64),
            batch: 64,
            pps: Some(100_000),
            method,
        })
        .unwrap();
        assert_eq!(g.sent, want as u64, "{g:?}");
        let got = cap.join().unwrap();
        assert_eq!(got.len(), want, "{} frames captured", got.len());
        let mut per_port = BTreeMap::new();
        for f in &got {
            *per_port.entry(check_frame(f, &frames)).or_insert(0) += 1;
        }
        let counts: Vec<u32> = per_port.values().copied().collect();
        assert_eq!(per_port.len(), 4, "{per_port:?}");
        assert!(counts.iter().all(|&c| c == 750), "{per_port:?}");
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn mmsg_sends_exactly_n_valid_frames() {
        exact_count(TxMethod::Mmsg, "nfxut-pktgen-mmsg");
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn ring_sends_exactly_n_valid_frames() {
        exact_count(TxMethod::Ring, "nfxut-pktgen-ring");
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn counting_sink_counts_exactly_the_generated_datagrams() {
        let ns = "nfxut-pktgen-count";
        let _pair = Pair::new(ns);
        netns::ip(ns, &["addr", "add", "10.9.3.2/24", "dev", "gb"]).unwrap();
        for k in ["all", "default", "gb"] {
            netns::sysctl_set(ns, &format!("net/ipv4/conf/{k}/rp_filter"), "0").unwrap();
        }
        let mut frames = spec();
        frames.src_mac = parse_mac(&netns::mac(ns, "ga").unwrap()).unwrap();
        frames.dst_mac = parse_mac(&netns::mac(ns, "gb").unwrap()).unwrap();
        let sink = crate::udpgen::CountingSink::start(ns, "gb", 9000).unwrap();
        let g = generate(PktGenSpec {
            ns: ns.into(),
            iface: "ga".into(),
            frames,
            duration: Duration::from_secs(5),
            count: Some(2000),
            batch: 32,
            pps: Some(50_000),
            method: TxMethod::Ring,
        })
        .unwrap();
        let r = sink.finish().unwrap();
        assert_eq!(g.sent, 2000);
        assert_eq!(r.packets, 2000, "{r:?}");
        assert_eq!(r.other(), 0, "{r:?}");
        // A bound port is refused: its datagrams would be socket work, not NoPorts.
        let s = crate::udpgen::Sink::start(ns, 9000, &[]).unwrap();
        assert!(crate::udpgen::CountingSink::start(ns, "gb", 9000).is_err());
        s.finish().unwrap();
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn router_sink_counts_what_a_non_forwarding_next_hop_refuses() {
        let ns = "nfxut-pktgen-router";
        let _pair = Pair::new(ns);
        netns::ip(ns, &["addr", "add", "10.9.2.2/24", "dev", "gb"]).unwrap();
        for k in ["all", "default", "gb"] {
            netns::sysctl_set(ns, &format!("net/ipv4/conf/{k}/rp_filter"), "0").unwrap();
        }
        let mut frames = spec();
        frames.src_mac = parse_mac(&netns::mac(ns, "ga").unwrap()).unwrap();
        frames.dst_mac = parse_mac(&netns::mac(ns, "gb").unwrap()).unwrap();
        let g = PktGenSpec {
            ns: ns.into(),
            iface: "ga".into(),
            frames,
            duration: Duration::from_secs(5),
            count: Some(1500),
            batch: 64,
            pps: Some(50_000),
            method: TxMethod::Mmsg,
        };
        netns::sysctl_set(ns, "net/ipv4/ip_forward", "1").unwrap();
        assert!(crate::udpgen::CountingSink::at_router(ns, "gb").is_err());
        netns::sysctl_set(ns, "net/ipv4/ip_forward", "0").unwrap();
        let sink = crate::udpgen::CountingSink::at_router(ns, "gb").unwrap();
        assert_eq!(generate(g).unwrap().sent, 1500);
        let r = sink.finish().unwrap();
        assert_eq!((r.packets, r.other()), (1500, 0), "{r:?}");
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn pacing_bounds_the_rate() {
        let ns = "nfxut-pktgen-pace";
        let _pair = Pair::new(ns);
        for method in [TxMethod::Mmsg, TxMethod::Ring] {
            let g = generate(PktGenSpec {
                ns: ns.into(),
                iface: "ga".into(),
                frames: spec(),
                duration: Duration::from_millis(250),
                count: None,
                batch: 64,
                pps: Some(2000),
                method,
            })
            .unwrap();
            // 2000/s × 0.25 s = 500, plus at most one frame of rounding and the drain.
            assert!((50..=502).contains(&g.sent), "{method:?}: {g:?}");
        }
    }
}
