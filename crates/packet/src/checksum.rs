//! Internet checksums (RFC 1071) and their incremental update (RFC 1624).

/// One's-complement sum of `data` folded to 16 bits, not complemented.
pub fn sum16(data: &[u8], initial: u32) -> u16 {
    let mut sum = u64::from(initial);
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([*b, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum to store for `data` (complement of [`sum16`]).
pub fn checksum(data: &[u8]) -> u16 {
    !sum16(data, 0)
}
