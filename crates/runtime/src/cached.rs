//! Files of the compiled-guest cache: written whole (write-then-rename) with a sidecar
//! (`<file>.sum`) naming their length, CRC-32 and origin; checked against it before
//! they are served, so a truncated, edited or half-written file is rebuilt, never
//! loaded; and unpacked from shipped copies (the companion wheel's zstd files, listed
//! in a `COMPILED` file) when the artifact set names a folder of them.
//!
//! A file is read whole for its CRC where it is written or unpacked, and again only when
//! something may have changed it: a second sidecar (`<file>.checked`) records the
//! identity of the file last found whole (device, inode, length, modification and
//! change times, as `fstat` gives them) and the boot it was found in, and a check whose
//! file still has that identity in this boot skips the read. Every write to a file, a
//! truncation or a rename over its name changes its identity, and the first check after
//! a reboot (a crash, perhaps, before the file reached the disk whole) reads it whole.
//! What this leaves unchecked is an edit that bypasses the file system's calls or keeps
//! the file's times (a raw block device, a clock set back), or the disk corrupting data
//! the page cache dropped and reads back later: that needs the user's own rights over
//! files that are the user's alone (0600, and one writable by group or others, or owned
//! by another user, is refused), who could rewrite the sidecars as well; or a disk
//! failing under the file system. The check guards against accidents, not the user.
//!
//! The page cache holds these files in small pieces (folios): each is written in 4 KiB
//! blocks ([`SparseWriter`]) and read by [`check`] without readahead. The compiled guest
//! and the memory images are mapped, each image once per pool slot in use, and a fault
//! maps the whole folio it lands in. Written in 1 MiB pieces, or read back by
//! readahead after the page cache dropped them, they come in folios of up to 2 MiB on
//! Linux 6.18 with ext4; every slot then mapped 42-50 MiB of the 82 MiB image for the
//! few MiB its guest reads, and a process's peak RSS after 200 runs was 183-275 MiB
//! against 68-78 (docs/dev/perf-log/). The memory they take is the same
//! either way (the page cache is shared), and so is the run's speed. A check that skips
//! the CRC still reads back, without readahead, the pages the page cache dropped since
//! (memory pressure, or the kernel reclaiming cold pages within seconds on some VMs), so
//! no page is left to a later fault's readahead ([`refill`]).
//!
//! The folder sweeps itself. A process that uses a cache file holds a shared `flock` on
//! it until it exits ([`check`] and [`seal`] take it); each new file's sealing then
//! removes, of the files no live process holds, those unused for [`UNUSED_FOR`] and,
//! per kind, all but the [`KEEP_COMPILED`] compiled guests and [`KEEP_IMAGES`] memory
//! images used last (the guest the new file belongs to first): an older version's
//! compiled guest and images, and the images of preloads no longer asked for. A file
//! is removed under an exclusive lock, its sidecar first, so a process never serves a
//! half-removed file. Each check marks its file used (the sidecar's modification
//! time, at most once per [`MARK_EVERY`]).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tempfile::TempPath;

use crate::Error;

/// How long a cache file may go unused before a new file's sealing removes it ([`seal`]).
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often a file's use is marked at most ([`check`]): a write to its sidecar's inode.
const MARK_EVERY: Duration = Duration::from_secs(3600);
/// The compiled guests (`.cwasm`) a sweep keeps besides those in use: the plain and the
/// fuel-metered flavour of this guest and of the one before.
pub(crate) const KEEP_COMPILED: usize = 4;
/// The memory images (`.img`) a sweep keeps besides those in use: one per module set
/// asked for (the test suite asks for about ten), at 40-90 MB each.
pub(crate) const KEEP_IMAGES: usize = 12;
/// How old a temporary file left in the folder (by a process that died writing it) must
/// be before a sweep removes it.
const STALE_TEMP: Duration = Duration::from_secs(24 * 3600);

/// The first line of a shipped folder's `COMPILED` list.
pub const COMPILED_MAGIC: &str = "wasi-python-compiled 1";

/// Where a cache file came from (its sidecar says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Compiled on this machine.
    Compiled,
    /// Built on this machine (a snapshot's memory image).
    Built,
    /// Unpacked from a shipped copy.
    Unpacked,
}

impl Origin {
    /// `compiled`, `built` or `unpacked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Compiled => "compiled",
            Origin::Built => "built",
            Origin::Unpacked => "unpacked",
        }
    }

    fn parse(s: &str) -> Option<Origin> {
        Some(match s {
            "compiled" => Origin::Compiled,
            "built" => Origin::Built,
            "unpacked" => Origin::Unpacked,
            _ => return None,
        })
    }
}

fn sidecar(path: &Path) -> PathBuf {
    beside(path, ".sum")
}

/// Where the identity of the file last found whole is kept.
fn checked_sidecar(path: &Path) -> PathBuf {
    beside(path, ".checked")
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The CRC-32 and length of everything `r` yields.
fn crc_of(mut r: impl Read) -> io::Result<(u32, u64)> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((h.finalize(), len));
        }
        h.update(&buf[..n]);
        len += n as u64;
    }
}

/// Opens `path` to read it, never through a link (`O_NOFOLLOW`) and never waiting on
/// a FIFO planted under its name (`O_NONBLOCK`, which means nothing to a regular file).
fn open_no_link(path: &Path) -> io::Result<File> {
    File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// A small file of ours read whole (a sidecar), at most 4 KiB, never through a link.
fn read_small(path: &Path) -> Option<String> {
    let mut text = String::new();
    open_no_link(path).ok()?.take(4096).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Whether a cache file may be served at all: a regular file of this process's user
/// that no one else may write.
fn trusted(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_file() && meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// What tells one state of a file from another without reading it: a write, a
/// truncation or a rename over its name changes at least one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    /// The boot it was found whole in: after a reboot (a crash, perhaps, before the
    /// file reached the disk whole) it is read whole again.
    boot: String,
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or empty where there is none.
fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let id = id.trim();
        // One word of at most 64 characters, or none.
        if id.len() <= 64 && !id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic()) { id.to_owned() } else { "-".to_owned() }
    })
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            boot: boot_id().to_owned(),
        }
    }

    fn line(&self) -> String {
        let Identity { dev, ino, len, mtime, ctime, boot } = self;
        format!("{dev} {ino} {len} {} {} {} {} {boot}\n", mtime.0, mtime.1, ctime.0, ctime.1)
    }

    fn parse(text: &str) -> Option<Identity> {
        let mut w = text.split_whitespace();
        let mut next = || w.next();
        let id = Identity {
            dev: next()?.parse().ok()?,
            ino: next()?.parse().ok()?,
            len: next()?.parse().ok()?,
            mtime: (next()?.parse().ok()?, next()?.parse().ok()?),
            ctime: (next()?.parse().ok()?, next()?.parse().ok()?),
            boot: next()?.to_owned(),
        };
        next().is_none().then_some(id)
    }
}

