//! The guest's file calls that the host bounds: bytes written, entries created, open
//! descriptors, and symlinks that could lead out of a writable folder.
//!
//! Each function here shadows wasmtime-wasi's preview 1 function of the same name,
//! checks what it must, and then calls wasmtime-wasi's own implementation through its
//! ABI-level function (`wasmtime_wasi::p1::wasi_snapshot_preview1::*`) with the guest's
//! own arguments, as wiggle's linker glue would. So the behaviour of every call that
//! passes the checks is wasmtime-wasi's, and nothing here parses more of the guest's
//! memory than the check needs.
//!
//! Accounting (see [`FileState`]): a successful `fd_write`/`fd_pwrite` on a descriptor the
//! guest opened adds the bytes the call reports written, and the hole it leaves when it
//! writes past the end of the file (after a seek, or at a `pwrite` offset); a
//! `fd_filestat_set_size` that grows a file adds the growth. A sparse file costs little
//! disk, but an embedder that copies or reads it pays for every byte. Once the run's total reaches `file_write_bytes`, such
//! calls fail with ENOSPC: a run overshoots its quota by at most one write. Standard
//! output and error are not files: they are capped by the output limit.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::{AsContextMut, Caller, Linker};
use wasmtime_wasi::p1::types::Errno;
use wasmtime_wasi::p1::wasi_snapshot_preview1 as p1;
use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as _;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::runtime::in_tokio;
use wiggle::GuestMemory;

use crate::host::HostState;
use crate::mounts::calls as mounts;

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

const O_CREAT: i32 = 1;

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
    moved: HashSet<u32>,
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

    /// Descriptors the guest opened and holds.
    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
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

    fn forget(&mut self, fd: u32) {
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
static HELD: AtomicUsize = AtomicUsize::new(0);

fn process_cap() -> usize {
    static CAP: OnceLock<usize> = OnceLock::new();
    *CAP.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        let soft = usize::try_from(soft).unwrap_or(usize::MAX);
        soft - (soft / 4).max(64.min(soft))
    })
}

fn acquire() -> bool {
    let cap = process_cap();
    HELD.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1))
        .is_ok()
}

