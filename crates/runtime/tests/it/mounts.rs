//! Mounts served by a provider: the guest's `open`, `os.listdir`, `os.stat` and friends
//! on files that live in the embedder's code.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use wasi_python_runtime::{Errno, FileError, FileKind, FileProvider, MemoryFiles, Mount, RunConfig, Stat};

use crate::{run, runtime, text};

fn memory(files: &[(&str, &[u8])], writable: bool) -> Arc<MemoryFiles> {
    Arc::new(MemoryFiles::new(files.iter().map(|(p, b)| (p.to_string(), Bytes::copy_from_slice(b))), writable).unwrap())
}

fn mounted(code: &str, m: &Arc<MemoryFiles>, writable: bool) -> wasi_python_runtime::Completed {
    run(RunConfig::new(["-c", code]).mount(Mount::new(m.clone(), "/data", writable)))
}

#[test]
fn a_mounted_file_reads_lists_and_stats() {
    let m = memory(&[("in.csv", b"a,b\n1,2\n"), ("sub/x.txt", b"x")], false);
    let code = "import os; print(open('/data/in.csv').read(), end=''); print(sorted(os.listdir('/data')), os.listdir('/data/sub')); \
                st = os.stat('/data/in.csv'); print(st.st_size, os.path.isdir('/data/sub'), os.path.isfile('/data/sub/x.txt'), os.path.exists('/data/nope'))";
    let done = mounted(code, &m, false);
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "a,b\n1,2\n['in.csv', 'sub'] ['x.txt']\n8 True True False\n");
    let rec = done.files.expect("a record with mounts");
    assert!(rec.total > 0 && rec.faults.is_empty(), "{rec:?}");
}

#[test]
fn descriptors_above_two_to_the_thirty_work_in_the_guest() {
    let m = memory(&[("f", b"0123456789")], false);
    let code = "import os; fd = os.open('/data/f', os.O_RDONLY); print(fd >= 1 << 30, os.read(fd, 3), os.lseek(fd, 5, 0), os.read(fd, 100), os.fstat(fd).st_size, os.pread(fd, 2, 1)); os.close(fd)";
    let done = mounted(code, &m, false);
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "True b'012' 5 b'56789' 10 b'12'\n");
}

#[test]
fn writes_reach_the_provider_at_close_and_the_working_folder_can_be_a_mount() {
    let m = memory(&[], true);
    let code = "import os; open('out.csv', 'w').write('a,b\\n'); os.mkdir('d'); open('d/x', 'wb').write(b'xyz'); \
                f = open('log', 'a'); f.write('1'); f.close(); f = open('log', 'a'); f.write('2'); f.close(); \
                os.rename('out.csv', 'moved.csv'); print(sorted(os.listdir('.')), os.getcwd())";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(m.clone(), "/out", true)).workdir("/out"));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "['d', 'log', 'moved.csv'] /out\n");
    let files: Vec<(String, Vec<u8>)> = m.files().into_iter().map(|(p, b)| (p, b.to_vec())).collect();
    assert_eq!(
        files,
        vec![("/d/x".into(), b"xyz".to_vec()), ("/log".into(), b"12".to_vec()), ("/moved.csv".into(), b"a,b\n".to_vec())]
    );
}

#[test]
fn what_the_guest_did_not_close_reaches_the_provider_at_the_end_whatever_the_ending() {
    for (ending, tail) in [("exit", "import os; os._exit(3)"), ("deadline", "while True: pass"), ("exception", "1/0")] {
        let m = memory(&[], true);
        let code = format!("f = open('/data/unclosed.txt', 'w'); f.write('kept'); f.flush()\n{tail}");
        // Not `run`, which sets a 30 s deadline.
        let cfg = RunConfig::new(["-c", &code]).mount(Mount::new(m.clone(), "/data", true)).deadline(Some(Duration::from_millis(500)));
        let done = runtime().run(cfg).unwrap();
        if ending == "deadline" {
            assert_eq!(done.trapped, Some(wasi_python_runtime::Trapped::Deadline));
        }
        let files: Vec<_> = m.files().into_iter().map(|(p, b)| (p, b.to_vec())).collect();
        assert_eq!(files, vec![("/unclosed.txt".into(), b"kept".to_vec())], "{ending}: {}", text(&done.stderr));
    }
}

