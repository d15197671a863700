//! Ordinary programs: output, exit codes, the command line, stdin and env.

use wasi_python_runtime::RunConfig;

use crate::{py, run, text};

#[test]
fn hello_world() {
    let done = py("print('hello, world')");
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "hello, world\n");
    assert_eq!(done.trapped, None);
}

/// (program, exit code, stderr must contain)
const EXITS: &[(&str, i32, &str)] = &[
    ("import sys; sys.exit(3)", 3, ""),
    ("import sys; sys.exit(300)", 44, ""),
    ("import sys; sys.exit('bye')", 1, "bye"),
    ("import os; os._exit(4)", 4, ""),
    // What a POSIX parent would read: the status modulo 256, never negative.
    ("import os; os._exit(-1)", 255, ""),
    ("import os; os._exit(2**31 - 1)", 255, ""),
    ("import os; os._exit(256)", 0, ""),
    ("import sys; sys.exit(-1)", 255, ""),
    ("raise SystemExit", 0, ""),
    ("1/0", 1, "ZeroDivisionError"),
    ("def f(:", 1, "SyntaxError"),
];

#[test]
fn exit_codes() {
    for (code, want, err) in EXITS {
        let done = py(code);
        assert_eq!(done.exit_code, Some(*want), "{code}: {}", text(&done.stderr));
        assert_eq!(done.trapped, None, "{code}");
        assert!(text(&done.stderr).contains(err), "{code}: {}", text(&done.stderr));
    }
}

#[test]
fn traceback_names_the_program() {
    let done = py("def f():\n    raise ValueError('boom')\nf()");
    let err = text(&done.stderr);
    assert!(err.starts_with("Traceback (most recent call last):"), "{err}");
    assert!(err.contains("File \"<string>\", line 3"), "{err}");
    assert!(err.trim_end().ends_with("ValueError: boom"), "{err}");
}

#[test]
fn program_from_stdin() {
    let done = run(RunConfig::new(Vec::<String>::new()).stdin(b"print(sum(range(5)))".to_vec()));
    assert_eq!(text(&done.stdout), "10\n", "{}", text(&done.stderr));
}

#[test]
fn stdin_is_readable() {
    let done = run(RunConfig::new(["-c", "import sys; print(sys.stdin.read().upper())"]).stdin(b"abc".to_vec()));
    assert_eq!(text(&done.stdout), "ABC\n");
}

#[test]
fn env_is_passed_and_defaults_are_set() {
    let done = run(
        RunConfig::new(["-c", "import os; print(os.environ['GREETING'], os.environ['TMPDIR'], sorted(os.environ))"])
            .env("GREETING", "hi"),
    );
    assert_eq!(
        text(&done.stdout),
        "hi /tmp ['GREETING', 'HOME', 'PYTHONTZPATH', 'TMPDIR']\n",
        "{}",
        text(&done.stderr)
    );
}

#[test]
fn dash_m_runs_a_module() {
    let done = run(RunConfig::new(["-m", "json.tool"]).stdin(b"{\"a\": [1, 2]}".to_vec()));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert!(text(&done.stdout).contains("\"a\": ["), "{}", text(&done.stdout));
}

#[test]
fn argv_reaches_the_program() {
    let done = py("import sys; print(sys.argv)");
    assert_eq!(text(&done.stdout), "['-c']\n");
    let done = run(RunConfig::new(["-c", "import sys; print(sys.argv[1:])", "x", "y"]));
    assert_eq!(text(&done.stdout), "['x', 'y']\n");
}

#[test]
fn atexit_handlers_run_and_output_is_flushed() {
    let done = py("import atexit, sys\natexit.register(lambda: print('bye'))\nsys.stdout.write('no newline')");
    assert_eq!(text(&done.stdout), "no newlinebye\n");
}

#[test]
fn numpy_computes() {
    let done = py("import numpy as np; print(int(np.arange(10).sum()))");
    assert_eq!(text(&done.stdout), "45\n", "{}", text(&done.stderr));
}

#[test]
fn start_then_reports_each_end_once_and_refuses_a_bad_config_without_calling_back() {
    use std::sync::mpsc;
    use std::time::Duration;

    let (tx, rx) = mpsc::channel();
    for i in 0..3 {
        let tx = tx.clone();
        crate::runtime()
            .start_then(RunConfig::new(["-c", &format!("print({i})")]), move |r| tx.send(r).unwrap())
            .expect("started");
    }
    let mut outs: Vec<String> = (0..3)
        .map(|_| text(&rx.recv_timeout(Duration::from_secs(60)).expect("called back").expect("ran").stdout))
        .collect();
    outs.sort();
    assert_eq!(outs, ["0\n", "1\n", "2\n"]);

    let bad = RunConfig::new(["-c", "pass"]).grant(wasi_python_runtime::Grant::read_only("/definitely/not/here", "/data"));
    let tx2 = tx.clone();
    let refused = crate::runtime().start_then(bad, move |r| tx2.send(r).unwrap());
    assert!(matches!(refused, Err(wasi_python_runtime::Error::Grant { .. })), "{refused:?}");
    drop(tx);
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "no call back for a refused run");
}
