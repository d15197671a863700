//! Runs from snapshots with modules preloaded: they must behave like runs that import
//! the modules themselves, except in time.

use std::time::Duration;

use wasi_python_runtime::{Error, Grant, LaunchPolicy, Preload, RunConfig, Runtime, Session, SessionLimits, Turn, Trapped};

use crate::{Dir, run, runtime, text};

/// The set these tests preload: numpy alone builds in about a second.
fn numpy() -> Preload {
    Preload::Modules(vec!["numpy".into()])
}

fn pre(code: &str) -> RunConfig {
    RunConfig::new(["-c", code]).preload(numpy())
}

fn turn(code: &str) -> Turn {
    Turn {
        code: code.into(),
        deadline: Some(Duration::from_secs(30)),
        output_bytes: 1 << 20,
        fuel: None,
        cancel: wasi_python_runtime::CancelToken::new(),
        ..Default::default()
    }
}

#[test]
fn the_preopen_table_is_found_in_the_guest_module() {
    let module = std::fs::read(runtime().artifacts().module()).unwrap();
    let statics = wasi_python_runtime::preopen_table(&module).unwrap();
    assert_eq!(statics.len(), 4);
    assert_eq!(statics.iter().filter(|s| s.1 == 1).count(), 1, "{statics:?}");
    // Not a module made of other code.
    assert!(wasi_python_runtime::preopen_table(b"\0asm\x01\0\0\0").is_err());
}

#[test]
fn a_preloaded_run_has_the_module_imported_and_works() {
    let done = run(pre("import sys; print('numpy' in sys.modules); import numpy as np; print(np.arange(10).sum())"));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "True\n45\n");
    let plain = run(RunConfig::new(["-c", "import sys; print('numpy' in sys.modules)"]));
    assert_eq!(text(&plain.stdout), "False\n");
}

#[test]
fn a_preloaded_run_sees_its_own_environment_folders_and_grants() {
    let data = Dir::new("snap-grant");
    std::fs::write(data.0.join("in.txt"), "granted").unwrap();
    let code = "import os; print(os.environ['WHO'], os.getenv('WHO'), os.getcwd()); \
                print(open('/data/in.txt').read()); open('/tmp/t', 'w').write('x'); print(os.listdir('/tmp'))";
    for who in ["first", "second"] {
        let done = run(pre(code).env("WHO", who).grant(Grant::read_only(&data.0, "/data")));
        assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
        assert_eq!(text(&done.stdout), format!("{who} {who} /work\ngranted\n['t']\n"));
    }
    // Another working folder, a writable grant.
    let out = Dir::new("snap-workdir");
    let done = run(
        pre("import os; print(os.getcwd()); open('made.txt', 'w').write('ok')")
            .grant(Grant::writable(&out.0, "/out"))
            .workdir("/out"),
    );
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "/out\n");
    assert_eq!(std::fs::read_to_string(out.0.join("made.txt")).unwrap(), "ok");
}

#[test]
fn the_command_line_runs_as_without_a_snapshot() {
    let cases: Vec<(Vec<&str>, &[u8])> = vec![
        (vec!["-c", "import sys; print(sys.argv, sys.orig_argv[1:])", "a", "b"], b""),
        (vec!["-c", "raise SystemExit(7)"], b""),
        (vec!["-c", "exit(3)"], b""),
        (vec!["-c", "import os; os._exit(9)"], b""),
        (vec!["-c", "1/0"], b""),
        (vec!["-m", "json.tool"], b"{\"a\": 1}"),
        (vec!["-"], b"print('from stdin')"),
        (vec![], b"import sys; print(sys.argv)"),
        (vec!["-V"], b""),
        (vec!["-q"], b""),
        (vec!["-c"], b""),
        (vec!["/nope.py"], b""),
        (vec!["-u", "-c", "print('unbuffered')"], b""),
    ];
    for (argv, stdin) in cases {
        let plain = run(RunConfig::new(argv.clone()).stdin(stdin));
        let snap = run(RunConfig::new(argv.clone()).stdin(stdin).preload(numpy()));
        assert_eq!(
            (plain.exit_code, text(&plain.stdout), text(&plain.stderr)),
            (snap.exit_code, text(&snap.stdout), text(&snap.stderr)),
            "{argv:?}"
        );
    }
}

