//! Session snapshots (fork.rs): taken between turns, forked into sessions and runs, saved
//! and loaded; and each refusal by kind.

use std::time::Duration;

use wasi_python_runtime::image::{Header, Limits as ImageLimits, Pages, read_header};
use wasi_python_runtime::{Error, Preload, RunConfig, Runtime, Session, SessionLimits, Snapshot, SnapshotError, Turn};

use crate::{runtime, text};

fn turn(code: &str) -> Turn {
    Turn {
        code: code.into(),
        deadline: Some(Duration::from_secs(60)),
        output_bytes: 1 << 20,
        fuel: None,
        cancel: wasi_python_runtime::CancelToken::new(),
        ..Default::default()
    }
}

fn open(cfg: RunConfig) -> Session {
    runtime().open_session(cfg, SessionLimits::default()).expect("a session opens")
}

/// Runs `code` as a turn and returns its stdout, failing on a non-zero status.
fn ok(s: &Session, code: &str) -> String {
    let done = s.turn(turn(code)).expect("the turn runs");
    assert_eq!(done.exit_code, Some(0), "{code}: {}", text(&done.stderr));
    text(&done.stdout)
}

const SETUP: &str = "\
import numpy as np, random, time
x = 41
def f(a): return a + x
class Point:
    def __init__(self, a): self.a = a
    def twice(self): return 2 * self.a
def counter():
    n = 0
    def inc():
        nonlocal n
        n += 1
        return n
    return inc
c = counter(); c(); c()
arr = np.arange(12).reshape(3, 4)
np.random.rand()  # numpy imports numpy.random lazily: now it is in the snapshot
p = Point(5)
t0 = time.monotonic()
open('/tmp/scratch.txt', 'w').write('old')
";

const CHECK: &str = "print(f(1), p.twice(), c(), int(arr.sum()), type(p).__name__)";

fn warm() -> (Session, Snapshot) {
    let s = open(RunConfig::new(Vec::<String>::new()).preload(Preload::Modules(vec!["numpy".into()])));
    ok(&s, SETUP);
    let snap = s.snapshot().expect("a resting session snapshots");
    (s, snap)
}

#[test]
fn a_snapshot_forks_into_independent_sessions() {
    let (orig, snap) = warm();
    let a = open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()).env("WHO", "a"));
    let b = open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()).env("WHO", "b"));
    assert_eq!(ok(&a, CHECK), "42 10 3 66 Point\n");
    assert_eq!(ok(&a, "x = 100; arr[0, 0] = 1000; print(f(1), int(arr.sum()))"), "101 1066\n");
    // b and the original are untouched by a.
    assert_eq!(ok(&b, CHECK), "42 10 3 66 Point\n");
    assert_eq!(ok(&orig, CHECK), "42 10 3 66 Point\n");
    // The environment is the new caller's; the private folders are not carried.
    assert_eq!(ok(&a, "import os; print(os.environ.get('WHO'), os.path.exists('/tmp/scratch.txt'), os.getcwd())"), "a False /work\n");
    assert_eq!(ok(&b, "import os; print(os.environ['WHO'])"), "b\n");
    // The monotonic clock runs on from the snapshot's.
    assert_eq!(ok(&a, "print(time.monotonic() >= t0)"), "True\n");
    // A fork snapshots again, and that forks too.
    let again = a.snapshot().unwrap();
    let c = open(RunConfig::new(Vec::<String>::new()).snapshot(again));
    assert_eq!(ok(&c, "print(f(1), int(arr.sum()))"), "101 1066\n");
}

#[test]
fn forks_draw_different_random_numbers_unless_asked_to_keep() {
    let (_orig, snap) = warm();
    let draw = "print(random.random(), np.random.rand())";
    let fork = |keep| open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()).keep_random(keep));
    let (a, b) = (fork(false), fork(false));
    assert_ne!(ok(&a, draw), ok(&b, draw));
    let (c, d) = (fork(true), fork(true));
    assert_eq!(ok(&c, draw), ok(&d, draw));
}

