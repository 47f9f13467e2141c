//! The framing of exported flow state (live migration): a 12-byte header followed by
//! fixed-size records. Header: magic `NFXS`, format version, node kind, record size
//! (u16 LE), record count (u32 LE). Nodes define their record layouts.

use crate::node::StateError;

/// Magic bytes opening every state blob.
pub const MAGIC: [u8; 4] = *b"NFXS";
/// Format version written and accepted.
pub const VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 12;

/// Which node wrote a blob (a firewall blob must not be loaded into a NAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BlobKind {
    /// Stateful firewall connection tracking.
    Firewall = 1,
    /// NAT mappings.
    Nat = 2,
    /// Connection tracking with IPv4 and IPv6 flows (table tier, `nfx_fastpath::table`).
    FirewallWide = 3,
    /// NAT mappings with IPv4 and IPv6 addresses (table tier).
    NatWide = 4,
    /// Elephant-detection flow counters (table tier).
    Elephant = 5,
}

/// Appends the header for `count` records of `rec_len` bytes; returns where the
/// count sits so the writer can patch it after writing the records.
pub fn write_header(out: &mut Vec<u8>, kind: BlobKind, rec_len: usize) -> usize {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&(rec_len as u16).to_le_bytes());
    let at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    at
}

/// Patches the record count written by [`write_header`].
pub fn patch_count(out: &mut [u8], at: usize, count: usize) {
    out[at..at + 4].copy_from_slice(&(count as u32).to_le_bytes());
}

/// Checks the header and the length of a blob; returns its records.
pub fn records(data: &[u8], kind: BlobKind, rec_len: usize) -> Result<Vec<&[u8]>, StateError> {
    if data.len() < HEADER_LEN {
        return Err(StateError::Malformed(format!(
            "{} bytes, shorter than the header",
            data.len()
        )));
    }
    if data[0..4] != MAGIC {
        return Err(StateError::Malformed(
            "bad magic (not an nfx state blob)".into(),
        ));
    }
    if data[4] != VERSION {
        return Err(StateError::Malformed(format!(
            "format version {} (expected {VERSION})",
            data[4]
        )));
    }
    if data[5] != kind as u8 {
        return Err(StateError::WrongKind {
            expected: kind as u8,
            found: data[5],
        });
    }
    let len = usize::from(u16::from_le_bytes([data[6], data[7]]));
    if len != rec_len {
        return Err(StateError::Malformed(format!(
            "record size {len} (expected {rec_len})"
        )));
    }
    let count = u32::from_le_bytes([data[8], data[9], data[10], data[11]]) as usize;
    let body = &data[HEADER_LEN..];
    if body.len() != count * rec_len {
        return Err(StateError::Malformed(format!(
            "{} body bytes for {count} records of {rec_len} bytes",
            body.len()
        )));
    }
    Ok(body.chunks_exact(rec_len).collect())
}

/// Little-endian field readers for record decoding.
pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Little-endian u32 at `at`.
pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Remaining lifetime in milliseconds (saturating), as records store it.
pub fn remaining_ms(expires_ns: u64, now_ns: u64) -> u32 {
    (expires_ns.saturating_sub(now_ns) / 1_000_000).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_errors() {
        let mut v = Vec::new();
        let at = write_header(&mut v, BlobKind::Nat, 4);
        v.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        patch_count(&mut v, at, 2);
        let r = records(&v, BlobKind::Nat, 4).unwrap();
        assert_eq!(r, vec![&[1, 2, 3, 4][..], &[5, 6, 7, 8][..]]);
        assert!(matches!(
            records(&v, BlobKind::Firewall, 4),
            Err(StateError::WrongKind { .. })
        ));
        assert!(matches!(
            records(&v, BlobKind::Nat, 8),
            Err(StateError::Malformed(_))
        ));
        assert!(matches!(
            records(&v[..15], BlobKind::Nat, 4),
            Err(StateError::Malformed(_))
        ));
        assert!(matches!(
            records(&v[..5], BlobKind::Nat, 4),
            Err(StateError::Malformed(_))
        ));
        let mut bad = v.clone();
        bad[0] = b'X';
        assert!(matches!(
            records(&bad, BlobKind::Nat, 4),
            Err(StateError::Malformed(_))
        ));
    }
}
