//! Fuzz target: any sequence of frames, in either direction and at any pace, goes
//! through firewall → NAT → DPI → elephant detection without a panic, and the
//! firewall's and NAT's flow state exported afterwards imports whole into fresh nodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_packet::{parse, Direction, Packet, PacketBuf};
use nfx_vnf::{EventSink, NodeCtx};
use nfx_vnf_fuzz::{chain, exported, node};

/// Most packets per vector, as in the runtime's small vectors.
const VECTOR: usize = 8;

fuzz_target!(|data: &[u8]| {
    let mut nodes = chain();
    let mut sink = EventSink::default();
    let mut now_ns = 1_000_000_000u64;
    let mut rest = data;
    let mut vector = Vec::new();
    // Each frame: control byte (bit 0 reverse direction, bits 1..7 time step in 10 ms),
    // length byte, then the frame bytes.
    while let [ctl, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (frame, next) = tail.split_at(len);
        rest = next;
        now_ns += u64::from(ctl >> 1) * 10_000_000;
        let dir = if ctl & 1 == 0 {
            Direction::Forward
        } else {
            Direction::Reverse
        };
        let Ok(meta) = parse(frame) else { continue };
        let mut p = Packet::new(PacketBuf::from_frame(frame), dir);
        p.meta = meta;
        vector.push(p);
        if vector.len() == VECTOR || rest.len() < 2 {
            for n in nodes.iter_mut() {
                let mut ctx = NodeCtx {
                    now_ns,
                    events: &mut sink,
                };
                n.process(&mut vector, &mut ctx);
                n.expire(now_ns);
            }
            vector.clear();
        }
    }
    for i in 0..2 {
        let (count, blob) = exported(nodes[i].as_ref());
        let mut fresh = node(i);
        assert_eq!(
            fresh.import_state(&blob),
            Ok(count),
            "node {i} re-imports its export"
        );
    }
});
