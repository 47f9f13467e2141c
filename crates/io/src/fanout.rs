//! PACKET_FANOUT steering for loss-free handoff between two dataplane processes that
//! share an interface. Every AF_PACKET socket of the interface joins one fanout group of
//! type PACKET_FANOUT_CBPF; the group's classic-BPF program is a single `ret #k`, and the
//! kernel delivers each frame to member `k % members` only (net/packet/af_packet.c,
//! `fanout_demux_bpf`). Replacing the program (PACKET_FANOUT_DATA) moves all traffic
//! from one member to another at one instant: the kernel swaps it under RCU and waits
//! (`synchronize_net`) before the call returns, so after [`steer`] no frame is still on
//! its way to the previous member.
//!
//! Members are numbered in join order; when one leaves, the last member takes its slot.
//! A group without a program delivers everything to member 0.
//!
//! The same groups spread one instance's flows over its worker threads
//! ([`flow_program`]): the program returns a flow hash (or a port) and the kernel takes
//! it modulo the member count.

use crate::sys::check;
use std::io;
use std::os::fd::RawFd;

/// PACKET_FANOUT_FLAG_IGNORE_OUTGOING (Linux 6.9+): the group does not see frames the
/// host itself transmits, as PACKET_IGNORE_OUTGOING does for a lone socket.
const FLAG_IGNORE_OUTGOING: u32 = 0x4000;

/// `BPF_RET | BPF_K`: return the constant `k`.
const BPF_RET_K: u16 = 0x06;

/// Joins the socket `fd` (bound to one interface) to fanout group `id` of type CBPF.
/// Tries with IGNORE_OUTGOING first and without it on kernels that lack the flag; every
/// member of a group must be opened the same way, which this function guarantees.
pub fn join(fd: RawFd, id: u16) -> io::Result<()> {
    let with_flag = (libc::PACKET_FANOUT_CBPF | FLAG_IGNORE_OUTGOING) << 16 | u32::from(id);
    match set_fanout(fd, with_flag) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            set_fanout(fd, libc::PACKET_FANOUT_CBPF << 16 | u32::from(id)).map_err(|e2| {
                io::Error::new(
                    e2.kind(),
                    format!("joining fanout group {id}: {e2} (is the group open with another type, or on another interface?)"),
                )
            })
        }
        other => other.map_err(|e| io::Error::new(e.kind(), format!("joining fanout group {id}: {e}"))),
    }
}

/// PACKET_FANOUT_FLAG_UNIQUEID: the kernel picks an unused group id.
const FLAG_UNIQUEID: u32 = 0x2000;

/// Creates a new CBPF fanout group with an id the kernel picks, joins `fd` to it and
/// returns the id, for other sockets of the same interface to [`join`]. Same
/// IGNORE_OUTGOING handling as [`join`].
pub fn join_new(fd: RawFd) -> io::Result<u16> {
    let base = (libc::PACKET_FANOUT_CBPF | FLAG_UNIQUEID) << 16;
    match set_fanout(fd, base | FLAG_IGNORE_OUTGOING << 16) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => set_fanout(fd, base),
        other => other,
    }
    .map_err(|e| io::Error::new(e.kind(), format!("creating a fanout group: {e}")))?;
    let mut arg: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: passes a live u32 and its size; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut arg as *mut u32).cast(),
            &mut len,
        )
    })?;
    Ok(arg as u16)
}

fn set_fanout(fd: RawFd, arg: u32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live u32 and its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&arg as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Sends every later frame of the group that `fd` belongs to to member `member`
/// (taken modulo the member count). Any member may call it; it acts for the group.
pub fn steer(fd: RawFd, member: u32) -> io::Result<()> {
    set_program(fd, &[program(member)])
        .map_err(|e| io::Error::new(e.kind(), format!("steering to fanout member {member}: {e}")))
}

/// Installs `prog` as the classic-BPF program of the fanout group of `fd`: each frame
/// goes to member `return value % members`.
pub fn set_program(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let mut prog = prog.to_vec();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: passes a live sock_fprog (pointing at a live one-instruction program) and
    // its size; the kernel copies the program before returning.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT_DATA,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
    .map(|_| ())
    .map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EINVAL) => " (the socket is not in a CBPF fanout group)",
            Some(libc::ENOTSOCK) => " (not a socket)",
            _ => "",
        };
        io::Error::new(e.kind(), format!("{e}{why}"))
    })
}

