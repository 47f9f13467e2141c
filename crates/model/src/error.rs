//! The one error type of the model: every complaint names the file, the field and the fault.

use std::fmt;

/// A descriptor, calibration or workload problem, located precisely enough to fix by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelError {
    /// The file the problem is in (or a label such as `<input>` for in-memory text).
    pub file: String,
    /// The field path, e.g. `services[1].sla.max_latency_us`; empty for the whole document.
    pub field: String,
    /// What is wrong, in words.
    pub message: String,
}

impl ModelError {
    /// Builds an error for `field` of `file`.
    pub fn new(file: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError {
            file: file.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.field, self.message)
        }
    }
}

/// Parses YAML (or JSON, which is YAML) text into `T`, naming the field path on failure.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, ModelError> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| located(file, e))
}

/// Parses JSON text into `T`, naming the field path on failure.
pub fn parse_json<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, ModelError> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| located(file, e))
}

/// Reads a whole file, turning an I/O failure into a [`ModelError`] naming it.
pub fn read_file(path: &std::path::Path) -> Result<String, ModelError> {
    std::fs::read_to_string(path)
        .map_err(|e| ModelError::new(&path.display().to_string(), "", format!("cannot read: {e}")))
}

fn located<E: fmt::Display>(file: &str, e: serde_path_to_error::Error<E>) -> ModelError {
    let mut field = e.path().to_string();
    if field == "." {
        field.clear();
    }
    let message = e.into_inner().to_string();
    if let Some(name) = unknown_field_name(&message) {
        let last = field.rsplit(['.', ']']).next().unwrap_or("");
        field = if last == name {
            field
        } else if field.is_empty() {
            name.to_string()
        } else {
            format!("{field}.{name}")
        };
    }
    ModelError::new(file, field, message)
}

/// Extracts `foo` from serde's "unknown field `foo`, expected ..." so the path ends at the culprit.
fn unknown_field_name(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        x: u32,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Inner>,
    }

    #[test]
    fn type_error_names_the_path() {
        let e = parse_yaml::<Outer>("f.yaml", "items:\n  - x: 1\n  - x: -3\n").unwrap_err();
        assert_eq!(e.file, "f.yaml");
        assert_eq!(e.field, "items[1].x");
        assert!(e.message.contains("-3"), "{e}");
    }

    #[test]
    fn unknown_field_names_the_field() {
        let e = parse_yaml::<Outer>("f.yaml", "items:\n  - x: 1\n    y: 2\n").unwrap_err();
        assert_eq!(e.field, "items[0].y");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn json_errors_are_located_too() {
        let e = parse_json::<Outer>("w.json", r#"{"items":[{"x":"a"}]}"#).unwrap_err();
        assert_eq!(e.field, "items[0].x");
        assert_eq!(e.to_string().split(": ").next(), Some("w.json"));
        let e = parse_json::<Outer>("w.json", r#"{"items":[{"x":1,"z":2}]}"#).unwrap_err();
        assert_eq!(e.field, "items[0].z");
    }

    #[test]
    fn missing_file_is_named() {
        let e = read_file(std::path::Path::new("/nonexistent/nfx.yaml")).unwrap_err();
        assert_eq!(e.file, "/nonexistent/nfx.yaml");
        assert!(e.message.contains("cannot read"));
    }
}
