//! What a mount's provider is: the embedder's code that answers the guest's file calls
//! under one guest folder (see docs/files.md).

use bytes::Bytes;

use crate::errno::Errno;

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
}

/// A path's metadata, as a provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    /// Bytes, for a file (0 for a folder).
    pub size: u64,
    /// Last modification, nanoseconds since the Unix epoch (0 when unknown).
    pub mtime_ns: u64,
}

/// Why a provider call did not succeed. Its text is what the record keeps of a fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// A refusal the guest sees as this errno.
    #[error("refused with {}", .0.name())]
    Errno(Errno),
    /// Anything else the provider raised: the guest sees EIO; the record keeps this text
    /// (an exception's type and first line), the guest never does.
    #[error("{0}")]
    Fault(String),
}

impl From<Errno> for FileError {
    fn from(e: Errno) -> Self {
        FileError::Errno(e)
    }
}

/// The embedder's code behind a mount. Paths are normalised and absolute inside the
/// mount: `/` is the mount itself, `/a/b.csv` a file in its folder `a`; never `..`, `.`,
/// an empty component or a trailing `/`.
///
/// The read half is required; a writable mount also needs the write half (whose
/// defaults refuse with EROFS). `write` receives a file's whole content: a creation or
/// a truncation at open arrives as an empty write when the file is closed.
///
/// Calls may block: each runs on a thread of its own, bounded by the mount's timeout and
/// the run's deadline and cancel, unless [`FileProvider::inline`] says the provider is
/// bounded in-memory code that may run on the guest's thread.
pub trait FileProvider: Send + Sync + 'static {
    fn stat(&self, path: &str) -> Result<Stat, FileError>;
    /// The entries of the folder `path`: (name, kind), names without `/`.
    fn list(&self, path: &str) -> Result<Vec<(String, FileKind)>, FileError>;
    fn read(&self, path: &str) -> Result<Bytes, FileError>;
    fn write(&self, _path: &str, _data: Bytes) -> Result<(), FileError> {
        Err(Errno::Rofs.into())
    }
    fn mkdir(&self, _path: &str) -> Result<(), FileError> {
        Err(Errno::Rofs.into())
    }
    fn remove(&self, _path: &str) -> Result<(), FileError> {
        Err(Errno::Rofs.into())
    }
    fn rmdir(&self, _path: &str) -> Result<(), FileError> {
        Err(Errno::Rofs.into())
    }
    fn rename(&self, _from: &str, _to: &str) -> Result<(), FileError> {
        Err(Errno::Rofs.into())
    }
    /// Whether calls are bounded, non-blocking work that may run on the guest's thread
    /// (the built-in [`crate::MemoryFiles`]). Default: no.
    fn inline(&self) -> bool {
        false
    }
    /// Runs `body` (a provider call on its own thread, which the runtime starts from its
    /// own pool) inside whatever the provider needs around it: the one hook by which the
    /// embedder prepares the thread (the Python binding attaches it to the interpreter).
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        body()
    }
}
