//! Small semantic checks shared by the descriptor validators.

use crate::error::ModelError;
use std::collections::HashMap;

/// Requires a finite number ≥ 0 (latencies, costs, watts).
pub fn non_negative(file: &str, field: &str, v: f64) -> Result<(), ModelError> {
    if !v.is_finite() || v < 0.0 {
        return Err(ModelError::new(
            file,
            field,
            format!("must be a finite number >= 0, got {v}"),
        ));
    }
    Ok(())
}

/// Requires a finite number > 0 (throughputs, capacities).
pub fn positive(file: &str, field: &str, v: f64) -> Result<(), ModelError> {
    if !v.is_finite() || v <= 0.0 {
        return Err(ModelError::new(
            file,
            field,
            format!("must be a finite number > 0, got {v}"),
        ));
    }
    Ok(())
}

/// Requires a usable identifier: non-empty, no whitespace.
pub fn ident(file: &str, field: &str, v: &str) -> Result<(), ModelError> {
    if v.is_empty() || v.chars().any(char::is_whitespace) {
        return Err(ModelError::new(
            file,
            field,
            format!("must be a non-empty name without spaces, got {v:?}"),
        ));
    }
    Ok(())
}

/// Tracks ids of one kind and rejects the second use of a name.
pub struct Unique<'a> {
    what: &'static str,
    seen: HashMap<&'a str, String>,
}

impl<'a> Unique<'a> {
    /// Starts an empty set of `what` ids (used in messages, e.g. "host").
    pub fn new(what: &'static str) -> Self {
        Unique {
            what,
            seen: HashMap::new(),
        }
    }

    /// Records `id` found at `field`, or fails naming where it was first defined.
    pub fn insert(&mut self, file: &str, field: &str, id: &'a str) -> Result<(), ModelError> {
        ident(file, field, id)?;
        if let Some(first) = self.seen.get(id) {
            return Err(ModelError::new(
                file,
                field,
                format!(
                    "duplicate {} id {id:?} (first defined at {first})",
                    self.what
                ),
            ));
        }
        self.seen.insert(id, field.to_string());
        Ok(())
    }

    /// Whether `id` was recorded.
    pub fn contains(&self, id: &str) -> bool {
        self.seen.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert!(non_negative("f", "a", 0.0).is_ok());
        assert!(non_negative("f", "a", -1.0).is_err());
        assert!(non_negative("f", "a", f64::NAN).is_err());
        assert!(positive("f", "a", 0.5).is_ok());
        let e = positive("f", "a.b", 0.0).unwrap_err();
        assert_eq!(e.field, "a.b");
        assert!(e.message.contains("> 0"));
    }

    #[test]
    fn identifiers() {
        assert!(ident("f", "id", "edge-1").is_ok());
        assert!(ident("f", "id", "").is_err());
        assert!(ident("f", "id", "a b").is_err());
    }

    #[test]
    fn duplicates() {
        let mut u = Unique::new("host");
        u.insert("f", "hosts[0].id", "a").unwrap();
        let e = u.insert("f", "hosts[1].id", "a").unwrap_err();
        assert_eq!(e.field, "hosts[1].id");
        assert!(e.message.contains("hosts[0].id"), "{e}");
        assert!(u.contains("a") && !u.contains("b"));
    }
}
