//! The bitsliced PRESENT core, generic over the vector type: plane `i` of the state holds
//! bit `i` of every block in flight (64 blocks per `u64`, 256 per AVX2 register), so the
//! S-box layer is a 14-gate Boolean circuit run on whole registers and the pLayer is a
//! renaming of planes — the way an FPGA pipeline does one round on many blocks at once.

/// A vector of `WORDS` 64-bit words, each word carrying 64 blocks' bits of one plane.
pub(super) trait Lanes: Copy {
    /// 64-bit words per vector (1 for `u64`, 4 for AVX2).
    const WORDS: usize;
    /// Every word set to `m`.
    fn splat(m: u64) -> Self;
    /// Bitwise XOR.
    fn xor(self, o: Self) -> Self;
    /// Bitwise AND.
    fn and(self, o: Self) -> Self;
    /// Bitwise OR.
    fn or(self, o: Self) -> Self;
    /// Bitwise NOT.
    fn not(self) -> Self;
    /// Each word shifted right by `J`.
    fn shr<const J: i32>(self) -> Self;
    /// Each word shifted left by `J`.
    fn shl<const J: i32>(self) -> Self;
    /// Reads `WORDS` words from `w[0..WORDS]`.
    fn load(w: &[u64]) -> Self;
    /// Writes `WORDS` words to `w[0..WORDS]`.
    fn store(self, w: &mut [u64]);
}

