//! Errors of DPI set-up: every one names the file (and line) or the config field,
//! and what is wrong.

use std::path::PathBuf;

/// Why a DPI node could not be built. The pattern file may be any file a config
/// names, so no message quotes its content: errors name the file, the line and what
/// is wrong.
#[derive(Debug, thiserror::Error)]
pub enum DpiError {
    /// The pattern file could not be read within the config's file scope.
    #[error("{0}")]
    Open(#[from] nfx_io::ConfineError),
    /// A line is not `id<TAB>action<TAB>kind<TAB>pattern`, or its pattern is invalid
    /// (bad regex, bad escape, matches the empty string, duplicate id, ...).
    #[error("{path}:{line}: {problem}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
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