#[test]
fn the_mount_cannot_be_left_by_dotdot_and_a_readonly_mount_refuses_writes() {
    let m = memory(&[("f", b"x")], false);
    let code = "import os\nfor p in ['/data/../etc', '/data/sub/../../x', '/data/..']:\n    try:\n        print(p, sorted(os.listdir(p))[:3])\n    except OSError as e:\n        print(p, type(e).__name__)\n\
                try:\n    open('/data/new', 'w')\nexcept OSError as e:\n    print('write', e.errno == __import__('errno').EROFS)";
    let done = mounted(code, &m, false);
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    // wasi-libc hands `..` to the mount's folder, which never climbs above its root.
    assert_eq!(
        text(&done.stdout),
        "/data/../etc PermissionError\n/data/sub/../../x PermissionError\n/data/.. PermissionError\nwrite True\n"
    );
}

#[test]
fn rename_across_mounts_or_out_of_a_mount_is_exdev() {
    let a = memory(&[("f", b"x")], true);
    let b = memory(&[], true);
    let code = "import os, errno\nfor dst in ['/b/f', '/tmp/f']:\n    try:\n        os.rename('/a/f', dst)\n    except OSError as e:\n        print(errno.errorcode[e.errno])";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(a, "/a", true)).mount(Mount::new(b, "/b", true)));
    assert_eq!(text(&done.stdout), "EXDEV\nEXDEV\n", "{}", text(&done.stderr));
}

/// A provider that counts its calls and fails in chosen ways; each `stat` takes `sleep`,
/// or until `release`.
struct Odd {
    calls: Mutex<u64>,
    sleep: Duration,
    release: std::sync::atomic::AtomicBool,
}

impl Odd {
    fn new(sleep: Duration) -> Odd {
        Odd { calls: Mutex::new(0), sleep, release: Default::default() }
    }
}

impl FileProvider for Odd {
    fn stat(&self, path: &str) -> Result<Stat, FileError> {
        *self.calls.lock() += 1;
        let started = std::time::Instant::now();
        while started.elapsed() < self.sleep && !self.release.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        match path {
            "/" | "/dir" => Ok(Stat { kind: FileKind::Dir, size: 0, mtime_ns: 0 }),
            "/secret" => Err(FileError::Fault("ValueError: password=hunter2".into())),
            "/denied" => Err(Errno::Acces.into()),
            _ => Ok(Stat { kind: FileKind::File, size: 1, mtime_ns: 0 }),
        }
    }
    fn list(&self, _: &str) -> Result<Vec<(String, FileKind)>, FileError> {
        Ok(vec![("a".into(), FileKind::File), ("../evil".into(), FileKind::File), ("dir".into(), FileKind::Dir)])
    }
    fn read(&self, _: &str) -> Result<Bytes, FileError> {
        Ok(Bytes::from_static(b"z"))
    }
}

#[test]
fn faults_are_eio_without_the_secret_refusals_keep_their_errno_and_hangs_are_bounded() {
    let odd = Arc::new(Odd::new(Duration::ZERO));
    let code = "import os, errno\nfor p in ['/m/secret', '/m/denied']:\n    try:\n        os.stat(p)\n    except OSError as e:\n        print(errno.errorcode[e.errno], str(e))\nprint(os.listdir('/m'))";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(odd.clone(), "/m", false)));
    let out = text(&done.stdout);
    assert!(out.starts_with("EIO "), "{out}{}", text(&done.stderr));
    assert!(!out.contains("hunter2") && !text(&done.stderr).contains("hunter2"));
    assert!(out.contains("EACCES"), "{out}");
    assert!(out.ends_with("['a', 'dir']\n"), "{out}");
    let rec = done.files.unwrap();
    assert_eq!(rec.faults.len(), 1);
    assert!(rec.faults[0].error.contains("hunter2") && rec.faults[0].path == "/m/secret");

    // A stat that takes a minute, under a 200 ms timeout: the guest gets ETIMEDOUT, and the
    // run ends without waiting for the call (in half the minute: on any load).
    let slow = Arc::new(Odd::new(Duration::from_secs(60)));
    let started = std::time::Instant::now();
    let done = run(
        RunConfig::new(["-c", "import os, errno\ntry:\n    os.stat('/m/x')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])"])
            .mount(Mount::new(slow.clone(), "/m", false).timeout(Duration::from_millis(200))),
    );
    let took = started.elapsed();
    slow.release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(text(&done.stdout), "ETIMEDOUT\n", "{}", text(&done.stderr));
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(done.files.unwrap().faults[0].error, "timed out");
}

