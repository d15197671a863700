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
//! In memory, a snapshot is layers (delta.rs): a base file (the preload image, or a whole
//! memory) and runs of sealed memfd pages laid over it, which forks map copy-on-write
//! (`Module::with_memory_layers`), so they share every page they do not write. A
//! session's first snapshot lays the pages it wrote that differ from what it started
//! from; its later ones, the pages written since the last (the tracker). Saved, it is the
//! pages that differ from its base (the preload image the first session started from; no
//! base: every non-zero page) or from a parent snapshot's file (a delta), in the
//! `wasi-python-image` format; loaded, those pages are laid over the base (or parent) the
//! same way.
//!
//! **Invariant:** a snapshot is taken only between turns, on the session thread; a load
//! checks format, guest, wasmtime, engine, package and base before any guest code runs,
//! and a snapshot larger than a run's `memory_bytes` is refused before it starts.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use wasi_python_image::{FormatError, Header, Key, Limits as ImageLimits, PAGE, Pages, WASM_PAGE};

use crate::delta::{FIRST_RUNS, Layout, MAX_RUNS, PageFile, Tracker};
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
    /// A delta file was loaded without the snapshot it was saved against.
    #[error("the file is a delta over the snapshot file {wanted}; load it over that snapshot (base=)")]
    NoParent { wanted: String },
    /// A delta file was loaded over another snapshot than the one it was saved against.
    #[error("the file is a delta over the snapshot file {wanted}, not over {given}")]
    OtherParent { wanted: String, given: String },
    /// A delta was asked against a snapshot never saved or loaded, which no file names.
    #[error("a delta is saved against a snapshot that was saved or loaded (its file's id); save the parent first")]
    ParentNotSaved,
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
    /// "not_a_file", "no_parent", "other_parent", "parent_not_saved", "io", "runtime".
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
                "parent" => "other_parent",
                _ => "other_base",
            },
            SnapshotError::NotAFile { .. } => "not_a_file",
            SnapshotError::NoParent { .. } => "no_parent",
            SnapshotError::OtherParent { .. } => "other_parent",
            SnapshotError::ParentNotSaved => "parent_not_saved",
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