fn release(n: usize) {
    if n > 0 {
        HELD.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The descriptors all guests of this process hold now (for tests and diagnostics).
pub fn guest_descriptors_held() -> usize {
    HELD.load(Ordering::Acquire)
}

fn errno(e: Errno) -> i32 {
    e as i32
}

/// Calls into wasmtime-wasi's preview 1 with the guest's memory, as wiggle's glue does.
fn with_wasi<R>(
    caller: &mut Caller<'_, HostState>,
    f: impl FnOnce(&mut WasiP1Ctx, &mut GuestMemory<'_>) -> R,
) -> wasmtime::Result<R> {
    let fuel = caller.as_context_mut().hostcall_fuel();
    let memory = match caller.data().memory {
        Some(m) => m,
        None => match caller.get_export("memory") {
            Some(wasmtime::Extern::Memory(m)) => m,
            _ => wasmtime::bail!("missing required memory export"),
        },
    };
    let (mem, state) = memory.data_and_store_mut(&mut *caller);
    state.wasi.set_hostcall_fuel(fuel);
    Ok(f(&mut state.wasi, &mut GuestMemory::Unshared(mem)))
}

fn read_u32(caller: &mut Caller<'_, HostState>, ptr: i32) -> Option<u32> {
    with_bytes(caller, ptr, 4, |b| u32::from_le_bytes(b.try_into().expect("four bytes")))
}

/// Applies `f` to the guest's bytes at `ptr..ptr + len`, read in place (the guest picks
/// `len`: nothing is copied); `None` when they are not all inside its memory.
pub(crate) fn with_bytes<R>(caller: &Caller<'_, HostState>, ptr: i32, len: i32, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let memory = caller.data().memory?;
    let data = memory.data(caller);
    let start = ptr as u32 as usize;
    Some(f(data.get(start..start.checked_add(len as u32 as usize)?)?))
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    const M: &str = "wasi_snapshot_preview1";
    // Calls that only mounts change (the rest also bound host files, below).
    linker.func_wrap(M, "fd_read", fd_read)?;
    linker.func_wrap(M, "fd_pread", fd_pread)?;
    linker.func_wrap(M, "fd_tell", fd_tell)?;
    linker.func_wrap(M, "fd_filestat_get", fd_filestat_get)?;
    linker.func_wrap(M, "fd_fdstat_get", fd_fdstat_get)?;
    linker.func_wrap(M, "fd_fdstat_set_flags", fd_fdstat_set_flags)?;
    linker.func_wrap(M, "fd_filestat_set_times", fd_filestat_set_times)?;
    linker.func_wrap(M, "fd_readdir", fd_readdir)?;
    linker.func_wrap(M, "fd_sync", fd_sync)?;
    linker.func_wrap(M, "fd_datasync", fd_datasync)?;
    linker.func_wrap(M, "fd_advise", fd_advise)?;
    linker.func_wrap(M, "path_filestat_get", path_filestat_get)?;
    linker.func_wrap(M, "path_filestat_set_times", path_filestat_set_times)?;
    linker.func_wrap(M, "path_remove_directory", path_remove_directory)?;
    linker.func_wrap(M, "path_unlink_file", path_unlink_file)?;
    linker.func_wrap(M, "path_rename", path_rename)?;
    linker.func_wrap(M, "path_readlink", path_readlink)?;
    linker.func_wrap(M, "fd_write", fd_write)?;
    linker.func_wrap(M, "fd_pwrite", fd_pwrite)?;
    linker.func_wrap(M, "fd_seek", fd_seek)?;
    linker.func_wrap(M, "fd_filestat_set_size", fd_filestat_set_size)?;
    linker.func_wrap(M, "path_open", path_open)?;
    linker.func_wrap(M, "fd_close", fd_close)?;
    linker.func_wrap(M, "fd_renumber", fd_renumber)?;
    linker.func_wrap(M, "path_symlink", path_symlink)?;
    linker.func_wrap(M, "path_create_directory", path_create_directory)?;
    linker.func_wrap(M, "path_link", path_link)?;
    Ok(())
}

/// Whether a write on `fd` is a file write the quota counts, and if so whether it is refused.
fn check_write(caller: &Caller<'_, HostState>, fd: i32) -> (bool, Option<i32>) {
    let files = &caller.data().files;
    if !files.open.contains(&(fd as u32)) {
        return (false, None);
    }
    (true, files.full().then_some(errno(Errno::Nospc)))
}

/// The size of the file behind `fd`; `None` when wasmtime-wasi cannot stat it as one.
fn file_size(caller: &mut Caller<'_, HostState>, fd: i32) -> wasmtime::Result<Option<u64>> {
    with_wasi(caller, |ctx, mem| {
        in_tokio(ctx.fd_filestat_get(mem, (fd as u32).into())).ok().map(|stat| stat.size)
    })
}

/// The hole a write at `at` (the descriptor's position when `None`) would leave past the
/// end of the file: what writing there adds beyond the bytes themselves.
fn hole(caller: &mut Caller<'_, HostState>, fd: i32, at: Option<u64>) -> wasmtime::Result<u64> {
    let Some(size) = file_size(caller, fd)? else { return Ok(0) };
    let at = match at {
        Some(at) => Some(at),
        None => with_wasi(caller, |ctx, mem| ctx.fd_tell(mem, (fd as u32).into()).ok())?,
    };
    Ok(at.map_or(0, |at| at.saturating_sub(size)))
}

/// Adds a write to the count: the bytes the call reports written, and the hole before them.
fn count_written(caller: &mut Caller<'_, HostState>, nwritten: i32, hole: u64) {
    if let Some(n) = read_u32(caller, nwritten) {
        let files = &mut caller.data_mut().files;
        files.written = files.written.saturating_add(u64::from(n)).saturating_add(hole);
    }
}

fn fd_write(mut caller: Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, nwritten: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_write(c, fd, iovs, iovs_len, nwritten)) {
        return r;
    }
    let (counted, refused) = check_write(&caller, fd);
    if let Some(e) = refused {
        return Ok(e);
    }
    let gap = if counted && caller.data().files.moved.contains(&(fd as u32)) {
        hole(&mut caller, fd, None)?
    } else {
        0
    };
    if gap > 0 && caller.data().files.would_exceed(gap) {
        return Ok(errno(Errno::Nospc));
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_write(ctx, mem, fd, iovs, iovs_len, nwritten)))??;
    if counted && r == 0 {
        count_written(&mut caller, nwritten, gap);
        // Written where it stood: the position is now at or before the end of the file.
        caller.data_mut().files.moved.remove(&(fd as u32));
    }
    Ok(r)
}

fn fd_pwrite(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    offset: i64,
    nwritten: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_pwrite(c, fd, iovs, iovs_len, offset, nwritten)) {
        return r;
    }
    let (counted, refused) = check_write(&caller, fd);
    if let Some(e) = refused {
        return Ok(e);
    }
    let gap = if counted { hole(&mut caller, fd, Some(offset as u64))? } else { 0 };
    if gap > 0 && caller.data().files.would_exceed(gap) {
        return Ok(errno(Errno::Nospc));
    }
    let r = with_wasi(&mut caller, |ctx, mem| {
        in_tokio(p1::fd_pwrite(ctx, mem, fd, iovs, iovs_len, offset, nwritten))
    })??;
    if counted && r == 0 {
        count_written(&mut caller, nwritten, gap);
    }
    Ok(r)
}