/// Records that the file at `path`, as `meta` describes it, was found whole.
/// Best effort: without it, the next check reads the file whole again.
fn vouch(path: &Path, meta: &std::fs::Metadata) {
    let _ = write_whole(&checked_sidecar(path), Identity::of(meta).line().as_bytes());
}

/// How many pages of `file` from `off` (`len` bytes; 0: to its end) are in the page
/// cache, by one `cachestat` call (Linux 6.5+); `None` where that cannot be told.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "cachestat(2) has no wrapper in libc or rustix yet")]
fn cached_pages(file: &File, off: u64, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// The same number on every architecture (syscalls added since Linux 5.1 share one table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off, len };
    let mut stat = CacheStat::default();
    // SAFETY: the two pointers are to live values of the layouts the kernel reads and
    // writes (struct cachestat_range, struct cachestat); flags must be 0; an old kernel
    // or a seccomp filter answers ENOSYS or EPERM.
    let r = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &raw const range, &raw mut stat, 0 as libc::c_uint)
    };
    (r == 0).then_some(stat.nr_cache)
}

#[cfg(not(target_os = "linux"))]
fn cached_pages(_file: &File, _off: u64, _len: u64) -> Option<u64> {
    None
}

/// Whether every page of `file` (of `len` bytes) is in the page cache.
#[cfg(test)]
fn resident(file: &File, len: u64) -> bool {
    cached_pages(file, 0, 0).is_some_and(|n| n >= len.div_ceil(rustix::param::page_size() as u64))
}

/// Brings back into the page cache, without readahead (so in small folios, module docs),
/// the pages of `file` (`len` bytes, opened by [`open_for_reading_whole`]) it has
/// dropped since it was last read: the 1 MiB pieces `cachestat` finds short are read.
/// Memory pressure or the kernel's reclaim of cold pages drops some of a large file's
/// pages within seconds; a fault would bring them back by readahead, in large folios.
/// Best effort; where `cachestat` is missing (before Linux 6.5), nothing is read.
fn refill(file: &File, len: u64) {
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 1 << 20;
    let page = rustix::param::page_size() as u64;
    if cached_pages(file, 0, 0).is_none_or(|n| n >= len.div_ceil(page)) {
        return;
    }
    let mut buf = Vec::new();
    for off in (0..len).step_by(PIECE as usize) {
        let n = PIECE.min(len - off);
        if cached_pages(file, off, n).is_some_and(|c| c < n.div_ceil(page)) {
            buf.resize(n as usize, 0);
            if file.read_exact_at(&mut buf, off).is_err() {
                return;
            }
        }
    }
}

/// The files this process uses, each held open with a shared `flock` until the process
/// exits (or execs), so another's sweep leaves them (dev, inode, file).
static HELD: Mutex<Vec<(u64, u64, File)>> = Mutex::new(Vec::new());

/// Keeps `file` (shared-locked) open for the rest of the process, once per inode.
fn hold(file: File, meta: &std::fs::Metadata) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if !held.iter().any(|(dev, ino, _)| (*dev, *ino) == (meta.dev(), meta.ino())) {
        held.push((meta.dev(), meta.ino(), file));
    }
}

/// The origin of the file at `path` if it is whole: its sidecar exists and names the
/// file's length and CRC-32. Reads the file whole for the CRC (about 30 ms for the
/// compiled guest, without readahead) unless its `.checked` sidecar vouches for it as
/// it is, in this boot (module docs); then only the pages the page cache dropped are
/// read again ([`refill`]). A whole file is marked used, and held by this process (a
/// sweep leaves it) until it exits.
pub fn check(path: &Path) -> Option<Origin> {
    let side = sidecar(path);
    let (len, crc, origin) = read_sidecar(&side)?;
    let file = open_for_reading_whole(path).ok()?;
    // Blocks only while a sweep removes this file; then the name is gone or another's.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared).ok()?;
    let meta = file.metadata().ok()?;
    let named = std::fs::symlink_metadata(path).ok()?;
    if !trusted(&meta) || meta.len() != len || (named.dev(), named.ino()) != (meta.dev(), meta.ino()) {
        return None;
    }
    let vouched = read_small(&checked_sidecar(path)).and_then(|t| Identity::parse(&t)) == Some(Identity::of(&meta));
    if vouched {
        refill(&file, len);
    } else {
        if crc_of(&file).ok()? != (crc, len) {
            return None;
        }
        vouch(path, &meta);
    }
    mark_used(&side, SystemTime::now());
    hold(file, &meta);
    Some(origin)
}

/// A sidecar's (length, CRC-32, origin); `None` if it is missing or not one of ours.
fn read_sidecar(side: &Path) -> Option<(u64, u32, Origin)> {
    let text = read_small(side)?;
    let mut words = text.split_whitespace();
    let len: u64 = words.next()?.parse().ok()?;
    let crc = u32::from_str_radix(words.next()?, 16).ok()?;
    let origin = Origin::parse(words.next()?)?;
    words.next().is_none().then_some((len, crc, origin))
}

/// Sets the sidecar's modification time to `now` unless it was set less than
/// [`MARK_EVERY`] before. Best effort: a cache folder this process may not write is
/// only swept as if this file were not used.
fn mark_used(side: &Path, now: SystemTime) {
    let Ok(marked) = std::fs::symlink_metadata(side).and_then(|m| m.modified()) else { return };
    if now.duration_since(marked).is_ok_and(|d| d >= MARK_EVERY) {
        let _ = File::options()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(side)
            .and_then(|f| f.set_modified(now));
    }
}

/// The kinds of cache file a sweep looks at, with how many it keeps: files named as
/// engine.rs and snapshot.rs name them (`<guest>-wasmtime<version>-...`, the guest
/// 16 hex digits of the module's SHA-256, or `unhashed`) ending `.cwasm` or `.img`.
/// Anything else in the folder is not the sweep's.
fn kind_of(name: &str) -> Option<(&'static str, usize)> {
    let (guest, rest) = name.split_once('-')?;
    let keyed = (guest == "unhashed" || guest.len() == 16 && guest.bytes().all(|b| b.is_ascii_hexdigit()))
        && rest.starts_with("wasmtime");
    if !keyed {
        return None;
    }
    match Path::new(name).extension().and_then(|e| e.to_str()) {
        Some("cwasm") => Some(("cwasm", KEEP_COMPILED)),
        Some("img") => Some(("img", KEEP_IMAGES)),
        _ => None,
    }
}

