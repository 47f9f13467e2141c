//! Fuzz target: the parser and every header rewriter must survive any bytes, and a
//! frame that parsed must still parse, with the rewritten key, after the rewrites.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_packet::checksum::checksum;
use nfx_packet::rewrite::{decrement_ttl, set_addr, set_inner, set_port, End};
use nfx_packet::{parse, Direction, Packet, PacketBuf, VnetHdr};

/// Writes a valid IPv4 header checksum for an untagged frame, so that mutations reach
/// the layers behind the checksum check instead of stopping there.
fn fix_ip_checksum(f: &mut [u8]) {
    if f.len() < 34 {
        return;
    }
    let ihl = usize::from(f[14] & 0x0f) * 4;
    if ihl < 20 || f.len() < 14 + ihl {
        return;
    }
    f[24] = 0;
    f[25] = 0;
    let c = checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    // First byte: bit 0 partial checksum mode, bit 1 repair the IP checksum.
    let Some((&mode, frame)) = data.split_first() else {
        return;
    };
    let mut frame = frame.to_vec();
    if mode & 2 != 0 {
        fix_ip_checksum(&mut frame);
    }
    let Ok(meta) = parse(&frame) else { return };
    let mut p = Packet::new(PacketBuf::from_frame(&frame), Direction::Forward);
    p.meta = meta;
    if mode & 1 != 0 {
        p.buf.vnet.flags = VnetHdr::F_NEEDS_CSUM;
    }
    set_addr(&mut p, End::Src, 0x0ac8_0264);
    set_port(&mut p, End::Src, u16::from(mode) << 4);
    set_addr(&mut p, End::Dst, 0x0a00_0001);
    set_port(&mut p, End::Dst, 443);
    set_inner(&mut p, End::Src, 0x0a00_0001, 443);
    let _ = decrement_ttl(&mut p);
    let again = parse(p.buf.frame()).expect("a rewritten frame still parses");
    assert_eq!(again.key, p.meta.key);
    assert_eq!(again.inner_key, p.meta.inner_key);
});
