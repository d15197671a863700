//! What a resting session gives back (session.rs `Live::rest`, rest.rs, sched's
//! stack.rs): a fork's pages that hold again what its snapshot holds, and its thread's
//! stack below where it rests; what the guest reads never changes.

use std::time::{Duration, Instant};

use wasi_python_runtime::{Preload, RestStats, RunConfig, Session, SessionLimits, Snapshot, Turn};

use crate::{runtime, text};

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
