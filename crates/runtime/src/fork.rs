//! Session snapshots: a resting interpreter taken between turns ([`crate::Session::snapshot`]),
//! forked into new sessions and runs, saved to bytes and loaded in another process.
//!
//! What a snapshot is: the guest's whole linear memory (CPython's heap, every module,
//! object and thread state), its size, and the guest's monotonic clock. That is all the
//! state a resting guest has beyond what the host rebuilds anyway:
//! - wasm globals: the pinned guest has two, `__stack_pointer` (mutable, not exported) and
//!   `__memory_base` (constant). Between turns no guest frame is live, so the shadow stack
//!   pointer is back at its initial value (every function restores it on return, and
//!   exception landing pads from a saved local); an image replaces only memory, and
//!   [`check_globals`] refuses a module with more than one mutable global;
//! - the table is never written (no dlopen in WASI), so it is the module's own;
//! - descriptors: wasmtime-wasi's table cannot be carried, so a snapshot is refused while
//!   the guest holds any beyond stdio and its folders ([`SnapshotError::OpenFiles`]), and
//!   wasi-libc's table of preopened folders is emptied in the copy, as in a preload image
//!   (snapshot.rs, [`crate::preopen_table`]): the new guest finds its own folders;
//! - the private `/tmp` and working folder are not carried (they are the old session's,
//!   removed with it); env, cwd, random state, tools are reset by the restore turn
//!   (guest/_wasi_python_boot.py `restore`).
//!
//! In memory, a snapshot taken here is a file (a memfd on Linux, else a temporary file)
//! that [`Module::with_memory_image`](wasmtime::Module) maps copy-on-write, as a preload
//! image is: a fork is a new store over it, and shares every page it does not write.
//! Saved, it is the pages that differ from its base (the preload image the first session
//! started from; no base: every non-zero page), in the `wasi-python-image` format. A
//! loaded one with a base stays those pages: a fork starts from the base image and the
//! pages are written over its memory before any guest code runs (`Guest::patch`), so a
//! load copies nothing; without a base they are written into a new image file.
//!
//! **Invariant:** a snapshot is taken only between turns, on the session thread; a load
//! checks format, guest, wasmtime, engine, package and base before any guest code runs,
//! and a snapshot larger than a run's `memory_bytes` is refused before it starts.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use wasi_python_image::{FormatError, Header, Key, Limits as ImageLimits, PAGE, Pages, WASM_PAGE};

use crate::engine::{Flavour, Flavoured, WASMTIME_VERSION};
use crate::host::GUEST_CLOCK_START;
use crate::snapshot::{Image, Modules};
use crate::{Error, Runtime, SessionEnd};

/// The package version a saved snapshot must have been written by (with the hash of the
/// guest package's files, `snapshot::package_id`).
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a snapshot could not be taken, saved or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A turn is running: a snapshot is taken between turns.
    #[error("the session is running a turn; a snapshot is taken between turns")]
    Busy,
    /// The session has ended.
    #[error("the session has ended ({0}); there is no interpreter to snapshot")]
    Ended(SessionEnd),
    /// The guest holds files open (beyond stdio and its folders), which a snapshot cannot carry.
    #[error("the guest holds {count} file(s) open, which a snapshot cannot carry; close them first")]
    OpenFiles { count: usize },
    /// The bytes are not a snapshot this package reads.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The snapshot was made for another guest, wasmtime, engine, package or base image.
    #[error("the snapshot was made for another {what} ({file}; this runtime has {here})")]
    Mismatch { what: &'static str, file: String, here: String },
    /// A snapshot file to load is not a regular file (a device, a pipe, a folder).
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    /// A host I/O failure.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Preparing the runtime (the base image, the engine) failed.
    #[error(transparent)]
    Runtime(#[from] Error),
}

impl SnapshotError {
    /// A short name: "busy", "ended", "open_files", the format's kind ("magic",
    /// "version", "truncated", "malformed", "too_large", "clock", "checksum",
    /// "unsigned", "signature", "compression"),
    /// "other_guest", "other_wasmtime", "other_engine", "other_package", "other_base",
    /// "not_a_file", "io", "runtime".
    pub fn kind(&self) -> &'static str {
        match self {
            SnapshotError::Busy => "busy",
            SnapshotError::Ended(_) => "ended",
            SnapshotError::OpenFiles { .. } => "open_files",
            SnapshotError::Format(f) => f.kind(),
            SnapshotError::Mismatch { what, .. } => match *what {
                "guest" => "other_guest",
                "wasmtime" => "other_wasmtime",
                "engine" => "other_engine",
                "package" => "other_package",
                _ => "other_base",
            },
            SnapshotError::NotAFile { .. } => "not_a_file",
            SnapshotError::Io { .. } => "io",
            SnapshotError::Runtime(_) => "runtime",
        }
    }
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SnapshotError::Io { context: context.into(), source }
    }
}