/// The cache file that `name` lies beside (its `.sum`, `.checked`, or an image's `.sha256`
/// and build `.lock`), if `name` is one of those.
fn beside_of(name: &str) -> Option<String> {
    if let Some(file) = name.strip_suffix(".sum").or_else(|| name.strip_suffix(".checked")) {
        return kind_of(file).is_some().then(|| file.to_owned());
    }
    let stem = name.strip_suffix(".sha256").or_else(|| name.strip_suffix(".lock"))?;
    let image = format!("{stem}.img");
    kind_of(&image).is_some().then_some(image)
}

/// The guest a cache file belongs to: its name up to the first `-` (`kind_of`).
fn guest_of(name: &str) -> &str {
    name.split_once('-').map_or(name, |(g, _)| g)
}

/// Sweeps `dir` (module docs) after `keep` was sealed there: of the `.cwasm` and
/// `.img` files, removes those no live process holds that were unused for
/// [`UNUSED_FOR`] or rank past their kind's bound (files of `keep`'s guest first, then
/// by their last use; a file without a sidecar of ours last). Also removes temporary
/// files left [`STALE_TEMP`] or longer ago. Never follows a link or enters a folder:
/// entries that are not regular files of this user are left as they are. Best effort.
/// Returns the names it removed.
fn sweep(dir: &Path, keep: &Path, now: SystemTime) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let keep_name = keep.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let guest = guest_of(keep_name);
    let mut removed = Vec::new();
    // (kind, bound, same guest, last use, name)
    let mut candidates: Vec<(&'static str, usize, bool, Option<SystemTime>, String)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        // The entry itself, never what a link names.
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let stale = || entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).is_ok_and(|d| d >= STALE_TEMP));
        if name.starts_with('.') && name.ends_with(".tmp") {
            if stale() && std::fs::remove_file(entry.path()).is_ok() {
                removed.push(name);
            }
            continue;
        }
        if let Some(of) = beside_of(&name) {
            // What lies beside a file that is gone (an image whose build failed leaves its
            // `.lock`): removed once stale, a lock only if no builder holds it.
            if !dir.join(&of).exists() && stale() && remove_unheld(&entry.path()) == Some(true) {
                removed.push(name);
            }
            continue;
        }
        let Some((kind, bound)) = kind_of(&name) else { continue };
        let path = entry.path();
        let used = read_sidecar(&sidecar(&path))
            .and(std::fs::symlink_metadata(sidecar(&path)).and_then(|m| m.modified()).ok());
        candidates.push((kind, bound, guest_of(&name) == guest, used, name));
    }
    // Per kind: this guest's first, then the most recently used.
    candidates.sort_by(|a, b| (a.0, !a.2, std::cmp::Reverse(a.3)).cmp(&(b.0, !b.2, std::cmp::Reverse(b.3))));
    let mut ranked = 0;
    let mut kind = "";
    for (k, bound, _, used, name) in candidates {
        if k != kind {
            (kind, ranked) = (k, 0);
        }
        if name == keep_name {
            ranked += 1;
            continue;
        }
        let unused = used.is_none_or(|t| now.duration_since(t).is_ok_and(|d| d >= UNUSED_FOR));
        if ranked < bound && !unused {
            ranked += 1;
            continue;
        }
        match remove_unheld(&dir.join(&name)) {
            Some(true) => removed.push(name),
            // Held: it stays, and counts towards the bound.
            Some(false) => ranked += 1,
            None => {}
        }
    }
    removed
}

/// Removes the cache file at `path` and what lies beside it, unless a live process
/// holds it: `Some(true)` removed, `Some(false)` held, `None` not ours to remove (a
/// link, not a regular file, another user's, unreadable) or gone.
fn remove_unheld(path: &Path) -> Option<bool> {
    let file = open_no_link(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.uid() != rustix::process::geteuid().as_raw() {
        return None;
    }
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Some(false);
    }
    // Still the file under that name (not one renamed over it since it was opened).
    let named = std::fs::symlink_metadata(path).ok()?;
    if (named.dev(), named.ino()) != (meta.dev(), meta.ino()) {
        return None;
    }
    // The sidecar first: a file without one is never served.
    let _ = std::fs::remove_file(sidecar(path));
    let _ = std::fs::remove_file(checked_sidecar(path));
    std::fs::remove_file(path).ok()?;
    for beside in [path.with_extension("sha256"), path.with_extension("lock")] {
        let _ = std::fs::remove_file(beside);
    }
    Some(true)
}

/// Opens a cache file to read it whole, without readahead: what the read brings into the
/// page cache comes in small folios (above). Never through a link.
pub(crate) fn open_for_reading_whole(path: &Path) -> io::Result<File> {
    let file = open_no_link(path)?;
    // Only advice: where it fails or means nothing, the file is read as before.
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
    Ok(file)
}

/// Moves the finished `tmp` to `path` and writes its sidecar: the file first, so a
/// process that dies in between leaves a file without a sidecar, which is rebuilt.
/// The file is read whole for its CRC here, vouched for (module docs), and held by this
/// process; then the folder is swept.
pub(crate) fn seal(tmp: TempPath, path: &Path, origin: Origin) -> Result<(), Error> {
    seal_summed(tmp, path, origin, None)
}

/// [`seal`], with the CRC-32 and length of what was written if the writer computed
/// them as it wrote ([`SparseWriter::finish_summed`]), so the file is not read again.
fn seal_summed(tmp: TempPath, path: &Path, origin: Origin, sum: Option<(u32, u64)>) -> Result<(), Error> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    let file = open_for_reading_whole(&tmp).map_err(|e| io("opening", &tmp, e))?;
    // Held before it has its name, so no sweep removes it between the rename and the use.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared).map_err(|e| io("locking", &tmp, e.into()))?;
    let (crc, len) = match sum {
        Some(sum) => sum,
        None => crc_of(&file).map_err(|e| io("reading", &tmp, e))?,
    };
    let side = sidecar(path);
    let _ = std::fs::remove_file(&side);
    let _ = std::fs::remove_file(checked_sidecar(path));
    tmp.persist(path).map_err(|e| io("renaming", &e.path, e.error))?;
    write_whole(&side, format!("{len} {crc:08x} {}\n", origin.as_str()).as_bytes()).map_err(|e| io("writing", &side, e))?;
    // Its identity as renamed (a rename changes the change time), from the descriptor:
    // the file this process wrote, whatever was renamed over the name since.
    let meta = file.metadata().map_err(|e| io("reading", path, e))?;
    if meta.len() == len {
        vouch(path, &meta);
    }
    hold(file, &meta);
    if let Some(dir) = path.parent() {
        sweep(dir, path, SystemTime::now());
    }
    Ok(())
}

