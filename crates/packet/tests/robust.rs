//! Hostile input: random bytes, truncations and mutations of valid frames must never
//! make the parser or the rewriters panic, and whatever parses must still parse, with
//! the key the rewrite set, afterwards. (The same job as the cargo-fuzz target, run
//! in CI on stable.)

mod common;

use common::{ping, tcp, udp};
use nfx_packet::checksum::checksum;
use nfx_packet::rewrite::{decrement_ttl, set_addr, set_inner, set_port, End};
use nfx_packet::{parse, Direction, Packet, PacketBuf, VnetHdr};
use proptest::prelude::*;

/// Parses `frame`; when it parses, applies every rewrite (with full and with
/// partial checksums) and checks the result.
fn exercise(frame: &[u8]) -> Result<(), TestCaseError> {
    exercise_mode(frame, false)?;
    exercise_mode(frame, true)
}

fn exercise_mode(frame: &[u8], partial: bool) -> Result<(), TestCaseError> {
    let Ok(meta) = parse(frame) else {
        return Ok(());
    };
    let mut p = Packet::new(PacketBuf::from_frame(frame), Direction::Forward);
    p.meta = meta;
    if partial {
        p.buf.vnet.flags = VnetHdr::F_NEEDS_CSUM;
    }
    set_addr(&mut p, End::Src, 0x0ac80264);
    set_port(&mut p, End::Src, 4096);
    set_addr(&mut p, End::Dst, 0x0a000001);
    set_port(&mut p, End::Dst, 80);
    set_inner(&mut p, End::Src, 0x0a000001, 80);
    let _ = decrement_ttl(&mut p);
    let again = parse(p.buf.frame());
    prop_assert!(
        again.is_ok(),
        "rewritten frame no longer parses: {:?}",
        again
    );
    prop_assert_eq!(again.unwrap().key, p.meta.key);
    Ok(())
}

fn seeds() -> Vec<Vec<u8>> {
    vec![
        tcp(
            [10, 0, 0, 1],
            [10, 0, 1, 2],
            1000,
            80,
            0x12,
            b"GET / HTTP/1.1",
        ),
        udp([10, 0, 0, 1], [10, 0, 1, 2], 1000, 53, b"abcd"),
        ping([10, 0, 0, 1], [10, 0, 1, 2], 7, b"ping"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn random_bytes(frame in proptest::collection::vec(any::<u8>(), 0..128)) {
        exercise(&frame)?;
    }

    #[test]
    fn random_ipv4_like(mut frame in proptest::collection::vec(any::<u8>(), 34..128)) {
        // Plausible Ethernet + IPv4 start so the fuzzing reaches deeper layers.
        frame[12] = 0x08;
        frame[13] = 0x00;
        frame[14] = 0x40 | (frame[14] & 0x0f);
        exercise(&frame)?;
        // The same with a valid header checksum, to get past that check.
        let ihl = usize::from(frame[14] & 0x0f) * 4;
        if ihl >= 20 && frame.len() >= 14 + ihl {
            frame[24] = 0;
            frame[25] = 0;
            let c = checksum(&frame[14..14 + ihl]);
            frame[24..26].copy_from_slice(&c.to_be_bytes());
            exercise(&frame)?;
        }
    }

    #[test]
    fn mutated_and_truncated(which in 0usize..3, cut in 0usize..80,
                             flips in proptest::collection::vec((0usize..80, any::<u8>()), 0..6)) {
        let mut f = seeds()[which].clone();
        for (i, b) in flips {
            if i < f.len() {
                f[i] = b;
            }
        }
        f.truncate(f.len().saturating_sub(cut));
        exercise(&f)?;
    }
}
