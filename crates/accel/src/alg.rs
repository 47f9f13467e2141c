//! The algorithms every engine implements, with their wire names and parameter sizes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::AccelError;

/// One crypto transform; the same names are used in configs, benchmarks and calibration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Alg {
    /// AES-128 in GCM mode (RFC 4106 for ESP): 12-byte nonce, 16-byte tag.
    Aes128Gcm,
    /// AES-256 in GCM mode: 12-byte nonce, 16-byte tag.
    Aes256Gcm,
    /// ChaCha20-Poly1305 AEAD (RFC 8439 / RFC 7634): 12-byte nonce, 16-byte tag.
    Chacha20Poly1305,
    /// AES-128-CTR (RFC 3686 / SSH aes128-ctr) then HMAC-SHA-256 over AAD‖ciphertext.
    Aes128CtrHmacSha256,
    /// PRESENT-80 in CTR mode (64-bit counter block) then HMAC-SHA-256.
    Present80CtrHmacSha256,
    /// PRESENT-128 in CTR mode (64-bit counter block) then HMAC-SHA-256.
    Present128CtrHmacSha256,
    /// SHA-256 digest of AAD‖data (encrypt = compute, decrypt = verify).
    Sha256,
    /// PRESENT-80 in CTR mode alone (no tag): chunk encryption where the transport
    /// authenticates, as in the edge-encryption VNF paper.
    Present80Ctr,
    /// PRESENT-128 in CTR mode alone (no tag).
    Present128Ctr,
}

/// How an algorithm combines its parts; engines dispatch on this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlgFamily {
    /// An AEAD with a 16-byte tag.
    Aead,
    /// A counter-mode cipher followed by HMAC-SHA-256 (encrypt-then-MAC).
    CtrHmac,
    /// A plain digest.
    Digest,
    /// A counter-mode cipher alone: confidentiality without integrity, tag length 0.
    Cipher,
}

impl Alg {
    /// Every algorithm, in the order benchmarks and reports list them.
    pub const ALL: [Alg; 9] = [
        Alg::Aes128Gcm,
        Alg::Aes256Gcm,
        Alg::Chacha20Poly1305,
        Alg::Aes128CtrHmacSha256,
        Alg::Present80CtrHmacSha256,
        Alg::Present128CtrHmacSha256,
        Alg::Sha256,
        Alg::Present80Ctr,
        Alg::Present128Ctr,
    ];

    /// The canonical name (`aes-128-gcm`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Alg::Aes128Gcm => "aes-128-gcm",
            Alg::Aes256Gcm => "aes-256-gcm",
            Alg::Chacha20Poly1305 => "chacha20-poly1305",
            Alg::Aes128CtrHmacSha256 => "aes-128-ctr-hmac-sha256",
            Alg::Present80CtrHmacSha256 => "present-80-ctr-hmac-sha256",
            Alg::Present128CtrHmacSha256 => "present-128-ctr-hmac-sha256",
            Alg::Sha256 => "sha256",
            Alg::Present80Ctr => "present-80-ctr",
            Alg::Present128Ctr => "present-128-ctr",
        }
    }

    /// Which construction the algorithm is.
    pub fn family(self) -> AlgFamily {
        match self {
            Alg::Aes128Gcm | Alg::Aes256Gcm | Alg::Chacha20Poly1305 => AlgFamily::Aead,
            Alg::Aes128CtrHmacSha256
            | Alg::Present80CtrHmacSha256
            | Alg::Present128CtrHmacSha256 => AlgFamily::CtrHmac,
            Alg::Sha256 => AlgFamily::Digest,
            Alg::Present80Ctr | Alg::Present128Ctr => AlgFamily::Cipher,
        }
    }

    /// Length of the cipher key in bytes (0 for SHA-256).
    pub fn cipher_key_len(self) -> usize {
        match self {
            Alg::Aes128Gcm | Alg::Aes128CtrHmacSha256 => 16,
            Alg::Aes256Gcm | Alg::Chacha20Poly1305 => 32,
            Alg::Present80CtrHmacSha256 | Alg::Present80Ctr => 10,
            Alg::Present128CtrHmacSha256 | Alg::Present128Ctr => 16,
            Alg::Sha256 => 0,
        }
    }

    /// Length of the per-operation IV/nonce: 12 for AEADs, the full counter block for CTR
    /// (16 for AES, 8 for PRESENT), 0 for SHA-256.
    pub fn iv_len(self) -> usize {
        match self {
            Alg::Aes128Gcm | Alg::Aes256Gcm | Alg::Chacha20Poly1305 => 12,
            Alg::Aes128CtrHmacSha256 => 16,
            Alg::Present80CtrHmacSha256
            | Alg::Present128CtrHmacSha256
            | Alg::Present80Ctr
            | Alg::Present128Ctr => 8,
            Alg::Sha256 => 0,
        }
    }

    /// Whether the algorithm is PRESENT (the cipher the bitsliced engine implements).
    pub fn is_present(self) -> bool {
        matches!(
            self,
            Alg::Present80CtrHmacSha256
                | Alg::Present128CtrHmacSha256
                | Alg::Present80Ctr
                | Alg::Present128Ctr
        )
    }

    /// Whether the algorithm needs a separate HMAC key.
    pub fn needs_auth_key(self) -> bool {
        self.family() == AlgFamily::CtrHmac
    }

    /// Whether `tag_len` is allowed: 16 for AEADs; 16 (RFC 4868) or 32 for HMAC;
    /// 1..=32 for SHA-256; 0 for a cipher alone.
    pub fn tag_len_ok(self, tag_len: usize) -> bool {
        match self.family() {
            AlgFamily::Aead => tag_len == 16,
            AlgFamily::CtrHmac => tag_len == 16 || tag_len == 32,
            AlgFamily::Digest => (1..=32).contains(&tag_len),
            AlgFamily::Cipher => tag_len == 0,
        }
    }

    /// The tag length used when a caller does not choose one.
    pub fn default_tag_len(self) -> usize {
        match self.family() {
            AlgFamily::Aead | AlgFamily::CtrHmac => 16,
            AlgFamily::Digest => 32,
            AlgFamily::Cipher => 0,
        }
    }
}

impl fmt::Display for Alg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Alg {
    type Err = AccelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Alg::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| AccelError::BadArgument(format!("unknown algorithm `{s}`")))
    }
}

impl From<Alg> for String {
    fn from(a: Alg) -> String {
        a.as_str().to_string()
    }
}

impl TryFrom<String> for Alg {
    type Error = AccelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Alg::ALL {
            assert_eq!(a.as_str().parse::<Alg>().unwrap(), a);
        }
        assert!("aes-512-gcm".parse::<Alg>().is_err());
    }

    #[test]
    fn tag_lengths() {
        assert!(Alg::Aes128Gcm.tag_len_ok(16));
        assert!(!Alg::Aes128Gcm.tag_len_ok(12));
        assert!(Alg::Aes128CtrHmacSha256.tag_len_ok(32));
        assert!(!Alg::Sha256.tag_len_ok(0));
        for a in Alg::ALL {
            assert!(a.tag_len_ok(a.default_tag_len()));
        }
    }
}
