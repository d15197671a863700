//! The preview 1 calls on a mount's descriptors. Each function takes the call's own
//! arguments and answers `None` when the descriptor is not a mount's (the caller in
//! files.rs then hands the call to wasmtime-wasi), else the call's errno.
//!
//! Every pointer and length is the guest's: each is checked against its memory before
//! use, and a bad one is EFAULT.

use std::sync::Arc;

use parking_lot::Mutex;
use wasmtime::{AsContextMut, Caller};

use super::dirent::{self, Entry};
use super::path::{self, Resolved};
use super::{Content, Errno, FileKind, MountTable, Node, Open, Route, Stat, now_ns};
use crate::files::{MAX_CREATED_ENTRIES, with_bytes};
use crate::host::HostState;
use crate::stop::StopState;

type R = Option<wasmtime::Result<i32>>;

const EFAULT: i32 = 21;
const EBADF: i32 = 8;
const EINVAL: i32 = 28;
const EMFILE: i32 = 33;

// WASI preview 1 constants.
const O_CREAT: i32 = 1;
const O_DIRECTORY: i32 = 2;
const O_EXCL: i32 = 4;
const O_TRUNC: i32 = 8;
const FDFLAG_APPEND: i32 = 1;
const RIGHT_FD_READ: i64 = 1 << 1;
const RIGHT_FD_WRITE: i64 = 1 << 6;
const FILETYPE_DIR: u8 = 3;
const FILETYPE_FILE: u8 = 4;
/// The rights a file descriptor reports: fd_datasync, fd_read, fd_seek,
/// fd_fdstat_set_flags, fd_sync, fd_tell, fd_write, fd_advise, fd_allocate,
/// fd_filestat_get, fd_filestat_set_size, fd_filestat_set_times, poll_fd_readwrite.
const FILE_RIGHTS: u64 = (1 << 0) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 21) | (1 << 22) | (1 << 23) | (1 << 27);
/// A folder's rights: everything but reading, writing and seeking bytes.
const DIR_RIGHTS: u64 = ((1 << 30) - 1) & !((1 << 1) | (1 << 2) | (1 << 6) | (1 << 5));

fn ok() -> R {
    Some(Ok(0))
}

fn err(e: Errno) -> R {
    Some(Ok(e.wasi()))
}

fn raw(e: i32) -> R {
    Some(Ok(e))
}

/// Runs a mount's answer to a call; if a provider call in it gave up because the run was
/// cancelled or out of time, the guest stops at its next epoch check.
pub(crate) fn settle(caller: &mut Caller<'_, HostState>, call: impl FnOnce(&mut Caller<'_, HostState>) -> R) -> R {
    let r = call(caller);
    if r.is_some()
        && let Some(t) = caller.data_mut().mounts.as_deref_mut()
        && std::mem::take(&mut t.stopped)
    {
        caller.as_context_mut().set_epoch_deadline(0);
    }
    r
}

/// Whether this run has mounts at all (the common case is one branch).
fn has_mounts(caller: &Caller<'_, HostState>) -> bool {
    caller.data().mounts.is_some()
}

fn route(caller: &Caller<'_, HostState>, fd: i32) -> Route {
    caller.data().mounts.as_ref().map_or(Route::Wasi, |t| t.route(fd as u32))
}

/// The table and the run's stop state, borrowed together.
fn parts<'a>(caller: &'a mut Caller<'_, HostState>) -> (&'a mut MountTable, &'a StopState, &'a mut crate::files::FileState) {
    let state = caller.data_mut();
    (state.mounts.as_deref_mut().expect("checked by the caller"), &state.stop, &mut state.files)
}

