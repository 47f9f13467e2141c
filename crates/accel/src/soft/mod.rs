//! The `soft` engine: portable implementations with no AES, carry-less-multiply or SHA
//! instructions — the SW-VNF baseline, like the libtomcrypt code Dropbear uses.

mod aes;
mod chacha20;
mod ghash;
mod poly1305;
pub(crate) mod present;
pub(crate) mod sha256;

use zeroize::Zeroize;

use crate::backend::{ct_eq, Backend, SyncEngine};
use crate::{AccelError, Alg, Engine, EngineKind, SessionSpec};

use aes::Aes;
use chacha20::ChaCha20;
use ghash::Ghash;
use poly1305::Poly1305;
use present::Present;
use sha256::{HmacSha256, Sha256};

/// Expanded keys of one soft session (created once, kept in a table).
#[allow(clippy::large_enum_variant)]
pub(crate) enum SoftSession {
    Gcm { aes: Aes, ghash: Ghash },
    ChaCha(ChaCha20),
    AesCtr { aes: Aes, hmac: HmacSha256 },
    PresentCtr { present: Present, hmac: HmacSha256 },
    Present(Present),
    Sha256,
}

/// Marker type selecting the portable implementations.
pub(crate) struct SoftBackend;

fn bad_key(alg: Alg) -> AccelError {
    AccelError::BadArgument(format!("{alg}: invalid key length"))
}

impl SoftBackend {
    fn gcm_j0(iv: &[u8]) -> [u8; 16] {
        let mut j0 = [0u8; 16];
        j0[..12].copy_from_slice(iv);
        j0[15] = 1;
        j0
    }

    fn gcm_tag(aes: &Aes, ghash: &Ghash, j0: &[u8; 16], aad: &[u8], ct: &[u8]) -> [u8; 16] {
        let y = ghash.update_padded(0, aad);
        let y = ghash.update_padded(y, ct);
        let s = ghash.finish(y, aad.len(), ct.len());
        let mask = u128::from_be_bytes(aes.encrypt_block(j0));
        (s ^ mask).to_be_bytes()
    }

    fn chacha_tag(c: &ChaCha20, nonce: &[u8; 12], aad: &[u8], ct: &[u8]) -> [u8; 16] {
        let mut block0 = c.block(0, nonce);
        let mut otk = [0u8; 32];
        otk.copy_from_slice(&block0[..32]);
        let mut p = Poly1305::new(&otk);
        block0.zeroize();
        otk.zeroize();
        p.update_padded(aad);
        p.update_padded(ct);
        let mut lens = [0u8; 16];
        lens[..8].copy_from_slice(&(aad.len() as u64).to_le_bytes());
        lens[8..].copy_from_slice(&(ct.len() as u64).to_le_bytes());
        p.update_padded(&lens);
        p.finish()
    }
}

impl Backend for SoftBackend {
    type Session = SoftSession;
    const KIND: EngineKind = EngineKind::Soft;

    fn new_session(spec: &SessionSpec) -> Result<SoftSession, AccelError> {
        let key = spec.key.expose();
        let alg = spec.alg;
        Ok(match alg {
            Alg::Aes128Gcm | Alg::Aes256Gcm => {
                let aes = Aes::new(key).ok_or_else(|| bad_key(alg))?;
                let ghash = Ghash::new(&aes.encrypt_block(&[0; 16]));
                SoftSession::Gcm { aes, ghash }
            }
            Alg::Chacha20Poly1305 => {
                SoftSession::ChaCha(ChaCha20::new(key).ok_or_else(|| bad_key(alg))?)
            }
            Alg::Aes128CtrHmacSha256 => SoftSession::AesCtr {
                aes: Aes::new(key).ok_or_else(|| bad_key(alg))?,
                hmac: HmacSha256::new(spec.auth_key.expose()),
            },
            Alg::Present80CtrHmacSha256 | Alg::Present128CtrHmacSha256 => SoftSession::PresentCtr {
                present: Present::new(key).ok_or_else(|| bad_key(alg))?,
                hmac: HmacSha256::new(spec.auth_key.expose()),
            },
            Alg::Present80Ctr | Alg::Present128Ctr => {
                SoftSession::Present(Present::new(key).ok_or_else(|| bad_key(alg))?)
            }
            Alg::Sha256 => SoftSession::Sha256,
        })
    }

    fn aead_seal(s: &mut SoftSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &mut [u8]) {
        match s {
            SoftSession::Gcm { aes, ghash } => {
                let j0 = Self::gcm_j0(iv);
                let mut ctr = j0;
                ctr[15] = 2;
                aes.ctr32_xor(&ctr, data);
                tag.copy_from_slice(&Self::gcm_tag(aes, ghash, &j0, aad, data));
            }
            SoftSession::ChaCha(c) => {
                let nonce: &[u8; 12] = iv.try_into().expect("iv length checked");
                c.xor(1, nonce, data);
                tag.copy_from_slice(&Self::chacha_tag(c, nonce, aad, data));
            }
            _ => unreachable!("AEAD call on a non-AEAD session"),
        }
    }

    fn aead_open(s: &mut SoftSession, iv: &[u8], aad: &[u8], data: &mut [u8], tag: &[u8]) -> bool {
        match s {
            SoftSession::Gcm { aes, ghash } => {
                let j0 = Self::gcm_j0(iv);
                if !ct_eq(&Self::gcm_tag(aes, ghash, &j0, aad, data), tag) {
                    return false;
                }
                let mut ctr = j0;
                ctr[15] = 2;
                aes.ctr32_xor(&ctr, data);
                true
            }
            SoftSession::ChaCha(c) => {
                let nonce: &[u8; 12] = iv.try_into().expect("iv length checked");
                if !ct_eq(&Self::chacha_tag(c, nonce, aad, data), tag) {
                    return false;
                }
                c.xor(1, nonce, data);
                true
            }
            _ => unreachable!("AEAD call on a non-AEAD session"),
        }
    }

    fn ctr_xor(s: &mut SoftSession, iv: &[u8], data: &mut [u8]) {
        match s {
            SoftSession::AesCtr { aes, .. } => {
                aes.ctr_xor(iv.try_into().expect("iv length checked"), data)
            }
            SoftSession::PresentCtr { present, .. } | SoftSession::Present(present) => {
                present.ctr_xor(iv.try_into().expect("iv length checked"), data)
            }
            _ => unreachable!("CTR call on a non-CTR session"),
        }
    }

    fn mac(s: &mut SoftSession, aad: &[u8], data: &[u8], out: &mut [u8; 32]) {
        *out = match s {
            SoftSession::AesCtr { hmac, .. } | SoftSession::PresentCtr { hmac, .. } => {
                hmac.mac(&[aad, data])
            }
            _ => {
                let mut h = Sha256::default();
                h.update(aad);
                h.update(data);
                h.finish()
            }
        };
    }
}

/// A new `soft` engine.
pub fn soft_engine() -> Box<dyn Engine> {
    Box::new(SyncEngine::<SoftBackend>::new())
}
