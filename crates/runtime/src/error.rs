//! [`Error`]: why a run could not start, or the runtime could not be set up; never a guest's doing.

use std::path::PathBuf;

/// Why a run could not start, or the runtime could not be set up.
///
/// Nothing a guest does produces an `Error`: a guest's exit, exception, trap or
/// exhausted limit is a [`crate::Completed`]. These are the embedder's and the
/// machine's faults, found before the guest runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The guest artifacts are not where they were looked for, or are incomplete.
    #[error("the guest artifacts in {dir} are missing {missing}; run `{fix}` to lay them out")]
    ArtifactsMissing {
        dir: PathBuf,
        missing: String,
        fix: &'static str,
    },
    /// The artifacts are present but unusable (a bad manifest, a checksum mismatch).
    #[error("the guest artifacts in {dir} are unusable: {reason}")]
    ArtifactsInvalid { dir: PathBuf, reason: String },
    /// A grant of a host folder that cannot be honoured.
    #[error("grant {guest_path:?} <- {host_path}: {reason}")]
    Grant {
        host_path: PathBuf,
        guest_path: String,
        reason: String,
    },
    /// A run setting out of range.
    #[error("{param}: {reason}")]
    InvalidConfig {
        param: &'static str,
        reason: String,
    },
    /// Compiling, caching or loading the guest module failed.
    #[error("preparing the guest module failed: {0}")]
    Module(String),
    /// A module named in `preload` does not import in the guest: no snapshot was built.
    #[error("preloading {module:?} failed, so no snapshot was built:\n{traceback}")]
    Preload { module: String, traceback: String },
    /// A snapshot could not be built or loaded for another reason.
    #[error("the snapshot preloading {modules:?} could not be made: {reason}")]
    Snapshot { modules: Vec<String>, reason: String },
    /// A host I/O failure while preparing a run (temp folders, threads).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A bug in this runtime: something it should never do happened.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