/// A seek that may land past the end of a file marks the descriptor, so its next write
/// measures the hole. `tell()` (0 from the current position) and seeks back from the end
/// cannot, and cost nothing.
fn fd_seek(mut caller: Caller<'_, HostState>, fd: i32, offset: i64, whence: i32, newoffset: i32) -> wasmtime::Result<i32> {
    const CUR: i32 = 1;
    const END: i32 = 2;
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_seek(c, fd, offset, whence, newoffset)) {
        return r;
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_seek(ctx, mem, fd, offset, whence, newoffset)))??;
    let may_pass_end = !((whence == CUR || whence == END) && offset <= 0);
    if r == 0 && may_pass_end && caller.data().files.open.contains(&(fd as u32)) {
        caller.data_mut().files.moved.insert(fd as u32);
    }
    Ok(r)
}

/// Growing a file by `ftruncate` counts as writing the growth (a sparse file costs
/// little disk, but an embedder that copies it pays for every byte).
fn fd_filestat_set_size(mut caller: Caller<'_, HostState>, fd: i32, size: i64) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_filestat_set_size(c, fd, size)) {
        return r;
    }
    // Growth counts on the files the guest opened; anything else (a folder, stdio) is
    // wasmtime-wasi's to answer.
    let growth = match caller.data().files.open.contains(&(fd as u32)) {
        true => file_size(&mut caller, fd)?.map_or(0, |current| (size as u64).saturating_sub(current)),
        false => 0,
    };
    if growth > 0 && caller.data().files.would_exceed(growth) {
        return Ok(errno(Errno::Nospc));
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_filestat_set_size(ctx, mem, fd, size)))??;
    if r == 0 {
        let files = &mut caller.data_mut().files;
        files.written = files.written.saturating_add(growth);
    }
    Ok(r)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_open(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    dirflags: i32,
    path: i32,
    path_len: i32,
    oflags: i32,
    rights_base: i64,
    rights_inheriting: i64,
    fdflags: i32,
    fd_out: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_open(c, fd, path, path_len, oflags, rights_base, fdflags, fd_out)) {
        return r;
    }
    {
        let files = &caller.data().files;
        if files.open.len() >= files.max_open {
            return Ok(errno(Errno::Mfile));
        }
    }
    if oflags & O_CREAT != 0
        && caller.data().files.created >= MAX_CREATED_ENTRIES
        && !exists(&mut caller, fd, dirflags, path, path_len)?
    {
        return Ok(errno(Errno::Nospc));
    }
    if !acquire() {
        return Ok(errno(Errno::Nfile));
    }
    let r = with_wasi(&mut caller, |ctx, mem| {
        in_tokio(p1::path_open(
            ctx,
            mem,
            fd,
            dirflags,
            path,
            path_len,
            oflags,
            rights_base,
            rights_inheriting,
            fdflags,
            fd_out,
        ))
    });
    let opened = match (&r, read_u32(&mut caller, fd_out)) {
        (Ok(Ok(0)), Some(new_fd)) => Some(new_fd),
        _ => None,
    };
    match opened {
        Some(new_fd) => {
            let files = &mut caller.data_mut().files;
            if oflags & O_CREAT != 0 {
                files.created += 1;
            }
            if !files.open.insert(new_fd) {
                // Cannot happen (wasmtime-wasi hands out a free number); keep the count true.
                release(1);
            }
        }
        None => release(1),
    }
    r?
}