#[test]
fn max_file_calls_ends_in_eio_and_is_counted() {
    let odd = Arc::new(Odd::new(Duration::ZERO));
    let code = "import os\nn = 0\nfor i in range(50):\n    try:\n        os.stat(f'/m/f{i}')\n        n += 1\n    except OSError:\n        pass\nprint(n)";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(odd.clone(), "/m", false)).max_file_calls(Some(10)));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    let rec = done.files.unwrap();
    assert_eq!(rec.total, 10);
    assert!(rec.refused_calls > 0);
    assert!(*odd.calls.lock() <= 10);
}

#[test]
fn descriptors_held_in_mounts_count_against_max_open_files() {
    let m = memory(&[("f", b"x")], false);
    let code = "import errno\nfs = []\ntry:\n    for i in range(20):\n        fs.append(open('/data/f'))\nexcept OSError as e:\n    print(len(fs), errno.errorcode[e.errno])";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(m, "/data", false)).max_open_files(8));
    assert_eq!(text(&done.stdout), "8 EMFILE\n", "{}", text(&done.stderr));
}

/// Real files (`/tmp`) opened after mount files see the mount's descriptors: one count.
#[test]
fn descriptors_in_mounts_and_in_host_files_are_one_count() {
    let m = memory(&[("f", b"x")], false);
    let code = "import errno\nfs = []\ntry:\n    for i in range(8):\n        fs.append(open('/data/f'))\n    for i in range(8):\n        fs.append(open(f'/tmp/t{i}', 'w'))\nexcept OSError as e:\n    print(len(fs), errno.errorcode[e.errno])\n\
                for f in fs[:4]:\n    f.close()\nfs += [open(f'/tmp/u{i}', 'w') for i in range(4)]\nprint(len(fs))";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(m, "/data", false)).max_open_files(8));
    assert_eq!(text(&done.stdout), "8 EMFILE\n12\n", "{}", text(&done.stderr));
}

/// A provider whose `stat` refuses one path, counting how often it is asked.
struct Refuses {
    asked: Mutex<u64>,
}

impl FileProvider for Refuses {
    fn stat(&self, path: &str) -> Result<Stat, FileError> {
        match path {
            "/" => Ok(Stat { kind: FileKind::Dir, size: 0, mtime_ns: 0 }),
            _ => {
                *self.asked.lock() += 1;
                Err(Errno::Acces.into())
            }
        }
    }
    fn list(&self, _: &str) -> Result<Vec<(String, FileKind)>, FileError> {
        Ok(vec![])
    }
    fn read(&self, _: &str) -> Result<Bytes, FileError> {
        Err(Errno::Acces.into())
    }
}

#[test]
fn a_refused_stat_is_asked_once_a_run() {
    let p = Arc::new(Refuses { asked: Mutex::new(0) });
    let code = "import os\nprint(sum(os.path.exists('/m/secret') for _ in range(200)))\ntry:\n    os.stat('/m/secret')\nexcept PermissionError:\n    print('EACCES')";
    let done = run(RunConfig::new(["-c", code]).mount(Mount::new(p.clone(), "/m", false)));
    assert_eq!(text(&done.stdout), "0\nEACCES\n", "{}", text(&done.stderr));
    assert_eq!(*p.asked.lock(), 1);
}

/// POSIX: a file removed while open stays removed, whatever its descriptors write after.
#[test]
fn a_file_removed_while_open_stays_removed() {
    let m = memory(&[("old", b"old")], true);
    let code = "import os\nfor name, mode in [('new', 'w'), ('old', 'a')]:\n    f = open(f'/data/{name}', mode); f.write('1'); f.flush()\n    os.remove(f'/data/{name}')\n    f.write('2'); f.flush(); os.fsync(f.fileno()); f.close()\n    print(name, os.path.exists(f'/data/{name}'))\n\
                g = open('/data/kept', 'w'); g.write('a'); g.flush(); os.remove('/data/kept'); h = open('/data/kept', 'w'); h.write('b'); g.write('c'); g.close(); h.close()\nprint(open('/data/kept').read())";
    let done = mounted(code, &m, true);
    assert_eq!(text(&done.stdout), "new False\nold False\nb\n", "{}", text(&done.stderr));
    let files: Vec<_> = m.files().into_iter().map(|(p, b)| (p, b.to_vec())).collect();
    assert_eq!(files, vec![("/kept".into(), b"b".to_vec())]);
}

