//! Mounts: guest folders whose files the embedder's code serves ([`FileProvider`]).
//!
//! How a mount reaches the guest (docs/files.md has the user's view):
//! - Each mount is a preopen of an empty host folder at its guest path (run.rs), so
//!   wasmtime-wasi owns its descriptor number and answers `fd_prestat_*`, and wasi-libc
//!   sends every path under the guest path to it (longest prefix wins).
//! - The preview 1 calls that take a descriptor or a folder descriptor are shadowed
//!   (files.rs); each first asks calls.rs, which routes by [`MountTable::route`]: a
//!   mount's root or one of ours is answered there instead of by wasmtime-wasi. Files and folders opened under a mount get our own numbers, from
//!   [`FD_BASE`] up, which wasmtime-wasi never hands out.
//! - A file's content is read from the provider once, at open, and staged here: reads,
//!   writes, seeks and truncations work on the staged bytes, and the whole content goes
//!   back through `write` when the last descriptor of a changed file closes, on
//!   `fsync`, and at the run's end whatever its ending.
//! - Provider calls run on a thread of their own (started by the runtime's pool of call
//!   threads), bounded by the mount's timeout and the run's deadline and cancel, except for providers that say they are `inline`
//!   (the built-in [`MemoryFiles`]). Each run may make `max_file_calls` of them.

pub(crate) mod calls;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

pub use wasi_python_files::{Change, Errno, FileError, FileFault, FileKind, FileProvider, FileRecord, MemoryFiles, RECORD_LIMIT, Stat};
use wasi_python_files::DirEntry;

use crate::door::{Abandonment, Bound, Spawn, Unanswered};
use crate::CallContext;
use crate::launch::CallThreadPool;

/// The first descriptor number of a file or folder opened under a mount. wasmtime-wasi
/// numbers its own from 3 up and the guest may hold at most `max_open_files`, so the
/// two ranges never meet.
pub(crate) const FD_BASE: u32 = 1 << 30;
/// The default of `max_file_calls`: provider calls a run may make.
pub const DEFAULT_MAX_FILE_CALLS: u64 = 10_000;
/// The default timeout of one provider call.
pub const DEFAULT_FILE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after the run's deadline or cancel the write-back at its end may go on, for
/// all files together: the run's end comes at most this long after either.
pub const WRITE_BACK_GRACE: Duration = Duration::from_millis(500);
/// Provider calls that timed out but still run, across the process; past it, a call
/// that would need a thread fails with EIO at once.
const MAX_ABANDONED: usize = 8;
/// Process-wide by nature, not launch state: a cap on the embedder's stuck threads.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// Abandoned provider calls count in [`ABANDONED`], across the process.
struct FileCalls;

impl Abandonment for FileCalls {
    fn abandon(&self) {
        ABANDONED.fetch_add(1, Ordering::AcqRel);
    }
    fn finished(&self) {
        ABANDONED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A guest folder served by a provider.
#[derive(Clone)]
pub struct Mount {
    pub provider: Arc<dyn FileProvider>,
    /// Absolute and normalised: `/data`, `/work/in`.
    pub guest_path: String,
    /// Whether the guest may change it (the provider's write half is used).
    pub writable: bool,
    /// The longest one provider call may take (default 30 s); the guest then gets ETIMEDOUT.
    pub timeout: Duration,
}

impl Mount {
    pub fn new(provider: Arc<dyn FileProvider>, guest_path: impl Into<String>, writable: bool) -> Mount {
        Mount { provider, guest_path: guest_path.into(), writable, timeout: DEFAULT_FILE_TIMEOUT }
    }
    pub fn timeout(mut self, timeout: Duration) -> Mount {
        self.timeout = timeout;
        self
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("guest_path", &self.guest_path)
            .field("writable", &self.writable)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A file's content while the guest has it open: shared by all its descriptors.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) content: Content,
    /// Changed since it was read or last handed to `write`.
    pub(crate) dirty: bool,
    pub(crate) opens: usize,
    pub(crate) mtime_ns: u64,
    /// Removed, or replaced by a rename, while open: its descriptors keep their bytes, as
    /// on POSIX, but nothing of it is written back any more.
    pub(crate) unlinked: bool,
}

#[derive(Debug)]
pub(crate) enum Content {
    /// As the provider gave it (no copy).
    Clean(Bytes),
    /// Changed by the guest.
    Staged(Vec<u8>),
}

impl Content {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Content::Clean(b) => b,
            Content::Staged(v) => v,
        }
    }
    /// The content to change, copied out of the provider's bytes on the first change.
    pub(crate) fn staged(&mut self) -> &mut Vec<u8> {
        if let Content::Clean(b) = self {
            *self = Content::Staged(b.to_vec());
        }
        match self {
            Content::Staged(v) => v,
            Content::Clean(_) => unreachable!("made staged above"),
        }
    }
}

/// A descriptor the guest opened under a mount.
#[derive(Debug)]
pub(crate) enum Open {
    Dir {
        mount: usize,
        path: String,
        /// The listing a `fd_readdir` from cookie 0 took, for the later cookies.
        listing: Option<Arc<Vec<DirEntry>>>,
    },
    File {
        mount: usize,
        path: String,
        node: Arc<Mutex<Node>>,
        pos: u64,
        read: bool,
        write: bool,
        append: bool,
    },
}

/// Where a descriptor leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Not a mount's: wasmtime-wasi answers.
    Wasi,
    /// The root of mount `.0` (its placeholder preopen).
    Root(usize),
    /// One of ours (≥ [`FD_BASE`]).
    Ours,
}