/// Whether `path` (under the folder `fd`) names something already.
fn exists(caller: &mut Caller<'_, HostState>, fd: i32, dirflags: i32, path: i32, path_len: i32) -> wasmtime::Result<bool> {
    with_wasi(caller, |ctx, mem| {
        let flags = wasmtime_wasi::p1::types::Lookupflags::from_bits_truncate(dirflags as u32);
        let path = wiggle::GuestPtr::<str>::new((path as u32, path_len as u32));
        in_tokio(ctx.path_filestat_get(mem, wasmtime_wasi::p1::types::Fd::from(fd as u32), flags, path)).is_ok()
    })
}

fn fd_close(mut caller: Caller<'_, HostState>, fd: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_close(c, fd)) {
        return r;
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_close(ctx, mem, fd)))??;
    if r == 0 {
        caller.data_mut().files.forget(fd as u32);
        mounts::root_closed(&mut caller, fd);
    }
    Ok(r)
}

fn fd_renumber(mut caller: Caller<'_, HostState>, from: i32, to: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_renumber(c, from, to)) {
        return r;
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_renumber(ctx, mem, from, to)))??;
    if r == 0 && from != to {
        let files = &mut caller.data_mut().files;
        // `to` was closed and `from` now goes by `to`.
        files.forget(to as u32);
        if files.open.remove(&(from as u32)) {
            files.open.insert(to as u32);
        }
        if files.moved.remove(&(from as u32)) {
            files.moved.insert(to as u32);
        }
    }
    Ok(r)
}

/// Whether a symlink target stays inside the folder it is made in, whatever that
/// folder's depth: it must be relative and must not climb (`..`). A guest could
/// otherwise plant, in a writable grant, a link that the embedder later follows out.
pub(crate) fn symlink_target_allowed(target: &[u8]) -> bool {
    !target.is_empty()
        && !target.starts_with(b"/")
        && !target.contains(&0)
        && target.split(|&b| b == b'/').all(|c| c != b"..")
}

fn creation_refused(caller: &Caller<'_, HostState>) -> Option<i32> {
    (caller.data().files.created >= MAX_CREATED_ENTRIES).then_some(errno(Errno::Nospc))
}

fn count_created(caller: &mut Caller<'_, HostState>, r: i32) {
    if r == 0 {
        caller.data_mut().files.created += 1;
    }
}

fn path_symlink(
    mut caller: Caller<'_, HostState>,
    old_path: i32,
    old_len: i32,
    fd: i32,
    new_path: i32,
    new_len: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_symlink(c, fd)) {
        return r;
    }
    // Longer than PATH_MAX is never a valid target; refusing it first keeps this scan short.
    if old_len as u32 > 4096 {
        return Ok(errno(Errno::Nametoolong));
    }
    match with_bytes(&caller, old_path, old_len, symlink_target_allowed) {
        None => return Ok(errno(Errno::Fault)),
        Some(false) => return Ok(errno(Errno::Perm)),
        Some(true) => {}
    }
    if let Some(e) = creation_refused(&caller) {
        return Ok(e);
    }
    let r = with_wasi(&mut caller, |ctx, mem| {
        in_tokio(p1::path_symlink(ctx, mem, old_path, old_len, fd, new_path, new_len))
    })??;
    count_created(&mut caller, r);
    Ok(r)
}

fn path_create_directory(mut caller: Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_create_directory(c, fd, path, path_len)) {
        return r;
    }
    if let Some(e) = creation_refused(&caller) {
        return Ok(e);
    }
    let r = with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_create_directory(ctx, mem, fd, path, path_len)))??;
    count_created(&mut caller, r);
    Ok(r)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_link(
    mut caller: Caller<'_, HostState>,
    old_fd: i32,
    old_flags: i32,
    old_path: i32,
    old_len: i32,
    new_fd: i32,
    new_path: i32,
    new_len: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_link(c, old_fd, new_fd)) {
        return r;
    }
    if let Some(e) = creation_refused(&caller) {
        return Ok(e);
    }
    let r = with_wasi(&mut caller, |ctx, mem| {
        in_tokio(p1::path_link(ctx, mem, old_fd, old_flags, old_path, old_len, new_fd, new_path, new_len))
    })??;
    count_created(&mut caller, r);
    Ok(r)
}

// Calls that only mounts change: a mount's answer, else wasmtime-wasi's.

fn fd_read(mut caller: Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, nread: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_read(c, fd, iovs, iovs_len, nread)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_read(ctx, mem, fd, iovs, iovs_len, nread)))?
}

