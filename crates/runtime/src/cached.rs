//! Files of the compiled-guest cache: written whole (write-then-rename) with a sidecar
//! (`<file>.sum`) naming their length, CRC-32 and origin; checked against it before
//! they are served, so a truncated, edited or half-written file is rebuilt, never
//! loaded; and unpacked from shipped copies (the companion wheel's zstd files, listed
//! in a `COMPILED` file) when the artifact set names a folder of them.
//!
//! The page cache holds these files in small pieces (folios): each is written in 4 KiB
//! blocks ([`SparseWriter`]) and read by [`check`] without readahead. The compiled guest
//! and the memory images are mapped, each image once per pool slot in use, and a fault
//! maps the whole folio it lands in. Written in 1 MiB pieces, or read back by
//! readahead after the page cache dropped them, they come in folios of up to 2 MiB on
//! Linux 6.18 with ext4; every slot then mapped 42-50 MiB of the 82 MiB image for the
//! few MiB its guest reads, and a process's peak RSS after 200 runs was 183-275 MiB
//! against 68-78 (docs/dev/perf-log/). The memory they take is the same
//! either way (the page cache is shared), and so is the run's speed.
//!
//! The folder does not grow without end: each check marks its file used (the sidecar's
//! modification time, at most once a day), and each new file's sealing removes the files
//! unused for [`UNUSED_FOR`] (an older version's compiled guest and images, which nothing
//! reads again).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tempfile::TempPath;

use crate::Error;

/// How long a cache file may go unused before a new file's sealing removes it ([`seal`]).
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often a file's use is marked at most ([`check`]): a write to its sidecar's inode.
const MARK_EVERY: Duration = Duration::from_secs(24 * 3600);

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
    let mut s = path.as_os_str().to_owned();
    s.push(".sum");
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

/// The origin of the file at `path` if it is whole: its sidecar exists and names the
/// file's length and CRC-32. Reads the whole file (about 30 ms for the compiled guest),
/// without readahead: what it brings into the page cache comes in small folios (above).
/// A whole file is marked used (above).
pub fn check(path: &Path) -> Option<Origin> {
    let side = sidecar(path);
    let (len, crc, origin) = read_sidecar(&side)?;
    let file = open_for_reading_whole(path).ok()?;
    if file.metadata().ok()?.len() != len {
        return None;
    }
    (crc_of(file).ok()? == (crc, len)).then(|| {
        mark_used(&side, SystemTime::now());
        origin
    })
}

/// A sidecar's (length, CRC-32, origin); `None` if it is missing or not one of ours.
fn read_sidecar(side: &Path) -> Option<(u64, u32, Origin)> {
    let text = std::fs::read_to_string(side).ok()?;
    let mut words = text.split_whitespace();
    let len: u64 = words.next()?.parse().ok()?;
    let crc = u32::from_str_radix(words.next()?, 16).ok()?;
    let origin = Origin::parse(words.next()?)?;
    words.next().is_none().then_some((len, crc, origin))
}

/// Sets the sidecar's modification time to `now` unless it was set less than
/// [`MARK_EVERY`] before. Best effort: a cache folder this process may not write is
/// only never pruned of this file.
fn mark_used(side: &Path, now: SystemTime) {
    let Ok(marked) = std::fs::metadata(side).and_then(|m| m.modified()) else { return };
    if now.duration_since(marked).is_ok_and(|d| d >= MARK_EVERY) {
        let _ = File::options().append(true).open(side).and_then(|f| f.set_modified(now));
    }
}

/// Removes from `dir` each cache file whose use was last marked [`UNUSED_FOR`] or more
/// before `now` (but `keep`): its sidecar first (a file without one is never served),
/// then the file and what may lie beside it (an image's `.sha256` and `.lock`). Only
/// `.cwasm` and `.img` files with a sidecar of ours are looked at. Best effort; a
/// process that has such a file mapped keeps its mapping. Returns how many it removed.
fn prune(dir: &Path, keep: &Path, now: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let side = entry.path();
        let Some(file) = side.to_str().and_then(|s| s.strip_suffix(".sum")).map(PathBuf::from) else { continue };
        let ours = matches!(file.extension().and_then(|e| e.to_str()), Some("cwasm" | "img"));
        if !ours || file == keep || read_sidecar(&side).is_none() {
            continue;
        }
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|marked| now.duration_since(marked).is_ok_and(|d| d >= UNUSED_FOR));
        if unused && std::fs::remove_file(&side).is_ok() {
            for beside in [file.clone(), file.with_extension("sha256"), file.with_extension("lock")] {
                let _ = std::fs::remove_file(beside);
            }
            removed += 1;
        }
    }
    removed
}

/// Opens a cache file to read it whole, without readahead: what the read brings into the
/// page cache comes in small folios (above).
pub(crate) fn open_for_reading_whole(path: &Path) -> io::Result<File> {
    let file = File::open(path)?;
    // Only advice: where it fails or means nothing, the file is read as before.
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
    Ok(file)
}

/// Moves the finished `tmp` to `path` and writes its sidecar: the file first, so a
/// process that dies in between leaves a file without a sidecar, which is rebuilt.
pub(crate) fn seal(tmp: TempPath, path: &Path, origin: Origin) -> Result<(), Error> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    let (crc, len) = crc_of(File::open(&tmp).map_err(|e| io("reading", &tmp, e))?).map_err(|e| io("reading", &tmp, e))?;
    let side = sidecar(path);
    let _ = std::fs::remove_file(&side);
    tmp.persist(path).map_err(|e| io("renaming", &e.path, e.error))?;
    write_whole(&side, format!("{len} {crc:08x} {}\n", origin.as_str()).as_bytes()).map_err(|e| io("writing", &side, e))?;
    if let Some(dir) = path.parent() {
        prune(dir, path, SystemTime::now());
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
}