/// What the guest wrote to a file follows it when the file, or a folder above it, is
/// renamed while open; a file replaced by a rename while open is gone, as on POSIX.
#[test]
fn an_open_file_follows_a_rename_of_itself_or_of_its_folder() {
    let m = memory(&[("d/old.txt", b"old"), ("target", b"target")], true);
    let code = "import os\n\
                f = open('/data/d/f.txt', 'w'); f.write('one'); f.flush()\n\
                g = open('/data/d/old.txt', 'a'); g.write('+'); g.flush()\n\
                os.rename('/data/d', '/data/e')\n\
                f.write('two'); f.close(); g.write('!'); g.close()\n\
                h = open('/data/e/f.txt', 'a'); h.write('3'); h.flush()\n\
                t = open('/data/target', 'a'); t.write('-stale')\n\
                os.replace('/data/e/f.txt', '/data/target')\n\
                h.write('4'); h.close(); t.close()\n\
                print(sorted(os.listdir('/data')), sorted(os.listdir('/data/e')))";
    let done = mounted(code, &m, true);
    assert_eq!(text(&done.stdout), "['e', 'target'] ['old.txt']\n", "{}", text(&done.stderr));
    let rec = done.files.unwrap();
    assert!(rec.refused_writes.is_empty(), "{rec:?}");
    let files: Vec<_> = m.files().into_iter().map(|(p, b)| (p, String::from_utf8(b.to_vec()).unwrap())).collect();
    assert_eq!(files, vec![("/e/old.txt".into(), "old+!".into()), ("/target".into(), "onetwo34".into())]);
}

/// A provider whose writes take `write_delay` (or hang until `release`), counting them.
struct SlowWrites {
    files: Mutex<Vec<String>>,
    write_delay: Duration,
    release: Arc<std::sync::atomic::AtomicBool>,
    /// Cancels the run this long after the first write starts.
    cancel_after: Option<(Duration, wasi_python_runtime::CancelToken)>,
}

impl SlowWrites {
    fn new(write_delay: Duration) -> SlowWrites {
        SlowWrites { files: Mutex::new(vec![]), write_delay, release: Arc::default(), cancel_after: None }
    }
}

impl FileProvider for SlowWrites {
    fn stat(&self, path: &str) -> Result<Stat, FileError> {
        match path {
            "/" => Ok(Stat { kind: FileKind::Dir, size: 0, mtime_ns: 0 }),
            _ => Err(Errno::Noent.into()),
        }
    }
    fn list(&self, _: &str) -> Result<Vec<(String, FileKind)>, FileError> {
        Ok(vec![])
    }
    fn read(&self, _: &str) -> Result<Bytes, FileError> {
        Err(Errno::Noent.into())
    }
    fn write(&self, path: &str, _: Bytes) -> Result<(), FileError> {
        if let Some((after, token)) = &self.cancel_after {
            let (after, token) = (*after, token.clone());
            std::thread::spawn(move || {
                std::thread::sleep(after);
                token.cancel();
            });
        }
        let started = std::time::Instant::now();
        while started.elapsed() < self.write_delay && !self.release.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.files.lock().push(path.to_owned());
        Ok(())
    }
}

