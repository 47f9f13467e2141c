//! The byte layouts of `bpf/hvnf.h`, mirrored field for field (a test checks sizes and
//! offsets), and the conversions between them and host types.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Functions a chain position holds (`K_*`).
pub const K_END: u8 = 0;
/// Firewall.
pub const K_FW: u8 = 1;
/// NAT.
pub const K_NAT: u8 = 2;
/// Elephant detection.
pub const K_ELE: u8 = 3;
/// Most functions one table-tier chain holds per direction.
pub const MAX_CHAIN: usize = 3;
/// Counter rows: parse, firewall, NAT, elephant, output.
pub const N_NODES: usize = 5;
/// Drop-reason slots per counter row.
pub const NREASONS: usize = 20;

/// Hooks.
pub const HOOK_INGRESS: u32 = 0;
/// tcx egress.
pub const HOOK_EGRESS: u32 = 1;
/// Frames travel inside → outside.
pub const DIR_FWD: u32 = 0;
/// Frames travel outside → inside.
pub const DIR_REV: u32 = 1;
/// Hand the frame on after the chain.
pub const ACT_PASS: u32 = 0;
/// Forward the frame to `out_ifindex`.
pub const ACT_REDIRECT: u32 = 1;

/// Marks a plain-old-data struct whose every byte pattern is valid.
///
/// # Safety
/// Implementors are `repr(C)` with explicit padding and integer fields only.
pub unsafe trait Raw: Copy + Default + 'static {
    /// The bytes of the value.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `Raw` types are plain old data without implicit padding.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }

    /// The value stored in `b` (at least `size_of::<Self>()` bytes).
    fn read(b: &[u8]) -> Self {
        assert!(b.len() >= std::mem::size_of::<Self>(), "short buffer");
        // SAFETY: every byte pattern is a valid value (see the trait's contract); the
        // read is unaligned.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Self>()) }
    }
}

/// `struct hv_key`: a flow, addresses and ports in network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RawKey {
    pub src: [u32; 4],
    pub dst: [u32; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub pad: [u8; 2],
}

/// `struct hv_port_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawPortKey {
    pub ifindex: u32,
    pub hook: u32,
}

/// `struct hv_port`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawPort {
    pub dir: u32,
    pub action: u32,
    pub out_ifindex: u32,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
}

/// `struct hv_counters`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCounters {
    pub packets: u64,
    pub bytes: u64,
    pub to_kernel: u64,
    pub drops: [u64; NREASONS],
}

/// `struct hv_gauges`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawGauges {
    pub fw_created: u64,
    pub fw_expired: u64,
    pub nat_snat_created: u64,
    pub nat_dnat_created: u64,
    pub nat_expired: u64,
    pub ele_elephants: u64,
    pub ele_untracked: u64,
    pub ele_packets: u64,
    pub ele_bytes: u64,
    pub events_lost: u64,
}

/// `struct hv_rule`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawRule {
    pub src: [u32; 4],
    pub src_mask: [u32; 4],
    pub dst: [u32; 4],
    pub dst_mask: [u32; 4],
    pub sport_lo: u16,
    pub sport_hi: u16,
    pub dport_lo: u16,
    pub dport_hi: u16,
    pub allow: u8,
    pub proto: u8,
    pub family: u8,
    pub pad: u8,
}

/// `struct hv_cfg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawCfg {
    pub chain: [[u8; 4]; 2],
    pub clock_ns: u64,
    pub fw_rule_base: u32,
    pub fw_nrules: u32,
    pub fw_default_allow: u8,
    pub fw_loose: u8,
    pub fw_reverse_acl: u8,
    pub nat_snat: u8,
    pub nat_family: u8,
    pub nat_bank: u8,
    pub nat_lo: u16,
    pub nat_hi: u16,
    pub pad: [u8; 2],
    pub nat_public: [u32; 4],
    pub fw_timeouts: [u64; 13],
    pub nat_timeouts: [u64; 7],
    pub ele_min_bytes: u64,
    pub ele_min_window_bytes: u64,
    pub ele_window_ns: u64,
    pub limits: [u64; 3],
    pub fw_unacknowledged: u64,
}

/// `struct fw_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawFwVal {
    pub expires_ns: u64,
    pub sf: u32,
    pub pad: u32,
}

/// `struct nat_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawNatVal {
    pub twin: RawKey,
    pub addr: [u32; 4],
    pub expires_ns: u64,
    pub flags: u32,
    pub port: u16,
    pub pad: u16,
}

/// `struct dnat_key` (also the key of `nat_public`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawDnatKey {
    pub addr: [u32; 4],
    pub port: u16,
    pub proto: u8,
    pub bank: u8,
    pub family: u8,
    pub pad: [u8; 3],
}

/// `struct dnat_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawDnatVal {
    pub to_addr: [u32; 4],
    pub to_port: u16,
    pub pad: [u8; 6],
}

/// `struct ele_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawEleVal {
    pub bytes: u64,
    pub packets: u64,
    pub window_start_ns: u64,
    pub window_bytes: u64,
    pub last_ns: u64,
    pub elephant: u32,
    pub pad: u32,
}

/// `struct hv_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEvent {
    pub ts_ns: u64,
    pub key: RawKey,
    pub bytes: u64,
    pub packets: u64,
    pub window_bytes: u64,
    pub window_start_ns: u64,
}

