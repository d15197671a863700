//! `MemoryFiles`: a mount's files held in memory, the built-in provider behind a dict of
//! path → bytes. Its calls are a map lookup, so they run on the guest's thread.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::errno::Errno;
use crate::path::{file_name, parent, resolve};
use crate::provider::{FileError, FileKind, FileProvider, Stat};

/// A change the guest made to a [`MemoryFiles`], as its observer sees it. Paths are
/// normalised mount paths ("/a/b.csv"); a folder's `Rename` moves its whole subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Write(String, Bytes),
    Remove(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
}

#[derive(Debug, Clone)]
enum Node {
    File { data: Bytes, mtime_ns: u64 },
    Dir { mtime_ns: u64 },
}

type Tree = BTreeMap<String, Node>;
type Observer = Box<dyn Fn(&Change) + Send + Sync>;

/// Files held in memory, by normalised path; "/" always exists as a folder.
pub struct MemoryFiles {
    nodes: RwLock<Tree>,
    writable: bool,
    observer: Option<Observer>,
    /// Held from a change until its observer returns, so the observer sees changes in the
    /// order they were made, while the tree itself is unlocked (the observer may read it).
    order: Mutex<()>,
}

impl fmt::Debug for MemoryFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryFiles")
            .field("entries", &self.nodes.read().len())
            .field("writable", &self.writable)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The node at `path`; when missing, ENOTDIR if a file stands where a folder above it
/// should be, else ENOENT.
fn lookup<'t>(nodes: &'t Tree, path: &str) -> Result<&'t Node, Errno> {
    if let Some(node) = nodes.get(path) {
        return Ok(node);
    }
    let mut up = parent(path);
    while let Some(p) = up {
        match nodes.get(p) {
            Some(Node::File { .. }) => return Err(Errno::Notdir),
            Some(Node::Dir { .. }) => return Err(Errno::Noent),
            None => up = parent(p),
        }
    }
    Err(Errno::Noent)
}

/// Checks that the folder that would hold `path` exists and is a folder.
fn parent_dir(nodes: &Tree, path: &str) -> Result<(), Errno> {
    match lookup(nodes, parent(path).ok_or(Errno::Busy)?)? {
        Node::Dir { .. } => Ok(()),
        Node::File { .. } => Err(Errno::Notdir),
    }
}

/// Sets the modification time of the folder holding `path`, whose entries changed.
fn touch_parent(nodes: &mut Tree, path: &str, now: u64) {
    if let Some(Node::Dir { mtime_ns }) = parent(path).and_then(|p| nodes.get_mut(p)) {
        *mtime_ns = now;
    }
}

/// The prefix every path below the folder `path` starts with.
fn below(path: &str) -> String {
    if path == "/" { "/".to_owned() } else { format!("{path}/") }
}

fn has_children(nodes: &Tree, path: &str) -> bool {
    let prefix = below(path);
    nodes.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// Normalises a path given to [`MemoryFiles::new`] ("a/b.csv" or "/a/b.csv").
fn normalise(path: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("bad file path {path:?}: {why}"));
    if path.contains('\0') {
        return bad("contains NUL");
    }
    let rel = path.strip_prefix('/').unwrap_or(path);
    if rel.split('/').any(|c| c == "..") {
        return bad("contains \"..\"");
    }
    match resolve("/", rel.as_bytes()) {
        Ok(r) if r.dir_only || r.path == "/" => bad("names a folder, not a file"),
        Ok(r) => Ok(r.path),
        Err(Errno::Noent) => bad("empty"),
        Err(e) => bad(&e.name()),
    }
}

impl MemoryFiles {
    /// `files`: (path, content); paths "a/b.csv" or "/a/b.csv" are normalised to "/a/b.csv";
    /// folders are implied by file paths. Refuses a path with "..", NUL, one given twice,
    /// or one that is both a file and a folder.
    pub fn new(
        files: impl IntoIterator<Item = (String, Bytes)>,
        writable: bool,
    ) -> Result<MemoryFiles, String> {
        let now = now_ns();
        let mut nodes = Tree::new();
        for (path, data) in files {
            let norm = normalise(&path)?;
            if nodes.insert(norm, Node::File { data, mtime_ns: now }).is_some() {
                return Err(format!("file path {path:?} given twice"));
            }
        }
        let paths: Vec<String> = nodes.keys().cloned().collect();
        for path in &paths {
            let mut up = parent(path);
            while let Some(dir) = up {
                match nodes.get(dir) {
                    Some(Node::File { .. }) => return Err(format!("{dir:?} is both a file and a folder")),
                    Some(Node::Dir { .. }) => break,
                    None => {
                        nodes.insert(dir.to_owned(), Node::Dir { mtime_ns: now });
                        up = parent(dir);
                    }
                }
            }
        }
        nodes.entry("/".to_owned()).or_insert(Node::Dir { mtime_ns: now });
        Ok(MemoryFiles { nodes: RwLock::new(nodes), writable, observer: None, order: Mutex::new(()) })
    }

