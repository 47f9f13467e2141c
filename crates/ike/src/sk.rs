//! The Encrypted and Authenticated payload (RFC 7296 §3.14) with AES-CBC +
//! HMAC-SHA-256-128 and with AES-GCM-16 (RFC 5282). Every message after IKE_SA_INIT
//! is one header and one SK payload; the integrity check runs before anything inside
//! is parsed.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use aws_lc_rs::cipher::{
    DecryptingKey, DecryptionContext, EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128,
    AES_256,
};
use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;

use crate::consts::payload as pt;
use crate::crypto::{random, Secret};
use crate::proposal::IkeEncr;
use crate::wire::{decode_all, encode_chain, walk, Header, ParseError, Payload, GEN_LEN, HDR_LEN};

/// ICV length of both protections.
pub const ICV_LEN: usize = 16;

/// Why an SK-protected message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SkError {
    /// The message is malformed (outside or, once authenticated, inside).
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// The ICV does not verify: wrong keys or tampering.
    #[error("integrity check failed")]
    Integrity,
    /// The message has no SK payload where one is required.
    #[error("no Encrypted payload")]
    NotEncrypted,
}

/// The keys protecting one direction of an IKE SA.
#[derive(Debug, Clone)]
pub struct SkKeys {
    encr: IkeEncr,
    ke: Secret,
    ka: Secret,
}

impl SkKeys {
    /// Keys for one direction: SK_e (with the GCM salt) and SK_a (empty with GCM).
    pub fn new(encr: IkeEncr, ke: Secret, ka: Secret) -> SkKeys {
        SkKeys { encr, ke, ka }
    }

    fn iv_len(&self) -> usize {
        match self.encr {
            IkeEncr::AesGcm16(_) => 8,
            IkeEncr::AesCbc(_) => 16,
        }
    }

    fn gcm(&self) -> (LessSafeKey, [u8; 4]) {
        let k = self.ke.expose();
        let (key, salt) = k.split_at(k.len() - 4);
        let alg = if key.len() == 16 {
            &AES_128_GCM
        } else {
            &AES_256_GCM
        };
        let key = LessSafeKey::new(UnboundKey::new(alg, key).expect("GCM key length"));
        (key, salt.try_into().expect("4-byte salt"))
    }

    fn cbc_key(&self) -> UnboundCipherKey {
        let k = self.ke.expose();
        let alg = if k.len() == 16 { &AES_128 } else { &AES_256 };
        UnboundCipherKey::new(alg, k).expect("AES key length")
    }

    fn mac(&self, data: &[u8]) -> [u8; ICV_LEN] {
        let k = hmac::Key::new(hmac::HMAC_SHA256, self.ka.expose());
        let t = hmac::sign(&k, data);
        t.as_ref()[..ICV_LEN].try_into().expect("16 bytes")
    }
}

fn gcm_nonce(salt: [u8; 4], iv: &[u8]) -> Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&salt);
    n[4..].copy_from_slice(iv);
    Nonce::assume_unique_for_key(n)
}

/// Builds a protected message: `h` (its `next`/`length` are filled in) and one SK
/// payload carrying `inner`. `iv_counter` gives GCM its unique explicit IV (one per
/// message under a key); CBC takes a random IV.
pub fn seal(keys: &SkKeys, iv_counter: &mut u64, mut h: Header, inner: &[Payload]) -> Vec<u8> {
    let mut plain = Vec::new();
    let first = encode_chain(inner, pt::NONE, &mut plain);
    let iv = match keys.encr {
        IkeEncr::AesGcm16(_) => {
            *iv_counter += 1;
            iv_counter.to_be_bytes().to_vec()
        }
        IkeEncr::AesCbc(_) => random(16),
    };
    if let IkeEncr::AesCbc(_) = keys.encr {
        let pad = (16 - (plain.len() + 1) % 16) % 16;
        plain.extend(std::iter::repeat_n(0u8, pad));
        plain.push(pad as u8);
    } else {
        plain.push(0);
    }
    let sk_len = GEN_LEN + iv.len() + plain.len() + ICV_LEN;
    h.next = pt::SK;
    h.length = (HDR_LEN + sk_len) as u32;
    let mut out = Vec::with_capacity(h.length as usize);
    h.encode(&mut out);
    out.extend_from_slice(&[first, 0]);
    out.extend_from_slice(&(sk_len as u16).to_be_bytes());
    out.extend_from_slice(&iv);
    match keys.encr {
        IkeEncr::AesGcm16(_) => {
            let (key, salt) = keys.gcm();
            let tag = key
                .seal_in_place_separate_tag(
                    gcm_nonce(salt, &iv),
                    Aad::from(&out[..HDR_LEN + GEN_LEN]),
                    &mut plain,
                )
                .expect("GCM seal");
            out.extend_from_slice(&plain);
            out.extend_from_slice(tag.as_ref());
        }
        IkeEncr::AesCbc(_) => {
            let ctx = EncryptionContext::Iv128(FixedLength::from(
                <[u8; 16]>::try_from(&iv[..]).expect("16-byte IV"),
            ));
            EncryptingKey::cbc(keys.cbc_key())
                .expect("CBC key")
                .less_safe_encrypt(&mut plain, ctx)
                .expect("whole blocks");
            out.extend_from_slice(&plain);
            let icv = keys.mac(&out);
            out.extend_from_slice(&icv);
        }
    }
    out
}

