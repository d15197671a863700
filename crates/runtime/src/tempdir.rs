//! A run's private folders on the host (`/tmp` and the working folder), and their removal
//! whatever the guest left in them.
//!
//! A guest can build a tree deeper than PATH_MAX, or with more levels than the process
//! has descriptors (nesting, then renaming a deep tree into another one), so removal
//! works by descriptor (`openat`/`unlinkat`) and holds at most [`MAX_HELD`] descriptors:
//! a folder found deeper than that is first moved up to the top of the tree. Folders are
//! named `wasi-python-<pid>-...`; those no process holds (below) are swept when the
//! first folder of a process is made, and [`sweep_private_folders`] removes, at exit, those
//! of runs still alive (the Python package calls it from `atexit`).
//!
//! Which folders are alive is told by a lock, not by the pid in their name: processes
//! in separate pid namespaces (containers) may share `/tmp`, where a number dead in one
//! is alive in another. A folder's own descriptor holds an `flock` on it for its whole
//! life, kept folders included, and a sweep removes only the folders it can lock. A
//! folder is made under a hidden name, locked, then renamed, so no sweep sees it
//! unlocked (a process killed in between leaves an empty hidden folder, never swept).
//! The lock belongs to the open file description, which a forked child shares: the
//! child forgets its parent's folders (forks.rs), closing its copies of the kept ones
//! at its first use; those of runs in progress at the fork stay open in it until it
//! execs (the descriptors are close-on-exec) or exits. So the folders of a parent
//! killed outright are swept once its forked children have gone too, and nothing is
//! removed from under a living process. No lock is undone (`LOCK_UN` would undo the
//! parent's): it ends when the last descriptor is closed.
//!
//! Most runs never write a file: making and removing three folders on the host's disk
//! was a fifth of such a run's time. So folders a run left exactly as they were made
//! (empty, and the same size and times, which are set back if only they changed) are
//! kept for the next run of the same runtime ([`Spares`], its launcher's), up to
//! [`MAX_SPARE`]; any other change and they are removed. The only trace of the earlier
//! run is the folders' inode numbers and change times. A runtime's kept folders are
//! removed when it retires (dropped, or `Runtime::retire` at exit).

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rustix::fs::{AtFlags, Dir, FileType, FlockOperation, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::Error;
use wasi_python_sched::Seen;

/// The most descriptors one removal holds at once.
const MAX_HELD: usize = 16;
const PREFIX: &str = "wasi-python-";
/// Unchanged private folders kept for later runs, at most.
const MAX_SPARE: usize = 16;

/// The private folders of one run or session: `<root>/tmp` (the guest's `/tmp`) and
/// `<root>/work` (its working folder and HOME). When dropped, kept for the next run if
/// the guest left them as they were made, else removed whole.
#[derive(Debug)]
pub(crate) struct TempDir {
    root: PathBuf,
    /// The root's descriptor, holding its lock for the folder's life; None once dropped.
    lock: Option<OwnedFd>,
    /// `tmp` and `work` as they were made; None once the folders cannot be kept (a
    /// mount's folder was added).
    made: Option<[Made; 2]>,
    /// Where they are kept for the next run: the runtime's.
    spares: Arc<Spares>,
}

/// What a made folder looked like: what a guest could change without leaving an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Made {
    ino: u64,
    size: i64,
    nlink: u64,
    mode: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
}

impl Made {
    #[allow(clippy::unnecessary_cast, reason = "the stat fields' types differ between targets")]
    fn of(st: &rustix::fs::Stat) -> Made {
        Made {
            ino: st.st_ino as u64,
            size: st.st_size as i64,
            nlink: st.st_nlink as u64,
            mode: st.st_mode as u32,
            atime: (st.st_atime as i64, st.st_atime_nsec as i64),
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        }
    }
}

/// The roots of this process's folders in use, not yet removed or kept. Process-wide by
/// nature, not launch state: what the exit sweep waits for and removes.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Process-wide, as `LIVE`: notified when it empties.
static NONE_LIVE: Condvar = Condvar::new();
/// A folder kept for the next run, with how it was made and its lock.
#[derive(Debug)]
struct Spare {
    root: PathBuf,
    made: [Made; 2],
    lock: OwnedFd,
}