fn write_guest(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> bool {
    let Some(memory) = caller.data().memory else { return false };
    let data = memory.data_mut(caller);
    let start = ptr as u32 as usize;
    match start.checked_add(bytes.len()).and_then(|end| data.get_mut(start..end)) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

fn write_u32(caller: &mut Caller<'_, HostState>, ptr: i32, v: u32) -> bool {
    write_guest(caller, ptr, &v.to_le_bytes())
}

fn write_u64(caller: &mut Caller<'_, HostState>, ptr: i32, v: u64) -> bool {
    write_guest(caller, ptr, &v.to_le_bytes())
}

/// The (pointer, length) pairs of an iovec array; `None` when it is not in memory.
fn iovecs(caller: &Caller<'_, HostState>, iovs: i32, n: i32) -> Option<Vec<(u32, u32)>> {
    let n = n as u32 as usize;
    if n > 1024 {
        return None;
    }
    let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("four bytes"));
    with_bytes(caller, iovs, (n * 8) as i32, |raw| raw.chunks_exact(8).map(|c| (word(&c[0..4]), word(&c[4..8]))).collect())
}

/// A stable inode number for a path in a mount (never 0).
fn ino(m: usize, path: &str) -> u64 {
    // FNV-1a: stable across runs and processes, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (m as u64);
    for b in path.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

fn filestat(m: usize, path: &str, st: Stat) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&(0x4d00 + m as u64).to_le_bytes());
    b[8..16].copy_from_slice(&ino(m, path).to_le_bytes());
    b[16] = match st.kind {
        FileKind::Dir => FILETYPE_DIR,
        FileKind::File => FILETYPE_FILE,
    };
    b[24..32].copy_from_slice(&1u64.to_le_bytes());
    b[32..40].copy_from_slice(&st.size.to_le_bytes());
    for at in [40, 48, 56] {
        b[at..at + 8].copy_from_slice(&st.mtime_ns.to_le_bytes());
    }
    b
}

/// The stat of an open file: its staged size.
fn node_stat(node: &Arc<Mutex<Node>>) -> Stat {
    let n = node.lock();
    Stat { kind: FileKind::File, size: n.content.bytes().len() as u64, mtime_ns: n.mtime_ns }
}

/// The mount and folder a `path_*` call's descriptor stands for.
fn dir_of(caller: &Caller<'_, HostState>, fd: i32) -> Option<Result<(usize, String), Errno>> {
    let t = caller.data().mounts.as_ref()?;
    match t.route(fd as u32) {
        Route::Wasi => None,
        Route::Root(m) => Some(Ok((m, "/".to_owned()))),
        Route::Ours => Some(match t.fds.get(&(fd as u32)) {
            Some(Open::Dir { mount, path, .. }) => Ok((*mount, path.clone())),
            Some(Open::File { .. }) => Err(Errno::Notdir),
            None => Err(Errno::Badf),
        }),
    }
}

/// Resolves a `path_*` call's path under its folder descriptor.
fn resolve_at(caller: &Caller<'_, HostState>, fd: i32, path: i32, len: i32) -> Option<Result<(usize, Resolved), i32>> {
    let base = dir_of(caller, fd)?;
    Some((|| {
        let (m, base) = base.map_err(Errno::wasi)?;
        let r = with_bytes(caller, path, len, |rel| path::resolve(&base, rel)).ok_or(EFAULT)?;
        let r = r.map_err(Errno::wasi)?;
        Ok((m, r))
    })())
}