#[test]
fn a_run_starts_from_a_snapshot() {
    let (_orig, snap) = warm();
    let done = runtime()
        .run(RunConfig::new(["-c", "import sys, numpy; print(sys.argv, 'numpy' in sys.modules)", "arg"]).snapshot(snap))
        .unwrap();
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "['-c', 'arg'] True\n");
}

#[test]
fn refusals_name_their_cause() {
    let (orig, snap) = warm();
    // A file held open.
    ok(&orig, "held = open('/tmp/held', 'w')");
    assert!(matches!(orig.snapshot(), Err(SnapshotError::OpenFiles { count: 1 })));
    ok(&orig, "held.close()");
    orig.snapshot().expect("closed: it snapshots again");
    // During a turn.
    let busy = orig.start_turn(turn("import time; time.sleep(1)")).unwrap();
    assert_eq!(orig.snapshot().unwrap_err().kind(), "busy");
    busy.wait().unwrap();
    // After the end.
    orig.close();
    assert_eq!(orig.snapshot().unwrap_err().kind(), "ended");
    // A memory larger than the new run's limit, before any guest code.
    let small = RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()).memory_bytes(snap.memory_bytes() - 65_536);
    match runtime().open_session(small, SessionLimits::default()) {
        Err(Error::InvalidConfig { param: "memory_bytes", .. }) => {}
        other => panic!("expected a memory_bytes refusal, got {other:?}"),
    }
}

#[test]
fn a_snapshot_saves_and_loads() {
    let (_orig, snap) = warm();
    let bytes = snap.to_bytes(runtime()).unwrap();
    eprintln!("saved: {} bytes for {} bytes of memory", bytes.len(), snap.memory_bytes());
    let header = read_header(&bytes, &ImageLimits::default()).unwrap();
    assert_eq!(header.base_modules, ["numpy"]);
    let loaded = runtime().load_snapshot(&bytes).unwrap();
    let s = open(RunConfig::new(Vec::<String>::new()).snapshot(loaded.clone()));
    assert_eq!(ok(&s, CHECK), "42 10 3 66 Point\n");
    // Saved again from the loaded one: the same pages.
    assert_eq!(loaded.to_bytes(runtime()).unwrap().len(), bytes.len());

    let kind = |b: &[u8]| runtime().load_snapshot(b).unwrap_err().kind();
    assert_eq!(kind(b"not a snapshot at all"), "magic");
    assert_eq!(kind(&bytes[..bytes.len() / 2]), "truncated");
    let mut flipped = bytes.clone();
    let at = bytes.len() - 10;
    flipped[at] ^= 0xff;
    assert_eq!(kind(&flipped), "checksum");
    let mut version = bytes.clone();
    version[8] = 99;
    assert_eq!(kind(&version), "version");
    let other = |edit: &dyn Fn(&mut Header)| {
        let mut h = header.clone();
        edit(&mut h);
        wasi_python_runtime::image::encode(&h, &Pages::new(), 1)
    };
    assert_eq!(kind(&other(&|h| h.module_sha256 = "00".repeat(32))), "other_guest");
    assert_eq!(kind(&other(&|h| h.wasmtime = "47.0.0".into())), "other_wasmtime");
    assert_eq!(kind(&other(&|h| h.engine ^= 1)), "other_engine");
    assert_eq!(kind(&other(&|h| h.package = "0.0.1".into())), "other_package");
    // The same crate version with other guest package code (a snapshot's memory holds it).
    let ours = header.package.clone();
    assert!(ours.starts_with(&format!("{}+guest.", wasi_python_runtime::PACKAGE_VERSION)), "{ours}");
    assert_eq!(kind(&other(&|h| h.package = wasi_python_runtime::PACKAGE_VERSION.into())), "other_package");
    assert_eq!(kind(&other(&|h| h.base_sha256 = [1; 32])), "other_base");
}