/// Folders kept for the next runs of one runtime (its launcher's): two runtimes share
/// none. Removed when the runtime retires, or with the list.
#[derive(Debug, Default)]
pub(crate) struct Spares {
    list: Mutex<Vec<Spare>>,
    /// None is kept from now on (the runtime retired).
    retired: AtomicBool,
    /// In a forked child the list holds the parent's folders: forgotten (never removed,
    /// nor given to a run) at the child's first use (sched's forks.rs).
    seen: Seen,
}

impl Spares {
    fn list(&self) -> parking_lot::MutexGuard<'_, Vec<Spare>> {
        let mut list = self.list.lock();
        if self.seen.stale() {
            // Closing the child's copies of their descriptors leaves the parent's locks.
            list.clear();
        }
        list
    }

    /// Keeps `spare` for the next run, or removes it (full, retired, or exiting).
    fn keep(&self, spare: Spare) {
        let mut list = self.list();
        if list.len() >= MAX_SPARE || self.retired.load(Ordering::SeqCst) || EXITING.load(Ordering::SeqCst) {
            drop(list);
            return remove_spares(vec![spare]);
        }
        list.push(spare);
    }

    /// Whether a folder left as made would be kept now (checking it costs reads).
    fn wanted(&self) -> bool {
        !self.retired.load(Ordering::SeqCst) && !EXITING.load(Ordering::SeqCst) && self.list().len() < MAX_SPARE
    }

    /// How many folders are kept now.
    pub(crate) fn len(&self) -> usize {
        self.list().len()
    }

    /// Removes the folders kept, and keeps none from now on.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        remove_spares(std::mem::take(&mut *self.list()));
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        remove_spares(std::mem::take(&mut *self.list()));
    }
}

/// Removes kept folders, each while still locked.
fn remove_spares(spares: Vec<Spare>) {
    for s in spares {
        let _ = remove_tree(&s.root);
        drop(s.lock);
    }
}

/// Set at exit: from then on folders are removed, never kept. Process-wide by nature,
/// not launch state: the exit hook's.
static EXITING: AtomicBool = AtomicBool::new(false);
/// In a forked child, `LIVE` holds the parent's folders: forgotten (never removed) at
/// the child's first use (sched's forks.rs). Process-wide, as `LIVE`.
static SEEN: Seen = Seen::new();

fn forget_the_parents() {
    if SEEN.stale() {
        LIVE.lock().clear();
    }
}

impl TempDir {
    /// A run's folders: some `spares` kept, else new ones. Kept there again when dropped,
    /// if the guest left them as made.
    pub(crate) fn new(spares: &Arc<Spares>) -> Result<Self, Error> {
        forget_the_parents();
        let kept = spares.list().pop();
        if let Some(Spare { root, made, lock }) = kept {
            LIVE.lock().push(root.clone());
            return Ok(TempDir { root, lock: Some(lock), made: Some(made), spares: spares.clone() });
        }
        // Process-wide by nature: the folders no process holds are swept once per process.
        static SWEPT: OnceLock<()> = OnceLock::new();
        SWEPT.get_or_init(|| sweep_dead(&std::env::temp_dir()));
        // Process-wide by nature: makes this process's folder names unique.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("{PREFIX}{}-{n}-{nanos:08x}", std::process::id());
        let (root, lock) = make_locked(&std::env::temp_dir(), &name)?;
        LIVE.lock().push(root.clone());
        let mut dir = TempDir { root, lock: Some(lock), made: None, spares: spares.clone() };
        let stat = |p: &Path| rustix::fs::stat(p).map(|st| Made::of(&st)).ok();
        dir.made = stat(&dir.tmp()).zip(stat(&dir.work())).map(|(t, w)| [t, w]);
        Ok(dir)
    }