/// The stat of `path` in mount `m`: an open file's staged one, else the provider's.
fn stat_of(t: &mut MountTable, m: usize, p: &str, stop: &StopState) -> Result<Stat, Errno> {
    if let Some(node) = t.nodes.get(&(m, p.to_owned())) {
        return Ok(node_stat(node));
    }
    t.stat(m, p, stop)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
pub(crate) fn path_open(
    caller: &mut Caller<'_, HostState>,
    fd: i32,
    path: i32,
    path_len: i32,
    oflags: i32,
    rights_base: i64,
    fdflags: i32,
    fd_out: i32,
) -> R {
    if !has_mounts(caller) {
        return None;
    }
    let (m, Resolved { path: p, dir_only }) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    let want_dir = oflags & O_DIRECTORY != 0 || dir_only;
    let read = rights_base & RIGHT_FD_READ != 0;
    let write = rights_base & RIGHT_FD_WRITE != 0;
    let (creat, excl, trunc) = (oflags & O_CREAT != 0, oflags & O_EXCL != 0, oflags & O_TRUNC != 0);
    let (t, stop, files) = parts(caller);
    if files.open.len() + t.fds.len() >= files.max_open {
        return raw(EMFILE);
    }
    let writable = t.mounts[m].mount.writable;
    if (write || creat || trunc) && !writable {
        return err(Errno::Rofs);
    }
    let open = match stat_of(t, m, &p, stop) {
        Ok(st) if st.kind == FileKind::Dir => {
            if creat && excl {
                return err(Errno::Exist);
            }
            if write {
                return err(Errno::Isdir);
            }
            Open::Dir { mount: m, path: p, listing: None }
        }
        Ok(_) => {
            if want_dir {
                return err(Errno::Notdir);
            }
            if creat && excl {
                return err(Errno::Exist);
            }
            let key = (m, p.clone());
            let node = match t.nodes.get(&key) {
                Some(n) => n.clone(),
                None => {
                    let content = if trunc && write {
                        Content::Staged(Vec::new())
                    } else {
                        let q = p.clone();
                        match t.invoke(m, "read", &p, stop, move |f| f.read(&q)) {
                            Ok(b) => Content::Clean(b),
                            Err(e) => return err(e),
                        }
                    };
                    let n = Arc::new(Mutex::new(Node { content, dirty: false, opens: 0, mtime_ns: now_ns() }));
                    t.nodes.insert(key, n.clone());
                    n
                }
            };
            {
                let mut n = node.lock();
                n.opens += 1;
                if trunc && write {
                    n.content = Content::Staged(Vec::new());
                    n.dirty = true;
                    n.mtime_ns = now_ns();
                }
            }
            Open::File { mount: m, path: p, node, pos: 0, read, write, append: fdflags & FDFLAG_APPEND != 0 }
        }
        Err(Errno::Noent) if creat && !want_dir => {
            let Some(parent) = path::parent(&p) else { return err(Errno::Isdir) };
            match stat_of(t, m, parent, stop) {
                Ok(st) if st.kind == FileKind::Dir => {}
                Ok(_) => return err(Errno::Notdir),
                Err(e) => return err(e),
            }
            if files.created >= MAX_CREATED_ENTRIES {
                return err(Errno::Nospc);
            }
            files.created += 1;
            let node = Arc::new(Mutex::new(Node {
                content: Content::Staged(Vec::new()),
                dirty: true,
                opens: 1,
                mtime_ns: now_ns(),
            }));
            t.nodes.insert((m, p.clone()), node.clone());
            Open::File { mount: m, path: p, node, pos: 0, read, write, append: fdflags & FDFLAG_APPEND != 0 }
        }
        Err(e) => return err(e),
    };
    let new_fd = t.insert(open);
    if !write_u32(caller, fd_out, new_fd) {
        close_ours(caller, new_fd);
        return raw(EFAULT);
    }
    ok()
}

/// Closes one of our descriptors: the last close of a changed file hands it to its
/// provider. The descriptor is freed whatever the outcome.
fn close_ours(caller: &mut Caller<'_, HostState>, fd: u32) -> i32 {
    let (t, stop, _) = parts(caller);
    match t.release(fd) {
        None => EBADF,
        Some(Open::Dir { .. }) => 0,
        Some(Open::File { mount, path, node, .. }) => {
            let last = {
                let mut n = node.lock();
                n.opens = n.opens.saturating_sub(1);
                n.opens == 0
            };
            if !last {
                return 0;
            }
            let r = t.flush(mount, &path, &node, stop);
            // Only if it is still this file's node (not unlinked or replaced meanwhile).
            if t.nodes.get(&(mount, path.clone())).is_some_and(|n| Arc::ptr_eq(n, &node)) {
                t.nodes.remove(&(mount, path));
            }
            r.err().map_or(0, Errno::wasi)
        }
    }
}

pub(crate) fn fd_close(caller: &mut Caller<'_, HostState>, fd: i32) -> R {
    match route(caller, fd) {
        Route::Ours => raw(close_ours(caller, fd as u32)),
        _ => None,
    }
}

/// After wasmtime-wasi closed a mount's root: the number may now go to a real file.
pub(crate) fn root_closed(caller: &mut Caller<'_, HostState>, fd: i32) {
    if let Some(t) = caller.data_mut().mounts.as_deref_mut()
        && let Route::Root(m) = t.route(fd as u32)
    {
        t.mounts[m].root_fd = None;
    }
}

/// An open file: its content, position and mode.
type FileRef = (Arc<Mutex<Node>>, u64, bool, bool, bool);

/// The file behind one of our descriptors, for reads and writes.
fn file(caller: &Caller<'_, HostState>, fd: i32) -> Result<FileRef, Errno> {
    match caller.data().mounts.as_ref().and_then(|t| t.fds.get(&(fd as u32))) {
        Some(Open::File { node, pos, read, write, append, .. }) => Ok((node.clone(), *pos, *read, *write, *append)),
        Some(Open::Dir { .. }) => Err(Errno::Isdir),
        None => Err(Errno::Badf),
    }
}

fn set_pos(caller: &mut Caller<'_, HostState>, fd: i32, to: u64) {
    if let Some(Open::File { pos, .. }) = caller.data_mut().mounts.as_deref_mut().and_then(|t| t.fds.get_mut(&(fd as u32))) {
        *pos = to;
    }
}

/// Copies the file's bytes from `at` into the iovecs; the count read.
fn read_into(caller: &mut Caller<'_, HostState>, node: &Arc<Mutex<Node>>, at: u64, iovs: &[(u32, u32)]) -> Result<usize, i32> {
    let n = node.lock();
    let bytes = n.content.bytes();
    let Some(memory) = caller.data().memory else { return Err(EFAULT) };
    let data = memory.data_mut(&mut *caller);
    let mut at = usize::try_from(at).unwrap_or(usize::MAX).min(bytes.len());
    let mut total = 0;
    for &(ptr, len) in iovs {
        let start = ptr as usize;
        let dst = start.checked_add(len as usize).and_then(|end| data.get_mut(start..end)).ok_or(EFAULT)?;
        let k = dst.len().min(bytes.len() - at);
        dst[..k].copy_from_slice(&bytes[at..at + k]);
        at += k;
        total += k;
        if at == bytes.len() {
            break;
        }
    }
    Ok(total)
}

fn read_common(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nread: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let (node, pos, read, _, _) = match file(caller, fd) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    if !read {
        return raw(EBADF);
    }
    let Some(iovs) = iovecs(caller, iovs, iovs_len) else { return raw(EFAULT) };
    let n = match read_into(caller, &node, offset.unwrap_or(pos), &iovs) {
        Ok(n) => n,
        Err(e) => return raw(e),
    };
    if offset.is_none() {
        set_pos(caller, fd, pos + n as u64);
    }
    if !write_u32(caller, nread, n as u32) {
        return raw(EFAULT);
    }
    ok()
}

pub(crate) fn fd_read(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, nread: i32) -> R {
    read_common(caller, fd, iovs, iovs_len, None, nread)
}

pub(crate) fn fd_pread(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32) -> R {
    if offset < 0 && route(caller, fd) == Route::Ours {
        return raw(EINVAL);
    }
    read_common(caller, fd, iovs, iovs_len, Some(offset as u64), nread)
}

fn write_common(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nwritten: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let (node, pos, _, write, append) = match file(caller, fd) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    if !write {
        return raw(EBADF);
    }
    let Some(iovs) = iovecs(caller, iovs, iovs_len) else { return raw(EFAULT) };
    let total: u64 = iovs.iter().map(|&(_, len)| u64::from(len)).sum();
    let max_file = caller.data().mounts.as_ref().map_or(u64::MAX, |t| t.max_file_bytes);
    let Some(memory) = caller.data().memory else { return raw(EFAULT) };
    let (end_pos, charged) = {
        let data = memory.data(&*caller);
        // The guest's buffers, in place: copied once, into the staged content.
        let mut parts = Vec::with_capacity(iovs.len());
        for &(ptr, len) in &iovs {
            let start = ptr as usize;
            match start.checked_add(len as usize).and_then(|end| data.get(start..end)) {
                Some(part) => parts.push(part),
                None => return raw(EFAULT),
            }
        }
        let files = &caller.data().files;
        let mut node = node.lock();
        let len = node.content.bytes().len() as u64;
        let at = match (offset, append) {
            (Some(o), _) => o,
            (None, true) => len,
            (None, false) => pos,
        };
        let hole = at.saturating_sub(len);
        if files.full() || files.would_exceed(hole + total) {
            return err(Errno::Nospc);
        }
        if at.saturating_add(total) > max_file {
            return err(Errno::Fbig);
        }
        let Ok(mut at) = usize::try_from(at) else { return err(Errno::Fbig) };
        let staged = node.content.staged();
        let end = at + total as usize;
        if staged.len() < end {
            staged.resize(end, 0);
        }
        for part in parts {
            staged[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        node.dirty = true;
        node.mtime_ns = now_ns();
        (end as u64, total + hole)
    };
    caller.data_mut().files.written += charged;
    if offset.is_none() {
        set_pos(caller, fd, end_pos);
    }
    if !write_u32(caller, nwritten, total as u32) {
        return raw(EFAULT);
    }
    ok()
}

pub(crate) fn fd_write(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, nwritten: i32) -> R {
    write_common(caller, fd, iovs, iovs_len, None, nwritten)
}

pub(crate) fn fd_pwrite(caller: &mut Caller<'_, HostState>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nwritten: i32) -> R {
    if offset < 0 && route(caller, fd) == Route::Ours {
        return raw(EINVAL);
    }
    write_common(caller, fd, iovs, iovs_len, Some(offset as u64), nwritten)
}

pub(crate) fn fd_seek(caller: &mut Caller<'_, HostState>, fd: i32, offset: i64, whence: i32, newoffset: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let (node, pos, ..) = match file(caller, fd) {
        Ok(f) => f,
        Err(Errno::Isdir) => return raw(EBADF),
        Err(e) => return err(e),
    };
    let len = node.lock().content.bytes().len() as i128;
    let base = match whence {
        0 => 0,
        1 => pos as i128,
        2 => len,
        _ => return raw(EINVAL),
    };
    let to = base + offset as i128;
    if !(0..=i64::MAX as i128).contains(&to) {
        return raw(EINVAL);
    }
    set_pos(caller, fd, to as u64);
    if !write_u64(caller, newoffset, to as u64) {
        return raw(EFAULT);
    }
    ok()
}

pub(crate) fn fd_tell(caller: &mut Caller<'_, HostState>, fd: i32, out: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    match file(caller, fd) {
        Ok((_, pos, ..)) => {
            if write_u64(caller, out, pos) { ok() } else { raw(EFAULT) }
        }
        Err(Errno::Isdir) => raw(EBADF),
        Err(e) => err(e),
    }
}

pub(crate) fn fd_filestat_get(caller: &mut Caller<'_, HostState>, fd: i32, buf: i32) -> R {
    let (m, p, st) = match route(caller, fd) {
        Route::Wasi => return None,
        Route::Root(m) => {
            let (t, stop, _) = parts(caller);
            let st = t.stat(m, "/", stop).unwrap_or(Stat { kind: FileKind::Dir, size: 0, mtime_ns: 0 });
            (m, "/".to_owned(), Stat { kind: FileKind::Dir, ..st })
        }
        Route::Ours => {
            let (t, stop, _) = parts(caller);
            match t.fds.get(&(fd as u32)) {
                Some(Open::File { mount, path, node, .. }) => (*mount, path.clone(), node_stat(node)),
                Some(Open::Dir { mount, path, .. }) => {
                    let (m, p) = (*mount, path.clone());
                    match t.stat(m, &p, stop) {
                        Ok(st) => (m, p, st),
                        Err(e) => return err(e),
                    }
                }
                None => return raw(EBADF),
            }
        }
    };
    if write_guest(caller, buf, &filestat(m, &p, st)) { ok() } else { raw(EFAULT) }
}

pub(crate) fn fd_fdstat_get(caller: &mut Caller<'_, HostState>, fd: i32, buf: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let mut b = [0u8; 24];
    match caller.data().mounts.as_ref().and_then(|t| t.fds.get(&(fd as u32))) {
        Some(Open::File { read, write, append, .. }) => {
            b[0] = FILETYPE_FILE;
            b[2] = if *append { FDFLAG_APPEND as u8 } else { 0 };
            let mut rights = FILE_RIGHTS;
            if *read {
                rights |= RIGHT_FD_READ as u64;
            }
            if *write {
                rights |= RIGHT_FD_WRITE as u64;
            }
            b[8..16].copy_from_slice(&rights.to_le_bytes());
        }
        Some(Open::Dir { .. }) => {
            b[0] = FILETYPE_DIR;
            b[8..16].copy_from_slice(&DIR_RIGHTS.to_le_bytes());
            b[16..24].copy_from_slice(&(DIR_RIGHTS | FILE_RIGHTS | RIGHT_FD_READ as u64 | RIGHT_FD_WRITE as u64).to_le_bytes());
        }
        None => return raw(EBADF),
    }
    if write_guest(caller, buf, &b) { ok() } else { raw(EFAULT) }
}

pub(crate) fn fd_fdstat_set_flags(caller: &mut Caller<'_, HostState>, fd: i32, flags: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    match caller.data_mut().mounts.as_deref_mut().and_then(|t| t.fds.get_mut(&(fd as u32))) {
        Some(Open::File { append, .. }) => {
            *append = flags & FDFLAG_APPEND != 0;
            ok()
        }
        Some(Open::Dir { .. }) => ok(),
        None => raw(EBADF),
    }
}