/// Timings for docs/snapshots.md (tests/bench/snapshot_bench.py is the reported one).
#[test]
#[ignore = "a benchmark"]
fn bench_snapshot_phases() {
    let s = open(RunConfig::new(Vec::<String>::new()).preload(Preload::Default));
    ok(&s, "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\ndf = pd.DataFrame({'id': np.arange(10_000), 'x': rng.normal(size=10_000), 'k': rng.choice(list('abcdefgh'), size=10_000)})\ndf['y'] = df.x * 2 + 1\nsummary = df.groupby('k').y.mean()");
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let snap = s.snapshot().unwrap();
        eprintln!("snapshot {:?} ({} MiB)", t.elapsed(), snap.memory_bytes() >> 20);
    }
    for i in 0..5 {
        ok(&s, &format!("v = {i}"));
        let t = std::time::Instant::now();
        let snap = s.snapshot().unwrap();
        eprintln!("after a one-variable turn: snapshot {:?}, {} new pages", t.elapsed(), snap.new_pages());
    }
}

/// How many pages a fork's restore turn and its first turn change (its own snapshot's
/// `new_pages`, against the snapshot it was forked from): what each fork costs in memory.
#[test]
#[ignore = "a benchmark"]
fn bench_fork_writes() {
    let s = open(RunConfig::new(Vec::<String>::new()).preload(Preload::Default));
    ok(&s, "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\ndf = pd.DataFrame({'id': np.arange(10_000), 'x': rng.normal(size=10_000), 'k': rng.choice(list('abcdefgh'), size=10_000)})\ndf['y'] = df.x * 2 + 1\nsummary = df.groupby('k').y.mean()");
    let snap = s.snapshot().unwrap();
    for code in [None, Some("pass"), Some("df.loc[0, 'x'] = 1.0")] {
        let f = open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()));
        if let Some(code) = code {
            ok(&f, code);
        }
        eprintln!("a fork's restore, then {code:?}: {} pages changed", f.snapshot().unwrap().new_pages());
    }
}

#[test]
fn a_snapshot_without_a_preload_base_saves_every_page_and_loads() {
    let s = open(RunConfig::new(Vec::<String>::new()));
    ok(&s, "import json\nmemo = {'k': [1, 2, 3]}");
    let bytes = s.snapshot().unwrap().to_bytes(runtime()).unwrap();
    assert!(read_header(&bytes, &ImageLimits::default()).unwrap().base_modules.is_empty());
    let loaded = runtime().load_snapshot(&bytes).unwrap();
    let fork = open(RunConfig::new(Vec::<String>::new()).snapshot(loaded.clone()));
    assert_eq!(ok(&fork, "print(json.dumps(memo))"), "{\"k\": [1, 2, 3]}\n");
    let done = runtime().run(RunConfig::new(["-c", "import sys; print('json' in sys.modules)"]).snapshot(loaded)).unwrap();
    assert_eq!(text(&done.stdout), "True\n", "{}", text(&done.stderr));
}

#[test]
fn a_loaded_snapshot_forks_runs_and_snapshots_again() {
    let (_orig, snap) = warm();
    let loaded = runtime().load_snapshot(&snap.to_bytes(runtime()).unwrap()).unwrap();
    let done = runtime().run(RunConfig::new(["-c", "import numpy; print(numpy.__name__)"]).snapshot(loaded.clone())).unwrap();
    assert_eq!(text(&done.stdout), "numpy\n", "{}", text(&done.stderr));
    let a = open(RunConfig::new(Vec::<String>::new()).snapshot(loaded.clone()).fuel(Some(1 << 40)));
    assert_eq!(ok(&a, CHECK), "42 10 3 66 Point\n");
    ok(&a, "x = 7");
    let again = a.snapshot().unwrap();
    let b = open(RunConfig::new(Vec::<String>::new()).snapshot(again.clone()));
    assert_eq!(ok(&b, "print(f(1))"), "8\n");
    let c = open(RunConfig::new(Vec::<String>::new()).snapshot(runtime().load_snapshot(&again.to_bytes(runtime()).unwrap()).unwrap()));
    assert_eq!(ok(&c, "print(f(1), int(arr.sum()))"), "8 66\n");
}