    /// Whether `tmp` and `work` are as they were made: each empty, with the same
    /// inode, size, links, mode and modification time. An access time changed alone
    /// (a guest reading the folder, or setting it) is set back. The check itself leaves
    /// the access time alone (`O_NOATIME`: our folders are ours), so a folder no guest
    /// read is not written at all; with relatime, reading it updated its access time
    /// every time, and setting it back cost a run two writes to the folders' inodes.
    fn unchanged(&self, made: &[Made; 2]) -> bool {
        [self.tmp(), self.work()].iter().zip(made).all(|(path, made)| {
            let Ok(fd) = cstr(path.as_os_str()).and_then(|p| Ok(open_dir_unread(&p)?)) else {
                return false;
            };
            // One descriptor for all: `Dir::read_from` would open the folder again.
            let Ok(mut entries) = Dir::new(fd) else { return false };
            let empty = entries.all(|e| e.is_ok_and(|e| e.file_name() == c"." || e.file_name() == c".."));
            let Ok(fd) = entries.fd() else { return false };
            let Ok(st) = rustix::fs::fstat(fd) else { return false };
            let now = Made::of(&st);
            if !empty || (Made { atime: made.atime, ..now }) != *made {
                return false;
            }
            now.atime == made.atime || set_times(fd, made).is_ok()
        })
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
    pub(crate) fn empty(&mut self) -> Result<PathBuf, Error> {
        // Routed to the mounts, never written, but not checked either: not kept.
        self.made = None;
        let p = self.root.join("mnt");
        if !p.is_dir() {
            std::fs::create_dir(&p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        }
        Ok(p)
    }
}

/// Makes the folder `name` in `temp`, with `tmp` and `work` in it, and its lock: made
/// under a hidden name that no sweep looks at, locked, then renamed, never over an
/// existing entry. Only its owner may open it (mode 0700), so no other user can take
/// its lock first.
fn make_locked(temp: &Path, name: &str) -> Result<(PathBuf, OwnedFd), Error> {
    use std::os::unix::fs::DirBuilderExt;

    let root = temp.join(name);
    let hidden = temp.join(format!(".{name}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&hidden).map_err(|e| Error::io(format!("creating {}", hidden.display()), e))?;
    let lock = (|| -> std::io::Result<OwnedFd> {
        let fd = open_dir(rustix::fs::CWD, &cstr(hidden.as_os_str())?)?;
        // No other process knows the hidden name: it cannot be locked already.
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)?;
        for sub in [c"tmp", c"work"] {
            rustix::fs::mkdirat(&fd, sub, Mode::RWXU | Mode::RWXG | Mode::RWXO)?;
        }
        let cwd = rustix::fs::CWD;
        match rustix::fs::renameat_with(cwd, &hidden, cwd, &root, RenameFlags::NOREPLACE) {
            // A file system without RENAME_NOREPLACE: a plain rename where nothing is.
            Err(Errno::INVAL | Errno::NOSYS) if std::fs::symlink_metadata(&root).is_err() => {
                rustix::fs::renameat(cwd, &hidden, cwd, &root)?;
            }
            r => r?,
        }
        Ok(fd)
    })();
    match lock {
        Ok(lock) => Ok((root, lock)),
        Err(e) => {
            let _ = remove_tree(&hidden);
            Err(Error::io(format!("creating {}", root.display()), e))
        }
    }
}

/// Sets a folder's access and modification times back to how they were made.
fn set_times(fd: impl AsFd, made: &Made) -> rustix::io::Result<()> {
    let ts = |(sec, nsec): (i64, i64)| rustix::fs::Timespec { tv_sec: sec, tv_nsec: nsec as _ };
    rustix::fs::futimens(fd, &rustix::fs::Timestamps { last_access: ts(made.atime), last_modification: ts(made.mtime) })
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let keep = self.made.as_ref().is_some_and(|made| self.spares.wanted() && self.unchanged(made));
        match (keep, self.made, self.lock.take()) {
            (true, Some(made), Some(lock)) => self.spares.keep(Spare { root: self.root.clone(), made, lock }),
            (_, _, lock) => {
                // Removed while still locked: no sweep takes part.
                let _ = remove_tree(&self.root);
                drop(lock);
            }
        }
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
/// to be removed that way. No folder is kept for a later run from now on. Retire the
/// runtimes first ([`Runtime::retire`](crate::Runtime::retire)): their guests on standby
/// hold folders, and the folders they keep for their next runs are theirs to remove.
pub fn sweep_private_folders(wait: Duration) -> usize {
    forget_the_parents();
    EXITING.store(true, Ordering::SeqCst);
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

/// Removes the private folders in `temp` that no process holds: those it can lock. The
/// pid in a folder's name proves nothing (another pid namespace may share `temp`).
fn sweep_dead(temp: &Path) {
    let Ok(top) = cstr(temp.as_os_str()).and_then(|t| Ok(open_dir(rustix::fs::CWD, &t)?)) else { return };
    let Ok(entries) = Dir::read_from(&top) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_bytes().starts_with(PREFIX.as_bytes()) || !matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            continue;
        }
        // Another user's folder (mode 0700) is not opened; a symlink is not followed.
        let Ok(folder) = open_dir(&top, name) else { continue };
        if rustix::fs::flock(&folder, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let _ = remove_tree(&temp.join(OsStr::from_bytes(name.to_bytes())));
        drop(folder);
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

/// Opens the folder at `path` to read without updating its access time, where its
/// owner may (`O_NOATIME`, else EPERM: then as any reader).
fn open_dir_unread(path: &CStr) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(rustix::fs::CWD, path, flags | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty()),
        r => r,
    }
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

    /// Removes what `kept` holds, then makes a folder whose drop must decide.
    fn fresh(kept: &Arc<Spares>) -> TempDir {
        remove_spares(std::mem::take(&mut *kept.list()));
        TempDir::new(kept).unwrap()
    }

    fn spares(kept: &Spares) -> Vec<PathBuf> {
        kept.list().iter().map(|s| s.root.clone()).collect()
    }

    /// Two runtimes' kept folders: each its own, removed when it retires or goes.
    fn a_runtimes_kept_folders_are_its_own_and_go_when_it_retires() {
        let (one, two) = (Arc::new(Spares::default()), Arc::new(Spares::default()));
        let dir = fresh(&one);
        let root = dir.root.clone();
        drop(dir);
        assert_eq!((spares(&one), spares(&two)), (vec![root.clone()], vec![]));
        let other = TempDir::new(&two).unwrap();
        assert_ne!(other.root, root, "another runtime's folders are not handed out");
        drop(other);
        assert_eq!(two.len(), 1);
        one.retire();
        assert!(!root.exists() && one.len() == 0, "retired: its folders removed");
        let dir = TempDir::new(&one).unwrap();
        let root = dir.root.clone();
        drop(dir);
        assert!(!root.exists() && one.len() == 0, "and none kept from then on");
        let kept = spares(&two);
        drop(two);
        assert!(kept.iter().all(|r| !r.exists()), "dropped with its runtime: removed");
    }

    // One test, so the exit flag it sets does not reach other tests' folders meanwhile.
    #[test]
    fn folders_left_as_made_are_kept_for_the_next_run_and_any_other_change_removes_them() {
        a_runtimes_kept_folders_are_its_own_and_go_when_it_retires();
        let kept = Arc::new(Spares::default());
        let fresh = || fresh(&kept);
        let spares = || spares(&kept);
        // Untouched: kept, and the next TempDir is the same folder. The check reads the
        // folders without writing them: setting a time back would change their ctime.
        let dir = fresh();
        let root = dir.root.clone();
        let ctimes = |root: &Path| {
            ["tmp", "work"].map(|sub| {
                let st = rustix::fs::stat(root.join(sub)).unwrap();
                (st.st_ctime, st.st_ctime_nsec)
            })
        };
        let before = ctimes(&root);
        std::thread::sleep(Duration::from_millis(20));
        drop(dir);
        assert_eq!(spares(), vec![root.clone()]);
        assert_eq!(ctimes(&root), before, "the check wrote the folders");
        let again = TempDir::new(&kept).unwrap();
        assert_eq!(again.root, root);
        assert!(spares().is_empty());
        drop(again);

        // A file left in /tmp, or in the working folder: removed.
        for sub in ["tmp", "work"] {
            let dir = fresh();
            std::fs::write(dir.root.join(sub).join("left"), b"x").unwrap();
            let root = dir.root.clone();
            drop(dir);
            assert!(spares().is_empty() && !root.exists(), "{sub}: a file left behind");
        }

        // A file made and removed again, the folder's times set back: nothing is left
        // that the next run could see, so it is kept (whatever the folder's size did).
        let dir = fresh();
        let made = dir.made.unwrap()[0];
        let f = dir.tmp().join("gone");
        std::fs::write(&f, b"x").unwrap();
        std::fs::remove_file(&f).unwrap();
        let fd = open_dir(rustix::fs::CWD, &cstr(dir.tmp().as_os_str()).unwrap()).unwrap();
        set_times(&fd, &made).unwrap();
        let as_made = Made::of(&rustix::fs::fstat(&fd).unwrap()) == made;
        let root = dir.root.clone();
        drop(dir);
        assert_eq!(spares().contains(&root), as_made);

        // A modification time the guest set: removed.
        let dir = fresh();
        let fd = open_dir(rustix::fs::CWD, &cstr(dir.work().as_os_str()).unwrap()).unwrap();
        let mut other = dir.made.unwrap()[1];
        other.mtime.0 -= 1000;
        set_times(&fd, &other).unwrap();
        let root = dir.root.clone();
        drop(dir);
        assert!(spares().is_empty() && !root.exists(), "a changed mtime");

        // Only the access time changed: set back, and kept.
        let dir = fresh();
        let made = dir.made.unwrap()[0];
        let fd = open_dir(rustix::fs::CWD, &cstr(dir.tmp().as_os_str()).unwrap()).unwrap();
        let mut other = made;
        other.atime.0 -= 1000;
        set_times(&fd, &other).unwrap();
        let root = dir.root.clone();
        drop(dir);
        assert_eq!(spares(), vec![root.clone()]);
        let st = rustix::fs::stat(root.join("tmp")).unwrap();
        assert_eq!(Made::of(&st).atime, made.atime);

        // A folder with a mount's empty folder: removed.
        remove_spares(std::mem::take(&mut *kept.list()));
        let mut dir = TempDir::new(&kept).unwrap();
        dir.empty().unwrap();
        let root = dir.root.clone();
        drop(dir);
        assert!(spares().is_empty() && !root.exists(), "with a mount folder");

        // At exit: the runtime retires, then the sweep; none kept from then on.
        let dir = fresh();
        let root = dir.root.clone();
        drop(dir);
        kept.retire();
        assert_eq!(sweep_private_folders(Duration::ZERO), 0);
        assert!(!root.exists() && spares().is_empty());
        let again = Arc::new(Spares::default());
        let dir = TempDir::new(&again).unwrap();
        let root = dir.root.clone();
        drop(dir);
        assert!(!root.exists() && again.len() == 0, "exiting: another runtime keeps none either");
        EXITING.store(false, Ordering::SeqCst);
    }

    const HOLD: &str = "WASI_PYTHON_TEMPDIR_HOLD";
    /// A pid that names no process here (2^22 + 1 is above Linux's largest).
    const DEAD_PID: &str = "4194305";

    #[test]
    fn a_folder_is_swept_only_when_no_process_holds_its_lock() {
        use std::io::BufRead;
        use std::process::Stdio;

        let temp = scratch("sweep");
        // A process of another pid namespace sharing this /tmp: alive, holding its folder,
        // and its pid names no process here.
        let held = temp.join(format!("{PREFIX}{DEAD_PID}-0-0"));
        let mut holder = crate::signals::tests::in_a_child("tempdir::tests::holds_a_folder", &[(HOLD, temp.as_os_str())])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = std::io::BufReader::new(holder.stdout.take().unwrap()).lines();
        // (libtest writes the test's name first, on the same line.)
        assert!(said.any(|l| l.is_ok_and(|l| l.ends_with("holding"))), "the holder did not start");
        // One this process holds; one whose holder is gone (ended), under a pid alive
        // here; one made without a lock.
        let (mine, lock) = make_locked(&temp, &format!("{PREFIX}{DEAD_PID}-1-0")).unwrap();
        let (gone, gone_lock) = make_locked(&temp, &format!("{PREFIX}1-2-0")).unwrap();
        drop(gone_lock);
        let unlocked = temp.join(format!("{PREFIX}{DEAD_PID}-3-0"));
        let other = temp.join("unrelated");
        for p in [&unlocked, &other] {
            std::fs::create_dir_all(p.join("tmp/x")).unwrap();
        }
        sweep_dead(&temp);
        assert!(held.join("tmp").exists() && mine.join("work").exists() && other.exists());
        assert!(!gone.exists() && !unlocked.exists());
        // Once their holders let go (the other process ends), they are swept.
        drop(holder.stdin.take());
        assert!(holder.wait().unwrap().success());
        drop(lock);
        sweep_dead(&temp);
        assert!(!held.exists() && !mine.exists() && other.exists());
        remove_tree(&temp).unwrap();
    }

    #[test]
    #[ignore = "the other process of the test above, started by it"]
    fn holds_a_folder() {
        use std::io::{Read, Write};

        let Some(temp) = std::env::var_os(HOLD) else { return };
        let (_, _lock) = make_locked(Path::new(&temp), &format!("{PREFIX}{DEAD_PID}-0-0")).unwrap();
        println!("holding");
        std::io::stdout().flush().unwrap();
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
}
