//! The primitives IKEv2 needs, all from aws-lc-rs: PRF_HMAC_SHA2_256 and prf+
//! (RFC 7296 §2.13), Diffie-Hellman groups 19 (P-256, RFC 5903) and 31 (X25519,
//! RFC 8031), random bytes and the SHA-1 of NAT detection (§2.23). Secrets live in
//! [`Secret`], zeroized when dropped and never printed.

use std::fmt;

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::{digest, hmac, rand};
use zeroize::Zeroizing;

use crate::proposal::DhGroup;

/// Secret bytes: zeroized on drop, `Debug` redacted.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// Takes ownership of `v`.
    pub fn new(v: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(v))
    }

    /// Copies `s`.
    pub fn from_slice(s: &[u8]) -> Secret {
        Secret::new(s.to_vec())
    }

    /// The bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Splits off the first `n` bytes as a secret of their own.
    pub fn take(&self, at: &mut usize, n: usize) -> Secret {
        let s = Secret::from_slice(&self.0[*at..*at + n]);
        *at += n;
        s
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<{} bytes redacted>)", self.0.len())
    }
}

/// Output length of PRF_HMAC_SHA2_256.
pub const PRF_LEN: usize = 32;

/// PRF_HMAC_SHA2_256 (RFC 4868): HMAC-SHA-256 of the concatenation of `parts`.
pub fn prf(key: &[u8], parts: &[&[u8]]) -> Secret {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut c = hmac::Context::with_key(&k);
    for p in parts {
        c.update(p);
    }
    Secret::from_slice(c.sign().as_ref())
}

/// prf+ (RFC 7296 §2.13): `T1 | T2 | ...` with `Tn = prf(K, Tn-1 | S | n)`, cut to
/// `len` bytes (at most 255 blocks).
pub fn prf_plus(key: &[u8], seed: &[u8], len: usize) -> Secret {
    assert!(len <= 255 * PRF_LEN, "prf+ output is limited to 255 blocks");
    let mut out = Zeroizing::new(Vec::with_capacity(len + PRF_LEN));
    let mut t = Secret::default();
    let mut n = 1u8;
    while out.len() < len {
        t = prf(key, &[t.expose(), seed, &[n]]);
        out.extend_from_slice(t.expose());
        n = n.wrapping_add(1);
    }
    out.truncate(len);
    Secret(out)
}

/// `n` random bytes from the system CSPRNG.
pub fn random(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::fill(&mut v).expect("system random generator");
    v
}

/// A random non-zero u64 (IKE SPIs).
pub fn random_u64() -> u64 {
    loop {
        let b = random(8);
        let v = u64::from_be_bytes(b.try_into().expect("8 bytes"));
        if v != 0 {
            return v;
        }
    }
}

/// A random ESP SPI outside the reserved range 0..=255.
pub fn random_spi() -> u32 {
    loop {
        let b = random(4);
        let v = u32::from_be_bytes(b.try_into().expect("4 bytes"));
        if v > 255 {
            return v;
        }
    }
}

/// SHA-1 of the concatenation of `parts` (NAT detection and CERTREQ hashes only).
pub fn sha1(parts: &[&[u8]]) -> Vec<u8> {
    let mut c = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    for p in parts {
        c.update(p);
    }
    c.finish().as_ref().to_vec()
}

/// SHA-256 of the concatenation of `parts`.
pub fn sha256(parts: &[&[u8]]) -> Vec<u8> {
    let mut c = digest::Context::new(&digest::SHA256);
    for p in parts {
        c.update(p);
    }
    c.finish().as_ref().to_vec()
}

/// Why a key exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    /// The peer's public value has the wrong length or is not a valid point.
    #[error("invalid Diffie-Hellman public value")]
    BadPublic,
    /// X25519 gave the all-zero value (RFC 8031 §2.3).
    #[error("all-zero X25519 shared secret")]
    Zero,
}

/// One side of a Diffie-Hellman exchange: the private key stays inside aws-lc (freed,
/// and cleared, with this value).
pub struct Dh {
    /// The group.
    pub group: DhGroup,
    private: PrivateKey,
    public: Vec<u8>,
}

impl fmt::Debug for Dh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dh({:?}, <private key redacted>)", self.group)
    }
}

fn alg(g: DhGroup) -> &'static agreement::Algorithm {
    match g {
        DhGroup::Ecp256 => &agreement::ECDH_P256,
        DhGroup::Curve25519 => &agreement::X25519,
    }
}

