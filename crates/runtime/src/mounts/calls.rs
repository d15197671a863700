//! The preview 1 calls on a mount's descriptors. Each function takes the call's own
//! arguments and answers `None` when the descriptor is not a mount's (the file layer,
//! files.rs, then hands the call to wasmtime-wasi), else the call's outcome.
//!
//! A call sees only its [`Cx`]: the run's mounts, its file quota, its stop state and the
//! guest's memory. Every pointer and length is the guest's: each is checked against the
//! memory before use ([`GuestMem`]), and a bad one is EFAULT.

use std::sync::Arc;

use parking_lot::Mutex;
use wasi_python_files::{DirEntry, Resolved, encode_dirents, file_name, parent, resolve};

use super::{Content, Errno, FileError, FileKind, FileProvider, MountTable, Node, Open, Route, Stat, now_ns};
use crate::guest_mem::GuestMem;
use crate::quota::{FileState, MAX_CREATED_ENTRIES};
use crate::CallContext;

/// What a call on a mount reaches: the run's mounts, what the guest may take in files
/// (shared with host files), the run's deadline and cancel, and the guest's memory.
pub(crate) struct Cx<'a, 'm> {
    pub(crate) t: &'a mut MountTable,
    pub(crate) quota: &'a mut FileState,
    pub(crate) stop: &'a CallContext,
    pub(crate) mem: &'a mut GuestMem<'m>,
}

/// `None`: not a mount's call; else its outcome.
type Answer = Option<Result<(), Errno>>;

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