#[derive(Debug)]
pub(crate) struct Mounted {
    pub(crate) mount: Mount,
    /// The placeholder preopen's number, until the guest closes it.
    pub(crate) root_fd: Option<u32>,
}

/// A run's mounts and what the guest holds open in them.
#[derive(Debug)]
pub(crate) struct MountTable {
    pub(crate) mounts: Vec<Mounted>,
    pub(crate) fds: HashMap<u32, Open>,
    free: Vec<u32>,
    next: u32,
    /// Open files' content by (mount, path), so two descriptors of a file see each other's writes.
    pub(crate) nodes: HashMap<(usize, String), Arc<Mutex<Node>>>,
    /// Provider `stat` answers, refusals included, until something changes in the mount.
    cache: HashMap<(usize, String), Result<Stat, Errno>>,
    max_calls: Option<u64>,
    /// The largest a staged file may grow (the run's memory limit): the staged copy is
    /// host memory, which `file_write_bytes = None` would otherwise leave unbounded.
    pub(crate) max_file_bytes: u64,
    /// A provider call gave up because the run was cancelled or out of time: the guest
    /// must stop at its next epoch check (files.rs, `settle`).
    pub(crate) stopped: bool,
    pub(crate) record: FileRecord,
    /// Starts the provider calls' threads: the runtime's (launch.rs).
    threads: Arc<CallThreadPool>,
}

impl MountTable {
    /// `roots`: each mount with its placeholder preopen's number; `threads`: the
    /// runtime's call threads, which start the provider calls' threads.
    pub(crate) fn new(mounts: Vec<(Mount, u32)>, max_calls: Option<u64>, max_file_bytes: u64, threads: Arc<CallThreadPool>) -> MountTable {
        MountTable {
            mounts: mounts.into_iter().map(|(mount, fd)| Mounted { mount, root_fd: Some(fd) }).collect(),
            fds: HashMap::new(),
            free: Vec::new(),
            next: FD_BASE,
            nodes: HashMap::new(),
            cache: HashMap::new(),
            max_calls,
            max_file_bytes,
            stopped: false,
            record: FileRecord::default(),
            threads,
        }
    }

    pub(crate) fn route(&self, fd: u32) -> Route {
        if fd >= FD_BASE {
            return Route::Ours;
        }
        match self.mounts.iter().position(|m| m.root_fd == Some(fd)) {
            Some(i) => Route::Root(i),
            None => Route::Wasi,
        }
    }

    /// The descriptors the guest holds in the mounts (files and folders).
    pub(crate) fn held(&self) -> usize {
        self.fds.len()
    }

    pub(crate) fn insert(&mut self, open: Open) -> u32 {
        let fd = self.free.pop().unwrap_or_else(|| {
            let fd = self.next;
            self.next += 1;
            fd
        });
        self.fds.insert(fd, open);
        fd
    }

