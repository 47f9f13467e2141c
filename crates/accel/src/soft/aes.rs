//! Table-based AES encryption (T-tables, as in libtomcrypt/OpenSSL's portable C code):
//! no AES instructions. Only the forward cipher is needed (GCM and CTR).

use zeroize::{Zeroize, ZeroizeOnDrop};

const fn xtime(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1b } else { 0 }
}

const fn make_sbox() -> [u8; 256] {
    let mut sbox = [0u8; 256];
    let mut p: u8 = 1;
    let mut q: u8 = 1;
    loop {
        // p runs through all non-zero elements (multiply by 3); q = p^-1 (divide by 3).
        p = p ^ xtime(p);
        q ^= q << 1;
        q ^= q << 2;
        q ^= q << 4;
        if q & 0x80 != 0 {
            q ^= 0x09;
        }
        let x = q ^ q.rotate_left(1) ^ q.rotate_left(2) ^ q.rotate_left(3) ^ q.rotate_left(4);
        sbox[p as usize] = x ^ 0x63;
        if p == 1 {
            break;
        }
    }
    sbox[0] = 0x63;
    sbox
}

/// The AES S-box.
pub(crate) const SBOX: [u8; 256] = make_sbox();

const fn make_te(rot: u32) -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let s = SBOX[i];
        let w = ((xtime(s) as u32) << 24)
            | ((s as u32) << 16)
            | ((s as u32) << 8)
            | ((xtime(s) ^ s) as u32);
        t[i] = w.rotate_right(rot);
        i += 1;
    }
    t
}

static TE0: [u32; 256] = make_te(0);
static TE1: [u32; 256] = make_te(8);
static TE2: [u32; 256] = make_te(16);
static TE3: [u32; 256] = make_te(24);

/// XORs a 16-byte keystream block into a 16-byte chunk as one 128-bit word.
#[inline(always)]
fn xor16(chunk: &mut [u8], ks: &[u8; 16]) {
    let d: &mut [u8; 16] = chunk.try_into().expect("16-byte chunk");
    *d = (u128::from_ne_bytes(*d) ^ u128::from_ne_bytes(*ks)).to_ne_bytes();
}

/// An expanded AES-128 or AES-256 encryption key.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub(crate) struct Aes {
    rk: [u32; 60],
    rounds: usize,
}

fn sub_word(w: u32) -> u32 {
    let b = w.to_be_bytes();
    u32::from_be_bytes([
        SBOX[b[0] as usize],
        SBOX[b[1] as usize],
        SBOX[b[2] as usize],
        SBOX[b[3] as usize],
    ])
}