fn route(cx: &Cx<'_, '_>, fd: i32) -> Route {
    cx.t.route(fd as u32)
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
fn dir_of(cx: &Cx<'_, '_>, fd: i32) -> Option<Result<(usize, String), Errno>> {
    match cx.t.route(fd as u32) {
        Route::Wasi => None,
        Route::Root(m) => Some(Ok((m, "/".to_owned()))),
        Route::Ours => Some(match cx.t.fds.get(&(fd as u32)) {
            Some(Open::Dir { mount, path, .. }) => Ok((*mount, path.clone())),
            Some(Open::File { .. }) => Err(Errno::Notdir),
            None => Err(Errno::Badf),
        }),
    }
}

/// Resolves a `path_*` call's path under its folder descriptor.
fn resolve_at(cx: &Cx<'_, '_>, fd: i32, path: i32, len: i32) -> Option<Result<(usize, Resolved), Errno>> {
    let base = dir_of(cx, fd)?;
    Some(base.and_then(|(m, base)| Ok((m, resolve(&base, cx.mem.bytes(path, len as u32 as usize)?)?))))
}

/// The stat of `path` in mount `m`: an open file's staged one, else the provider's.
fn stat_of(t: &mut MountTable, m: usize, p: &str, stop: &CallContext) -> Result<Stat, Errno> {
    if let Some(node) = t.nodes.get(&(m, p.to_owned())) {
        return Ok(node_stat(node));
    }
    t.stat(m, p, stop)
}

#[expect(clippy::too_many_arguments, reason = "the WASI signature")]
pub(crate) fn path_open(
    cx: &mut Cx<'_, '_>,
    fd: i32,
    path: i32,
    path_len: i32,
    oflags: i32,
    rights_base: i64,
    fdflags: i32,
    fd_out: i32,
) -> Answer {
    let (m, resolved) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    Some(open_in(cx, m, resolved, oflags, rights_base, fdflags, fd_out))
}

fn open_in(cx: &mut Cx<'_, '_>, m: usize, resolved: Resolved, oflags: i32, rights_base: i64, fdflags: i32, fd_out: i32) -> Result<(), Errno> {
    let Resolved { path: p, dir_only } = resolved;
    let want_dir = oflags & O_DIRECTORY != 0 || dir_only;
    let read = rights_base & RIGHT_FD_READ != 0;
    let write = rights_base & RIGHT_FD_WRITE != 0;
    let append = fdflags & FDFLAG_APPEND != 0;
    let (creat, excl, trunc) = (oflags & O_CREAT != 0, oflags & O_EXCL != 0, oflags & O_TRUNC != 0);
    let (t, stop) = (&mut *cx.t, cx.stop);
    if !cx.quota.may_open(t.held()) {
        return Err(Errno::Mfile);
    }
    let writable = t.mounts[m].mount.writable;
    if (write || creat || trunc) && !writable {
        return Err(Errno::Rofs);
    }
    let open = match stat_of(t, m, &p, stop) {
        Ok(st) if st.kind == FileKind::Dir => {
            if creat && excl {
                return Err(Errno::Exist);
            }
            if write {
                return Err(Errno::Isdir);
            }
            Open::Dir { mount: m, path: p, listing: None }
        }
        Ok(_) => {
            if want_dir {
                return Err(Errno::Notdir);
            }
            if creat && excl {
                return Err(Errno::Exist);
            }
            let key = (m, p.clone());
            let node = match t.nodes.get(&key) {
                Some(n) => n.clone(),
                None => {
                    let content = if trunc && write {
                        Content::Staged(Vec::new())
                    } else {
                        let q = p.clone();
                        Content::Clean(t.invoke(m, "read", &p, stop, move |f| f.read(&q))?)
                    };
                    let n = Arc::new(Mutex::new(Node { content, dirty: false, opens: 0, mtime_ns: now_ns(), unlinked: false }));
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
            Open::File { mount: m, path: p, node, pos: 0, read, write, append }
        }
        Err(Errno::Noent) if creat && !want_dir => {
            let Some(up) = parent(&p) else { return Err(Errno::Isdir) };
            match stat_of(t, m, up, stop)? {
                st if st.kind == FileKind::Dir => {}
                _ => return Err(Errno::Notdir),
            }
            if cx.quota.created >= MAX_CREATED_ENTRIES {
                return Err(Errno::Nospc);
            }
            cx.quota.created += 1;
            let node = Arc::new(Mutex::new(Node {
                content: Content::Staged(Vec::new()),
                dirty: true,
                opens: 1,
                mtime_ns: now_ns(),
                unlinked: false,
            }));
            t.nodes.insert((m, p.clone()), node.clone());
            Open::File { mount: m, path: p, node, pos: 0, read, write, append }
        }
        Err(e) => return Err(e),
    };
    let new_fd = t.insert(open);
    if let Err(e) = cx.mem.write_u32(fd_out, new_fd) {
        let _ = close_ours(cx, new_fd);
        return Err(e);
    }
    Ok(())
}

/// Closes one of our descriptors: the last close of a changed file hands it to its
/// provider. The descriptor is freed whatever the outcome.
fn close_ours(cx: &mut Cx<'_, '_>, fd: u32) -> Result<(), Errno> {
    let t = &mut *cx.t;
    match t.release(fd) {
        None => Err(Errno::Badf),
        Some(Open::Dir { .. }) => Ok(()),
        Some(Open::File { mount, path, node, .. }) => {
            let last = {
                let mut n = node.lock();
                n.opens = n.opens.saturating_sub(1);
                n.opens == 0
            };
            if !last {
                return Ok(());
            }
            let r = t.flush(mount, &path, &node, cx.stop);
            // Only if it is still this file's node (not unlinked or replaced meanwhile).
            if t.nodes.get(&(mount, path.clone())).is_some_and(|n| Arc::ptr_eq(n, &node)) {
                t.nodes.remove(&(mount, path));
            }
            r
        }
    }
}

pub(crate) fn fd_close(cx: &mut Cx<'_, '_>, fd: i32) -> Answer {
    match route(cx, fd) {
        Route::Ours => Some(close_ours(cx, fd as u32)),
        _ => None,
    }
}

/// An open file: its content, position and mode.
type FileRef = (Arc<Mutex<Node>>, u64, bool, bool, bool);

/// The file behind one of our descriptors, for reads and writes.
fn file(cx: &Cx<'_, '_>, fd: i32) -> Result<FileRef, Errno> {
    match cx.t.fds.get(&(fd as u32)) {
        Some(Open::File { node, pos, read, write, append, .. }) => Ok((node.clone(), *pos, *read, *write, *append)),
        Some(Open::Dir { .. }) => Err(Errno::Isdir),
        None => Err(Errno::Badf),
    }
}

fn set_pos(cx: &mut Cx<'_, '_>, fd: i32, to: u64) {
    if let Some(Open::File { pos, .. }) = cx.t.fds.get_mut(&(fd as u32)) {
        *pos = to;
    }
}

fn read_common(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nread: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(read_ours(cx, fd, iovs, iovs_len, offset, nread))
}

fn read_ours(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nread: i32) -> Result<(), Errno> {
    let (node, pos, read, _, _) = file(cx, fd)?;
    if !read {
        return Err(Errno::Badf);
    }
    let iovs = cx.mem.iovecs(iovs, iovs_len)?;
    let n = {
        let n = node.lock();
        let bytes = n.content.bytes();
        let at = usize::try_from(offset.unwrap_or(pos)).unwrap_or(usize::MAX).min(bytes.len());
        cx.mem.scatter(&iovs, &bytes[at..])?
    };
    if offset.is_none() {
        set_pos(cx, fd, pos + n as u64);
    }
    cx.mem.write_u32(nread, n as u32)
}

pub(crate) fn fd_read(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, nread: i32) -> Answer {
    read_common(cx, fd, iovs, iovs_len, None, nread)
}

pub(crate) fn fd_pread(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32) -> Answer {
    if offset < 0 && route(cx, fd) == Route::Ours {
        return Some(Err(Errno::Inval));
    }
    read_common(cx, fd, iovs, iovs_len, Some(offset as u64), nread)
}

fn write_common(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nwritten: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(write_ours(cx, fd, iovs, iovs_len, offset, nwritten))
}

fn write_ours(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: Option<u64>, nwritten: i32) -> Result<(), Errno> {
    let (node, pos, _, write, append) = file(cx, fd)?;
    if !write {
        return Err(Errno::Badf);
    }
    let iovs = cx.mem.iovecs(iovs, iovs_len)?;
    let total: u64 = iovs.iter().map(|&(_, len)| u64::from(len)).sum();
    let max_file = cx.t.max_file_bytes;
    let (end_pos, charged) = {
        // The guest's buffers, in place: copied once, into the staged content.
        let parts = cx.mem.gather(&iovs)?;
        let mut node = node.lock();
        let len = node.content.bytes().len() as u64;
        let at = match (offset, append) {
            (Some(o), _) => o,
            (None, true) => len,
            (None, false) => pos,
        };
        let hole = at.saturating_sub(len);
        if cx.quota.full() || cx.quota.would_exceed(hole + total) {
            return Err(Errno::Nospc);
        }
        if at.saturating_add(total) > max_file {
            return Err(Errno::Fbig);
        }
        let Ok(mut at) = usize::try_from(at) else { return Err(Errno::Fbig) };
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
    cx.quota.written += charged;
    if offset.is_none() {
        set_pos(cx, fd, end_pos);
    }
    cx.mem.write_u32(nwritten, total as u32)
}

pub(crate) fn fd_write(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, nwritten: i32) -> Answer {
    write_common(cx, fd, iovs, iovs_len, None, nwritten)
}

pub(crate) fn fd_pwrite(cx: &mut Cx<'_, '_>, fd: i32, iovs: i32, iovs_len: i32, offset: i64, nwritten: i32) -> Answer {
    if offset < 0 && route(cx, fd) == Route::Ours {
        return Some(Err(Errno::Inval));
    }
    write_common(cx, fd, iovs, iovs_len, Some(offset as u64), nwritten)
}

pub(crate) fn fd_seek(cx: &mut Cx<'_, '_>, fd: i32, offset: i64, whence: i32, newoffset: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    let (node, pos, ..) = match file(cx, fd) {
        Ok(f) => f,
        Err(Errno::Isdir) => return Some(Err(Errno::Badf)),
        Err(e) => return Some(Err(e)),
    };
    let len = node.lock().content.bytes().len() as i128;
    let base = match whence {
        0 => 0,
        1 => pos as i128,
        2 => len,
        _ => return Some(Err(Errno::Inval)),
    };
    let to = base + offset as i128;
    if !(0..=i64::MAX as i128).contains(&to) {
        return Some(Err(Errno::Inval));
    }
    set_pos(cx, fd, to as u64);
    Some(cx.mem.write_u64(newoffset, to as u64))
}

pub(crate) fn fd_tell(cx: &mut Cx<'_, '_>, fd: i32, out: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(match file(cx, fd) {
        Ok((_, pos, ..)) => cx.mem.write_u64(out, pos),
        Err(Errno::Isdir) => Err(Errno::Badf),
        Err(e) => Err(e),
    })
}

pub(crate) fn fd_filestat_get(cx: &mut Cx<'_, '_>, fd: i32, buf: i32) -> Answer {
    let (m, p, st) = match route(cx, fd) {
        Route::Wasi => return None,
        Route::Root(m) => {
            let st = cx.t.stat(m, "/", cx.stop).unwrap_or(Stat { kind: FileKind::Dir, size: 0, mtime_ns: 0 });
            (m, "/".to_owned(), Stat { kind: FileKind::Dir, ..st })
        }
        Route::Ours => match cx.t.fds.get(&(fd as u32)) {
            Some(Open::File { mount, path, node, .. }) => (*mount, path.clone(), node_stat(node)),
            Some(Open::Dir { mount, path, .. }) => {
                let (m, p) = (*mount, path.clone());
                match cx.t.stat(m, &p, cx.stop) {
                    Ok(st) => (m, p, st),
                    Err(e) => return Some(Err(e)),
                }
            }
            None => return Some(Err(Errno::Badf)),
        },
    };
    Some(cx.mem.write(buf, &filestat(m, &p, st)))
}

pub(crate) fn fd_fdstat_get(cx: &mut Cx<'_, '_>, fd: i32, buf: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    let mut b = [0u8; 24];
    match cx.t.fds.get(&(fd as u32)) {
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
        None => return Some(Err(Errno::Badf)),
    }
    Some(cx.mem.write(buf, &b))
}

pub(crate) fn fd_fdstat_set_flags(cx: &mut Cx<'_, '_>, fd: i32, flags: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(match cx.t.fds.get_mut(&(fd as u32)) {
        Some(Open::File { append, .. }) => {
            *append = flags & FDFLAG_APPEND != 0;
            Ok(())
        }
        Some(Open::Dir { .. }) => Ok(()),
        None => Err(Errno::Badf),
    })
}

pub(crate) fn fd_filestat_set_size(cx: &mut Cx<'_, '_>, fd: i32, size: i64) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(set_size(cx, fd, size))
}

fn set_size(cx: &mut Cx<'_, '_>, fd: i32, size: i64) -> Result<(), Errno> {
    let (node, _, _, write, _) = match file(cx, fd) {
        Ok(f) => f,
        Err(Errno::Isdir) => return Err(Errno::Badf),
        Err(e) => return Err(e),
    };
    if !write {
        return Err(Errno::Inval);
    }
    let Ok(size) = usize::try_from(size) else { return Err(Errno::Inval) };
    if size as u64 > cx.t.max_file_bytes {
        return Err(Errno::Fbig);
    }
    let growth = {
        let mut n = node.lock();
        let len = n.content.bytes().len();
        let growth = size.saturating_sub(len) as u64;
        if growth > 0 && cx.quota.would_exceed(growth) {
            return Err(Errno::Nospc);
        }
        n.content.staged().resize(size, 0);
        n.dirty = true;
        n.mtime_ns = now_ns();
        growth
    };
    cx.quota.written += growth;
    Ok(())
}

/// Times cannot be set through a provider: the call succeeds and changes nothing, so
/// `shutil.copy2` and `os.utime` work.
pub(crate) fn fd_filestat_set_times(cx: &mut Cx<'_, '_>, fd: i32) -> Answer {
    match route(cx, fd) {
        Route::Wasi => None,
        Route::Root(_) => Some(Ok(())),
        Route::Ours => Some(if cx.t.fds.contains_key(&(fd as u32)) { Ok(()) } else { Err(Errno::Badf) }),
    }
}

pub(crate) fn fd_sync(cx: &mut Cx<'_, '_>, fd: i32) -> Answer {
    if route(cx, fd) != Route::Ours {
        return None;
    }
    Some(match cx.t.fds.get(&(fd as u32)) {
        Some(Open::File { mount, path, node, .. }) => {
            let (m, p, node) = (*mount, path.clone(), node.clone());
            cx.t.flush(m, &p, &node, cx.stop)
        }
        Some(Open::Dir { .. }) => Ok(()),
        None => Err(Errno::Badf),
    })
}

pub(crate) fn fd_advise(cx: &mut Cx<'_, '_>, fd: i32) -> Answer {
    match route(cx, fd) {
        Route::Ours => Some(if cx.t.fds.contains_key(&(fd as u32)) { Ok(()) } else { Err(Errno::Badf) }),
        _ => None,
    }
}

pub(crate) fn fd_readdir(cx: &mut Cx<'_, '_>, fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32) -> Answer {
    let (m, p, cached) = match route(cx, fd) {
        Route::Wasi => return None,
        Route::Root(m) => (m, "/".to_owned(), None),
        Route::Ours => match cx.t.fds.get(&(fd as u32)) {
            Some(Open::Dir { mount, path, listing }) => (*mount, path.clone(), listing.clone()),
            Some(Open::File { .. }) => return Some(Err(Errno::Notdir)),
            None => return Some(Err(Errno::Badf)),
        },
    };
    let entries = match (cookie, cached) {
        (c, Some(l)) if c != 0 => l,
        _ => match listing(cx.t, fd, m, &p, cx.stop) {
            Ok(l) => l,
            Err(e) => return Some(Err(e)),
        },
    };
    let bytes = encode_dirents(&entries, cookie as u64, buf_len as u32 as usize);
    Some(cx.mem.write(buf, &bytes).and_then(|()| cx.mem.write_u32(bufused, bytes.len() as u32)))
}

/// The folder `p`'s entries as `fd_readdir` lists them from cookie 0: ".", "..", the
/// provider's, and files created and still open; kept on the descriptor for later cookies.
fn listing(t: &mut MountTable, fd: i32, m: usize, p: &str, stop: &CallContext) -> Result<Arc<Vec<DirEntry>>, Errno> {
    let q = p.to_owned();
    let listed = t.invoke(m, "list", p, stop, move |f| f.list(&q))?;
    let child = |name: &str| if p == "/" { format!("/{name}") } else { format!("{p}/{name}") };
    let mut entries = vec![
        DirEntry { name: ".".into(), kind: FileKind::Dir, ino: ino(m, p) },
        DirEntry { name: "..".into(), kind: FileKind::Dir, ino: ino(m, parent(p).unwrap_or("/")) },
    ];
    let mut names = std::collections::HashSet::new();
    for (name, kind) in listed {
        // A provider's names are data: one that could not be a file name is dropped.
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
            continue;
        }
        if names.insert(name.clone()) {
            entries.push(DirEntry { ino: ino(m, &child(&name)), name, kind });
        }
    }
    // Files created and still open are not the provider's yet; they are there.
    for (mount, path) in t.nodes.keys() {
        if *mount == m && parent(path) == Some(p) {
            let name = file_name(path).to_owned();
            if names.insert(name.clone()) {
                entries.push(DirEntry { ino: ino(m, path), name, kind: FileKind::File });
            }
        }
    }
    let entries = Arc::new(entries);
    if let Some(Open::Dir { listing, .. }) = t.fds.get_mut(&(fd as u32)) {
        *listing = Some(entries.clone());
    }
    Ok(entries)
}

pub(crate) fn path_filestat_get(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32, buf: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    let st = match stat_of(cx.t, m, &r.path, cx.stop) {
        Ok(st) if r.dir_only && st.kind == FileKind::File => return Some(Err(Errno::Notdir)),
        Ok(st) => st,
        Err(e) => return Some(Err(e)),
    };
    Some(cx.mem.write(buf, &filestat(m, &r.path, st)))
}

pub(crate) fn path_filestat_set_times(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    Some(stat_of(cx.t, m, &r.path, cx.stop).map(|_| ()))
}

/// A change to a mount's folders: refused on a read-only mount, else the provider's.
fn change(
    cx: &mut Cx<'_, '_>,
    m: usize,
    method: &'static str,
    p: &str,
    f: impl FnOnce(&dyn FileProvider) -> Result<(), FileError> + Send + 'static,
) -> Result<(), Errno> {
    let t = &mut *cx.t;
    if !t.mounts[m].mount.writable {
        return Err(Errno::Rofs);
    }
    let r = t.invoke(m, method, p, cx.stop, f);
    t.forget_cached(m);
    if let Err(e @ (Errno::Io | Errno::Timedout)) = r {
        t.refused_change(m, method, p, e);
    }
    r
}

pub(crate) fn path_create_directory(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    if r.path == "/" {
        return Some(Err(Errno::Exist));
    }
    if cx.quota.created >= MAX_CREATED_ENTRIES {
        return Some(Err(Errno::Nospc));
    }
    let p = r.path.clone();
    let out = change(cx, m, "mkdir", &r.path, move |f| f.mkdir(&p));
    if out.is_ok() {
        cx.quota.created += 1;
    }
    Some(out)
}

pub(crate) fn path_remove_directory(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    if r.path == "/" {
        return Some(Err(Errno::Busy));
    }
    let p = r.path.clone();
    Some(change(cx, m, "rmdir", &r.path, move |f| f.rmdir(&p)))
}

pub(crate) fn path_unlink_file(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    if r.dir_only {
        return Some(Err(Errno::Notdir));
    }
    // A file open now: one created and not yet closed is not the provider's yet.
    let open = cx.t.nodes.get(&(m, r.path.clone())).cloned();
    let p = r.path.clone();
    let out = change(cx, m, "remove", &r.path, move |f| f.remove(&p));
    if let Some(node) = open {
        match out {
            // Removed (or never the provider's): its descriptors keep their bytes, as on
            // POSIX, and nothing of it is written back, at close, fsync or the run's end.
            Ok(()) | Err(Errno::Noent) => {
                node.lock().unlinked = true;
                cx.t.nodes.remove(&(m, r.path));
                return Some(Ok(()));
            }
            Err(_) => {}
        }
    }
    Some(out)
}

pub(crate) fn path_rename(cx: &mut Cx<'_, '_>, fd: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32) -> Answer {
    let (a, b) = (route(cx, fd), route(cx, new_fd));
    if a == Route::Wasi && b == Route::Wasi {
        return None;
    }
    if a == Route::Wasi || b == Route::Wasi {
        return Some(Err(Errno::Xdev));
    }
    let (m, from) = match resolve_at(cx, fd, old, old_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    let (m2, to) = match resolve_at(cx, new_fd, new, new_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    if m != m2 {
        return Some(Err(Errno::Xdev));
    }
    if from.path == "/" || to.path == "/" {
        return Some(Err(Errno::Busy));
    }
    // What the guest wrote to `from` and has not closed goes first.
    if let Some(node) = cx.t.nodes.get(&(m, from.path.clone())).cloned()
        && let Err(e) = cx.t.flush(m, &from.path, &node, cx.stop)
    {
        return Some(Err(e));
    }
    let (f, g) = (from.path.clone(), to.path.clone());
    let out = change(cx, m, "rename", &from.path, move |p| p.rename(&f, &g));
    if out.is_ok() && from.path != to.path {
        follow_rename(cx.t, m, &from.path, &to.path);
    }
    Some(out)
}

/// After the provider renamed `from` to `to` in mount `m`: what the guest holds open
/// there, the file itself or anything below the folder, follows, so what it writes
/// lands under the new name. A file open at `to` was replaced: as on POSIX, its
/// descriptors keep their bytes and nothing of it is written back.
fn follow_rename(t: &mut MountTable, m: usize, from: &str, to: &str) {
    let renamed = |p: &str| match p.strip_prefix(from) {
        Some("") => Some(to.to_owned()),
        Some(rest) if rest.starts_with('/') => Some(format!("{to}{rest}")),
        _ => None,
    };
    if let Some(replaced) = t.nodes.remove(&(m, to.to_owned())) {
        replaced.lock().unlinked = true;
    }
    let moving: Vec<(usize, String)> = t.nodes.keys().filter(|(n, p)| *n == m && renamed(p).is_some()).cloned().collect();
    for key in moving {
        if let (Some(node), Some(new)) = (t.nodes.remove(&key), renamed(&key.1)) {
            t.nodes.insert((m, new), node);
        }
    }
    for open in t.fds.values_mut() {
        if let Open::File { mount, path, .. } | Open::Dir { mount, path, .. } = open
            && *mount == m
            && let Some(new) = renamed(path)
        {
            *path = new;
        }
    }
}

/// Links, symlinks and renumbering have no meaning in a provider's tree.
pub(crate) fn path_link(cx: &mut Cx<'_, '_>, old_fd: i32, new_fd: i32) -> Answer {
    match (route(cx, old_fd), route(cx, new_fd)) {
        (Route::Wasi, Route::Wasi) => None,
        (Route::Wasi, _) | (_, Route::Wasi) => Some(Err(Errno::Xdev)),
        _ => Some(Err(Errno::Notsup)),
    }
}

pub(crate) fn path_symlink(cx: &mut Cx<'_, '_>, fd: i32) -> Answer {
    match route(cx, fd) {
        Route::Wasi => None,
        _ => Some(Err(Errno::Notsup)),
    }
}

pub(crate) fn fd_renumber(cx: &mut Cx<'_, '_>, from: i32, to: i32) -> Answer {
    match (route(cx, from), route(cx, to)) {
        (Route::Wasi, Route::Wasi) => None,
        _ => Some(Err(Errno::Notsup)),
    }
}

pub(crate) fn path_readlink(cx: &mut Cx<'_, '_>, fd: i32, path: i32, path_len: i32) -> Answer {
    let (m, r) = match resolve_at(cx, fd, path, path_len)? {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    // Nothing in a mount is a link.
    Some(match stat_of(cx.t, m, &r.path, cx.stop) {
        Ok(_) => Err(Errno::Inval),
        Err(e) => Err(e),
    })
}