/// A resting interpreter: its memory, the memory's size and its clock. Cheap to clone;
/// every session or run started from it is an independent copy-on-write fork.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
}

/// Where a snapshot's memory is.
enum Memory {
    /// All of it in one file: a snapshot taken here, or loaded without a base image.
    Image(ImageFile),
    /// A loaded snapshot over its base image: a fork starts from the base image's
    /// engines and these pages are written over its memory before any guest code runs
    /// (`Guest::patch`). Loading copies nothing.
    Patch(Arc<Pages>),
}

struct Inner {
    memory: Memory,
    /// The memory's size in wasm pages.
    pages: u64,
    /// The guest's monotonic clock when taken, in ns.
    clock_ns: u64,
    /// The preload image the first session of this line started from (the base of a
    /// saved file), and its modules.
    base: Option<Arc<Image>>,
    base_modules: Modules,
    module_sha256: String,
    /// Engines over this image, made at the first fork of each flavour.
    flavours: Mutex<Vec<(Flavour, Arc<Flavoured>)>>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("memory_bytes", &self.memory_bytes())
            .field("base", &self.inner.base_modules)
            .finish()
    }
}

/// What a guest starts from.
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    /// The artifact's own bootstrap snapshot.
    Bootstrap,
    /// A preload image.
    Preload(Arc<Image>, Modules),
    /// A session's snapshot.
    Snapshot(Snapshot),
}

impl Origin {
    /// Whether the guest starts from an image of ours (then the program runs by a turn
    /// that first calls the guest package's `restore`).
    pub(crate) fn restored(&self) -> bool {
        !matches!(self, Origin::Bootstrap)
    }
    /// Where the guest's monotonic clock starts: never before a snapshot's reading.
    pub(crate) fn clock_start(&self) -> u64 {
        match self {
            Origin::Snapshot(s) => s.inner.clock_ns.max(GUEST_CLOCK_START),
            _ => GUEST_CLOCK_START,
        }
    }
    /// The base image a snapshot of this guest is saved against.
    pub(crate) fn base(&self) -> (Option<Arc<Image>>, Modules) {
        match self {
            Origin::Bootstrap => (None, Vec::new()),
            Origin::Preload(i, m) => (Some(i.clone()), m.clone()),
            Origin::Snapshot(s) => (s.inner.base.clone(), s.inner.base_modules.clone()),
        }
    }
}

impl Snapshot {
    /// The memory's size: a session or run from this snapshot needs `memory_bytes` at least this.
    pub fn memory_bytes(&self) -> u64 {
        self.inner.pages * WASM_PAGE
    }

    /// The modules of the preload image this snapshot's line started from (its base when saved).
    pub fn base_modules(&self) -> &[String] {
        &self.inner.base_modules
    }