    pub(crate) fn release(&mut self, fd: u32) -> Option<Open> {
        let open = self.fds.remove(&fd)?;
        self.free.push(fd);
        Some(open)
    }

    /// wasmtime-wasi closed descriptor `fd`: if it was a mount's root, the number may now
    /// go to a real file.
    pub(crate) fn root_closed(&mut self, fd: u32) {
        if let Route::Root(m) = self.route(fd) {
            self.mounts[m].root_fd = None;
        }
    }

    /// The guest path of `path` in mount `m`, for the record.
    pub(crate) fn guest_path(&self, m: usize, path: &str) -> String {
        let root = &self.mounts[m].mount.guest_path;
        if path == "/" { root.clone() } else { format!("{root}{path}") }
    }

    /// A new session turn: the embedder may have changed its providers' trees since.
    pub(crate) fn forget_all_cached(&mut self) {
        self.cache.clear();
    }

    pub(crate) fn forget_cached(&mut self, m: usize) {
        self.cache.retain(|(mount, _), _| *mount != m);
    }

    /// `stat` from the cache, else from the provider (and cached). Every answer is kept,
    /// refusals included, except those that say the provider could not answer now: EIO
    /// (also a fault, or `max_file_calls` spent), ETIMEDOUT and EAGAIN.
    pub(crate) fn stat(&mut self, m: usize, path: &str, stop: &CallContext) -> Result<Stat, Errno> {
        if let Some(r) = self.cache.get(&(m, path.to_owned())) {
            return *r;
        }
        let p = path.to_owned();
        let r = self.invoke(m, "stat", path, stop, move |f| f.stat(&p));
        if !matches!(r, Err(Errno::Io | Errno::Timedout | Errno::Again)) && self.cache.len() < 100_000 {
            self.cache.insert((m, path.to_owned()), r);
        }
        r
    }

