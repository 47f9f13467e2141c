//! The error type of API calls (per-operation outcomes are a `Status` instead).

/// Why an engine call (not a single operation) failed.
#[derive(Debug, thiserror::Error)]
pub enum AccelError {
    /// The caller passed something invalid; the message says what.
    #[error("bad argument: {0}")]
    BadArgument(String),
    /// The session id is unknown to this engine.
    #[error("no such session {0}")]
    NoSession(u32),
    /// The lookaside device refused the client (e.g. all queue pairs are taken).
    #[error("accelerator device refused: {0}")]
    Refused(String),
    /// The lookaside device is unreachable and no fallback is configured.
    #[error("accelerator device gone: {0}")]
    DeviceGone(String),
    /// The engine's buffer pool is exhausted.
    #[error("buffer pool exhausted ({0} buffers in use)")]
    NoBuffers(usize),
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What nfx was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl AccelError {
    /// Wraps the last OS error with a description of what was being done.
    pub(crate) fn last_os(context: impl Into<String>) -> Self {
        AccelError::Io {
            context: context.into(),
            source: std::io::Error::last_os_error(),
        }
    }
}
