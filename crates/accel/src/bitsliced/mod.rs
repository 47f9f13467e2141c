//! The `bitsliced` engine: PRESENT-80/128 in counter mode, bitsliced in the CPU's wide
//! vectors (AVX2 where the CPU has it, detected at run time; 64-bit words otherwise) and
//! across every operation of a batch — many packets' blocks go through the 31 rounds
//! together, as they would through an FPGA's pipelined cipher core. The `cpu` engine and
//! the lookaside device use the same code for PRESENT; the `soft` engine keeps the
//! portable table code (the SW-VNF baseline).

#[cfg(target_arch = "x86_64")]
mod avx2;
mod kernel;
mod present;

use aws_lc_rs::hmac;

pub(crate) use present::{xor_into, CtrRun, PresentBs};

use crate::backend::{Backend, SyncEngine};
use crate::{AccelError, Alg, Engine, EngineKind, SessionSpec};

/// Name of the vector instance PRESENT runs on here (`avx2` or `portable-u64`), for
/// benchmark reports.
pub fn present_isa() -> &'static str {
    match present::Isa::detect() {
        present::Isa::Avx2 => "avx2",
        present::Isa::Portable => "portable-u64",
    }
}

/// A PRESENT session: the bitsliced key and, for the CTR+HMAC transforms, the HMAC key
/// (aws-lc, with SHA-NI).
pub(crate) struct PresentSession {
    present: PresentBs,
    hmac: Option<hmac::Key>,
}

impl PresentSession {
    /// Expands the keys of a validated PRESENT spec.
    pub(crate) fn new(spec: &SessionSpec) -> Result<PresentSession, AccelError> {
        let present = PresentBs::new(spec.key.expose())
            .ok_or_else(|| AccelError::BadArgument(format!("{}: invalid key length", spec.alg)))?;
        let hmac = spec
            .alg
            .needs_auth_key()
            .then(|| hmac::Key::new(hmac::HMAC_SHA256, spec.auth_key.expose()));
        Ok(PresentSession { present, hmac })
    }

    /// XORs the keystream from counter block `iv` into `data`.
    pub(crate) fn ctr_xor(&self, iv: &[u8], data: &mut [u8]) {
        self.present
            .ctr_xor(iv.try_into().expect("iv length checked"), data)
    }

    /// HMAC-SHA-256 over `aad ‖ data` (CTR+HMAC sessions; zeros for a cipher alone,
    /// whose tag is empty).
    pub(crate) fn mac(&self, aad: &[u8], data: &[u8], out: &mut [u8; 32]) {
        match &self.hmac {
            Some(k) => {
                let mut ctx = hmac::Context::with_key(k);
                ctx.update(aad);
                ctx.update(data);
                out.copy_from_slice(ctx.sign().as_ref());
            }
            None => out.fill(0),
        }
    }

    /// The bitsliced cipher, for keystream computed across a batch.
    pub(crate) fn cipher(&self) -> &PresentBs {
        &self.present
    }
}

/// Marker type selecting the bitsliced PRESENT implementation.
pub(crate) struct BitslicedBackend;

impl Backend for BitslicedBackend {
    type Session = PresentSession;
    const KIND: EngineKind = EngineKind::Bitsliced;

    fn new_session(spec: &SessionSpec) -> Result<PresentSession, AccelError> {
        PresentSession::new(spec)
    }

    fn aead_seal(_: &mut PresentSession, _: &[u8], _: &[u8], data: &mut [u8], tag: &mut [u8]) {
        // Unreachable: `supports` admits PRESENT sessions only, never an AEAD.
        data.fill(0);
        tag.fill(0);
    }

    fn aead_open(_: &mut PresentSession, _: &[u8], _: &[u8], _: &mut [u8], _: &[u8]) -> bool {
        false
    }

    fn ctr_xor(s: &mut PresentSession, iv: &[u8], data: &mut [u8]) {
        s.ctr_xor(iv, data)
    }

    fn mac(s: &mut PresentSession, aad: &[u8], data: &[u8], out: &mut [u8; 32]) {
        s.mac(aad, data, out)
    }

    fn supports(alg: Alg) -> bool {
        alg.is_present()
    }

    fn batcher(s: &PresentSession) -> Option<&PresentBs> {
        Some(s.cipher())
    }
}

/// A new `bitsliced` engine (PRESENT algorithms only; other algorithms are refused at
/// session creation with `BadArgument`).
pub fn bitsliced_engine() -> Box<dyn Engine> {
    Box::new(SyncEngine::<BitslicedBackend>::new())
}