    /// Called after each successful change the guest makes (the Python binding mirrors it
    /// into the user's dict), in the order the changes were made. The files are unlocked
    /// meanwhile, so it may read them, but it must not change them: that would deadlock.
    pub fn with_observer(self, f: Box<dyn Fn(&Change) + Send + Sync>) -> MemoryFiles {
        MemoryFiles { observer: Some(f), ..self }
    }

    /// Every file, sorted by path.
    pub fn files(&self) -> Vec<(String, Bytes)> {
        let nodes = self.nodes.read();
        nodes
            .iter()
            .filter_map(|(path, node)| match node {
                Node::File { data, .. } => Some((path.clone(), data.clone())),
                Node::Dir { .. } => None,
            })
            .collect()
    }

    /// Applies one change (`apply` returns it, or `None` for a successful no-op) and tells
    /// the observer.
    fn change(
        &self,
        apply: impl FnOnce(&mut Tree, u64) -> Result<Option<Change>, Errno>,
    ) -> Result<(), FileError> {
        if !self.writable {
            return Err(Errno::Rofs.into());
        }
        let _order = self.order.lock();
        let change = apply(&mut self.nodes.write(), now_ns())?;
        if let (Some(observer), Some(change)) = (&self.observer, change) {
            observer(&change);
        }
        Ok(())
    }
}

impl FileProvider for MemoryFiles {
    fn stat(&self, path: &str) -> Result<Stat, FileError> {
        let nodes = self.nodes.read();
        Ok(match lookup(&nodes, path)? {
            Node::File { data, mtime_ns } => {
                Stat { kind: FileKind::File, size: data.len() as u64, mtime_ns: *mtime_ns }
            }
            Node::Dir { mtime_ns } => Stat { kind: FileKind::Dir, size: 0, mtime_ns: *mtime_ns },
        })
    }