/// Writes `bytes` to `path` whole: to a temporary file beside it, then renamed over it,
/// so no reader ever sees half a file. The temporary file is removed if that fails.
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (mut file, tmp) = temp_file(path)?;
    file.write_all(bytes)?;
    drop(file);
    tmp.persist(path).map_err(|e| e.error)
}

/// A new temporary file beside `path`, for write-then-rename: made exclusively, under a
/// random name, so never through a link planted in the folder; removed when dropped,
/// unless renamed into place ([`seal`], `persist`).
pub(crate) fn temp_file(path: &Path) -> io::Result<(File, TempPath)> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let file = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir)?;
    Ok(file.into_parts())
}

/// Writes `bytes` to `file`, new and empty, through a [`SparseWriter`].
pub(crate) fn write_in_blocks(file: File, bytes: &[u8]) -> io::Result<()> {
    let mut w = SparseWriter::new(file);
    w.write_all(bytes)?;
    w.finish().map(drop)
}

/// Writes what it is given in 4 KiB blocks, so the page cache holds it in small folios
/// (above), leaving blocks of zeros as holes (a memory image is mostly zeros), and sets
/// the length at the end.
pub(crate) struct SparseWriter {
    file: File,
    at: u64,
    pending: Vec<u8>,
    crc: crc32fast::Hasher,
}

const BLOCK: usize = 4096;

/// Writes `block` (at most [`BLOCK`] bytes) at `at` in one `pwrite`, unless it is all
/// zeros (a hole).
fn write_block_at(file: &File, block: &[u8], at: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    if block.iter().any(|&b| b != 0) {
        file.write_all_at(block, at)?;
    }
    Ok(())
}

impl SparseWriter {
    pub(crate) fn new(file: File) -> SparseWriter {
        SparseWriter { file, at: 0, pending: Vec::with_capacity(BLOCK), crc: crc32fast::Hasher::new() }
    }

    fn block(&mut self, block: &[u8]) -> io::Result<()> {
        self.crc.update(block);
        write_block_at(&self.file, block, self.at)?;
        self.at += block.len() as u64;
        Ok(())
    }

    /// Writes what is left and gives the file its full length.
    pub(crate) fn finish(self) -> io::Result<u64> {
        self.finish_summed(true).map(|(_, len)| len)
    }

    /// [`SparseWriter::finish`], giving the CRC-32 and length of all that was written;
    /// written to the disk first only if `sync` (a file that can be unpacked again in a
    /// second need not be: the first check after a reboot reads it whole).
    pub(crate) fn finish_summed(mut self, sync: bool) -> io::Result<(u32, u64)> {
        let rest = std::mem::take(&mut self.pending);
        self.block(&rest)?;
        self.file.set_len(self.at)?;
        if sync {
            self.file.sync_all()?;
        }
        Ok((self.crc.finalize(), self.at))
    }
}

impl Write for SparseWriter {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let n = buf.len();
        if !self.pending.is_empty() {
            let take = (BLOCK - self.pending.len()).min(buf.len());
            self.pending.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.pending.len() == BLOCK {
                let full = std::mem::take(&mut self.pending);
                self.block(&full)?;
                self.pending = full;
                self.pending.clear();
            }
        }
        while buf.len() >= BLOCK {
            let (block, rest) = buf.split_at(BLOCK);
            self.block(block)?;
            buf = rest;
        }
        self.pending.extend_from_slice(buf);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One entry of a shipped folder's `COMPILED` list.
#[derive(Debug)]
struct Shipped {
    file: PathBuf,
    len: u64,
}

/// The shipped copy of the cache file `name` in `dirs`, if one is listed:
/// each folder's `COMPILED` starts with [`COMPILED_MAGIC`], then a line per file:
/// `<cache file name> <zstd file> <length>`.
fn find(dirs: &[PathBuf], name: &str) -> Option<Shipped> {
    for dir in dirs {
        let Ok(list) = std::fs::read_to_string(dir.join("COMPILED")) else { continue };
        let mut lines = list.lines();
        if lines.next() != Some(COMPILED_MAGIC) {
            continue;
        }
        for line in lines {
            let mut w = line.split_whitespace();
            if let (Some(n), Some(f), Some(len)) = (w.next(), w.next(), w.next())
                && n == name
                && !f.contains('/')
                && let Ok(len) = len.parse()
            {
                return Some(Shipped { file: dir.join(f), len });
            }
        }
    }
    None
}

/// Unpacks the shipped copy of the cache file `path` (matched by file name) from `dirs`
/// into place, checked by its length and zstd's own content checksum, its CRC-32 taken
/// as it is written (the sidecar's; the file is not read back), and not synced to the
/// disk (the first check after a reboot reads it whole). A copy made of several
/// frames, each naming its length (as `cargo xtask wheel` packs them), is decompressed
/// on up to [`UNPACK_THREADS`] threads, frame by frame; any other, as one stream.
/// `Ok(false)`: none is shipped. `Err`: one is, but it is damaged (the reason).
pub(crate) fn unpack(dirs: &[PathBuf], path: &Path) -> Result<bool, String> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Ok(false) };
    let Some(shipped) = find(dirs, name) else { return Ok(false) };
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let shown = shipped.file.display();
        let mut src = File::open(&shipped.file).map_err(|e| format!("opening {shown}: {e}"))?;
        let (out, tmp) = temp_file(path).map_err(|e| format!("creating a temporary file beside {}: {e}", path.display()))?;
        let packed = read_if_framed(&mut src, shipped.len).map_err(|e| format!("reading {shown}: {e}"))?;
        let sum = match packed.as_deref().and_then(|p| frames_of(p, shipped.len).map(|f| (p, f))) {
            Some((packed, frames)) => unpack_frames(packed, &frames, &out, shipped.len).map_err(|e| format!("{shown}: {e}"))?,
            None => {
                use std::io::Seek;
                src.rewind().map_err(|e| format!("reading {shown}: {e}"))?;
                let mut decoder = zstd::stream::read::Decoder::new(src).map_err(|e| format!("{shown}: {e}"))?;
                let mut sparse = SparseWriter::new(out);
                // Bounded: never more than the list says, so a hostile copy cannot fill the disk.
                let copied = io::copy(&mut (&mut decoder).take(shipped.len + 1), &mut sparse)
                    .map_err(|e| format!("{shown} does not decompress: {e}"))?;
                if copied != shipped.len {
                    return Err(format!("{shown} holds {copied} bytes, its list says {}", shipped.len));
                }
                sparse.finish_summed(false).map_err(|e| format!("writing {}: {e}", tmp.display()))?
            }
        };
        seal_summed(tmp, path, Origin::Unpacked, Some(sum)).map_err(|e| e.to_string())
    })();
    result.map(|()| true)
}

