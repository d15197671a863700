//! A session snapshot's memory as layers: a base file (a preload image, or a whole
//! memory) with runs of pages mapped over it from small page files, so a snapshot
//! costs what its session wrote, not its memory's size, and its forks share every page
//! they do not write (docs/snapshots.md, "How a snapshot is made").
//!
//! - [`written`]: the pages a guest wrote since its instance was made, by the
//!   `PAGEMAP_SCAN` ioctl (Linux 6.7+): a written page of a copy-on-write mapping is
//!   anonymous, an untouched or only read one is the file's (or the zero page);
//!   without the ioctl every page is a candidate.
//! - [`Layout::take`]: the candidates compared with the layout the guest started from
//!   (or its session's last snapshot), the ones that differ written to a new
//!   [`PageFile`] as runs, and those runs laid over the reference's.
//! - [`View`]: the layout mapped read-only in the host, what a diff reads and what a
//!   pooled slot's reset copies written pages back from (wasmtime's layered images,
//!   third_party/README.md).
//!
//! **Invariant:** a layout holds at most [`MAX_RUNS`] runs (each is two mappings in
//! every fork), past which it is compacted into one page file; a page file is written
//! whole, then sealed, before anything maps it, and never written again; a layout's
//! pages are exactly the memory it was taken from (wasi-libc's preopen statics zeroed),
//! whatever the reference: every page that may differ is compared.

#![allow(unsafe_code, reason = "the PAGEMAP_SCAN ioctl and read-only mappings of page files")]

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use wasi_python_image::PAGE;

/// Runs a layout may hold: each run is two mappings (the run, and the base after it)
/// in each fork's memory, against the kernel's default of 65,530 per process.
pub(crate) const MAX_RUNS: usize = 128;
/// Gaps of at most this many pages between runs are always merged.
const SMALL_GAP: u32 = 2;

/// A file of pages: a memfd on Linux (else a temporary file, removed on drop), written
/// whole and sealed before anything maps it.
#[derive(Debug)]
pub(crate) struct PageFile {
    file: Arc<File>,
    path: PathBuf,
    remove: bool,
}

impl PageFile {
    /// A new file of `len` bytes (zeros).
    pub(crate) fn new(len: u64) -> std::io::Result<PageFile> {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::MemfdFlags;
            if let Ok(fd) = rustix::fs::memfd_create("wasi-python-snapshot", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING) {
                let file = File::from(fd);
                let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                file.set_len(len)?;
                return Ok(PageFile { file: Arc::new(file), path, remove: false });
            }
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("wpy-snapshot-{}-{n}.img", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        file.set_len(len)?;
        Ok(PageFile { file: Arc::new(file), path, remove: true })
    }

    pub(crate) fn write_at(&self, bytes: &[u8], at: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, at)
    }

    /// No more writes, growing or shrinking (a memfd's seals; a no-op elsewhere): the
    /// file is shared by every fork that maps it.
    pub(crate) fn seal(&self) {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::SealFlags;
            let _ = rustix::fs::fcntl_add_seals(&*self.file, SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL);
        }
    }

    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }
}

impl Drop for PageFile {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Memory pages `start..start + len` are pages `at..at + len` of `file`.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) file: Arc<PageFile>,
    pub(crate) at: u32,
}

impl Run {
    fn end(&self) -> u32 {
        self.start + self.len
    }
    /// The part of this run within `pages` (non-empty), or `None`.
    fn within(&self, pages: Range<u32>) -> Option<Run> {
        let start = self.start.max(pages.start);
        let end = self.end().min(pages.end);
        (start < end).then(|| Run { start, len: end - start, file: self.file.clone(), at: self.at + (start - self.start) })
    }
}

/// A memory of `len` bytes: the first `base_len` bytes of `base`, zeros after them,
/// and `runs` (sorted, disjoint) over both.
pub(crate) struct Layout {
    pub(crate) base: Arc<File>,
    pub(crate) base_len: u64,
    pub(crate) runs: Vec<Run>,
    pub(crate) len: u64,
    /// What keeps `base` alive when it is a page file (a whole memory, no preload).
    _base_file: Option<Arc<PageFile>>,
    view: OnceLock<Result<Arc<View>, String>>,
}

impl std::fmt::Debug for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layout").field("len", &self.len).field("base_len", &self.base_len).field("runs", &self.runs.len()).finish()
    }
}

