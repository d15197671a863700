//! Each limit stops its guest with the right outcome, and the host survives.
//!
//! The outcome (`trapped`) says which limit stopped a run. Where a run could also end by
//! another (a sleep's end, the 30 s deadline of `run`), the time it took is bounded at
//! half of that other end ([`OTHER_END_HALF`]): it tells the two endings apart on any
//! load, and asserts no pace.

use std::time::{Duration, Instant};

use wasi_python_runtime::{CancelToken, RunConfig, Trapped};

use crate::{py, run, runtime, text};

/// Half of the 60 s sleeps and the 30 s deadline below: a run that took less was not
/// ended by them.
const OTHER_END_HALF: Duration = Duration::from_secs(15);

#[test]
fn deadline_stops_a_busy_loop() {
    let done = runtime()
        .run(RunConfig::new(["-c", "while True: pass"]).deadline(Some(Duration::from_millis(300))))
        .unwrap();
    assert_eq!(done.trapped, Some(Trapped::Deadline));
    assert_eq!(done.exit_code, None);
}

#[test]
fn deadline_stops_a_sleep_on_time() {
    let t = Instant::now();
    let done = runtime()
        .run(RunConfig::new(["-c", "import time; time.sleep(60)"]).deadline(Some(Duration::from_secs(1))))
        .unwrap();
    let took = t.elapsed();
    assert_eq!(done.trapped, Some(Trapped::Deadline));
    // Not before the deadline; and during the sleep, not once it ended.
    assert!(took >= Duration::from_millis(950) && took < OTHER_END_HALF, "{took:?}");
}

#[test]
fn sleeping_still_sleeps() {
    let done = py("import time; t = time.monotonic(); time.sleep(0.2); print(round(time.monotonic() - t, 1))");
    assert_eq!(text(&done.stdout), "0.2\n", "{}", text(&done.stderr));
}

#[test]
fn fuel_stops_a_busy_loop_and_is_reported() {
    let done = run(RunConfig::new(["-c", "while True: pass"]).fuel(Some(200_000_000)));
    assert_eq!(done.trapped, Some(Trapped::OutOfFuel));
    assert_eq!(done.fuel_used, Some(200_000_000));
    let done = run(RunConfig::new(["-c", "pass"]).fuel(Some(10_000_000_000)));
    assert_eq!(done.exit_code, Some(0));
    let used = done.fuel_used.unwrap();
    assert!(used > 1_000_000 && used < 10_000_000_000, "{used}");
    assert_eq!(py("pass").fuel_used, None);
}

/// Cancels `program` from another thread after 200 ms; it must end "cancelled", before
/// the run's 30 s deadline or its sleep could end it.
fn check_cancel(program: &str) {
    let token = CancelToken::new();
    let t2 = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        t2.cancel();
    });
    let t = Instant::now();
    let done = run(RunConfig::new(["-c", program]).cancel(token));
    assert_eq!(done.trapped, Some(Trapped::Cancelled), "{program}");
    assert!(t.elapsed() < OTHER_END_HALF, "{program}: {:?}", t.elapsed());
}

#[test]
fn cancel_stops_a_busy_guest() {
    check_cancel("while True: pass");
}

#[test]
fn cancel_stops_a_sleeping_guest() {
    check_cancel("import time; time.sleep(60)");
}

#[test]
fn output_is_truncated_not_failed() {
    let done = run(RunConfig::new(["-c", "print('x' * 5000); import sys; print('err', file=sys.stderr)"]).output_bytes(1000));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(done.stdout.len(), 1000);
    assert!(done.truncated.stdout);
    assert!(!done.truncated.stderr);
    assert_eq!(text(&done.stderr), "err\n");
}

#[test]
fn memory_bomb_is_a_memory_error_inside_the_cap() {
    let done = run(
        RunConfig::new(["-c", "try:\n    b = bytearray(200 * 2**20)\nexcept MemoryError:\n    print('MemoryError')"])
            .memory_bytes(80 << 20),
    );
    assert_eq!(text(&done.stdout), "MemoryError\n", "{}", text(&done.stderr));
    assert_eq!(done.exit_code, Some(0));
}

#[test]
fn runaway_recursion_traps_and_the_host_survives() {
    let done = py("import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1) + 1\nf(0)");
    assert_eq!(done.trapped, Some(Trapped::StackOverflow), "{}", text(&done.stderr));
    // And the next run is fine.
    assert_eq!(text(&py("print(1)").stdout), "1\n");
}

