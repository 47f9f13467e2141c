//! Header parsing: Ethernet (+ one VLAN tag), IPv4, TCP, UDP, ICMP, into [`Meta`].

use crate::{DropReason, FlowKey};

/// What a parse learned about a frame: header offsets, the flow key and the fields
/// that stateful nodes read on every packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// Offset of the IPv4 header.
    pub l3: usize,
    /// Offset of the TCP/UDP/ICMP header.
    pub l4: usize,
    /// Offset of the L4 payload.
    pub payload: usize,
    /// End of the IP packet (frame may carry Ethernet padding after it).
    pub ip_end: usize,
    /// The 5-tuple.
    pub key: FlowKey,
    /// TCP flags byte (0 for other protocols).
    pub tcp_flags: u8,
    /// ICMP type (0 for other protocols).
    pub icmp_type: u8,
    /// IPv4 TTL.
    pub ttl: u8,
    /// First fragment of a fragmented datagram (more-fragments set, offset 0).
    pub first_fragment: bool,
}

/// Parses an Ethernet frame. Non-IPv4, truncated and malformed frames, and non-first
/// fragments, return the [`DropReason`] that the parse node counts.
pub fn parse(frame: &[u8]) -> Result<Meta, DropReason> {
    let mut off = 14;
    if frame.len() < off {
        return Err(DropReason::Truncated);
    }
    let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype == 0x8100 {
        if frame.len() < 18 {
            return Err(DropReason::Truncated);
        }
        ethertype = u16::from_be_bytes([frame[16], frame[17]]);
        off = 18;
    }
    if ethertype != 0x0800 {
        return Err(DropReason::NonIp);
    }
    let ip = &frame[off..];
    if ip.len() < 20 {
        return Err(DropReason::Truncated);
    }
    if ip[0] >> 4 != 4 {
        return Err(DropReason::BadIpHeader);
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ihl < 20 || total < ihl {
        return Err(DropReason::BadIpHeader);
    }
    if ip.len() < total {
        return Err(DropReason::Truncated);
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    let more_fragments = frag & 0x2000 != 0;
    if frag & 0x1fff != 0 {
        return Err(DropReason::Fragment);
    }
    let proto = ip[9];
    let mut meta = Meta {
        l3: off,
        l4: off + ihl,
        ip_end: off + total,
        ttl: ip[8],
        first_fragment: more_fragments,
        ..Meta::default()
    };
    meta.key.src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
    meta.key.dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    meta.key.proto = proto;
    let l4 = &ip[ihl..total];
    match proto {
        6 => {
            if l4.len() < 20 {
                return Err(DropReason::BadL4Header);
            }
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return Err(DropReason::BadL4Header);
            }
            meta.key.sport = u16::from_be_bytes([l4[0], l4[1]]);
            meta.key.dport = u16::from_be_bytes([l4[2], l4[3]]);
            meta.tcp_flags = l4[13];
            meta.payload = meta.l4 + doff;
        }
        17 => {
            if l4.len() < 8 {
                return Err(DropReason::BadL4Header);
            }
            meta.key.sport = u16::from_be_bytes([l4[0], l4[1]]);
            meta.key.dport = u16::from_be_bytes([l4[2], l4[3]]);
            meta.payload = meta.l4 + 8;
        }
        1 => {
            if l4.len() < 8 {
                return Err(DropReason::BadL4Header);
            }
            meta.icmp_type = l4[0];
            if matches!(l4[0], 0 | 8) {
                let id = u16::from_be_bytes([l4[4], l4[5]]);
                meta.key.sport = id;
                meta.key.dport = id;
            }
            meta.payload = meta.l4 + 8;
        }
        _ => meta.payload = meta.l4,
    }
    Ok(meta)
}
