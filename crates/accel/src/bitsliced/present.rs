//! PRESENT-80/128 in counter mode on the bitsliced core: the keystream of many counter
//! blocks — of one operation or of a whole batch of operations — is computed 256 (AVX2)
//! or 64 (portable `u64`) blocks at a time, with no table lookups (constant time).

use zeroize::{Zeroize, ZeroizeOnDrop};

use super::kernel::{encrypt_pass, slot, MASK_WORDS};
use crate::soft::present::Present;

/// A run of consecutive counter blocks: the keystream of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CtrRun {
    /// First 64-bit counter block (big-endian view of the 8-byte IV).
    pub ctr: u64,
    /// Number of 8-byte blocks.
    pub blocks: usize,
}

/// Which instance of the core runs the passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Zeroize)]
pub(crate) enum Isa {
    /// 256 blocks per pass in AVX2 registers.
    Avx2,
    /// 64 blocks per pass in 64-bit general registers.
    Portable,
}

impl Isa {
    /// The widest instance this CPU runs.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
        Isa::Portable
    }

    /// Blocks per pass.
    pub(crate) fn lanes(self) -> usize {
        match self {
            Isa::Avx2 => 256,
            Isa::Portable => 64,
        }
    }
}

/// Largest pass (AVX2), sizing the scratch buffers.
const MAX_LANES: usize = 256;

/// An expanded PRESENT key as round-key plane masks (zeroized on drop).
#[derive(Zeroize, ZeroizeOnDrop)]
pub(crate) struct PresentBs {
    masks: Vec<u64>,
    isa: Isa,
}

impl PresentBs {
    /// Expands a 10-byte (PRESENT-80) or 16-byte (PRESENT-128) key for the widest
    /// instance this CPU runs.
    pub(crate) fn new(key: &[u8]) -> Option<PresentBs> {
        Self::with_isa(key, Isa::detect())
    }

    /// Expands a key for a chosen instance (tests compare the instances).
    pub(crate) fn with_isa(key: &[u8], isa: Isa) -> Option<PresentBs> {
        let p = Present::new(key)?;
        let mut masks = Vec::with_capacity(MASK_WORDS);
        for rk in p.round_keys() {
            masks.extend((0..64).map(|i| 0u64.wrapping_sub((rk >> i) & 1)));
        }
        Some(PresentBs { masks, isa })
    }

    /// Encrypts one pass of blocks in `rows` (laid out by `kernel::slot` for this
    /// instance) in place.
    fn pass(&self, rows: &mut [u64; MAX_LANES]) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` is only chosen where AVX2 was detected.
            Isa::Avx2 => unsafe { super::avx2::pass(rows, &self.masks) },
            _ => encrypt_pass::<u64>(rows, &self.masks),
        }
    }

    /// Writes the keystream of `runs`, back to back, into `out` (8 bytes per block;
    /// `out` holds at least the total number of blocks × 8). Blocks of different runs
    /// share passes, as packets share an FPGA pipeline.
    pub(crate) fn keystream(&self, runs: &[CtrRun], out: &mut [u8]) {
        let lanes = self.isa.lanes();
        let words = lanes / 64;
        let mut rows = [0u64; MAX_LANES];
        let mut filled = 0;
        let mut written = 0;
        for run in runs {
            for i in 0..run.blocks {
                rows[slot(filled, words)] = run.ctr.wrapping_add(i as u64);
                filled += 1;
                if filled == lanes {
                    self.pass(&mut rows);
                    write_blocks(out, written, &rows, filled, words);
                    written += filled;
                    filled = 0;
                }
            }
        }
        if filled > 0 {
            self.pass(&mut rows);
            write_blocks(out, written, &rows, filled, words);
        }
    }

    /// XORs the keystream starting at counter block `ctr` into `data` (the portable
    /// engine's `Present::ctr_xor`, computed a pass at a time).
    pub(crate) fn ctr_xor(&self, ctr: &[u8; 8], data: &mut [u8]) {
        let mut ks = [0u8; MAX_LANES * 8];
        let step = self.isa.lanes() * 8;
        let mut c = u64::from_be_bytes(*ctr);
        for chunk in data.chunks_mut(step) {
            let blocks = chunk.len().div_ceil(8);
            self.keystream(&[CtrRun { ctr: c, blocks }], &mut ks);
            xor_into(chunk, &ks);
            c = c.wrapping_add(blocks as u64);
        }
    }
}

/// Copies `n` encrypted blocks of a pass to `out`, from block `first` on.
fn write_blocks(out: &mut [u8], first: usize, rows: &[u64; MAX_LANES], n: usize, words: usize) {
    for k in 0..n {
        let at = (first + k) * 8;
        out[at..at + 8].copy_from_slice(&rows[slot(k, words)].to_be_bytes());
    }
}

/// `data ^= ks` over `data`'s length (`ks` is at least as long).
pub(crate) fn xor_into(data: &mut [u8], ks: &[u8]) {
    for (d, k) in data.iter_mut().zip(ks) {
        *d ^= k;
    }
}
