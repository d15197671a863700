//! The file layer: the guest's WASI preview 1 file calls, registered once with an
//! accessor (`add_to_linker(linker, |s| Files { .. })`, as wasmtime-wasi's own takes
//! `|s| &mut s.wasi`), so a file call reaches [`Files`] and the guest's memory, never the
//! rest of the store.
//!
//! Each call goes first to the run's mounts (`mounts::calls`), which answer for a mount's
//! descriptors and leave every other one alone; the rest go to wasmtime-wasi's own
//! preview 1 through its ABI-level functions (`wasmtime_wasi::p1::wasi_snapshot_preview1::*`)
//! with the guest's own arguments, as wiggle's linker glue would, after the checks that
//! bound host files: bytes written, entries created, descriptors held ([`crate::quota`])
//! and symlinks that could lead out of a writable folder. So the behaviour of every call
//! that passes the checks is wasmtime-wasi's, and nothing here parses more of the guest's
//! memory than the check needs.

use wasmtime::{AsContextMut, Caller, Linker, Memory};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p1::types::{Fd, Lookupflags};
use wasmtime_wasi::p1::wasi_snapshot_preview1 as p1;
use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as _;
use wasmtime_wasi::runtime::in_tokio;
use wasi_python_files::Errno;

use crate::guest_mem::GuestMem;
use crate::mounts::{MountTable, calls};
use crate::quota::{acquire, release};
use crate::CallContext;

pub(crate) use crate::quota::FileState;
pub use crate::quota::{DEFAULT_FILE_WRITE_BYTES, DEFAULT_MAX_OPEN_FILES, MAX_CREATED_ENTRIES, guest_descriptors_held};

/// What the file calls reach of a store: the file layer.
pub(crate) struct Files<'a> {
    /// The guest's memory, once instantiated (else the instance's `memory` export).
    pub(crate) memory: Option<Memory>,
    /// wasmtime-wasi's context: host files, preopens, stdio.
    pub(crate) wasi: &'a mut WasiP1Ctx,
    /// What the guest has written, created and holds open, in host files and mounts.
    pub(crate) quota: &'a mut FileState,
    /// The run's mounts, if it has any.
    pub(crate) mounts: Option<&'a mut MountTable>,
    /// The run's deadline and cancel, which bound provider calls.
    pub(crate) stop: &'a CallContext,
    /// A preload image's build: the host files' metadata and folder order it is shown
    /// are fixed (fixed.rs); `None` for every run and session.
    pub(crate) fixed: Option<&'a mut crate::fixed::Fixed>,
}

/// How the store's state yields its file layer.
pub(crate) type Accessor<T> = for<'a> fn(&'a mut T) -> Files<'a>;

/// A call's outcome as the guest's import returns it: an errno, or a trap.
type Answer = wasmtime::Result<i32>;

impl Files<'_> {
    /// A mount's answer to a call (its errno, 0 for success), or `None` when the call is
    /// not on a mount's descriptor (or the run has no mounts).
    fn mounted(
        &mut self,
        mem: &mut GuestMem<'_>,
        call: impl FnOnce(&mut calls::Cx<'_, '_>) -> Option<Result<(), Errno>>,
    ) -> Option<i32> {
        let t = self.mounts.as_deref_mut()?;
        let mut cx = calls::Cx { t, quota: &mut *self.quota, stop: self.stop, mem };
        call(&mut cx).map(Errno::code)
    }
}

/// Runs one file call with the store's file layer and the guest's memory. A provider call
/// that gave up because the run was cancelled or out of time stops the guest at its next
/// epoch check.
fn enter<T: 'static>(
    caller: &mut Caller<'_, T>,
    get: Accessor<T>,
    call: impl FnOnce(&mut Files<'_>, &mut GuestMem<'_>) -> Answer,
) -> Answer {
    let fuel = caller.as_context_mut().hostcall_fuel();
    let memory = match get(caller.data_mut()).memory {
        Some(m) => m,
        None => match caller.get_export("memory") {
            Some(wasmtime::Extern::Memory(m)) => m,
            _ => wasmtime::bail!("missing required memory export"),
        },
    };
    let (bytes, state) = memory.data_and_store_mut(&mut *caller);
    let mut files = get(state);
    files.wasi.set_hostcall_fuel(fuel);
    let r = call(&mut files, &mut GuestMem::new(bytes));
    let stopped = files.mounts.as_deref_mut().is_some_and(|t| std::mem::take(&mut t.stopped));
    if stopped {
        caller.as_context_mut().set_epoch_deadline(0);
    }
    r
}