#[cfg(test)]
mod tests {
    use super::present::Isa;
    use super::*;
    use crate::soft::present::Present;
    use proptest::prelude::*;

    fn isas() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        if Isa::detect() == Isa::Avx2 {
            v.push(Isa::Avx2);
        }
        v
    }

    fn encrypt_block(key: &[u8], isa: Isa, pt: u64) -> u64 {
        let mut ks = [0u8; 8];
        PresentBs::with_isa(key, isa)
            .unwrap()
            .keystream(&[CtrRun { ctr: pt, blocks: 1 }], &mut ks);
        u64::from_be_bytes(ks)
    }

    /// Bogdanov et al., CHES 2007, Appendix I, on every instance: the keystream of one
    /// counter block is the block cipher's output for that counter.
    #[test]
    fn present80_paper_vectors() {
        for isa in isas() {
            assert_eq!(encrypt_block(&[0; 10], isa, 0), 0x5579c1387b228445);
            assert_eq!(encrypt_block(&[0xff; 10], isa, 0), 0xe72c46c0f5945049);
            assert_eq!(encrypt_block(&[0; 10], isa, u64::MAX), 0xa112ffc72f68417b);
            assert_eq!(
                encrypt_block(&[0xff; 10], isa, u64::MAX),
                0x3333dcd3213210d2
            );
        }
    }

    /// PRESENT-128 vectors (the same set as the table code's test).
    #[test]
    fn present128_published_vectors() {
        for isa in isas() {
            assert_eq!(encrypt_block(&[0; 16], isa, 0), 0x96db702a2e6900af);
            assert_eq!(encrypt_block(&[0xff; 16], isa, 0), 0x13238c710272a5d8);
            assert_eq!(encrypt_block(&[0; 16], isa, u64::MAX), 0x3c6019e5e5edd563);
            assert_eq!(
                encrypt_block(&[0xff; 16], isa, u64::MAX),
                0x628d9fbd4218e5b4
            );
        }
    }

    #[test]
    fn refuses_other_algorithms_and_key_sizes() {
        let mut e = bitsliced_engine();
        assert!(!e.supports(Alg::Aes128Gcm));
        assert!(e.supports(Alg::Present80Ctr));
        let spec = SessionSpec::new(Alg::Aes128Gcm, crate::Direction::Encrypt, &[0; 16], &[]);
        assert!(matches!(
            e.create_session(spec),
            Err(AccelError::BadArgument(_))
        ));
        assert!(PresentBs::new(&[0; 12]).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Every instance gives the table code's keystream, for any key, counter (also
        /// wrapping past 2^64) and length, including partial blocks.
        #[test]
        fn ctr_matches_the_table_code(long_key in any::<bool>(),
                                      key in prop::collection::vec(any::<u8>(), 16),
                                      ctr in prop_oneof![any::<u64>(), (u64::MAX - 600)..=u64::MAX],
                                      data in prop::collection::vec(any::<u8>(), 0..5000)) {
            let key = if long_key { &key[..] } else { &key[..10] };
            let mut want = data.clone();
            Present::new(key).unwrap().ctr_xor(&ctr.to_be_bytes(), &mut want);
            for isa in isas() {
                let mut got = data.clone();
                PresentBs::with_isa(key, isa).unwrap().ctr_xor(&ctr.to_be_bytes(), &mut got);
                prop_assert_eq!(&got, &want, "{:?}", isa);
            }
        }

        /// The keystream of many runs computed in shared passes equals each run's own.
        #[test]
        fn runs_share_passes_without_mixing(key in prop::collection::vec(any::<u8>(), 10),
                                            runs in prop::collection::vec((any::<u64>(), 0usize..300), 1..12)) {
            let runs: Vec<CtrRun> = runs.into_iter().map(|(ctr, blocks)| CtrRun { ctr, blocks }).collect();
            let total: usize = runs.iter().map(|r| r.blocks).sum();
            let table = Present::new(&key).unwrap();
            let mut want = Vec::with_capacity(total * 8);
            for r in &runs {
                for i in 0..r.blocks {
                    want.extend_from_slice(&table.encrypt(r.ctr.wrapping_add(i as u64)).to_be_bytes());
                }
            }
            for isa in isas() {
                let mut got = vec![0u8; total * 8];
                PresentBs::with_isa(&key, isa).unwrap().keystream(&runs, &mut got);
                prop_assert_eq!(&got, &want, "{:?}", isa);
            }
        }
    }
}
