//! What a resting session gives back (session.rs `Live::rest`, rest.rs, sched's
//! stack.rs): a fork's pages that hold again what its snapshot holds, and its thread's
//! stack below where it rests; what the guest reads never changes.

use std::time::{Duration, Instant};

use wasi_python_runtime::{Preload, RestStats, RunConfig, Session, SessionLimits, Snapshot, Turn};

use crate::{Cache, runtime, text};

fn turn(code: &str) -> Turn {
    Turn { code: code.into(), deadline: Some(Duration::from_secs(60)), output_bytes: 1 << 20, ..Default::default() }
}

fn ok(s: &Session, code: &str) -> String {
    let done = s.turn(turn(code)).expect("the turn runs");
    assert_eq!(done.exit_code, Some(0), "{code}: {}", text(&done.stderr));
    text(&done.stdout)
}

fn open(cfg: RunConfig) -> Session {
    runtime().open_session(cfg, SessionLimits::default()).expect("a session opens")
}

fn fork(snap: &Snapshot) -> Session {
    open(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()))
}

/// The session's stats once it has rested more than `than` times (it rests once after
/// each turn, or its opening, when no command follows within sched's `REST`).
fn rested(s: &Session, than: u64) -> RestStats {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = s.rest_stats();
        if stats.rests > than {
            return stats;
        }
        assert!(Instant::now() < until, "the session never rested: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const SETUP: &str = "\
import numpy as np
arr = np.zeros(100_000)
names = {f'k{i}': [i] * 3 for i in range(20_000)}
def total(): return float(arr.sum()) + sum(v[0] for v in names.values())
";

fn warm() -> Snapshot {
    let s = open(RunConfig::new(Vec::<String>::new()).preload(Preload::Modules(vec!["numpy".into()])));
    ok(&s, SETUP);
    s.snapshot().expect("a resting session snapshots")
}

#[test]
fn a_resting_fork_gives_back_the_pages_that_hold_their_snapshots_bytes_and_reads_the_same() {
    let snap = warm();
    let a = fork(&snap);
    let b = fork(&snap);
    let opened = rested(&a, 0);
    // Written, then put back as the snapshot has it: the pages hold its bytes again.
    ok(&a, "arr[::512] = 7.0\nfor v in names.values(): v[1] = -1\narr[::512] = 0.0\nfor v in names.values(): v[1] = v[0]");
    let first = rested(&a, opened.rests);
    assert!(first.guest_pages - opened.guest_pages >= 100, "the pages written back as they were are given back: {opened:?} {first:?}");
    let sum = (0..20_000u64).sum::<u64>();
    assert_eq!(ok(&a, "print(total(), arr[512], names['k7'])"), format!("{sum}.0 0.0 [7, 7, 7]\n"));
    // Written again after the give-back: the fork's own again, and only its own.
    ok(&a, "arr[::512] = 3.0\nnames['k7'][2] = 70");
    let again = rested(&a, first.rests);
    assert_eq!(ok(&a, "print(arr[1024], names['k7'], arr[1])"), "3.0 [7, 7, 70] 0.0\n");
    assert_eq!(ok(&b, "print(arr[1024], names['k7'], total())"), format!("0.0 [7, 7, 7] {sum}.0\n"));
    // A snapshot after the give-back holds what the fork holds, and forks so.
    let later = a.snapshot().unwrap();
    assert!(again.rests > first.rests);
    let c = fork(&later);
    assert_eq!(ok(&c, "print(arr[1024], arr[1025], names['k7'], names['k8'])"), "3.0 0.0 [7, 7, 70] [8, 8, 8]\n");
}

#[test]
fn a_fork_that_snapshotted_gives_back_only_what_its_last_snapshot_holds_too() {
    // Its next snapshot takes a page it does not name (one given back) from its last
    // snapshot: a page back at the origin's bytes but not at the last snapshot's stays.
    let snap = warm();
    let a = fork(&snap);
    let opened = rested(&a, 0);
    a.snapshot().unwrap();
    ok(&a, "arr[::512] = 5.0");
    let mid = a.snapshot().unwrap();
    // Forked, `mid` has a view to compare with (none is made for the rest alone).
    let from_mid = fork(&mid);
    // arr's pages: back at the origin's bytes, not at `mid`'s; names' pages: written and
    // put back, the same in both.
    let base = a.rest_stats().rests;
    ok(&a, "arr[::512] = 0.0\nfor v in names.values(): v[1] = -1\nfor v in names.values(): v[1] = v[0]");
    let after = rested(&a, base.max(opened.rests));
    assert!(after.guest_pages > opened.guest_pages, "the pages the same in both are given back: {opened:?} {after:?}");
    let back = a.snapshot().unwrap();
    assert_eq!(ok(&from_mid, "print(arr[512])"), "5.0\n");
    assert_eq!(ok(&fork(&back), "print(arr[512], arr[1024], names['k3'])"), "0.0 0.0 [3, 3, 3]\n");
    // Written after the give-back: named by the next snapshot.
    let base = a.rest_stats().rests;
    ok(&a, "names['k3'][1] = 33\nnames['k9999'][2] = 99");
    rested(&a, base);
    let later = a.snapshot().unwrap();
    assert_eq!(ok(&fork(&later), "print(names['k3'], names['k9999'], arr[512])"), "[3, 33, 3] [9999, 9999, 99] 0.0\n");
    assert_eq!(ok(&a, "print(names['k3'], arr[512])"), "[3, 33, 3] 0.0\n");
}

#[test]
fn a_session_thread_gives_back_the_stack_a_deep_turn_touched() {
    let s = open(RunConfig::new(Vec::<String>::new()));
    let before = rested(&s, 0);
    // repr of deeply nested lists recurses in C: the guest's wasm frames are on the
    // session thread's native stack.
    ok(&s, "import sys\nsys.setrecursionlimit(100_000)\nl = []\nfor _ in range(20_000): l = [l]\ntry:\n    len(repr(l))\nexcept RecursionError:\n    pass");
    let after = rested(&s, before.rests);
    let given = after.stack_bytes - before.stack_bytes;
    assert!(given >= 256 << 10, "the deep turn's stack pages are given back: {given} bytes");
    assert_eq!(ok(&s, "print(len(str([[[1]]])))"), "7\n", "the thread runs on");
}

/// A runtime whose launch policy has `rest` off (what `WASI_PYTHON_REST=0` makes the
/// default): its sessions never rest, however long they wait.
#[test]
fn a_policy_without_rest_keeps_its_sessions_from_resting() {
    let mut policy = wasi_python_runtime::LaunchPolicy::default();
    policy.rest = false;
    let rt = wasi_python_runtime::Runtime::builder(runtime().artifacts().clone()).launch_policy(policy).pooling(false).build();
    let s = rt.open_session(RunConfig::new(Vec::<String>::new()), SessionLimits::default()).expect("a session opens");
    let _ = s.turn(turn("x = 1")).expect("the turn runs");
    std::thread::sleep(wasi_python_sched::threads::REST * 2 + Duration::from_millis(200));
    assert_eq!(s.rest_stats().rests, 0);
    // The same wait with the default policy rests once.
    let d = open(RunConfig::new(Vec::<String>::new()));
    ok(&d, "x = 1");
    assert_eq!(rested(&d, 0).rests, 1);
}

fn preloaded() -> RunConfig {
    RunConfig::new(Vec::<String>::new()).preload(Preload::Default)
}

/// A pandas computation over the session's DataFrame and variables: what must read the
/// same before and after a rest.
const COMPUTE: &str = "print(df.groupby(df.k).v.sum().round(3).tolist(), int(df.v.idxmax()), x, names['n7'])";
const COMPUTED: &str = "[55611.0, 55389.0, 55500.0] 999 41 [7, 7]\n";

/// A session from a preload image (the default: numpy, pandas) gives back, as it rests,
/// the pages it wrote that hold the image's bytes again, compared with the very file its
/// memory is mapped from (snapshot.rs `Image`); its interpreter reads the same after,
/// and a snapshot taken after the give-back, and forks of it, hold what it holds.
#[test]
fn a_resting_session_from_a_preload_image_gives_back_the_images_pages_and_reads_the_same() {
    let s = open(preloaded());
    let opened = rested(&s, 0);
    let setup = "import pandas as pd\ndf = pd.DataFrame({'k': [i % 3 for i in range(1000)], 'v': [i / 3 for i in range(1000)]})\nx = 41\nnames = {f'n{i}': [i, i] for i in range(5000)}";
    ok(&s, setup);
    // Back to back with the setup (no rest between, or one: either way the same).
    assert_eq!(ok(&s, COMPUTE), COMPUTED);
    // A turn that reads every module of the image (reference counts raised and lowered
    // again all over its heap).
    let base = s.rest_stats().rests;
    ok(&s, "import sys\nfor m in list(sys.modules.values()):\n    for v in list(getattr(m, '__dict__', {}).values()): pass\nm = v = None");
    let after = rested(&s, base.max(opened.rests));
    assert!(after.guest_pages >= 100, "the image's pages written back as they were are given back: {opened:?} {after:?}");
    assert_eq!(ok(&s, COMPUTE), COMPUTED, "the interpreter reads the same after its rest");
    // A snapshot after the give-back holds what the session holds, and forks so.
    let snap = s.snapshot().unwrap();
    let a = fork(&snap);
    assert_eq!(ok(&a, COMPUTE), COMPUTED);
    // Written after the give-back: the session's own again, named by its next snapshot.
    let base = s.rest_stats().rests;
    ok(&s, "df.loc[999, 'v'] = -1.0\nx = 42\nnames['n7'][1] = 70");
    let again = rested(&s, base);
    assert!(again.rests > after.rests);
    let later = s.snapshot().unwrap();
    let changed = "[55277.0, 55389.0, 55500.0] 998 42 [7, 70]\n";
    assert_eq!(ok(&s, COMPUTE), changed);
    assert_eq!(ok(&fork(&later), COMPUTE), changed);
    assert_eq!(ok(&a, COMPUTE), COMPUTED, "an earlier fork keeps its snapshot's values");
    assert_eq!(ok(&fork(&snap), COMPUTE), COMPUTED);
}

/// A session from a preload image that gave pages back as it rested leaves its pool slot
/// clean: the pool's reset (patch 1 of third_party/README.md; `cargo xtask test` runs with
/// `WASI_PYTHON_CHECK_RESET=1`, which aborts on a short reset that misses a written page)
/// copies back what it wrote, given-back pages read the image's bytes, and the next
/// sessions and runs over the same slots find none of what it wrote.
#[test]
fn a_preload_session_that_gave_pages_back_leaves_its_slot_clean() {
    let rt = wasi_python_runtime::Runtime::builder(runtime().artifacts().clone()).build();
    let open = |cfg: RunConfig| rt.open_session(cfg, SessionLimits::default()).expect("a session opens");
    let mark = "import numpy as np, pandas as pd\nbuf = bytearray(b'MARK' * 4096)\npd.leak = 1\nnp.leak = 2\npd.options.display.max_rows = 7\nprint(np.frombuffer(buf, dtype=np.uint8).__array_interface__['data'][0])";
    let clean = "import numpy as np, pandas as pd\nprint(hasattr(pd, 'leak'), hasattr(np, 'leak'), pd.options.display.max_rows)";
    let mut seen = Vec::new();
    for round in 0..3 {
        let a = open(preloaded());
        let opened = rested(&a, 0);
        let at: u64 = ok(&a, mark).trim().parse().unwrap();
        let first = rested(&a, opened.rests);
        // Some given-back pages written again, and a second rest.
        ok(&a, "import sys\nfor m in list(sys.modules.values()):\n    for v in list(getattr(m, '__dict__', {}).values()): pass\nm = v = None\nbuf2 = bytearray(b'MARK' * 4096)");
        let second = rested(&a, first.rests);
        assert!(second.guest_pages > 0, "round {round}: pages were given back: {second:?}");
        a.close();
        drop(a);
        let b = open(preloaded());
        assert_eq!(ok(&b, clean), "False False 60\n", "round {round}: the next session starts from the image");
        let size = b.snapshot().unwrap().memory_bytes();
        assert!(at + 16384 <= size, "round {round}: the marked buffer at {at} is within the next session's {size} bytes");
        let read = format!(
            "class R: pass\nr = R()\nr.__array_interface__ = {{'shape': (16384,), 'typestr': '|u1', 'data': ({at}, True), 'version': 3}}\nprint(np.asarray(r).tobytes().count(b'MARK'))"
        );
        seen.push(ok(&b, &format!("{clean}\n{read}")).lines().last().unwrap().trim().parse::<u32>().unwrap());
        drop(b);
        let done = rt.run(preloaded().argv(["-c", clean])).expect("the run runs");
        assert_eq!(text(&done.stdout), "False False 60\n", "round {round}: a run after them starts from the image");
    }
    assert_eq!(seen, [0, 0, 0], "marks of a closed session's memory seen by the next session");
}

/// A page of the image the guest wrote (a page of `pandas.read_csv`'s docstring zeroed
/// through numpy), with the code that reads it back.
const ZERO_A_PAGE: &str = "\
import sys, numpy as np, pandas as pd
doc = pd.read_csv.__doc__
start = id(doc) + sys.getsizeof(doc) - len(doc) - 1
first = (start + 4095) // 4096 * 4096
assert doc.isascii() and first + 4096 <= start + len(doc)
class R: pass
r = R()
r.__array_interface__ = {'shape': (4096,), 'typestr': '|u1', 'data': (first, False), 'version': 3}
np.asarray(r)[:] = 0
zeroed = slice(first - start, first - start + 4096)
del r, R
";
const READ_THE_PAGE: &str = "print(doc[zeroed] == '\\0' * 4096, len(doc), marker)";

/// The image a session's memory is mapped from is the file the engine opened, whatever
/// is renamed over its path later (a rebuild, another process's): a resting session
/// compares its pages with that file, not with what the path names now, and its
/// snapshot is laid over that file. Here the path is replaced by a file of zeros after
/// the session opened: a page the guest zeroed must stay its own (compared with the
/// path's file it would be given back and read the image's bytes again), and forks of
/// its snapshot must read the image's pages, not zeros.
#[test]
fn a_session_compares_with_the_image_it_was_mapped_from_not_a_file_renamed_over_it() {
    let shared = runtime().prepare_preload(&Preload::Default).expect("the default image builds").expect("there is a default preload");
    let cache = Cache::new("rest-renamed-over");
    // The default image and its sidecars, linked (the same files: checked, no build);
    // not its `.sha256`, so that a save hashes the image.
    let stem = shared.file_stem().unwrap().to_string_lossy().into_owned();
    for entry in std::fs::read_dir(shared.parent().unwrap()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&stem) && !name.ends_with(".sha256") {
            std::fs::hard_link(entry.path(), cache.0.join(entry.file_name())).unwrap();
        }
    }
    let rt = wasi_python_runtime::Runtime::builder(runtime().artifacts().clone()).cache_dir(&cache.0).build();
    let path = rt.prepare_preload(&Preload::Default).unwrap().unwrap();
    assert_eq!(path, cache.0.join(shared.file_name().unwrap()), "the linked image is served");
    // The engine over the image made (a run never rests).
    let done = rt.run(preloaded().argv(["-c", "import pandas"])).expect("the run runs");
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    // A new file of zeros renamed over the image's path, as a rebuild renames its own.
    let len = std::fs::metadata(&path).unwrap().len();
    let tmp = cache.0.join(".replacement.tmp");
    std::fs::File::create(&tmp).unwrap().set_len(len).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let s = rt.open_session(preloaded(), SessionLimits::default()).expect("a session opens");
    let setup = "import pandas as pd\ndf = pd.DataFrame({'k': [i % 3 for i in range(1000)], 'v': [i / 3 for i in range(1000)]})\nx = 41\nnames = {f'n{i}': [i, i] for i in range(5000)}";
    ok(&s, &format!("{setup}\n{ZERO_A_PAGE}\nmarker = 1"));
    let expected = "True 20418 1\n";
    assert_eq!(ok(&s, READ_THE_PAGE), expected);
    let base = s.rest_stats().rests;
    ok(&s, "import sys\nfor m in list(sys.modules.values()):\n    for v in list(getattr(m, '__dict__', {}).values()): pass\nm = v = None");
    let after = rested(&s, base);
    assert!(after.guest_pages > 0, "pages are given back: {after:?}");
    assert_eq!(ok(&s, READ_THE_PAGE), expected, "the zeroed page is the guest's own still");
    assert_eq!(ok(&s, COMPUTE), COMPUTED);
    // Its snapshot is laid over the image it was mapped from.
    let snap = s.snapshot().unwrap();
    let f = rt.open_session(RunConfig::new(Vec::<String>::new()).snapshot(snap.clone()), SessionLimits::default()).expect("a fork opens");
    assert_eq!(ok(&f, READ_THE_PAGE), expected);
    assert_eq!(ok(&f, "print(pd.read_csv.__doc__[:40] == doc[:40], pd.DataFrame.__name__)"), "True DataFrame\n");
    assert_eq!(ok(&f, COMPUTE), COMPUTED);
    // Saved, it names that image by its SHA-256 (hashed from the file held, not the
    // path's): it loads where the image is, here the shared runtime's cache.
    let bytes = snap.to_bytes(&rt).expect("the snapshot saves");
    let loaded = runtime().load_snapshot(&bytes).expect("the file names the image it was taken over");
    let g = fork(&loaded);
    assert_eq!(ok(&g, READ_THE_PAGE), expected);
    assert_eq!(ok(&g, COMPUTE), COMPUTED);
    // And the runtime's next session still maps that image.
    let n = rt.open_session(preloaded(), SessionLimits::default()).expect("a session opens");
    assert_eq!(ok(&n, "import pandas as pd\nprint(pd.read_csv.__doc__.count('\\0'), pd.DataFrame({'a': [1, 2]}).a.sum())"), "0 3\n");
}