/// Registers the file calls, shadowing wasmtime-wasi's of the same names (the linker must
/// allow shadowing).
pub(crate) fn add_to_linker<T: 'static>(linker: &mut Linker<T>, get: Accessor<T>) -> wasmtime::Result<()> {
    const M: &str = "wasi_snapshot_preview1";
    macro_rules! shadow {
        ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
            linker.func_wrap(M, stringify!($name), move |mut caller: Caller<'_, T>, $($arg: $ty),*| -> Answer {
                enter(&mut caller, get, |f, mem| $name(f, mem, $($arg),*))
            })?;
        )*};
    }
    shadow! {
        // Calls that only mounts change.
        fd_read(fd: i32, iovs: i32, iovs_len: i32, nread: i32);
        fd_pread(fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32);
        fd_tell(fd: i32, out: i32);
        fd_filestat_get(fd: i32, buf: i32);
        fd_fdstat_get(fd: i32, buf: i32);
        fd_fdstat_set_flags(fd: i32, flags: i32);
        fd_filestat_set_times(fd: i32, atim: i64, mtim: i64, flags: i32);
        fd_readdir(fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32);
        fd_sync(fd: i32);
        fd_datasync(fd: i32);
        fd_advise(fd: i32, offset: i64, len: i64, advice: i32);
        path_filestat_get(fd: i32, flags: i32, path: i32, path_len: i32, buf: i32);
        path_filestat_set_times(fd: i32, flags: i32, path: i32, path_len: i32, atim: i64, mtim: i64, fst_flags: i32);
        path_remove_directory(fd: i32, path: i32, path_len: i32);
        path_unlink_file(fd: i32, path: i32, path_len: i32);
        path_rename(fd: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32);
        path_readlink(fd: i32, path: i32, path_len: i32, buf: i32, buf_len: i32, used: i32);
        // Calls that also bound host files.
        fd_write(fd: i32, iovs: i32, iovs_len: i32, nwritten: i32);
        fd_pwrite(fd: i32, iovs: i32, iovs_len: i32, offset: i64, nwritten: i32);
        fd_seek(fd: i32, offset: i64, whence: i32, newoffset: i32);
        fd_filestat_set_size(fd: i32, size: i64);
        path_open(fd: i32, dirflags: i32, path: i32, path_len: i32, oflags: i32, rights_base: i64, rights_inheriting: i64, fdflags: i32, fd_out: i32);
        fd_close(fd: i32);
        fd_renumber(from: i32, to: i32);
        path_symlink(old_path: i32, old_len: i32, fd: i32, new_path: i32, new_len: i32);
        path_create_directory(fd: i32, path: i32, path_len: i32);
        path_link(old_fd: i32, old_flags: i32, old_path: i32, old_len: i32, new_fd: i32, new_path: i32, new_len: i32);
    }
    Ok(())
}

const O_CREAT: i32 = 1;

/// Whether a write on `fd` is a file write the quota counts, and if so whether it is refused.
fn check_write(f: &Files<'_>, fd: i32) -> (bool, Option<i32>) {
    if !f.quota.open.contains(&(fd as u32)) {
        return (false, None);
    }
    (true, f.quota.full().then_some(Errno::Nospc.wasi()))
}

/// The size of the file behind `fd`; `None` when wasmtime-wasi cannot stat it as one.
fn file_size(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32) -> Option<u64> {
    in_tokio(f.wasi.fd_filestat_get(&mut mem.wiggle(), Fd::from(fd as u32))).ok().map(|stat| stat.size)
}