impl Dh {
    /// A fresh key pair in `group`.
    pub fn new(group: DhGroup) -> Dh {
        let private = PrivateKey::generate(alg(group)).expect("key generation");
        let pubk = private.compute_public_key().expect("public key");
        let public = match group {
            // RFC 5903 §7: x | y without the SEC1 0x04 prefix.
            DhGroup::Ecp256 => pubk.as_ref()[1..].to_vec(),
            DhGroup::Curve25519 => pubk.as_ref().to_vec(),
        };
        Dh {
            group,
            private,
            public,
        }
    }

    /// The public value as the KE payload carries it.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret g^ir with the peer's KE data (P-256: the x coordinate).
    pub fn shared(&self, peer: &[u8]) -> Result<Secret, DhError> {
        let point;
        let bytes: &[u8] = match self.group {
            DhGroup::Ecp256 => {
                if peer.len() != 64 {
                    return Err(DhError::BadPublic);
                }
                point = [&[4u8][..], peer].concat();
                &point
            }
            DhGroup::Curve25519 => {
                if peer.len() != 32 {
                    return Err(DhError::BadPublic);
                }
                peer
            }
        };
        let s = agreement::agree(
            &self.private,
            UnparsedPublicKey::new(alg(self.group), bytes),
            DhError::BadPublic,
            |k| Ok(Secret::from_slice(k)),
        )?;
        if s.expose().iter().all(|&b| b == 0) {
            return Err(DhError::Zero);
        }
        Ok(s)
    }
}

/// Length of a public value of `group` in a KE payload.
pub fn ke_len(group: DhGroup) -> usize {
    match group {
        DhGroup::Ecp256 => 64,
        DhGroup::Curve25519 => 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        ::hex::decode(s).expect("a test vector in hex")
    }

    /// RFC 4231 test cases 1 and 2 (HMAC-SHA-256 = PRF_HMAC_SHA2_256, RFC 4868 §2.7.1).
    #[test]
    fn prf_rfc4231() {
        assert_eq!(
            prf(&[0x0b; 20], &[b"Hi There"]).expose(),
            hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        );
        assert_eq!(
            prf(b"Jefe", &[b"what do ya want ", b"for nothing?"]).expose(),
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
    }

    /// prf+ is T1 | T2 | ... with the counter byte after the seed.
    #[test]
    fn prf_plus_structure() {
        let k = b"key";
        let s = b"seed";
        let out = prf_plus(k, s, 80);
        let t1 = prf(k, &[s, &[1]]);
        let t2 = prf(k, &[t1.expose(), s, &[2]]);
        let t3 = prf(k, &[t2.expose(), s, &[3]]);
        assert_eq!(&out.expose()[..32], t1.expose());
        assert_eq!(&out.expose()[32..64], t2.expose());
        assert_eq!(&out.expose()[64..], &t3.expose()[..16]);
    }

    /// RFC 7748 §6.1: X25519 with Alice's and Bob's keys gives the published secret
    /// (private keys through aws-lc's raw-key import).
    #[test]
    fn x25519_rfc7748() {
        let a = PrivateKey::from_private_key(
            &agreement::X25519,
            &hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"),
        )
        .unwrap();
        let dh = Dh {
            group: DhGroup::Curve25519,
            public: a.compute_public_key().unwrap().as_ref().to_vec(),
            private: a,
        };
        assert_eq!(
            dh.public(),
            hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
        );
        let bob = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
        assert_eq!(
            dh.shared(&bob).unwrap().expose(),
            hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        );
        assert!(dh.shared(&[0u8; 32]).is_err(), "low-order point");
    }

    #[test]
    fn both_groups_agree() {
        for g in [DhGroup::Ecp256, DhGroup::Curve25519] {
            let (a, b) = (Dh::new(g), Dh::new(g));
            assert_eq!(a.public().len(), ke_len(g));
            assert_eq!(a.shared(b.public()).unwrap(), b.shared(a.public()).unwrap());
            assert!(a.shared(&b.public()[1..]).is_err());
        }
        let p = Dh::new(DhGroup::Ecp256);
        assert_eq!(p.shared(&[1u8; 64]), Err(DhError::BadPublic));
        assert!(format!("{p:?}").contains("redacted"));
        assert!(format!("{:?}", Secret::new(vec![0xab])).contains("redacted"));
    }
}
