//! A session snapshot's memory as layers: a base file (a preload image, or a whole
//! memory) with runs of pages mapped over it from small page files, so a snapshot
//! costs what its session wrote, not its memory's size, and its forks share every page
//! they do not write (docs/snapshots.md, "How a snapshot is made").
//!
//! - [`written`]: the pages a guest wrote since its instance was made, by the
//!   `PAGEMAP_SCAN` ioctl (Linux 6.7+): a written page of a copy-on-write mapping is
//!   anonymous, an untouched or only read one is the file's (or the zero page);
//!   without the ioctl every page is a candidate.
//! - [`Layout::overlay`]: the candidates compared with the layout the guest started from
//!   (or its session's last snapshot), the ones that differ written to a new
//!   [`PageFile`] as runs, and those runs laid over the reference's.
//! - [`View`]: the layout mapped read-only in the host, what a pooled slot's reset
//!   copies written pages back from (wasmtime's layered images, third_party/README.md)
//!   and a flattened copy is read from; compares and saves read pages from the files
//!   instead ([`Reader`]), so that nothing maps pages into the host only to read them.
//!
//! **Invariant:** a layout holds at most [`MAX_RUNS`] runs (each is two mappings in
//! every fork), and one laid over anything but its session's last snapshot at most
//! [`FIRST_RUNS`] or its reference's count; past that runs are joined; a page file is written
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
/// in each fork's memory, against the kernel's default of 65,530 per process
/// (mappings.rs). Only a session's later snapshots (laid over its last) hold this many.
pub(crate) const MAX_RUNS: usize = 192;
/// Runs a layout laid over anything but its session's last snapshot may hold: a
/// session's first snapshot (or a fork's), and a loaded file. A first snapshot is the
/// one most often forked, so its forks stay at 257 mappings; a later snapshot lays the
/// pages one turn wrote, about 50 runs over the last one's, and with room past 128 they
/// get runs of their own instead of copying old runs along to join (the literal second
/// snapshot of the pandas session: 387 pages written for its 107, against 1,343 at 128;
/// docs/dev/perf-log/2026-12-06-issue44-literal-second-snapshot.md).
pub(crate) const FIRST_RUNS: usize = 128;
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

    /// `slices`, one after another, from `at`.
    pub(crate) fn write_all_vectored_at(&self, mut slices: &[&[u8]], mut at: u64) -> std::io::Result<()> {
        let mut skip = 0usize; // bytes of `slices[0]` already written
        while let Some(first) = slices.first() {
            let batch: Vec<std::io::IoSlice<'_>> = std::iter::once(&first[skip..])
                .chain(slices[1..].iter().copied())
                .take(1024)
                .map(std::io::IoSlice::new)
                .collect();
            let mut n = rustix::io::pwritev(&*self.file, &batch, at).map_err(std::io::Error::from)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            at += n as u64;
            while let Some(first) = slices.first() {
                let left = first.len() - skip;
                if n < left {
                    skip += n;
                    break;
                }
                n -= left;
                skip = 0;
                slices = &slices[1..];
            }
        }
        Ok(())
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
    /// The new pages (as runs, small gaps closed) the overlay that made this layout laid:
    /// where the next one's new pages are likely hot ([`Layout::overlay`]).
    recent: Vec<Range<u32>>,
}

impl std::fmt::Debug for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layout").field("len", &self.len).field("base_len", &self.base_len).field("runs", &self.runs.len()).finish()
    }
}

impl Layout {
    /// `base`'s first `base_len` bytes as a memory of `len` bytes, nothing over it.
    pub(crate) fn over(base: Arc<File>, base_len: u64, len: u64) -> Layout {
        Layout { base, base_len: base_len.min(len), runs: Vec::new(), len, _base_file: None, view: OnceLock::new(), recent: Vec::new() }
    }

    /// A whole memory in a page file of its own.
    pub(crate) fn whole(file: Arc<PageFile>, len: u64) -> Layout {
        Layout { base: file.file().clone(), base_len: len, runs: Vec::new(), len, _base_file: Some(file), view: OnceLock::new(), recent: Vec::new() }
    }