/// The hole a write at `at` (the descriptor's position when `None`) would leave past the
/// end of the file: what writing there adds beyond the bytes themselves.
fn hole(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, at: Option<u64>) -> u64 {
    let Some(size) = file_size(f, mem, fd) else { return 0 };
    let at = match at {
        Some(at) => Some(at),
        None => f.wasi.fd_tell(&mut mem.wiggle(), Fd::from(fd as u32)).ok(),
    };
    at.map_or(0, |at| at.saturating_sub(size))
}

/// Adds a write to the count: the bytes the call reports written, and the hole before them.
fn count_written(f: &mut Files<'_>, mem: &GuestMem<'_>, nwritten: i32, hole: u64) {
    if let Ok(n) = mem.read_u32(nwritten) {
        f.quota.written = f.quota.written.saturating_add(u64::from(n)).saturating_add(hole);
    }
}

fn fd_write(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, iovs: i32, iovs_len: i32, nwritten: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_write(cx, fd, iovs, iovs_len, nwritten)) {
        return Ok(r);
    }
    let (counted, refused) = check_write(f, fd);
    if let Some(e) = refused {
        return Ok(e);
    }
    let gap = if counted && f.quota.moved.contains(&(fd as u32)) { hole(f, mem, fd, None) } else { 0 };
    if gap > 0 && f.quota.would_exceed(gap) {
        return Ok(Errno::Nospc.wasi());
    }
    let r = in_tokio(p1::fd_write(f.wasi, &mut mem.wiggle(), fd, iovs, iovs_len, nwritten))?;
    if counted && r == 0 {
        count_written(f, mem, nwritten, gap);
        // Written where it stood: the position is now at or before the end of the file.
        f.quota.moved.remove(&(fd as u32));
    }
    Ok(r)
}

fn fd_pwrite(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nwritten: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_pwrite(cx, fd, iovs, iovs_len, offset, nwritten)) {
        return Ok(r);
    }
    let (counted, refused) = check_write(f, fd);
    if let Some(e) = refused {
        return Ok(e);
    }
    let gap = if counted { hole(f, mem, fd, Some(offset as u64)) } else { 0 };
    if gap > 0 && f.quota.would_exceed(gap) {
        return Ok(Errno::Nospc.wasi());
    }
    let r = in_tokio(p1::fd_pwrite(f.wasi, &mut mem.wiggle(), fd, iovs, iovs_len, offset, nwritten))?;
    if counted && r == 0 {
        count_written(f, mem, nwritten, gap);
    }
    Ok(r)
}

/// A seek that may land past the end of a file marks the descriptor, so its next write
/// measures the hole. `tell()` (0 from the current position) and seeks back from the end
/// cannot, and cost nothing.
fn fd_seek(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, offset: i64, whence: i32, newoffset: i32) -> Answer {
    const CUR: i32 = 1;
    const END: i32 = 2;
    if let Some(r) = f.mounted(mem, |cx| calls::fd_seek(cx, fd, offset, whence, newoffset)) {
        return Ok(r);
    }
    let r = in_tokio(p1::fd_seek(f.wasi, &mut mem.wiggle(), fd, offset, whence, newoffset))?;
    let may_pass_end = !((whence == CUR || whence == END) && offset <= 0);
    if r == 0 && may_pass_end && f.quota.open.contains(&(fd as u32)) {
        f.quota.moved.insert(fd as u32);
    }
    Ok(r)
}