struct Inner {
    /// The memory: a base file and the runs of pages laid over it (delta.rs), shared
    /// by every fork.
    layout: Arc<Layout>,
    /// The memory's size in wasm pages.
    pages: u64,
    /// The guest's monotonic clock when taken, in ns.
    clock_ns: u64,
    /// The preload image the first session of this line started from (the base of a
    /// saved file), and its modules.
    base: Option<Arc<Image>>,
    base_modules: Modules,
    module_sha256: String,
    /// The 4 KiB pages this snapshot laid over the memory it was taken or loaded
    /// against (its session's last snapshot, what the session started from, or the
    /// parent of a delta file).
    new_pages: u64,
    /// The id of the file it was first saved as or loaded from (a delta names its
    /// parent by it).
    id: OnceLock<[u8; 32]>,
    /// Engines over this memory, made at the first fork of each flavour: over its
    /// layers, or (`true`) over its flattened copy.
    flavours: Mutex<Vec<(Flavour, bool, Arc<Flavoured>)>>,
    /// The memory as one page file, made when forks over the layers would pass the
    /// process's budget of mappings (mappings.rs).
    flat: OnceLock<Arc<Layout>>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("memory_bytes", &self.memory_bytes())
            .field("base", &self.inner.base_modules)
            .field("new_pages", &self.inner.new_pages)
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

/// What pages a snapshot file stores: those that differ from its base image (`Full`),
/// or from another snapshot's file (`Since`, a delta).
enum Against<'a> {
    Full,
    Since(&'a Snapshot),
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

    /// The 4 KiB pages this snapshot laid over the memory it was taken against: its
    /// session's last snapshot, else what the session started from (a preload image
    /// or a snapshot); for a loaded file, the pages it stored. What taking it wrote,
    /// and what it adds to the memory its forks share.
    pub fn new_pages(&self) -> u64 {
        self.inner.new_pages
    }

    /// The 4 KiB pages held by this snapshot's layers over its base (what differs
    /// from the base image, plus pages copied along to keep the layers few).
    pub fn layered_pages(&self) -> u64 {
        self.inner.layout.run_pages()
    }

    /// The id of the file this snapshot was first saved as, or loaded from: what a
    /// delta saved against it names ([`Snapshot::to_bytes_since`]). `None` until then.
    pub fn id(&self) -> Option<[u8; 32]> {
        self.inner.id.get().copied()
    }

    /// The engines of `flavour` a fork starts from, made on first need, over this
    /// snapshot's layers.
    ///
    /// A guest over the layers holds a mapping a run (mappings.rs): while the process's
    /// guests over layers would pass their budget with one more, forks start from the
    /// snapshot's flattened copy instead, made once (one mapping a guest; the memory
    /// of one copy of the snapshot, shared by all such forks).
    pub(crate) fn flavour(&self, runtime: &Runtime, flavour: Flavour) -> Result<Arc<Flavoured>, Error> {
        let layers = &self.inner.layout;
        let flat = layers.mappings() > 1 && !crate::mappings::fits(layers.mappings());
        let mut made = self.inner.flavours.lock();
        if let Some((_, _, f)) = made.iter().find(|(k, f, _)| *k == flavour && *f == flat) {
            return Ok(f.clone());
        }
        let at = Arc::as_ptr(&self.inner) as usize;
        let f = if flat {
            let layout = match self.inner.flat.get() {
                Some(l) => l.clone(),
                None => {
                    let l = Arc::new(layers.flattened().map_err(|e| Error::io("flattening a snapshot's memory", e))?);
                    self.inner.flat.get_or_init(|| l).clone()
                }
            };
            let name = PathBuf::from(format!("session-snapshot-{at:x}-flat"));
            runtime.flavour(flavour)?.with_layers(layout, self.inner.pages, &name)?
        } else {
            let name = PathBuf::from(format!("session-snapshot-{at:x}"));
            runtime.flavour(flavour)?.with_layers(layers.clone(), self.inner.pages, &name)?
        };
        let f = Arc::new(f);
        made.push((flavour, flat, f.clone()));
        Ok(f)
    }

    /// What a fork writes over its base image's memory before any guest code runs.
    /// Always `None`: every snapshot, loaded ones included, is mapped whole from its
    /// layers.
    pub(crate) fn patch(&self) -> Option<(u64, &Pages)> {
        None
    }

    pub(crate) fn module_sha256(&self) -> &str {
        &self.inner.module_sha256
    }

    /// The file: the pages that differ from the base image, zstd level 3, unsigned (its
    /// checksum catches accidents, not edits).
    pub fn to_bytes(&self, runtime: &Runtime) -> Result<Vec<u8>, SnapshotError> {
        self.encode(runtime, None, Against::Full)
    }

    /// [`Snapshot::to_bytes`], signed with `key` (HMAC-SHA256):
    /// [`Runtime::load_signed_snapshot`] with the same key accepts it, and refuses it
    /// edited or under another key.
    pub fn to_signed_bytes(&self, runtime: &Runtime, key: &Key) -> Result<Vec<u8>, SnapshotError> {
        self.encode(runtime, Some(key), Against::Full)
    }

    /// A delta: the pages that differ from `parent`'s memory, naming `parent`'s file by
    /// its id, so it loads only over that file's snapshot
    /// ([`Runtime::load_snapshot_over`]). `parent` must have been saved or loaded
    /// ([`SnapshotError::ParentNotSaved`]) and be of the same line (same base image).
    /// Signed with `key` if given.
    pub fn to_bytes_since(&self, runtime: &Runtime, parent: &Snapshot, key: Option<&Key>) -> Result<Vec<u8>, SnapshotError> {
        self.encode(runtime, key, Against::Since(parent))
    }

    fn encode(&self, runtime: &Runtime, key: Option<&Key>, against: Against<'_>) -> Result<Vec<u8>, SnapshotError> {
        let inner = &*self.inner;
        let base_sha256 = match &inner.base {
            Some(image) => image.sha256()?,
            None => [0; 32],
        };
        let io = |e| SnapshotError::io("reading the snapshot's memory", e);
        let mut pages = Pages::new();
        let mut keep = |n: u32, page: &[u8]| pages.push(n, page);
        let parent = match against {
            Against::Full => {
                match &inner.base {
                    Some(image) => inner.layout.differing(&*image.layout()?, &mut keep).map_err(io)?,
                    None => inner.layout.differing(&zeros()?, &mut keep).map_err(io)?,
                };
                [0; 32]
            }
            Against::Since(parent) => {
                let id = parent.id().ok_or(SnapshotError::ParentNotSaved)?;
                if parent.inner.base_modules != inner.base_modules
                    || parent.inner.base.as_ref().map(|b| b.path.clone()) != inner.base.as_ref().map(|b| b.path.clone())
                    || parent.inner.pages > inner.pages
                {
                    return Err(SnapshotError::Mismatch {
                        what: "parent",
                        file: "a snapshot of another line (another base image, or a larger memory)".into(),
                        here: "this snapshot".into(),
                    });
                }
                inner.layout.differing(&parent.inner.layout, &mut keep).map_err(io)?;
                id
            }
        };
        let header = Header {
            module_sha256: inner.module_sha256.clone(),
            wasmtime: WASMTIME_VERSION.to_owned(),
            engine: runtime.engine_hash()?,
            package: crate::snapshot::package_id(runtime.artifacts())?,
            base_modules: inner.base_modules.clone(),
            base_sha256,
            parent,
            memory_pages: inner.pages,
            clock_ns: inner.clock_ns,
        };
        let encoded = wasi_python_image::encode_with(&header, &pages, 3, key);
        inner.id.get_or_init(|| encoded.id);
        Ok(encoded.bytes)
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

    /// [`Snapshot::save`] of [`Snapshot::to_bytes_since`].
    pub fn save_since(&self, runtime: &Runtime, path: &Path, parent: &Snapshot, key: Option<&Key>) -> Result<(), SnapshotError> {
        write_new(path, &self.to_bytes_since(runtime, parent, key)?)
    }
}

/// An empty memory: what a snapshot without a base image is saved against.
fn zeros() -> Result<Layout, SnapshotError> {
    let file = PageFile::new(0).map_err(|e| SnapshotError::io("making an empty file", e))?;
    Ok(Layout::over(file.file().clone(), 0, 0))
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

impl Runtime {
    /// A saved snapshot back: the format, its checksum and its header's values, then the
    /// guest module, wasmtime, engine, package and base image it names, all checked
    /// before any guest code runs; the pages are decompressed last. Hostile bytes are an
    /// error, never a panic, and what they make the host hold grows with what
    /// decompresses, not with what the header claims. The checksum catches accidents
    /// only: a file edited with its checksum recomputed loads; to refuse edits, sign
    /// ([`Snapshot::to_signed_bytes`], [`Runtime::load_signed_snapshot`]). A signed file
    /// loads here as an unsigned one. The base image must be in this runtime's cache
    /// folder, or be the default preload's, which the load builds (the same artifacts
    /// build the same image: fixed.rs); a file naming other modules never starts a build.
    pub fn load_snapshot(&self, bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        self.load(bytes, None, None)
    }

    /// [`Runtime::load_snapshot`] of a file signed with `key`: an unsigned file
    /// ([`FormatError::Unsigned`]) or one whose signature does not match
    /// ([`FormatError::Signature`]) is refused before anything else is read from it.
    pub fn load_signed_snapshot(&self, bytes: &[u8], key: &Key) -> Result<Snapshot, SnapshotError> {
        self.load(bytes, Some(key), None)
    }

    /// [`Runtime::load_snapshot`] (or, with `key`, [`Runtime::load_signed_snapshot`])
    /// of a file that may be a delta ([`Snapshot::to_bytes_since`]): laid over
    /// `parent`, which must be the snapshot of the file the delta names
    /// ([`SnapshotError::NoParent`] without one, [`SnapshotError::OtherParent`] if it
    /// is another). A file that is not a delta ignores `parent`.
    pub fn load_snapshot_over(&self, bytes: &[u8], key: Option<&Key>, parent: Option<&Snapshot>) -> Result<Snapshot, SnapshotError> {
        self.load(bytes, key, parent)
    }

    fn load(&self, bytes: &[u8], key: Option<&Key>, parent: Option<&Snapshot>) -> Result<Snapshot, SnapshotError> {
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
        // A delta: its parent, checked before anything is decompressed.
        let parent = match header.parent() {
            None => None,
            Some(wanted) => {
                let Some(parent) = parent else { return Err(SnapshotError::NoParent { wanted: hex(&wanted) }) };
                if parent.id() != Some(wanted) {
                    return Err(SnapshotError::OtherParent {
                        wanted: hex(&wanted),
                        given: parent.id().map_or_else(|| "a snapshot never saved or loaded".into(), |id| hex(&id)),
                    });
                }
                let base_sha = match &parent.inner.base {
                    Some(b) => b.sha256()?,
                    None => [0; 32],
                };
                if parent.inner.base_modules != header.base_modules || base_sha != header.base_sha256 {
                    return Err(SnapshotError::Mismatch {
                        what: "base image",
                        file: hex(&header.base_sha256),
                        here: format!("the parent's base, {}", hex(&base_sha)),
                    });
                }
                if header.memory_pages < parent.inner.pages {
                    return Err(FormatError::Malformed { what: "the memory is smaller than its parent's".into() }.into());
                }
                Some(parent)
            }
        };
        let base = if let Some(parent) = parent {
            parent.inner.base.clone()
        } else if header.base_modules.is_empty() {
            None
        } else {
            let modules = crate::Preload::modules(&header.base_modules)
                .map_err(|e| FormatError::Malformed { what: format!("the base names bad modules: {e}") })?;
            let Some(image) = self.existing_preload_image(&modules)? else {
                return Err(SnapshotError::Mismatch {
                    what: "base image",
                    file: format!("the preload image of {}", modules.join(", ")),
                    here: "no such image in the cache folder (a run preloading them builds it)".into(),
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
            if header.memory_bytes() < image.bytes() {
                return Err(FormatError::Malformed { what: "the memory is smaller than its base image".into() }.into());
            }
            Some(image)
        };
        let pages = opened.pages()?;
        let len = header.memory_bytes();
        let io = |e| SnapshotError::io("writing the snapshot's memory", e);
        let reference = match (parent, &base) {
            (Some(p), _) => Some(p.inner.layout.clone()),
            (None, Some(image)) => Some(image.layout()?),
            (None, None) => None,
        };
        let layout = match reference {
            Some(reference) => {
                // The stored pages laid over the reference; the pages between runs
                // merged are the reference's own.
                let theirs = reference.view().map_err(io)?;
                let numbers: Vec<u32> = pages.iter().map(|(n, _)| n).collect();
                let stored: Vec<&[u8]> = pages.iter().map(|(_, p)| p).collect();
                let page = |n: u32| match numbers.binary_search(&n) {
                    Ok(i) => Cow::Borrowed(stored[i]),
                    Err(_) => Cow::Borrowed(theirs.page(n)),
                };
                reference.overlay(&numbers, len, FIRST_RUNS, page).map_err(io)?
            }
            None => {
                // No base: the pages are the whole memory's non-zero ones.
                let file = PageFile::new(len).map_err(io)?;
                for (n, page) in pages.iter() {
                    file.write_at(page, u64::from(n) * PAGE as u64).map_err(io)?;
                }
                file.seal();
                Layout::whole(Arc::new(file), len)
            }
        };
        let id = OnceLock::new();
        let _ = id.set(opened.id());
        Ok(Snapshot {
            inner: Arc::new(Inner {
                layout: Arc::new(layout),
                pages: header.memory_pages,
                clock_ns: header.clock_ns,
                base,
                base_modules: header.base_modules,
                module_sha256: header.module_sha256,
                new_pages: pages.len() as u64,
                id,
                flavours: Mutex::new(Vec::new()),
                flat: OnceLock::new(),
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

/// What a session's thread needs to take a snapshot of its guest.
#[derive(Debug, Clone)]
pub(crate) struct Taker {
    pub(crate) runtime: Runtime,
    pub(crate) origin: Origin,
    /// The session's last snapshot (the next one is taken against it), and what names
    /// the pages written since it.
    last: Arc<Mutex<Last>>,
}

#[derive(Debug, Default)]
struct Last {
    snapshot: Option<Snapshot>,
    /// Made at the session's first snapshot; `None` where the kernel has none, and
    /// after a snapshot failed (the next one then compares every page written since
    /// the memory was mapped).
    tracker: Option<Tracker>,
}

/// Candidate pages up to which a snapshot after its session's last one lays them over
/// without comparing them with that one's pages: the tracker names the pages a turn
/// wrote, nearly all changed (107 of 107 after a one-variable turn), and reading them
/// back costs more than writing the few that turn out the same.
const LAY_UNCOMPARED: usize = 512;

impl Taker {
    pub(crate) fn new(runtime: Runtime, origin: Origin) -> Taker {
        Taker { runtime, origin, last: Arc::default() }
    }

    /// Stops naming written pages: called before the guest's memory is reset or given
    /// back (the session's end), since the pool's reset finds the pages to copy back
    /// by the same bit the tracker clears (delta.rs, [`Tracker`]).
    pub(crate) fn disarm(&self) {
        self.last.lock().tracker = None;
    }

    /// Finishes what the last snapshot left to do once it was answered: write-protects
    /// the whole memory for the tracker (delta.rs, [`Tracker::protect_all`]), which the
    /// first snapshot's scan did not. Called on the session thread before the guest runs
    /// again.
    pub(crate) fn settle(&self, memory: &[u8]) {
        if let Some(t) = self.last.lock().tracker.as_mut() {
            t.protect_all(memory);
        }
    }

    /// Gives back the pages of the guest's `memory` that it wrote but that hold what
    /// its origin, a session snapshot or a preload image, holds there (rest.rs),
    /// between turns; returns how many. A page given back reads its origin's bytes and
    /// is no longer named written (the tracker's scan and [`crate::delta::written`]
    /// name the pages the guest has its own copy of): the session's next snapshot takes
    /// it as its last snapshot holds it. So once the session has snapshotted, a page
    /// is given back only if its last snapshot holds the same bytes there too; a write
    /// after that copies the page again, and is named. Both are read from their files,
    /// never through a view (delta.rs, `Layout::reader`). `memory` is mapped copy-on-write from the origin since the instance was
    /// made, as for [`Taker::take`].
    pub(crate) fn give_back(&self, memory: &[u8]) -> u64 {
        let last = self.last.lock();
        // The very files the memory is mapped from: a session snapshot's layers, which
        // its forks map, or a preload image's file as the engine over it holds it
        // (snapshot.rs, `Image`). The artifact's own memory has no file of ours.
        let layout = match &self.origin {
            Origin::Snapshot(s) => s.inner.layout.clone(),
            Origin::Preload(image, _) => match image.layout() {
                Ok(l) => l,
                Err(_) => return 0,
            },
            Origin::Bootstrap => return 0,
        };
        // Both read from their files, not through views (delta.rs, `Layout::reader`).
        let also = last.snapshot.as_ref().map(|l| &*l.inner.layout);
        let Some(written) = crate::delta::written(memory) else { return 0 };
        crate::rest::give_back_same(memory, &written, &layout, also)
    }

    /// The guest's memory as a snapshot, wasi-libc's preopen table emptied, the clock
    /// read. The caller has checked that the guest is between turns and holds no
    /// files, and `memory` is the guest's, mapped copy-on-write from what it started
    /// from (the origin) since its instance was made.
    ///
    /// The pages the guest may have written are laid over the session's last snapshot
    /// (or its origin): those written since that snapshot, as the tracker names them
    /// (delta.rs, [`Tracker`]); else, at the first snapshot or without a tracker,
    /// those written since the memory was mapped ([`crate::delta::written`]), compared
    /// with the reference so that only those that differ are laid. The pages not
    /// named are the reference's: the origin's pages the guest never wrote are the
    /// last snapshot's too (that one was taken from this memory, and a written page
    /// never turns back into the origin's), and a page not written since the last
    /// snapshot is as that snapshot holds it. A failure drops the tracker, so the
    /// next snapshot compares every written page again.
    pub(crate) fn take(&self, memory: &[u8], clock_ns: u64) -> Result<Snapshot, SnapshotError> {
        let statics = self.runtime.preopen_statics()?;
        let total = memory.len() as u64;
        let io = |e| SnapshotError::io("writing the snapshot's memory", e);
        // The page as the snapshot holds it: the preopen statics zeroed.
        let with_statics: Vec<u32> = statics.iter().map(|(addr, _)| addr / PAGE as u32).collect();
        let page = |n: u32| -> Cow<'_, [u8]> {
            let at = n as usize * PAGE;
            let bytes = &memory[at..at + PAGE];
            if !with_statics.contains(&n) {
                return Cow::Borrowed(bytes);
            }
            let mut owned = bytes.to_vec();
            for (addr, width) in statics.iter() {
                let a = *addr as usize;
                if a / PAGE == n as usize && a % PAGE + *width <= PAGE {
                    owned[a % PAGE..a % PAGE + *width].fill(0);
                }
            }
            Cow::Owned(owned)
        };
        let mut last = self.last.lock();
        // Continuing: the tracker was armed when the last snapshot was taken.
        let continuing = last.snapshot.is_some() && last.tracker.is_some();
        let mut tracker = last.tracker.take().or_else(|| Tracker::new(memory));
        let pages = (total / PAGE as u64) as u32;
        let (candidates, since_last) = match tracker.as_mut().and_then(|t| t.scan(memory)) {
            Some(c) => (c, continuing),
            None => {
                tracker = None;
                (crate::delta::written(memory).unwrap_or_else(|| std::iter::once(0..pages).collect()), false)
            }
        };
        let reference = match (&last.snapshot, &self.origin) {
            (Some(last), _) => Some(last.inner.layout.clone()),
            (None, Origin::Snapshot(s)) => Some(s.inner.layout.clone()),
            (None, Origin::Preload(image, _)) => Some(image.layout()?),
            (None, Origin::Bootstrap) => None,
        };
        let (layout, new_pages) = match reference {
            Some(reference) => {
                let count: usize = candidates.iter().map(|r| r.len()).sum();
                let changed: Vec<u32> = if since_last && count <= LAY_UNCOMPARED {
                    candidates.into_iter().flatten().collect()
                } else {
                    // Read from the reference's files (delta.rs, `Layout::reader`).
                    let mut theirs = reference.reader();
                    let mut changed = Vec::new();
                    for r in candidates {
                        for n in r.clone() {
                            if *theirs.page(n, r.end).map_err(io)? != *page(n) {
                                changed.push(n);
                            }
                        }
                    }
                    changed
                };
                // Over the session's last snapshot, a turn's pages may take more runs;
                // over anything else, no fewer than the reference holds.
                let most = if since_last { MAX_RUNS } else { FIRST_RUNS.max(reference.runs.len()) };
                let layout = reference.overlay(&changed, total, most, page).map_err(io)?;
                (layout, changed.len() as u64)
            }
            None => {
                // The artifact's own memory, which this runtime holds no file of: the
                // non-zero pages, whole (a later snapshot of the session is a delta).
                let file = PageFile::new(total).map_err(io)?;
                let n = crate::delta::write_nonzero(&file, pages, &page).map_err(io)?;
                file.seal();
                (Layout::whole(Arc::new(file), total), n)
            }
        };
        let (base, base_modules) = self.origin.base();
        let snapshot = Snapshot {
            inner: Arc::new(Inner {
                layout: Arc::new(layout),
                pages: total / WASM_PAGE,
                clock_ns,
                base,
                base_modules,
                module_sha256: self.runtime.artifacts().module_sha256().to_owned(),
                new_pages,
                id: OnceLock::new(),
                flavours: Mutex::new(Vec::new()),
                flat: OnceLock::new(),
            }),
        };
        last.snapshot = Some(snapshot.clone());
        last.tracker = tracker;
        Ok(snapshot)
    }
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