fn fd_pread(mut caller: Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_pread(c, fd, iovs, iovs_len, offset, nread)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_pread(ctx, mem, fd, iovs, iovs_len, offset, nread)))?
}

fn fd_tell(mut caller: Caller<'_, HostState>, fd: i32, out: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_tell(c, fd, out)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| p1::fd_tell(ctx, mem, fd, out))?
}

fn fd_filestat_get(mut caller: Caller<'_, HostState>, fd: i32, buf: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_filestat_get(c, fd, buf)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_filestat_get(ctx, mem, fd, buf)))?
}

fn fd_fdstat_get(mut caller: Caller<'_, HostState>, fd: i32, buf: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_fdstat_get(c, fd, buf)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_fdstat_get(ctx, mem, fd, buf)))?
}

fn fd_fdstat_set_flags(mut caller: Caller<'_, HostState>, fd: i32, flags: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_fdstat_set_flags(c, fd, flags)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| p1::fd_fdstat_set_flags(ctx, mem, fd, flags))?
}

fn fd_filestat_set_times(mut caller: Caller<'_, HostState>, fd: i32, atim: i64, mtim: i64, flags: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_filestat_set_times(c, fd)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_filestat_set_times(ctx, mem, fd, atim, mtim, flags)))?
}

fn fd_readdir(mut caller: Caller<'_, HostState>, fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_readdir(c, fd, buf, buf_len, cookie, bufused)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_readdir(ctx, mem, fd, buf, buf_len, cookie, bufused)))?
}

fn fd_sync(mut caller: Caller<'_, HostState>, fd: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_sync(c, fd)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_sync(ctx, mem, fd)))?
}

fn fd_datasync(mut caller: Caller<'_, HostState>, fd: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_sync(c, fd)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_datasync(ctx, mem, fd)))?
}

fn fd_advise(mut caller: Caller<'_, HostState>, fd: i32, offset: i64, len: i64, advice: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::fd_advise(c, fd)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::fd_advise(ctx, mem, fd, offset, len, advice)))?
}

fn path_filestat_get(mut caller: Caller<'_, HostState>, fd: i32, flags: i32, path: i32, path_len: i32, buf: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_filestat_get(c, fd, path, path_len, buf)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_filestat_get(ctx, mem, fd, flags, path, path_len, buf)))?
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_filestat_set_times(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    flags: i32,
    path: i32,
    path_len: i32,
    atim: i64,
    mtim: i64,
    fst_flags: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_filestat_set_times(c, fd, path, path_len)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| {
        in_tokio(p1::path_filestat_set_times(ctx, mem, fd, flags, path, path_len, atim, mtim, fst_flags))
    })?
}

fn path_remove_directory(mut caller: Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_remove_directory(c, fd, path, path_len)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_remove_directory(ctx, mem, fd, path, path_len)))?
}

fn path_unlink_file(mut caller: Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_unlink_file(c, fd, path, path_len)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_unlink_file(ctx, mem, fd, path, path_len)))?
}

fn path_rename(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    old: i32,
    old_len: i32,
    new_fd: i32,
    new: i32,
    new_len: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_rename(c, fd, old, old_len, new_fd, new, new_len)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_rename(ctx, mem, fd, old, old_len, new_fd, new, new_len)))?
}

fn path_readlink(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    path: i32,
    path_len: i32,
    buf: i32,
    buf_len: i32,
    used: i32,
) -> wasmtime::Result<i32> {
    if let Some(r) = mounts::settle(&mut caller, |c| mounts::path_readlink(c, fd, path, path_len, buf, buf_len, used)) {
        return r;
    }
    with_wasi(&mut caller, |ctx, mem| in_tokio(p1::path_readlink(ctx, mem, fd, path, path_len, buf, buf_len, used)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets_that_stay_inside_are_allowed() {
        for ok in [&b"a"[..], b"a/b", b"./a", b"a/./b", b"a.b", b"..a", b"a..", b"a/...b"] {
            assert!(symlink_target_allowed(ok), "{}", String::from_utf8_lossy(ok));
        }
    }

    #[test]
    fn symlink_targets_that_could_leave_are_refused() {
        for bad in [&b"/etc/passwd"[..], b"..", b"../x", b"a/../../b", b"a/..", b"", b"/", b"a\0b"] {
            assert!(!symlink_target_allowed(bad), "{}", String::from_utf8_lossy(bad));
        }
    }
}
