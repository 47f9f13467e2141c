//! Internet checksums (RFC 1071) for the offload paths: segmenting GSO super-packets
//! and coalescing received segments both rewrite or verify IP/TCP/UDP checksums per
//! packet, so the sum is the tunnel's hottest loop after the cipher. It adds 32-bit
//! little-endian words into eight 64-bit lanes (no carry chain, so the compiler
//! vectorises it; with AVX2 when the CPU has it) and swaps the folded sum to network
//! order at the end (RFC 1071 §2(B): the one's-complement sum is byte-order independent).

/// Bytes summed into one set of lanes before they are folded: far below the 2³² words
/// a 64-bit lane can take without overflow.
const BLOCK: usize = 1 << 20;

/// Sum of `data` read as little-endian 32-bit words (the last one zero-padded) in 64-bit
/// arithmetic; `data.len()` must not exceed [`BLOCK`].
#[inline(always)]
fn words(data: &[u8]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let w = [c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]];
            *lane += u32::from_le_bytes(w) as u64;
        }
    }
    let mut sum: u64 = lanes.iter().sum();
    let mut rest = chunks.remainder().chunks_exact(4);
    for c in &mut rest {
        sum += u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64;
    }
    let mut tail = [0u8; 4];
    tail[..rest.remainder().len()].copy_from_slice(rest.remainder());
    sum + u32::from_le_bytes(tail) as u64
}

/// [`words`] compiled for AVX2 (four lanes per instruction).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn words_avx2(data: &[u8]) -> u64 {
    words(data)
}

/// [`words`] with the widest vector unit this CPU has.
fn words_fast(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected on this CPU just above.
        return unsafe { words_avx2(data) };
    }
    words(data)
}

/// One's-complement sum of `data` (big-endian 16-bit words) added to `acc`, not folded.
pub fn add(mut acc: u64, data: &[u8]) -> u64 {
    for block in data.chunks(BLOCK) {
        let be = fold(words_fast(block)).swap_bytes() as u64;
        let (s, carry) = acc.overflowing_add(be);
        acc = s + carry as u64;
    }
    acc
}

/// Folds a running sum to 16 bits (not complemented).
pub fn fold(acc: u64) -> u16 {
    let mut s = (acc >> 32) + (acc & 0xffff_ffff);
    s = (s >> 32) + (s & 0xffff_ffff);
    s = (s >> 16) + (s & 0xffff);
    s = (s >> 16) + (s & 0xffff);
    s as u16
}

/// The checksum to store over `data` (complement of the folded sum).
pub fn checksum(data: &[u8]) -> u16 {
    !fold(add(0, data))
}

/// Pseudo-header sum (RFC 793 / RFC 8200 §8.1) for protocol `proto` and L4 length `len`,
/// with the addresses taken from the IP header `ip` (version from its first nibble).
pub fn pseudo(ip: &[u8], proto: u8, len: usize) -> u64 {
    let addrs = if ip[0] >> 4 == 4 {
        &ip[12..20]
    } else {
        &ip[8..40]
    };
    add(0, addrs) + proto as u64 + len as u64
}

/// Recomputes the IPv4 header checksum of `hdr` (its IHL bytes) in place.
pub fn set_ipv4(hdr: &mut [u8]) {
    hdr[10] = 0;
    hdr[11] = 0;
    let c = checksum(hdr);
    hdr[10..12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            s += w as u64;
        }
        while s > 0xffff {
            s = (s >> 16) + (s & 0xffff);
        }
        !(s as u16)
    }

    #[test]
    fn matches_bytewise_reference_for_all_lengths() {
        let data: Vec<u8> = (0..600u32).map(|i| (i * 131 + 7) as u8).collect();
        for n in 0..data.len() {
            assert_eq!(checksum(&data[..n]), reference(&data[..n]), "len {n}");
        }
        assert_eq!(checksum(&[0xff; 4096]), reference(&[0xff; 4096]));
    }

    #[test]
    fn vector_and_portable_sums_agree_at_every_alignment() {
        let data: Vec<u8> = (0..2100u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for off in 0..4 {
            for n in [0, 1, 3, 31, 32, 33, 63, 64, 65, 1400, 1401, 2000] {
                let d = &data[off..off + n];
                assert_eq!(fold(words(d)), fold(words_fast(d)), "off {off} len {n}");
                assert_eq!(checksum(d), reference(d), "off {off} len {n}");
            }
        }
    }

    #[test]
    fn sums_longer_than_a_block_fold_correctly() {
        let data = vec![0xffu8; BLOCK * 2 + 6];
        assert_eq!(checksum(&data), reference(&data));
        let ramp: Vec<u8> = (0..BLOCK + 3).map(|i| (i % 251) as u8).collect();
        assert_eq!(checksum(&ramp), reference(&ramp));
    }

    #[test]
    fn running_sum_continues_across_calls() {
        let data: Vec<u8> = (0..900u32).map(|i| (i * 37 + 11) as u8).collect();
        let split = fold(add(add(0, &data[..400]), &data[400..]));
        assert_eq!(!split, reference(&data));
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(add(0, &d)), 0xddf2);
    }

    #[test]
    fn ipv4_header_checksum_verifies() {
        let mut h = [
            0x45, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 64, 1, 0xaa, 0xbb, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        set_ipv4(&mut h);
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn pseudo_header_counts_addresses_proto_and_length() {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[12..16].copy_from_slice(&[1, 2, 3, 4]);
        h[16..20].copy_from_slice(&[5, 6, 7, 8]);
        assert_eq!(
            fold(pseudo(&h, 6, 100)),
            0x0102 + 0x0304 + 0x0506 + 0x0708 + 6 + 100
        );
    }
}