#[test]
fn random_state_differs_run_to_run_as_without_a_snapshot() {
    let code = "import random, numpy as np; print(random.random(), np.random.random(), np.random.default_rng().integers(10**9))";
    let a = text(&run(pre(code)).stdout);
    let b = text(&run(pre(code)).stdout);
    assert_ne!(a, b);
    for (x, y) in a.split_whitespace().zip(b.split_whitespace()) {
        assert_ne!(x, y, "{a} / {b}");
    }
    // Seeded, they agree with a run that imported numpy itself.
    let seeded = "import random, numpy as np; random.seed(5); np.random.seed(5); print(random.random(), np.random.random())";
    assert_eq!(text(&run(pre(seeded)).stdout), text(&run(RunConfig::new(["-c", seeded])).stdout));
}

#[test]
fn a_snapshot_run_looks_like_one_that_imported_the_modules_itself() {
    let probe = r#"
import numpy, sys, os, time, json, hashlib
fds = []
for fd in range(3, 40):
    try:
        os.fstat(fd); fds.append(fd)
    except OSError:
        pass
print(json.dumps({
    "env": dict(os.environ), "argv": sys.argv, "orig": sys.orig_argv, "cwd": os.getcwd(),
    "path": sys.path, "flags": str(sys.flags), "hash": hash("abc"), "limit": sys.getrecursionlimit(),
    "fds": fds, "main": sorted(k for k in dir(sys.modules["__main__"]) if k not in ("fds", "fd")),
    "modules": sorted(sys.modules), "clock": abs(time.time() - float(os.environ["NOW"])) < 60,
    "tmp": sorted(os.listdir("/tmp")), "work": sorted(os.listdir(".")),
}, sort_keys=True))
"#;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs().to_string();
    let cfg = |p: Option<Preload>| {
        let c = RunConfig::new(["-c", probe, "x"]).env("NOW", now.clone()).env("LANG", "C.UTF-8");
        match p {
            Some(p) => c.preload(p),
            None => c,
        }
    };
    let plain = run(cfg(None));
    let snap = run(cfg(Some(numpy())));
    assert_eq!(plain.exit_code, Some(0), "{}", text(&plain.stderr));
    assert_eq!(snap.exit_code, Some(0), "{}", text(&snap.stderr));
    let p: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    let s: serde_json::Value = serde_json::from_slice(&snap.stdout).unwrap();
    for key in ["env", "argv", "orig", "cwd", "path", "flags", "hash", "limit", "fds", "main", "modules", "clock", "tmp", "work"] {
        assert_eq!(p[key], s[key], "{key}");
    }
    assert_eq!(s["clock"], true);
}

#[test]
fn the_monotonic_clock_runs_on_from_the_build() {
    // A reading kept in the snapshot (as a module could keep one at import) is behind
    // the run's clock, as it would be had the run imported the module itself.
    let done = run(pre("import time, _wasi_python_boot as b; print(b.built_at is not None and time.monotonic() > b.built_at)"));
    assert_eq!(text(&done.stdout), "True\n", "{}", text(&done.stderr));
    let done = run(pre("import time; a = time.monotonic(); time.sleep(0.01); print(0.005 < time.monotonic() - a < 5)"));
    assert_eq!(text(&done.stdout), "True\n", "{}", text(&done.stderr));
}

#[test]
fn a_module_that_does_not_import_is_named_before_any_run() {
    let e = runtime()
        .run(RunConfig::new(["-c", "pass"]).preload(Preload::Modules(vec!["numpy".into(), "no_such_module".into()])))
        .unwrap_err();
    match e {
        Error::Preload { module, traceback } => {
            assert_eq!(module, "no_such_module");
            assert!(traceback.contains("ModuleNotFoundError"), "{traceback}");
        }
        other => panic!("{other:?}"),
    }
    let e = runtime().run(RunConfig::new(["-c", "pass"]).preload(Preload::Modules(vec!["os; import sys".into()])));
    assert!(matches!(e, Err(Error::InvalidConfig { param: "preload", .. })), "{e:?}");
}

#[test]
fn a_memory_limit_below_the_snapshot_is_a_clear_error() {
    // pandas grows the heap past the guest's initial 40 MiB.
    let pandas = Preload::Modules(vec!["numpy".into(), "pandas".into()]);
    let e = runtime().run(RunConfig::new(["-c", "pass"]).preload(pandas).memory_bytes(41 << 20)).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { param: "memory_bytes", .. }), "{e:?}");
    // The default set falls back to a plain start instead.
    let done = run(RunConfig::new(["-c", "import sys; print('numpy' in sys.modules)"]).preload(Preload::Default).memory_bytes(41 << 20));
    assert_eq!(text(&done.stdout), "False\n");
}

