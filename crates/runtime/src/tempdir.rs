//! A run's private folders on the host (`/tmp` and the working folder), and their removal
//! whatever the guest left in them.
//!
//! A guest can build a tree deeper than PATH_MAX, or with more levels than the process
//! has descriptors (nesting, then renaming a deep tree into another one), so removal
//! works by descriptor (`openat`/`unlinkat`) and holds at most [`MAX_HELD`] descriptors:
//! a folder found deeper than that is first moved up to the top of the tree. Folders are
//! named `wasi-python-<pid>-...`; those of dead processes are swept when the first
//! folder of a process is made, and [`sweep_private_folders`] removes, at exit, those
//! of runs still alive (the Python package calls it from `atexit`).

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::Error;

/// The most descriptors one removal holds at once.
const MAX_HELD: usize = 16;
const PREFIX: &str = "wasi-python-";

/// The private folders of one run or session: `<root>/tmp` (the guest's `/tmp`) and
/// `<root>/work` (its working folder and HOME). Removed, whole, when dropped.
#[derive(Debug)]
pub(crate) struct TempDir {
    root: PathBuf,
}

/// The roots of this process's folders not yet removed.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static NONE_LIVE: Condvar = Condvar::new();

impl TempDir {
    pub(crate) fn new() -> Result<Self, Error> {
        static SWEPT: OnceLock<()> = OnceLock::new();
        SWEPT.get_or_init(|| sweep_dead(&std::env::temp_dir()));
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let root = std::env::temp_dir().join(format!("{PREFIX}{}-{n}-{nanos:08x}", std::process::id()));
        let make = |p: &Path| std::fs::create_dir(p).map_err(|e| Error::io(format!("creating {}", p.display()), e));
        make(&root)?;
        LIVE.lock().push(root.clone());
        let dir = TempDir { root };
        make(&dir.tmp())?;
        make(&dir.work())?;
        Ok(dir)
    }

    /// The guest's `/tmp`.
    pub(crate) fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The guest's private working folder (and HOME).
    pub(crate) fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// An empty folder: what wasmtime-wasi preopens at each mount's guest path (the
    /// calls under it are answered by the mount, see mounts/mod.rs).
    pub(crate) fn empty(&self) -> Result<PathBuf, Error> {
        let p = self.root.join("mnt");
        if !p.is_dir() {
            std::fs::create_dir(&p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        }
        Ok(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = remove_tree(&self.root);
        let mut live = LIVE.lock();
        live.retain(|p| p != &self.root);
        if live.is_empty() {
            NONE_LIVE.notify_all();
        }
    }
}

/// For a process about to exit: waits up to `wait` for the runs and sessions still
/// alive to end and remove their folders, then removes what is left (a guest still
/// running then loses its files; the process is ending). Returns how many folders had
/// to be removed that way.
pub fn sweep_private_folders(wait: Duration) -> usize {
    let mut live = LIVE.lock();
    if !live.is_empty() {
        NONE_LIVE.wait_while_for(&mut live, |l| !l.is_empty(), wait);
    }
    let left = std::mem::take(&mut *live);
    drop(live);
    for root in &left {
        let _ = remove_tree(root);
    }
    left.len()
}

/// Removes the private folders of processes that no longer run.
fn sweep_dead(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() as i32 || process_alive(pid) {
            continue;
        }
        let _ = remove_tree(&entry.path());
    }
}

fn process_alive(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH)),
        None => false,
    }
}

fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn open_dir(parent: impl AsFd, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Removes `path` and everything under it without following symlinks, whatever the
/// tree's depth or the length of its paths.
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let name = cstr(path.file_name().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?)?;
    let parent = open_dir(rustix::fs::CWD, &cstr(parent.as_os_str())?)?;
    let root = match open_dir(&parent, &name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        // A file or a symlink, not a folder: unlink it.
        Err(Errno::NOTDIR | Errno::LOOP) => return Ok(rustix::fs::unlinkat(&parent, &name, AtFlags::empty())?),
        Err(e) => return Err(e.into()),
    };
    // Each level: its descriptor and its name in the level above.
    let mut stack: Vec<(OwnedFd, CString)> = vec![(root, name)];
    let mut hoisted = 0u64;
    while let Some((top, _)) = stack.last() {
        let mut descend = None;
        for entry in Dir::read_from(top)? {
            let entry = entry?;
            let child = entry.file_name();
            if child == c"." || child == c".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => matches!(
                    rustix::fs::unlinkat(top, child, AtFlags::empty()),
                    Err(Errno::ISDIR | Errno::PERM)
                ),
                _ => {
                    match rustix::fs::unlinkat(top, child, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(e.into()),
                    }
                    false
                }
            };
            if is_dir {
                descend = Some(child.to_owned());
                break;
            }
        }
        match descend {
            Some(child) if stack.len() >= MAX_HELD => {
                // Too deep to hold another descriptor: move the folder up to the top.
                hoisted += 1;
                let new = CString::new(format!(".hoisted-{hoisted}")).expect("no NUL");
                rustix::fs::renameat(top, &child, &stack[0].0, &new)?;
            }
            Some(child) => match open_dir(top, &child) {
                Ok(fd) => stack.push((fd, child)),
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            },
            None => {
                // Empty now: remove it from the level above.
                let (fd, name) = stack.pop().expect("non-empty");
                drop(fd);
                let above = stack.last().map(|(fd, _)| fd).unwrap_or(&parent);
                match rustix::fs::unlinkat(above, &name, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("tempdir-test-{tag}-{}", std::process::id()));
        let _ = remove_tree(&p);
        std::fs::create_dir(&p).unwrap();
        p
    }

    #[test]
    fn removes_a_tree_deeper_than_path_max_and_than_the_descriptors_it_may_hold() {
        let root = scratch("deep");
        // 40 levels of 200-character names: about 8 KB of path, past PATH_MAX (4096).
        let name = CString::new("d".repeat(200)).unwrap();
        let mut fd = open_dir(rustix::fs::CWD, &cstr(root.as_os_str()).unwrap()).unwrap();
        for i in 0..40 {
            rustix::fs::mkdirat(&fd, &name, Mode::RWXU).unwrap();
            let f = CString::new(format!("f{i}")).unwrap();
            let file = rustix::fs::openat(&fd, &f, OFlags::CREATE | OFlags::WRONLY, Mode::RUSR).unwrap();
            drop(file);
            rustix::fs::symlinkat(c"/etc", &fd, c"link").unwrap();
            fd = open_dir(&fd, &name).unwrap();
        }
        drop(fd);
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert!(Path::new("/etc").exists(), "a symlink is removed, never followed");
    }

    #[test]
    fn a_missing_tree_is_no_error_and_a_symlink_is_unlinked_not_followed() {
        let root = scratch("link");
        let target = root.join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"x").unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(!link.exists() && target.join("keep").exists());
        remove_tree(&root.join("missing")).unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn the_folders_of_dead_processes_are_swept_and_the_living_kept() {
        let temp = scratch("sweep");
        // pid 2^22 + 1 is above Linux's largest pid: never alive.
        let dead = temp.join(format!("{PREFIX}4194305-0-0"));
        let alive = temp.join(format!("{PREFIX}{}-0-0", std::process::id()));
        let other = temp.join("unrelated");
        for p in [&dead, &alive, &other] {
            std::fs::create_dir_all(p.join("tmp/x")).unwrap();
        }
        sweep_dead(&temp);
        assert!(!dead.exists());
        assert!(alive.exists() && other.exists());
        remove_tree(&temp).unwrap();
    }
}
