//! The AVX2 instance of the bitsliced core: 256 blocks per pass in 256-bit registers.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::kernel::{encrypt_pass, Lanes};

/// Blocks per AVX2 pass.
pub(super) const LANES: usize = 256;

/// A 256-bit register of four plane words. Values exist only inside `pass`, which runs
/// only where AVX2 was detected at run time.
#[derive(Clone, Copy)]
struct Avx2(__m256i);

// SAFETY (every method): the intrinsics need AVX2, and an `Avx2` value is only created
// inside `pass`, which `PresentBs` calls only after `is_x86_feature_detected!("avx2")`.
impl Lanes for Avx2 {
    const WORDS: usize = 4;
    #[inline(always)]
    fn splat(m: u64) -> Self {
        unsafe { Avx2(_mm256_set1_epi64x(m as i64)) }
    }
    #[inline(always)]
    fn xor(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_xor_si256(self.0, o.0)) }
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_and_si256(self.0, o.0)) }
    }
    #[inline(always)]
    fn or(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_or_si256(self.0, o.0)) }
    }
    #[inline(always)]
    fn not(self) -> Self {
        unsafe { Avx2(_mm256_xor_si256(self.0, _mm256_set1_epi64x(-1))) }
    }
    #[inline(always)]
    fn shr<const J: i32>(self) -> Self {
        unsafe { Avx2(_mm256_srli_epi64::<J>(self.0)) }
    }
    #[inline(always)]
    fn shl<const J: i32>(self) -> Self {
        unsafe { Avx2(_mm256_slli_epi64::<J>(self.0)) }
    }
    #[inline(always)]
    fn load(w: &[u64]) -> Self {
        assert!(w.len() >= 4);
        // SAFETY: four readable words; unaligned load.
        unsafe { Avx2(_mm256_loadu_si256(w.as_ptr().cast())) }
    }
    #[inline(always)]
    fn store(self, w: &mut [u64]) {
        assert!(w.len() >= 4);
        // SAFETY: four writable words; unaligned store.
        unsafe { _mm256_storeu_si256(w.as_mut_ptr().cast(), self.0) }
    }
}

/// Encrypts 256 blocks in place (`rows` laid out as `kernel::slot` says).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pass(rows: &mut [u64; LANES], masks: &[u64]) {
    encrypt_pass::<Avx2>(rows, masks);
}