/// Growing a file by `ftruncate` counts as writing the growth (a sparse file costs
/// little disk, but an embedder that copies it pays for every byte).
fn fd_filestat_set_size(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, size: i64) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_filestat_set_size(cx, fd, size)) {
        return Ok(r);
    }
    // Growth counts on the files the guest opened; anything else (a folder, stdio) is
    // wasmtime-wasi's to answer.
    let growth = match f.quota.open.contains(&(fd as u32)) {
        true => file_size(f, mem, fd).map_or(0, |current| (size as u64).saturating_sub(current)),
        false => 0,
    };
    if growth > 0 && f.quota.would_exceed(growth) {
        return Ok(Errno::Nospc.wasi());
    }
    let r = in_tokio(p1::fd_filestat_set_size(f.wasi, &mut mem.wiggle(), fd, size))?;
    if r == 0 {
        f.quota.written = f.quota.written.saturating_add(growth);
    }
    Ok(r)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_open(
    f: &mut Files<'_>,
    mem: &mut GuestMem<'_>,
    fd: i32,
    dirflags: i32,
    path: i32,
    path_len: i32,
    oflags: i32,
    rights_base: i64,
    rights_inheriting: i64,
    fdflags: i32,
    fd_out: i32,
) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_open(cx, fd, path, path_len, oflags, rights_base, fdflags, fd_out)) {
        return Ok(r);
    }
    if !f.quota.may_open(f.mounts.as_deref().map_or(0, MountTable::held)) {
        return Ok(Errno::Mfile.wasi());
    }
    if oflags & O_CREAT != 0 && f.quota.created >= MAX_CREATED_ENTRIES && !exists(f, mem, fd, dirflags, path, path_len) {
        return Ok(Errno::Nospc.wasi());
    }
    if !acquire() {
        return Ok(Errno::Nfile.wasi());
    }
    let r = in_tokio(p1::path_open(
        f.wasi,
        &mut mem.wiggle(),
        fd,
        dirflags,
        path,
        path_len,
        oflags,
        rights_base,
        rights_inheriting,
        fdflags,
        fd_out,
    ));
    let opened = match (&r, mem.read_u32(fd_out)) {
        (Ok(0), Ok(new_fd)) => Some(new_fd),
        _ => None,
    };
    match opened {
        Some(new_fd) => {
            if oflags & O_CREAT != 0 {
                f.quota.created += 1;
            }
            if !f.quota.open.insert(new_fd) {
                // Cannot happen (wasmtime-wasi hands out a free number); keep the count true.
                release(1);
            }
        }
        None => release(1),
    }
    r
}

/// Whether `path` (under the folder `fd`) names something already.
fn exists(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, dirflags: i32, path: i32, path_len: i32) -> bool {
    let flags = Lookupflags::from_bits_truncate(dirflags as u32);
    let path = wiggle::GuestPtr::<str>::new((path as u32, path_len as u32));
    in_tokio(f.wasi.path_filestat_get(&mut mem.wiggle(), Fd::from(fd as u32), flags, path)).is_ok()
}

fn fd_close(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_close(cx, fd)) {
        return Ok(r);
    }
    let r = in_tokio(p1::fd_close(f.wasi, &mut mem.wiggle(), fd))?;
    if r == 0 {
        f.quota.forget(fd as u32);
        if let Some(t) = f.mounts.as_deref_mut() {
            t.root_closed(fd as u32);
        }
    }
    Ok(r)
}

fn fd_renumber(f: &mut Files<'_>, mem: &mut GuestMem<'_>, from: i32, to: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_renumber(cx, from, to)) {
        return Ok(r);
    }
    let r = in_tokio(p1::fd_renumber(f.wasi, &mut mem.wiggle(), from, to))?;
    if r == 0 && from != to {
        let q = &mut *f.quota;
        // `to` was closed and `from` now goes by `to`.
        q.forget(to as u32);
        if q.open.remove(&(from as u32)) {
            q.open.insert(to as u32);
        }
        if q.moved.remove(&(from as u32)) {
            q.moved.insert(to as u32);
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

fn creation_refused(f: &Files<'_>) -> Option<i32> {
    (f.quota.created >= MAX_CREATED_ENTRIES).then_some(Errno::Nospc.wasi())
}

fn count_created(f: &mut Files<'_>, r: i32) {
    if r == 0 {
        f.quota.created += 1;
    }
}

fn path_symlink(f: &mut Files<'_>, mem: &mut GuestMem<'_>, old_path: i32, old_len: i32, fd: i32, new_path: i32, new_len: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_symlink(cx, fd)) {
        return Ok(r);
    }
    // Longer than PATH_MAX is never a valid target; refusing it first keeps this scan short.
    if old_len as u32 > 4096 {
        return Ok(Errno::Nametoolong.wasi());
    }
    match mem.bytes(old_path, old_len as u32 as usize).map(symlink_target_allowed) {
        Err(e) => return Ok(e.wasi()),
        Ok(false) => return Ok(Errno::Perm.wasi()),
        Ok(true) => {}
    }
    if let Some(e) = creation_refused(f) {
        return Ok(e);
    }
    let r = in_tokio(p1::path_symlink(f.wasi, &mut mem.wiggle(), old_path, old_len, fd, new_path, new_len))?;
    count_created(f, r);
    Ok(r)
}

fn path_create_directory(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, path: i32, path_len: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_create_directory(cx, fd, path, path_len)) {
        return Ok(r);
    }
    if let Some(e) = creation_refused(f) {
        return Ok(e);
    }
    let r = in_tokio(p1::path_create_directory(f.wasi, &mut mem.wiggle(), fd, path, path_len))?;
    count_created(f, r);
    Ok(r)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_link(
    f: &mut Files<'_>,
    mem: &mut GuestMem<'_>,
    old_fd: i32,
    old_flags: i32,
    old_path: i32,
    old_len: i32,
    new_fd: i32,
    new_path: i32,
    new_len: i32,
) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_link(cx, old_fd, new_fd)) {
        return Ok(r);
    }
    if let Some(e) = creation_refused(f) {
        return Ok(e);
    }
    let r = in_tokio(p1::path_link(f.wasi, &mut mem.wiggle(), old_fd, old_flags, old_path, old_len, new_fd, new_path, new_len))?;
    count_created(f, r);
    Ok(r)
}