#[test]
fn metered_runs_start_from_the_snapshot_too() {
    let done = run(pre("import sys; print('numpy' in sys.modules)").fuel(Some(5_000_000_000)));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "True\n");
    assert!(done.fuel_used.is_some_and(|f| f > 0));
    let spin = run(pre("while True: pass").fuel(Some(10_000_000)));
    assert_eq!(spin.trapped, Some(Trapped::OutOfFuel));
}

#[test]
fn a_session_from_a_snapshot_keeps_its_state_and_sees_its_grants() {
    let data = Dir::new("snap-session");
    std::fs::write(data.0.join("f"), "42").unwrap();
    let s: Session = runtime()
        .open_session(
            RunConfig::new(Vec::<String>::new())
                .preload(numpy())
                .env("WHO", "session")
                .grant(Grant::read_only(&data.0, "/data")),
            SessionLimits::default(),
        )
        .unwrap();
    let a = s.turn(turn("import sys, os; x = int(open('/data/f').read()); print('numpy' in sys.modules, os.environ['WHO'], os.getcwd())")).unwrap();
    assert_eq!(text(&a.stdout), "True session /work\n", "{}", text(&a.stderr));
    let b = s.turn(turn("x + 1")).unwrap();
    assert_eq!(text(&b.stdout), "43\n");
    let c = s.turn(turn("import numpy; numpy.arange(3).tolist()")).unwrap();
    assert_eq!(text(&c.stdout), "[0, 1, 2]\n");
    s.close();
}

/// A runtime of the test's own, over the same artifacts, with `policy`: no other test's
/// run takes its guests, so a test knows which path its runs took.
fn runtime_with(policy: LaunchPolicy) -> Runtime {
    Runtime::builder(runtime().artifacts().clone()).launch_policy(policy).build()
}

/// Guests on standby, no primed instances: runs spaced or back to back take the same path.
fn standby_only() -> LaunchPolicy {
    let mut policy = LaunchPolicy::default();
    policy.standby = true;
    policy.primed = false;
    policy
}

/// Waits until a guest is on standby for `rt`'s runs from the numpy image (a preloaded run
/// leaves one behind, from the runtime's second fresh run on: `LaunchPolicy::standby_after`).
fn standby_waits(rt: &Runtime) {
    let image = rt.prepare_preload(&numpy()).unwrap().unwrap();
    let waiting = || rt.launch_stats(Some(&image)).guests_on_standby;
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while waiting() == 0 {
        assert_eq!(rt.run(pre("pass")).unwrap().exit_code, Some(0));
        let this_run = std::time::Instant::now() + Duration::from_secs(5);
        while waiting() == 0 && std::time::Instant::now() < this_run.min(until) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(std::time::Instant::now() < until, "no guest came on standby");
    }
}

