//! The `cpu` engine: the processor's crypto instructions (AES-NI/VAES, PCLMUL/VPCLMUL,
//! SHA-NI, AVX-512) through the fastest well-kept library for each algorithm on the
//! running CPU: AES-GCM through aws-lc where it has its AVX-512 code, otherwise through
//! ring, whose VAES+AVX2 code runs twice as fast as aws-lc's AES-NI path on CPUs with
//! VAES but no AVX-512 (AMD Zen 3, Intel Alder Lake); everything else through aws-lc.
//! PRESENT has no instruction support; it runs bitsliced in the vector registers
//! (`crate::bitsliced`), its keystream computed across each batch.

use std::mem::MaybeUninit;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128};
use aws_lc_rs::{digest, hmac};

use crate::backend::{Backend, SyncEngine};
use crate::bitsliced::{PresentBs, PresentSession};
use crate::{AccelError, Alg, Engine, EngineKind, SessionSpec};

/// Expanded keys of one cpu session (aws-lc zeroizes its key schedules on drop). Sessions
/// live in a table and are created once, so variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CpuSession {
    Aead(LessSafeKey),
    RingGcm(RingGcm),
    AesCtr { ctr: EncryptingKey, hmac: hmac::Key },
    Present(PresentSession),
    Sha256,
}

/// AES-GCM keys expanded by ring. ring's key schedules own no heap memory and do not
/// clear themselves, so this wrapper zeroizes their bytes when it is dropped.
pub(crate) struct RingGcm(MaybeUninit<ring::aead::LessSafeKey>);

impl RingGcm {
    fn new(alg: &'static ring::aead::Algorithm, key: &[u8]) -> Option<RingGcm> {
        let k = ring::aead::UnboundKey::new(alg, key).ok()?;
        Some(RingGcm(MaybeUninit::new(ring::aead::LessSafeKey::new(k))))
    }

    fn key(&self) -> &ring::aead::LessSafeKey {
        // SAFETY: initialised in `new`; only `drop` ends it.
        unsafe { self.0.assume_init_ref() }
    }
}

