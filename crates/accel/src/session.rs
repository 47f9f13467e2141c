//! Sessions: algorithm + keys + direction, created once and referenced by every operation.

use std::fmt;

use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::{AccelError, Alg};

/// Key material: zeroized on drop and never printed.
#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Takes ownership of key bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        SecretBytes(bytes)
    }

    /// Copies key bytes from a slice.
    pub fn from_slice(bytes: &[u8]) -> Self {
        SecretBytes(bytes.to_vec())
    }

    /// The key bytes (for the engines only).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Number of key bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for an empty key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes(<{} bytes redacted>)", self.0.len())
    }
}

/// Whether a session protects (encrypt / compute tag) or opens (verify tag / decrypt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Encrypt and write the tag (SHA-256: write the digest).
    Encrypt,
    /// Verify the tag, then decrypt (SHA-256: verify the digest).
    Decrypt,
}

/// Handle of a session inside one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u32);

/// Everything needed to create a session; the engine keeps its own expanded keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// The transform.
    pub alg: Alg,
    /// Encrypt or decrypt.
    pub dir: Direction,
    /// Cipher key (`alg.cipher_key_len()` bytes; empty for SHA-256).
    pub key: SecretBytes,
    /// HMAC key for the CTR+HMAC algorithms (1..=255 bytes); empty otherwise.
    pub auth_key: SecretBytes,
    /// Tag length written/verified (see `Alg::tag_len_ok`).
    pub tag_len: usize,
}

/// Longest HMAC key accepted.
pub const MAX_AUTH_KEY: usize = 255;

impl SessionSpec {
    /// A spec with the algorithm's default tag length.
    pub fn new(alg: Alg, dir: Direction, key: &[u8], auth_key: &[u8]) -> Self {
        SessionSpec {
            alg,
            dir,
            key: SecretBytes::from_slice(key),
            auth_key: SecretBytes::from_slice(auth_key),
            tag_len: alg.default_tag_len(),
        }
    }

    /// Checks key and tag lengths against the algorithm.
    pub fn validate(&self) -> Result<(), AccelError> {
        let alg = self.alg;
        if self.key.len() != alg.cipher_key_len() {
            return Err(AccelError::BadArgument(format!(
                "{alg}: key must be {} bytes, got {}",
                alg.cipher_key_len(),
                self.key.len()
            )));
        }
        if alg.needs_auth_key() {
            if self.auth_key.is_empty() || self.auth_key.len() > MAX_AUTH_KEY {
                return Err(AccelError::BadArgument(format!(
                    "{alg}: HMAC key must be 1..={MAX_AUTH_KEY} bytes, got {}",
                    self.auth_key.len()
                )));
            }
        } else if !self.auth_key.is_empty() {
            return Err(AccelError::BadArgument(format!("{alg}: takes no HMAC key")));
        }
        if !alg.tag_len_ok(self.tag_len) {
            return Err(AccelError::BadArgument(format!(
                "{alg}: tag length {} not supported",
                self.tag_len
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_keys() {
        let s = SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[0xab; 16], &[]);
        let d = format!("{s:?}");
        assert!(!d.contains("171") && !d.to_lowercase().contains("ab, "));
        assert!(d.contains("redacted"));
    }

    #[test]
    fn validate_checks_lengths() {
        assert!(
            SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[0; 16], &[])
                .validate()
                .is_ok()
        );
        assert!(
            SessionSpec::new(Alg::Aes128Gcm, Direction::Encrypt, &[0; 15], &[])
                .validate()
                .is_err()
        );
        assert!(
            SessionSpec::new(Alg::Aes128CtrHmacSha256, Direction::Encrypt, &[0; 16], &[])
                .validate()
                .is_err()
        );
        assert!(SessionSpec::new(Alg::Sha256, Direction::Encrypt, &[], &[1])
            .validate()
            .is_err());
        let mut s = SessionSpec::new(
            Alg::Aes128CtrHmacSha256,
            Direction::Encrypt,
            &[0; 16],
            &[1; 32],
        );
        s.tag_len = 32;
        assert!(s.validate().is_ok());
        s.tag_len = 20;
        assert!(s.validate().is_err());
    }
}
