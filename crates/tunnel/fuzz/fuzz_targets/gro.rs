//! Fuzz target: the receive-side coalescer takes any decrypted packets (a peer holding
//! the key can send anything). Nothing panics; every packet it takes comes out exactly
//! once, in a piece that lies inside that packet; a joined frame's IP length is its
//! real length; and no frame exceeds the IPv4 maximum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_tunnel::gro::{Gro, Piece};
use nfx_tunnel::offload::VnetHdr;

fuzz_target!(|data: &[u8]| {
    // Packets: a 2-byte little-endian length, then the bytes. A length of 0xffff ends
    // the batch (flush), as the worker does after each receive batch.
    let mut batches: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
    let mut rest = data;
    while let [lo, hi, tail @ ..] = rest {
        let n = usize::from(u16::from_le_bytes([*lo, *hi]));
        if n == 0xffff {
            batches.push(Vec::new());
            rest = tail;
            continue;
        }
        let n = n.min(tail.len());
        let (p, next) = tail.split_at(n);
        batches.last_mut().expect("a batch").push(p.to_vec());
        rest = next;
    }
    let mut gro = Gro::default();
    for pkts in &batches {
        let mut seen = vec![0u32; pkts.len()];
        let mut taken = vec![false; pkts.len()];
        let mut emit = |head: &[u8], pieces: &[Piece], segs: u64, bytes: u64| {
            assert_eq!(segs, pieces.len() as u64);
            let ip = &head[VnetHdr::LEN..];
            let mut len = ip.len();
            let mut sum = 0u64;
            for pc in pieces {
                let p = &pkts[pc.id];
                assert!(
                    pc.start <= pc.end && pc.end <= p.len(),
                    "piece outside packet"
                );
                seen[pc.id] += 1;
                len += pc.end - pc.start;
                sum += p.len() as u64;
            }
            assert_eq!(bytes, sum);
            assert!(len <= 65535, "frame over the IPv4 maximum");
            if pieces.len() > 1 {
                assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), len);
            }
        };
        for (id, p) in pkts.iter().enumerate() {
            taken[id] = gro.push(id, p, &mut emit);
        }
        gro.flush(&mut emit);
        for id in 0..pkts.len() {
            assert_eq!(
                seen[id],
                u32::from(taken[id]),
                "packet {id} emitted wrongly"
            );
        }
    }
});
