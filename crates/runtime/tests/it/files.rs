//! The file quotas and the private folders, against hostile guests: bytes written,
//! descriptors held, entries made, symlinks planted, trees too deep to remove by path.


use wasi_python_runtime::{Error, Grant, RunConfig};

use crate::{Dir, py, run, text};

/// Writes 1 MiB chunks until refused; prints the errno name and the MiB written.
const FILL: &str = "\
import errno, os, sys
path = sys.argv[1]
n = 0
try:
    with open(path, 'wb') as f:
        while n < 4096:
            f.write(b'x' * (1 << 20))
            f.flush()
            n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
print('alive')
";

#[test]
fn writes_past_the_quota_fail_with_enospc_and_the_run_goes_on() {
    for path in ["/tmp/big", "/work/big", "big"] {
        let done = run(RunConfig::new(["-c", FILL, path]).file_write_bytes(Some(8 << 20)));
        let out = text(&done.stdout);
        assert_eq!(done.exit_code, Some(0), "{path}: {}", text(&done.stderr));
        assert!(out.starts_with("ENOSPC "), "{path}: {out}");
        assert!(out.ends_with("alive\n"), "{path}: {out}");
        // At most one write of overshoot: 8 MiB allowed, a 1 MiB write may cross it.
        assert!(done.file_bytes_written >= 8 << 20, "{}", done.file_bytes_written);
        assert!(done.file_bytes_written <= 9 << 20, "{}", done.file_bytes_written);
    }
}

#[test]
fn the_quota_counts_writable_grants_and_growth_by_truncate() {
    let d = Dir::new("quota-grant");
    let prog = "\
import errno, os
with open('/out/a', 'wb') as f:
    f.write(b'y' * 1000)
try:
    with open('/out/b', 'wb') as f:
        f.truncate(10 << 20)
    print('grew')
except OSError as e:
    print(errno.errorcode[e.errno])
";
    let done = run(RunConfig::new(["-c", prog]).grant(Grant::writable(&d.0, "/out")).file_write_bytes(Some(1 << 20)));
    assert_eq!(text(&done.stdout), "ENOSPC\n", "{}", text(&done.stderr));
    assert_eq!(done.file_bytes_written, 1000);
    assert_eq!(std::fs::read(d.0.join("a")).unwrap().len(), 1000);
}

#[test]
fn holes_left_by_seeking_or_pwriting_past_the_end_count_as_written() {
    // A 1-byte write 10 MiB past the end makes a 10 MiB file: an embedder that copies it
    // pays for every byte, so the hole counts, and past the quota it is refused.
    let prog = "\
import errno, os
def attempt(what, f):
    try:
        f(); print(what, 'ok')
    except OSError as e:
        print(what, errno.errorcode[e.errno])
fd = os.open('/tmp/s', os.O_WRONLY | os.O_CREAT)
os.lseek(fd, 1 << 20, os.SEEK_SET)
attempt('seek 1 MiB', lambda: os.write(fd, b'x'))
os.lseek(fd, 10 << 20, os.SEEK_END)
attempt('seek 10 MiB', lambda: os.write(fd, b'x'))
attempt('again there', lambda: os.write(fd, b'x'))
attempt('pwrite 10 MiB', lambda: os.pwrite(fd, b'x', 20 << 20))
attempt('pwrite inside', lambda: os.pwrite(fd, b'y', 10))
print(os.fstat(fd).st_size)
";
    let done = run(RunConfig::new(["-c", prog]).file_write_bytes(Some(4 << 20)));
    assert_eq!(
        text(&done.stdout),
        format!("seek 1 MiB ok\nseek 10 MiB ENOSPC\nagain there ENOSPC\npwrite 10 MiB ENOSPC\npwrite inside ok\n{}\n", (1 << 20) + 1),
        "{}",
        text(&done.stderr)
    );
    assert_eq!(done.file_bytes_written, (1 << 20) + 2);
}

#[test]
fn reopening_an_existing_file_is_never_refused_as_a_creation() {
    // Every open with O_CREAT counts toward the 100,000 entries; past the count an open
    // of an existing file still passes, and only a new entry is refused.
    let n = wasi_python_runtime::MAX_CREATED_ENTRIES + 10;
    let prog = format!(
        "\
import errno
for i in range({n}):
    with open('/tmp/log', 'a') as f:
        f.write('x')
print(len(open('/tmp/log').read()))
try:
    open('/tmp/new', 'w')
except OSError as e:
    print(errno.errorcode[e.errno])
"
    );
    let done = run(RunConfig::new(["-c", &prog]));
    assert_eq!(text(&done.stdout), format!("{n}\nENOSPC\n"), "{}", text(&done.stderr));
}

#[test]
fn no_quota_means_none() {
    // A 300 MiB hole counts as written (past the 256 MiB default) but takes no disk.
    let prog = "f = open('/tmp/x', 'wb')\nf.seek(300 << 20)\nf.write(b'z')\nf.close()";
    let done = run(RunConfig::new(["-c", prog]).file_write_bytes(None));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(done.file_bytes_written, (300 << 20) + 1);
    let refused = run(RunConfig::new(["-c", prog]));
    assert_eq!(refused.exit_code, Some(1), "the default quota refuses it");
    assert!(text(&refused.stderr).contains("OSError"), "{}", text(&refused.stderr));
}