pub(crate) fn fd_filestat_set_size(caller: &mut Caller<'_, HostState>, fd: i32, size: i64) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let (node, _, _, write, _) = match file(caller, fd) {
        Ok(f) => f,
        Err(Errno::Isdir) => return raw(EBADF),
        Err(e) => return err(e),
    };
    if !write {
        return raw(EINVAL);
    }
    let Ok(size) = usize::try_from(size) else { return raw(EINVAL) };
    if caller.data().mounts.as_ref().is_some_and(|t| size as u64 > t.max_file_bytes) {
        return err(Errno::Fbig);
    }
    let growth = {
        let mut n = node.lock();
        let len = n.content.bytes().len();
        let growth = size.saturating_sub(len) as u64;
        if growth > 0 && caller.data().files.would_exceed(growth) {
            return err(Errno::Nospc);
        }
        n.content.staged().resize(size, 0);
        n.dirty = true;
        n.mtime_ns = now_ns();
        growth
    };
    caller.data_mut().files.written += growth;
    ok()
}

/// Times cannot be set through a provider: the call succeeds and changes nothing, so
/// `shutil.copy2` and `os.utime` work.
pub(crate) fn fd_filestat_set_times(caller: &mut Caller<'_, HostState>, fd: i32) -> R {
    match route(caller, fd) {
        Route::Wasi => None,
        Route::Root(_) => ok(),
        Route::Ours => {
            if caller.data().mounts.as_ref().is_some_and(|t| t.fds.contains_key(&(fd as u32))) { ok() } else { raw(EBADF) }
        }
    }
}

