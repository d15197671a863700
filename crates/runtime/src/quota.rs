//! What a guest may take through its file calls, counted per run (or session): bytes
//! written, entries created, descriptors held; and the descriptors all guests of the
//! process hold together.
//!
//! Accounting: a successful write on a descriptor the guest opened adds the bytes it
//! reports written and the hole it leaves past the end of the file (after a seek, or at
//! a `pwrite` offset); growing a file by `ftruncate` adds the growth. A sparse file costs
//! little disk, but an embedder that copies or reads it pays for every byte. Once the
//! total reaches `file_write_bytes`, such calls fail with ENOSPC: a run overshoots its
//! quota by at most one write. Standard output and error are not files: the output
//! limit caps them.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The default of `file_write_bytes`: 256 MiB a run.
pub const DEFAULT_FILE_WRITE_BYTES: u64 = 256 << 20;
/// The default of `max_open_files`: 1,024 descriptors a run (beside the preopens and stdio).
pub const DEFAULT_MAX_OPEN_FILES: usize = 1024;
/// Files, folders and links one run may create; past it, ENOSPC. Empty files cost no
/// bytes but each takes an inode and a directory entry on the host's disk. Every open
/// with O_CREAT counts (knowing whether it creates would cost a stat each); once the count
/// is reached, such an open still passes when its file exists, so a guest that reopens
/// one log file in append mode a million times is never refused.
pub const MAX_CREATED_ENTRIES: u64 = 100_000;

/// What one store has written and holds open. Dropped with the store: its descriptors
/// are then closed, and released from the process-wide count.
#[derive(Debug)]
pub(crate) struct FileState {
    quota: Option<u64>,
    pub(crate) written: u64,
    pub(crate) created: u64,
    pub(crate) max_open: usize,
    /// The descriptors the guest opened (path_open), as numbered in the guest.
    pub(crate) open: HashSet<u32>,
    /// Those of them whose position a seek may have moved past the end of the file since
    /// their last write: their next `fd_write` first measures the hole it would leave.
    pub(crate) moved: HashSet<u32>,
}

impl FileState {
    pub(crate) fn new(quota: Option<u64>, max_open: usize) -> Self {
        FileState {
            quota,
            written: 0,
            created: 0,
            max_open,
            open: HashSet::new(),
            moved: HashSet::new(),
        }
    }

    /// Descriptors the guest opened and holds in host files.
    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Whether the guest may open one more descriptor: those it holds in host files and
    /// those it holds in mounts (`in_mounts`) are one count against `max_open_files`.
    pub(crate) fn may_open(&self, in_mounts: usize) -> bool {
        self.open.len() + in_mounts < self.max_open
    }

    /// Bytes written to files so far (what `Completed::file_bytes_written` reports).
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    pub(crate) fn full(&self) -> bool {
        self.quota.is_some_and(|q| self.written >= q)
    }

    pub(crate) fn would_exceed(&self, more: u64) -> bool {
        self.quota.is_some_and(|q| self.written.saturating_add(more) > q)
    }

    pub(crate) fn forget(&mut self, fd: u32) {
        self.moved.remove(&fd);
        if self.open.remove(&fd) {
            release(1);
        }
    }
}

impl Drop for FileState {
    fn drop(&mut self) {
        release(self.open.len());
    }
}

/// Descriptors the guests of this process hold, and the most they may: three quarters
/// of the process's soft RLIMIT_NOFILE, so the host always has a quarter for itself.
/// Process-wide by nature, not launch state: the descriptor limit is the process's.
static HELD: AtomicUsize = AtomicUsize::new(0);

fn process_cap() -> usize {
    // Process-wide, as `HELD`: the limit read once.
    static CAP: OnceLock<usize> = OnceLock::new();
    *CAP.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        let soft = usize::try_from(soft).unwrap_or(usize::MAX);
        soft - (soft / 4).max(64.min(soft))
    })
}

pub(crate) fn acquire() -> bool {
    let cap = process_cap();
    HELD.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1))
        .is_ok()
}

pub(crate) fn release(n: usize) {
    if n > 0 {
        HELD.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The descriptors all guests of this process hold now (for tests and diagnostics).
pub fn guest_descriptors_held() -> usize {
    HELD.load(Ordering::Acquire)
}