const BLOCK: usize = 4096;

impl SparseWriter {
    pub(crate) fn new(file: File) -> SparseWriter {
        SparseWriter { file, at: 0, pending: Vec::with_capacity(BLOCK) }
    }

    fn block(&mut self, block: &[u8]) -> io::Result<()> {
        if block.iter().any(|&b| b != 0) {
            self.file.seek(SeekFrom::Start(self.at))?;
            self.file.write_all(block)?;
        }
        self.at += block.len() as u64;
        Ok(())
    }

    /// Writes what is left and gives the file its full length.
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        let rest = std::mem::take(&mut self.pending);
        self.block(&rest)?;
        self.file.set_len(self.at)?;
        self.file.sync_all()?;
        Ok(self.at)
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
/// into place, checked by its length and zstd's own content checksum.
/// `Ok(false)`: none is shipped. `Err`: one is, but it is damaged (the reason).
pub(crate) fn unpack(dirs: &[PathBuf], path: &Path) -> Result<bool, String> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Ok(false) };
    let Some(shipped) = find(dirs, name) else { return Ok(false) };
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let src = File::open(&shipped.file).map_err(|e| format!("opening {}: {e}", shipped.file.display()))?;
        let mut decoder = zstd::stream::read::Decoder::new(src).map_err(|e| format!("{}: {e}", shipped.file.display()))?;
        let (out, tmp) = temp_file(path).map_err(|e| format!("creating a temporary file beside {}: {e}", path.display()))?;
        let mut sparse = SparseWriter::new(out);
        // Bounded: never more than the list says, so a hostile copy cannot fill the disk.
        let copied = io::copy(&mut (&mut decoder).take(shipped.len + 1), &mut sparse)
            .map_err(|e| format!("{} does not decompress: {e}", shipped.file.display()))?;
        if copied != shipped.len {
            return Err(format!("{} holds {copied} bytes, its list says {}", shipped.file.display(), shipped.len));
        }
        sparse.finish().map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        seal(tmp, path, Origin::Unpacked).map_err(|e| e.to_string())
    })();
    result.map(|()| true)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn ship(dir: &Path, name: &str, body: &[u8], listed_len: u64) {
        let z = zstd::stream::encode_all(body, 3).unwrap();
        std::fs::write(dir.join("x.zst"), z).unwrap();
        std::fs::write(dir.join("COMPILED"), format!("{COMPILED_MAGIC}\n{name} x.zst {listed_len}\n")).unwrap();
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

    #[test]
    fn a_damaged_cache_file_fails_its_check() {
        let d = tempdir();
        let path = sealed(&d, &body());
        assert_eq!(check(&path), Some(Origin::Compiled));
        // Same length, one byte changed.
        let mut b = body();
        b[5] = 3;
        std::fs::write(&path, &b).unwrap();
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

    #[test]
    fn a_check_marks_its_file_used_at_most_once_a_day() {
        let d = tempdir();
        let path = sealed(&d, &body());
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        set_marked(&path, hour_ago);
        assert_eq!(check(&path), Some(Origin::Compiled));
        assert_eq!(marked(&path), hour_ago, "marked less than a day ago: not written again");
        set_marked(&path, SystemTime::now() - 2 * DAY);
        assert_eq!(check(&path), Some(Origin::Compiled));
        assert!(marked(&path) > hour_ago, "marked two days ago: marked now");
        // A damaged file is not marked.
        set_marked(&path, SystemTime::now() - 2 * DAY);
        std::fs::write(&path, &body()[..100]).unwrap();
        assert_eq!(check(&path), None);
        assert!(marked(&path) < hour_ago);
    }

    #[test]
    fn sealing_a_file_removes_the_cache_files_unused_for_thirty_days() {
        let d = tempdir();
        let seal_as = |name: &str, bytes: &[u8]| {
            let path = d.join(name);
            let (mut file, tmp) = temp_file(&path).unwrap();
            file.write_all(bytes).unwrap();
            seal(tmp, &path, Origin::Built).unwrap();
            path
        };
        let old = seal_as("old.img", &body());
        for beside in ["old.sha256", "old.lock"] {
            std::fs::write(d.join(beside), b"").unwrap();
        }
        let recent = seal_as("recent.cwasm", &body());
        let other = d.join("notes.txt");
        std::fs::write(&other, b"not ours").unwrap();
        std::fs::write(d.join("notes.txt.sum"), b"3 00000000 built\n").unwrap();
        let foreign = d.join("x.img");
        std::fs::write(&foreign, b"abc").unwrap();
        std::fs::write(d.join("x.img.sum"), b"another tool's sidecar\n").unwrap();
        let now = SystemTime::now();
        set_marked(&old, now - 31 * DAY);
        set_marked(&recent, now - 29 * DAY);
        set_marked(&other, now - 31 * DAY);
        set_marked(&foreign, now - 31 * DAY);
        let new = seal_as("new.cwasm", &body());
        let left: std::collections::BTreeSet<String> =
            std::fs::read_dir(&*d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        let want = ["new.cwasm", "new.cwasm.sum", "notes.txt", "notes.txt.sum", "recent.cwasm", "recent.cwasm.sum", "x.img", "x.img.sum"];
        assert_eq!(left, want.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(check(&new), Some(Origin::Built));
        assert_eq!(check(&recent), Some(Origin::Built));
        // The file being sealed is kept however its mark reads.
        set_marked(&recent, now - 31 * DAY);
        set_marked(&new, now - 40 * DAY);
        assert_eq!(prune(&d, &new, now), 1);
        assert!(!recent.exists() && new.exists());
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
