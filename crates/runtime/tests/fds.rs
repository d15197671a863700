//! A guest that takes every descriptor the process lets guests hold. In a test binary
//! of its own: while it holds them, other guests of the same process could open
//! nothing (that is the bound under test), so it must not share a process with them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wasi_python_runtime::{Artifacts, Grant, RunConfig, Runtime};

fn runtime() -> Runtime {
    let dir = std::env::var_os("WASI_PYTHON_ARTIFACTS").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
            .join("dist")
    });
    let artifacts = Artifacts::open(&dir)
        .unwrap_or_else(|e| panic!("these tests need the guest artifacts ({e}); run `cargo xtask test`"));
    Runtime::new(artifacts)
}

#[test]
fn the_host_can_open_files_while_a_guest_holds_all_it_may() {
    let dir = std::env::temp_dir().join(format!("wp-fds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The guest opens files until refused, says so in a file, and waits; meanwhile
    // this thread opens files of its own.
    let prog = "\
import errno, time
open('/tmp/f', 'w').close()
held = []
try:
    while True:
        # Unbuffered: a buffered file holds a 128 KiB buffer in 3.15, and 1 GiB of guest
        # memory ends at about 7,900 of them before any descriptor limit.
        held.append(open('/tmp/f', 'rb', buffering=0))
except OSError as e:
    err = errno.errorcode[e.errno]
held.pop().close()
with open('/out/full', 'w') as f:
    f.write('%d %s' % (len(held), err))
time.sleep(2)
";
    let rt = runtime();
    let handle = rt
        .start(
            RunConfig::new(["-c", prog])
                .max_open_files(usize::MAX)
                .grant(Grant::writable(&dir, "/out"))
                .deadline(Some(Duration::from_secs(60))),
        )
        .unwrap();
    let full = dir.join("full");
    let started = Instant::now();
    while std::fs::read_to_string(&full).map_or(true, |s| s.is_empty()) {
        assert!(started.elapsed() < Duration::from_secs(50), "the guest never filled its share");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut mine = Vec::new();
    for _ in 0..64 {
        mine.push(std::fs::File::open("/proc/self/status").expect("the host can still open files"));
    }
    let said = std::fs::read_to_string(&full).unwrap();
    let done = handle.wait().unwrap();
    assert_eq!(done.exit_code, Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let (held, errno) = said.split_once(' ').unwrap();
    assert!(held.parse::<usize>().unwrap() > 100, "{said}");
    assert_eq!(errno, "ENFILE", "past the process's share: {said}");
    assert_eq!(wasi_python_runtime::guest_descriptors_held(), 0, "all given back when the run ends");
    let _ = std::fs::remove_dir_all(&dir);
}