    fn with_runs(&self, runs: Vec<Run>, len: u64) -> Layout {
        Layout {
            base: self.base.clone(),
            base_len: self.base_len.min(len),
            runs,
            len,
            _base_file: self._base_file.clone(),
            view: OnceLock::new(),
            recent: Vec::new(),
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

    /// The memory mappings a guest over this layout holds: the base, and each run with
    /// the base after it (mappings.rs).
    pub(crate) fn mappings(&self) -> usize {
        2 * self.runs.len() + 1
    }

    /// The same memory as one page file of its own (its non-zero pages, read through
    /// the view), for guests that cannot hold a mapping a run (mappings.rs).
    pub(crate) fn flattened(&self) -> std::io::Result<Layout> {
        let view = self.view()?;
        let file = PageFile::new(self.len)?;
        write_nonzero(&file, self.pages(), &|n| std::borrow::Cow::Borrowed(view.page(n)))?;
        file.seal();
        Ok(Layout::whole(Arc::new(file), self.len))
    }

    /// The layout mapped read-only in this process, made on first need.
    pub(crate) fn view(&self) -> std::io::Result<Arc<View>> {
        self.view
            .get_or_init(|| View::new(self).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(std::io::Error::other)
    }

    /// Reads this layout's memory from its files (`pread`), a stretch of pages at a
    /// time, rather than through its [`View`]: a view's pages are mapped in on first
    /// read with their neighbours (the kernel's fault-around, 16 pages a fault), which
    /// made a resting session's compare map most of a preload image into this process
    /// (+41 MB of Pss, pages the page cache held anyway).
    pub(crate) fn reader(&self) -> Reader<'_> {
        Reader { layout: self, buf: Vec::new(), at: 0..0 }
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

    /// Each page where this layout's memory differs from `other`'s (past `other`'s
    /// end: from zeros), in growing order, with its bytes here: compared page by page
    /// where they may, both read from their files ([`Layout::reader`]).
    pub(crate) fn differing(&self, other: &Layout, mut each: impl FnMut(u32, &[u8])) -> std::io::Result<()> {
        let (mut mine, mut theirs) = (self.reader(), other.reader());
        for r in self.maybe_differ(other) {
            for n in r.clone() {
                let page = mine.page(n, r.end)?;
                if page != theirs.page(n, r.end)? {
                    each(n, page);
                }
            }
        }
        Ok(())
    }

    /// This layout with the pages `pages` (growing) of `memory` (a memory of `len`
    /// bytes) laid over it, written to one new page file. Past `most` runs (at most
    /// [`MAX_RUNS`]), neighbouring runs are joined (the pages between them copied along,
    /// from `memory`) where that writes least now and in the snapshots that follow
    /// ([`merge`]). `memory(n)` is page `n` of the new memory (4 KiB), for any page.
    pub(crate) fn overlay<'a>(&self, pages: &[u32], len: u64, most: usize, memory: impl Fn(u32) -> std::borrow::Cow<'a, [u8]>) -> std::io::Result<Layout> {
        let end = (len / PAGE as u64) as u32;
        // The new pages as runs, small gaps closed.
        let mut fresh: Vec<Range<u32>> = Vec::new();
        for &n in pages.iter().filter(|&&n| n < end) {
            match fresh.last_mut() {
                Some(last) if n <= last.end + SMALL_GAP => last.end = n + 1,
                _ => fresh.push(n..n + 1),
            }
        }
        // The parts of the old runs no new one covers, and the new ones.
        let mut holes: Vec<Range<u32>> = Vec::with_capacity(fresh.len() + 1);
        let mut at = 0;
        for r in &fresh {
            holes.push(at..r.start);
            at = r.end;
        }
        holes.push(at..end);
        let mut pieces: Vec<Piece> = Vec::with_capacity(self.runs.len() + fresh.len());
        for hole in holes.into_iter().filter(|h| h.start < h.end) {
            for r in &self.runs {
                if let Some(part) = r.within(hole.clone()) {
                    pieces.push(Piece { pages: part.start..part.end(), old: Some(part), hot: false });
                }
            }
        }
        // A new run is hot where the snapshot before wrote pages too: CPython writes the
        // same pages turn after turn (reference counts, its allocator's and evaluator's
        // state), so those will likely be written again by the next one.
        let mut recent = self.recent.iter().peekable();
        for r in &fresh {
            while recent.next_if(|p| p.end <= r.start).is_some() {}
            let hot = recent.peek().is_some_and(|p| p.start < r.end);
            pieces.push(Piece { pages: r.clone(), old: None, hot });
        }
        pieces.sort_by_key(|p| p.pages.start);
        let groups = choose_merge(pieces, most.clamp(1, MAX_RUNS));
        // What is not an old run left as it was is written, in one new file.
        let to_write: Vec<Range<u32>> = groups.iter().filter(|g| g.old.is_none()).map(|g| g.pages.clone()).collect();
        let mut written = write_runs(&to_write, &memory)?.into_iter();
        let runs = groups.into_iter().map(|g| g.old.or_else(|| written.next())).collect::<Option<Vec<Run>>>();
        let runs = runs.ok_or_else(|| std::io::Error::other("a run was not written"))?;
        let mut layout = self.with_runs(runs, len);
        layout.recent = fresh;
        Ok(layout)
    }
}

/// Part of a layout being made: pages kept from an old run as they are (`old`), or
/// written anew (`None`: new pages, or runs joined); `hot`, holding pages written by this
/// snapshot and the one before.
#[derive(Debug, Clone)]
struct Piece {
    pages: Range<u32>,
    old: Option<Run>,
    hot: bool,
}

/// How much more than joining where it copies least now a snapshot may copy to join
/// where later snapshots copy less ([`choose_merge`]), in pages: 4 MiB, a millisecond or
/// two once.
const INVEST: u64 = 1024;
/// The weights tried for what a join costs later (in halves: a weight of 16 counts each
/// page added to a hot run eight times), the heaviest first.
const LATER: [u64; 5] = [16, 8, 4, 2, 1];
/// Pieces past which only the join that copies least now is made.
const TRY_LATER_UP_TO: usize = 8192;

/// `pieces` joined into at most `most` groups ([`merge`]): where that copies least now,
/// unless a join that keeps hot runs small copies at most [`INVEST`] pages more. Later
/// snapshots then write their hot pages over runs of about their size, replacing them
/// rather than splitting large ones that must be copied again to keep within `most`.
fn choose_merge(pieces: Vec<Piece>, most: usize) -> Vec<Piece> {
    if pieces.len() <= most {
        return pieces;
    }
    let cost = |groups: &[Piece]| -> u64 { groups.iter().filter(|g| g.old.is_none()).map(|g| u64::from(g.pages.end - g.pages.start)).sum() };
    let least = merge(pieces.clone(), most, 0);
    // Each weighting is another merge: tried only for a layout of modest size (a turn's
    // scattered writes), so that a memory written all over costs one merge, as before.
    if pieces.len() > TRY_LATER_UP_TO || !pieces.iter().any(|p| p.hot) {
        return least;
    }
    let budget = cost(&least) + INVEST;
    for later in LATER {
        let groups = merge(pieces.clone(), most, later);
        if cost(&groups) <= budget {
            return groups;
        }
    }
    least
}

/// `pieces` (sorted, disjoint) joined into at most `most` groups, each kept as an old run
/// or written anew from the new memory, the pages between its pieces included. Groups
/// are joined where that costs least: now, the pages between them plus each old run that
/// joining turns into pages to write (a run being written anyway costs nothing more);
/// later (weighted by `later`, in halves), the pages a join adds to a hot group, which
/// the next snapshot will likely write over and copy again. So a snapshot that laid a
/// few new pages over a layout already at `most` runs joins its new pages with each
/// other and with small old runs near them, rather than copying large old runs again,
/// and keeps the runs it writes again and again small.
fn merge(pieces: Vec<Piece>, most: usize, later: u64) -> Vec<Piece> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = pieces.len();
    if n <= most {
        return pieces;
    }
    const NONE: usize = usize::MAX;
    let mut groups: Vec<Option<Piece>> = pieces.into_iter().map(Some).collect();
    let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| if i == 0 { NONE } else { i - 1 }).collect();
    let mut stamp = vec![0u32; n];
    let size = |g: &Piece| u64::from(g.pages.end - g.pages.start);
    let own = |g: &Piece| if g.old.is_some() { size(g) } else { 0 };
    let cost = |groups: &[Option<Piece>], i: usize, j: usize| -> Option<(u64, u64)> {
        let (a, b) = (groups[i].as_ref()?, groups[j].as_ref()?);
        let gap = u64::from(b.pages.start - a.pages.end);
        let now = gap + own(a) + own(b);
        let added = if a.hot || b.hot { gap + if a.hot { 0 } else { size(a) } + if b.hot { 0 } else { size(b) } } else { 0 };
        Some((2 * now + later * added, gap))
    };
    let mut heap = BinaryHeap::with_capacity(n);
    for i in 0..n - 1 {
        if let Some((c, gap)) = cost(&groups, i, i + 1) {
            heap.push(Reverse((c, gap, i, 0u32)));
        }
    }
    let mut count = n;
    while count > most {
        let Some(Reverse((_, _, i, st))) = heap.pop() else { break };
        let j = next[i];
        if groups[i].is_none() || st != stamp[i] || j == NONE {
            continue;
        }
        let Some(right) = groups[j].take() else { continue };
        if let Some(left) = groups[i].as_mut() {
            left.pages.end = right.pages.end;
            left.old = None;
            left.hot |= right.hot;
        }
        next[i] = next[j];
        if next[j] != NONE {
            prev[next[j]] = i;
        }
        count -= 1;
        stamp[i] += 1;
        if next[i] != NONE
            && let Some((c, gap)) = cost(&groups, i, next[i])
        {
            heap.push(Reverse((c, gap, i, stamp[i])));
        }
        let p = prev[i];
        if p != NONE {
            stamp[p] += 1;
            if let Some((c, gap)) = cost(&groups, p, i) {
                heap.push(Reverse((c, gap, p, stamp[p])));
            }
        }
    }
    groups.into_iter().flatten().collect()
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
    // The pages as slices of the memory they are read from, written with one
    // vectored write per 1,024: one copy, into the file, not two.
    let pages: Vec<std::borrow::Cow<'a, [u8]>> = runs.iter().flat_map(|r| r.clone()).map(memory).collect();
    let slices: Vec<&[u8]> = pages.iter().map(|p| &**p).collect();
    file.write_all_vectored_at(&slices, 0)?;
    for r in runs {
        out.push(Run { start: r.start, len: r.end - r.start, file: file.clone(), at });
        at += r.end - r.start;
    }
    file.seal();
    Ok(out)
}