    /// The engines of `flavour` a fork starts from, made on first need: over this
    /// snapshot's image, or (a patch) its base image's.
    pub(crate) fn flavour(&self, runtime: &Runtime, flavour: Flavour) -> Result<Arc<Flavoured>, Error> {
        let mut made = self.inner.flavours.lock();
        if let Some((_, f)) = made.iter().find(|(k, _)| *k == flavour) {
            return Ok(f.clone());
        }
        let f = match (&self.inner.memory, &self.inner.base) {
            (Memory::Image(image), _) => Arc::new(runtime.flavour(flavour)?.with_image(image.path(), self.inner.pages)?),
            (Memory::Patch(_), Some(base)) => runtime.preload_flavour(flavour, base, &self.inner.base_modules)?,
            (Memory::Patch(_), None) => return Err(Error::Internal("a snapshot patch without a base image".into())),
        };
        made.push((flavour, f.clone()));
        Ok(f)
    }

    /// What a fork writes over its base image's memory before any guest code runs: the
    /// memory's size in wasm pages and the pages. `None`: the image is the whole memory.
    pub(crate) fn patch(&self) -> Option<(u64, &Pages)> {
        match &self.inner.memory {
            Memory::Patch(pages) => Some((self.inner.pages, pages)),
            Memory::Image(_) => None,
        }
    }

    pub(crate) fn module_sha256(&self) -> &str {
        &self.inner.module_sha256
    }

    /// The file: the pages that differ from the base image, zstd level 3, unsigned (its
    /// checksum catches accidents, not edits).
    pub fn to_bytes(&self, runtime: &Runtime) -> Result<Vec<u8>, SnapshotError> {
        self.encode(runtime, None)
    }

    /// [`Snapshot::to_bytes`], signed with `key` (HMAC-SHA256):
    /// [`Runtime::load_signed_snapshot`] with the same key accepts it, and refuses it
    /// edited or under another key.
    pub fn to_signed_bytes(&self, runtime: &Runtime, key: &Key) -> Result<Vec<u8>, SnapshotError> {
        self.encode(runtime, Some(key))
    }

    fn encode(&self, runtime: &Runtime, key: Option<&Key>) -> Result<Vec<u8>, SnapshotError> {
        let inner = &*self.inner;
        let base_sha256 = match &inner.base {
            Some(image) => image.sha256()?,
            None => [0; 32],
        };
        let header = Header {
            module_sha256: inner.module_sha256.clone(),
            wasmtime: WASMTIME_VERSION.to_owned(),
            engine: runtime.engine_hash()?,
            package: crate::snapshot::package_id(runtime.artifacts())?,
            base_modules: inner.base_modules.clone(),
            base_sha256,
            memory_pages: inner.pages,
            clock_ns: inner.clock_ns,
        };
        let encode = |pages: &Pages| match key {
            Some(key) => wasi_python_image::encode_signed(&header, pages, 3, key),
            None => wasi_python_image::encode(&header, pages, 3),
        };
        let bytes = match &inner.memory {
            Memory::Image(image) => encode(&self.diff(image)?),
            // Already the pages that differ from the base.
            Memory::Patch(pages) => encode(pages),
        };
        Ok(bytes)
    }

    /// Writes [`Snapshot::to_bytes`] to `path`: a new temporary file in its folder
    /// (created exclusively, so never through a link planted there), synced, then
    /// renamed over `path`; removed on failure.
    pub fn save(&self, runtime: &Runtime, path: &Path) -> Result<(), SnapshotError> {
        write_new(path, &self.to_bytes(runtime)?)
    }

    /// [`Snapshot::save`] of [`Snapshot::to_signed_bytes`].
    pub fn save_signed(&self, runtime: &Runtime, path: &Path, key: &Key) -> Result<(), SnapshotError> {
        write_new(path, &self.to_signed_bytes(runtime, key)?)
    }

