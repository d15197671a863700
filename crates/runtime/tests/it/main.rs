//! Integration tests of the runtime against the real guest artifacts.
//!
//! They need `cargo xtask dist` (or `$WASI_PYTHON_ARTIFACTS`); `cargo xtask test`
//! provides both. Without artifacts every test fails with the command that fixes it.

mod display;
mod door;
mod files;
mod fork;
mod idle_memory;
mod image_build;
mod limits;
mod mounts;
mod programs;
mod rest;
mod sandbox;
mod snapshot;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use wasi_python_runtime::{Artifacts, Completed, NoticeKind, RunConfig, Runtime};

pub(crate) fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let dir = std::env::var_os("WASI_PYTHON_ARTIFACTS")
            .map(PathBuf::from)
            .or_else(|| {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
                Some(target.join("dist"))
            })
            .unwrap();
        let artifacts = Artifacts::open(&dir).unwrap_or_else(|e| {
            panic!("these tests need the guest artifacts ({e}); run `cargo xtask test`")
        });
        Runtime::new(artifacts)
    })
}

/// A scratch folder on the host for one test, removed when dropped.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("wp-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A cache folder of a test's own: the shared runtime's compiled guest (hard links, in a
/// folder beside its own, so on the same file system) and no preload image. Removed
/// when dropped.
pub(crate) struct Cache(pub(crate) PathBuf);

impl Cache {
    pub(crate) fn new(name: &str) -> Cache {
        // The shared runtime compiles the guest into the shared cache first, if needed.
        assert_eq!(py("pass").exit_code, Some(0));
        let shared = wasi_python_runtime::default_cache_dir();
        let dir = shared.join(format!("test-image-build-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        for entry in std::fs::read_dir(&shared).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().is_ok_and(|t| t.is_file()) && !name.contains("-preload-") {
                let _ = std::fs::hard_link(entry.path(), dir.join(&name));
            }
        }
        Cache(dir)
    }

    /// A runtime over `artifacts` caching here.
    pub(crate) fn runtime(&self, artifacts: &Artifacts) -> Runtime {
        Runtime::builder(artifacts.clone())
            .cache_dir(&self.0)
            .pooling(false)
            .notices(|n| assert_ne!(n.kind, NoticeKind::Compiling, "the compiled guest was not in the cache: {n}"))
            .build()
    }

    /// The preload image files (`*.img`) here, by name.
    pub(crate) fn images(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "img"))
            .collect();
        found.sort();
        found
    }

    /// Removes the preload images and everything beside them (sidecars, hashes), as the
    /// cache sweep or a user clearing the cache does.
    pub(crate) fn forget_images(&self) {
        for entry in std::fs::read_dir(&self.0).unwrap().flatten() {
            if entry.file_name().to_string_lossy().contains("-preload-") {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `code` with `-c` and a test-sized deadline.
pub(crate) fn py(code: &str) -> Completed {
    run(RunConfig::new(["-c", code]))
}

pub(crate) fn run(cfg: RunConfig) -> Completed {
    let cfg = cfg.deadline(Some(Duration::from_secs(30)));
    runtime().run(cfg).expect("the run starts")
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