pub(crate) fn fd_sync(caller: &mut Caller<'_, HostState>, fd: i32) -> R {
    if route(caller, fd) != Route::Ours {
        return None;
    }
    let (t, stop, _) = parts(caller);
    match t.fds.get(&(fd as u32)) {
        Some(Open::File { mount, path, node, .. }) => {
            let (m, p, node) = (*mount, path.clone(), node.clone());
            match t.flush(m, &p, &node, stop) {
                Ok(()) => ok(),
                Err(e) => err(e),
            }
        }
        Some(Open::Dir { .. }) => ok(),
        None => raw(EBADF),
    }
}

pub(crate) fn fd_advise(caller: &mut Caller<'_, HostState>, fd: i32) -> R {
    match route(caller, fd) {
        Route::Ours => {
            if caller.data().mounts.as_ref().is_some_and(|t| t.fds.contains_key(&(fd as u32))) { ok() } else { raw(EBADF) }
        }
        _ => None,
    }
}

pub(crate) fn fd_readdir(caller: &mut Caller<'_, HostState>, fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32) -> R {
    let (m, p, cached) = match route(caller, fd) {
        Route::Wasi => return None,
        Route::Root(m) => (m, "/".to_owned(), None),
        Route::Ours => match caller.data().mounts.as_ref().and_then(|t| t.fds.get(&(fd as u32))) {
            Some(Open::Dir { mount, path, listing }) => (*mount, path.clone(), listing.clone()),
            Some(Open::File { .. }) => return err(Errno::Notdir),
            None => return raw(EBADF),
        },
    };
    let entries = match (cookie, cached) {
        (c, Some(l)) if c != 0 => l,
        _ => {
            let (t, stop, _) = parts(caller);
            let q = p.clone();
            let listed = match t.invoke(m, "list", &p, stop, move |f| f.list(&q)) {
                Ok(l) => l,
                Err(e) => return err(e),
            };
            let child = |name: &str| if p == "/" { format!("/{name}") } else { format!("{p}/{name}") };
            let mut entries = vec![
                Entry { name: ".".into(), kind: FileKind::Dir, ino: ino(m, &p) },
                Entry { name: "..".into(), kind: FileKind::Dir, ino: ino(m, path::parent(&p).unwrap_or("/")) },
            ];
            let mut names = std::collections::HashSet::new();
            for (name, kind) in listed {
                // A provider's names are data: one that could not be a file name is dropped.
                if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
                    continue;
                }
                if names.insert(name.clone()) {
                    entries.push(Entry { ino: ino(m, &child(&name)), name, kind });
                }
            }
            // Files created and still open are not the provider's yet; they are there.
            for (mount, path) in t.nodes.keys() {
                if *mount == m && path::parent(path) == Some(p.as_str()) {
                    let name = path::name(path).to_owned();
                    if names.insert(name.clone()) {
                        entries.push(Entry { ino: ino(m, path), name, kind: FileKind::File });
                    }
                }
            }
            let entries = Arc::new(entries);
            if let Some(Open::Dir { listing, .. }) = t.fds.get_mut(&(fd as u32)) {
                *listing = Some(entries.clone());
            }
            entries
        }
    };
    let bytes = dirent::encode(&entries, cookie as u64, buf_len as u32 as usize);
    if !write_guest(caller, buf, &bytes) || !write_u32(caller, bufused, bytes.len() as u32) {
        return raw(EFAULT);
    }
    ok()
}