    /// The 4 KiB pages of the memory that differ from the base image (past its end, or
    /// without a base: from zeros).
    fn diff(&self, image: &ImageFile) -> Result<Pages, SnapshotError> {
        const CHUNK: usize = 1 << 20;
        let inner = &*self.inner;
        let total = inner.pages * WASM_PAGE;
        let base = match &inner.base {
            Some(image) => Some(File::open(&image.path).map_err(|e| SnapshotError::io(format!("opening {}", image.path.display()), e))?),
            None => None,
        };
        let base_len = inner.base.as_ref().map_or(0, |i| i.bytes());
        let mut mine = vec![0u8; CHUNK];
        let mut theirs = vec![0u8; CHUNK];
        let mut pages = Pages::new();
        let mut at = 0u64;
        while at < total {
            let n = CHUNK.min((total - at) as usize);
            read_at(image.file(), &mut mine[..n], at).map_err(|e| SnapshotError::io("reading the snapshot's memory", e))?;
            let from_base = n.min(base_len.saturating_sub(at) as usize);
            theirs[..n].fill(0);
            if let Some(f) = &base {
                read_at(f, &mut theirs[..from_base], at).map_err(|e| SnapshotError::io("reading the base image", e))?;
            }
            for (i, (a, b)) in mine[..n].chunks_exact(PAGE).zip(theirs[..n].chunks_exact(PAGE)).enumerate() {
                if a != b {
                    pages.push(((at as usize / PAGE) + i) as u32, a);
                }
            }
            at += n as u64;
        }
        Ok(pages)
    }
}

/// The largest snapshot file read: a saved 4 GiB memory compresses far below.
pub(crate) const MAX_SNAPSHOT_FILE: u64 = 4 << 30;

/// A snapshot file's bytes: opened without blocking (a FIFO would wait for a writer),
/// refused unless the descriptor is a regular file, read to at most
/// [`MAX_SNAPSHOT_FILE`] (a file growing meanwhile is refused, not read on).
fn read_snapshot_file(path: &Path) -> Result<Vec<u8>, SnapshotError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e| SnapshotError::io(format!("reading {}", path.display()), e);
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(SnapshotError::NotAFile { path: path.to_owned() });
    }
    let too_large = |value| FormatError::TooLarge { what: "the file", value, limit: MAX_SNAPSHOT_FILE };
    if meta.len() > MAX_SNAPSHOT_FILE {
        return Err(too_large(meta.len()).into());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_SNAPSHOT_FILE + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_SNAPSHOT_FILE {
        return Err(too_large(bytes.len() as u64).into());
    }
    Ok(bytes)
}

/// `bytes` to `path` through an exclusive temporary file beside it, synced, then renamed.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    use std::io::Write;
    let io = |e| SnapshotError::io(format!("writing {}", path.display()), e);
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // O_CREAT | O_EXCL under a random name: an existing file or link there is an error,
    // and another name is tried. Dropped (an error below): removed.
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(folder).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

fn read_at(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    f.read_exact_at(buf, at)
}

impl Runtime {
    /// A saved snapshot back: the format, its checksum and its header's values, then the
    /// guest module, wasmtime, engine, package and base image it names, all checked
    /// before any guest code runs; the pages are decompressed last. Hostile bytes are an
    /// error, never a panic, and what they make the host hold grows with what
    /// decompresses, not with what the header claims. The checksum catches accidents
    /// only: a file edited with its checksum recomputed loads; to refuse edits, sign
    /// ([`Snapshot::to_signed_bytes`], [`Runtime::load_signed_snapshot`]). A signed file
    /// loads here as an unsigned one. The base image must be in this runtime's cache
    /// folder already (the one the saving process used, or a copy of it): a load never
    /// builds one, since a rebuilt image's memory differs.
    pub fn load_snapshot(&self, bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        self.load(bytes, None)
    }

    /// [`Runtime::load_snapshot`] of a file signed with `key`: an unsigned file
    /// ([`FormatError::Unsigned`]) or one whose signature does not match
    /// ([`FormatError::Signature`]) is refused before anything else is read from it.
    pub fn load_signed_snapshot(&self, bytes: &[u8], key: &Key) -> Result<Snapshot, SnapshotError> {
        self.load(bytes, Some(key))
    }

