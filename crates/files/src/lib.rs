//! What a mount is made of, without wasmtime: the [`FileProvider`] trait an embedder
//! implements, the built-in [`MemoryFiles`], the resolution of a guest's path inside a
//! mount, the bytes of a folder listing as WASI preview 1 lays them out, the [`Errno`]
//! table, and the [`FileRecord`] a run reports.
//!
//! Values in, values out: this crate starts no thread, does no I/O but reading the
//! wall clock for `MemoryFiles`' modification times, and knows neither wasmtime nor
//! Python. The runtime (`wasi-python-runtime`, `mounts/`) routes the guest's calls here,
//! stages open files and bounds provider calls. **Invariant:** [`resolve`] never yields a
//! path above the mount's root, whatever the guest sends (proptested).
#![forbid(unsafe_code)]

mod dirent;
mod errno;
mod memory;
mod path;
mod provider;
mod record;

pub use dirent::{DirEntry, encode_dirents};
pub use errno::Errno;
pub use memory::{Change, MemoryFiles};
pub use path::{Resolved, file_name, parent, resolve};
pub use provider::{FileError, FileKind, FileProvider, Stat};
pub use record::{FileFault, FileRecord, RECORD_LIMIT};