/// What a [`flow_program`] returns for an IPv4 TCP/UDP/ICMP-echo frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKey {
    /// A hash of the addresses and ports that is the same in both directions of a flow
    /// (ICMP: addresses only).
    Symmetric,
    /// The destination port (ICMP echo: the identifier), so that replies to a NAT that
    /// gives worker `k` of `n` only ports `p` with `p % n == k` reach worker `k`.
    DestPort,
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_IND: u16 = 0x40;
const LD_H_IND: u16 = 0x48;
const LDX_MEM: u16 = 0x61;
const ST: u16 = 0x02;
const TAX: u16 = 0x07;
const ALU_AND_K: u16 = 0x54;
const ALU_LSH_K: u16 = 0x64;
const ALU_RSH_K: u16 = 0x74;
const ALU_MUL_K: u16 = 0x24;
const ALU_XOR_X: u16 = 0xac;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_A: u16 = 0x16;
/// Offsets from the network header, wherever the skb's data pointer stands.
const NET: u32 = (-0x100000i32) as u32;
/// Ancillary load of `skb->protocol` (host order).
const AD_PROTOCOL: u32 = (-0x1000i32) as u32;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The fanout program that spreads IPv4 flows over a group's members: `key` decides
/// what it returns for TCP, UDP and ICMP. Every other frame (ARP, IPv6, other
/// protocols, non-first fragments) goes to member 0, so that a flow the program cannot
/// key still meets one worker in both directions.
pub fn flow_program(key: FlowKey) -> Vec<libc::sock_filter> {
    let ret0 = ins(BPF_RET_K, 0, 0, 0);
    let mut p = vec![
        /* 0 */ ins(LD_W_ABS, 0, 0, AD_PROTOCOL),
        /* 1 */ ins(JEQ_K, 1, 0, 0x0800),
        /* 2 */ ret0,
        /* 3 */ ins(LD_H_ABS, 0, 0, NET + 6),
        /* 4 */ ins(JSET_K, 0, 1, 0x1fff),
        /* 5 */ ret0,
        // X = IP header length, A = protocol.
        /* 6 */ ins(LD_B_ABS, 0, 0, NET),
        /* 7 */ ins(ALU_AND_K, 0, 0, 0xf),
        /* 8 */ ins(ALU_LSH_K, 0, 0, 2),
        /* 9 */ ins(TAX, 0, 0, 0),
        /* 10 */ ins(LD_B_ABS, 0, 0, NET + 9),
    ];
    match key {
        FlowKey::DestPort => p.extend([
            /* 11 */ ins(JEQ_K, 3, 0, 6),
            /* 12 */ ins(JEQ_K, 2, 0, 17),
            /* 13 */ ins(JEQ_K, 3, 0, 1),
            /* 14 */ ret0,
            /* 15 */ ins(LD_H_IND, 0, 0, NET + 2), // TCP/UDP destination port
            /* 16 */ ins(RET_A, 0, 0, 0),
            /* 17 */ ins(LD_H_IND, 0, 0, NET + 4), // ICMP echo identifier
            /* 18 */ ins(RET_A, 0, 0, 0),
        ]),
        FlowKey::Symmetric => p.extend([
            /* 11 */ ins(JEQ_K, 3, 0, 6),
            /* 12 */ ins(JEQ_K, 2, 0, 17),
            /* 13 */ ins(JEQ_K, 16, 0, 1),
            /* 14 */ ret0,
            // TCP/UDP: M[1] = sport ^ dport.
            /* 15 */ ins(LD_W_IND, 0, 0, NET),
            /* 16 */ ins(ST, 0, 0, 1),
            /* 17 */ ins(ALU_RSH_K, 0, 0, 16),
            /* 18 */ ins(LDX_MEM, 0, 0, 1),
            /* 19 */ ins(ALU_XOR_X, 0, 0, 0),
            /* 20 */ ins(ALU_AND_K, 0, 0, 0xffff),
            /* 21 */ ins(ST, 0, 0, 1),
            // A = saddr ^ daddr ^ M[1].
            /* 22 */ ins(LD_W_ABS, 0, 0, NET + 12),
            /* 23 */ ins(ST, 0, 0, 0),
            /* 24 */ ins(LD_W_ABS, 0, 0, NET + 16),
            /* 25 */ ins(LDX_MEM, 0, 0, 0),
            /* 26 */ ins(ALU_XOR_X, 0, 0, 0),
            /* 27 */ ins(LDX_MEM, 0, 0, 1),
            /* 28 */ ins(ALU_XOR_X, 0, 0, 0),
            /* 29 */ ins(JA, 0, 0, 5),
            // ICMP: A = saddr ^ daddr.
            /* 30 */ ins(LD_W_ABS, 0, 0, NET + 12),
            /* 31 */ ins(ST, 0, 0, 0),
            /* 32 */ ins(LD_W_ABS, 0, 0, NET + 16),
            /* 33 */ ins(LDX_MEM, 0, 0, 0),
            /* 34 */ ins(ALU_XOR_X, 0, 0, 0),
            // Mix: A ^= A >> 16; A *= 0x45d9f3b; A ^= A >> 16.
            /* 35 */
            ins(ST, 0, 0, 2),
            /* 36 */ ins(ALU_RSH_K, 0, 0, 16),
            /* 37 */ ins(LDX_MEM, 0, 0, 2),
            /* 38 */ ins(ALU_XOR_X, 0, 0, 0),
            /* 39 */ ins(ALU_MUL_K, 0, 0, 0x045d_9f3b),
            /* 40 */ ins(ST, 0, 0, 2),
            /* 41 */ ins(ALU_RSH_K, 0, 0, 16),
            /* 42 */ ins(LDX_MEM, 0, 0, 2),
            /* 43 */ ins(ALU_XOR_X, 0, 0, 0),
            /* 44 */ ins(RET_A, 0, 0, 0),
        ]),
    }
    p
}