macro_rules! raw {
    ($($t:ty),*) => {$(
        // SAFETY: repr(C), integer fields, explicit padding (sizes checked in tests).
        unsafe impl Raw for $t {}
        // SAFETY: as above.
        unsafe impl aya::Pod for $t {}
    )*};
}
raw!(
    RawKey,
    RawPortKey,
    RawPort,
    RawCounters,
    RawGauges,
    RawRule,
    RawCfg,
    RawFwVal,
    RawNatVal,
    RawDnatKey,
    RawDnatVal,
    RawEleVal,
    RawEvent
);
// SAFETY: integers.
unsafe impl Raw for u32 {}
// SAFETY: integers.
unsafe impl Raw for u64 {}

/// An address as the program stores it: network-order words, IPv4 in word 0.
pub fn addr_words(a: IpAddr) -> ([u32; 4], u8) {
    match a {
        IpAddr::V4(v) => ([u32::from_ne_bytes(v.octets()), 0, 0, 0], 4),
        IpAddr::V6(v) => {
            let o = v.octets();
            let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            ([w(0), w(4), w(8), w(12)], 6)
        }
    }
}

/// `addr/len` as the program matches it: network and mask words (network order) and
/// the family; `None` when `len` is longer than the address. The host bits are masked off.
pub fn prefix_words(addr: IpAddr, len: u8) -> Option<([u32; 4], [u32; 4], u8)> {
    let len = u32::from(len);
    let (net, mask) = match addr {
        IpAddr::V4(v) if len <= 32 => {
            let m = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            let n = u32::from(v) & m;
            (IpAddr::V4(n.into()), IpAddr::V4(m.into()))
        }
        IpAddr::V6(v) if len <= 128 => {
            let m = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            let n = u128::from(v) & m;
            (IpAddr::V6(n.into()), IpAddr::V6(m.into()))
        }
        _ => return None,
    };
    let (n, family) = addr_words(net);
    Some((n, addr_words(mask).0, family))
}

/// The address stored in `w` for `family`.
pub fn words_addr(w: &[u32; 4], family: u8) -> IpAddr {
    if family == 6 {
        let mut o = [0u8; 16];
        for (i, x) in w.iter().enumerate() {
            o[i * 4..i * 4 + 4].copy_from_slice(&x.to_ne_bytes());
        }
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        IpAddr::V4(Ipv4Addr::from(w[0].to_ne_bytes()))
    }
}

impl RawKey {
    /// A key from host-order values.
    pub fn new(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> Self {
        let (s, family) = addr_words(src);
        let (d, _) = addr_words(dst);
        Self {
            src: s,
            dst: d,
            sport: sport.to_be(),
            dport: dport.to_be(),
            proto,
            family,
            pad: [0; 2],
        }
    }

    /// Source address.
    pub fn src_addr(&self) -> IpAddr {
        words_addr(&self.src, self.family)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> IpAddr {
        words_addr(&self.dst, self.family)
    }

    /// Source port, host order.
    pub fn sport(&self) -> u16 {
        u16::from_be(self.sport)
    }

    /// Destination port, host order.
    pub fn dport(&self) -> u16 {
        u16::from_be(self.dport)
    }

    /// The same flow seen in the other direction.
    pub fn reversed(&self) -> Self {
        Self {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// True for a key of the program's canonical order (lower endpoint first).
    pub fn is_canonical(&self) -> bool {
        let host = |w: &[u32; 4]| w.map(u32::from_be);
        (host(&self.src), self.sport()) <= (host(&self.dst), self.dport())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_hvnf_h() {
        assert_eq!(size_of::<RawKey>(), 40);
        assert_eq!(size_of::<RawPort>(), 24);
        assert_eq!(size_of::<RawCounters>(), 24 + 8 * NREASONS);
        assert_eq!(size_of::<RawGauges>(), 80);
        assert_eq!(size_of::<RawRule>(), 76);
        assert_eq!(offset_of!(RawCfg, clock_ns), 8);
        assert_eq!(offset_of!(RawCfg, nat_lo), 30);
        assert_eq!(offset_of!(RawCfg, nat_public), 36);
        assert_eq!(offset_of!(RawCfg, fw_timeouts), 56);
        assert_eq!(offset_of!(RawCfg, nat_timeouts), 160);
        assert_eq!(size_of::<RawCfg>(), 272);
        assert_eq!(size_of::<RawFwVal>(), 16);
        assert_eq!(size_of::<RawNatVal>(), 72);
        assert_eq!(offset_of!(RawNatVal, flags), 64);
        assert_eq!(size_of::<RawDnatKey>(), 24);
        assert_eq!(size_of::<RawDnatVal>(), 24);
        assert_eq!(size_of::<RawEleVal>(), 48);
        assert_eq!(size_of::<RawEvent>(), 80);
    }

    #[test]
    fn keys_hold_frame_byte_order() {
        let k = RawKey::new(
            "10.0.1.2".parse().unwrap(),
            0x1234,
            "2001:db8::1".parse().unwrap(),
            80,
            6,
        );
        assert_eq!(k.src[0].to_ne_bytes(), [10, 0, 1, 2]);
        assert_eq!(k.sport.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!(k.dst[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(k.dst[3].to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(k.sport(), 0x1234);
        assert_eq!(words_addr(&k.src, 4), "10.0.1.2".parse::<IpAddr>().unwrap());
        let a = RawKey::new(
            "10.0.0.9".parse().unwrap(),
            1,
            "10.0.1.0".parse().unwrap(),
            9,
            6,
        );
        assert!(
            a.is_canonical() && !a.reversed().is_canonical(),
            "address first"
        );
        let b = RawKey::new(
            "10.0.0.9".parse().unwrap(),
            9,
            "10.0.0.9".parse().unwrap(),
            1,
            6,
        );
        assert!(
            !b.is_canonical() && b.reversed().is_canonical(),
            "then the port"
        );
    }
}
