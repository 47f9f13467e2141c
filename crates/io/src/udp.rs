//! UDP socket port: the underlay of a tunnel. Each datagram payload (e.g. an ESP-in-UDP
//! packet) is one packet; receive and send are batched with `recvmmsg`/`sendmmsg`. The
//! socket is connected to one peer, so it only hears that peer.

use crate::mmsg::MsgBatch;
use crate::port::{Port, PortCounters};
use crate::sys::set_buffer;
use nfx_packet::Packet;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// A connected, non-blocking UDP socket moving datagrams in batches.
pub struct UdpPort {
    sock: UdpSocket,
    name: String,
    retries: u32,
    batch: MsgBatch,
    counters: PortCounters,
}

impl UdpPort {
    /// Binds `local`, connects to `peer`; `batch` datagrams at most per syscall.
    pub fn open(local: SocketAddr, peer: SocketAddr, batch: usize) -> io::Result<Self> {
        let with = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("UDP port {local} -> {peer}: {what}: {e}"))
        };
        let sock = UdpSocket::bind(local).map_err(|e| with("bind", e))?;
        sock.connect(peer).map_err(|e| with("connect", e))?;
        sock.set_nonblocking(true)
            .map_err(|e| with("non-blocking", e))?;
        set_buffer(
            sock.as_raw_fd(),
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            8 << 20,
        );
        set_buffer(
            sock.as_raw_fd(),
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            8 << 20,
        );
        let name = format!("udp:{}", sock.local_addr()?);
        Ok(Self {
            sock,
            name,
            retries: 16,
            batch: MsgBatch::new(batch.clamp(1, nfx_packet::MAX_VECTOR), false),
            counters: PortCounters::default(),
        })
    }

    /// The bound local address (useful after binding port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }
}

impl Port for UdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn mac(&self) -> [u8; 6] {
        [0; 6]
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn recv(&mut self, slots: &mut [Packet]) -> io::Result<usize> {
        self.batch
            .recv(self.sock.as_raw_fd(), slots, 0, &mut self.counters)
    }

    fn send(&mut self, pkts: &mut [Packet]) -> usize {
        self.batch.send(
            self.sock.as_raw_fd(),
            pkts,
            0,
            self.retries,
            &mut self.counters,
        )
    }

    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_packet::{Direction, PacketBuf, PacketVector};
    use std::time::{Duration, Instant};

    #[test]
    fn datagrams_cross_in_batches_in_order() {
        let mut b = UdpPort::open(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
            64,
        )
        .unwrap();
        let b_addr = b.local_addr().unwrap();
        let mut a = UdpPort::open("127.0.0.1:0".parse().unwrap(), b_addr, 64).unwrap();
        let a_addr = a.local_addr().unwrap();
        b.sock.connect(a_addr).unwrap();
        let mut pkts: Vec<Packet> = (0..100u8)
            .map(|i| Packet::new(PacketBuf::from_frame(&[i; 40]), Direction::Forward))
            .collect();
        assert_eq!(a.send(&mut pkts), 100);
        assert_eq!(a.counters().tx_bytes, 4000);
        let mut v = PacketVector::new(64, PacketBuf::MTU_CAPACITY);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 100 && Instant::now() < deadline {
            let n = b.recv(v.slots_mut()).unwrap();
            v.set_len(n, Direction::Reverse, false);
            got.extend(v.packets().iter().map(|p| p.buf.frame().to_vec()));
        }
        assert_eq!(got.len(), 100);
        assert!(got.iter().enumerate().all(|(i, f)| f == &vec![i as u8; 40]));
        assert_eq!(b.counters().rx_packets, 100);
        assert_eq!(
            b.recv(v.slots_mut()).unwrap(),
            0,
            "empty socket must not block"
        );
    }

    #[test]
    fn bad_address_is_a_clear_error() {
        let err = UdpPort::open(
            "10.255.255.254:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
            8,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("10.255.255.254"), "{err}");
    }
}