impl Layout {
    /// `base`'s first `base_len` bytes as a memory of `len` bytes, nothing over it.
    pub(crate) fn over(base: Arc<File>, base_len: u64, len: u64) -> Layout {
        Layout { base, base_len: base_len.min(len), runs: Vec::new(), len, _base_file: None, view: OnceLock::new() }
    }

    /// A whole memory in a page file of its own.
    pub(crate) fn whole(file: Arc<PageFile>, len: u64) -> Layout {
        Layout { base: file.file().clone(), base_len: len, runs: Vec::new(), len, _base_file: Some(file), view: OnceLock::new() }
    }

    fn with_runs(&self, runs: Vec<Run>, len: u64) -> Layout {
        Layout {
            base: self.base.clone(),
            base_len: self.base_len.min(len),
            runs,
            len,
            _base_file: self._base_file.clone(),
            view: OnceLock::new(),
        }
    }

    /// The memory's size in 4 KiB pages.
    pub(crate) fn pages(&self) -> u32 {
        (self.len / PAGE as u64) as u32
    }

    /// Pages held in runs.
    pub(crate) fn run_pages(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.len)).sum()
    }

    /// The layout mapped read-only in this process, made on first need.
    pub(crate) fn view(&self) -> std::io::Result<Arc<View>> {
        self.view
            .get_or_init(|| View::new(self).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(std::io::Error::other)
    }

    /// What maps page `n`: a run's file and page there, else the base (`None`).
    fn source(&self, n: u32) -> Option<(&Arc<PageFile>, u32)> {
        let i = self.runs.partition_point(|r| r.end() <= n);
        self.runs.get(i).filter(|r| r.start <= n).map(|r| (&r.file, r.at + (n - r.start)))
    }

    /// The pages (by number, growing) where this layout may differ from `other`: every
    /// page mapped from another file or place, and every page past the shorter memory.
    /// A different base: every page.
    fn maybe_differ(&self, other: &Layout) -> Vec<Range<u32>> {
        let (mine, theirs) = (self.pages(), other.pages());
        let same_base = Arc::ptr_eq(&self.base, &other.base) && self.base_len == other.base_len;
        if !same_base {
            return std::iter::once(0..mine).collect();
        }
        let mut out: Vec<Range<u32>> = Vec::new();
        let mut push = |r: Range<u32>| match out.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => out.push(r),
        };
        let mut edges: Vec<u32> = Vec::new();
        for r in self.runs.iter().chain(other.runs.iter()) {
            edges.extend([r.start, r.end()]);
        }
        edges.push(mine.min(theirs));
        edges.push(0);
        edges.sort_unstable();
        edges.dedup();
        for w in edges.windows(2) {
            let (a, b) = (w[0], w[1].min(mine));
            if a >= b {
                continue;
            }
            let same = match (self.source(a), other.source(a)) {
                (None, None) => true,
                (Some((f, x)), Some((g, y))) => Arc::ptr_eq(f, g) && x == y,
                _ => false,
            };
            if !same {
                push(a..b);
            }
        }
        if mine > theirs {
            push(theirs..mine);
        }
        out
    }

    /// The pages where this layout's memory differs from `other`'s (past `other`'s
    /// end: from zeros), compared page by page where they may.
    pub(crate) fn differing(&self, other: &Layout) -> std::io::Result<Vec<u32>> {
        let (mine, theirs) = (self.view()?, other.view()?);
        let mut out = Vec::new();
        for r in self.maybe_differ(other) {
            for n in r {
                if mine.page(n) != theirs.page(n) {
                    out.push(n);
                }
            }
        }
        Ok(out)
    }

    /// This layout with the pages `pages` (growing) of `memory` (a memory of `len`
    /// bytes) laid over it, written to one new page file. Past [`MAX_RUNS`], the runs
    /// nearest each other are merged (the pages between them copied along, from
    /// `memory`), so the copy stays near what changed. `memory(n)` is page `n` of the
    /// new memory (4 KiB), for any page.
    pub(crate) fn overlay<'a>(&self, pages: &[u32], len: u64, memory: impl Fn(u32) -> std::borrow::Cow<'a, [u8]>) -> std::io::Result<Layout> {
        let end = (len / PAGE as u64) as u32;
        // The new pages as runs, small gaps closed.
        let mut fresh: Vec<Range<u32>> = Vec::new();
        for &n in pages.iter().filter(|&&n| n < end) {
            match fresh.last_mut() {
                Some(last) if n <= last.end + SMALL_GAP => last.end = n + 1,
                _ => fresh.push(n..n + 1),
            }
        }
        // The parts of the old runs no new one covers, and the new ones: (range, old run).
        let mut holes: Vec<Range<u32>> = Vec::with_capacity(fresh.len() + 1);
        let mut at = 0;
        for r in &fresh {
            holes.push(at..r.start);
            at = r.end;
        }
        holes.push(at..end);
        let mut pieces: Vec<(Range<u32>, Option<Run>)> = Vec::with_capacity(self.runs.len() + fresh.len());
        for hole in holes.into_iter().filter(|h| h.start < h.end) {
            for r in &self.runs {
                if let Some(part) = r.within(hole.clone()) {
                    pieces.push((part.start..part.end(), Some(part)));
                }
            }
        }
        pieces.extend(fresh.into_iter().map(|r| (r, None)));
        pieces.sort_by_key(|p| p.0.start);
        // Too many: the smallest gaps closed, each group of pieces one new run.
        let mut join = vec![false; pieces.len().saturating_sub(1)];
        if pieces.len() > MAX_RUNS {
            let mut gaps: Vec<(u32, usize)> = pieces.windows(2).enumerate().map(|(i, w)| (w[1].0.start - w[0].0.end, i)).collect();
            gaps.sort_unstable();
            for &(_, i) in &gaps[..pieces.len() - MAX_RUNS] {
                join[i] = true;
            }
        }
        let mut groups: Vec<(Range<u32>, Option<Run>)> = Vec::with_capacity(pieces.len());
        for (i, (range, old)) in pieces.into_iter().enumerate() {
            match groups.last_mut() {
                Some(last) if i > 0 && join[i - 1] => {
                    last.0.end = range.end;
                    last.1 = None;
                }
                _ => groups.push((range, old)),
            }
        }
        // What is not an old run left as it was is written, in one new file.
        let to_write: Vec<Range<u32>> = groups.iter().filter(|g| g.1.is_none()).map(|g| g.0.clone()).collect();
        let mut written = write_runs(&to_write, &memory)?.into_iter();
        let runs = groups.into_iter().map(|(_, old)| old.or_else(|| written.next())).collect::<Option<Vec<Run>>>();
        let runs = runs.ok_or_else(|| std::io::Error::other("a run was not written"))?;
        Ok(self.with_runs(runs, len))
    }
}