    fn load(&self, bytes: &[u8], key: Option<&Key>) -> Result<Snapshot, SnapshotError> {
        // A session's memory is at most 4 GiB: the most any caller could start from it.
        let limits = ImageLimits::default();
        let opened = wasi_python_image::open(bytes, &limits, key)?;
        let header = opened.header().clone();
        let mismatch = |what, file: &str, here: &str| {
            (file != here).then(|| SnapshotError::Mismatch { what, file: file.to_owned(), here: here.to_owned() })
        };
        let artifacts = self.artifacts();
        let package = crate::snapshot::package_id(artifacts)?;
        let checks = [
            mismatch("guest", &header.module_sha256, artifacts.module_sha256()),
            mismatch("wasmtime", &header.wasmtime, WASMTIME_VERSION),
            mismatch("package", &header.package, &package),
        ];
        if let Some(e) = checks.into_iter().flatten().next() {
            return Err(e);
        }
        let engine = self.engine_hash()?;
        if header.engine != engine {
            return Err(SnapshotError::Mismatch {
                what: "engine",
                file: format!("{:016x}", header.engine),
                here: format!("{engine:016x}"),
            });
        }
        let pages = opened.pages()?;
        let base = if header.base_modules.is_empty() {
            None
        } else {
            let modules = crate::Preload::modules(&header.base_modules)
                .map_err(|e| FormatError::Malformed { what: format!("the base names bad modules: {e}") })?;
            let Some(image) = self.existing_preload_image(&modules)? else {
                return Err(SnapshotError::Mismatch {
                    what: "base image",
                    file: format!("the preload image of {}", modules.join(", ")),
                    here: "no such image in the cache folder (a rebuilt one would differ)".into(),
                });
            };
            let sha = image.sha256()?;
            if sha != header.base_sha256 {
                return Err(SnapshotError::Mismatch {
                    what: "base image",
                    file: hex(&header.base_sha256),
                    here: format!("{} ({})", hex(&sha), image.path.display()),
                });
            }
            Some(image)
        };
        let memory = if base.is_some() {
            if header.memory_bytes() < base.as_ref().map_or(0, |b| b.bytes()) {
                return Err(FormatError::Malformed { what: "the memory is smaller than its base image".into() }.into());
            }
            Memory::Patch(Arc::new(pages))
        } else {
            // No base: the pages are the whole memory's non-zero ones.
            use std::os::unix::fs::FileExt;
            let image = ImageFile::new(header.memory_bytes())?;
            for (n, page) in pages.iter() {
                image
                    .file()
                    .write_all_at(page, u64::from(n) * PAGE as u64)
                    .map_err(|e| SnapshotError::io("writing the snapshot's memory", e))?;
            }
            Memory::Image(image)
        };
        Ok(Snapshot {
            inner: Arc::new(Inner {
                memory,
                pages: header.memory_pages,
                clock_ns: header.clock_ns,
                base,
                base_modules: header.base_modules,
                module_sha256: header.module_sha256,
                flavours: Mutex::new(Vec::new()),
            }),
        })
    }

    /// [`Runtime::load_snapshot`] of a file's bytes: a regular file (not a device, a
    /// pipe or a folder, as the opened descriptor says) of at most 4 GiB.
    pub fn load_snapshot_file(&self, path: &Path) -> Result<Snapshot, SnapshotError> {
        self.load_snapshot(&read_snapshot_file(path)?)
    }