impl Drop for RingGcm {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` and dropped only here; the key is flat (no heap),
        // so its bytes are all of the secret, and zeros are valid for `MaybeUninit`.
        unsafe {
            self.0.assume_init_drop();
            zeroize::zeroize_flat_type(self.0.as_mut_ptr());
        }
    }
}

/// Whether aws-lc runs AES-GCM with its AVX-512 (VAES-512) code on this CPU; where it
/// does not, ring's VAES+AVX2 code (or the same AES-NI code as aws-lc) is used.
fn aws_lc_gcm_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Marker type selecting the cpu implementations.
pub(crate) struct CpuBackend;

fn bad_key(alg: Alg) -> AccelError {
    AccelError::BadArgument(format!("{alg}: invalid key"))
}

fn nonce(iv: &[u8]) -> Nonce {
    Nonce::assume_unique_for_key(iv.try_into().expect("iv length checked"))
}

fn ring_nonce(iv: &[u8]) -> ring::aead::Nonce {
    ring::aead::Nonce::assume_unique_for_key(iv.try_into().expect("iv length checked"))
}

impl Backend for CpuBackend {
    type Session = CpuSession;
    const KIND: EngineKind = EngineKind::Cpu;

    fn new_session(spec: &SessionSpec) -> Result<CpuSession, AccelError> {
        let key = spec.key.expose();
        let alg = spec.alg;
        let ring_gcm = match alg {
            Alg::Aes128Gcm => Some(&ring::aead::AES_128_GCM),
            Alg::Aes256Gcm => Some(&ring::aead::AES_256_GCM),
            _ => None,
        };
        if let Some(a) = ring_gcm.filter(|_| !aws_lc_gcm_avx512()) {
            return RingGcm::new(a, key)
                .map(CpuSession::RingGcm)
                .ok_or_else(|| bad_key(alg));
        }
        let aead_alg = match alg {
            Alg::Aes128Gcm => Some(&aead::AES_128_GCM),
            Alg::Aes256Gcm => Some(&aead::AES_256_GCM),
            Alg::Chacha20Poly1305 => Some(&aead::CHACHA20_POLY1305),
            _ => None,
        };
        if let Some(a) = aead_alg {
            let k = UnboundKey::new(a, key).map_err(|_| bad_key(alg))?;
            return Ok(CpuSession::Aead(LessSafeKey::new(k)));
        }
        if alg.is_present() {
            return PresentSession::new(spec).map(CpuSession::Present);
        }
        let hmac_key = || hmac::Key::new(hmac::HMAC_SHA256, spec.auth_key.expose());
        Ok(match alg {
            Alg::Aes128CtrHmacSha256 => {
                let k = UnboundCipherKey::new(&AES_128, key).map_err(|_| bad_key(alg))?;
                CpuSession::AesCtr {
                    ctr: EncryptingKey::ctr(k).map_err(|_| bad_key(alg))?,
                    hmac: hmac_key(),
                }
            }
            _ => CpuSession::Sha256,
        })
    }

    fn aead_seal(s: &mut CpuSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &mut [u8]) {
        let sealed = match s {
            CpuSession::Aead(k) => k
                .seal_in_place_separate_tag(nonce(iv), Aad::from(aad), data)
                .map(|t| tag.copy_from_slice(t.as_ref()))
                .is_ok(),
            CpuSession::RingGcm(k) => k
                .key()
                .seal_in_place_separate_tag(ring_nonce(iv), ring::aead::Aad::from(aad), data)
                .map(|t| tag.copy_from_slice(t.as_ref()))
                .is_ok(),
            _ => unreachable!("AEAD call on a non-AEAD session"),
        };
        // Both libraries refuse only inputs beyond the AEAD's length limit (~64 GB),
        // which a buffer cannot reach; leave nothing usable behind if it ever happens.
        if !sealed {
            data.fill(0);
            tag.fill(0);
        }
    }

    fn aead_open(s: &mut CpuSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &[u8]) -> bool {
        match s {
            CpuSession::Aead(k) => k
                .open_in_place_separate_tag(nonce(iv), Aad::from(aad), tag, data)
                .is_ok(),
            CpuSession::RingGcm(k) => {
                let Ok(tag) = ring::aead::Tag::try_from(tag) else {
                    return false;
                };
                k.key()
                    .open_in_place_separate_tag(
                        ring_nonce(iv),
                        ring::aead::Aad::from(aad),
                        tag,
                        data,
                        0..,
                    )
                    .is_ok()
            }
            _ => unreachable!("AEAD call on a non-AEAD session"),
        }
    }

    fn ctr_xor(s: &mut CpuSession, iv: &[u8], data: &mut [u8]) {
        match s {
            CpuSession::AesCtr { ctr, .. } => {
                let iv: [u8; 16] = iv.try_into().expect("iv length checked");
                let ctx = EncryptionContext::Iv128(iv.into());
                if ctr.less_safe_encrypt(data, ctx).is_err() {
                    data.fill(0);
                }
            }
            CpuSession::Present(p) => p.ctr_xor(iv, data),
            _ => unreachable!("CTR call on a non-CTR session"),
        }
    }

    fn mac(s: &mut CpuSession, aad: &[u8], data: &[u8], out: &mut [u8; 32]) {
        match s {
            CpuSession::Present(p) => p.mac(aad, data, out),
            CpuSession::AesCtr { hmac: k, .. } => {
                let mut ctx = hmac::Context::with_key(k);
                ctx.update(aad);
                ctx.update(data);
                out.copy_from_slice(ctx.sign().as_ref());
            }
            _ => {
                let mut ctx = digest::Context::new(&digest::SHA256);
                ctx.update(aad);
                ctx.update(data);
                out.copy_from_slice(ctx.finish().as_ref());
            }
        }
    }

    fn batcher(s: &CpuSession) -> Option<&PresentBs> {
        match s {
            CpuSession::Present(p) => Some(p.cipher()),
            _ => None,
        }
    }
}

/// A new `cpu` engine.
pub fn cpu_engine() -> Box<dyn Engine> {
    Box::new(SyncEngine::<CpuBackend>::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// ring's and aws-lc's AES-GCM agree on ciphertext and tag, whichever of the two
        /// this CPU selects, and each opens what the other sealed.
        #[test]
        fn ring_and_aws_lc_gcm_agree(key in prop::collection::vec(any::<u8>(), 32),
                                     long in any::<bool>(),
                                     iv in any::<[u8; 12]>(),
                                     aad in prop::collection::vec(any::<u8>(), 0..24),
                                     data in prop::collection::vec(any::<u8>(), 0..3000)) {
            let (ra, aa) = if long {
                (&ring::aead::AES_256_GCM, &aead::AES_256_GCM)
            } else {
                (&ring::aead::AES_128_GCM, &aead::AES_128_GCM)
            };
            let key = &key[..ra.key_len()];
            let mut r = CpuSession::RingGcm(RingGcm::new(ra, key).unwrap());
            let mut a = CpuSession::Aead(LessSafeKey::new(UnboundKey::new(aa, key).unwrap()));
            let (mut dr, mut da) = (data.clone(), data.clone());
            let (mut tr, mut ta) = ([0u8; 16], [0u8; 16]);
            CpuBackend::aead_seal(&mut r, &iv, &aad, &mut dr, &mut tr);
            CpuBackend::aead_seal(&mut a, &iv, &aad, &mut da, &mut ta);
            prop_assert_eq!(&dr, &da);
            prop_assert_eq!(tr, ta);
            let mut tampered = dr.clone();
            prop_assert!(CpuBackend::aead_open(&mut r, &iv, &aad, &mut da, &ta));
            prop_assert!(CpuBackend::aead_open(&mut a, &iv, &aad, &mut dr, &tr));
            prop_assert_eq!(&dr, &data);
            prop_assert_eq!(&da, &data);
            tr[0] ^= 1;
            prop_assert!(!CpuBackend::aead_open(&mut r, &iv, &aad, &mut tampered, &tr));
        }
    }

    #[test]
    fn ring_refuses_a_short_tag_without_panicking() {
        let mut r = CpuSession::RingGcm(RingGcm::new(&ring::aead::AES_128_GCM, &[1; 16]).unwrap());
        assert!(!CpuBackend::aead_open(
            &mut r,
            &[0; 12],
            &[],
            &mut [0; 8],
            &[0; 15]
        ));
        assert!(RingGcm::new(&ring::aead::AES_128_GCM, &[1; 15]).is_none());
    }
}
