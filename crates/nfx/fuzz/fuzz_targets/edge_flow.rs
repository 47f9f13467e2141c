//! Fuzz target: the edge-video experiment's wire formats (`nfx experiment edge-video`),
//! which its VNFs and `dst` read from UDP datagrams and TCP streams anyone on the path can
//! write. Datagrams of any bytes go through `parse_record` and the `Chunker` (the edge
//! VNF's reorganisation into fixed-size chunks) and through `Frame::decode` (the cloud VNF
//! and `dst`). What must hold: nothing panics (overflow checks on); an emitted chunk has
//! the chunk size (the last one may be short) and holds exactly the bytes the records
//! carried at its place in the stream; a frame that decodes encodes back to the same
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

#[path = "../../src/cmd/experiment_edge/flow.rs"]
#[allow(dead_code)]
mod flow;

use flow::{parse_record, Chunker, Frame};

fuzz_target!(|data: &[u8]| {
    // First byte: the chunk size; then datagrams, each prefixed by a u16 length; the
    // stream's total length is the last record's end.
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let size = [128usize, 256, 512][usize::from(sel % 3)];
    let mut chunker = Chunker::new(size);
    // Every byte the records placed in the stream, last write wins: a chunk is emitted
    // only when the bytes since its start arrived in order, so it must equal these.
    let mut placed: BTreeMap<u64, u8> = BTreeMap::new();
    let mut total = 0u64;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let Some(dgram) = rest.get(2..2 + len) else {
            break;
        };
        rest = &rest[2 + len..];
        if let Some(f) = Frame::decode(dgram) {
            assert_eq!(f.encode(), dgram, "a decoded frame re-encodes to its bytes");
        }
        let Some((offset, _t, payload)) = parse_record(dgram) else {
            continue;
        };
        for (i, b) in payload.iter().enumerate() {
            placed.insert(offset.wrapping_add(i as u64), *b);
        }
        let mut chunk_ok = |k: u64, d: &mut Vec<u8>| -> anyhow::Result<()> {
            check_chunk(&placed, size, k, d);
            Ok(())
        };
        chunker.push(offset, payload, &mut chunk_ok).unwrap();
        total = offset.wrapping_add(payload.len() as u64);
    }
    chunker
        .finish(total, &mut |k, d| {
            check_chunk(&placed, size, k, d);
            Ok(())
        })
        .unwrap();
});

fn check_chunk(placed: &BTreeMap<u64, u8>, size: usize, k: u64, d: &[u8]) {
    assert!(!d.is_empty() && d.len() <= size, "chunk {k} of {} bytes", d.len());
    let start = k.wrapping_mul(size as u64);
    for (i, b) in d.iter().enumerate() {
        let at = start.wrapping_add(i as u64);
        assert_eq!(placed.get(&at), Some(b), "chunk {k} byte {i}");
    }
}
