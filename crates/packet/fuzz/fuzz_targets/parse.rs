//! Fuzz target: the parser and every header rewriter must survive any bytes, and a
//! frame that parsed must still parse, with the rewritten key, after the rewrites.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_packet::rewrite::{decrement_ttl, set_addr, set_inner, set_port, End};
use nfx_packet::{parse, Direction, Packet, PacketBuf, VnetHdr};

fuzz_target!(|data: &[u8]| {
    // First byte chooses the checksum mode, the rest is the frame.
    let Some((&mode, frame)) = data.split_first() else { return };
    let Ok(meta) = parse(frame) else { return };
    let mut p = Packet::new(PacketBuf::from_frame(frame), Direction::Forward);
    p.meta = meta;
    if mode & 1 == 1 {
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
});
