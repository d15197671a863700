//! Preload images are built from fixed inputs (src/fixed.rs): the same artifacts build
//! the same bytes in any cache folder, on any copy of the artifacts, so a session
//! snapshot saved over an image loads over a rebuilt one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasi_python_runtime::{Artifacts, Preload, RunConfig, Runtime, SessionLimits, Snapshot, Turn};

use crate::{Cache, Dir, runtime, text};

/// A copy of the artifacts: every file new, so other inodes, times and link counts, as
/// another machine's installation has.
fn copied_artifacts(into: &Path) -> Artifacts {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let (src, dst) = (entry.path(), to.join(entry.file_name()));
            if std::fs::metadata(&src).unwrap().is_dir() {
                copy(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }
    copy(runtime().artifacts().dir(), into);
    Artifacts::open(into).unwrap()
}

fn turn(code: &str) -> Turn {
    Turn { code: code.into(), deadline: Some(Duration::from_secs(60)), output_bytes: 1 << 20, ..Default::default() }
}

/// Opens a session on `rt` from `cfg`, runs `code`, and returns its output.
fn session_output(rt: &Runtime, cfg: RunConfig, code: &str) -> String {
    let s = rt.open_session(cfg, SessionLimits::default()).expect("a session opens");
    let done = s.turn(turn(code)).expect("the turn runs");
    assert_eq!(done.exit_code, Some(0), "{code}: {}", text(&done.stderr));
    text(&done.stdout)
}

/// A session over `preload` with a variable set, saved.
fn saved_session(rt: &Runtime, preload: Preload) -> Vec<u8> {
    let s = rt.open_session(RunConfig::new(Vec::<String>::new()).preload(preload), SessionLimits::default()).unwrap();
    let done = s.turn(turn("import numpy as np\nx = 41\narr = np.arange(4)")).unwrap();
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    s.snapshot().unwrap().to_bytes(rt).unwrap()
}

/// Loads `bytes` on `rt` and reads the saved session's variables in a fork.
fn loaded_output(rt: &Runtime, bytes: &[u8]) -> String {
    let loaded: Snapshot = rt.load_snapshot(bytes).expect("the saved snapshot loads");
    session_output(rt, RunConfig::new(Vec::<String>::new()).snapshot(loaded), "print(x + 1, int(arr.sum()))")
}

fn sha(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The default preload (numpy, pandas, pyplot: matplotlib lists its font folders) built
/// in two empty cache folders, the second over a copy of the artifacts, is the same file
/// byte for byte; a snapshot saved over the first loads over the second; and once the
/// first cache loses its image, loading the file builds it again (the default preload
/// only) and loads.
#[test]
fn the_default_preload_builds_the_same_image_anywhere_and_a_saved_file_loads_over_a_rebuilt_one() {
    let (here, there) = (Cache::new("here"), Cache::new("there"));
    let copy = Dir::new("image-build-artifacts");
    let rt = here.runtime(runtime().artifacts());
    let saved = saved_session(&rt, Preload::Default);
    let [built] = &here.images()[..] else { panic!("one image: {:?}", here.images()) };

    let other = there.runtime(&copied_artifacts(&copy.0));
    assert_eq!(session_output(&other, RunConfig::new(Vec::<String>::new()).preload(Preload::Default), "print(7)"), "7\n");
    let [rebuilt] = &there.images()[..] else { panic!("one image: {:?}", there.images()) };
    assert_eq!(built.file_name(), rebuilt.file_name(), "the same artifacts name the same image");
    assert_eq!(sha(built), sha(rebuilt), "the same artifacts build the same bytes");
    assert_eq!(loaded_output(&other, &saved), "42 6\n", "a file saved over one loads over the other");

    // The cache loses the image (the sweep, or a user clearing it): a new process loads
    // the file, building the default preload again.
    drop(rt);
    let first = sha(built);
    here.forget_images();
    let later = here.runtime(runtime().artifacts());
    assert_eq!(loaded_output(&later, &saved), "42 6\n");
    assert_eq!(sha(built), first, "the image built again is the same");
}

/// A snapshot saved over an image of other modules loads after that image is deleted
/// and a run preloading them builds it again; before that, its load is refused by kind
/// ("other_base") without building anything: a file never starts a build of its own.
#[test]
fn a_saved_snapshot_loads_after_its_base_image_is_deleted_and_rebuilt() {
    let cache = Cache::new("rebuilt");
    let numpy = || Preload::Modules(vec!["numpy".into()]);
    let rt = cache.runtime(runtime().artifacts());
    let saved = saved_session(&rt, numpy());
    let [image] = &cache.images()[..] else { panic!("one image: {:?}", cache.images()) };
    let (image, first) = (image.clone(), sha(image));
    drop(rt);

    cache.forget_images();
    let later = cache.runtime(runtime().artifacts());
    assert_eq!(later.load_snapshot(&saved).unwrap_err().kind(), "other_base");
    assert_eq!(cache.images(), Vec::<PathBuf>::new(), "a load builds no image of its own");
    let done = later.run(RunConfig::new(["-c", "import numpy; print(numpy.__name__)"]).preload(numpy())).unwrap();
    assert_eq!(text(&done.stdout), "numpy\n", "{}", text(&done.stderr));
    assert_eq!(sha(&image), first, "the rebuilt image is the one the file was saved over");
    assert_eq!(loaded_output(&later, &saved), "42 6\n");
}

/// The build's fixed inputs stay in the build: two runs, and two sessions, from the same
/// image draw different numbers from every source a fresh CPython seeds anew (`random`,
/// `os.urandom`, `uuid4`, tempfile's names, numpy's global and new generators) and read
/// the host's clocks. String hashing is as in a run without an image: the guest's
/// CPython has hash randomisation off (`sys.flags.hash_randomization` 0), image or not.
#[test]
fn runs_and_sessions_from_an_image_draw_fresh_entropy_and_read_the_host_clocks() {
    const PROBE: &str = "\
import os, random, sys, tempfile, time, uuid, numpy as np
now = float(os.environ['NOW'])
print(random.random(), os.urandom(8).hex(), uuid.uuid4(), next(tempfile._get_candidate_names()),
      np.random.random(), np.random.default_rng().integers(2**62),
      sys.flags.hash_randomization, hash('abc'), abs(time.time() - now) < 60, time.monotonic() > 3600)";
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64().to_string();
    let cfg = |preload: Preload| RunConfig::new(["-c", PROBE]).preload(preload).env("NOW", now.clone());
    let plain = text(&crate::run(cfg(Preload::Nothing)).stdout);
    let fields = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let fresh = fields(&plain)[6..].to_vec();
    assert_eq!(fresh, ["0", fields(&plain)[7].as_str(), "True", "True"], "{plain}");
    for preload in [Preload::Modules(vec!["numpy".into()]), Preload::Default] {
        let session = |cfg: RunConfig| {
            let s = runtime().open_session(cfg.clone(), SessionLimits::default()).unwrap();
            let done = s.turn(turn(&format!("import os\nos.environ['NOW'] = {now:?}\nexec({PROBE:?})"))).unwrap();
            text(&done.stdout)
        };
        let outputs = [
            text(&crate::run(cfg(preload.clone())).stdout),
            text(&crate::run(cfg(preload.clone())).stdout),
            session(RunConfig::new(Vec::<String>::new()).preload(preload.clone())),
            session(RunConfig::new(Vec::<String>::new()).preload(preload.clone())),
        ];
        for (i, a) in outputs.iter().enumerate() {
            let a = fields(a);
            assert_eq!(a.len(), 10, "{outputs:?}");
            assert_eq!(a[6..], fresh[..], "hashing and clocks as without an image: {outputs:?}");
            for b in &outputs[i + 1..] {
                for (x, y) in a[..6].iter().zip(&fields(b)[..6]) {
                    assert_ne!(x, y, "{outputs:?}");
                }
            }
        }
    }
}
