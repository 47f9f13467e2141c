//! Internet checksums (RFC 1071) for the offload paths: segmenting GSO super-packets
//! and coalescing received segments both rewrite IP/TCP/UDP checksums per packet, so
//! the sum runs 8 bytes at a time.

/// One's-complement sum of `data` (big-endian 16-bit words) added to `acc`, not folded.
pub fn add(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let (s, carry) = acc.overflowing_add(w);
        acc = s + carry as u64;
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    let w = u64::from_be_bytes(tail);
    let (s, carry) = acc.overflowing_add(w);
    s + carry as u64
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
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            s += w as u32;
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