/// The one-instruction program `ret #member`.
fn program(member: u32) -> libc::sock_filter {
    ins(BPF_RET_K, 0, 0, member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AfPacketOptions, AfPacketPort, Port};
    use nfx_packet::{Direction, Packet, PacketBuf, PacketVector};
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn program_is_ret_constant() {
        let p = program(7);
        assert_eq!((p.code, p.jt, p.jf, p.k), (0x06, 0, 0, 7));
    }

    #[test]
    fn bad_descriptors_give_clear_errors() {
        let e = steer(-1, 1).unwrap_err();
        assert!(e.to_string().contains("fanout member 1"), "{e}");
        // A UDP socket is a socket but no packet socket in a group.
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = steer(std::os::fd::AsRawFd::as_raw_fd(&s), 0).unwrap_err();
        assert!(e.to_string().contains("steering"), "{e}");
        assert!(join(std::os::fd::AsRawFd::as_raw_fd(&s), 3).is_err());
    }

    /// One namespace with a veth pair; removed on drop.
    struct Ns(String);

    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    fn frame(seq: u32) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0xbb, 1]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xaa, 1]);
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        f
    }

    /// Receives until `want` frames with the local experimental ethertype came in, or
    /// half a second passes with nothing new; returns their sequence numbers.
    fn drain(port: &mut AfPacketPort, want: usize) -> Vec<u32> {
        let mut v = PacketVector::new(64, PacketBuf::MTU_CAPACITY);
        let mut seqs = Vec::new();
        let mut last = Instant::now();
        while seqs.len() < want && last.elapsed() < Duration::from_millis(500) {
            let n = port.recv(v.slots_mut()).unwrap();
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            last = Instant::now();
            v.set_len(n, Direction::Forward, false);
            for p in v.packets_mut().iter() {
                let f = p.buf.frame();
                if f.len() >= 18 && f[12..14] == [0x88, 0xb5] {
                    seqs.push(u32::from_be_bytes([f[14], f[15], f[16], f[17]]));
                }
            }
        }
        seqs
    }

    /// An IPv4 frame (experimental payload: `seq` after the L4 header) of `proto` from
    /// `src:sport` to `dst:dport`.
    fn ipv4(seq: u32, proto: u8, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0xbb, 1]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xaa, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        if proto == 1 {
            f[34] = 8; // echo request; identifier at 38
            f[38..40].copy_from_slice(&sport.to_be_bytes());
        } else {
            f[34..36].copy_from_slice(&sport.to_be_bytes());
            f[36..38].copy_from_slice(&dport.to_be_bytes());
        }
        f[42..46].copy_from_slice(&seq.to_be_bytes());
        f
    }

    /// Sends `frames` on `fa` and returns, per frame, which of `members` received it.
    fn member_of_each(
        sender: &mut AfPacketPort,
        members: &mut [AfPacketPort],
        frames: &[Vec<u8>],
    ) -> Vec<Option<usize>> {
        let mut pkts: Vec<Packet> = frames
            .iter()
            .map(|f| Packet::new(PacketBuf::from_frame(f), Direction::Forward))
            .collect();
        assert_eq!(sender.send(&mut pkts), frames.len());
        let mut at = vec![None; frames.len()];
        let mut v = PacketVector::new(64, PacketBuf::MTU_CAPACITY);
        let deadline = Instant::now() + Duration::from_secs(2);
        while at.iter().any(Option::is_none) && Instant::now() < deadline {
            for (m, port) in members.iter_mut().enumerate() {
                let n = port.recv(v.slots_mut()).unwrap();
                v.set_len(n, Direction::Forward, false);
                for p in v.packets_mut().iter() {
                    let f = p.buf.frame();
                    if f.len() >= 46 && f[12..14] == [0x08, 0] && f[26] == 10 {
                        let seq = u32::from_be_bytes([f[42], f[43], f[44], f[45]]) as usize;
                        if let Some(slot) = at.get_mut(seq) {
                            assert!(slot.is_none(), "frame {seq} delivered twice");
                            *slot = Some(m);
                        }
                    }
                }
            }
        }
        at
    }

    /// A namespace (named `prefix` + this process's id) holding the veth pair `fa`/`fb`, up.
    fn veth_ns(prefix: &str) -> Ns {
        let ns = Ns(format!("{prefix}{}", std::process::id()));
        assert!(ip(&["netns", "add", &ns.0]));
        assert!(ip(&[
            "-n",
            &ns.0,
            "link",
            "add",
            "fa",
            "address",
            "02:00:00:00:aa:01",
            "type",
            "veth",
            "peer",
            "name",
            "fb",
            "address",
            "02:00:00:00:bb:01"
        ]));
        assert!(ip(&["-n", &ns.0, "link", "set", "fa", "up"]));
        assert!(ip(&["-n", &ns.0, "link", "set", "fb", "up"]));
        ns
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn flow_programs_keep_flows_together_and_steer_replies_by_port() {
        let ns = veth_ns("nfxio-flows-");
        let name = ns.0.clone();
        std::thread::spawn(move || {
            crate::netns::enter_netns(&name).unwrap();
            let mut sender = AfPacketPort::open("fa", AfPacketOptions::default()).unwrap();
            let first = AfPacketPort::open("fb", AfPacketOptions::default()).unwrap();
            let group = join_new(first.fd()).unwrap();
            let second = AfPacketPort::open(
                "fb",
                AfPacketOptions {
                    fanout: Some(group),
                    ..Default::default()
                },
            )
            .unwrap();
            let mut members = [first, second];

            // Symmetric: both directions of every flow meet one member; flows spread.
            set_program(members[0].fd(), &flow_program(FlowKey::Symmetric)).unwrap();
            let (a, b) = ([10, 1, 0, 2], [10, 2, 0, 9]);
            let mut frames = Vec::new();
            for i in 0..32u16 {
                let sport = 40000 + 2 * i;
                frames.push(ipv4(frames.len() as u32, 6, a, b, sport, 5201));
                frames.push(ipv4(frames.len() as u32, 6, b, a, 5201, sport));
                frames.push(ipv4(frames.len() as u32, 17, a, b, sport, 53));
                frames.push(ipv4(frames.len() as u32, 17, b, a, 53, sport));
                frames.push(ipv4(frames.len() as u32, 1, a, [10, 2, 0, i as u8], i, 0));
                frames.push(ipv4(frames.len() as u32, 1, [10, 2, 0, i as u8], a, i, 0));
            }
            frames.push(ipv4(frames.len() as u32, 47, a, b, 1, 1)); // GRE: member 0
            let at = member_of_each(&mut sender, &mut members, &frames);
            assert!(at.iter().all(Option::is_some), "lost frames: {at:?}");
            for pair in at[..at.len() - 1].chunks(2) {
                assert_eq!(pair[0], pair[1], "a flow's directions split: {at:?}");
            }
            assert_eq!(at[at.len() - 1], Some(0));
            for m in 0..2 {
                let n = at.iter().filter(|x| **x == Some(m)).count();
                assert!(n >= 24, "member {m} got only {n} of {} frames", at.len());
            }

            // Destination port: port % 2 decides (ICMP: the echo identifier).
            set_program(members[1].fd(), &flow_program(FlowKey::DestPort)).unwrap();
            let frames: Vec<Vec<u8>> = (0..40u16)
                .map(|i| match i % 3 {
                    0 => ipv4(u32::from(i), 6, b, a, 5201, 1024 + i),
                    1 => ipv4(u32::from(i), 17, b, a, 53, 1024 + i),
                    _ => ipv4(u32::from(i), 1, b, a, 1024 + i, 0),
                })
                .collect();
            let at = member_of_each(&mut sender, &mut members, &frames);
            for (i, m) in at.iter().enumerate() {
                assert_eq!(*m, Some(i % 2), "frame {i}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn steering_moves_every_frame_to_one_member_in_order() {
        let ns = veth_ns("nfxio-fanout-");
        let name = ns.0.clone();
        let result = std::thread::spawn(move || {
            crate::netns::enter_netns(&name).unwrap();
            let group = AfPacketOptions {
                batch: 64,
                fanout: Some(4242),
                ..Default::default()
            };
            let mut first = AfPacketPort::open("fb", group.clone()).unwrap();
            let mut second = AfPacketPort::open("fb", group).unwrap();
            let mut sender = AfPacketPort::open("fa", AfPacketOptions::default()).unwrap();
            let mut send = |from: u32| {
                let mut pkts: Vec<Packet> = (from..from + 100)
                    .map(|i| Packet::new(PacketBuf::from_frame(&frame(i)), Direction::Forward))
                    .collect();
                assert_eq!(sender.send(&mut pkts), 100);
            };
            // No program yet: member 0 (the first to join) gets everything.
            send(0);
            let a = drain(&mut first, 100);
            let b = drain(&mut second, 1);
            // Steered to member 1 (from either member's socket): only the second reads.
            steer(first.fd(), 1).unwrap();
            send(100);
            let c = drain(&mut second, 100);
            let d = drain(&mut first, 1);
            // The first leaves: the second is compacted to slot 0 and `ret #1 % 1` is 0.
            drop(first);
            send(200);
            let e = drain(&mut second, 100);
            (a, b, c, d, e)
        })
        .join()
        .unwrap();
        let (a, b, c, d, e) = result;
        assert_eq!(a, (0..100).collect::<Vec<u32>>());
        assert!(b.is_empty(), "{b:?}");
        assert_eq!(c, (100..200).collect::<Vec<u32>>());
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(e, (200..300).collect::<Vec<u32>>());
    }
}
