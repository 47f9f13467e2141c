//! Errors of DPI set-up: every one names the file (and line and pattern id) or the
//! config field, and what is wrong.

use std::path::PathBuf;

/// Why a DPI node could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DpiError {
    /// The pattern file could not be read.
    #[error("{path}: cannot read pattern file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not `id<TAB>action<TAB>kind<TAB>pattern`.
    #[error("{path}:{line}: {problem}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// One pattern is invalid (bad regex, bad escape, matches the empty string, ...).
    #[error("{path}:{line}: pattern {id}: {problem}")]
    Pattern {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The pattern's id.
        id: String,
        /// What is wrong.
        problem: String,
    },
    /// The file as a whole is unusable (empty, too large, engine cannot run it).
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A field of the node's config is out of range.
    #[error("dpi.{field}: {problem}")]
    Config {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}