/// Where the SK payload of `msg` is and the first inner payload type.
pub fn locate(msg: &[u8]) -> Result<(Header, u8), SkError> {
    let h = Header::decode(msg)?;
    let chain = walk(h.next, &msg[HDR_LEN..])?;
    match chain.sk {
        Some((0, first)) if chain.payloads.is_empty() => Ok((h, first)),
        _ => Err(SkError::NotEncrypted),
    }
}

/// Verifies and decrypts a protected message; returns its header and inner payloads.
pub fn open(keys: &SkKeys, msg: &[u8]) -> Result<(Header, Vec<Payload>), SkError> {
    let (h, first) = locate(msg)?;
    let iv_len = keys.iv_len();
    let body_at = HDR_LEN + GEN_LEN;
    if msg.len() < body_at + iv_len + 1 + ICV_LEN {
        return Err(ParseError::Truncated("Encrypted payload").into());
    }
    let iv = &msg[body_at..body_at + iv_len];
    let ct_at = body_at + iv_len;
    let icv_at = msg.len() - ICV_LEN;
    let mut plain = msg[ct_at..icv_at].to_vec();
    match keys.encr {
        IkeEncr::AesGcm16(_) => {
            let (key, salt) = keys.gcm();
            plain.extend_from_slice(&msg[icv_at..]);
            let n = key
                .open_in_place(gcm_nonce(salt, iv), Aad::from(&msg[..body_at]), &mut plain)
                .map_err(|_| SkError::Integrity)?
                .len();
            plain.truncate(n);
        }
        IkeEncr::AesCbc(_) => {
            if !plain.len().is_multiple_of(16) {
                return Err(ParseError::BadLength("Encrypted payload").into());
            }
            verify_slices_are_equal(&keys.mac(&msg[..icv_at]), &msg[icv_at..])
                .map_err(|_| SkError::Integrity)?;
            let ctx = DecryptionContext::Iv128(FixedLength::from(
                <[u8; 16]>::try_from(iv).expect("16-byte IV"),
            ));
            DecryptingKey::cbc(keys.cbc_key())
                .expect("CBC key")
                .decrypt(&mut plain, ctx)
                .map_err(|_| SkError::Integrity)?;
        }
    }
    let pad = *plain.last().ok_or(ParseError::Truncated("padding"))? as usize;
    if pad + 1 > plain.len() {
        return Err(ParseError::BadLength("padding").into());
    }
    let inner = &plain[..plain.len() - pad - 1];
    let chain = walk(first, inner)?;
    if chain.sk.is_some() {
        return Err(ParseError::Invalid("nested Encrypted payload").into());
    }
    Ok((h, decode_all(&chain.payloads)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{exchange, flags};

    fn hdr() -> Header {
        Header {
            spi_i: 1,
            spi_r: 2,
            next: 0,
            exchange: exchange::IKE_AUTH,
            flags: flags::INITIATOR,
            msg_id: 1,
            length: 0,
        }
    }

    fn keys(encr: IkeEncr, fill: u8) -> SkKeys {
        SkKeys::new(
            encr,
            Secret::new(vec![fill; encr.key_len()]),
            Secret::new(vec![fill ^ 1; encr.integ_key_len()]),
        )
    }

    const ENCRS: [IkeEncr; 4] = [
        IkeEncr::AesGcm16(128),
        IkeEncr::AesGcm16(256),
        IkeEncr::AesCbc(128),
        IkeEncr::AesCbc(256),
    ];

    #[test]
    fn round_trip_and_tamper() {
        let inner = vec![Payload::Nonce(vec![5; 17]), Payload::Nonce(vec![6; 40])];
        for encr in ENCRS {
            let k = keys(encr, 7);
            let mut ctr = 0;
            let m = seal(&k, &mut ctr, hdr(), &inner);
            let (h, got) = open(&k, &m).unwrap();
            assert_eq!((h.msg_id, got), (1, inner.clone()), "{encr:?}");
            for pos in [0, 17, 30, 40, m.len() - 1] {
                let mut t = m.clone();
                t[pos] ^= 1;
                assert!(open(&k, &t).is_err(), "{encr:?} byte {pos}");
            }
            assert_eq!(open(&keys(encr, 8), &m), Err(SkError::Integrity));
            for cut in 0..m.len() {
                assert!(open(&k, &m[..cut]).is_err());
            }
            let m2 = seal(&k, &mut ctr, hdr(), &inner);
            assert_ne!(
                m[32..40],
                m2[32..40],
                "{encr:?}: the IV changes per message"
            );
        }
    }

    #[test]
    fn plaintext_message_is_not_encrypted() {
        let m = crate::wire::encode_plain(hdr(), &[Payload::Nonce(vec![1; 16])]);
        assert_eq!(
            open(&keys(IkeEncr::AesGcm16(128), 1), &m),
            Err(SkError::NotEncrypted)
        );
    }

    /// RFC 3602 §4 case #2 (AES-128-CBC, two blocks) through the same aws-lc calls.
    #[test]
    fn aes_cbc_rfc3602_case2() {
        let h = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let k = SkKeys::new(
            IkeEncr::AesCbc(128),
            Secret::new(h("c286696d887c9aa0611bbb3e2025a45a")),
            Secret::default(),
        );
        let mut data = h("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        let iv: [u8; 16] = h("562e17996d093d28ddb3ba695a2e6f58").try_into().unwrap();
        EncryptingKey::cbc(k.cbc_key())
            .unwrap()
            .less_safe_encrypt(&mut data, EncryptionContext::Iv128(FixedLength::from(iv)))
            .unwrap();
        assert_eq!(
            data,
            h("d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1")
        );
    }
}
