//! nfx's table tier on this machine: an established-flow fast path in the kernel.
//!
//! Why: a userspace dataplane on veth copies every byte twice more than the kernel's
//! own forwarding (into its receive ring, out into a new skb), so on TCP super-packets
//! it cannot match nftables however fast its nodes are. HYPER places such functions on
//! a *table tier*: a match-action device with bounded tables that forwards established
//! flows at line rate while software handles everything else. Here that device is a
//! BPF program on tcx ingress (`bpf/fastpath.bpf.c`) with a bounded flow table that the
//! userspace chain fills: it decides (ACL, connection state, NAT mapping), and once a
//! flow is established it installs the flow's rewrite, and the kernel applies it to the
//! flow's later frames without copying them.
//!
//! Consistency rules (what makes it a cache of the chain, not a second chain):
//! - one decision per frame, in the BPF program: redirected, or handed to userspace;
//! - a new entry is *pending*; userspace arms it ([`FastPath::arm`]) only when the
//!   frames already handed up have been sent, so no frame overtakes another — counted,
//!   not assumed: the program and a socket filter count the frames handed up and their
//!   arrival at the port's socket ([`FastPath::delivered`]);
//! - TCP SYN/FIN/RST always go to userspace and disarm the entry;
//! - removing an entry only sends the flow back to userspace, never drops a frame.
//!
//! Needs root (CAP_BPF, CAP_NET_ADMIN) and kernel ≥ 6.6 (tcx).

mod key;
mod mapping;
mod slots;
pub mod table;

pub use key::{Action, FlowKey4};
pub use slots::{SlotCounters, ACTIVE};

use aya::maps::{HashMap, MapData};
use aya::programs::{tc::TcAttachType, SchedClassifier, SocketFilter};
use aya::Ebpf;
use key::{RawKey, RawSlot};
use mapping::Mapping;
use slots::Slots;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The compiled BPF object.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fastpath.bpf.o"));

/// How long a removed slot waits before reuse: longer than any BPF program run that
/// may still hold it (one frame, microseconds).
const GRACE: Duration = Duration::from_millis(200);

/// Bytes of kernel memory per table entry: the slot (64 B) plus a hash-map element
/// (key 20 B, value 4 B, element header and bucket ≈ 56 B).
pub const BYTES_PER_FLOW: usize = 144;

/// Why an entry could not be installed.
#[derive(Debug)]
pub enum InstallError {
    /// Every slot is in use: the table tier's capacity.
    Full,
    /// The kernel refused the map update.
    Map(String),
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full => write!(f, "fast-path table full"),
            Self::Map(e) => write!(f, "fast-path table update: {e}"),
        }
    }
}

impl std::error::Error for InstallError {}

/// Most ports (interfaces) one fast path serves.
pub const MAX_PORTS: usize = 8;

/// Bytes of the program's `struct port_count` (three counters and a pad word).
const PORT_COUNT_BYTES: usize = 32;

/// Where the frames the tc program handed up on one port have got to (the program's
/// `struct port_count`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortDelivery {
    /// IPv4 frames the tc program handed to userspace (redirected ones not counted).
    pub handed_up: u64,
    /// Of those, the frames that reached the port's packet socket.
    pub arrived: u64,
    /// Every frame the packet socket was offered (counted by its filter).
    pub offered: u64,
}

/// A loaded fast path: the programs, their maps and the free slots.
pub struct FastPath {
    bpf: Ebpf,
    flows: HashMap<MapData, RawKey, u32>,
    port_of: HashMap<MapData, u32, u32>,
    /// The `ports` array: one [`PortDelivery`] (and a pad word) per registered port.
    ports: Mapping,
    /// Interface indexes of the registered ports, by port number.
    registered: Vec<u32>,
    slots: Slots,
    free: Vec<u32>,
    quarantine: VecDeque<(u32, Instant)>,
    capacity: u32,
    attached: Vec<String>,
}

/// Takes the hash map `name` out of the loaded object.
fn take_hash<K: aya::Pod, V: aya::Pod>(
    bpf: &mut Ebpf,
    name: &str,
) -> io::Result<HashMap<MapData, K, V>> {
    bpf.take_map(name)
        .ok_or_else(|| err("map", format!("{name} missing")))?
        .try_into()
        .map_err(|e| err(&format!("map {name}"), e))
}