/// The run's end is at most the write-back grace after its deadline, however many files
/// the guest left open on a slow provider; what missed it is named, never dropped.
#[test]
fn the_write_back_at_the_end_keeps_to_the_deadline_plus_the_grace() {
    // 30 files whose writes take 0.4 s each, one after another: 12 s for all of them.
    let p = Arc::new(SlowWrites::new(Duration::from_millis(400)));
    let code = "fs = [open(f'/m/f{i}', 'w') for i in range(30)]\nfor f in fs:\n    f.write('x'); f.flush()\nwhile True: pass";
    let cfg = RunConfig::new(["-c", code]).mount(Mount::new(p.clone(), "/m", true)).deadline(Some(Duration::from_secs(1)));
    let started = std::time::Instant::now();
    let done = runtime().run(cfg).unwrap();
    let took = started.elapsed();
    let delivered: Vec<String> = p.files.lock().iter().map(|f| format!("/m{f}")).collect();
    p.release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(done.trapped, Some(wasi_python_runtime::Trapped::Deadline), "{}", text(&done.stderr));
    // The 0.5 s grace holds one 0.4 s write (on a busy machine, fewer): the writes got the
    // grace, not their time. And the run ended without them: half their 12 s (on any load).
    assert!(delivered.len() <= 2, "{delivered:?}");
    assert!(took < Duration::from_secs(1) + wasi_python_runtime::WRITE_BACK_GRACE + Duration::from_secs(5), "{took:?}");
    let rec = done.files.unwrap();
    assert!(!rec.undelivered.is_empty() && rec.undelivered_total == rec.undelivered.len() as u64, "{rec:?}");
    // Every file either reached the provider or is named as undelivered.
    for i in 0..30 {
        let f = format!("/m/f{i}");
        assert!(delivered.contains(&f) || rec.undelivered.contains(&f), "{f}: {rec:?}");
    }
}

/// A write that hangs at `fsync` is retried at the run's end within the grace, not for
/// the mount's whole timeout; so is one the run's cancel interrupts. The writes hang for
/// a minute under a 30 s timeout: a run that ends under half of it (on any load) did
/// not wait for either.
#[test]
fn a_hanging_write_back_is_bounded_by_the_grace_after_a_deadline_or_a_cancel() {
    let code = "import os\nf = open('/m/x', 'w'); f.write('x'); f.flush()\ntry:\n    os.fsync(f.fileno())\nexcept OSError as e:\n    print(e.errno)\nwhile True: pass";
    let p = Arc::new(SlowWrites::new(HANG));
    let mount = Mount::new(p.clone(), "/m", true).timeout(HANG_TIMEOUT);
    let started = std::time::Instant::now();
    let done = runtime().run(RunConfig::new(["-c", code]).mount(mount).deadline(Some(Duration::from_secs(1)))).unwrap();
    let took = started.elapsed();
    p.release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(done.trapped, Some(wasi_python_runtime::Trapped::Deadline), "{}", text(&done.stderr));
    assert!(took < HANG_TIMEOUT / 2, "{took:?}");
    assert_eq!(done.files.unwrap().undelivered, vec!["/m/x".to_owned()]);

    // Cancelled 0.3 s into the hanging fsync, with no deadline to speak of.
    let done = cancelled_during_a_hanging_write(code);
    assert_eq!(done.trapped, Some(wasi_python_runtime::Trapped::Cancelled), "{}", text(&done.stderr));

    // The guest ended by itself, the file unclosed; the cancel comes during the write-back.
    let done = cancelled_during_a_hanging_write("import os\nf = open('/m/x', 'w'); f.write('x'); f.flush()\nos._exit(0)");
    assert_eq!((done.exit_code, done.trapped), (Some(0), None), "{}", text(&done.stderr));
}

/// How long the writes of [`a_hanging_write_back_is_bounded_by_the_grace_after_a_deadline_or_a_cancel`]
/// hang, and the mount's timeout (the run's deadline is 30 s, or 1 s).
const HANG: Duration = Duration::from_secs(60);
const HANG_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `code` over a provider whose writes hang (for [`HANG`], under the mount's
/// [`HANG_TIMEOUT`]), cancelling the run 0.3 s after the first write starts; checks the
/// run ended without waiting for the timeout or its 30 s deadline, with `/m/x` named as
/// undelivered.
fn cancelled_during_a_hanging_write(code: &str) -> wasi_python_runtime::Completed {
    let cancel = wasi_python_runtime::CancelToken::new();
    let p = Arc::new(SlowWrites { cancel_after: Some((Duration::from_millis(300), cancel.clone())), ..SlowWrites::new(HANG) });
    let mount = Mount::new(p.clone(), "/m", true).timeout(HANG_TIMEOUT);
    let started = std::time::Instant::now();
    let done = run(RunConfig::new(["-c", code]).mount(mount).cancel(cancel));
    let took = started.elapsed();
    p.release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(took < HANG_TIMEOUT / 2, "{took:?}");
    assert_eq!(done.files.as_ref().unwrap().undelivered, vec!["/m/x".to_owned()]);
    done
}
