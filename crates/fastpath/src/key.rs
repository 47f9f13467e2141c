//! The flow key and the rewrite the fast path applies, in host order, and their
//! byte-exact forms shared with the BPF program (`bpf/fastpath.bpf.c`).

/// A flow as it arrives on one interface: the key of the fast-path table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey4 {
    /// Interface the frame arrives on.
    pub ifindex: u32,
    /// IP protocol: 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Source port (host order).
    pub sport: u16,
    /// Destination port (host order).
    pub dport: u16,
}

/// What the chain did to a flow's frames: the headers they leave with and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// Interface to transmit on.
    pub out_ifindex: u32,
    /// Destination then source MAC address of the outgoing frame.
    pub macs: [u8; 12],
    /// Source address after the chain (host order).
    pub src: u32,
    /// Destination address after the chain (host order).
    pub dst: u32,
    /// Source port after the chain (host order).
    pub sport: u16,
    /// Destination port after the chain (host order).
    pub dport: u16,
}

/// `struct fp_key` of the BPF program: addresses and ports as they sit in the frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawKey {
    ifindex: u32,
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
    proto: u8,
    pad: [u8; 3],
}

// SAFETY: plain old data with no padding the compiler adds (explicit `pad`).
unsafe impl aya::Pod for RawKey {}

impl From<&FlowKey4> for RawKey {
    fn from(k: &FlowKey4) -> Self {
        Self {
            ifindex: k.ifindex,
            saddr: k.src.to_be(),
            daddr: k.dst.to_be(),
            sport: k.sport.to_be(),
            dport: k.dport.to_be(),
            proto: k.proto,
            pad: [0; 3],
        }
    }
}

/// `struct fp_slot` of the BPF program: control word, counters and the rewrite.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct RawSlot {
    pub ctl: u64,
    pub packets: u64,
    pub bytes: u64,
    pub last_ns: u64,
    pub out_ifindex: u32,
    pub saddr: u32,
    pub daddr: u32,
    pub sport: u16,
    pub dport: u16,
    pub macs: [u8; 12],
    pub pad: [u8; 4],
}

impl RawSlot {
    /// A pending slot (control word 0, counters 0) carrying `a`.
    pub fn pending(a: &Action) -> Self {
        Self {
            ctl: 0,
            packets: 0,
            bytes: 0,
            last_ns: 0,
            out_ifindex: a.out_ifindex,
            saddr: a.src.to_be(),
            daddr: a.dst.to_be(),
            sport: a.sport.to_be(),
            dport: a.dport.to_be(),
            macs: a.macs,
            pad: [0; 4],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_bpf_structs() {
        assert_eq!(std::mem::size_of::<RawKey>(), 20);
        assert_eq!(std::mem::size_of::<RawSlot>(), 64);
        assert_eq!(std::mem::offset_of!(RawSlot, out_ifindex), 32);
        assert_eq!(std::mem::offset_of!(RawSlot, macs), 48);
    }

    #[test]
    fn key_fields_are_in_frame_byte_order() {
        let k = RawKey::from(&FlowKey4 {
            ifindex: 7,
            proto: 6,
            src: 0x0a00_0102,
            dst: 0x0a00_0203,
            sport: 0x1234,
            dport: 80,
        });
        assert_eq!(k.saddr.to_ne_bytes(), [10, 0, 1, 2]);
        assert_eq!(k.daddr.to_ne_bytes(), [10, 0, 2, 3]);
        assert_eq!(k.sport.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!(k.dport.to_ne_bytes(), [0, 80]);
        assert_eq!(k.ifindex, 7);
    }
}