/// Maps the whole array map `name` (`len` elements of `elem` bytes) into this process.
fn map_array(bpf: &mut Ebpf, name: &str, elem: usize, len: usize) -> io::Result<Mapping> {
    let map = bpf
        .take_map(name)
        .ok_or_else(|| err("map", format!("{name} missing")))?;
    let aya::maps::Map::Array(data) = &map else {
        return Err(err(&format!("map {name}"), "not an array"));
    };
    Mapping::new(data.fd().as_fd(), elem, len).map_err(|e| err(&format!("mapping {name}"), e))
}

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("fast path: {what}: {e}"))
}

impl FastPath {
    /// Loads the program with a table of `capacity` flows (≥ 1).
    pub fn load(capacity: u32) -> io::Result<Self> {
        let capacity = capacity.max(1);
        let mut bpf = aya::EbpfLoader::new()
            .map_max_entries("flows", capacity)
            .map_max_entries("slots", capacity)
            .load(OBJECT)
            .map_err(|e| err("loading the BPF object (needs root and kernel ≥ 6.6)", e))?;
        let prog: &mut SchedClassifier = bpf
            .program_mut("nfx_fast_path")
            .ok_or_else(|| err("program", "nfx_fast_path missing"))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        prog.load().map_err(|e| err("verifier", e))?;
        let filter: &mut SocketFilter = bpf
            .program_mut("nfx_port_count")
            .ok_or_else(|| err("program", "nfx_port_count missing"))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        filter
            .load()
            .map_err(|e| err("verifier (socket filter)", e))?;
        // Both programs are loaded while every map's fd is open (the mapped arrays
        // close theirs below).
        let flows = take_hash::<RawKey, u32>(&mut bpf, "flows")?;
        let slots = Slots::new(map_array(
            &mut bpf,
            "slots",
            std::mem::size_of::<RawSlot>(),
            capacity as usize,
        )?);
        let port_of = take_hash::<u32, u32>(&mut bpf, "port_of")?;
        let ports = map_array(&mut bpf, "ports", PORT_COUNT_BYTES, MAX_PORTS)?;
        // The maps stay alive through their fds: `flows` and `port_of` here, the
        // mappings for `slots` and `ports` (a mapped BPF map outlives its fd), and the
        // programs' references to all of them.
        Ok(Self {
            bpf,
            flows,
            port_of,
            ports,
            registered: Vec::new(),
            slots,
            free: (0..capacity).rev().collect(),
            quarantine: VecDeque::new(),
            capacity,
            attached: Vec::new(),
        })
    }

    /// Registers `iface` (in the calling thread's network namespace) as a port whose
    /// deliveries are counted ([`FastPath::delivery`]) and returns its number. Register
    /// before opening the port's packet socket with [`FastPath::socket_filter`], and
    /// attach after: then every frame the program counts can reach the socket, and the
    /// filter has counted every frame the socket was offered.
    pub fn register(&mut self, iface: &str) -> io::Result<usize> {
        let ifindex = nfx_io::sys::ifindex(iface)?;
        if let Some(i) = self.registered.iter().position(|&x| x == ifindex) {
            return Ok(i);
        }
        let port = self.registered.len();
        if port == MAX_PORTS {
            return Err(err("registering a port", format!("more than {MAX_PORTS}")));
        }
        self.port_of
            .insert(ifindex, port as u32, 0)
            .map_err(|e| err(&format!("registering `{iface}`"), e))?;
        self.registered.push(ifindex);
        Ok(port)
    }

    /// The socket filter to attach (SO_ATTACH_BPF) to a registered port's packet socket
    /// before it binds: it counts what the socket is offered and never filters.
    pub fn socket_filter(&self) -> io::Result<RawFd> {
        let prog: &SocketFilter = self
            .bpf
            .program("nfx_port_count")
            .ok_or_else(|| err("program", "nfx_port_count missing"))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        let fd = prog.fd().map_err(|e| err("socket filter", e))?;
        Ok(fd.as_fd().as_raw_fd())
    }

    /// Where the frames handed up on port `port` have got to.
    pub fn delivery(&self, port: usize) -> PortDelivery {
        PortDelivery {
            handed_up: self.port_word(port, 0),
            arrived: self.port_word(port, 8),
            offered: self.port_word(port, 16),
        }
    }

