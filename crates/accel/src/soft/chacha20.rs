//! Scalar ChaCha20 (RFC 8439 §2.3/2.4), written so the compiler can keep the state in
//! registers; no SIMD intrinsics.

use zeroize::{Zeroize, ZeroizeOnDrop};

/// A ChaCha20 key.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub(crate) struct ChaCha20 {
    key: [u32; 8],
}

#[inline(always)]
fn qr(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

impl ChaCha20 {
    /// A cipher for a 32-byte key; `None` for other lengths.
    pub(crate) fn new(key: &[u8]) -> Option<ChaCha20> {
        if key.len() != 32 {
            return None;
        }
        let mut k = [0u32; 8];
        for (w, c) in k.iter_mut().zip(key.chunks_exact(4)) {
            *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        Some(ChaCha20 { key: k })
    }

    /// The 64-byte block for `counter` and a 12-byte `nonce`.
    pub(crate) fn block(&self, counter: u32, nonce: &[u8; 12]) -> [u8; 64] {
        let n = |i: usize| {
            u32::from_le_bytes([
                nonce[4 * i],
                nonce[4 * i + 1],
                nonce[4 * i + 2],
                nonce[4 * i + 3],
            ])
        };
        let init: [u32; 16] = [
            0x6170_7865,
            0x3320_646e,
            0x7962_2d32,
            0x6b20_6574,
            self.key[0],
            self.key[1],
            self.key[2],
            self.key[3],
            self.key[4],
            self.key[5],
            self.key[6],
            self.key[7],
            counter,
            n(0),
            n(1),
            n(2),
        ];
        let mut s = init;
        for _ in 0..10 {
            qr(&mut s, 0, 4, 8, 12);
            qr(&mut s, 1, 5, 9, 13);
            qr(&mut s, 2, 6, 10, 14);
            qr(&mut s, 3, 7, 11, 15);
            qr(&mut s, 0, 5, 10, 15);
            qr(&mut s, 1, 6, 11, 12);
            qr(&mut s, 2, 7, 8, 13);
            qr(&mut s, 3, 4, 9, 14);
        }
        let mut out = [0u8; 64];
        for i in 0..16 {
            out[4 * i..4 * i + 4].copy_from_slice(&s[i].wrapping_add(init[i]).to_le_bytes());
        }
        out
    }

    /// XORs the keystream starting at block `counter` into `data`.
    pub(crate) fn xor(&self, counter: u32, nonce: &[u8; 12], data: &mut [u8]) {
        let mut ctr = counter;
        for chunk in data.chunks_mut(64) {
            let ks = self.block(ctr, nonce);
            for (d, k) in chunk.iter_mut().zip(ks.iter()) {
                *d ^= k;
            }
            ctr = ctr.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8439_block_2_3_2() {
        let key: Vec<u8> = (0..32).collect();
        let nonce = [0, 0, 0, 9, 0, 0, 0, 0x4a, 0, 0, 0, 0];
        let b = ChaCha20::new(&key).unwrap().block(1, &nonce);
        assert_eq!(&b[..8], &[0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15]);
        assert_eq!(&b[56..], &[0xcb, 0xd0, 0x83, 0xe8, 0xa2, 0x50, 0x3c, 0x4e]);
        assert!(ChaCha20::new(&[0; 16]).is_none());
    }
}