/// The whole of `src` if its first zstd frame names a length below `len` (a file packed
/// in frames), at most what zstd may take for `len` bytes; else `None`, read no further.
fn read_if_framed(src: &mut File, len: u64) -> io::Result<Option<Vec<u8>>> {
    // A frame's header is at most 18 bytes.
    let mut head = Vec::with_capacity(18);
    (&mut *src).take(18).read_to_end(&mut head)?;
    let first = zstd::zstd_safe::get_frame_content_size(&head).ok().flatten();
    if first.is_none_or(|n| n >= len) {
        return Ok(None);
    }
    let bound = zstd::zstd_safe::compress_bound(usize::try_from(len).unwrap_or(usize::MAX)) as u64;
    let mut packed = head;
    (&mut *src).take(bound.saturating_sub(packed.len() as u64) + 1).read_to_end(&mut packed)?;
    Ok((packed.len() as u64 <= bound).then_some(packed))
}

/// How many threads decompress one shipped file at most.
pub(crate) const UNPACK_THREADS: usize = 4;
/// The largest frame [`unpack`] decompresses whole into memory (one per thread).
const MAX_FRAME: u64 = 64 << 20;

/// One zstd frame of a packed file: where it lies, and where its content goes.
#[derive(Debug, Clone)]
struct Frame {
    packed: std::ops::Range<usize>,
    at: u64,
    len: u64,
}

/// The frames of `packed` if there are two or more, each names its content's length (at
/// most [`MAX_FRAME`]) and they add up to `len`; else `None` (decompressed as one stream,
/// which finds any damage).
fn frames_of(packed: &[u8], len: u64) -> Option<Vec<Frame>> {
    let mut frames = Vec::new();
    let (mut from, mut at) = (0usize, 0u64);
    while from < packed.len() {
        let rest = &packed[from..];
        let content = zstd::zstd_safe::get_frame_content_size(rest).ok()??;
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).ok()?;
        if content > MAX_FRAME || size == 0 || at.checked_add(content)? > len {
            return None;
        }
        frames.push(Frame { packed: from..from + size, at, len: content });
        (from, at) = (from + size, at + content);
    }
    (frames.len() >= 2 && at == len).then_some(frames)
}

