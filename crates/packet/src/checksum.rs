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

/// Folds a 32-bit one's-complement accumulator to 16 bits with end-around carry.
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// RFC 1624 eqn. 3: the stored checksum `check` after a 16-bit word of the covered
/// data changes from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    !fold(u32::from(!check) + u32::from(!old) + u32::from(new))
}

/// [`update16`] for a 32-bit field (an IPv4 address): both halves at once.
pub fn update32(check: u16, old: u32, new: u32) -> u16 {
    let sum = u32::from(!check)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(sum)
}

/// Update of a CHECKSUM_PARTIAL field, which holds the folded pseudo-header sum
/// itself (not complemented), when a 32-bit pseudo-header field changes: the kernel's
/// `inet_proto_csum_replace4(.., pseudohdr = true)` for `CHECKSUM_PARTIAL`.
pub fn update32_partial(partial: u16, old: u32, new: u32) -> u16 {
    !update32(!partial, old, new)
}

/// Sum of the IPv4 pseudo-header (addresses, protocol, L4 length), folded, not
/// complemented: what a CHECKSUM_PARTIAL L4 checksum field holds.
pub fn pseudo_header_sum(src: u32, dst: u32, proto: u8, l4_len: u16) -> u16 {
    fold(
        (src >> 16)
            + (src & 0xffff)
            + (dst >> 16)
            + (dst & 0xffff)
            + u32::from(proto)
            + u32::from(l4_len),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum16(&data, 0), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum16(&[0x12, 0x34, 0x56], 0), 0x1234 + 0x5600);
    }

    proptest! {
        #[test]
        fn incremental_equals_full(mut data in proptest::collection::vec(any::<u8>(), 4..64),
                                   idx in 0usize..30, new in any::<u16>()) {
            let i = (idx % (data.len() / 2)) * 2;
            // Data with a valid checksum never sums to zero unless it is all zero.
            prop_assume!(data.iter().any(|&b| b != 0));
            let check = checksum(&data);
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update16(check, old, new), checksum(&data));
        }

        #[test]
        fn update32_equals_two_update16(check in any::<u16>(), old in any::<u32>(), new in any::<u32>()) {
            let two = update16(update16(check, (old >> 16) as u16, (new >> 16) as u16), old as u16, new as u16);
            // Both are valid one's-complement results; compare modulo the ±0 ambiguity.
            let norm = |x: u16| if x == 0xffff { 0 } else { x };
            prop_assert_eq!(norm(update32(check, old, new)), norm(two));
        }

        #[test]
        fn partial_update_equals_fresh_pseudo_sum(src in any::<u32>(), dst in any::<u32>(),
                                                  new in any::<u32>(), len in any::<u16>()) {
            let before = pseudo_header_sum(src, dst, 6, len);
            let after = update32_partial(before, src, new);
            let norm = |x: u16| if x == 0xffff { 0 } else { x };
            prop_assert_eq!(norm(after), norm(pseudo_header_sum(new, dst, 6, len)));
        }
    }
}
