//! Bearer tokens of the local control endpoints (controller, host agents, tunnel element
//! managers): read from a file, compared in constant time.

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