    fn list(&self, path: &str) -> Result<Vec<(String, FileKind)>, FileError> {
        let nodes = self.nodes.read();
        if let Node::File { .. } = lookup(&nodes, path)? {
            return Err(Errno::Notdir.into());
        }
        let prefix = below(path);
        Ok(nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| parent(k) == Some(path))
            .map(|(k, node)| {
                let kind = if let Node::Dir { .. } = node { FileKind::Dir } else { FileKind::File };
                (file_name(k).to_owned(), kind)
            })
            .collect())
    }

    fn read(&self, path: &str) -> Result<Bytes, FileError> {
        match lookup(&self.nodes.read(), path)? {
            Node::File { data, .. } => Ok(data.clone()),
            Node::Dir { .. } => Err(Errno::Isdir.into()),
        }
    }

    fn write(&self, path: &str, data: Bytes) -> Result<(), FileError> {
        self.change(|nodes, now| {
            if let Some(Node::Dir { .. }) = nodes.get(path) {
                return Err(Errno::Isdir);
            }
            parent_dir(nodes, path)?;
            let created =
                nodes.insert(path.to_owned(), Node::File { data: data.clone(), mtime_ns: now }).is_none();
            if created {
                touch_parent(nodes, path, now);
            }
            Ok(Some(Change::Write(path.to_owned(), data)))
        })
    }

    fn mkdir(&self, path: &str) -> Result<(), FileError> {
        self.change(|nodes, now| {
            if nodes.contains_key(path) {
                return Err(Errno::Exist);
            }
            parent_dir(nodes, path)?;
            nodes.insert(path.to_owned(), Node::Dir { mtime_ns: now });
            touch_parent(nodes, path, now);
            Ok(Some(Change::Mkdir(path.to_owned())))
        })
    }

    fn remove(&self, path: &str) -> Result<(), FileError> {
        self.change(|nodes, now| {
            if let Node::Dir { .. } = lookup(nodes, path)? {
                return Err(Errno::Isdir);
            }
            nodes.remove(path);
            touch_parent(nodes, path, now);
            Ok(Some(Change::Remove(path.to_owned())))
        })
    }

    fn rmdir(&self, path: &str) -> Result<(), FileError> {
        self.change(|nodes, now| {
            if path == "/" {
                return Err(Errno::Busy);
            }
            if let Node::File { .. } = lookup(nodes, path)? {
                return Err(Errno::Notdir);
            }
            if has_children(nodes, path) {
                return Err(Errno::Notempty);
            }
            nodes.remove(path);
            touch_parent(nodes, path, now);
            Ok(Some(Change::Rmdir(path.to_owned())))
        })
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        self.change(|nodes, now| {
            if from == "/" || to == "/" {
                return Err(Errno::Busy);
            }
            let from_is_dir = matches!(lookup(nodes, from)?, Node::Dir { .. });
            parent_dir(nodes, to)?;
            if from == to {
                return Ok(None);
            }
            if from_is_dir && to.starts_with(&below(from)) {
                return Err(Errno::Inval);
            }
            match (from_is_dir, nodes.get(to)) {
                (false, Some(Node::Dir { .. })) => return Err(Errno::Isdir),
                (true, Some(Node::File { .. })) => return Err(Errno::Notdir),
                (true, Some(Node::Dir { .. })) if has_children(nodes, to) => return Err(Errno::Notempty),
                _ => {}
            }
            // The node and, for a folder, everything below it, keeping their mtimes.
            let mut moved = vec![from.to_owned()];
            if from_is_dir {
                let prefix = below(from);
                let subtree = nodes.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix));
                moved.extend(subtree.map(|(k, _)| k.clone()));
            }
            for old in moved {
                if let Some(node) = nodes.remove(&old) {
                    nodes.insert(format!("{to}{}", &old[from.len()..]), node);
                }
            }
            touch_parent(nodes, from, now);
            touch_parent(nodes, to, now);
            Ok(Some(Change::Rename(from.to_owned(), to.to_owned())))
        })
    }

    fn inline(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn err(e: Errno) -> FileError {
        FileError::Errno(e)
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// /a.txt, /d/b.csv, /d/e/c.bin (so folders /d and /d/e), writable.
    fn sample(writable: bool) -> MemoryFiles {
        let files = [("a.txt", "A"), ("/d/b.csv", "B"), ("d/e/c.bin", "C")];
        MemoryFiles::new(files.map(|(p, c)| (p.to_owned(), b(c))), writable).unwrap()
    }

    /// `sample(true)` with an observer recording every change.
    fn observed() -> (MemoryFiles, Arc<Mutex<Vec<Change>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        (sample(true).with_observer(Box::new(move |c| log.lock().push(c.clone()))), seen)
    }

    fn paths(m: &MemoryFiles) -> Vec<String> {
        m.files().into_iter().map(|(p, _)| p).collect()
    }

    fn kind(m: &MemoryFiles, path: &str) -> Result<FileKind, FileError> {
        m.stat(path).map(|s| s.kind)
    }

    #[test]
    fn new_normalises_and_implies_folders() {
        let m = sample(false);
        assert_eq!(paths(&m), ["/a.txt", "/d/b.csv", "/d/e/c.bin"]);
        assert_eq!(kind(&m, "/"), Ok(FileKind::Dir));
        assert_eq!(kind(&m, "/d"), Ok(FileKind::Dir));
        assert_eq!(kind(&m, "/d/e"), Ok(FileKind::Dir));
        let m = MemoryFiles::new([("./x//y/./z".to_owned(), b("z"))], false).unwrap();
        assert_eq!(paths(&m), ["/x/y/z"]);
        let empty = MemoryFiles::new([], false).unwrap();
        assert_eq!(empty.list("/"), Ok(vec![]));
        assert!(empty.files().is_empty());
    }

    #[test]
    fn new_rejects_bad_paths() {
        for bad in [
            vec!["a/../b"],
            vec![".."],
            vec!["/../a"],
            vec!["a\0b"],
            vec![""],
            vec!["/"],
            vec!["."],
            vec!["a/"],
            vec!["a", "a/b"],
            vec!["a/b/c", "/a/b"],
            vec!["a", "/a"],
        ] {
            let files = bad.iter().map(|p| (p.to_string(), b("x")));
            assert!(MemoryFiles::new(files, true).is_err(), "{bad:?}");
        }
        let long = "x".repeat(256);
        assert!(MemoryFiles::new([(long, b("x"))], true).is_err());
    }

    #[test]
    fn stat() {
        let m = sample(false);
        let s = m.stat("/d/b.csv").unwrap();
        assert_eq!((s.kind, s.size), (FileKind::File, 1));
        assert!(s.mtime_ns > 0);
        assert_eq!(m.stat("/d").map(|s| (s.kind, s.size)), Ok((FileKind::Dir, 0)));
        assert_eq!(m.stat("/nope"), Err(err(Errno::Noent)));
        assert_eq!(m.stat("/d/nope/x"), Err(err(Errno::Noent)));
        assert_eq!(m.stat("/a.txt/x"), Err(err(Errno::Notdir)));
        assert_eq!(m.stat("/a.txt/x/y"), Err(err(Errno::Notdir)));
    }

    #[test]
    fn list() {
        let m = MemoryFiles::new(
            ["/d/b", "/d/b.txt", "/d/b/x", "/d/a", "/d/c/deep/y", "/top"].map(|p| (p.to_owned(), b(""))),
            false,
        );
        assert!(m.is_err(), "/d/b is both a file and a folder");
        let m = MemoryFiles::new(
            ["/d/b.txt", "/d/b/x", "/d/a", "/d/c/deep/y", "/top"].map(|p| (p.to_owned(), b(""))),
            false,
        )
        .unwrap();
        let want =
            [("a", FileKind::File), ("b", FileKind::Dir), ("b.txt", FileKind::File), ("c", FileKind::Dir)];
        assert_eq!(m.list("/d"), Ok(want.map(|(n, k)| (n.to_owned(), k)).to_vec()));
        assert_eq!(
            m.list("/"),
            Ok(vec![("d".to_owned(), FileKind::Dir), ("top".to_owned(), FileKind::File)])
        );
        assert_eq!(m.list("/d/c/deep"), Ok(vec![("y".to_owned(), FileKind::File)]));
        assert_eq!(m.list("/nope"), Err(err(Errno::Noent)));
        assert_eq!(m.list("/top"), Err(err(Errno::Notdir)));
        assert_eq!(m.list("/top/x"), Err(err(Errno::Notdir)));
    }

    #[test]
    fn read() {
        let m = sample(false);
        let data = m.read("/d/e/c.bin").unwrap();
        assert_eq!(data, b("C"));
        // A cheap clone: the same buffer as the stored one.
        assert_eq!(data.as_ptr(), m.read("/d/e/c.bin").unwrap().as_ptr());
        assert_eq!(m.read("/nope"), Err(err(Errno::Noent)));
        assert_eq!(m.read("/d"), Err(err(Errno::Isdir)));
        assert_eq!(m.read("/"), Err(err(Errno::Isdir)));
        assert_eq!(m.read("/a.txt/x"), Err(err(Errno::Notdir)));
    }

    #[test]
    fn read_only_refuses_every_change() {
        let m = sample(false);
        assert_eq!(m.write("/a.txt", b("x")), Err(err(Errno::Rofs)));
        assert_eq!(m.write("/new", b("x")), Err(err(Errno::Rofs)));
        assert_eq!(m.mkdir("/n"), Err(err(Errno::Rofs)));
        assert_eq!(m.remove("/a.txt"), Err(err(Errno::Rofs)));
        assert_eq!(m.rmdir("/d/e"), Err(err(Errno::Rofs)));
        assert_eq!(m.rename("/a.txt", "/b.txt"), Err(err(Errno::Rofs)));
        assert_eq!(m.remove("/nope"), Err(err(Errno::Rofs)));
        assert_eq!(paths(&m), ["/a.txt", "/d/b.csv", "/d/e/c.bin"]);
        assert!(m.inline());
    }

    #[test]
    fn write() {
        let m = sample(true);
        m.write("/a.txt", b("new")).unwrap();
        assert_eq!(m.read("/a.txt"), Ok(b("new")));
        m.write("/d/e/f", b("")).unwrap();
        assert_eq!(m.stat("/d/e/f").map(|s| (s.kind, s.size)), Ok((FileKind::File, 0)));
        assert_eq!(m.write("/nope/x", b("")), Err(err(Errno::Noent)));
        assert_eq!(m.write("/a.txt/x", b("")), Err(err(Errno::Notdir)));
        assert_eq!(m.write("/a.txt/x/y", b("")), Err(err(Errno::Notdir)));
        assert_eq!(m.write("/d", b("")), Err(err(Errno::Isdir)));
        assert_eq!(m.write("/", b("")), Err(err(Errno::Isdir)));
        assert_eq!(paths(&m), ["/a.txt", "/d/b.csv", "/d/e/c.bin", "/d/e/f"]);
    }

    #[test]
    fn mtimes() {
        let m = sample(true);
        let before = m.stat("/d/e").unwrap().mtime_ns;
        assert_eq!(before, m.stat("/a.txt").unwrap().mtime_ns);
        std::thread::sleep(std::time::Duration::from_millis(2));
        m.write("/d/e/new", b("x")).unwrap();
        let after = m.stat("/d/e/new").unwrap().mtime_ns;
        assert!(after > before);
        assert_eq!(m.stat("/d/e").unwrap().mtime_ns, after, "a new entry changes its folder");
        assert_eq!(m.stat("/d").unwrap().mtime_ns, before);
    }

    #[test]
    fn mkdir() {
        let m = sample(true);
        m.mkdir("/n").unwrap();
        m.mkdir("/n/m").unwrap();
        assert_eq!(kind(&m, "/n/m"), Ok(FileKind::Dir));
        assert_eq!(m.list("/n/m"), Ok(vec![]));
        assert_eq!(m.mkdir("/n"), Err(err(Errno::Exist)));
        assert_eq!(m.mkdir("/a.txt"), Err(err(Errno::Exist)));
        assert_eq!(m.mkdir("/"), Err(err(Errno::Exist)));
        assert_eq!(m.mkdir("/x/y"), Err(err(Errno::Noent)));
        assert_eq!(m.mkdir("/a.txt/y"), Err(err(Errno::Notdir)));
    }

    #[test]
    fn remove() {
        let m = sample(true);
        m.remove("/d/b.csv").unwrap();
        assert_eq!(m.stat("/d/b.csv"), Err(err(Errno::Noent)));
        assert_eq!(m.remove("/d/b.csv"), Err(err(Errno::Noent)));
        assert_eq!(m.remove("/d/e"), Err(err(Errno::Isdir)));
        assert_eq!(m.remove("/"), Err(err(Errno::Isdir)));
        assert_eq!(m.remove("/a.txt/x"), Err(err(Errno::Notdir)));
        assert_eq!(paths(&m), ["/a.txt", "/d/e/c.bin"]);
    }

    #[test]
    fn rmdir() {
        let m = sample(true);
        assert_eq!(m.rmdir("/d/e"), Err(err(Errno::Notempty)));
        assert_eq!(m.rmdir("/d/e/c.bin"), Err(err(Errno::Notdir)));
        assert_eq!(m.rmdir("/nope"), Err(err(Errno::Noent)));
        assert_eq!(m.rmdir("/"), Err(err(Errno::Busy)));
        m.remove("/d/e/c.bin").unwrap();
        m.rmdir("/d/e").unwrap();
        assert_eq!(m.stat("/d/e"), Err(err(Errno::Noent)));
        assert_eq!(m.list("/d"), Ok(vec![("b.csv".to_owned(), FileKind::File)]));
        // A folder whose name is a prefix of a sibling's is empty all the same.
        m.mkdir("/p").unwrap();
        m.mkdir("/p.q").unwrap();
        m.rmdir("/p").unwrap();
    }

    #[test]
    fn rename_files() {
        let m = sample(true);
        m.rename("/a.txt", "/d/e/moved").unwrap();
        assert_eq!(m.read("/d/e/moved"), Ok(b("A")));
        assert_eq!(m.stat("/a.txt"), Err(err(Errno::Noent)));
        // A file over a file replaces it.
        m.rename("/d/e/moved", "/d/b.csv").unwrap();
        assert_eq!(m.read("/d/b.csv"), Ok(b("A")));
        assert_eq!(paths(&m), ["/d/b.csv", "/d/e/c.bin"]);
        m.rename("/d/b.csv", "/d/b.csv").unwrap();
        assert_eq!(m.read("/d/b.csv"), Ok(b("A")));
        assert_eq!(m.rename("/nope", "/x"), Err(err(Errno::Noent)));
        assert_eq!(m.rename("/d/b.csv", "/nope/x"), Err(err(Errno::Noent)));
        assert_eq!(m.rename("/d/b.csv", "/d/e/c.bin/x"), Err(err(Errno::Notdir)));
        assert_eq!(m.rename("/d/b.csv", "/d/e"), Err(err(Errno::Isdir)));
        assert_eq!(m.rename("/d/b.csv", "/"), Err(err(Errno::Busy)));
        assert_eq!(m.rename("/", "/x"), Err(err(Errno::Busy)));
        assert_eq!(paths(&m), ["/d/b.csv", "/d/e/c.bin"]);
    }

    #[test]
    fn rename_folders() {
        let m = sample(true);
        assert_eq!(m.rename("/d", "/a.txt"), Err(err(Errno::Notdir)));
        assert_eq!(m.rename("/d", "/d/e/x"), Err(err(Errno::Inval)));
        assert_eq!(m.rename("/d", "/d/x"), Err(err(Errno::Inval)));
        assert_eq!(m.rename("/d/e", "/d"), Err(err(Errno::Notempty)));
        m.mkdir("/empty").unwrap();
        assert_eq!(m.rename("/empty", "/d"), Err(err(Errno::Notempty)));
        // A folder moves with its whole subtree, over an empty folder.
        m.rename("/d", "/empty").unwrap();
        assert_eq!(paths(&m), ["/a.txt", "/empty/b.csv", "/empty/e/c.bin"]);
        assert_eq!(kind(&m, "/empty/e"), Ok(FileKind::Dir));
        assert_eq!(m.stat("/d"), Err(err(Errno::Noent)));
        assert_eq!(m.stat("/d/e"), Err(err(Errno::Noent)));
        // Into a sibling folder whose name starts with the same letters.
        m.mkdir("/e").unwrap();
        m.rename("/empty/e", "/e/f").unwrap();
        assert_eq!(paths(&m), ["/a.txt", "/e/f/c.bin", "/empty/b.csv"]);
        assert_eq!(
            m.list("/"),
            Ok(vec![
                ("a.txt".to_owned(), FileKind::File),
                ("e".to_owned(), FileKind::Dir),
                ("empty".to_owned(), FileKind::Dir)
            ])
        );
        // A name that only starts like the folder's is not in its subtree.
        m.mkdir("/e/f.x").unwrap();
        m.rename("/e/f", "/e/f.x/g").unwrap();
        assert_eq!(paths(&m), ["/a.txt", "/e/f.x/g/c.bin", "/empty/b.csv"]);
    }

    #[test]
    fn observer_sees_each_change_once_and_no_failure() {
        let (m, seen) = observed();
        m.write("/a.txt", b("1")).unwrap();
        m.mkdir("/n").unwrap();
        m.rename("/a.txt", "/n/a.txt").unwrap();
        m.rename("/n/a.txt", "/n/a.txt").unwrap(); // no change
        m.remove("/n/a.txt").unwrap();
        m.rmdir("/n").unwrap();
        m.rename("/d", "/r").unwrap();
        // Failures: nothing seen.
        assert!(m.write("/nope/x", b("")).is_err());
        assert!(m.mkdir("/r").is_err());
        assert!(m.remove("/r").is_err());
        assert!(m.rmdir("/r").is_err());
        assert!(m.rename("/r", "/r/x").is_err());
        assert_eq!(
            *seen.lock(),
            [
                Change::Write("/a.txt".to_owned(), b("1")),
                Change::Mkdir("/n".to_owned()),
                Change::Rename("/a.txt".to_owned(), "/n/a.txt".to_owned()),
                Change::Remove("/n/a.txt".to_owned()),
                Change::Rmdir("/n".to_owned()),
                Change::Rename("/d".to_owned(), "/r".to_owned()),
            ]
        );
    }

    #[test]
    fn observer_may_read_the_files() {
        let m = Arc::new(Mutex::new(None::<Arc<MemoryFiles>>));
        let slot = m.clone();
        let files = Arc::new(sample(true).with_observer(Box::new(move |_| {
            let guard = slot.lock();
            let seen = guard.as_ref().map(|f| f.files().len());
            assert_eq!(seen, Some(4));
        })));
        *m.lock() = Some(files.clone());
        files.write("/new", b("x")).unwrap();
        // Break the cycle.
        m.lock().take();
    }
}
