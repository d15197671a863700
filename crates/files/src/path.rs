//! Resolving the path a guest's WASI `path_*` call names into a normalised path inside
//! its mount, the only form a [`FileProvider`](crate::FileProvider) ever sees.
//! Nothing the guest sends can climb above the mount's root.

use crate::errno::Errno;

/// The longest component, in bytes (NAME_MAX).
const NAME_MAX: usize = 255;
/// The longest resolved path, in bytes (PATH_MAX).
const PATH_MAX: usize = 4096;

/// A path inside a mount, normalised: "/" is the mount root, "/a/b" a file or folder in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: String,
    /// The guest's path ended with `/`, `/.` or `/..` (or was `.` or `..`): it must name
    /// a folder.
    pub dir_only: bool,
}

/// Joins `rel` (the path bytes a WASI `path_*` call got, relative to the folder `base`)
/// onto `base` (a normalised mount path, "/" or "/a/b") and normalises the result.
///
/// Empty and `.` components are skipped; `..` pops one, and popping above the mount's
/// root is refused with ENOTCAPABLE, whatever follows.
pub fn resolve(base: &str, rel: &[u8]) -> Result<Resolved, Errno> {
    let rel = std::str::from_utf8(rel).map_err(|_| Errno::Ilseq)?;
    if rel.contains('\0') {
        return Err(Errno::Inval);
    }
    if rel.is_empty() {
        return Err(Errno::Noent);
    }
    if rel.starts_with('/') {
        return Err(Errno::Notcapable);
    }
    let mut parts: Vec<&str> = base.split('/').filter(|c| !c.is_empty()).collect();
    for c in rel.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop().ok_or(Errno::Notcapable)?;
            }
            _ if c.len() > NAME_MAX => return Err(Errno::Nametoolong),
            _ => parts.push(c),
        }
    }
    let path = if parts.is_empty() { "/".to_owned() } else { format!("/{}", parts.join("/")) };
    if path.len() > PATH_MAX {
        return Err(Errno::Nametoolong);
    }
    let dir_only = matches!(rel.rsplit('/').next(), Some("" | "." | ".."));
    Ok(Resolved { path, dir_only })
}

/// The folder holding `path` ("/a/b" → "/a", "/a" → "/"); `None` for the root.
pub fn parent(path: &str) -> Option<&str> {
    match path.rfind('/')? {
        _ if path == "/" => None,
        0 => Some("/"),
        i => Some(&path[..i]),
    }
}

/// The last component of `path` ("/a/b" → "b"); "" for the root.
pub fn file_name(path: &str) -> &str {
    path.rfind('/').map_or(path, |i| &path[i + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(path: &str, dir_only: bool) -> Result<Resolved, Errno> {
        Ok(Resolved { path: path.to_owned(), dir_only })
    }

    #[test]
    fn table() {
        let long = "x".repeat(256);
        let max = "x".repeat(255);
        let long_up = format!("{long}/..");
        let deep = vec!["x".repeat(200); 21].join("/"); // 21 × 201 = 4221 bytes
        let cases: Vec<(&str, &[u8], Result<Resolved, Errno>)> = vec![
            ("/", b"a", ok("/a", false)),
            ("/", b"a/b", ok("/a/b", false)),
            ("/a", b"b", ok("/a/b", false)),
            ("/a/b", b"c/d.txt", ok("/a/b/c/d.txt", false)),
            ("/", b".", ok("/", true)),
            ("/", b"./", ok("/", true)),
            ("/a", b".", ok("/a", true)),
            ("/a", b"..", ok("/", true)),
            ("/a/b", b"..", ok("/a", true)),
            ("/a", b"b/", ok("/a/b", true)),
            ("/a", b"b/.", ok("/a/b", true)),
            ("/a", b"b/..", ok("/a", true)),
            ("/", b"a//b", ok("/a/b", false)),
            ("/", b"a/./b", ok("/a/b", false)),
            ("/", b"./a", ok("/a", false)),
            ("/", b"a/../b", ok("/b", false)),
            ("/", b"a/b/../../c", ok("/c", false)),
            ("/", b"a/..", ok("/", true)),
            ("/", b"...", ok("/...", false)),
            ("/", b".a", ok("/.a", false)),
            ("/", b"a..", ok("/a..", false)),
            ("/", "é".as_bytes(), ok("/é", false)),
            ("/", max.as_bytes(), Ok(Resolved { path: format!("/{max}"), dir_only: false })),
            ("/", b"", Err(Errno::Noent)),
            ("/a", b"", Err(Errno::Noent)),
            ("/", b"/", Err(Errno::Notcapable)),
            ("/", b"/a", Err(Errno::Notcapable)),
            ("/", b"..", Err(Errno::Notcapable)),
            ("/", b"../a", Err(Errno::Notcapable)),
            ("/a", b"../..", Err(Errno::Notcapable)),
            ("/", b"a/../..", Err(Errno::Notcapable)),
            ("/", b"a/../../a", Err(Errno::Notcapable)),
            ("/", b"a\0b", Err(Errno::Inval)),
            ("/", b"\xff", Err(Errno::Ilseq)),
            ("/", b"a/\xc3", Err(Errno::Ilseq)),
            ("/", long.as_bytes(), Err(Errno::Nametoolong)),
            ("/", long_up.as_bytes(), Err(Errno::Nametoolong)),
            ("/", deep.as_bytes(), Err(Errno::Nametoolong)),
        ];
        for (base, rel, want) in cases {
            assert_eq!(resolve(base, rel), want, "base {base:?}, rel {:?}", String::from_utf8_lossy(rel));
        }
    }

    #[test]
    fn result_at_path_max() {
        // "/" + 16 × 255 + 15 separators = 4096 bytes: allowed; one more byte is not.
        let parts = vec!["x".repeat(255); 16].join("/");
        assert_eq!(resolve("/", parts.as_bytes()).map(|r| r.path.len()), Ok(4096));
        assert_eq!(resolve("/", format!("{parts}y").as_bytes()), Err(Errno::Nametoolong));
    }

    #[test]
    fn parent_and_file_name() {
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(file_name("/a/b"), "b");
        assert_eq!(file_name("/a"), "a");
        assert_eq!(file_name("/"), "");
    }

    proptest! {
        #[test]
        fn never_escapes_and_is_normal(
            base in prop::sample::select(vec!["/", "/a", "/a/b"]),
            pieces in prop::collection::vec(prop::sample::select(vec!["a", "/", ".", ".."]), 0..24),
        ) {
            let rel = pieces.concat();
            if let Ok(r) = resolve(base, rel.as_bytes()) {
                let p = r.path;
                prop_assert!(p.starts_with('/'), "{p}");
                prop_assert!(!p.contains("//") && !p.contains("/./") && !p.contains("/../"), "{p}");
                prop_assert!(!p.ends_with("/.") && !p.ends_with("/.."), "{p}");
                prop_assert!(p == "/" || !p.ends_with('/'), "{p}");
                // Splitting it again and joining gives it back.
                if let Some(dir) = parent(&p) {
                    let again = resolve(dir, file_name(&p).as_bytes()).map(|r| r.path);
                    prop_assert_eq!(again, Ok(p.clone()));
                }
            }
        }
    }
}