pub(crate) fn path_filestat_get(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32, buf: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    let (t, stop, _) = parts(caller);
    let st = match stat_of(t, m, &r.path, stop) {
        Ok(st) if r.dir_only && st.kind == FileKind::File => return err(Errno::Notdir),
        Ok(st) => st,
        Err(e) => return err(e),
    };
    if write_guest(caller, buf, &filestat(m, &r.path, st)) { ok() } else { raw(EFAULT) }
}

pub(crate) fn path_filestat_set_times(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    let (t, stop, _) = parts(caller);
    match stat_of(t, m, &r.path, stop) {
        Ok(_) => ok(),
        Err(e) => err(e),
    }
}

/// A change to a mount's folders: refused on a read-only mount, else the provider's.
fn change(
    caller: &mut Caller<'_, HostState>,
    m: usize,
    method: &'static str,
    p: &str,
    f: impl FnOnce(&dyn super::FileProvider) -> Result<(), super::FileError> + Send + 'static,
) -> R {
    let (t, stop, _) = parts(caller);
    if !t.mounts[m].mount.writable {
        return err(Errno::Rofs);
    }
    let r = t.invoke(m, method, p, stop, f);
    t.forget_cached(m);
    match r {
        Ok(()) => ok(),
        Err(e) => {
            if matches!(e, Errno::Io | Errno::Timedout) {
                t.refused_change(m, method, p, e);
            }
            err(e)
        }
    }
}

