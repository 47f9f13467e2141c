//! PRESENT (Bogdanov et al., CHES 2007), 80- and 128-bit keys, with the S-box layer and
//! bit permutation merged into eight 256-entry tables (one per state byte).

use zeroize::{Zeroize, ZeroizeOnDrop};

const SBOX: [u8; 16] = [
    0xc, 0x5, 0x6, 0xb, 0x9, 0x0, 0xa, 0xd, 0x3, 0xe, 0xf, 0x8, 0x4, 0x7, 0x1, 0x2,
];

/// The pLayer: bit i moves to 16·i mod 63 (bit 63 stays).
const fn p_bit(i: u32) -> u32 {
    if i == 63 {
        63
    } else {
        (16 * i) % 63
    }
}

const fn make_sp() -> [[u64; 256]; 8] {
    let mut t = [[0u64; 256]; 8];
    let mut byte = 0;
    while byte < 8 {
        let mut v = 0;
        while v < 256 {
            let s = ((SBOX[v >> 4] as u64) << 4) | SBOX[v & 0xf] as u64;
            let mut out = 0u64;
            let mut b = 0;
            while b < 8 {
                if (s >> b) & 1 == 1 {
                    out |= 1 << p_bit(byte as u32 * 8 + b);
                }
                b += 1;
            }
            t[byte][v] = out;
            v += 1;
        }
        byte += 1;
    }
    t
}

/// S-box layer followed by pLayer, per state byte.
static SP: [[u64; 256]; 8] = make_sp();

/// An expanded PRESENT key (32 round keys).
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub(crate) struct Present {
    rk: [u64; 32],
}

impl Present {
    /// Expands a 10-byte (PRESENT-80) or 16-byte (PRESENT-128) key.
    pub(crate) fn new(key: &[u8]) -> Option<Present> {
        let mut rk = [0u64; 32];
        match key.len() {
            10 => {
                let mut k = [0u8; 16];
                k[6..].copy_from_slice(key);
                let mut reg = u128::from_be_bytes(k);
                k.zeroize();
                let mask = (1u128 << 80) - 1;
                for (i, r) in rk.iter_mut().enumerate() {
                    *r = (reg >> 16) as u64;
                    reg = ((reg << 61) | (reg >> 19)) & mask;
                    let top = SBOX[(reg >> 76) as usize & 0xf] as u128;
                    reg = (reg & !(0xf << 76)) | (top << 76);
                    reg ^= ((i as u128 + 1) & 0x1f) << 15;
                }
                reg.zeroize();
            }
            16 => {
                let mut reg = u128::from_be_bytes(key.try_into().ok()?);
                for (i, r) in rk.iter_mut().enumerate() {
                    *r = (reg >> 64) as u64;
                    reg = reg.rotate_left(61);
                    let hi = SBOX[(reg >> 124) as usize & 0xf] as u128;
                    let lo = SBOX[(reg >> 120) as usize & 0xf] as u128;
                    reg = (reg & !(0xff << 120)) | (hi << 124) | (lo << 120);
                    reg ^= ((i as u128 + 1) & 0x1f) << 62;
                }
                reg.zeroize();
            }
            _ => return None,
        }
        Some(Present { rk })
    }

    /// The 32 round keys (the bitsliced engine turns them into plane masks).
    pub(crate) fn round_keys(&self) -> &[u64; 32] {
        &self.rk
    }

    /// Encrypts one 64-bit block (big-endian integer view).
    #[inline]
    pub(crate) fn encrypt(&self, mut s: u64) -> u64 {
        for k in &self.rk[..31] {
            s ^= k;
            let b = s.to_le_bytes();
            s = SP[0][b[0] as usize]
                ^ SP[1][b[1] as usize]
                ^ SP[2][b[2] as usize]
                ^ SP[3][b[3] as usize]
                ^ SP[4][b[4] as usize]
                ^ SP[5][b[5] as usize]
                ^ SP[6][b[6] as usize]
                ^ SP[7][b[7] as usize];
        }
        s ^ self.rk[31]
    }

    /// XORs the CTR keystream (64-bit big-endian counter starting at `ctr`) into `data`.
    pub(crate) fn ctr_xor(&self, ctr: &[u8; 8], data: &mut [u8]) {
        let mut c = u64::from_be_bytes(*ctr);
        for chunk in data.chunks_mut(8) {
            let ks = self.encrypt(c).to_be_bytes();
            for (d, k) in chunk.iter_mut().zip(ks.iter()) {
                *d ^= k;
            }
            c = c.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(key: &[u8], pt: u64) -> u64 {
        Present::new(key).unwrap().encrypt(pt)
    }

    /// Bogdanov et al., CHES 2007, Appendix I (PRESENT-80 test vectors).
    #[test]
    fn present80_paper_vectors() {
        assert_eq!(enc(&[0; 10], 0), 0x5579c1387b228445);
        assert_eq!(enc(&[0xff; 10], 0), 0xe72c46c0f5945049);
        assert_eq!(enc(&[0; 10], u64::MAX), 0xa112ffc72f68417b);
        assert_eq!(enc(&[0xff; 10], u64::MAX), 0x3333dcd3213210d2);
    }

    /// PRESENT-128: the all-zero vector is from A. Poschmann, "Lightweight Cryptography",
    /// PhD thesis, Ruhr-University Bochum 2009; the other three are the widely published
    /// companion set (as in ISO/IEC 29192-2 implementations' known-answer tests).
    #[test]
    fn present128_published_vectors() {
        assert_eq!(enc(&[0; 16], 0), 0x96db702a2e6900af);
        assert_eq!(enc(&[0xff; 16], 0), 0x13238c710272a5d8);
        assert_eq!(enc(&[0; 16], u64::MAX), 0x3c6019e5e5edd563);
        assert_eq!(enc(&[0xff; 16], u64::MAX), 0x628d9fbd4218e5b4);
    }

    #[test]
    fn rejects_other_key_sizes() {
        assert!(Present::new(&[0; 12]).is_none());
    }
}
