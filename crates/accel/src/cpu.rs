//! The `cpu` engine: the processor's crypto instructions (AES-NI/VAES, PCLMUL/VPCLMUL,
//! SHA-NI, AVX-512) through aws-lc, chosen for its AVX-512 AES-GCM. PRESENT has no
//! instruction support and shares the `soft` table code.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128};
use aws_lc_rs::{digest, hmac};

use crate::backend::{Backend, SyncEngine};
use crate::soft::present::Present;
use crate::{AccelError, Alg, Engine, EngineKind, SessionSpec};

/// Expanded keys of one cpu session (aws-lc zeroizes its key schedules on drop). Sessions
/// live in a table and are created once, so variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CpuSession {
    Aead(LessSafeKey),
    AesCtr { ctr: EncryptingKey, hmac: hmac::Key },
    PresentCtr { present: Present, hmac: hmac::Key },
    Sha256,
}

/// Marker type selecting the aws-lc implementations.
pub(crate) struct CpuBackend;

fn bad_key(alg: Alg) -> AccelError {
    AccelError::BadArgument(format!("{alg}: invalid key"))
}

fn nonce(iv: &[u8]) -> Nonce {
    Nonce::assume_unique_for_key(iv.try_into().expect("iv length checked"))
}

impl Backend for CpuBackend {
    type Session = CpuSession;
    const KIND: EngineKind = EngineKind::Cpu;

    fn new_session(spec: &SessionSpec) -> Result<CpuSession, AccelError> {
        let key = spec.key.expose();
        let alg = spec.alg;
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
        let hmac_key = || hmac::Key::new(hmac::HMAC_SHA256, spec.auth_key.expose());
        Ok(match alg {
            Alg::Aes128CtrHmacSha256 => {
                let k = UnboundCipherKey::new(&AES_128, key).map_err(|_| bad_key(alg))?;
                CpuSession::AesCtr {
                    ctr: EncryptingKey::ctr(k).map_err(|_| bad_key(alg))?,
                    hmac: hmac_key(),
                }
            }
            Alg::Present80CtrHmacSha256 | Alg::Present128CtrHmacSha256 => CpuSession::PresentCtr {
                present: Present::new(key).ok_or_else(|| bad_key(alg))?,
                hmac: hmac_key(),
            },
            _ => CpuSession::Sha256,
        })
    }

    fn aead_seal(s: &mut CpuSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &mut [u8]) {
        let CpuSession::Aead(k) = s else {
            unreachable!("AEAD call on a non-AEAD session")
        };
        match k.seal_in_place_separate_tag(nonce(iv), Aad::from(aad), data) {
            Ok(t) => tag.copy_from_slice(t.as_ref()),
            // aws-lc refuses only inputs beyond the AEAD's length limit (~64 GB), which
            // a buffer cannot reach; leave nothing usable behind if it ever happens.
            Err(_) => {
                data.fill(0);
                tag.fill(0);
            }
        }
    }

    fn aead_open(s: &mut CpuSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &[u8]) -> bool {
        let CpuSession::Aead(k) = s else {
            unreachable!("AEAD call on a non-AEAD session")
        };
        k.open_in_place_separate_tag(nonce(iv), Aad::from(aad), tag, data)
            .is_ok()
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
            CpuSession::PresentCtr { present, .. } => {
                present.ctr_xor(iv.try_into().expect("iv length checked"), data)
            }
            _ => unreachable!("CTR call on a non-CTR session"),
        }
    }

    fn mac(s: &mut CpuSession, aad: &[u8], data: &[u8], out: &mut [u8; 32]) {
        match s {
            CpuSession::AesCtr { hmac: k, .. } | CpuSession::PresentCtr { hmac: k, .. } => {
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
}

/// A new `cpu` engine.
pub fn cpu_engine() -> Box<dyn Engine> {
    Box::new(SyncEngine::<CpuBackend>::new())
}