// Calls that only mounts change: a mount's answer, else wasmtime-wasi's.

fn fd_read(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, iovs: i32, iovs_len: i32, nread: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_read(cx, fd, iovs, iovs_len, nread)) {
        return Ok(r);
    }
    in_tokio(p1::fd_read(f.wasi, &mut mem.wiggle(), fd, iovs, iovs_len, nread))
}

fn fd_pread(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_pread(cx, fd, iovs, iovs_len, offset, nread)) {
        return Ok(r);
    }
    in_tokio(p1::fd_pread(f.wasi, &mut mem.wiggle(), fd, iovs, iovs_len, offset, nread))
}

fn fd_tell(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, out: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_tell(cx, fd, out)) {
        return Ok(r);
    }
    p1::fd_tell(f.wasi, &mut mem.wiggle(), fd, out)
}

fn fd_filestat_get(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, buf: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_filestat_get(cx, fd, buf)) {
        return Ok(r);
    }
    let r = in_tokio(p1::fd_filestat_get(f.wasi, &mut mem.wiggle(), fd, buf));
    if let (Some(fixed), Ok(errno)) = (f.fixed.as_deref_mut(), &r) {
        fixed.filestat(mem, buf, *errno);
    }
    r
}

fn fd_fdstat_get(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, buf: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_fdstat_get(cx, fd, buf)) {
        return Ok(r);
    }
    in_tokio(p1::fd_fdstat_get(f.wasi, &mut mem.wiggle(), fd, buf))
}

fn fd_fdstat_set_flags(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, flags: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_fdstat_set_flags(cx, fd, flags)) {
        return Ok(r);
    }
    p1::fd_fdstat_set_flags(f.wasi, &mut mem.wiggle(), fd, flags)
}

fn fd_filestat_set_times(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, atim: i64, mtim: i64, flags: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_filestat_set_times(cx, fd)) {
        return Ok(r);
    }
    in_tokio(p1::fd_filestat_set_times(f.wasi, &mut mem.wiggle(), fd, atim, mtim, flags))
}

fn fd_readdir(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_readdir(cx, fd, buf, buf_len, cookie, bufused)) {
        return Ok(r);
    }
    if let Some(fixed) = f.fixed.as_deref_mut() {
        let wasi = &mut *f.wasi;
        let call = |mem: &mut GuestMem<'_>, c| in_tokio(p1::fd_readdir(wasi, &mut mem.wiggle(), fd, buf, buf_len, c, bufused));
        return fixed.readdir(mem, (buf, buf_len, cookie, bufused), call);
    }
    in_tokio(p1::fd_readdir(f.wasi, &mut mem.wiggle(), fd, buf, buf_len, cookie, bufused))
}

fn fd_sync(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_sync(cx, fd)) {
        return Ok(r);
    }
    in_tokio(p1::fd_sync(f.wasi, &mut mem.wiggle(), fd))
}

