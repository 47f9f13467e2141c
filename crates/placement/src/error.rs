//! Errors of the placement crate: bad files, bad fields, unhostable instances.

use std::path::PathBuf;

/// Everything that can go wrong when reading or solving a placement instance.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// File that failed.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The JSON did not match the instance schema.
    #[error("{file}: {message}")]
    Json {
        /// File (or `<input>`) that failed.
        file: String,
        /// serde_json's message, which names the field and the position.
        message: String,
    },
    /// A field has a value the model does not accept.
    #[error("{file}: field `{field}`: {message}")]
    Field {
        /// File (or `<input>`) that failed.
        file: String,
        /// Path of the field, e.g. `devices[3].cpu_capacity`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A VNF instance cannot be hosted by any device.
    #[error("vnf instance `{id}` cannot be hosted by any device: {reason}")]
    Unhostable {
        /// Id of the instance.
        id: String,
        /// Why every device was rejected.
        reason: String,
    },
    /// There is no feasible placement (not enough devices), or none was found in time.
    #[error("no feasible placement: {0}")]
    NoPlacement(String),
    /// A bin-packing text file is malformed.
    #[error("{file}: line {line}: {message}")]
    BppFormat {
        /// File that failed.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Result type of the placement crate.
pub type Result<T> = std::result::Result<T, PlacementError>;
