//! What the guest can and cannot reach: grants, escapes, the network, its /tmp.


use wasi_python_runtime::{Error, Grant, RunConfig};

use crate::{Dir, py, run, runtime, text};

#[test]
fn read_only_grant_reads_and_refuses_writes() {
    let d = Dir::new("ro");
    std::fs::write(d.0.join("in.txt"), "from the host").unwrap();
    let done = run(RunConfig::new([
        "-c",
        "print(open('/data/in.txt').read())\ntry:\n    open('/data/out.txt', 'w')\nexcept OSError as e:\n    print(type(e).__name__)",
    ])
    .grant(Grant::read_only(&d.0, "/data")));
    assert_eq!(text(&done.stdout), "from the host\nPermissionError\n", "{}", text(&done.stderr));
    assert!(!d.0.join("out.txt").exists());
}

#[test]
fn writable_grant_lands_writes_on_the_host() {
    let d = Dir::new("rw");
    let done = run(RunConfig::new(["-c", "open('/out/r.txt', 'w').write('written')"]).grant(Grant::writable(&d.0, "/out")));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(std::fs::read_to_string(d.0.join("r.txt")).unwrap(), "written");
}

#[test]
fn escapes_are_refused() {
    let outer = Dir::new("escape");
    let inner = outer.0.join("inner");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(outer.0.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outer.0.join("secret.txt"), inner.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", inner.join("etc")).unwrap();
    let prog = "\
for p in ['/data/../secret.txt', '/data/link', '/data/etc/passwd', '/etc/passwd', '../secret.txt']:
    try:
        open(p).read()
        print(p, 'READ')
    except OSError as e:
        print(p, 'refused')
";
    let done = run(RunConfig::new(["-c", prog]).grant(Grant::writable(&inner, "/data")));
    let out = text(&done.stdout);
    assert!(!out.contains("READ"), "{out}");
    assert_eq!(out.matches("refused").count(), 5, "{out}\n{}", text(&done.stderr));
}

#[test]
fn a_bad_grant_is_an_error_before_the_run() {
    let cases = [
        Grant::read_only("/definitely/not/here", "/data"),
        Grant::read_only(std::env::temp_dir(), "relative"),
        Grant::read_only(std::env::temp_dir(), "/a/../b"),
        Grant::read_only(std::env::temp_dir(), "/usr/local/lib"),
        Grant::read_only(std::env::temp_dir(), "/tmp"),
    ];
    for g in cases {
        let err = runtime().run(RunConfig::new(["-c", "pass"]).grant(g.clone())).unwrap_err();
        assert!(matches!(err, Error::Grant { .. }), "{g:?}: {err}");
    }
    let file = Dir::new("file");
    std::fs::write(file.0.join("f"), "").unwrap();
    let err = runtime()
        .run(RunConfig::new(["-c", "pass"]).grant(Grant::read_only(file.0.join("f"), "/f")))
        .unwrap_err();
    assert!(matches!(err, Error::Grant { .. }), "{err}");
}

#[test]
fn no_network() {
    let prog = "\
import socket
try:
    socket.create_connection(('127.0.0.1', 80), timeout=1)
    print('connected')
except Exception as e:
    print('socket refused')
try:
    import urllib.request
    urllib.request.urlopen('http://127.0.0.1/', timeout=1)
    print('fetched')
except Exception as e:
    print('urllib refused')
";
    let done = py(prog);
    assert_eq!(text(&done.stdout), "socket refused\nurllib refused\n", "{}", text(&done.stderr));
}

#[test]
fn tmp_is_private_writable_and_gone_after() {
    let done = py("import os, tempfile\nwith tempfile.NamedTemporaryFile(dir='/tmp', delete=False) as f: f.write(b'x')\nprint(os.path.expanduser('~'), len(os.listdir('/tmp')))");
    assert_eq!(text(&done.stdout), "/work 1\n", "{}", text(&done.stderr));
    // A second run does not see the first one's file.
    let done = py("import os; print(sorted(os.listdir('/tmp')))");
    assert_eq!(text(&done.stdout), "[]\n");
}

#[test]
fn the_host_filesystem_is_not_visible() {
    let done = py("import os\nfor p in ['/etc', '/root', '/proc', '/usr/local/lib']:\n    print(p, os.path.exists(p))");
    assert_eq!(
        text(&done.stdout),
        "/etc False\n/root False\n/proc False\n/usr/local/lib True\n",
        "{}",
        text(&done.stderr)
    );
}