fn fd_datasync(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_sync(cx, fd)) {
        return Ok(r);
    }
    in_tokio(p1::fd_datasync(f.wasi, &mut mem.wiggle(), fd))
}

fn fd_advise(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, offset: i64, len: i64, advice: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::fd_advise(cx, fd)) {
        return Ok(r);
    }
    in_tokio(p1::fd_advise(f.wasi, &mut mem.wiggle(), fd, offset, len, advice))
}

fn path_filestat_get(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, flags: i32, path: i32, path_len: i32, buf: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_filestat_get(cx, fd, path, path_len, buf)) {
        return Ok(r);
    }
    let r = in_tokio(p1::path_filestat_get(f.wasi, &mut mem.wiggle(), fd, flags, path, path_len, buf));
    if let (Some(fixed), Ok(errno)) = (f.fixed.as_deref_mut(), &r) {
        fixed.filestat(mem, buf, *errno);
    }
    r
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_filestat_set_times(
    f: &mut Files<'_>,
    mem: &mut GuestMem<'_>,
    fd: i32,
    flags: i32,
    path: i32,
    path_len: i32,
    atim: i64,
    mtim: i64,
    fst_flags: i32,
) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_filestat_set_times(cx, fd, path, path_len)) {
        return Ok(r);
    }
    in_tokio(p1::path_filestat_set_times(f.wasi, &mut mem.wiggle(), fd, flags, path, path_len, atim, mtim, fst_flags))
}

fn path_remove_directory(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, path: i32, path_len: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_remove_directory(cx, fd, path, path_len)) {
        return Ok(r);
    }
    in_tokio(p1::path_remove_directory(f.wasi, &mut mem.wiggle(), fd, path, path_len))
}

fn path_unlink_file(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, path: i32, path_len: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_unlink_file(cx, fd, path, path_len)) {
        return Ok(r);
    }
    in_tokio(p1::path_unlink_file(f.wasi, &mut mem.wiggle(), fd, path, path_len))
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_rename(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_rename(cx, fd, old, old_len, new_fd, new, new_len)) {
        return Ok(r);
    }
    in_tokio(p1::path_rename(f.wasi, &mut mem.wiggle(), fd, old, old_len, new_fd, new, new_len))
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
fn path_readlink(f: &mut Files<'_>, mem: &mut GuestMem<'_>, fd: i32, path: i32, path_len: i32, buf: i32, buf_len: i32, used: i32) -> Answer {
    if let Some(r) = f.mounted(mem, |cx| calls::path_readlink(cx, fd, path, path_len)) {
        return Ok(r);
    }
    in_tokio(p1::path_readlink(f.wasi, &mut mem.wiggle(), fd, path, path_len, buf, buf_len, used))
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

    /// Our errno table speaks WASI preview 1's numbers: each one is wasmtime-wasi's.
    #[test]
    fn the_errno_table_matches_wasmtime_wasi() {
        use wasmtime_wasi::p1::types::Errno as W;
        let pairs = [
            (Errno::Acces, W::Acces), (Errno::Again, W::Again), (Errno::Badf, W::Badf), (Errno::Busy, W::Busy),
            (Errno::Exist, W::Exist), (Errno::Fault, W::Fault), (Errno::Fbig, W::Fbig), (Errno::Ilseq, W::Ilseq),
            (Errno::Inval, W::Inval), (Errno::Io, W::Io), (Errno::Isdir, W::Isdir), (Errno::Loop, W::Loop),
            (Errno::Mfile, W::Mfile), (Errno::Nametoolong, W::Nametoolong), (Errno::Nfile, W::Nfile),
            (Errno::Noent, W::Noent), (Errno::Nomem, W::Nomem), (Errno::Nospc, W::Nospc), (Errno::Nosys, W::Nosys),
            (Errno::Notdir, W::Notdir), (Errno::Notempty, W::Notempty), (Errno::Notsup, W::Notsup),
            (Errno::Perm, W::Perm), (Errno::Rofs, W::Rofs), (Errno::Timedout, W::Timedout), (Errno::Xdev, W::Xdev),
            (Errno::Notcapable, W::Notcapable),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours.wasi(), theirs as i32, "{ours:?}");
        }
    }
}
