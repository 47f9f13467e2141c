//! Bearer tokens of the local control endpoints (controller, host agents, tunnel element
//! managers): made from the kernel's randomness, written to and read from 0600 files,
//! compared in constant time.

use std::fmt::Write as _;
use std::io::{Read, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use zeroize::Zeroizing;

/// A bearer token as the endpoints hold it: wiped from memory when dropped.
pub type Token = Zeroizing<String>;

/// The token in `file` (surrounding whitespace trimmed, not empty); errors name the file,
/// never its content.
pub fn read_file(file: &Path) -> Result<Token, String> {
    let raw = Zeroizing::new(
        std::fs::read_to_string(file).map_err(|e| format!("token file {}: {e}", file.display()))?,
    );
    let t = Zeroizing::new(raw.trim().to_string());
    if t.is_empty() {
        return Err(format!("token file {}: is empty", file.display()));
    }
    Ok(t)
}

/// `bytes` in lower-case hex, written in place into a buffer sized up front, so no
/// unzeroized copy of a secret is left behind.
pub fn hex(bytes: &[u8]) -> Token {
    let mut t = Zeroizing::new(String::with_capacity(bytes.len() * 2));
    for b in bytes {
        let _ = write!(t, "{b:02x}");
    }
    t
}

/// A new random token: 24 bytes from the kernel, in hex.
pub fn random() -> Result<Token, String> {
    let mut raw = Zeroizing::new([0u8; 24]);
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw[..]))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(hex(&raw[..]))
}

/// Writes `data` to `file`, replacing it, created with mode 0600: a secret's file. The
/// error names the file, never the data.
pub fn write_private(file: &Path, data: &[u8]) -> Result<(), String> {
    let _ = std::fs::remove_file(file);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(data))
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// Whether `given` equals `expected`, in time independent of where they differ.
pub fn matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether an HTTP `Authorization` header value is `Bearer <expected>`.
pub fn bearer_matches(header: Option<&str>, expected: &str) -> bool {
    header
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| matches(given, expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_are_hex_and_differ_and_private_files_are_0600() {
        let (a, b) = (random().unwrap(), random().unwrap());
        assert_eq!(a.len(), 48);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(*a, *b);
        assert_eq!(*hex(&[0, 0xab, 0x7f]), "00ab7f");
        let dir = std::env::temp_dir().join(format!("nfx-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        write_private(&f, b"old").unwrap();
        write_private(&f, a.as_bytes()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(*read_file(&f).unwrap(), *a);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bearer_header_must_carry_exactly_the_token() {
        assert!(bearer_matches(Some("Bearer abc"), "abc"));
        for bad in [
            None,
            Some("abc"),
            Some("Bearer ab"),
            Some("Bearer abcd"),
            Some("bearer abc"),
        ] {
            assert!(!bearer_matches(bad, "abc"), "{bad:?}");
        }
    }

    #[test]
    fn token_files_are_trimmed_and_must_not_be_empty() {
        let d = std::env::temp_dir().join(format!("nfx-io-token-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("t"), "  secret\n").unwrap();
        assert_eq!(read_file(&d.join("t")).unwrap().as_str(), "secret");
        std::fs::write(d.join("e"), "\n").unwrap();
        assert!(read_file(&d.join("e")).unwrap_err().contains("is empty"));
        assert!(read_file(&d.join("missing"))
            .unwrap_err()
            .contains("missing"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