/// Writes the non-zero pages among the first `pages` (as `page` gives them) to `file`
/// at their own offsets, a stretch of at most 1,024 neighbours per vectored write, so
/// nothing is copied twice; returns how many.
pub(crate) fn write_nonzero<'a>(file: &PageFile, pages: u32, page: &impl Fn(u32) -> std::borrow::Cow<'a, [u8]>) -> std::io::Result<u64> {
    let mut written = 0;
    let mut stretch: Vec<std::borrow::Cow<'a, [u8]>> = Vec::new();
    let mut start = 0;
    for n in 0..=pages {
        let p = (n < pages).then(|| page(n)).filter(|p| p.iter().any(|&b| b != 0));
        let full = stretch.len() == 1024;
        if (p.is_none() || full) && !stretch.is_empty() {
            let slices: Vec<&[u8]> = stretch.iter().map(|p| &**p).collect();
            file.write_all_vectored_at(&slices, u64::from(start) * PAGE as u64)?;
            stretch.clear();
        }
        if let Some(p) = p {
            if stretch.is_empty() {
                start = n;
            }
            stretch.push(p);
            written += 1;
        }
    }
    Ok(written)
}

/// Pages of a layout's memory read from its files ([`Layout::reader`]): each
/// [`Reader::page`] reads the stretch from that page to the end of the pages the caller
/// wants next, within the piece it lies in (a run, the base, or the zeros past it), at
/// most [`Reader::STRETCH`] pages, and serves the pages after it from there.
pub(crate) struct Reader<'a> {
    layout: &'a Layout,
    buf: Vec<u8>,
    /// The pages `buf` holds.
    at: Range<u32>,
}

impl Reader<'_> {
    /// The most pages read at once (256 KiB).
    const STRETCH: u32 = 64;

    /// Page `n` of the layout's memory (zeros past its end); the caller wants the pages
    /// up to `until` next (read along, if in the same piece).
    pub(crate) fn page(&mut self, n: u32, until: u32) -> std::io::Result<&[u8]> {
        use std::os::unix::fs::FileExt;
        if !self.at.contains(&n) {
            let layout = self.layout;
            let page = PAGE as u64;
            let end = layout.pages();
            let i = layout.runs.partition_point(|r| r.end() <= n);
            let (file, offset, stop): (Option<&File>, u64, u32) = match layout.runs.get(i).filter(|r| r.start <= n) {
                Some(r) => (Some(&**r.file.file()), u64::from(r.at + (n - r.start)) * page, r.end()),
                None => {
                    let next = layout.runs.get(i).map_or(u32::MAX, |r| r.start);
                    let base_end = (layout.base_len / page) as u32;
                    if n < base_end { (Some(&*layout.base), u64::from(n) * page, next.min(base_end)) } else { (None, 0, next.min(end.max(n + 1))) }
                }
            };
            let len = stop.min(until).min(n.saturating_add(Self::STRETCH)).max(n + 1) - n;
            self.buf.clear();
            self.buf.resize(len as usize * PAGE, 0);
            if let Some(f) = file {
                f.read_exact_at(&mut self.buf, offset)?;
            }
            self.at = n..n + len;
        }
        let k = (n - self.at.start) as usize * PAGE;
        Ok(&self.buf[k..k + PAGE])
    }
}

