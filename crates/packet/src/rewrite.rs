//! Header rewriting for NAT and forwarding: IPv4 addresses, ports, ICMP echo
//! identifiers, the packet embedded in ICMP errors, TTL and MAC addresses.
//!
//! Every rewrite updates the checksums incrementally (RFC 1624) instead of
//! recomputing them, and keeps [`Meta`](crate::Meta) in step with the bytes. Two kinds
//! of L4 checksum field are handled, as the kernel's `inet_proto_csum_replace4/2` do:
//! - full checksums: the field is updated for every changed covered word;
//! - `CHECKSUM_PARTIAL` (`buf.vnet.needs_csum()`, GSO super-packets from the kernel):
//!   the field holds the folded pseudo-header sum, not complemented; it changes with
//!   the pseudo-header (addresses) only, since the header words are summed later.
//!
//! A UDP checksum of 0 means "none" and stays 0. Callers pass packets that
//! [`parse`](crate::parse) accepted, so every offset used here is inside the frame.

use crate::checksum::{update16, update32, update32_partial};
use crate::parse::{be16, be32, icmp_is_echo, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use crate::{DropReason, Packet};

/// Which end of a packet (or of the packet embedded in an ICMP error) to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Source address / port.
    Src,
    /// Destination address / port.
    Dst,
}

/// Sets the IPv4 source or destination address; updates the IP header checksum and
/// the TCP/UDP pseudo-header checksum (full or partial).
pub fn set_addr(p: &mut Packet, end: End, addr: u32) {
    let m = p.meta;
    let partial = p.buf.vnet.needs_csum();
    let f = p.buf.frame_mut();
    let off = m.l3 + if end == End::Src { 12 } else { 16 };
    let old = be32(&f[off..off + 4]);
    if old == addr {
        return;
    }
    f[off..off + 4].copy_from_slice(&addr.to_be_bytes());
    let ipc = m.l3 + 10;
    let c = update32(be16(&f[ipc..ipc + 2]), old, addr);
    f[ipc..ipc + 2].copy_from_slice(&c.to_be_bytes());
    if let Some(co) = pseudo_checked_l4(m.key.proto, m.l4) {
        let cur = be16(&f[co..co + 2]);
        let new = if partial {
            update32_partial(cur, old, addr)
        } else if m.key.proto == IPPROTO_UDP && cur == 0 {
            0
        } else {
            udp_nonzero(m.key.proto, update32(cur, old, addr))
        };
        f[co..co + 2].copy_from_slice(&new.to_be_bytes());
    }
    match end {
        End::Src => p.meta.key.src = addr,
        End::Dst => p.meta.key.dst = addr,
    }
}

/// Sets the TCP/UDP source or destination port, or the ICMP echo identifier (which
/// stands for both ports), with the L4 checksum update. Other protocols are left as
/// they are.
pub fn set_port(p: &mut Packet, end: End, port: u16) {
    let m = p.meta;
    let partial = p.buf.vnet.needs_csum();
    let f = p.buf.frame_mut();
    match m.key.proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            let off = m.l4 + if end == End::Src { 0 } else { 2 };
            let co = pseudo_checked_l4(m.key.proto, m.l4).unwrap_or(off);
            replace16(
                f,
                off,
                port,
                (!partial).then_some(co),
                m.key.proto == IPPROTO_UDP,
            );
            match end {
                End::Src => p.meta.key.sport = port,
                End::Dst => p.meta.key.dport = port,
            }
        }
        IPPROTO_ICMP if icmp_is_echo(m.icmp_type) => {
            replace16(f, m.l4 + 4, port, (!partial).then_some(m.l4 + 2), false);
            p.meta.key.sport = port;
            p.meta.key.dport = port;
        }
        _ => {}
    }
}