pub(crate) fn path_create_directory(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    if r.path == "/" {
        return err(Errno::Exist);
    }
    if caller.data().files.created >= MAX_CREATED_ENTRIES {
        return err(Errno::Nospc);
    }
    let p = r.path.clone();
    let out = change(caller, m, "mkdir", &r.path, move |f| f.mkdir(&p));
    if matches!(out, Some(Ok(0))) {
        caller.data_mut().files.created += 1;
    }
    out
}

pub(crate) fn path_remove_directory(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    if r.path == "/" {
        return err(Errno::Busy);
    }
    let p = r.path.clone();
    change(caller, m, "rmdir", &r.path, move |f| f.rmdir(&p))
}

pub(crate) fn path_unlink_file(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    if r.dir_only {
        return err(Errno::Notdir);
    }
    let (t, ..) = parts(caller);
    // A file created and not yet closed is not the provider's yet.
    let pending = t.nodes.get(&(m, r.path.clone())).cloned();
    let p = r.path.clone();
    let out = change(caller, m, "remove", &r.path, move |f| f.remove(&p));
    if let Some(node) = pending {
        let (t, ..) = parts(caller);
        // Its descriptors keep their bytes, as on a real filesystem; nothing is written back.
        node.lock().dirty = false;
        t.nodes.remove(&(m, r.path));
        if matches!(out, Some(Ok(e)) if e == Errno::Noent.wasi()) {
            return ok();
        }
    }
    out
}