/// Decompresses `frames` of `packed` into `out` (new and empty) at their places, in 4 KiB
/// blocks ([`SparseWriter`]'s holes and folios), on up to [`UNPACK_THREADS`] threads;
/// gives `out` its length `len` and returns the CRC-32 and length of the whole.
fn unpack_frames(packed: &[u8], frames: &[Frame], out: &File, len: u64) -> Result<(u32, u64), String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, UNPACK_THREADS).min(frames.len());
    let next = AtomicUsize::new(0);
    let crcs: Vec<Mutex<Option<crc32fast::Hasher>>> = frames.iter().map(|_| Mutex::new(None)).collect();
    let work = || -> Result<(), String> {
        let mut dctx = zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?;
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(frame) = frames.get(i) else { return Ok(()) };
            buf.clear();
            buf.reserve(frame.len as usize);
            let n = dctx
                .decompress_to_buffer(&packed[frame.packed.clone()], &mut buf)
                .map_err(|e| format!("frame {i} does not decompress: {e}"))?;
            if n as u64 != frame.len {
                return Err(format!("frame {i} holds {n} bytes, its header says {}", frame.len));
            }
            let mut crc = crc32fast::Hasher::new();
            crc.update(&buf);
            for (k, block) in buf.chunks(BLOCK).enumerate() {
                write_block_at(out, block, frame.at + (k * BLOCK) as u64).map_err(|e| format!("writing: {e}"))?;
            }
            *crcs[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(crc);
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mine = work();
        helpers.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a decompressing thread panicked".into()))).fold(mine, Result::and)
    })?;
    out.set_len(len).map_err(|e| format!("writing: {e}"))?;
    let mut whole = crc32fast::Hasher::new();
    for crc in crcs {
        whole.combine(&crc.into_inner().unwrap_or_else(|e| e.into_inner()).ok_or("a frame was not decompressed")?);
    }
    Ok((whole.finalize(), len))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    fn ship(dir: &Path, name: &str, body: &[u8], listed_len: u64) {
        ship_packed(dir, name, &zstd::stream::encode_all(body, 3).unwrap(), listed_len);
    }

    fn ship_packed(dir: &Path, name: &str, packed: &[u8], listed_len: u64) {
        std::fs::write(dir.join("x.zst"), packed).unwrap();
        std::fs::write(dir.join("COMPILED"), format!("{COMPILED_MAGIC}\n{name} x.zst {listed_len}\n")).unwrap();
    }

    /// `body` packed as `cargo xtask wheel` packs it: a frame per `frame` bytes, each
    /// naming its length and with its checksum.
    fn framed(body: &[u8], frame: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in body.chunks(frame) {
            let mut enc = zstd::stream::write::Encoder::new(&mut out, 3).unwrap();
            enc.include_checksum(true).unwrap();
            enc.include_contentsize(true).unwrap();
            enc.set_pledged_src_size(Some(chunk.len() as u64)).unwrap();
            enc.write_all(chunk).unwrap();
            enc.finish().unwrap();
        }
        out
    }

    #[test]
    fn a_copy_packed_in_frames_unpacks_on_threads_into_the_same_file() {
        let d = tempdir();
        let ship_dir = d.join("ship");
        std::fs::create_dir_all(&ship_dir).unwrap();
        // Frames of 10 blocks and a bit, so frames and blocks do not line up; zeros in places.
        let mut whole = body().repeat(40);
        whole.extend_from_slice(&[7u8; 5000]);
        let packed = framed(&whole, 10 * BLOCK + 123);
        let frames = frames_of(&packed, whole.len() as u64).expect("frames");
        assert!(frames.len() > UNPACK_THREADS, "{} frames", frames.len());
        ship_packed(&ship_dir, "a.cwasm", &packed, whole.len() as u64);
        let path = d.join("cache").join("a.cwasm");
        assert_eq!(unpack(std::slice::from_ref(&ship_dir), &path), Ok(true));
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        let (len, crc, origin) = read_sidecar(&sidecar(&path)).unwrap();
        assert_eq!((crc, len, origin), (crc_of(&whole[..]).unwrap().0, whole.len() as u64, Origin::Unpacked));
        // Unpacked sparse: fewer blocks on disk than the file's length.
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.blocks() * 512 < meta.len(), "{} blocks for {} bytes", meta.blocks(), meta.len());
        std::fs::remove_file(checked_sidecar(&path)).unwrap();
        assert_eq!(check(&path), Some(Origin::Unpacked), "read whole, the CRC taken while unpacking matches");
    }

    #[test]
    fn damaged_frames_are_refused_and_leave_nothing() {
        let d = tempdir();
        let path = d.join("cache").join("a.cwasm");
        let whole = body().repeat(20);
        let packed = framed(&whole, 3 * BLOCK);
        let len = whole.len() as u64;
        // A byte of one frame's content changed: its checksum fails.
        let mut bad = packed.clone();
        let second = frames_of(&packed, len).unwrap()[1].packed.clone();
        bad[second.start + (second.end - second.start) / 2] ^= 0x55;
        // The list names a longer file than the frames hold; or a shorter one.
        for (packed, listed) in [(bad, len), (packed.clone(), len + 1), (packed.clone(), len - 1), (packed[..packed.len() - 3].to_vec(), len)] {
            ship_packed(&d, "a.cwasm", &packed, listed);
            assert!(unpack(std::slice::from_ref(&d), &path).is_err(), "listed {listed}");
            assert!(!path.exists());
            assert!(std::fs::read_dir(d.join("cache")).unwrap().next().is_none(), "no temporary file is left");
        }
    }

    fn body() -> Vec<u8> {
        let mut b = vec![0u8; 3 * BLOCK + 100];
        b[BLOCK + 7] = 1;
        b[3 * BLOCK + 99] = 9;
        b
    }

    #[test]
    fn a_link_planted_where_a_temporary_file_could_go_is_never_written_through() {
        let d = tempdir();
        let victim = d.join("victim");
        std::fs::write(&victim, b"mine").unwrap();
        let path = d.join("a.cwasm");
        // The names a write-then-rename beside `path` used to take, and the sidecar's.
        for planted in [path.with_extension(format!("tmp{}", std::process::id())), d.join("a.cwasm.tmp")] {
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let (mut file, tmp) = temp_file(&path).unwrap();
        file.write_all(&body()).unwrap();
        seal(tmp, &path, Origin::Compiled).unwrap();
        write_whole(&d.join("notes"), b"whole").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
        assert_eq!(check(&path), Some(Origin::Compiled));
        // No temporary file is left behind.
        let names = std::fs::read_dir(&*d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
        let left: Vec<String> = names.filter(|n| n.starts_with('.') && n.ends_with(".tmp")).collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn unpacked_files_match_and_are_checked() {
        let d = tempdir();
        let ship_dir = d.join("ship");
        std::fs::create_dir_all(&ship_dir).unwrap();
        ship(&ship_dir, "a.cwasm", &body(), body().len() as u64);
        let path = d.join("cache").join("a.cwasm");
        assert_eq!(unpack(std::slice::from_ref(&ship_dir), &path), Ok(true));
        assert_eq!(std::fs::read(&path).unwrap(), body());
        assert_eq!(check(&path), Some(Origin::Unpacked));
        // Not listed: nothing to unpack.
        assert_eq!(unpack(&[ship_dir], &d.join("cache").join("b.cwasm")), Ok(false));
    }

    /// `bytes` as the compiled cache file `f` in `d`, sealed.
    fn sealed(d: &Path, bytes: &[u8]) -> PathBuf {
        let path = d.join("f");
        let (mut file, tmp) = temp_file(&path).unwrap();
        file.write_all(bytes).unwrap();
        seal(tmp, &path, Origin::Compiled).unwrap();
        path
    }

    /// Waits until a write to `path` would be given a change time other than its own
    /// (file systems with coarse timestamps give every write in one clock tick the same).
    fn next_tick(path: &Path) {
        let then = Identity::of(&std::fs::metadata(path).unwrap()).ctime;
        let probe = path.with_extension("probe");
        while {
            std::fs::write(&probe, b"").unwrap();
            Identity::of(&std::fs::metadata(&probe).unwrap()).ctime <= then
        } {
            std::thread::yield_now();
        }
        std::fs::remove_file(probe).unwrap();
    }

    #[test]
    fn a_damaged_cache_file_fails_its_check() {
        let d = tempdir();
        let path = sealed(&d, &body());
        assert_eq!(check(&path), Some(Origin::Compiled));
        // Same length, one byte changed in place (the file vouched for and in the page cache).
        next_tick(&path);
        let mut b = body();
        b[5] = 3;
        File::options().write(true).open(&path).unwrap().write_all_at(&b[5..6], 5).unwrap();
        assert_eq!(check(&path), None);
        // The same bytes as before, but another file renamed over it: read whole again.
        let (mut other, tmp) = temp_file(&path).unwrap();
        other.write_all(&b).unwrap();
        tmp.persist(&path).unwrap();
        assert_eq!(check(&path), None);
        // Truncated.
        std::fs::write(&path, &body()[..100]).unwrap();
        assert_eq!(check(&path), None);
        // No sidecar.
        std::fs::write(&path, body()).unwrap();
        std::fs::remove_file(sidecar(&path)).unwrap();
        assert_eq!(check(&path), None);
    }

    #[test]
    fn damaged_shipped_copies_are_refused_and_leave_nothing() {
        let d = tempdir();
        let path = d.join("cache").join("a.cwasm");
        // The list claims another length.
        ship(&d, "a.cwasm", &body(), 10);
        assert!(unpack(std::slice::from_ref(&d), &path).is_err());
        assert!(!path.exists());
        // The compressed file is truncated.
        ship(&d, "a.cwasm", &body(), body().len() as u64);
        let z = std::fs::read(d.join("x.zst")).unwrap();
        std::fs::write(d.join("x.zst"), &z[..z.len() / 2]).unwrap();
        assert!(unpack(std::slice::from_ref(&d), &path).is_err());
        assert!(!path.exists());
        // Not zstd at all.
        std::fs::write(d.join("x.zst"), b"hello").unwrap();
        assert!(unpack(&[d.to_path_buf()], &path).is_err());
        assert!(!path.exists());
        assert!(std::fs::read_dir(d.join("cache")).unwrap().next().is_none(), "no temporary file is left");
    }

    fn set_marked(path: &Path, at: SystemTime) {
        File::options().append(true).open(sidecar(path)).unwrap().set_modified(at).unwrap();
    }

    fn marked(path: &Path) -> SystemTime {
        std::fs::metadata(sidecar(path)).unwrap().modified().unwrap()
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_check_marks_its_file_used_at_most_once_an_hour() {
        let d = tempdir();
        let path = sealed(&d, &body());
        let minutes_ago = SystemTime::now() - Duration::from_secs(600);
        set_marked(&path, minutes_ago);
        assert_eq!(check(&path), Some(Origin::Compiled));
        assert_eq!(marked(&path), minutes_ago, "marked ten minutes ago: not written again");
        set_marked(&path, SystemTime::now() - 2 * HOUR);
        assert_eq!(check(&path), Some(Origin::Compiled));
        assert!(marked(&path) > minutes_ago, "marked two hours ago: marked now");
        // A damaged file is not marked.
        set_marked(&path, SystemTime::now() - 2 * DAY);
        std::fs::write(&path, &body()[..100]).unwrap();
        assert_eq!(check(&path), None);
        assert!(marked(&path) < minutes_ago);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_vouched_for_in_this_boot_is_not_read_again_but_its_dropped_pages_are() {
        let d = tempdir();
        let path = sealed(&d, &noise());
        // A sidecar that names another CRC (the same length): only a whole read can tell.
        let (len, _, origin) = read_sidecar(&sidecar(&path)).unwrap();
        write_whole(&sidecar(&path), format!("{len} 00000000 {}\n", origin.as_str()).as_bytes()).unwrap();
        assert_eq!(check(&path), Some(Origin::Compiled), "vouched for: not read");
        // Out of the page cache (written back first: dirty pages stay): still vouched
        // for, and read back in.
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        assert!(!resident(&file, len));
        assert_eq!(check(&path), Some(Origin::Compiled));
        assert!(resident(&file, len), "the dropped pages are read back");
        // Vouched for in another boot: read whole, and the CRC decides.
        let mut id = Identity::parse(&std::fs::read_to_string(checked_sidecar(&path)).unwrap()).unwrap();
        id.boot = "another-boot".into();
        write_whole(&checked_sidecar(&path), id.line().as_bytes()).unwrap();
        assert_eq!(check(&path), None);
        // Without its `.checked` sidecar, a file is read whole too.
        let path = sealed(&d, &body());
        write_whole(&sidecar(&path), format!("{} 00000000 compiled\n", body().len()).as_bytes()).unwrap();
        std::fs::remove_file(checked_sidecar(&path)).unwrap();
        assert_eq!(check(&path), None);
    }

    #[test]
    fn a_link_another_user_s_or_a_writable_file_is_never_served() {
        let d = tempdir();
        let good = sealed(&d, &body());
        // A link named as the cache file, to a whole file with its sidecars copied.
        let link = d.join("link.cwasm");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        for side in [sidecar, checked_sidecar] {
            std::fs::copy(side(&good), side(&link)).unwrap();
        }
        assert_eq!(check(&link), None);
        // Writable by group or others.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert_eq!(check(&good), None);
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(check(&good), Some(Origin::Compiled));
    }

    /// A guest's key as engine.rs and snapshot.rs name files (`kind_of`).
    fn key(guest: char, n: usize, ext: &str) -> String {
        format!("{}-wasmtime48.0.8-preload-{n:016x}.{ext}", guest.to_string().repeat(16))
    }

    /// `bytes` as the cache file `name` in `d` with its sidecar, written as another
    /// process would (this one does not hold it), last used at `used`.
    fn planted(d: &Path, name: &str, bytes: &[u8], used: SystemTime) -> PathBuf {
        let path = d.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (crc, len) = crc_of(bytes).unwrap();
        std::fs::write(sidecar(&path), format!("{len} {crc:08x} built\n")).unwrap();
        set_marked(&path, used);
        path
    }

    fn listing(d: &Path) -> std::collections::BTreeSet<String> {
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }

    /// Seals `bytes` as `name` in `d`, as this process writes a new file.
    fn seal_as(d: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = d.join(name);
        let (mut file, tmp) = temp_file(&path).unwrap();
        file.write_all(bytes).unwrap();
        seal(tmp, &path, Origin::Built).unwrap();
        path
    }

    #[test]
    fn sealing_a_file_removes_the_cache_files_unused_for_thirty_days() {
        let d = tempdir();
        let now = SystemTime::now();
        let old = planted(&d, &key('a', 1, "img"), &body(), now - 31 * DAY);
        for beside in [old.with_extension("sha256"), old.with_extension("lock")] {
            std::fs::write(beside, b"").unwrap();
        }
        let recent = planted(&d, &key('a', 2, "cwasm"), &body(), now - 29 * DAY);
        // Not named as ours: never the sweep's, whatever its sidecar says.
        planted(&d, "notes.img", &body(), now - 31 * DAY);
        planted(&d, "x-wasmtime.img", &body(), now - 31 * DAY);
        let new = seal_as(&d, &key('b', 1, "cwasm"), &body());
        let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        let mut want: std::collections::BTreeSet<String> = ["notes.img", "notes.img.sum", "x-wasmtime.img", "x-wasmtime.img.sum"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        for p in [&new, &recent] {
            want.extend([name(p), name(&sidecar(p))]);
        }
        want.insert(name(&checked_sidecar(&new)));
        assert_eq!(listing(&d), want);
        assert_eq!(check(&new), Some(Origin::Built));
        // The file being sealed is kept however its mark reads.
        set_marked(&new, now - 40 * DAY);
        assert_eq!(sweep(&d, &new, now), Vec::<String>::new());
        assert!(new.exists());
    }

    #[test]
    fn a_sweep_keeps_the_newest_files_of_each_kind_and_those_live_processes_hold() {
        let d = tempdir();
        let now = SystemTime::now();
        // Sixteen images and six compiled guests of an older guest, used an hour apart.
        let images: Vec<PathBuf> = (0..16).map(|i| planted(&d, &key('a', i, "img"), &body(), now - (i as u32 + 1) * HOUR)).collect();
        let compiled: Vec<PathBuf> = (0..6).map(|i| planted(&d, &key('a', i, "cwasm"), &body(), now - (i as u32 + 1) * HOUR)).collect();
        // The oldest image is held by a live child process (a shared flock, as `check`
        // takes), the second oldest by this process.
        // The shell takes the lock on its own descriptor, then becomes `sleep`: the
        // process spawned is the one holding it, and killing it lets go.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exec 9<\"$1\" && flock --shared 9 && echo held && exec sleep 600", "sh"])
            .arg(&images[15])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        io::BufRead::read_line(&mut io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line, "held\n");
        assert_eq!(check(&images[14]), Some(Origin::Built));
        // A temporary file a writer left a day and more ago, and one being written now.
        let stale_tmp = d.join(format!(".{}.abc123.tmp", key('a', 0, "img")));
        std::fs::write(&stale_tmp, b"half").unwrap();
        File::options().append(true).open(&stale_tmp).unwrap().set_modified(now - 2 * DAY).unwrap();
        let fresh_tmp = d.join(format!(".{}.def456.tmp", key('b', 0, "img")));
        std::fs::write(&fresh_tmp, b"half").unwrap();
        // A failed build's lock and a sidecar whose file is gone, a day and more ago; a
        // build's lock taken now (its image not written yet).
        let stale_lock = d.join(key('c', 1, "lock"));
        let stale_sum = d.join(format!("{}.sum", key('c', 2, "img")));
        for p in [&stale_lock, &stale_sum] {
            std::fs::write(p, b"").unwrap();
            File::options().append(true).open(p).unwrap().set_modified(now - 2 * DAY).unwrap();
        }
        let fresh_lock = d.join(key('c', 3, "lock"));
        std::fs::write(&fresh_lock, b"").unwrap();

        let new = seal_as(&d, &key('b', 0, "img"), &body());
        let left = listing(&d);
        let here = |p: &Path| left.contains(&*p.file_name().unwrap().to_string_lossy());
        assert!(here(&new) && here(&sidecar(&new)));
        // Images: the new one and the eleven used last (the check marked the second
        // oldest used now), and the one the child holds.
        for (i, p) in images.iter().enumerate() {
            assert_eq!(here(p), !(KEEP_IMAGES - 2..14).contains(&i), "image {i}");
            assert_eq!(here(&sidecar(p)), here(p), "image {i}'s sidecar");
        }
        // Compiled guests: the four used last (the new file was an image).
        for (i, p) in compiled.iter().enumerate() {
            assert_eq!(here(p), i < KEEP_COMPILED, "compiled {i}");
        }
        assert!(!here(&stale_tmp) && here(&fresh_tmp));
        // What lay beside files long gone, stale: removed; a build's lock of this moment stays.
        for (name, left) in [(&stale_lock, false), (&stale_sum, false), (&fresh_lock, true)] {
            assert_eq!(here(name), left, "{}", name.display());
        }
        // The held files are still whole (not checked here: this process would hold it too).
        assert_eq!(std::fs::read(&images[15]).unwrap(), body());
        assert!(read_sidecar(&sidecar(&images[15])).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        // Once its process is gone, the next sweep removes the file it held.
        let newer = seal_as(&d, &key('b', 1, "img"), &body());
        assert!(!images[15].exists() && images[14].exists() && newer.exists() && new.exists());
    }

    #[test]
    fn a_sweep_follows_no_link_and_leaves_what_is_not_a_file_of_ours() {
        let d = tempdir();
        let now = SystemTime::now();
        let victim_dir = tempdir();
        let victim = planted(&victim_dir, &key('a', 0, "img"), &body(), now - 40 * DAY);
        // A link named as a stale image (its sidecar too), to a file elsewhere.
        let link = d.join(key('a', 0, "img"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::symlink(sidecar(&victim), sidecar(&link)).unwrap();
        // A folder named as a stale image, with a file in it.
        let folder = d.join(key('a', 1, "img"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("inside"), b"x").unwrap();
        // A file named as an image, no sidecar, writable by all (never served).
        let odd = d.join(key('a', 2, "img"));
        std::fs::write(&odd, body()).unwrap();
        std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o666)).unwrap();
        // A FIFO named as a compiled guest: opening it must not wait for a writer.
        let fifo = d.join(key('a', 3, "cwasm"));
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
        assert_eq!(check(&odd), None);
        assert_eq!(check(&fifo), None);

        let new = seal_as(&d, &key('b', 0, "img"), &body());
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&victim).unwrap(), body(), "the link's target is untouched");
        assert!(sidecar(&victim).exists());
        assert!(folder.join("inside").exists());
        assert!(std::fs::symlink_metadata(&fifo).is_ok());
        assert!(!odd.exists(), "an unused file of ours, without a sidecar: removed");
        assert_eq!(check(&new), Some(Origin::Built));
    }

    /// 64 MiB that no 4 KiB block of zeros leaves a hole in.
    #[cfg(target_os = "linux")]
    fn noise() -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..64 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8 | 1
            })
            .collect()
    }

    /// KiB resident in a new private mapping of the file at `path` once one byte in each
    /// MiB of it has been read: what a guest's reads cost a pool slot's RSS.
    #[cfg(target_os = "linux")]
    #[expect(unsafe_code, reason = "maps a file to see what reading it makes resident")]
    fn resident_after_sparse_reads(path: &Path) -> u64 {
        use std::os::fd::AsRawFd;
        let file = File::open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a new read-only private mapping of a file that nothing writes while this
        // test runs, read within its length, and unmapped before return.
        let at = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0)
        };
        assert_ne!(at, libc::MAP_FAILED, "mapping {}", path.display());
        for offset in (0..len).step_by(1 << 20) {
            // SAFETY: within the mapping.
            unsafe { std::ptr::read_volatile(at.cast::<u8>().add(offset)) };
        }
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{:x}-", at as usize);
        let rss = smaps
            .lines()
            .skip_while(|l| !l.starts_with(&head))
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(at, len) };
        rss.expect("the mapping's Rss in /proc/self/smaps")
    }

    /// Reading one byte per MiB of 64 MiB: 64 faults, each mapping at most the kernel's
    /// fault-around window (64 KiB) in small folios; large ones map up to 2 MiB each.
    #[cfg(target_os = "linux")]
    const SMALL_FOLIOS_KIB: u64 = 64 * 128;

    #[cfg(target_os = "linux")]
    #[test]
    fn cache_files_are_written_in_small_folios() {
        let d = tempdir();
        let path = d.join("f");
        write_in_blocks(File::create(&path).unwrap(), &noise()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), noise());
        let kib = resident_after_sparse_reads(&path);
        assert!(kib <= SMALL_FOLIOS_KIB, "{kib} KiB resident for 64 one-byte reads");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_checked_file_comes_back_into_the_page_cache_in_small_folios() {
        let d = tempdir();
        let path = sealed(&d, &noise());
        // Out of the page cache, as after a reboot or memory pressure (written back first:
        // dirty pages stay).
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        assert_eq!(check(&path), Some(Origin::Compiled));
        let kib = resident_after_sparse_reads(&path);
        assert!(kib <= SMALL_FOLIOS_KIB, "{kib} KiB resident for 64 one-byte reads");
    }

    /// A fresh folder, removed when the guard drops. Not named `wasi-python-*`: that is
    /// the runtime's private folders' prefix, which sweeps look for.
    pub(crate) struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for TempDir {
        type Target = PathBuf;
        fn deref(&self) -> &PathBuf {
            &self.0
        }
    }

    pub(crate) fn tempdir() -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "wasi_python_unit_cached_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}