#[test]
fn ordinary_recursion_is_a_recursion_error() {
    let done = py("def f(): f()\nf()");
    assert_eq!(done.exit_code, Some(1));
    assert!(text(&done.stderr).contains("RecursionError"));
}

#[test]
fn abort_is_named() {
    let done = py("import os; os.abort()");
    assert_eq!(done.trapped, Some(Trapped::Unreachable));
}

#[test]
fn too_little_memory_is_refused_before_the_run() {
    let err = runtime().run(RunConfig::new(["-c", "pass"]).memory_bytes(1 << 20)).unwrap_err();
    assert!(matches!(err, wasi_python_runtime::Error::InvalidConfig { param: "memory_bytes", .. }), "{err}");
}

#[test]
fn two_guests_run_at_the_same_time() {
    // Each guest reports when it computed; the two spans must overlap.
    let prog = "import time\na = time.time()\nx = sum(range(3 * 10**6))\nprint(a, time.time())";
    py("pass");
    let a = std::thread::spawn(move || py(prog));
    let b = std::thread::spawn(move || py(prog));
    let span = |d: wasi_python_runtime::Completed| -> (f64, f64) {
        let t = text(&d.stdout);
        let v: Vec<f64> = t.split_whitespace().map(|x| x.parse().unwrap()).collect();
        (v[0], v[1])
    };
    let (a, b) = (span(a.join().unwrap()), span(b.join().unwrap()));
    assert!(a.0 < b.1 && b.0 < a.1, "the runs did not overlap: {a:?} {b:?}");
}

#[test]
fn more_live_stores_than_pool_slots_still_run() {
    // The pooling allocator has 60 slots; sessions hold theirs while they live.
    // Past the pool, stores go to the on-demand engine instead of failing.
    use wasi_python_runtime::{SessionLimits, Turn};
    let pooled = wasi_python_runtime::Runtime::new(runtime().artifacts().clone()).with_pooling(true);
    let sessions: Vec<_> = (0..64)
        .map(|_| pooled.open_session(RunConfig::new(Vec::<String>::new()), SessionLimits::default()).unwrap())
        .collect();
    let turn = |code: &str| Turn {
        code: code.into(),
        deadline: Some(Duration::from_secs(10)),
        output_bytes: 1 << 16,
        fuel: None,
        cancel: CancelToken::new(),
        ..Default::default()
    };
    for s in [&sessions[0], &sessions[63]] {
        let done = s.turn(turn("6 * 7")).unwrap();
        assert_eq!(text(&done.stdout), "42\n", "{}", text(&done.stderr));
    }
    let run = |code: &str| pooled.run(RunConfig::new(["-c", code])).unwrap();
    assert_eq!(text(&run("print('run')").stdout), "run\n");
    drop(sessions);
    assert_eq!(text(&run("print('after')").stdout), "after\n");
}

/// An embedder's durations past what a clock can hold mean "no limit", never a panic
/// (issue 18: `Instant + Duration` overflowed on the run's thread).
#[test]
fn durations_past_the_clocks_range_are_no_limit_not_a_panic() {
    use wasi_python_runtime::{MemoryFiles, Mount, SessionLimits, Turn};

    let huge = Duration::MAX;
    let files = std::sync::Arc::new(MemoryFiles::new(vec![("a.txt".to_owned(), bytes_of("hi"))], false).unwrap());
    let cfg = RunConfig::new(["-c", "print(open('/m/a.txt').read())"])
        .deadline(Some(huge))
        .mount(Mount::new(files, "/m", false).timeout(huge));
    let done = run(cfg);
    assert_eq!((done.exit_code, text(&done.stdout).as_str()), (Some(0), "hi\n"), "{}", text(&done.stderr));

    let limits = SessionLimits { idle: Some(huge), lifetime: Some(huge), shutdown: huge };
    let s = runtime().open_session(RunConfig::new(Vec::<String>::new()), limits).expect("a session opens");
    let turn = Turn { code: "print(1)".into(), deadline: Some(huge), output_bytes: 100, fuel: None, cancel: Default::default(), ..Default::default() };
    assert_eq!(text(&s.turn(turn).expect("the session lives").stdout), "1\n");
    assert!(s.close().is_some());
}

fn bytes_of(s: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(s.as_bytes())
}