/// A layout mapped read-only in this process: the base file, zeros, the runs.
#[derive(Debug)]
pub(crate) struct View {
    ptr: *mut u8,
    len: usize,
    /// Its mappings, counted with the guests' over layers (mappings.rs).
    _held: Option<crate::mappings::Held>,
}

// SAFETY: a read-only mapping, never written and unmapped only on drop.
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl View {
    fn new(layout: &Layout) -> std::io::Result<View> {
        let len = usize::try_from(layout.len).map_err(std::io::Error::other)?;
        if len == 0 {
            return Ok(View { ptr: std::ptr::NonNull::dangling().as_ptr(), len: 0, _held: None });
        }
        let fail = || std::io::Error::last_os_error();
        // SAFETY: a new private anonymous mapping, nothing else at that address.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(fail());
        }
        let view = View { ptr: ptr.cast(), len, _held: Some(crate::mappings::Held::take(layout.mappings())) };
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

/// Which pages of a guest's memory were written since a point: its session's last
/// snapshot. The kernel's write-protect-on-scan (userfaultfd's asynchronous
/// write-protect, Linux 6.7+, and `PAGEMAP_SCAN`'s `PM_SCAN_WP_MATCHING`): each scan
/// names the pages written since the last one (or since the memory was mapped, for the
/// first) and write-protects them again in the same walk; a write to a protected page
/// takes one minor fault, which the kernel resolves itself (no thread of ours serves
/// it). So a later snapshot compares the pages its turns wrote, not every page the
/// session ever wrote.
///
/// **Invariant:** a tracker is dropped (unregistered: every page writable and
/// unprotected again) before the memory it watches is reset or given back, since the
/// pool's reset finds the pages to copy back by the same "written" bit
/// (third_party/README.md). Anything it cannot vouch for (the memory moved, a mapping
/// not registered, a failed call) is `None`, and the caller drops it.
#[derive(Debug)]
pub(crate) struct Tracker {
    #[cfg(target_os = "linux")]
    inner: scan::Tracker,
}

impl Tracker {
    /// A tracker over `memory`, not yet scanned: its first [`Tracker::scan`] names
    /// every page written since the memory was mapped. `None` where the kernel has no
    /// asynchronous write-protect, or userfaultfd is refused (seccomp, a sysctl).
    pub(crate) fn new(memory: &[u8]) -> Option<Tracker> {
        #[cfg(target_os = "linux")]
        {
            scan::Tracker::new(memory).map(|inner| Tracker { inner })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = memory;
            None
        }
    }

    /// Write-protects every page of `memory` (the first scan's, or one after the memory
    /// grew, protected only the pages it named), so the next scan reads page tables
    /// only: called after a scan, before anything writes the memory again (the session
    /// thread, once it has answered the snapshot). Skipped, the next scan asks whose
    /// each page is, as the first did.
    pub(crate) fn protect_all(&mut self, memory: &[u8]) {
        #[cfg(target_os = "linux")]
        self.inner.protect_all(memory);
        #[cfg(not(target_os = "linux"))]
        let _ = memory;
    }

    /// The pages (ranges of page numbers, growing) of `memory` written since the last
    /// scan, as [`written`] reports them; each is write-protected again. `memory` is the
    /// one the tracker was made over, perhaps grown.
    pub(crate) fn scan(&mut self, memory: &[u8]) -> Option<Vec<Range<u32>>> {
        #[cfg(target_os = "linux")]
        {
            self.inner.scan(memory)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = memory;
            None
        }
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
        walk(memory, &*pagemap()?, 0, 0, true)
    }

    /// `PM_SCAN_WP_MATCHING`: write-protect the pages reported.
    const WP_MATCHING: u64 = 1 << 0;
    /// `PM_SCAN_CHECK_WPASYNC`: fail (`EPERM`) on any mapping not registered for
    /// asynchronous write-protect.
    const CHECK_WPASYNC: u64 = 1 << 1;
    /// `PAGE_IS_WRITTEN`: not write-protected.
    const WRITTEN: u64 = 1 << 1;

    /// The pages of `memory` present or swapped, in every category of `mask` (`WRITTEN`)
    /// and, `own`, its own (neither a file's nor the zero page), walked with `flags`
    /// (`WP_MATCHING`: each write-protected as it is reported). Without `own` the kernel
    /// reads page tables only; asking whose a page is reads each present page's own
    /// record too, which costs most of a walk.
    fn walk(memory: &[u8], file: &std::fs::File, flags: u64, mask: u64, own: bool) -> Option<Vec<Range<u32>>> {
        let page = super::PAGE as u64;
        let base = memory.as_ptr() as u64;
        if !base.is_multiple_of(page) || !(memory.len() as u64).is_multiple_of(page) {
            return None;
        }
        let end = base + memory.len() as u64;
        let mut regions = vec![Region::default(); 4096];
        let mut out: Vec<Range<u32>> = Vec::new();
        let mut at = base;
        while at < end {
            let mut arg = Arg {
                size: std::mem::size_of::<Arg>() as u64,
                flags,
                start: at,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                max_pages: 0,
                // Neither a file page nor the zero page (`own`), and present or
                // swapped out (and, protecting, written since the last protecting scan).
                category_inverted: if own { FILE | PFNZERO } else { 0 },
                category_mask: if own { FILE | PFNZERO | mask } else { mask },
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

    /// The pages [`written`] reports that are not write-protected: what the pool's
    /// reset copies back (wasmtime's scan asks for the same categories).
    #[cfg(test)]
    pub(super) fn unprotected(memory: &[u8]) -> Option<Vec<Range<u32>>> {
        walk(memory, &*pagemap()?, 0, WRITTEN, true)
    }

    /// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
    const UFFDIO_API: libc::Ioctl = 0xC018_AA3Fu32 as libc::Ioctl;
    /// `_IOWR(0xAA, 0x00, struct uffdio_register)`.
    const UFFDIO_REGISTER: libc::Ioctl = 0xC020_AA00u32 as libc::Ioctl;
    /// `_IOR(0xAA, 0x01, struct uffdio_range)`.
    const UFFDIO_UNREGISTER: libc::Ioctl = 0x8010_AA01u32 as libc::Ioctl;
    /// `_IOWR(0xAA, 0x06, struct uffdio_writeprotect)`.
    const UFFDIO_WRITEPROTECT: libc::Ioctl = 0xC018_AA06u32 as libc::Ioctl;
    const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
    const UFFD_API: u64 = 0xAA;
    /// `UFFD_USER_MODE_ONLY`: what a process without privileges may open
    /// (`vm.unprivileged_userfaultfd` 0); faults are resolved in the kernel anyway.
    const USER_MODE_ONLY: libc::c_int = 1;
    const FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
    const FEATURE_WP_ASYNC: u64 = 1 << 15;
    const REGISTER_MODE_WP: u64 = 1 << 1;

    #[repr(C)]
    struct Api {
        api: u64,
        features: u64,
        ioctls: u64,
    }

    #[repr(C)]
    struct Register {
        start: u64,
        len: u64,
        mode: u64,
        ioctls: u64,
    }

    #[derive(Debug)]
    pub(super) struct Tracker {
        uffd: std::os::fd::OwnedFd,
        /// The memory's start and the bytes registered from it.
        base: u64,
        registered: u64,
        /// The bytes from `base` in which every page was write-protected after the scan
        /// that last named its written pages (the pages only read, and those never
        /// touched, through the uffd-wp markers `FEATURE_WP_UNPOPULATED` leaves in empty
        /// entries): there a page not write-protected was written since that scan.
        protected: u64,
        /// The process's fork count when made: a forked child's copy never touches the
        /// registration (the descriptor's memory is its parent's).
        generation: u64,
    }

    impl Tracker {
        pub(super) fn new(memory: &[u8]) -> Option<Tracker> {
            let page = super::PAGE as u64;
            let base = memory.as_ptr() as u64;
            let len = memory.len() as u64;
            if len == 0 || !base.is_multiple_of(page) || !len.is_multiple_of(page) {
                return None;
            }
            // SAFETY: the syscall takes flags only and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | USER_MODE_ONLY) };
            let fd = libc::c_int::try_from(fd).ok().filter(|&fd| fd >= 0)?;
            // SAFETY: a descriptor the kernel just returned, owned by nothing else.
            let uffd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let mut api = Api { api: UFFD_API, features: FEATURE_WP_ASYNC | FEATURE_WP_UNPOPULATED, ioctls: 0 };
            // SAFETY: `api` is the 24-byte `struct uffdio_api` the call reads and writes.
            if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_API, &mut api as *mut Api) } != 0 {
                return None;
            }
            let mut tracker = Tracker { uffd, base, registered: 0, protected: 0, generation: wasi_python_sched::forks::generation() };
            tracker.register(len)?;
            Some(tracker)
        }

        /// Registers the memory up to `len` bytes for asynchronous write-protect (what
        /// is past the registered part: the memory grew).
        fn register(&mut self, len: u64) -> Option<()> {
            if len <= self.registered {
                return Some(());
            }
            let mut r = Register { start: self.base + self.registered, len: len - self.registered, mode: REGISTER_MODE_WP, ioctls: 0 };
            // SAFETY: `r` is the 32-byte `struct uffdio_register`; the range is the
            // guest's memory, which this process maps.
            if unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_REGISTER, &mut r as *mut Register) } != 0 {
                return None;
            }
            self.registered = len;
            Some(())
        }

        /// The pages written since the last scan (the first: since the memory was mapped),
        /// each write-protected again. Where every page was protected after the last
        /// scan, a page not protected now was written since, whoever's it is, and the
        /// walk reads page tables only; else (the first scan, a memory that grew) it
        /// names the memory's own written pages, as [`written`] does, and
        /// [`Tracker::protect_all`] then protects every page, so the next scan can read
        /// page tables only.
        pub(super) fn scan(&mut self, memory: &[u8]) -> Option<Vec<Range<u32>>> {
            if memory.as_ptr() as u64 != self.base || self.generation != wasi_python_sched::forks::generation() {
                return None;
            }
            let len = memory.len() as u64;
            self.register(len)?;
            let all_protected = self.protected >= len;
            let out = walk(memory, &*pagemap()?, WP_MATCHING | CHECK_WPASYNC, WRITTEN, !all_protected)?;
            // Until `protect_all`, the protection is the pages named only.
            self.protected = self.protected.min(len);
            Some(out)
        }

        /// Write-protects every page not protected since the last scan (none after
        /// one that read page tables only), so the next scan reads page tables only.
        /// Only while nothing wrote the memory since that scan.
        pub(super) fn protect_all(&mut self, memory: &[u8]) {
            let len = memory.len() as u64;
            if memory.as_ptr() as u64 != self.base || self.generation != wasi_python_sched::forks::generation() || self.protected >= len || len > self.registered {
                return;
            }
            // A failure leaves `protected` as it was: the next scan asks whose each
            // page is again.
            let mut wp = [self.base, len, WRITEPROTECT_MODE_WP];
            // SAFETY: `wp` is the 24-byte `struct uffdio_writeprotect` the call reads;
            // the range is registered.
            if unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_WRITEPROTECT, wp.as_mut_ptr()) } == 0 {
                self.protected = len;
            }
        }

        /// Whether every page is write-protected since the last scan (so the next one
        /// reads page tables only).
        #[cfg(test)]
        pub(super) fn protects_all(&self, memory: &[u8]) -> bool {
            self.protected >= memory.len() as u64
        }
    }

    impl Drop for Tracker {
        /// Unregisters the memory, which clears every page's write-protection (the
        /// kernel's `userfaultfd_clear_vma`): done here rather than left to the
        /// descriptor's release, which a forked child holding it would delay.
        fn drop(&mut self) {
            if self.registered == 0 || self.generation != wasi_python_sched::forks::generation() {
                return;
            }
            let mut r = [self.base, self.registered];
            // SAFETY: `r` is the 16-byte `struct uffdio_range` the call reads.
            unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_UNREGISTER, r.as_mut_ptr()) };
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// `pages` pages mapped read-write (the first `accessible`; the rest `PROT_NONE`,
    /// as a pool slot's room to grow), private: anonymous, or of `file`.
    struct Mapping {
        ptr: *mut u8,
        len: usize,
    }

    impl Mapping {
        fn new(pages: usize, accessible: usize, file: Option<&File>) -> Mapping {
            let len = pages * PAGE;
            let (flags, fd) = match file {
                Some(f) => (libc::MAP_PRIVATE, f.as_raw_fd()),
                None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
            };
            // SAFETY: a new mapping at an address of the kernel's choosing.
            let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_NONE, flags, fd, 0) };
            assert_ne!(ptr, libc::MAP_FAILED);
            let m = Mapping { ptr: ptr.cast(), len };
            m.grow(accessible);
            m
        }
        fn grow(&self, accessible: usize) {
            // SAFETY: within the mapping made above.
            assert_eq!(unsafe { libc::mprotect(self.ptr.cast(), accessible * PAGE, libc::PROT_READ | libc::PROT_WRITE) }, 0);
        }
        fn memory(&self, pages: usize) -> &[u8] {
            // SAFETY: mapped (and made accessible by the caller) for `pages` pages.
            unsafe { std::slice::from_raw_parts(self.ptr, pages * PAGE) }
        }
        fn write(&self, page: usize, byte: u8) {
            // SAFETY: within the accessible part (the callers' pages).
            unsafe { self.ptr.add(page * PAGE + 7).write_volatile(byte) };
        }
        fn read(&self, page: usize) -> u8 {
            // SAFETY: as above.
            unsafe { self.ptr.add(page * PAGE + 7).read_volatile() }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }

    fn pages(ranges: Option<Vec<Range<u32>>>) -> Vec<u32> {
        ranges.expect("the scan answers").into_iter().flatten().collect()
    }

    /// Each scan names the pages written since the one before (the first: since the
    /// memory was mapped), whoever wrote them (this thread, or the kernel on its
    /// behalf, as a `read` into guest memory does); and once the tracker is dropped,
    /// every page ever written is unprotected again, as the pool's reset needs to find
    /// them.
    #[test]
    fn a_tracker_names_the_pages_written_since_its_last_scan() {
        let m = Mapping::new(64, 64, None);
        m.write(1, 1);
        m.write(5, 1);
        let _ = m.read(9); // read only: the zero page, never named
        let mut t = Tracker::new(m.memory(64)).expect("this kernel has asynchronous write-protect (Linux 6.7+)");
        assert_eq!(pages(t.scan(m.memory(64))), [1, 5]);
        assert!(!t.inner.protects_all(m.memory(64)));
        t.protect_all(m.memory(64));
        // From here on the scans read page tables only: every page is protected, those
        // never touched too, so a page only read (the zero page) is never named.
        assert!(t.inner.protects_all(m.memory(64)));
        let _ = (m.read(11), m.read(12), m.read(63));
        assert_eq!(pages(t.scan(m.memory(64))), Vec::<u32>::new(), "nothing written since");
        m.write(5, 2);
        m.write(9, 2);
        m.write(10, 2);
        assert_eq!(pages(t.scan(m.memory(64))), [5, 9, 10]);
        // The kernel writing into the memory (a read from a pipe) is a write too.
        let mut fds = [0; 2];
        // SAFETY: a new pipe; the write and read stay within the buffers given.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            assert_eq!(libc::write(fds[1], b"abcdef".as_ptr().cast(), 6), 6);
            // A page never written, and one write-protected by the last scan.
            assert_eq!(libc::read(fds[0], m.ptr.add(20 * PAGE).cast(), 3), 3);
            assert_eq!(libc::read(fds[0], m.ptr.add(9 * PAGE).cast(), 3), 3);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(pages(t.scan(m.memory(64))), [9, 20]);
        // Write-protected pages are not what the pool's reset copies back...
        assert_eq!(pages(scan::unprotected(m.memory(64))), Vec::<u32>::new());
        drop(t);
        // ...until the tracker goes: then each written page is named again.
        assert_eq!(pages(scan::unprotected(m.memory(64))), [1, 5, 9, 10, 20]);
        assert_eq!((m.read(5), m.read(9), m.read(20)), (2, 2, 0));
    }

    /// A tracker whose scan was not followed by `protect_all` still names exactly the
    /// pages written since: each scan asks whose each page is, as the first did.
    #[test]
    fn a_tracker_left_unprotected_after_a_scan_names_the_same_pages() {
        let m = Mapping::new(64, 64, None);
        m.write(1, 1);
        let mut t = Tracker::new(m.memory(64)).unwrap();
        assert_eq!(pages(t.scan(m.memory(64))), [1]);
        let _ = (m.read(11), m.read(12));
        m.write(5, 2);
        assert_eq!(pages(t.scan(m.memory(64))), [5]);
        t.protect_all(m.memory(64));
        m.write(12, 4);
        assert_eq!(pages(t.scan(m.memory(64))), [12]);
    }

    /// Over a private mapping of a file (a snapshot's layers): pages only read are the
    /// file's and never named; a page written is, once per scan after its write.
    #[test]
    fn a_tracker_over_a_file_names_written_pages_only() {
        let file = PageFile::new(32 * PAGE as u64).unwrap();
        file.write_at(&[3; 32 * PAGE], 0).unwrap();
        let m = Mapping::new(32, 32, Some(file.file()));
        let mut t = Tracker::new(m.memory(32)).unwrap();
        assert_eq!(pages(t.scan(m.memory(32))), Vec::<u32>::new());
        t.protect_all(m.memory(32));
        assert!(t.inner.protects_all(m.memory(32)));
        assert_eq!((m.read(2), m.read(3), m.read(20)), (3, 3, 3));
        m.write(3, 4);
        assert_eq!(pages(t.scan(m.memory(32))), [3]);
        m.write(3, 5);
        m.write(31, 5);
        let _ = m.read(21);
        assert_eq!(pages(t.scan(m.memory(32))), [3, 31]);
        drop(t);
        assert_eq!(pages(scan::unprotected(m.memory(32))), [3, 31]);
        assert_eq!(m.read(3), 5);
    }

    /// A small deterministic generator (xorshift), for the layouts below.
    /// A sealed base file of `pages` pages of 0xEE, a layout of `len` pages over it (zeros
    /// past it), and the memory that layout holds; the file is kept alive by the caller.
    fn over_filled(pages: u32, len: u32) -> (PageFile, Layout, Vec<u8>) {
        let base = PageFile::new(u64::from(pages) * PAGE as u64).unwrap();
        base.write_at(&vec![0xEE; pages as usize * PAGE], 0).unwrap();
        base.seal();
        let mut memory = vec![0; len as usize * PAGE];
        memory[..pages as usize * PAGE].fill(0xEE);
        let layout = Layout::over(base.file().clone(), u64::from(pages) * PAGE as u64, u64::from(len) * PAGE as u64);
        (base, layout, memory)
    }

    fn rng(seed: u64) -> impl FnMut(u32) -> u32 {
        let mut x = seed | 1;
        move |below| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(below)) as u32
        }
    }

    /// Pages laid over pages, thirty times, some scattered and some in blocks: each
    /// layout's memory is exactly the memory it was laid from, it never holds more
    /// than `MAX_RUNS` runs, and an overlay of a few pages over a full layout writes
    /// few pages (joining small runs near them rather than copying large ones again).
    #[test]
    fn overlays_hold_exactly_the_memory_within_the_runs_bound() {
        const N: u32 = 4096;
        let (_base, mut layout, mut memory) = over_filled(N, N);
        let mut next = rng(0x5eed);
        for step in 1..=30u32 {
            let mut pages: Vec<u32> = Vec::new();
            let scattered = if step == 1 { 600 } else { next(40) };
            for _ in 0..scattered {
                pages.push(next(N));
            }
            if step % 5 == 0 {
                let at = next(N - 64);
                pages.extend(at..at + 1 + next(63));
            }
            pages.sort_unstable();
            pages.dedup();
            for &n in &pages {
                let at = n as usize * PAGE;
                memory[at..at + PAGE].fill(step as u8);
            }
            let before: std::collections::HashSet<*const PageFile> = layout.runs.iter().map(|r| Arc::as_ptr(&r.file)).collect();
            let new = layout.overlay(&pages, u64::from(N) * PAGE as u64, MAX_RUNS, |n| std::borrow::Cow::Borrowed(&memory[n as usize * PAGE..(n as usize + 1) * PAGE])).unwrap();
            assert!(new.runs.len() <= MAX_RUNS, "step {step}: {} runs", new.runs.len());
            assert!(new.view().unwrap().bytes() == memory.as_slice(), "step {step}: the layout's memory differs");
            let written: u32 = new.runs.iter().filter(|r| !before.contains(&Arc::as_ptr(&r.file))).map(|r| r.len).sum();
            if step > 1 && step % 5 != 0 {
                // A few new pages never rewrite most of the layout (scattered over it at
                // random, as here, they cost about a sixth of it; a CPython heap's
                // writes cluster, and cost less).
                assert!(written * 3 < layout.run_pages() as u32, "step {step}: {written} pages written for {} new ones over {}", pages.len(), layout.run_pages());
            }
            layout = new;
        }
    }

    /// A first layout at `FIRST_RUNS`, then a turn's few scattered pages over it: with
    /// room up to `MAX_RUNS` they are written alone, as runs of their own; held to
    /// `FIRST_RUNS` they split old runs that must be joined again, copied along.
    #[test]
    fn a_later_layout_lays_a_turns_pages_in_runs_of_their_own() {
        const N: u32 = 16_384;
        let len = u64::from(N) * PAGE as u64;
        let (_base, layout, mut memory) = over_filled(N, N);
        let mut next = rng(0x7e11);
        let mut write = |memory: &mut Vec<u8>, count: u32, mark: u8| {
            let mut pages: Vec<u32> = (0..count).map(|_| next(N)).collect();
            pages.sort_unstable();
            pages.dedup();
            for &n in &pages {
                memory[n as usize * PAGE..(n as usize + 1) * PAGE].fill(mark);
            }
            pages
        };
        let page = |memory: &Vec<u8>, n: u32| memory[n as usize * PAGE..(n as usize + 1) * PAGE].to_vec();
        let first_pages = write(&mut memory, 800, 1);
        let first = layout.overlay(&first_pages, len, FIRST_RUNS, |n| std::borrow::Cow::Owned(page(&memory, n))).unwrap();
        assert_eq!(first.runs.len(), FIRST_RUNS);
        let turn = write(&mut memory, 30, 2);
        let written = |l: &Layout| -> u32 {
            let old: std::collections::HashSet<*const PageFile> = first.runs.iter().map(|r| Arc::as_ptr(&r.file)).collect();
            l.runs.iter().filter(|r| !old.contains(&Arc::as_ptr(&r.file))).map(|r| r.len).sum()
        };
        let roomy = first.overlay(&turn, len, MAX_RUNS, |n| std::borrow::Cow::Owned(page(&memory, n))).unwrap();
        let tight = first.overlay(&turn, len, FIRST_RUNS, |n| std::borrow::Cow::Owned(page(&memory, n))).unwrap();
        for l in [&roomy, &tight] {
            assert!(l.view().unwrap().bytes() == memory.as_slice(), "the layout's memory differs");
        }
        assert!(roomy.runs.len() <= MAX_RUNS && tight.runs.len() <= FIRST_RUNS);
        assert!(written(&roomy) <= turn.len() as u32 + 2 * SMALL_GAP * turn.len() as u32, "{} pages written for {}", written(&roomy), turn.len());
        assert!(written(&tight) > 3 * written(&roomy), "held to FIRST_RUNS: {} pages, with room: {}", written(&tight), written(&roomy));
    }

    /// A layout of many runs over a base, part of it zeros and past the base's end, read
    /// from its files, and flattened: one file, one mapping, the same bytes.
    #[test]
    fn a_layout_read_from_its_files_or_flattened_holds_the_same_memory() {
        const N: u32 = 2048;
        let (_base, layout, mut memory) = over_filled(N / 2, N);
        let len = u64::from(N) * PAGE as u64;
        let mut next = rng(0xf1a7);
        let mut pages: Vec<u32> = (0..400).map(|_| next(N)).collect();
        pages.sort_unstable();
        pages.dedup();
        for &n in &pages {
            let at = n as usize * PAGE;
            memory[at..at + PAGE].fill(n as u8 | 1);
        }
        let layered = layout.overlay(&pages, len, MAX_RUNS, |n| std::borrow::Cow::Borrowed(&memory[n as usize * PAGE..(n as usize + 1) * PAGE])).unwrap();
        assert!(layered.mappings() > 100, "{} mappings", layered.mappings());
        // Read from its files, a page at a time, in order and out of it: the same bytes.
        let mut reader = layered.reader();
        let mut order: Vec<u32> = (0..N).collect();
        order.extend((0..N).rev().step_by(7));
        for n in order {
            let at = n as usize * PAGE;
            assert!(reader.page(n, n + 1 + n % 90).unwrap() == &memory[at..at + PAGE], "page {n} read from the files differs");
        }
        assert!(reader.page(N + 5, N + 9).unwrap().iter().all(|&b| b == 0), "past the end: zeros");
        let flat = layered.flattened().unwrap();
        assert_eq!(flat.mappings(), 1);
        assert_eq!(flat.len, len);
        assert!(flat.view().unwrap().bytes() == memory.as_slice(), "the flattened memory differs");
    }

    /// Turn after turn writing the same pages (as CPython's reference counts and
    /// interpreter state do) over a layout at `MAX_RUNS`: the first snapshots may copy
    /// more to keep those pages' runs small (at most `INVEST` pages more than the least),
    /// and then each copies far less than joining by the least copied now, which kept
    /// copying the large runs that hold them again.
    #[test]
    fn pages_written_turn_after_turn_get_small_runs_of_their_own() {
        const N: u32 = 20_000;
        let (_base, mut layout, mut memory) = over_filled(N, N);
        let len = u64::from(N) * PAGE as u64;
        let mut next = rng(0xc0ffee);
        // The session's first snapshot: 800 pages scattered over the heap.
        let mut first: Vec<u32> = (0..800).map(|_| 4000 + next(12_000)).collect();
        // The pages every turn writes: 90 of them, in 40 places among the first's.
        let mut hot: Vec<u32> = Vec::new();
        for _ in 0..40 {
            let at = first[next(first.len() as u32) as usize];
            hot.extend(at..at + 1 + next(3));
        }
        first.extend(&hot);
        let mut written = Vec::new();
        for step in 0..20u32 {
            let mut pages = if step == 0 { first.clone() } else { hot.clone() };
            // And a few others each turn.
            pages.extend((0..5).map(|_| 4000 + next(12_000)));
            pages.sort_unstable();
            pages.dedup();
            for &n in &pages {
                let at = n as usize * PAGE;
                memory[at..at + PAGE].fill(step as u8 + 1);
            }
            let before: std::collections::HashSet<*const PageFile> = layout.runs.iter().map(|r| Arc::as_ptr(&r.file)).collect();
            let new = layout.overlay(&pages, len, MAX_RUNS, |n| std::borrow::Cow::Borrowed(&memory[n as usize * PAGE..(n as usize + 1) * PAGE])).unwrap();
            assert!(new.runs.len() <= MAX_RUNS, "step {step}: {} runs", new.runs.len());
            assert!(new.view().unwrap().bytes() == memory.as_slice(), "step {step}: the layout's memory differs");
            written.push(new.runs.iter().filter(|r| !before.contains(&Arc::as_ptr(&r.file))).map(|r| r.len).sum::<u32>());
            layout = new;
        }
        // About 80 new pages a turn, each of the 5 scattered ones splitting a large old
        // run: 450-800 pages written a turn; joining by the least copied now wrote
        // 1,200-1,700 here.
        let new_pages = hot.len() as u32 + 5;
        let later = &written[5..];
        let mean = later.iter().sum::<u32>() / later.len() as u32;
        assert!(mean <= 10 * new_pages, "{mean} pages written a turn for about {new_pages} new ones ({written:?})");
    }

    /// A memory that grew after the tracker was made (a pool slot's `PROT_NONE` room
    /// made accessible): pages written in the new part are named too.
    #[test]
    fn a_tracker_follows_a_memory_that_grew() {
        let m = Mapping::new(64, 16, None);
        let mut t = Tracker::new(m.memory(16)).unwrap();
        m.write(2, 1);
        assert_eq!(pages(t.scan(m.memory(16))), [2]);
        t.protect_all(m.memory(16));
        m.grow(48);
        assert!(!t.inner.protects_all(m.memory(48)), "the new part is not protected yet");
        m.write(30, 1);
        m.write(2, 2);
        let _ = m.read(31); // the zero page, in the part not yet protected
        assert_eq!(pages(t.scan(m.memory(48))), [2, 30]);
        t.protect_all(m.memory(48));
        assert!(t.inner.protects_all(m.memory(48)));
        m.write(40, 1);
        let _ = m.read(41);
        assert_eq!(pages(t.scan(m.memory(48))), [40]);
        drop(t);
        assert_eq!(pages(scan::unprotected(m.memory(48))), [2, 30, 40]);
    }
}
