//! GHASH with 8-bit tables, one per byte position (64 KiB per key, so a block costs 16
//! independent lookups instead of a dependent chain): no carry-less-multiply instructions.

use zeroize::{Zeroize, ZeroizeOnDrop};

/// GCM's reduction constant R = 11100001 ‖ 0^120 in the bit-reflected representation.
const R: u128 = 0xe1 << 120;

const fn make_rem() -> [u128; 256] {
    let mut t = [0u128; 256];
    let mut v = 0;
    while v < 256 {
        let mut z = v as u128;
        let mut i = 0;
        while i < 8 {
            let lsb = z & 1;
            z >>= 1;
            if lsb != 0 {
                z ^= R;
            }
            i += 1;
        }
        t[v] = z;
        v += 1;
    }
    t
}

/// Reduction of the 8 bits shifted out when multiplying by x^8.
static REM8: [u128; 256] = make_rem();

/// Multiplies a field element by x (a right shift in GCM's bit order).
fn mulx(v: u128) -> u128 {
    (v >> 1) ^ if v & 1 != 0 { R } else { 0 }
}

/// A GHASH key: for every byte position j and byte value b, b · x^(8j) · H.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub(crate) struct Ghash {
    tables: Box<[[u128; 256]; 16]>,
}

impl Ghash {
    /// Precomputes the tables for hash key `h` (big-endian block).
    pub(crate) fn new(h: &[u8; 16]) -> Ghash {
        let mut tables = Box::new([[0u128; 256]; 16]);
        let t0 = &mut tables[0];
        let mut v = u128::from_be_bytes(*h);
        // Byte value 0x80 is the coefficient of x^0 in a byte, 0x01 of x^7.
        let mut bit = 0x80;
        while bit != 0 {
            t0[bit] = v;
            v = mulx(v);
            bit >>= 1;
        }
        for i in 1..256usize {
            let low = i & i.wrapping_neg();
            if low != i {
                t0[i] = t0[low] ^ t0[i ^ low];
            }
        }
        for j in 1..16 {
            for b in 0..256 {
                let prev = tables[j - 1][b];
                tables[j][b] = (prev >> 8) ^ REM8[(prev & 0xff) as usize];
            }
        }
        Ghash { tables }
    }

    /// Returns (y ⊕ block) · H.
    #[inline]
    fn mul_block(&self, y: u128, block: &[u8; 16]) -> u128 {
        let x = (y ^ u128::from_be_bytes(*block)).to_be_bytes();
        let mut z = 0u128;
        for (t, &b) in self.tables.iter().zip(x.iter()) {
            z ^= t[b as usize];
        }
        z
    }

    /// Absorbs `data` zero-padded to whole blocks into the running value `y`.
    pub(crate) fn update_padded(&self, mut y: u128, data: &[u8]) -> u128 {
        let mut chunks = data.chunks_exact(16);
        for c in &mut chunks {
            y = self.mul_block(y, c.try_into().expect("16-byte chunk"));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut block = [0u8; 16];
            block[..rest.len()].copy_from_slice(rest);
            y = self.mul_block(y, &block);
        }
        y
    }

    /// Absorbs the final length block (bit lengths of AAD and ciphertext).
    pub(crate) fn finish(&self, y: u128, aad_len: usize, ct_len: usize) -> u128 {
        let lens = ((aad_len as u128 * 8) << 64) | (ct_len as u128 * 8);
        self.mul_block(y, &lens.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-by-bit multiplication from NIST SP 800-38D, Algorithm 1.
    fn slow_mul(x: u128, y: u128) -> u128 {
        let mut z = 0u128;
        let mut v = y;
        for i in 0..128 {
            if (x >> (127 - i)) & 1 == 1 {
                z ^= v;
            }
            v = mulx(v);
        }
        z
    }

    #[test]
    fn table_multiplication_matches_algorithm_1() {
        let h = 0x66e94bd4ef8a2c3b884cfa59ca342b2eu128;
        let g = Ghash::new(&h.to_be_bytes());
        for x in [
            1u128,
            0x0388dace60b6a392f328c2b971b2fe78,
            u128::MAX,
            1 << 127,
        ] {
            assert_eq!(g.mul_block(0, &x.to_be_bytes()), slow_mul(x, h));
        }
    }
}
