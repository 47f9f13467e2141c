//! Vectors (batches) of packets, the unit of work of every graph node.

use crate::{DropReason, FlowKey, Meta, PacketBuf};

/// Largest vector the dataplane moves at once (as in fd.io VPP).
pub const MAX_VECTOR: usize = 256;

/// Which way a packet travels through a chain: `Forward` from the inside port
/// (towards the outside), `Reverse` for replies coming back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Inside → outside (e.g. `src` → `dst`).
    Forward,
    /// Outside → inside (replies).
    Reverse,
}

/// A packet in flight: its buffer, its parsed headers, its direction and, once a node
/// decides so, the reason it is dropped. Nodes skip packets that already have a drop.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Frame storage and offload header.
    pub buf: PacketBuf,
    /// Parsed header offsets and flow key; refreshed by nodes that rewrite headers.
    pub meta: Meta,
    /// Travel direction through the chain.
    pub dir: Direction,
    /// Set by the node that drops the packet; the runtime counts it against that node.
    pub drop: Option<DropReason>,
    /// True while every node so far lets this packet's flow move to the fast path (the
    /// table tier); set by the runtime when a fast path is configured, cleared by any
    /// node that cannot vouch for the flow's later packets.
    pub fast: bool,
    /// The flow key the frame arrived with, before any node rewrote it (set by `parse`).
    pub in_key: FlowKey,
    /// For a packet that stands for traffic the fast path forwarded: how much, so that
    /// stateful nodes account for it (set only by the runtime's fast-path sync).
    pub replay: Option<Replay>,
    /// Index of the service whose chain the packet runs through, set by the
    /// dataplane's classifier (meaningless before it ran).
    pub service: u16,
}

/// Traffic a fast-path entry forwarded since the last sync, replayed through the chain
/// as one header-only packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replay {
    /// Packets (GSO segments counted one by one).
    pub packets: u64,
    /// IP bytes as they were on the wire (each segment with its own headers).
    pub bytes: u64,
}

impl Packet {
    /// Wraps a buffer as a not-yet-parsed packet travelling in `dir`.
    pub fn new(buf: PacketBuf, dir: Direction) -> Self {
        Self {
            buf,
            meta: Meta::default(),
            dir,
            drop: None,
            fast: false,
            in_key: FlowKey::default(),
            replay: None,
            service: 0,
        }
    }

    /// True while no node has dropped the packet.
    pub fn alive(&self) -> bool {
        self.drop.is_none()
    }
}

/// A reusable batch of up to [`MAX_VECTOR`] packets. Buffers are preallocated once;
/// `len` says how many slots hold packets of the current batch.
#[derive(Debug)]
pub struct PacketVector {
    slots: Vec<Packet>,
    len: usize,
}

impl PacketVector {
    /// Preallocates `size` slots (≤ [`MAX_VECTOR`]) of `buf_cap` bytes each.
    pub fn new(size: usize, buf_cap: usize) -> Self {
        let size = size.clamp(1, MAX_VECTOR);
        let slots = (0..size)
            .map(|_| Packet::new(PacketBuf::with_capacity(buf_cap), Direction::Forward))
            .collect();
        Self { slots, len: 0 }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Packets of the current batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets how many slots the last receive filled and resets their per-batch state;
    /// `fast` says whether a fast path may take their flows.
    pub fn set_len(&mut self, len: usize, dir: Direction, fast: bool) {
        self.len = len.min(self.slots.len());
        for p in &mut self.slots[..self.len] {
            p.dir = dir;
            p.drop = None;
            p.fast = fast;
        }
    }

    /// The packets of the current batch.
    pub fn packets(&self) -> &[Packet] {
        &self.slots[..self.len]
    }

    /// The packets of the current batch, writable.
    pub fn packets_mut(&mut self) -> &mut [Packet] {
        &mut self.slots[..self.len]
    }

    /// All slots, for a receive call to fill before [`Self::set_len`].
    pub fn slots_mut(&mut self) -> &mut [Packet] {
        &mut self.slots
    }
}