impl Aes {
    /// Expands a 16- or 32-byte key; `None` for other lengths.
    pub(crate) fn new(key: &[u8]) -> Option<Aes> {
        let nk = match key.len() {
            16 => 4,
            32 => 8,
            _ => return None,
        };
        let rounds = nk + 6;
        let mut rk = [0u32; 60];
        for (i, c) in key.chunks_exact(4).enumerate() {
            rk[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        let mut rcon: u8 = 1;
        for i in nk..4 * (rounds + 1) {
            let mut t = rk[i - 1];
            if i % nk == 0 {
                t = sub_word(t.rotate_left(8)) ^ ((rcon as u32) << 24);
                rcon = xtime(rcon);
            } else if nk == 8 && i % nk == 4 {
                t = sub_word(t);
            }
            rk[i] = rk[i - nk] ^ t;
        }
        Some(Aes { rk, rounds })
    }

    /// Encrypts one 16-byte block.
    #[inline]
    pub(crate) fn encrypt_block(&self, block: &[u8; 16]) -> [u8; 16] {
        let rk = &self.rk;
        let w = |i: usize| {
            u32::from_be_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ])
        };
        let mut s0 = w(0) ^ rk[0];
        let mut s1 = w(1) ^ rk[1];
        let mut s2 = w(2) ^ rk[2];
        let mut s3 = w(3) ^ rk[3];
        let b = |x: u32, sh: u32| ((x >> sh) & 0xff) as usize;
        for k in rk[4..4 * self.rounds].chunks_exact(4) {
            let t0 = TE0[b(s0, 24)] ^ TE1[b(s1, 16)] ^ TE2[b(s2, 8)] ^ TE3[b(s3, 0)] ^ k[0];
            let t1 = TE0[b(s1, 24)] ^ TE1[b(s2, 16)] ^ TE2[b(s3, 8)] ^ TE3[b(s0, 0)] ^ k[1];
            let t2 = TE0[b(s2, 24)] ^ TE1[b(s3, 16)] ^ TE2[b(s0, 8)] ^ TE3[b(s1, 0)] ^ k[2];
            let t3 = TE0[b(s3, 24)] ^ TE1[b(s0, 16)] ^ TE2[b(s1, 8)] ^ TE3[b(s2, 0)] ^ k[3];
            s0 = t0;
            s1 = t1;
            s2 = t2;
            s3 = t3;
        }
        let k = &rk[4 * self.rounds..4 * self.rounds + 4];
        let last = |a: u32, bb: u32, c: u32, d: u32, k: u32| {
            (((SBOX[b(a, 24)] as u32) << 24)
                | ((SBOX[b(bb, 16)] as u32) << 16)
                | ((SBOX[b(c, 8)] as u32) << 8)
                | (SBOX[b(d, 0)] as u32))
                ^ k
        };
        let o0 = last(s0, s1, s2, s3, k[0]);
        let o1 = last(s1, s2, s3, s0, k[1]);
        let o2 = last(s2, s3, s0, s1, k[2]);
        let o3 = last(s3, s0, s1, s2, k[3]);
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&o0.to_be_bytes());
        out[4..8].copy_from_slice(&o1.to_be_bytes());
        out[8..12].copy_from_slice(&o2.to_be_bytes());
        out[12..16].copy_from_slice(&o3.to_be_bytes());
        out
    }

    /// XORs the CTR keystream into `data`; the whole 16-byte block `ctr` is the counter,
    /// incremented as a 128-bit big-endian number (SSH) — for RFC 3686/GCM counters that
    /// never wrap their low 32 bits this is the same sequence.
    pub(crate) fn ctr_xor(&self, ctr: &[u8; 16], data: &mut [u8]) {
        let mut c = u128::from_be_bytes(*ctr);
        let mut chunks = data.chunks_exact_mut(16);
        for chunk in &mut chunks {
            xor16(chunk, &self.encrypt_block(&c.to_be_bytes()));
            c = c.wrapping_add(1);
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let ks = self.encrypt_block(&c.to_be_bytes());
            for (d, k) in rest.iter_mut().zip(ks.iter()) {
                *d ^= k;
            }
        }
    }

    /// XORs the GCM keystream (32-bit counter `inc32`) starting at block `ctr` into `data`.
    pub(crate) fn ctr32_xor(&self, ctr: &[u8; 16], data: &mut [u8]) {
        let mut block = *ctr;
        let mut n = u32::from_be_bytes([ctr[12], ctr[13], ctr[14], ctr[15]]);
        let mut chunks = data.chunks_exact_mut(16);
        for chunk in &mut chunks {
            block[12..].copy_from_slice(&n.to_be_bytes());
            xor16(chunk, &self.encrypt_block(&block));
            n = n.wrapping_add(1);
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            block[12..].copy_from_slice(&n.to_be_bytes());
            let ks = self.encrypt_block(&block);
            for (d, k) in rest.iter_mut().zip(ks.iter()) {
                *d ^= k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        ::hex::decode(s).expect("a test vector in hex")
    }

    #[test]
    fn sbox_known_entries() {
        assert_eq!(SBOX[0x00], 0x63);
        assert_eq!(SBOX[0x01], 0x7c);
        assert_eq!(SBOX[0x53], 0xed);
        assert_eq!(SBOX[0xff], 0x16);
    }

    #[test]
    fn fips197_appendix_c() {
        let pt: [u8; 16] = hex("00112233445566778899aabbccddeeff").try_into().unwrap();
        let k128 = hex("000102030405060708090a0b0c0d0e0f");
        let k256 = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        assert_eq!(
            Aes::new(&k128).unwrap().encrypt_block(&pt).to_vec(),
            hex("69c4e0d86a7b0430d8cdb78070b4c55a")
        );
        assert_eq!(
            Aes::new(&k256).unwrap().encrypt_block(&pt).to_vec(),
            hex("8ea2b7ca516745bfeafc49904b496089")
        );
        assert!(Aes::new(&[0; 24]).is_none());
    }
}