#[test]
fn a_load_never_builds_a_base_image() {
    let (_orig, snap) = warm();
    let bytes = snap.to_bytes(runtime()).unwrap();
    let mut header = read_header(&bytes, &ImageLimits::default()).unwrap();
    // A base no process has built: refused, and not built meanwhile, as the cache folder
    // of a runtime that has no preload image shows after.
    header.base_modules = vec!["json".into(), "wave".into()];
    let other = wasi_python_runtime::image::encode(&header, &Pages::new(), 1);
    let cache = crate::Cache::new("no-images");
    let rt = cache.runtime(runtime().artifacts());
    assert_eq!(rt.load_snapshot(&other).unwrap_err().kind(), "other_base");
    assert_eq!(cache.images(), Vec::<std::path::PathBuf>::new());
}

/// A second snapshot after a turn that changed one variable holds that change and
/// little else (its `new_pages` is far below the memory's pages), and its forks see both
/// the change and everything of the first; a fork's writes reach neither the other
/// forks nor the session.
#[test]
fn a_second_snapshot_holds_what_the_turn_changed() {
    let (orig, first) = warm();
    ok(&orig, "y = 'turn two'");
    let second = orig.snapshot().unwrap();
    let memory_pages = second.memory_bytes() / 4096;
    assert!(second.new_pages() > 0, "the turn's change is in it");
    assert!(second.new_pages() * 20 < memory_pages, "{} of {memory_pages} pages for a one-variable turn", second.new_pages());
    let a = open(RunConfig::new(Vec::<String>::new()).snapshot(second.clone()));
    let b = open(RunConfig::new(Vec::<String>::new()).snapshot(second.clone()));
    assert_eq!(ok(&a, "print(y)"), "turn two\n");
    assert_eq!(ok(&a, CHECK), "42 10 3 66 Point\n");
    ok(&a, "y = 'a wrote'; arr[1, 1] = 500; big = bytearray(b'a' * (4 << 20))");
    assert_eq!(ok(&b, "print(y, int(arr.sum()), 'big' in globals())"), "turn two 66 False\n");
    assert_eq!(ok(&orig, "print(y, int(arr.sum()), 'big' in globals())"), "turn two 66 False\n");
    // The first snapshot is as it was.
    let c = open(RunConfig::new(Vec::<String>::new()).snapshot(first));
    assert_eq!(ok(&c, "print('y' in globals())"), "False\n");
}

/// Five steps of snapshot, fork, turn, snapshot: each fork sees every earlier step's
/// value and none of a later one, and each snapshot adds few pages.
#[test]
fn a_chain_of_snapshots_keeps_every_step() {
    let (orig, mut snap) = warm();
    drop(orig);
    for step in 1..=5 {
        let s = open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()));
        let seen = ok(&s, "print(sorted(k for k in globals() if k.startswith('step')))");
        let want: Vec<String> = (1..step).map(|k| format!("'step{k}'")).collect();
        assert_eq!(seen, format!("[{}]\n", want.join(", ")), "step {step}");
        ok(&s, &format!("step{step} = list(range({step}))"));
        snap = s.snapshot().unwrap();
        assert!(snap.new_pages() * 20 < snap.memory_bytes() / 4096, "step {step}: {} new pages", snap.new_pages());
    }
    let end = open(RunConfig::new(Vec::<String>::new()).snapshot(snap));
    assert_eq!(ok(&end, "print(step5, step1, f(1))"), "[0, 1, 2, 3, 4] [0] 42\n");
}

