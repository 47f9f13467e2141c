//! Key derivation (RFC 7296 §2.13, §2.14, §2.17, §2.18): SKEYSEED, the seven IKE SA
//! keys, and the keying material of CHILD_SAs.

use crate::crypto::{prf, prf_plus, Secret, PRF_LEN};
use crate::proposal::{EspAlg, IkeEncr};

/// The keys of one IKE SA (all zeroized on drop).
#[derive(Debug, Clone)]
pub struct IkeKeys {
    /// Derives CHILD_SA keys and the next IKE SA's SKEYSEED.
    pub sk_d: Secret,
    /// Integrity key, initiator to responder (empty with an AEAD).
    pub sk_ai: Secret,
    /// Integrity key, responder to initiator.
    pub sk_ar: Secret,
    /// Encryption key (+ salt for GCM), initiator to responder.
    pub sk_ei: Secret,
    /// Encryption key (+ salt), responder to initiator.
    pub sk_er: Secret,
    /// Key of the initiator's AUTH payload.
    pub sk_pi: Secret,
    /// Key of the responder's AUTH payload.
    pub sk_pr: Secret,
}

/// SKEYSEED of a new IKE SA: `prf(Ni | Nr, g^ir)`.
pub fn skeyseed(ni: &[u8], nr: &[u8], gir: &Secret) -> Secret {
    let key = Secret::new([ni, nr].concat());
    prf(key.expose(), &[gir.expose()])
}

/// SKEYSEED of a rekeyed IKE SA: `prf(SK_d (old), g^ir (new) | Ni | Nr)`.
pub fn skeyseed_rekey(old_sk_d: &Secret, gir: &Secret, ni: &[u8], nr: &[u8]) -> Secret {
    prf(old_sk_d.expose(), &[gir.expose(), ni, nr])
}

impl IkeKeys {
    /// `{SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} =
    /// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)`.
    pub fn derive(
        encr: IkeEncr,
        skeyseed: &Secret,
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> IkeKeys {
        let (ek, ak) = (encr.key_len(), encr.integ_key_len());
        let seed = [ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()].concat();
        let all = prf_plus(skeyseed.expose(), &seed, 3 * PRF_LEN + 2 * ak + 2 * ek);
        let mut at = 0;
        IkeKeys {
            sk_d: all.take(&mut at, PRF_LEN),
            sk_ai: all.take(&mut at, ak),
            sk_ar: all.take(&mut at, ak),
            sk_ei: all.take(&mut at, ek),
            sk_er: all.take(&mut at, ek),
            sk_pi: all.take(&mut at, PRF_LEN),
            sk_pr: all.take(&mut at, PRF_LEN),
        }
    }
}

/// The keys of one direction of a CHILD_SA.
#[derive(Debug, Clone)]
pub struct DirKeys {
    /// Cipher key followed by the 4-byte salt / nonce.
    pub encr: Secret,
    /// HMAC key (empty for an AEAD).
    pub integ: Secret,
}

/// CHILD_SA keying material: `prf+(SK_d, [g^ir |] Ni | Nr)`; initiator-to-responder
/// keys first, encryption before integrity (§2.17). `Ni`/`Nr` are the nonces of the
/// exchange that created the SA (IKE_AUTH: those of IKE_SA_INIT).
pub fn child_keys(
    sk_d: &Secret,
    gir: Option<&Secret>,
    ni: &[u8],
    nr: &[u8],
    alg: EspAlg,
) -> (DirKeys, DirKeys) {
    let (ek, ak) = (alg.key_len(), alg.integ_key_len());
    let seed = match gir {
        Some(g) => Secret::new([g.expose(), ni, nr].concat()),
        None => Secret::new([ni, nr].concat()),
    };
    let all = prf_plus(sk_d.expose(), seed.expose(), 2 * (ek + ak));
    let mut at = 0;
    let i2r = DirKeys {
        encr: all.take(&mut at, ek),
        integ: all.take(&mut at, ak),
    };
    let r2i = DirKeys {
        encr: all.take(&mut at, ek),
        integ: all.take(&mut at, ak),
    };
    (i2r, r2i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ike_keys_are_consecutive_prf_plus_slices() {
        let seed = Secret::new(vec![9; 32]);
        for encr in [IkeEncr::AesGcm16(128), IkeEncr::AesCbc(256)] {
            let k = IkeKeys::derive(encr, &seed, &[1; 32], &[2; 32], 7, 8);
            let (ek, ak) = (encr.key_len(), encr.integ_key_len());
            let s = [
                &[1u8; 32][..],
                &[2; 32],
                &7u64.to_be_bytes(),
                &8u64.to_be_bytes(),
            ]
            .concat();
            let all = prf_plus(seed.expose(), &s, 96 + 2 * ek + 2 * ak);
            let cat = [
                k.sk_d.expose(),
                k.sk_ai.expose(),
                k.sk_ar.expose(),
                k.sk_ei.expose(),
                k.sk_er.expose(),
                k.sk_pi.expose(),
                k.sk_pr.expose(),
            ]
            .concat();
            assert_eq!(cat, all.expose());
            assert_eq!(k.sk_ei.len(), ek);
            assert_eq!(k.sk_ai.len(), ak);
        }
    }

    #[test]
    fn child_keys_split_and_pfs_changes_them() {
        let d = Secret::new(vec![3; 32]);
        let (a, b) = child_keys(&d, None, &[1; 16], &[2; 16], EspAlg::AesCtr128HmacSha256);
        assert_eq!((a.encr.len(), a.integ.len()), (20, 32));
        assert_ne!(a.encr, b.encr);
        let g = Secret::new(vec![5; 32]);
        let (c, _) = child_keys(
            &d,
            Some(&g),
            &[1; 16],
            &[2; 16],
            EspAlg::AesCtr128HmacSha256,
        );
        assert_ne!(a.encr, c.encr);
        let (e, _) = child_keys(&d, None, &[1; 16], &[2; 16], EspAlg::AesGcm256);
        assert_eq!((e.encr.len(), e.integ.len()), (36, 0));
    }
}
