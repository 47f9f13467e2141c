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
    let mut prog = [program(member)];
    let fprog = libc::sock_fprog {
        len: 1,
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
        io::Error::new(
            e.kind(),
            format!("steering to fanout member {member}: {e}{why}"),
        )
    })
}

/// The one-instruction program `ret #member`.
fn program(member: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: member,
    }
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
            v.set_len(n, Direction::Forward);
            for p in v.packets_mut().iter() {
                let f = p.buf.frame();
                if f.len() >= 18 && f[12..14] == [0x88, 0xb5] {
                    seqs.push(u32::from_be_bytes([f[14], f[15], f[16], f[17]]));
                }
            }
        }
        seqs
    }

    #[test]
    fn steering_moves_every_frame_to_one_member_in_order() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = Ns(format!("nfxio-fanout-{}", std::process::id()));
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