pub(crate) fn path_rename(caller: &mut Caller<'_, HostState>, fd: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32) -> R {
    let (a, b) = (route(caller, fd), route(caller, new_fd));
    if a == Route::Wasi && b == Route::Wasi {
        return None;
    }
    if a == Route::Wasi || b == Route::Wasi {
        return err(Errno::Xdev);
    }
    let (m, from) = match resolve_at(caller, fd, old, old_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    let (m2, to) = match resolve_at(caller, new_fd, new, new_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    if m != m2 {
        return err(Errno::Xdev);
    }
    if from.path == "/" || to.path == "/" {
        return err(Errno::Busy);
    }
    // What the guest wrote to `from` and has not closed goes first.
    let (t, stop, _) = parts(caller);
    if let Some(node) = t.nodes.get(&(m, from.path.clone())).cloned()
        && let Err(e) = t.flush(m, &from.path, &node, stop)
    {
        return err(e);
    }
    let (f, g) = (from.path.clone(), to.path.clone());
    let out = change(caller, m, "rename", &from.path, move |p| p.rename(&f, &g));
    if matches!(out, Some(Ok(0))) {
        let (t, ..) = parts(caller);
        if let Some(node) = t.nodes.remove(&(m, from.path.clone())) {
            t.nodes.insert((m, to.path.clone()), node);
        }
        for open in t.fds.values_mut() {
            if let Open::File { mount, path, .. } | Open::Dir { mount, path, .. } = open
                && *mount == m
                && *path == from.path
            {
                *path = to.path.clone();
            }
        }
    }
    out
}

/// Links, symlinks and renumbering have no meaning in a provider's tree.
pub(crate) fn path_link(caller: &mut Caller<'_, HostState>, old_fd: i32, new_fd: i32) -> R {
    let (a, b) = (route(caller, old_fd), route(caller, new_fd));
    match (a, b) {
        (Route::Wasi, Route::Wasi) => None,
        (Route::Wasi, _) | (_, Route::Wasi) => err(Errno::Xdev),
        _ => err(Errno::Notsup),
    }
}

pub(crate) fn path_symlink(caller: &mut Caller<'_, HostState>, fd: i32) -> R {
    match route(caller, fd) {
        Route::Wasi => None,
        _ => err(Errno::Notsup),
    }
}

pub(crate) fn fd_renumber(caller: &mut Caller<'_, HostState>, from: i32, to: i32) -> R {
    match (route(caller, from), route(caller, to)) {
        (Route::Wasi, Route::Wasi) => None,
        _ => err(Errno::Notsup),
    }
}

pub(crate) fn path_readlink(caller: &mut Caller<'_, HostState>, fd: i32, path: i32, path_len: i32, _buf: i32, _buf_len: i32, _used: i32) -> R {
    let (m, r) = match resolve_at(caller, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return raw(e),
    };
    // Nothing in a mount is a link.
    let (t, stop, _) = parts(caller);
    match stat_of(t, m, &r.path, stop) {
        Ok(_) => raw(EINVAL),
        Err(e) => err(e),
    }
}

