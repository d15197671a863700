//! Notices: what the runtime tells its embedder that is neither an error nor a run's
//! result (a compile of minutes ahead, a shipped file it could not use, a default it
//! dropped), as a typed value handed to the sink the [`crate::Runtime`] was built with.
//!
//! The default sink writes `wasi_python: <message>` to stderr; an embedder with its own
//! reporting (the Python package: the `logging` logger `wasi_python`, and a list) sets
//! another through [`crate::RuntimeBuilder::notices`].

use std::sync::Arc;

/// What a [`Notice`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoticeKind {
    /// The guest is compiled now, once per machine and flavour: minutes of every core.
    /// No usable compiled copy was cached or shipped (the message says which was missing,
    /// damaged, or for another machine).
    Compiling,
    /// A file the package ships (a preload snapshot) is damaged, so it is built instead
    /// (seconds).
    ShippedUnusable,
    /// The default preload's snapshot cannot be loaded or built: runs that did not ask
    /// for `preload` start without it (slower first imports), once said per runtime.
    PreloadSkipped,
}

impl NoticeKind {
    /// The kind's name: `compiling`, `shipped_unusable`, `preload_skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Compiling => "compiling",
            NoticeKind::ShippedUnusable => "shipped_unusable",
            NoticeKind::PreloadSkipped => "preload_skipped",
        }
    }
}

/// One notice: its kind, and a sentence for a person (what happens and why).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Notice {
    pub kind: NoticeKind,
    pub message: String,
}

impl Notice {
    pub(crate) fn new(kind: NoticeKind, message: impl Into<String>) -> Notice {
        Notice { kind, message: message.into() }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Where a runtime's notices go. Called on the thread that does the work (the caller's,
/// a guest thread), possibly with the runtime's own locks held (a compile holds its
/// flavour's): a sink reports and returns, and never calls back into the runtime.
#[derive(Clone)]
pub(crate) struct Notices(Arc<dyn Fn(&Notice) + Send + Sync>);

impl Notices {
    pub(crate) fn new(sink: impl Fn(&Notice) + Send + Sync + 'static) -> Notices {
        Notices(Arc::new(sink))
    }

    /// The default: `wasi_python: <message>` on stderr.
    pub(crate) fn stderr() -> Notices {
        Notices::new(|n| eprintln!("wasi_python: {}", n.message))
    }

    pub(crate) fn say(&self, kind: NoticeKind, message: impl Into<String>) {
        (self.0)(&Notice::new(kind, message));
    }
}

impl Default for Notices {
    fn default() -> Notices {
        Notices::stderr()
    }
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notices")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use parking_lot::Mutex;

    use super::*;
    use crate::cached::tests::tempdir;
    use crate::{Artifacts, Flavour, Preload, RunConfig, Runtime};

    /// An artifact set whose module is the smallest wasm module (compiled in
    /// milliseconds), with no guest package, so no preload snapshot can be built.
    fn tiny_artifacts(dir: &Path) -> Artifacts {
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("m.wasm"), b"\0asm\x01\0\0\0").unwrap();
        std::fs::write(dir.join("lib/stdlib.zip"), b"").unwrap();
        let manifest = format!(
            "{}\npython 3.15.0\nmodule m.wasm {}\nstdlib lib/stdlib.zip\n",
            crate::MANIFEST_MAGIC,
            "ab".repeat(32)
        );
        std::fs::write(dir.join("MANIFEST"), manifest).unwrap();
        Artifacts::open(dir).unwrap()
    }

    /// A runtime over `artifacts` whose notices are kept in the list returned.
    fn collecting(artifacts: Artifacts, cache: &Path) -> (Runtime, Arc<Mutex<Vec<Notice>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let rt = Runtime::builder(artifacts)
            .cache_dir(cache)
            .pooling(false)
            .notices(move |n| sink.lock().push(n.clone()))
            .build();
        (rt, seen)
    }

    fn kinds(seen: &Mutex<Vec<Notice>>) -> Vec<NoticeKind> {
        seen.lock().iter().map(|n| n.kind).collect()
    }

    #[test]
    fn a_compile_reaches_the_runtimes_sink_once_and_a_cached_load_says_nothing() {
        let d = tempdir();
        let artifacts = tiny_artifacts(&d.join("artifacts"));
        let (rt, seen) = collecting(artifacts.clone(), &d.join("cache"));
        rt.prepare(Flavour::Plain).unwrap();
        rt.prepare(Flavour::Plain).unwrap();
        assert_eq!(kinds(&seen), [NoticeKind::Compiling], "{:?}", seen.lock());
        assert!(seen.lock()[0].message.contains("compiling the guest now"), "{:?}", seen.lock());
        // Another runtime (another process, as far as the cache knows) loads it silently.
        let (again, seen_again) = collecting(artifacts, &d.join("cache"));
        again.prepare(Flavour::Plain).unwrap();
        assert_eq!(kinds(&seen_again), []);
        // with_pooling makes a new runtime that keeps the sink.
        let (rt, seen) = collecting(tiny_artifacts(&d.join("artifacts")), &d.join("other-cache"));
        rt.with_pooling(true).with_pooling(false).prepare(Flavour::Plain).unwrap();
        assert_eq!(kinds(&seen), [NoticeKind::Compiling]);
    }

    #[test]
    fn a_default_preload_that_cannot_be_built_is_said_once_per_runtime() {
        let d = tempdir();
        let (rt, seen) = collecting(tiny_artifacts(&d.join("artifacts")), &d.join("cache"));
        rt.prepare(Flavour::Plain).unwrap();
        seen.lock().clear();
        for _ in 0..3 {
            let default = RunConfig::new(["-c", "pass"]).preload(Preload::Default);
            let (_, origin) = rt.flavour_for(&default).unwrap();
            assert!(matches!(origin, crate::fork::Origin::Bootstrap));
        }
        assert_eq!(kinds(&seen), [NoticeKind::PreloadSkipped], "{:?}", seen.lock());
        // A preload the run asked for fails the run instead, with no notice.
        let asked = RunConfig::new(["-c", "pass"]).preload(Preload::Modules(vec!["json".into()]));
        assert!(rt.flavour_for(&asked).is_err());
        assert_eq!(seen.lock().len(), 1);
    }

    #[test]
    fn a_damaged_shipped_snapshot_is_said_before_it_is_built_instead() {
        let d = tempdir();
        let dir = d.join("artifacts");
        let artifacts = tiny_artifacts(&dir);
        let modules = vec!["json".to_owned()];
        let image = crate::snapshot::image_path(&artifacts, &d.join("cache"), &modules).unwrap();
        let name = image.file_name().unwrap().to_str().unwrap();
        std::fs::create_dir_all(dir.join("compiled")).unwrap();
        std::fs::write(dir.join("compiled/x.zst"), b"not zstd at all").unwrap();
        let list = format!("{}\n{name} x.zst 65536\n", crate::COMPILED_MAGIC);
        std::fs::write(dir.join("compiled/COMPILED"), list).unwrap();
        let (rt, seen) = collecting(Artifacts::open(&dir).unwrap(), &d.join("cache"));
        rt.prepare(Flavour::Plain).unwrap();
        seen.lock().clear();
        // The build then fails too (these artifacts have no guest package).
        assert!(rt.prepare_preload(&Preload::Modules(modules)).is_err());
        assert_eq!(kinds(&seen), [NoticeKind::ShippedUnusable], "{:?}", seen.lock());
    }
}