impl Lanes for u64 {
    const WORDS: usize = 1;
    #[inline(always)]
    fn splat(m: u64) -> Self {
        m
    }
    #[inline(always)]
    fn xor(self, o: Self) -> Self {
        self ^ o
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn or(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn not(self) -> Self {
        !self
    }
    #[inline(always)]
    fn shr<const J: i32>(self) -> Self {
        self >> J
    }
    #[inline(always)]
    fn shl<const J: i32>(self) -> Self {
        self << J
    }
    #[inline(always)]
    fn load(w: &[u64]) -> Self {
        w[0]
    }
    #[inline(always)]
    fn store(self, w: &mut [u64]) {
        w[0] = self;
    }
}

/// Round keys as plane masks: word `64·r + i` is all ones when bit `i` of round key `r`
/// is set, else zero (32 round keys × 64 bits).
pub(super) const MASK_WORDS: usize = 32 * 64;

/// The PRESENT S-box (C56B90AD3EF84712) as a 14-gate circuit (Courtois, Hulme and
/// Mourouzis's bitsliced formula). `x0`/`y0` are the least significant bits of the
/// input/output nibble.
#[inline(always)]
fn sbox<V: Lanes>(x0: V, x1: V, x2: V, x3: V) -> (V, V, V, V) {
    let t1 = x1.xor(x2);
    let t2 = x2.and(t1);
    let t3 = x3.xor(t2);
    let y0 = x0.xor(t3);
    let t2 = t1.and(t3);
    let t1 = t1.xor(y0);
    let t2 = t2.xor(x2);
    let t4 = x0.or(t2);
    let y1 = t1.xor(t4);
    let t2 = t2.xor(x0.not());
    let y3 = y1.xor(t2);
    let t2 = t2.or(t1);
    let y2 = t3.xor(t2);
    (y0, y1, y2, y3)
}

/// One round: add round key `k`, S-box layer, pLayer (bit `4j + b` goes to `j + 16b`).
#[inline(always)]
fn round<V: Lanes>(s: &[V; 64], d: &mut [V; 64], k: &[u64]) {
    for j in 0..16 {
        let x = |b: usize| s[4 * j + b].xor(V::splat(k[4 * j + b]));
        let (y0, y1, y2, y3) = sbox(x(0), x(1), x(2), x(3));
        d[j] = y0;
        d[j + 16] = y1;
        d[j + 32] = y2;
        d[j + 48] = y3;
    }
}

/// One stage of the 64×64 bit-matrix transpose, on every word at once: swaps the bits of
/// row `r` in columns with bit `J` set with those of row `r + J` in columns without.
#[inline(always)]
fn swap_stage<V: Lanes, const J: i32>(a: &mut [V; 64], m: u64) {
    let mask = V::splat(m);
    let j = J as usize;
    for r in 0..64 {
        if r & j == 0 {
            let t = a[r].shr::<J>().xor(a[r + j]).and(mask);
            a[r + j] = a[r + j].xor(t);
            a[r] = a[r].xor(t.shl::<J>());
        }
    }
}

/// Transposes each word's 64×64 bit matrix: row `r` bit `c` ↔ row `c` bit `r`. Its own
/// inverse, so the same code turns blocks into planes and planes back into blocks.
#[inline(always)]
fn transpose<V: Lanes>(a: &mut [V; 64]) {
    swap_stage::<V, 32>(a, 0x0000_0000_ffff_ffff);
    swap_stage::<V, 16>(a, 0x0000_ffff_0000_ffff);
    swap_stage::<V, 8>(a, 0x00ff_00ff_00ff_00ff);
    swap_stage::<V, 4>(a, 0x0f0f_0f0f_0f0f_0f0f);
    swap_stage::<V, 2>(a, 0x3333_3333_3333_3333);
    swap_stage::<V, 1>(a, 0x5555_5555_5555_5555);
}

/// Encrypts `64 · V::WORDS` blocks in place. `rows[r · WORDS + w]` holds block `64w + r`
/// (see `slot`); `masks` are the round-key plane masks (`MASK_WORDS` words).
#[inline(always)]
pub(super) fn encrypt_pass<V: Lanes>(rows: &mut [u64], masks: &[u64]) {
    let w = V::WORDS;
    assert!(rows.len() >= 64 * w && masks.len() >= MASK_WORDS);
    let mut a = [V::splat(0); 64];
    for (r, v) in a.iter_mut().enumerate() {
        *v = V::load(&rows[r * w..]);
    }
    transpose(&mut a);
    let mut b = [V::splat(0); 64];
    for r in 0..15 {
        round(&a, &mut b, &masks[128 * r..]);
        round(&b, &mut a, &masks[128 * r + 64..]);
    }
    round(&a, &mut b, &masks[30 * 64..]);
    for (i, v) in b.iter_mut().enumerate() {
        *v = v.xor(V::splat(masks[31 * 64 + i]));
    }
    transpose(&mut b);
    for (r, v) in b.iter().enumerate() {
        v.store(&mut rows[r * w..]);
    }
}

/// Where block `k` of a pass with `words` words per vector lives in `rows`.
#[inline(always)]
pub(super) fn slot(k: usize, words: usize) -> usize {
    (k % 64) * words + k / 64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SBOX: [u64; 16] = [
        0xc, 0x5, 0x6, 0xb, 0x9, 0x0, 0xa, 0xd, 0x3, 0xe, 0xf, 0x8, 0x4, 0x7, 0x1, 0x2,
    ];

    /// The circuit, run on 16 lanes holding the 16 inputs, gives the S-box table.
    #[test]
    fn sbox_circuit_matches_the_table() {
        let plane = |b: u32| (0..16u64).fold(0u64, |acc, x| acc | (((x >> b) & 1) << x));
        let (y0, y1, y2, y3) = sbox(plane(0), plane(1), plane(2), plane(3));
        for (x, want) in SBOX.iter().enumerate() {
            let bit = |p: u64, b: u32| ((p >> x) & 1) << b;
            assert_eq!(
                bit(y0, 0) | bit(y1, 1) | bit(y2, 2) | bit(y3, 3),
                *want,
                "S({x:x})"
            );
        }
    }

    #[test]
    fn transpose_is_a_transpose() {
        let mut a = [0u64; 64];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for v in a.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *v = x;
        }
        let orig = a;
        transpose(&mut a);
        for (r, row) in orig.iter().enumerate() {
            for (c, col) in a.iter().enumerate() {
                assert_eq!((col >> r) & 1, (row >> c) & 1);
            }
        }
        transpose(&mut a);
        assert_eq!(a, orig);
    }
}