    /// True when every frame the program handed up on `port` before this call has been
    /// taken by userspace: `taken` is what the port's socket has given up so far (frames
    /// received plus frames it dropped, counted since it was opened with the filter),
    /// read before this call. Read a pending entry's control word before this call and
    /// arm it with that word after: then none of the frames the word counted is still
    /// on its way to userspace.
    pub fn delivered(&self, port: usize, taken: u64) -> bool {
        // Arrived first, handed up second: equal means everything handed up so far has
        // arrived at the socket; offered last: equal to `taken` means everything that
        // arrived has been received or dropped.
        let arrived = self.port_word(port, 8);
        let handed_up = self.port_word(port, 0);
        arrived == handed_up && self.port_word(port, 16) == taken
    }

    fn port_word(&self, port: usize, field: usize) -> u64 {
        self.ports.word(port as u32, field).load(Ordering::SeqCst)
    }

    /// Attaches the program to `iface`'s tcx ingress, in the calling thread's network
    /// namespace, registering it first if needed. Detached when the fast path is
    /// dropped (or the process ends).
    pub fn attach(&mut self, iface: &str) -> io::Result<()> {
        self.register(iface)?;
        let prog: &mut SchedClassifier = self
            .bpf
            .program_mut("nfx_fast_path")
            .ok_or_else(|| err("program", "nfx_fast_path missing"))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        prog.attach(iface, TcAttachType::Ingress)
            .map_err(|e| err(&format!("attaching to `{iface}` ingress"), e))?;
        self.attached.push(iface.to_string());
        Ok(())
    }

    /// Interfaces the program is attached to.
    pub fn interfaces(&self) -> &[String] {
        &self.attached
    }

    /// Installs `key` → `action` as a pending entry; returns its slot.
    pub fn install(&mut self, key: &FlowKey4, action: &Action) -> Result<u32, InstallError> {
        let now = Instant::now();
        while let Some(&(slot, at)) = self.quarantine.front() {
            if now.duration_since(at) < GRACE {
                break;
            }
            self.quarantine.pop_front();
            self.free.push(slot);
        }
        let slot = self.free.pop().ok_or(InstallError::Full)?;
        self.slots.write(slot, RawSlot::pending(action));
        if let Err(e) = self.flows.insert(RawKey::from(key), slot, 0) {
            self.free.push(slot);
            return Err(InstallError::Map(e.to_string()));
        }
        Ok(slot)
    }

    /// Removes the entry of `key` (whose slot is `slot`): the flow's next frames go to
    /// userspace. The slot is reused after a grace period.
    pub fn remove(&mut self, key: &FlowKey4, slot: u32) {
        self.slots.disarm(slot);
        // A missing key means it was never installed; nothing else can fail here.
        let _ = self.flows.remove(&RawKey::from(key));
        self.quarantine.push_back((slot, Instant::now()));
    }

    /// The control word of `slot` (take it before checking that userspace has nothing
    /// of the flow left to send, then pass it to [`FastPath::arm`]).
    pub fn ctl(&self, slot: u32) -> u64 {
        self.slots.ctl(slot)
    }

    /// Arms a pending entry if no frame was handed up since its control word read
    /// `seen`; false means try again later.
    pub fn arm(&self, slot: u32, seen: u64) -> bool {
        seen & ACTIVE == 0 && self.slots.arm(slot, seen)
    }

    /// True while the fast path forwards the entry's frames.
    pub fn is_active(&self, slot: u32) -> bool {
        self.slots.ctl(slot) & ACTIVE != 0
    }

    /// What the fast path forwarded for the entry in `slot`.
    pub fn counters(&self, slot: u32) -> SlotCounters {
        self.slots.counters(slot)
    }

    /// Table size.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Entries installed (pending or active).
    pub fn len(&self) -> usize {
        self.capacity as usize - self.free.len() - self.quarantine.len()
    }

    /// True when no entry is installed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kernel memory the table takes, in bytes (see [`BYTES_PER_FLOW`]).
    pub fn memory_bytes(&self) -> usize {
        self.capacity as usize * BYTES_PER_FLOW
    }
}