/// A delta saves the pages that differ from its parent's file and loads only over that
/// parent: without it, over another snapshot, or against a parent never saved, each a
/// kind of its own; over its parent it is the session as it was.
#[test]
fn a_delta_saves_and_loads_over_its_parent_only() {
    let (orig, first) = warm();
    let kind = |e: SnapshotError| e.kind();
    ok(&orig, "z = 'after'");
    let second = orig.snapshot().unwrap();
    assert_eq!(kind(second.to_bytes_since(runtime(), &first, None).unwrap_err()), "parent_not_saved");
    let full = first.to_bytes(runtime()).unwrap();
    let delta = second.to_bytes_since(runtime(), &first, None).unwrap();
    assert!(delta.len() * 4 < full.len(), "delta {} bytes, full {}", delta.len(), full.len());
    let header = read_header(&delta, &ImageLimits::default()).unwrap();
    assert_eq!(header.parent(), first.id());

    assert_eq!(kind(runtime().load_snapshot(&delta).unwrap_err()), "no_parent");
    let loaded_first = runtime().load_snapshot(&full).unwrap();
    assert_eq!(loaded_first.id(), first.id());
    let loaded = runtime().load_snapshot_over(&delta, None, Some(&loaded_first)).unwrap();
    let s = open(RunConfig::new(Vec::<String>::new()).snapshot(loaded.clone()));
    assert_eq!(ok(&s, "print(z, f(1))"), "after 42\n");
    // Over another snapshot of the line (the delta's own), refused.
    assert_eq!(kind(runtime().load_snapshot_over(&delta, None, Some(&loaded)).unwrap_err()), "other_parent");
    // A full file ignores a parent.
    let again = runtime().load_snapshot_over(&full, None, Some(&loaded)).unwrap();
    let t = open(RunConfig::new(Vec::<String>::new()).snapshot(again));
    assert_eq!(ok(&t, "print('z' in globals())"), "False\n");
    // A delta of a delta, signed.
    ok(&s, "w = 3");
    let third = s.snapshot().unwrap();
    let key = wasi_python_runtime::image::Key::new(&[7; 32]).unwrap();
    let delta2 = third.to_bytes_since(runtime(), &loaded, Some(&key)).unwrap();
    assert_eq!(kind(runtime().load_snapshot_over(&delta2, Some(&wasi_python_runtime::image::Key::new(&[8; 32]).unwrap()), Some(&loaded)).unwrap_err()), "signature");
    let loaded3 = runtime().load_snapshot_over(&delta2, Some(&key), Some(&loaded)).unwrap();
    let u = open(RunConfig::new(Vec::<String>::new()).snapshot(loaded3));
    assert_eq!(ok(&u, "print(w, z, x)"), "3 after 41\n");
}

/// A session whose snapshots write-protected its pages (delta.rs, `Tracker`: the second
/// snapshot names only what the turn between wrote) gives its memory back clean: the
/// next sessions over the same pool slots find none of what it wrote. Without the
/// tracker dropped first, the pool's reset would miss the protected pages.
#[test]
fn a_session_that_snapshotted_leaves_its_slot_clean() {
    let rt = Runtime::builder(runtime().artifacts().clone()).build();
    let numpy = || RunConfig::new(Vec::<String>::new()).preload(Preload::Modules(vec!["numpy".into()]));
    let mark = "import numpy as np\nbuf = bytearray(b'MARK' * 4096)\nprint(np.frombuffer(buf, dtype=np.uint8).__array_interface__['data'][0])";
    let mut seen = Vec::new();
    for round in 0..3 {
        let a = rt.open_session(numpy(), SessionLimits::default()).unwrap();
        let at: u64 = ok(&a, mark).trim().parse().unwrap();
        a.snapshot().unwrap();
        ok(&a, "x = 1");
        a.snapshot().unwrap();
        ok(&a, "y = 2");
        a.snapshot().unwrap();
        a.close();
        drop(a);
        let b = rt.open_session(numpy(), SessionLimits::default()).unwrap();
        let size = b.snapshot().unwrap().memory_bytes();
        assert!(at + 16384 <= size, "round {round}: the marked buffer at {at} is within the next session's {size} bytes");
        let read = format!(
            "class R: pass\nr = R()\nr.__array_interface__ = {{'shape': (16384,), 'typestr': '|u1', 'data': ({at}, True), 'version': 3}}\nprint(np.asarray(r).tobytes().count(b'MARK'))"
        );
        seen.push(ok(&b, &format!("import numpy as np\n{read}")).trim().parse::<u32>().unwrap());
    }
    assert_eq!(seen, [0, 0, 0], "marks of a closed session's memory seen by the next session");
}