#[test]
fn descriptors_past_max_open_files_fail_with_emfile_and_are_given_back() {
    let prog = "\
import errno
held = []
try:
    while len(held) < 5000:
        held.append(open('/tmp/f%d' % len(held), 'w'))
except OSError as e:
    print(errno.errorcode[e.errno], len(held))
for f in held:
    f.close()
held = [open('/tmp/f%d' % i) for i in range(50)]
print('reopened', len(held))
";
    let done = run(RunConfig::new(["-c", prog]).max_open_files(100));
    let out = text(&done.stdout);
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    let first = out.lines().next().unwrap();
    let (name, n) = first.split_once(' ').unwrap();
    assert_eq!(name, "EMFILE", "{out}");
    // The guest's own descriptors (the stdlib, CPython's) count too: a few below 100.
    let n: usize = n.parse().unwrap();
    assert!((80..=100).contains(&n), "{out}");
    assert!(out.contains("reopened 50"), "{out}");
}

#[test]
fn symlinks_that_leave_the_folder_are_refused() {
    let d = Dir::new("symlink");
    let prog = "\
import errno, os
for target in ['/etc/passwd', '../../etc', 'a/../../x', 'ok.txt', 'sub/ok', '.']:
    name = '/out/l%d' % len(os.listdir('/out'))
    try:
        os.symlink(target, name)
        print(target, 'made')
    except OSError as e:
        print(target, errno.errorcode[e.errno])
try:
    os.symlink('x' * 5000, '/out/long')
except OSError as e:
    print('long', errno.errorcode[e.errno])
";
    let done = run(RunConfig::new(["-c", prog]).grant(Grant::writable(&d.0, "/out")));
    assert_eq!(
        text(&done.stdout),
        "/etc/passwd EPERM\n../../etc EPERM\na/../../x EPERM\nok.txt made\nsub/ok made\n. made\nlong ENAMETOOLONG\n",
        "{}",
        text(&done.stderr)
    );
    let links: Vec<_> = std::fs::read_dir(&d.0).unwrap().flatten().collect();
    assert_eq!(links.len(), 3);
}

#[test]
fn a_tree_deeper_than_path_max_does_not_outlive_the_run() {
    // 18 levels of 200-character names, then moved under another deep tree: more than
    // PATH_MAX on the host. The run's private folders must still go.
    let prog = "\
import os
name = 'd' * 200
for top in ['/tmp/deep-tree-a', '/tmp/deep-tree-b']:
    os.mkdir(top)
    os.chdir(top)
    for _ in range(18):
        os.mkdir(name)
        os.chdir(name)
        open('f', 'w').write('x')
os.chdir('/tmp')
os.rename('/tmp/deep-tree-b', '/tmp/deep-tree-a/' + '/'.join([name] * 18) + '/moved')
print('moved')
";
    let done = py(prog);
    assert_eq!(text(&done.stdout), "moved\n", "{}", text(&done.stderr));
    // The folders go just after the result is handed back (on the guest's thread), and
    // other tests' runs come and go meanwhile: wait for this run's tree alone.
    let started = std::time::Instant::now();
    while !holding("deep-tree-a").is_empty() {
        assert!(started.elapsed().as_secs() < 10, "left on the host: {:?}", holding("deep-tree-a"));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// This process's private folders whose `/tmp` holds `name`.
fn holding(name: &str) -> Vec<String> {
    let me = format!("wasi-python-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&me) && std::env::temp_dir().join(n).join("tmp").join(name).exists())
        .collect()
}

#[test]
fn the_working_folder_is_private_writable_and_home() {
    let done = py("import os; open('out.csv', 'w').write('a,b'); print(os.getcwd(), os.environ['HOME'], os.listdir('.'))");
    assert_eq!(text(&done.stdout), "/work /work ['out.csv']\n", "{}", text(&done.stderr));
    let again = py("import os; print(os.listdir('/work'))");
    assert_eq!(text(&again.stdout), "[]\n", "each run has its own");
}

#[test]
fn workdir_may_be_a_writable_grant_and_nothing_else() {
    let d = Dir::new("workdir");
    let done = run(RunConfig::new(["-c", "open('out.csv', 'w').write('1,2')"]).grant(Grant::writable(&d.0, "/out")).workdir("/out"));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(std::fs::read_to_string(d.0.join("out.csv")).unwrap(), "1,2");
    let err = crate::runtime().run(RunConfig::new(["-c", "pass"]).workdir("/nowhere")).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { param: "workdir", .. }), "{err:?}");
    let read_only = RunConfig::new(["-c", "pass"]).grant(Grant::read_only(&d.0, "/out")).workdir("/out");
    let err = crate::runtime().run(read_only).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { param: "workdir", .. }), "{err:?}");
}

#[test]
fn a_writable_grant_may_not_hold_the_runtimes_own_files() {
    let rt = crate::runtime();
    let dist = rt.artifacts().dir().to_path_buf();
    let above = dist.parent().unwrap().to_path_buf();
    for host in [dist.clone(), above, dist.join("lib")] {
        let err = rt
            .run(RunConfig::new(["-c", "pass"]).grant(Grant::writable(&host, "/own")))
            .unwrap_err();
        assert!(matches!(err, Error::Grant { .. }), "{}: {err:?}", host.display());
    }
    let done = run(RunConfig::new(["-c", "import os; print(len(os.listdir('/own')) > 0)"]).grant(Grant::read_only(&dist, "/own")));
    assert_eq!(text(&done.stdout), "True\n", "read-only is fine: {}", text(&done.stderr));
}
