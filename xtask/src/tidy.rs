//! Tidy checks that run as `#[test]`s (as rust-analyzer's `tidy.rs`): the map in
//! ARCHITECTURE.md names every source file, and every module says what it is in its
//! first line (a `//!` line in Rust, a docstring in Python); and the extension and the
//! tests build one feature set of every shared dependency (so wasmtime is compiled once).

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::util::workspace_root;

    /// The folders whose source files the map must name, and their endings.
    const SOURCES: &[(&str, &str)] = &[
        ("crates", ".rs"),
        ("xtask/src", ".rs"),
        ("python/wasi_python", ".py"),
        ("guest", ".py"),
        ("fuzz/src", ".rs"),
        ("fuzz/fuzz_targets", ".rs"),
    ];

    /// What is not the project's own source: tests, benches, caches, the vendored
    /// wasmtime and laid-out artifacts.
    fn skipped(rel: &str) -> bool {
        rel.split('/').any(|part| {
            matches!(part, "tests" | "benches" | "target" | "__pycache__" | "_artifacts" | "third_party")
        })
    }

    fn files(root: &Path, dir: &Path, ending: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            if skipped(&rel) {
                continue;
            }
            if path.is_dir() {
                files(root, &path, ending, out);
            } else if rel.ends_with(ending) {
                out.push(path);
            }
        }
    }

    fn sources() -> Vec<(PathBuf, String)> {
        let root = workspace_root();
        let mut out = Vec::new();
        for (dir, ending) in SOURCES {
            let mut found = Vec::new();
            files(&root, &root.join(dir), ending, &mut found);
            out.extend(found.into_iter().map(|p| {
                let rel = p.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
                (p, rel)
            }));
        }
        out.sort();
        assert!(out.len() > 50, "the tidy walk found only {} source files: is the root right?", out.len());
        out
    }

    /// A file is named when its path from the root appears in the map, or its path
    /// within its crate's `src/` (or package folder) under a heading naming that crate.
    fn named(map: &str, rel: &str) -> bool {
        if map.contains(rel) {
            return true;
        }
        // `crates/door/src/bounded.rs` may be written `bounded.rs` in the section of
        // `crates/door`: the section is the text from the crate's heading to the next.
        let (section, short) = match rel.split_once("/src/") {
            Some((krate, short)) => (krate.to_owned(), short.to_owned()),
            None => match rel.rsplit_once('/') {
                Some((dir, file)) => (dir.to_owned(), file.to_owned()),
                None => return false,
            },
        };
        let Some(start) = map.find(&format!("### `{section}`")) else { return false };
        let rest = &map[start + 4..];
        let end = rest.find("\n### ").unwrap_or(rest.len());
        rest[..end].contains(&format!("`{short}`"))
    }

    #[test]
    fn the_map_names_every_source_file() {
        let map = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let missing: Vec<String> = sources().into_iter().map(|(_, rel)| rel).filter(|rel| !named(&map, rel)).collect();
        assert!(missing.is_empty(), "ARCHITECTURE.md does not name these source files:\n  {}", missing.join("\n  "));
    }

    #[test]
    fn every_module_says_what_it_is_first() {
        let mut silent = Vec::new();
        for (path, rel) in sources() {
            let text = std::fs::read_to_string(&path).unwrap();
            let ok = if rel.ends_with(".rs") {
                text.lines().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("//!"))
            } else {
                // A module docstring, after any comment lines (a shebang, a licence).
                let first = text.lines().find(|l| !l.trim().is_empty() && !l.starts_with('#')).unwrap_or("");
                first.trim_start_matches('r').starts_with("\"\"\"")
            };
            if !ok {
                silent.push(rel);
            }
        }
        assert!(silent.is_empty(), "these modules do not open with a line saying what they are:\n  {}", silent.join("\n  "));
    }

    #[test]
    fn the_check_itself_finds_what_it_should() {
        let map = "## Code map\n### `crates/door`\nThe door. `bounded.rs` runs a call.\n### `crates/runtime`\n`guest.rs`, \
                   `mounts/calls.rs`\n### `guest/host`\n`tools.py`\n### `fuzz`\n`lib.rs`; fuzz/fuzz_targets/validate.rs\n";
        let cases = [
            ("crates/door/src/bounded.rs", true),
            ("crates/door/src/tool.rs", false),
            ("crates/runtime/src/guest.rs", true),
            // A name in another crate's section does not count.
            ("crates/runtime/src/bounded.rs", false),
            ("crates/schema/src/lib.rs", false),
            // A file under `src/` is named by its path inside it.
            ("crates/runtime/src/mounts/calls.rs", true),
            ("crates/runtime/src/calls.rs", false),
            // A file outside a `src/` folder is in the section of its folder.
            ("guest/host/tools.py", true),
            ("guest/tools.py", false),
            ("fuzz/src/lib.rs", true),
            // Or it is named by its whole path, anywhere.
            ("fuzz/fuzz_targets/validate.rs", true),
            ("fuzz/fuzz_targets/frame_decode.rs", false),
        ];
        for (rel, want) in cases {
            assert_eq!(named(map, rel), want, "{rel}");
        }
    }

    /// Each package with the features it is built with, for `args` of `cargo tree`.
    fn feature_sets(args: &[&str]) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            .arg("tree")
            .args(args)
            .args(["--prefix", "none", "--no-dedupe", "--offline", "-f", "{p} {f}"])
            .current_dir(workspace_root())
            .output()
            .expect("running cargo tree");
        assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
        let mut sets = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut words = line.split(' ');
            if let (Some(name), Some(version)) = (words.next(), words.next()) {
                let features = words.filter(|w| !w.starts_with('(')).collect::<Vec<_>>().join(" ");
                sets.entry(format!("{name} {version}")).or_default().insert(features);
            }
        }
        sets
    }

    /// maturin builds the extension alone; `cargo test --workspace` builds it with every
    /// dev-dependency. A dependency built with other features in the two would be
    /// compiled twice, with all that stands on it (wasmtime): pybind's Cargo.toml names
    /// the dev-dependencies' features to keep the sets equal.
    #[test]
    fn one_feature_set_for_the_extension_and_the_tests() {
        let alone = feature_sets(&["-p", "wasi-python-pybind", "-e", "normal,build"]);
        let tests = feature_sets(&["--workspace", "-e", "normal,build,dev"]);
        let differ: Vec<String> = alone
            .iter()
            .filter(|(package, features)| tests.get(*package) != Some(*features))
            .map(|(package, features)| format!("{package}: {features:?} alone, {:?} in the tests", tests.get(package)))
            .collect();
        assert!(differ.is_empty(), "add these features to crates/pybind/Cargo.toml:\n{}", differ.join("\n"));
    }
}
