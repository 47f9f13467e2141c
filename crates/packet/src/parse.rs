//! Header parsing: Ethernet (+ up to two VLAN tags), IPv4 (with options), TCP, UDP,
//! ICMP (with the embedded header of ICMP errors), into [`Meta`].

use crate::checksum::sum16;
use crate::{DropReason, FlowKey};

/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// EtherType of an 802.1Q VLAN tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETH_P_8021AD: u16 = 0x88a8;
/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

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
    /// For ICMP errors (unreachable, time exceeded, ...): offset of the embedded IPv4
    /// header of the packet that caused the error; 0 when there is none.
    pub inner_l3: usize,
    /// For ICMP errors: offset of the embedded TCP/UDP/ICMP header (first 8 bytes).
    pub inner_l4: usize,
    /// For ICMP errors: the flow key of the embedded packet, as that packet was sent.
    pub inner_key: FlowKey,
}

impl Meta {
    /// True when this is an ICMP error that carries a parsable embedded header, so
    /// stateful nodes can relate it to the flow that caused it.
    pub fn has_inner(&self) -> bool {
        self.inner_l3 != 0
    }
}

/// True for ICMP types that are errors carrying the offending packet's headers.
pub fn icmp_is_error(icmp_type: u8) -> bool {
    matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
}

/// True for ICMP echo request/reply, whose identifier acts as a port.
pub fn icmp_is_echo(icmp_type: u8) -> bool {
    matches!(icmp_type, 0 | 8)
}

/// Parses an Ethernet frame. Non-IPv4, truncated and malformed frames (bad IHL, total
/// length, options, checksum, L4 header), TTL 0 and non-first fragments return the
/// [`DropReason`] that the parse node counts. Never panics, whatever the bytes.
pub fn parse(frame: &[u8]) -> Result<Meta, DropReason> {
    let (ethertype, l3) = parse_ethernet(frame)?;
    if ethertype != ETH_P_IPV4 {
        return Err(DropReason::NonIp);
    }
    let ip = &frame[l3..];
    let (ihl, total) = check_ipv4_header(ip)?;
    if sum16(&ip[..ihl], 0) != 0xffff {
        return Err(DropReason::BadIpChecksum);
    }
    let ttl = ip[8];
    if ttl == 0 {
        return Err(DropReason::TtlExpired);
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    if frag & 0x1fff != 0 {
        return Err(DropReason::Fragment);
    }
    let first_fragment = frag & 0x2000 != 0;
    let mut meta = Meta {
        l3,
        l4: l3 + ihl,
        ip_end: l3 + total,
        ttl,
        first_fragment,
        ..Meta::default()
    };
    meta.key.src = be32(&ip[12..16]);
    meta.key.dst = be32(&ip[16..20]);
    meta.key.proto = ip[9];
    let l4 = &ip[ihl..total];
    let short = if first_fragment {
        DropReason::Fragment
    } else {
        DropReason::BadL4Header
    };
    match meta.key.proto {
        IPPROTO_TCP => {
            if l4.len() < 20 {
                return Err(short);
            }
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 {
                return Err(DropReason::BadL4Header);
            }
            if doff > l4.len() {
                return Err(short);
            }
            meta.key.sport = be16(&l4[0..2]);
            meta.key.dport = be16(&l4[2..4]);
            meta.tcp_flags = l4[13];
            meta.payload = meta.l4 + doff;
        }
        IPPROTO_UDP => {
            if l4.len() < 8 {
                return Err(short);
            }
            let ulen = usize::from(be16(&l4[4..6]));
            // A first fragment carries only part of the datagram the length covers.
            if ulen < 8 || (!first_fragment && ulen > l4.len()) {
                return Err(DropReason::BadL4Header);
            }
            meta.key.sport = be16(&l4[0..2]);
            meta.key.dport = be16(&l4[2..4]);
            meta.payload = meta.l4 + 8;
        }
        IPPROTO_ICMP => {
            if l4.len() < 8 {
                return Err(short);
            }
            meta.icmp_type = l4[0];
            if icmp_is_echo(l4[0]) {
                let id = be16(&l4[4..6]);
                meta.key.sport = id;
                meta.key.dport = id;
            } else if icmp_is_error(l4[0]) && !first_fragment {
                parse_icmp_inner(&mut meta, &l4[8..]);
            }
            meta.payload = meta.l4 + 8;
        }
        _ => meta.payload = meta.l4,
    }
    Ok(meta)
}

/// Reads the Ethernet header and up to two VLAN tags; returns the inner EtherType and
/// the offset of the network header.
fn parse_ethernet(frame: &[u8]) -> Result<(u16, usize), DropReason> {
    if frame.len() < 14 {
        return Err(DropReason::Truncated);
    }
    let mut off = 14;
    let mut ethertype = be16(&frame[12..14]);
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        if frame.len() < off + 4 {
            return Err(DropReason::Truncated);
        }
        ethertype = be16(&frame[off + 2..off + 4]);
        off += 4;
    }
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        // More than two tags: nfx does not go deeper.
        return Err(DropReason::NonIp);
    }
    Ok((ethertype, off))
}

/// Validates version, IHL, total length and options of the IPv4 header at the start
/// of `ip`; returns (header length, total length).
fn check_ipv4_header(ip: &[u8]) -> Result<(usize, usize), DropReason> {
    if ip.len() < 20 {
        return Err(DropReason::Truncated);
    }
    if ip[0] >> 4 != 4 {
        return Err(DropReason::BadIpHeader);
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(be16(&ip[2..4]));
    if ihl < 20 || total < ihl {
        return Err(DropReason::BadIpHeader);
    }
    if ip.len() < total {
        return Err(DropReason::Truncated);
    }
    check_ipv4_options(&ip[20..ihl])?;
    Ok((ihl, total))
}

/// Walks the IPv4 options (RFC 791): every option other than End-of-List and NOP must
/// carry a length of at least 2 that stays inside the header.
fn check_ipv4_options(opts: &[u8]) -> Result<(), DropReason> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return Ok(()),
            1 => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1).ok_or(DropReason::BadIpHeader)?);
                if len < 2 || i + len > opts.len() {
                    return Err(DropReason::BadIpHeader);
                }
                i += len;
            }
        }
    }
    Ok(())
}

/// Parses the packet embedded in an ICMP error (its IPv4 header and the first 8 bytes
/// of its L4 header). A malformed embedded packet leaves `inner_l3` at 0: the error is
/// then simply unrelated to any flow.
fn parse_icmp_inner(meta: &mut Meta, inner: &[u8]) {
    if inner.len() < 20 || inner[0] >> 4 != 4 {
        return;
    }
    let ihl = usize::from(inner[0] & 0x0f) * 4;
    if ihl < 20 || inner.len() < ihl + 8 || check_ipv4_options(&inner[20..ihl]).is_err() {
        return;
    }
    let l4 = &inner[ihl..];
    let mut key = FlowKey {
        src: be32(&inner[12..16]),
        dst: be32(&inner[16..20]),
        proto: inner[9],
        ..FlowKey::default()
    };
    match key.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            key.sport = be16(&l4[0..2]);
            key.dport = be16(&l4[2..4]);
        }
        IPPROTO_ICMP if icmp_is_echo(l4[0]) => {
            key.sport = be16(&l4[4..6]);
            key.dport = key.sport;
        }
        _ => {}
    }
    meta.inner_l3 = meta.l4 + 8;
    meta.inner_l4 = meta.inner_l3 + ihl;
    meta.inner_key = key;
}

/// Big-endian u16 from a 2-byte slice.
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Big-endian u32 from a 4-byte slice.
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
