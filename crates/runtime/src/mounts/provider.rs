//! What a mount's provider is: the embedder's code that answers the guest's file calls
//! under one guest folder (see docs/files.md).

use bytes::Bytes;

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

/// The errors a provider may answer with, by POSIX name; the guest sees the same errno.
/// The discriminants are WASI preview 1's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum Errno {
    Acces = 2,
    Again = 6,
    Badf = 8,
    Busy = 10,
    Exist = 20,
    Fbig = 22,
    Ilseq = 25,
    Inval = 28,
    Io = 29,
    Isdir = 31,
    Loop = 32,
    Mfile = 33,
    Nametoolong = 37,
    Noent = 44,
    Nomem = 48,
    Nospc = 51,
    Nosys = 52,
    Notdir = 54,
    Notempty = 55,
    Notsup = 58,
    Perm = 63,
    Rofs = 69,
    Timedout = 73,
    Xdev = 75,
    Notcapable = 76,
}

impl Errno {
    /// Every errno a provider may name, with its POSIX name (upper case, no `E`).
    pub const ALL: &[(Errno, &str)] = &[
        (Errno::Acces, "ACCES"),
        (Errno::Again, "AGAIN"),
        (Errno::Badf, "BADF"),
        (Errno::Busy, "BUSY"),
        (Errno::Exist, "EXIST"),
        (Errno::Fbig, "FBIG"),
        (Errno::Ilseq, "ILSEQ"),
        (Errno::Inval, "INVAL"),
        (Errno::Io, "IO"),
        (Errno::Isdir, "ISDIR"),
        (Errno::Loop, "LOOP"),
        (Errno::Mfile, "MFILE"),
        (Errno::Nametoolong, "NAMETOOLONG"),
        (Errno::Noent, "NOENT"),
        (Errno::Nomem, "NOMEM"),
        (Errno::Nospc, "NOSPC"),
        (Errno::Nosys, "NOSYS"),
        (Errno::Notdir, "NOTDIR"),
        (Errno::Notempty, "NOTEMPTY"),
        (Errno::Notsup, "NOTSUP"),
        (Errno::Perm, "PERM"),
        (Errno::Rofs, "ROFS"),
        (Errno::Timedout, "TIMEDOUT"),
        (Errno::Xdev, "XDEV"),
        (Errno::Notcapable, "NOTCAPABLE"),
    ];

    /// The errno named `name` ("ENOENT" or "NOENT", any case); `None` if unknown.
    pub fn from_name(name: &str) -> Option<Errno> {
        let upper = name.trim().to_ascii_uppercase();
        // Linux names ENOTSUP's number EOPNOTSUPP (Python's `errno.errorcode` does too).
        let n = match upper.as_str() {
            "EOPNOTSUPP" | "OPNOTSUPP" => "NOTSUP",
            n => n.strip_prefix('E').filter(|rest| Errno::ALL.iter().any(|(_, x)| x == rest)).unwrap_or(n),
        };
        Errno::ALL.iter().find(|(_, x)| *x == n).map(|(e, _)| *e)
    }

    /// The POSIX name, with its `E`: "ENOENT".
    pub fn name(self) -> String {
        let n = Errno::ALL.iter().find(|(e, _)| *e == self).map_or("IO", |(_, n)| n);
        format!("E{n}")
    }

    /// WASI preview 1's number for it.
    pub fn wasi(self) -> i32 {
        self as u16 as i32
    }
}

/// Why a provider call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileError {
    /// A refusal the guest sees as this errno.
    Errno(Errno),
    /// Anything else the provider raised: the guest sees EIO; the record keeps this text
    /// (an exception's type and first line), the guest never does.
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
    /// Runs `body` (a provider call on its own thread) inside whatever the provider needs
    /// around it; the Python binding attaches the thread to the interpreter here.
    fn enter_thread(&self, body: Box<dyn FnOnce() + Send + '_>) {
        body()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_with_or_without_their_e_and_in_any_case() {
        for (e, n) in Errno::ALL {
            assert_eq!(Errno::from_name(n), Some(*e), "{n}");
            assert_eq!(Errno::from_name(&format!("E{n}")), Some(*e), "{n}");
            assert_eq!(Errno::from_name(&e.name().to_lowercase()), Some(*e), "{n}");
        }
        // EXDEV is not "E" + "XDEV" misread as "EXDEV" without its E, nor EEXIST as "EXIST".
        assert_eq!(Errno::from_name("EXDEV"), Some(Errno::Xdev));
        assert_eq!(Errno::from_name("EEXIST"), Some(Errno::Exist));
        assert_eq!(Errno::from_name("EOPNOTSUPP"), Some(Errno::Notsup));
        assert_eq!(Errno::from_name("ENOTBLK"), None);
    }
}