    /// One provider call, counted, bounded and recorded.
    pub(crate) fn invoke<T: Send + 'static>(
        &mut self,
        m: usize,
        method: &'static str,
        path: &str,
        stop: &CallContext,
        f: impl FnOnce(&dyn FileProvider) -> Result<T, FileError> + Send + 'static,
    ) -> Result<T, Errno> {
        if self.max_calls.is_some_and(|cap| self.record.total >= cap) {
            self.record.refused_calls += 1;
            return Err(Errno::Io);
        }
        self.record.total += 1;
        *self.record.calls.entry(method.to_owned()).or_default() += 1;
        let mount = &self.mounts[m].mount;
        let r = if mount.provider.inline() {
            Ok(f(&*mount.provider))
        } else {
            let until = stop.end_of_call(Instant::now(), Some(mount.timeout));
            on_thread(&self.threads, mount.provider.clone(), f, until, stop)
        };
        let (errno, text) = match r {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(FileError::Errno(e))) => return Err(e),
            Ok(Err(fault)) => (Errno::Io, fault.to_string()),
            Err(Unanswered::TimedOut) => (Errno::Timedout, "timed out".to_owned()),
            Err(Unanswered::Cancelled) => {
                self.stopped = true;
                (Errno::Io, "stopped: the run's deadline or cancel".to_owned())
            }
            Err(Unanswered::NotStarted(_)) => (Errno::Io, "no thread could be started for the call".to_owned()),
            Err(_) => (Errno::Io, "the call's thread ended without an answer".to_owned()),
        };
        let path = self.guest_path(m, path);
        self.record.fault(FileFault { method: method.to_owned(), path, error: text });
        Err(errno)
    }

    /// Hands a changed file's whole content to the provider, unless it was removed while
    /// open; the outcome is recorded.
    pub(crate) fn flush(&mut self, m: usize, path: &str, node: &Arc<Mutex<Node>>, stop: &CallContext) -> Result<(), Errno> {
        let data = {
            let mut n = node.lock();
            if !n.dirty || n.unlinked {
                return Ok(());
            }
            n.dirty = false;
            match &mut n.content {
                Content::Clean(b) => b.clone(),
                Content::Staged(v) => {
                    // Hand over the bytes without a copy; keep them for further reads.
                    let b = Bytes::from(std::mem::take(v));
                    n.content = Content::Clean(b.clone());
                    b
                }
            }
        };
        let len = data.len() as u64;
        let p = path.to_owned();
        let r = self.invoke(m, "write", path, stop, move |f| f.write(&p, data));
        self.forget_cached(m);
        match r {
            Ok(()) => {
                self.record.files_written += 1;
                self.record.bytes_written += len;
                Ok(())
            }
            Err(e) => {
                node.lock().dirty = true;
                let path = self.guest_path(m, path);
                self.record.refused_write(FileFault { method: "write".into(), path, error: e.name() });
                Err(e)
            }
        }
    }

    /// A folder change (mkdir, remove, rmdir, rename) went wrong: recorded as a refused write.
    pub(crate) fn refused_change(&mut self, m: usize, method: &str, path: &str, e: Errno) {
        let path = self.guest_path(m, path);
        self.record.refused_write(FileFault { method: method.into(), path, error: e.name() });
    }

    /// At the run's end, whatever its ending: every changed file still open is handed
    /// to its provider, within one grace for all of them together: until
    /// [`WRITE_BACK_GRACE`] after the run's deadline (or after now, if the deadline has
    /// passed), or after its cancel, whichever comes first; with neither, each write has
    /// its mount's timeout. A cancel during the write-back gives up the write in flight
    /// and leaves the rest the grace. Every file not delivered is named in the record.
    pub(crate) fn flush_all(&mut self, run: &CallContext) {
        let grace = |from: Instant| from + WRITE_BACK_GRACE;
        let mut cancelled = run.cancel.is_cancelled();
        let now = Instant::now();
        let mut until = if cancelled { Some(grace(now)) } else { run.deadline.map(|d| grace(d.max(now))) };
        // Once the run is cancelled, its token would give up every write at once.
        let after_cancel = crate::CancelToken::new();
        let mut dirty: Vec<_> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.lock().dirty)
            .map(|((m, p), n)| (*m, p.clone(), n.clone()))
            .collect();
        dirty.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (m, path, node) in dirty {
            let now = Instant::now();
            if !cancelled && run.cancel.is_cancelled() {
                cancelled = true;
                until = Some(until.map_or(grace(now), |u| u.min(grace(now))));
            }
            let delivered = until.is_none_or(|u| now < u) && {
                let stop = CallContext {
                    // `invoke` stops a call DEADLINE_MARGIN before the deadline it is given.
                    deadline: until.map(|u| u + crate::DEADLINE_MARGIN),
                    cancel: if cancelled { after_cancel.clone() } else { run.cancel.clone() },
                };
                self.flush(m, &path, &node, &stop).is_ok()
            };
            if !delivered {
                let path = self.guest_path(m, &path);
                self.record.undelivered_file(path);
            }
        }
        // The guest is gone: a provider call given up here stops nothing.
        self.stopped = false;
    }
}

/// Runs `f` on a thread of its own (from `threads`), waiting until `until` or the run's
/// stop; a call still running then is abandoned (it runs on; its answer is dropped),
/// counted in [`ABANDONED`] until it ends.
fn on_thread<T: Send + 'static>(
    threads: &CallThreadPool,
    provider: Arc<dyn FileProvider>,
    f: impl FnOnce(&dyn FileProvider) -> Result<T, FileError> + Send + 'static,
    until: Option<Instant>,
    stop: &CallContext,
) -> Result<Result<T, FileError>, Unanswered> {
    if ABANDONED.load(Ordering::Acquire) >= MAX_ABANDONED {
        // Recorded as a fault, EIO to the guest; no thread is started.
        return Ok(Err(FileError::Fault("too many earlier file calls are still running".to_owned())));
    }
    let p = provider.clone();
    let stopped = || stop.check().is_some();
    let bound = Bound { until, stop: &stopped, spin: Duration::ZERO };
    bound.call(
        move || f(&*p),
        |job| threads.spawn(c"wasi-python-file", Box::new(move || provider.enter_thread(job))),
        FileCalls,
    )
}

/// Nanoseconds since the Unix epoch, now.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
