//! An in-memory port pair for driving a worker without a network: the unit tests
//! (through `testkit`) and the `control_line` fuzz target (feature `fuzzing`) use it.

use crate::runtime::PortOpener;
use nfx_io::{Notifier, Port, PortCounters};
use nfx_packet::Packet;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// Frames queued for an in-memory port to receive, and frames it transmitted.
#[derive(Default)]
pub struct Wire {
    /// Frames waiting to be received.
    pub rx: VecDeque<Vec<u8>>,
    /// Frames transmitted, in order.
    pub tx: Vec<Vec<u8>>,
}

/// An in-memory port: `recv` pops from the wire, `send` appends to it; a notifier makes
/// its descriptor readable while frames are queued so that blocking poll modes work.
pub struct MemPort {
    name: String,
    mac: [u8; 6],
    /// The shared wire.
    pub wire: Arc<Mutex<Wire>>,
    /// Readable when frames are queued.
    pub ready: Arc<Notifier>,
    counters: PortCounters,
}

impl MemPort {
    /// A port named `name` with MAC `mac`.
    pub fn new(name: &str, mac: [u8; 6]) -> Self {
        Self {
            name: name.into(),
            mac,
            wire: Arc::default(),
            ready: Arc::new(Notifier::new().unwrap()),
            counters: PortCounters::default(),
        }
    }

    /// Queues frames for the port to receive, from any thread.
    pub fn inject(wire: &Mutex<Wire>, ready: &Notifier, frames: impl IntoIterator<Item = Vec<u8>>) {
        wire.lock().unwrap().rx.extend(frames);
        ready.notify();
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn fd(&self) -> RawFd {
        self.ready.fd()
    }

    fn recv(&mut self, slots: &mut [Packet]) -> std::io::Result<usize> {
        let mut w = self.wire.lock().unwrap();
        let mut n = 0;
        while n < slots.len() {
            let Some(f) = w.rx.pop_front() else { break };
            slots[n].buf.storage_mut()[..f.len()].copy_from_slice(&f);
            slots[n].buf.set_len(f.len());
            self.counters.rx_taken += 1;
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += f.len() as u64;
            n += 1;
        }
        if w.rx.is_empty() {
            self.ready.clear();
        }
        Ok(n)
    }

    fn send(&mut self, pkts: &mut [Packet]) -> usize {
        let mut w = self.wire.lock().unwrap();
        for p in pkts.iter() {
            w.tx.push(p.buf.frame().to_vec());
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += p.buf.len() as u64;
        }
        pkts.len()
    }

    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}

/// One end of an in-memory port as a test drives it: its wire and its notifier.
pub type WireEnd = (Arc<Mutex<Wire>>, Arc<Notifier>);

/// Two in-memory ports (`in0` MAC 02:00:00:00:00:10, `out0` …:20) as the opener
/// [`crate::Dataplane::start_with_ports`] takes, and the ends that drive them.
pub fn mem_ports() -> (PortOpener, WireEnd, WireEnd) {
    let a = MemPort::new("in0", [2, 0, 0, 0, 0, 0x10]);
    let b = MemPort::new("out0", [2, 0, 0, 0, 0, 0x20]);
    let inside = (a.wire.clone(), a.ready.clone());
    let outside = (b.wire.clone(), b.ready.clone());
    let open: PortOpener = Box::new(move |_| Ok([Box::new(a) as Box<dyn Port>, Box::new(b)]));
    (open, inside, outside)
}