    /// A hash of the plain engine's settings (what compiled code depends on).
    pub(crate) fn engine_hash(&self) -> Result<u64, Error> {
        let f = self.plain_flavour()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        f.any_engine().precompile_compatibility_hash().hash(&mut h);
        Ok(h.finish())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A whole memory as a file the engine can map: a memfd on Linux (named by
/// `/proc/self/fd`), else a temporary file removed on drop.
struct ImageFile {
    file: File,
    path: PathBuf,
    remove: bool,
}

impl ImageFile {
    fn new(len: u64) -> Result<ImageFile, SnapshotError> {
        let io = |e| SnapshotError::io("making the snapshot's memory file", e);
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            if let Ok(fd) = rustix::fs::memfd_create("wasi-python-snapshot", rustix::fs::MemfdFlags::CLOEXEC) {
                let file = File::from(fd);
                let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                if path.exists() {
                    file.set_len(len).map_err(io)?;
                    return Ok(ImageFile { file, path, remove: false });
                }
            }
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("wpy-snapshot-{}-{n}.img", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(io)?;
        file.set_len(len).map_err(io)?;
        Ok(ImageFile { file, path, remove: true })
    }
    fn file(&self) -> &File {
        &self.file
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ImageFile {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What a session's thread needs to take a snapshot of its guest.
#[derive(Debug, Clone)]
pub(crate) struct Taker {
    pub(crate) runtime: Runtime,
    pub(crate) origin: Origin,
}

impl Taker {
    /// The guest's memory as a snapshot: non-zero pages copied into a new image file,
    /// wasi-libc's preopen table emptied, the clock read. The caller has checked that
    /// the guest is between turns and holds no files.
    pub(crate) fn take(&self, memory: &[u8], clock_ns: u64) -> Result<Snapshot, SnapshotError> {
        use std::os::unix::fs::FileExt;
        let statics = self.runtime.preopen_statics()?;
        let total = memory.len() as u64;
        let image = ImageFile::new(total)?;
        let io = |e| SnapshotError::io("writing the snapshot's memory", e);
        // The cost of a snapshot: the kernel allocates each page of the memfd (about
        // 40 ms for the 64 MB a pandas session holds; two threads did not help on two
        // busy cores).
        write_nonzero(image.file(), memory, 0, memory.len()).map_err(io)?;
        for (addr, width) in statics.iter() {
            if u64::from(*addr) + *width as u64 <= total {
                image.file().write_all_at(&[0u8; 4][..*width], u64::from(*addr)).map_err(io)?;
            }
        }
        let (base, base_modules) = self.origin.base();
        Ok(Snapshot {
            inner: Arc::new(Inner {
                memory: Memory::Image(image),
                pages: total / WASM_PAGE,
                clock_ns,
                base,
                base_modules,
                module_sha256: self.runtime.artifacts().module_sha256().to_owned(),
                flavours: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// Writes the non-zero 4 KiB pages of `memory[from..to]` to `file` at the same offsets,
/// a run of pages per write.
fn write_nonzero(file: &File, memory: &[u8], from: usize, to: usize) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zero = |p: usize| memory[p..(p + PAGE).min(to)].iter().all(|&b| b == 0);
    let mut p = from;
    while p < to {
        if zero(p) {
            p += PAGE;
            continue;
        }
        let start = p;
        while p < to && !zero(p) {
            p += PAGE;
        }
        file.write_all_at(&memory[start..p.min(to)], start as u64)?;
    }
    Ok(())
}

/// Refuses a guest module with mutable globals beyond its stack pointer: an image
/// carries memory only, so any other global's value would be lost.
pub(crate) fn check_globals(module: &[u8]) -> Result<(), String> {
    use wasmparser::{Parser, Payload};
    let mut mutable = 0;
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::GlobalSection(r) = payload.map_err(|e| format!("reading the guest module: {e}"))? {
            for g in r {
                if g.map_err(|e| format!("reading the guest module: {e}"))?.ty.mutable {
                    mutable += 1;
                }
            }
        }
    }
    if mutable > 1 {
        return Err(format!(
            "the guest module has {mutable} mutable globals; a session snapshot carries memory only and \
             knows the stack pointer alone is at rest between turns"
        ));
    }
    Ok(())
}