/// `runs` written one after another to a new page file, sealed.
fn write_runs<'a>(runs: &[Range<u32>], memory: &impl Fn(u32) -> std::borrow::Cow<'a, [u8]>) -> std::io::Result<Vec<Run>> {
    let total: u64 = runs.iter().map(|r| u64::from(r.end - r.start)).sum();
    if total == 0 {
        return Ok(Vec::new());
    }
    let file = Arc::new(PageFile::new(total * PAGE as u64)?);
    let mut at = 0u32;
    let mut out = Vec::with_capacity(runs.len());
    let mut buf: Vec<u8> = Vec::new();
    for r in runs {
        buf.clear();
        for n in r.clone() {
            buf.extend_from_slice(&memory(n));
        }
        file.write_at(&buf, u64::from(at) * PAGE as u64)?;
        out.push(Run { start: r.start, len: r.end - r.start, file: file.clone(), at });
        at += r.end - r.start;
    }
    file.seal();
    Ok(out)
}

/// A layout mapped read-only in this process: the base file, zeros, the runs.
#[derive(Debug)]
pub(crate) struct View {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a read-only mapping, never written and unmapped only on drop.
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl View {
    fn new(layout: &Layout) -> std::io::Result<View> {
        let len = usize::try_from(layout.len).map_err(std::io::Error::other)?;
        if len == 0 {
            return Ok(View { ptr: std::ptr::NonNull::dangling().as_ptr(), len: 0 });
        }
        let fail = || std::io::Error::last_os_error();
        // SAFETY: a new private anonymous mapping, nothing else at that address.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(fail());
        }
        let view = View { ptr: ptr.cast(), len };
        let map = |at: u64, bytes: u64, fd: i32, offset: u64| -> std::io::Result<()> {
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: within the mapping made above (the layout's pieces lie within
            // its length), replaced by a read-only shared mapping of a file we hold.
            let p = unsafe {
                libc::mmap(
                    view.ptr.add(at as usize).cast(),
                    bytes as usize,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED { Err(fail()) } else { Ok(()) }
        };
        map(0, layout.base_len, layout.base.as_raw_fd(), 0)?;
        for r in &layout.runs {
            let page = PAGE as u64;
            if u64::from(r.end()) * page > layout.len {
                return Err(std::io::Error::other("a run past the memory's end"));
            }
            map(u64::from(r.start) * page, u64::from(r.len) * page, r.file.file().as_raw_fd(), u64::from(r.at) * page)?;
        }
        Ok(view)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: mapped readable for `len` bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Page `n`, or a page of zeros past the end.
    pub(crate) fn page(&self, n: u32) -> &[u8] {
        static ZEROS: [u8; PAGE] = [0; PAGE];
        let at = n as usize * PAGE;
        self.bytes().get(at..at + PAGE).unwrap_or(&ZEROS)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: the mapping made in `new`, of `len` bytes, no longer borrowed.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

impl wasmtime::MemoryLayersView for View {
    fn bytes(&self) -> &[u8] {
        View::bytes(self)
    }
}

/// The pages of `memory` (page-aligned) a guest may have written since its instance
/// was mapped copy-on-write: present or swapped, neither the file's nor the zero page.
/// `None`: the kernel has no `PAGEMAP_SCAN` (before 6.7), or it failed.
pub(crate) fn written(memory: &[u8]) -> Option<Vec<Range<u32>>> {
    #[cfg(target_os = "linux")]
    {
        scan::written(memory)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = memory;
        None
    }
}

#[cfg(target_os = "linux")]
mod scan {
    use std::ops::Range;
    use std::os::fd::AsRawFd;

    const FILE: u64 = 1 << 2;
    const PRESENT: u64 = 1 << 3;
    const SWAPPED: u64 = 1 << 4;
    const PFNZERO: u64 = 1 << 5;
    /// `_IOWR('f', 16, struct pm_scan_arg)`, the argument 96 bytes.
    const PAGEMAP_SCAN: libc::Ioctl = 0xC060_6610u32 as libc::Ioctl;

    #[repr(C)]
    struct Arg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Region {
        start: u64,
        end: u64,
        categories: u64,
    }

    /// `/proc/self/pagemap`, opened once (and again in a forked child: the fork count
    /// says when).
    fn pagemap() -> Option<std::sync::Arc<std::fs::File>> {
        use parking_lot::Mutex;
        static OPEN: Mutex<Option<(u64, Option<std::sync::Arc<std::fs::File>>)>> = Mutex::new(None);
        let generation = wasi_python_sched::forks::generation();
        let mut open = OPEN.lock();
        match &*open {
            Some((g, f)) if *g == generation => f.clone(),
            _ => {
                let f = std::fs::File::open("/proc/self/pagemap").ok().map(std::sync::Arc::new);
                *open = Some((generation, f.clone()));
                f
            }
        }
    }

    pub(super) fn written(memory: &[u8]) -> Option<Vec<Range<u32>>> {
        let page = super::PAGE as u64;
        let base = memory.as_ptr() as u64;
        if !base.is_multiple_of(page) || !(memory.len() as u64).is_multiple_of(page) {
            return None;
        }
        let file = pagemap()?;
        let end = base + memory.len() as u64;
        let mut regions = vec![Region::default(); 4096];
        let mut out: Vec<Range<u32>> = Vec::new();
        let mut at = base;
        while at < end {
            let mut arg = Arg {
                size: std::mem::size_of::<Arg>() as u64,
                flags: 0,
                start: at,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                max_pages: 0,
                // Neither a file page nor the zero page, and present or swapped out.
                category_inverted: FILE | PFNZERO,
                category_mask: FILE | PFNZERO,
                category_anyof_mask: PRESENT | SWAPPED,
                return_mask: 0,
            };
            // SAFETY: `arg` describes `regions`, which outlives the call; the kernel
            // writes at most `vec_len` regions there and reads only the page tables of
            // the range.
            let n = unsafe { libc::ioctl(file.as_raw_fd(), PAGEMAP_SCAN, &mut arg as *mut Arg) };
            if n < 0 {
                return None;
            }
            for r in &regions[..n as usize] {
                if r.start < at || r.end > end || r.start >= r.end {
                    return None;
                }
                let range = ((r.start - base) / page) as u32..((r.end - base).div_ceil(page)) as u32;
                match out.last_mut() {
                    Some(last) if last.end >= range.start => last.end = last.end.max(range.end),
                    _ => out.push(range),
                }
            }
            // Nothing but a full buffer stops the walk early (no `max_pages`): then it
            // goes on after the last region reported (the kernel's `walk_end` may
            // name an earlier point, third_party/README.md).
            if (n as usize) < regions.len() {
                break;
            }
            let last = regions[n as usize - 1].end;
            if last <= at {
                return None;
            }
            at = last;
        }
        Some(out)
    }
}
