//! A fast keyed hash of a [`FlowKey`] for the flow tables: two folded 64×64→128-bit
//! multiplies (the wyhash/foldhash construction), seeded per table so that an
//! outside sender cannot precompute colliding flows.

use nfx_packet::FlowKey;
use std::hash::{BuildHasher, Hasher};

/// Per-table hash seed and function.
#[derive(Debug, Clone, Copy)]
pub struct FlowHasher {
    k0: u64,
    k1: u64,
}

const C0: u64 = 0x243f_6a88_85a3_08d3;
const C1: u64 = 0x1319_8a2e_0370_7344;

fn folded_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl FlowHasher {
    /// A hasher with a random seed (from the standard library's per-process keys).
    pub fn random() -> Self {
        let s = std::collections::hash_map::RandomState::new();
        let mut h = s.build_hasher();
        h.write_u64(C0);
        let k0 = h.finish();
        h.write_u64(C1);
        Self::with_seed(k0, h.finish())
    }

    /// A hasher with a fixed seed (reproducible tests).
    pub fn with_seed(k0: u64, k1: u64) -> Self {
        Self {
            k0: k0 ^ C0,
            k1: k1 ^ C1,
        }
    }

    /// The 64-bit hash of `key`.
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        let a = (u64::from(key.src) << 32 | u64::from(key.dst)) ^ self.k0;
        let b = (u64::from(key.sport) << 40 | u64::from(key.dport) << 24 | u64::from(key.proto))
            ^ self.k1;
        folded_mul(folded_mul(a, b | 1) ^ self.k1, C0)
    }

    /// The 64-bit hash of a packed integer key (per-source and per-remote counts).
    #[inline]
    pub fn hash_u64(&self, x: u64) -> u64 {
        folded_mul(folded_mul(x ^ self.k0, self.k1 | 1) ^ self.k1, C0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_hash() {
        let h = FlowHasher::with_seed(1, 2);
        let k = FlowKey {
            src: 1,
            dst: 2,
            sport: 3,
            dport: 4,
            proto: 6,
        };
        let base = h.hash(&k);
        for v in [
            FlowKey { src: 9, ..k },
            FlowKey { dst: 9, ..k },
            FlowKey { sport: 9, ..k },
            FlowKey { dport: 9, ..k },
            FlowKey { proto: 17, ..k },
            k.reversed(),
        ] {
            assert_ne!(h.hash(&v), base, "{v}");
        }
        assert_ne!(FlowHasher::with_seed(3, 4).hash(&k), base, "seed matters");
    }

    #[test]
    fn low_and_high_halves_spread() {
        let h = FlowHasher::with_seed(7, 7);
        let mut lo = [0u32; 16];
        let mut hi = [0u32; 16];
        for p in 0..16_000u16 {
            let x = h.hash(&FlowKey {
                src: 0x0a000001,
                dst: 0x0a000002,
                sport: p,
                dport: 80,
                proto: 6,
            });
            lo[((x as u32) >> 28) as usize] += 1;
            hi[(x >> 60) as usize] += 1;
        }
        for c in lo.iter().chain(hi.iter()) {
            assert!((800..1200).contains(c), "skewed bucket count {c}");
        }
    }
}