/// Rewrites one end (address and port) of the packet embedded in an ICMP error:
/// the embedded IP header checksum, the embedded UDP (and TCP, when quoted)
/// checksum and the outer ICMP checksum all follow. No-op without an embedded packet.
pub fn set_inner(p: &mut Packet, end: End, addr: u32, port: u16) {
    let m = p.meta;
    if !m.has_inner() {
        return;
    }
    let icmp_c = (!p.buf.vnet.needs_csum()).then_some(m.l4 + 2);
    let f = p.buf.frame_mut();
    let ip = m.inner_l3;
    let proto = m.inner_key.proto;
    // The embedded L4 checksum, when it lies inside the quoted bytes.
    let l4c = pseudo_checked_l4(proto, m.inner_l4)
        .or_else(|| (proto == IPPROTO_ICMP).then_some(m.inner_l4 + 2))
        .filter(|&o| o + 2 <= m.ip_end);
    let aoff = ip + if end == End::Src { 12 } else { 16 };
    let old = be32(&f[aoff..aoff + 4]);
    replace16(f, aoff, (addr >> 16) as u16, icmp_c, false);
    replace16(f, aoff + 2, addr as u16, icmp_c, false);
    let ipc = ip + 10;
    let new_ipc = update32(be16(&f[ipc..ipc + 2]), old, addr);
    replace16(f, ipc, new_ipc, icmp_c, false);
    let udp = proto == IPPROTO_UDP;
    if let Some(co) = l4c.filter(|_| proto != IPPROTO_ICMP) {
        let cur = be16(&f[co..co + 2]);
        if !(udp && cur == 0) {
            replace16(
                f,
                co,
                udp_nonzero(proto, update32(cur, old, addr)),
                icmp_c,
                false,
            );
        }
    }
    let poff = match proto {
        IPPROTO_TCP | IPPROTO_UDP => Some(m.inner_l4 + if end == End::Src { 0 } else { 2 }),
        IPPROTO_ICMP if icmp_is_echo(f[m.inner_l4]) => Some(m.inner_l4 + 4),
        _ => None,
    };
    if let Some(po) = poff {
        let old_port = be16(&f[po..po + 2]);
        replace16(f, po, port, icmp_c, false);
        if let Some(co) = l4c {
            let cur = be16(&f[co..co + 2]);
            if !(udp && cur == 0) {
                replace16(
                    f,
                    co,
                    udp_nonzero(proto, update16(cur, old_port, port)),
                    icmp_c,
                    false,
                );
            }
        }
    }
    let k = &mut p.meta.inner_key;
    match end {
        End::Src => k.src = addr,
        End::Dst => k.dst = addr,
    }
    if poff.is_some() {
        match (end, proto) {
            (_, IPPROTO_ICMP) => (k.sport, k.dport) = (port, port),
            (End::Src, _) => k.sport = port,
            (End::Dst, _) => k.dport = port,
        }
    }
}

/// Decrements the TTL as a router does, updating the IP header checksum. A packet
/// whose TTL would reach zero is refused with [`DropReason::TtlExpired`].
pub fn decrement_ttl(p: &mut Packet) -> Result<(), DropReason> {
    let m = p.meta;
    let f = p.buf.frame_mut();
    let ttl = f[m.l3 + 8];
    if ttl <= 1 {
        return Err(DropReason::TtlExpired);
    }
    let old = be16(&f[m.l3 + 8..m.l3 + 10]);
    let new = old - 0x0100;
    f[m.l3 + 8..m.l3 + 10].copy_from_slice(&new.to_be_bytes());
    let ipc = m.l3 + 10;
    let c = update16(be16(&f[ipc..ipc + 2]), old, new);
    f[ipc..ipc + 2].copy_from_slice(&c.to_be_bytes());
    p.meta.ttl = ttl - 1;
    Ok(())
}

/// Sets the Ethernet source and destination MAC addresses (next hop).
pub fn set_macs(p: &mut Packet, src: [u8; 6], dst: [u8; 6]) {
    let f = p.buf.frame_mut();
    if f.len() >= 12 {
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
    }
}

/// Offset of the L4 checksum field that covers the pseudo-header (TCP, UDP).
fn pseudo_checked_l4(proto: u8, l4: usize) -> Option<usize> {
    match proto {
        IPPROTO_TCP => Some(l4 + 16),
        IPPROTO_UDP => Some(l4 + 6),
        _ => None,
    }
}

/// A computed UDP checksum of 0 is sent as 0xffff (0 means "no checksum").
fn udp_nonzero(proto: u8, c: u16) -> u16 {
    if proto == IPPROTO_UDP && c == 0 {
        0xffff
    } else {
        c
    }
}

/// Writes the 16-bit word at `off` and, when `check` is given, updates the checksum
/// stored there (a UDP checksum of 0 stays 0 when `udp` is set).
fn replace16(f: &mut [u8], off: usize, new: u16, check: Option<usize>, udp: bool) {
    let old = be16(&f[off..off + 2]);
    if old == new {
        return;
    }
    f[off..off + 2].copy_from_slice(&new.to_be_bytes());
    if let Some(co) = check {
        let cur = be16(&f[co..co + 2]);
        if udp && cur == 0 {
            return;
        }
        let c = update16(cur, old, new);
        let c = if udp && c == 0 { 0xffff } else { c };
        f[co..co + 2].copy_from_slice(&c.to_be_bytes());
    }
}
