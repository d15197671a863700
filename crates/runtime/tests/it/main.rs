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

use wasi_python_runtime::{Artifacts, Completed, RunConfig, Runtime};

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