#[test]
fn a_run_on_standby_is_a_fresh_run_with_its_own_settings() {
    let rt = runtime_with(standby_only());
    let served = || rt.launch_stats(None).standby_runs;
    let on_standby = |cfg: RunConfig| {
        standby_waits(&rt);
        let before = served();
        let done = rt.run(cfg).unwrap();
        assert_eq!(served(), before + 1, "a guest on standby served the run");
        done
    };
    let done = on_standby(pre("import os, sys; print(sys.argv[1:], os.environ['K'], sys.stdin.read())")
        .argv(["-c", "import os, sys; print(sys.argv[1:], os.environ['K'], sys.stdin.read())", "x"])
        .env("K", "v")
        .stdin(b"in".to_vec()));
    assert_eq!(done.exit_code, Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(done.stdout, b"['x'] v in\n");
    let spin = on_standby(pre("while True: pass").deadline(Some(Duration::from_millis(300))));
    assert_eq!(spin.trapped, Some(Trapped::Deadline));
    let loud = on_standby(pre("print('y' * 1000)").output_bytes(10));
    assert_eq!(loud.stdout, b"yyyyyyyyyy");
    assert!(loud.truncated.stdout);
}

#[test]
fn two_runtimes_in_one_process_keep_their_own_launch_policies() {
    let fresh = runtime_with(LaunchPolicy::fresh_only());
    let ready = runtime_with(standby_only());
    assert!(!fresh.launch_policy().standby && ready.launch_policy().standby);
    standby_waits(&ready);
    for _ in 0..5 {
        assert_eq!(fresh.run(pre("pass")).unwrap().exit_code, Some(0));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (f, r) = (fresh.launch_stats(None), ready.launch_stats(None));
    assert_eq!((f.guests_on_standby, f.standby_runs, f.primed_runs), (0, 0, 0), "fresh runs only: {f:?}");
    assert_eq!(r.guests_on_standby, 1, "the other runtime's guest waits, untouched: {r:?}");
    // The standby runtime's guest serves its own run, not the other's.
    let before = r.standby_runs;
    assert_eq!(ready.run(pre("pass")).unwrap().exit_code, Some(0));
    assert_eq!(ready.launch_stats(None).standby_runs, before + 1);
    assert_eq!(fresh.launch_stats(None).standby_runs, 0);
    // A runtime that goes ends its guests (and makes no more).
    ready.retire();
    assert_eq!(ready.launch_stats(None).guests_on_standby, 0);
}

// A run from a session's snapshot runs its program in the session's `__main__` (issue 37,
// defect 7): docs/snapshots.md says every session or run from a snapshot has its variables.

#[test]
fn a_run_from_a_session_snapshot_runs_in_its_main_and_the_images_runs_in_a_fresh_one() {
    let cfg = RunConfig::new(Vec::<String>::new()).preload(numpy());
    let s: Session = runtime().open_session(cfg, SessionLimits::default()).unwrap();
    let setup = s.turn(turn("import numpy as np\nx = 41\ndef f(a): return a + x\narr = np.arange(4)")).unwrap();
    assert_eq!(setup.exit_code, Some(0), "{}", text(&setup.stderr));
    let snap = s.snapshot().unwrap();
    let from = |argv: &[&str]| {
        let done = run(RunConfig::new(argv.to_vec()).snapshot(snap.clone()));
        assert_eq!(done.exit_code, Some(0), "{argv:?}: {}", text(&done.stderr));
        text(&done.stdout)
    };
    assert_eq!(from(&["-c", "print(x + 1)"]), "42\n");
    assert_eq!(
        from(&["-c", "import sys; print(f(1), __name__, globals() is sys.modules['__main__'].__dict__, sys.argv)", "a"]),
        "42 __main__ True ['-c', 'a']\n"
    );
    // A run's changes stay in its own fork: the next run starts from the snapshot's values.
    let change = ["-c", "x = 100; arr[0] = 10; print(f(1), int(arr.sum()))"];
    assert_eq!(from(&change), "101 16\n");
    assert_eq!(from(&change), "101 16\n");
    // Metered, the same.
    let metered = run(RunConfig::new(["-c", "print(f(2))"]).snapshot(snap.clone()).fuel(Some(5_000_000_000)));
    assert_eq!(text(&metered.stdout), "43\n", "{}", text(&metered.stderr));
    // The preload image's own runs (its compiled programs, its guests on standby) keep a
    // fresh `__main__`, the same text before and after the snapshot's.
    let show = "print(sorted(k for k in globals() if not k.startswith('__')))";
    for _ in 0..3 {
        assert_eq!(text(&run(pre(show)).stdout), "[]\n");
        assert_eq!(from(&["-c", show]), "['arr', 'f', 'np', 'x']\n");
    }
    s.close();
}

// Saved session snapshots against hostile files (fork.rs, wasi-python-image).

mod saved {
    use wasi_python_runtime::image::{self, Key, Limits, MAX_CLOCK_NS, Pages};
    use wasi_python_runtime::{RunConfig, Session, SessionLimits, Snapshot};

    use super::turn;
    use crate::{Dir, runtime, text};

    fn session(cfg: RunConfig) -> Session {
        runtime().open_session(cfg, SessionLimits::default()).expect("a session opens")
    }

    fn ok(s: &Session, code: &str) -> String {
        let done = s.turn(turn(code)).expect("the turn runs");
        assert_eq!(done.exit_code, Some(0), "{code}: {}", text(&done.stderr));
        text(&done.stdout)
    }

    /// A session without a preload base (its file holds every page) that made `secret`.
    fn marked() -> Snapshot {
        let s = session(RunConfig::new(Vec::<String>::new()));
        ok(&s, "secret = 'MARKER-' + 'aaaa' + '1111'");
        s.snapshot().expect("a resting session snapshots")
    }

    /// Every copy of `from` in the pages replaced by `to` (of the same length).
    fn replaced(pages: &Pages, from: &[u8], to: &[u8]) -> (Pages, usize) {
        let mut out = Pages::new();
        let mut n = 0;
        for (number, page) in pages.iter() {
            let mut p = page.to_vec();
            for i in 0..p.len().saturating_sub(from.len() - 1) {
                if &p[i..i + from.len()] == from {
                    p[i..i + from.len()].copy_from_slice(to);
                    n += 1;
                }
            }
            out.push(number, &p);
        }
        (out, n)
    }

    /// The issue's defect 3: a file whose pages were edited and checksum recomputed
    /// loads, unsigned (the checksum is for accidents); signed, it is refused, and so is
    /// the same edit re-signed under another key or left unsigned.
    #[test]
    fn an_edited_file_is_refused_when_a_key_is_given() {
        let snap = marked();
        let key = Key::new(&[7; 32]).unwrap();
        let signed = snap.to_signed_bytes(runtime(), &key).unwrap();
        let opened = image::open(&signed, &Limits::default(), Some(&key)).unwrap();
        let (header, pages) = (opened.header().clone(), opened.pages().unwrap());
        let (edited, n) = replaced(&pages, b"MARKER-aaaa1111", b"MARKER-bbbb2222");
        assert!(n > 0, "the marker is in the memory");

        let unsigned = image::encode(&header, &edited, 3);
        let loaded = runtime().load_snapshot(&unsigned).unwrap();
        assert_eq!(ok(&session(RunConfig::new(Vec::<String>::new()).snapshot(loaded)), "print(secret)"), "MARKER-bbbb2222\n");

        let kind = |b: &[u8]| runtime().load_signed_snapshot(b, &key).unwrap_err().kind();
        assert_eq!(kind(&unsigned), "unsigned");
        assert_eq!(kind(&image::encode_signed(&header, &edited, 3, &Key::new(&[8; 32]).unwrap())), "signature");
        // The signed file, unedited, under its key.
        let loaded = runtime().load_signed_snapshot(&signed, &key).unwrap();
        assert_eq!(ok(&session(RunConfig::new(Vec::<String>::new()).snapshot(loaded)), "print(secret)"), "MARKER-aaaa1111\n");
        // Saved signed to a file and read back.
        let dir = Dir::new("snap-signed");
        let path = dir.0.join("s.snap");
        snap.save_signed(runtime(), &path, &key).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(runtime().load_signed_snapshot(&bytes, &key).is_ok());
        assert_eq!(runtime().load_snapshot_file(&path).map(|s| s.memory_bytes()).unwrap(), snap.memory_bytes());
    }

    /// The issue's defect 5: a clock near 2^64 is refused at load by kind; one at the
    /// bound starts and runs on.
    #[test]
    fn a_clock_past_any_session_is_refused_at_load() {
        let bytes = marked().to_bytes(runtime()).unwrap();
        let (mut h, pages) = image::decode(&bytes, &Limits::default()).unwrap();
        for ns in [u64::MAX - 1_000_000, MAX_CLOCK_NS + 1] {
            h.clock_ns = ns;
            assert_eq!(runtime().load_snapshot(&image::encode(&h, &pages, 1)).unwrap_err().kind(), "clock");
        }
        h.clock_ns = MAX_CLOCK_NS;
        let loaded = runtime().load_snapshot(&image::encode(&h, &pages, 1)).unwrap();
        let s = session(RunConfig::new(Vec::<String>::new()).snapshot(loaded));
        let out = ok(&s, "import time; t = time.monotonic_ns(); time.sleep(0.01); print(t >= 2**62, time.monotonic_ns() > t, secret)");
        assert_eq!(out, "True True MARKER-aaaa1111\n");
    }

    /// The issue's defect 6, in Rust: a path that never ends is refused by kind, unread.
    #[test]
    fn a_file_that_is_not_regular_is_refused_unread() {
        assert_eq!(runtime().load_snapshot_file(std::path::Path::new("/dev/zero")).unwrap_err().kind(), "not_a_file");
        let dir = Dir::new("snap-devices");
        let link = dir.0.join("zero.snap");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert_eq!(runtime().load_snapshot_file(&link).unwrap_err().kind(), "not_a_file");
        assert_eq!(runtime().load_snapshot_file(&dir.0).unwrap_err().kind(), "not_a_file");
    }

    /// The issue's defect 8, in Rust: a link planted at the old temporary name is never
    /// written through.
    #[test]
    fn save_never_writes_through_a_planted_link() {
        let dir = Dir::new("snap-planted");
        let victim = dir.0.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.0.join("task.snap");
        std::os::unix::fs::symlink(&victim, path.with_extension(format!("tmp{}", std::process::id()))).unwrap();
        let snap = marked();
        snap.save(runtime(), &path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(runtime().load_snapshot_file(&path).is_ok());
        // Nothing but the file, the victim and the planted link is left.
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 3);
    }
}
