"""The sandbox's walls: grants, escapes, the network, and the host filesystem."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from wasi_python import Grant, Session, artifacts, run
from wasi_python.tools import tool


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/data (granted) holding a file and links that point out of it; tmp/secret.txt
    outside; tmp/out (for writable grants)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello from the host\n")
    (data / "sub").mkdir()
    (data / "sub" / "b.txt").write_text("nested\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET\n")
    (data / "link_file").symlink_to(tmp_path / "secret.txt")
    (data / "link_rel").symlink_to(Path("..") / "secret.txt")
    (data / "link_etc").symlink_to("/etc")
    (data / "link_dir").symlink_to(tmp_path)
    (tmp_path / "out").mkdir()
    return tmp_path


def _try_each(paths: list[str], action: str = "open(p).read()") -> str:
    """A guest program printing, for each path, 'ok' or the exception's type name."""
    return (
        f"for p in {paths!r}:\n"
        "    try:\n"
        f"        r = {action}\n"
        "    except Exception as e:\n"
        "        print(p, type(e).__name__)\n"
        "    else:\n"
        "        print(p, 'ok', repr(r)[:40])\n"
    )


def _lines(done) -> dict[str, str]:
    out = {}
    for line in done.stdout.decode().splitlines():
        path, rest = line.split(" ", 1)
        out[path] = rest
    return out


# --- grants ---------------------------------------------------------------------------


def test_read_through_a_grant(tree):
    code = "import os\nprint(open('/data/a.txt').read(), end='')\nprint(open('/data/sub/b.txt').read(), end='')\nprint(sorted(os.listdir('/data')))"
    done = run(["-c", code], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    assert done.stdout == (
        b"hello from the host\nnested\n['a.txt', 'link_dir', 'link_etc', 'link_file', 'link_rel', 'sub']\n"
    )


def test_grant_host_path_may_be_str(tree):
    done = run(["-c", "print(open('/d/a.txt').read(), end='')"], grants=[Grant(str(tree / "data"), "/d")])
    assert done.ok, done.stderr
    assert done.stdout == b"hello from the host\n"


def test_a_script_in_a_grant_runs(tree):
    (tree / "data" / "prog.py").write_text("import sys\nprint('script', sys.argv[1:])\n")
    done = run(["/data/prog.py", "x"], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    assert done.stdout == b"script ['x']\n"


def test_read_only_grant_refuses_writes(tree):
    before = sorted(p.name for p in (tree / "data").iterdir())
    code = (
        "import os\n"
        "def attempt(label, f):\n"
        "    try:\n"
        "        f()\n"
        "    except PermissionError:\n"
        "        print(label, 'PermissionError')\n"
        "    except Exception as e:\n"
        "        print(label, type(e).__name__)\n"
        "    else:\n"
        "        print(label, 'allowed')\n"
        "attempt('create', lambda: open('/data/new.txt', 'w').write('x'))\n"
        "attempt('append', lambda: open('/data/a.txt', 'a').write('x'))\n"
        "attempt('truncate', lambda: open('/data/a.txt', 'w'))\n"
        "attempt('remove', lambda: os.remove('/data/a.txt'))\n"
        "attempt('mkdir', lambda: os.mkdir('/data/newdir'))\n"
        "attempt('rename', lambda: os.rename('/data/a.txt', '/data/c.txt'))\n"
    )
    done = run(["-c", code], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    assert done.stdout.decode().splitlines() == [
        f"{label} PermissionError" for label in ("create", "append", "truncate", "remove", "mkdir", "rename")
    ]
    # nothing changed on the host
    assert sorted(p.name for p in (tree / "data").iterdir()) == before
    assert (tree / "data" / "a.txt").read_text() == "hello from the host\n"


def test_writes_land_on_a_writable_grant(tree):
    code = (
        "import os\n"
        "with open('/out/result.txt', 'w') as f:\n"
        "    f.write('from the guest\\n')\n"
        "os.mkdir('/out/dir')\n"
        "open('/out/dir/x.bin', 'wb').write(bytes(range(4)))\n"
        "print(sorted(os.listdir('/out')))\n"
    )
    done = run(["-c", code], grants=[Grant(tree / "data", "/data"), Grant(tree / "out", "/out", writable=True)])
    assert done.ok, done.stderr
    assert done.stdout == b"['dir', 'result.txt']\n"
    assert (tree / "out" / "result.txt").read_text() == "from the guest\n"
    assert (tree / "out" / "dir" / "x.bin").read_bytes() == bytes(range(4))


def test_writable_grant_still_refuses_escapes(tree):
    code = _try_each(["/out/../escaped.txt", "/out/link/escaped.txt"], action="open(p, 'w').write('x')")
    (tree / "out" / "link").symlink_to(tree)
    done = run(["-c", code], grants=[Grant(tree / "out", "/out", writable=True)])
    assert done.ok, done.stderr
    res = _lines(done)
    assert set(res) == {"/out/../escaped.txt", "/out/link/escaped.txt"}
    assert all(not r.startswith("ok") for r in res.values()), res
    assert not (tree / "escaped.txt").exists()


# --- escapes --------------------------------------------------------------------------


def test_dotdot_and_symlink_escapes_are_refused(tree):
    paths = [
        "/data/../secret.txt",
        f"/data/../{tree.name}/secret.txt",
        "/data/sub/../../secret.txt",
        "/data/link_file",
        "/data/link_rel",
        "/data/link_etc/passwd",
        "/data/link_etc/hostname",
        "/data/link_dir/secret.txt",
        "/secret.txt",
        str(tree / "secret.txt"),
    ]
    done = run(["-c", _try_each(paths)], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    assert b"TOP SECRET" not in done.stdout
    res = _lines(done)
    assert set(res) == set(paths)
    for p, r in res.items():
        assert r in ("PermissionError", "FileNotFoundError"), (p, r)


def test_listing_through_escapes_is_refused(tree):
    paths = ["/data/..", "/data/link_etc", "/data/link_dir", "/data/sub/../.."]
    done = run(["-c", _try_each(paths, action="os.listdir(p)").replace("for p", "import os\nfor p", 1)], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    res = _lines(done)
    assert set(res) == set(paths)
    # '/data/..' may list only the guest's own root, never the host folder holding secret.txt
    for p, r in res.items():
        assert "secret.txt" not in r, (p, r)
        assert "passwd" not in r, (p, r)
    for p in ("/data/link_etc", "/data/link_dir"):
        assert not res[p].startswith("ok"), (p, res[p])


def test_dotdot_inside_the_grant_is_fine(tree):
    done = run(["-c", "print(open('/data/sub/../a.txt').read(), end='')"], grants=[Grant(tree / "data", "/data")])
    assert done.ok, done.stderr
    assert done.stdout == b"hello from the host\n"


# --- bad grants -----------------------------------------------------------------------


def _writes_marker() -> list[str]:
    return ["-c", "open('/out/marker', 'w').write('ran')"]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda t: Grant(t / "missing", "/m"), id="missing-folder"),
        pytest.param(lambda t: Grant(t / "data", "relative/path"), id="relative-guest-path"),
        pytest.param(lambda t: Grant(t / "data", "data"), id="bare-guest-name"),
        pytest.param(lambda t: Grant(t / "secret.txt", "/s"), id="file-not-folder"),
    ],
)
def test_bad_grant_is_a_valueerror_before_the_run(tree, bad):
    out = Grant(tree / "out", "/out", writable=True)
    with pytest.raises(ValueError, match="grant"):
        run(_writes_marker(), grants=[out, bad(tree)])
    assert not (tree / "out" / "marker").exists()
    # the same call without the bad grant does run
    assert run(_writes_marker(), grants=[out]).ok
    assert (tree / "out" / "marker").read_text() == "ran"


# --- the network ----------------------------------------------------------------------


@pytest.fixture
def listener():
    """A host TCP listener on 127.0.0.1: the guest must never reach it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    s.close()


def _assert_no_connection(listener):
    with pytest.raises(BlockingIOError):
        conn, _ = listener.accept()
        conn.close()


def test_socket_connect_fails(listener):
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
        "else:\n"
        "    print('connected')\n"
    )
    done = run(["-c", code], deadline_s=20)
    assert done.ok, done.stderr
    assert done.stdout.startswith(b"blocked")
    _assert_no_connection(listener)


def test_create_connection_fails(listener):
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "except Exception as e:\n"
        "    print('blocked', type(e).__name__)\n"
        "else:\n"
        "    print('connected')\n"
    )
    done = run(["-c", code], deadline_s=20)
    assert done.ok, done.stderr
    assert done.stdout.startswith(b"blocked")
    _assert_no_connection(listener)


def test_urllib_fails(listener):
    port = listener.getsockname()[1]
    code = (
        "import urllib.request\n"
        f"for url in ['http://127.0.0.1:{port}/', 'http://example.com/']:\n"
        "    try:\n"
        "        urllib.request.urlopen(url, timeout=2).read()\n"
        "    except Exception as e:\n"
        "        print('blocked', type(e).__name__)\n"
        "    else:\n"
        "        print('fetched')\n"
    )
    done = run(["-c", code], deadline_s=20)
    assert done.ok, done.stderr
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("blocked") for line in lines), lines
    _assert_no_connection(listener)


def test_name_resolution_fails():
    code = (
        "import socket\n"
        "try:\n"
        "    print(socket.gethostbyname('localhost'))\n"
        "except Exception as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    done = run(["-c", code], deadline_s=20)
    assert done.ok, done.stderr
    assert done.stdout.startswith(b"blocked")


# --- the host filesystem --------------------------------------------------------------


def test_host_filesystem_is_invisible():
    paths = ["/etc", "/root", "/proc", "/home", "/etc/passwd", "/proc/self/environ", "/dev/null", os.getcwd()]
    code = "import os\n" + "".join(f"print({p!r}, os.path.exists({p!r}))\n" for p in paths)
    done = run(["-c", code])
    assert done.ok, done.stderr
    assert done.stdout.decode().splitlines() == [f"{p} False" for p in paths]


def test_host_files_cannot_be_opened():
    done = run(["-c", _try_each(["/etc/passwd", "/etc/hostname", "/root/.bashrc", "/proc/self/environ"])])
    assert done.ok, done.stderr
    for p, r in _lines(done).items():
        assert not r.startswith("ok"), (p, r)


def test_tmp_is_private_writable_and_gone_after_the_run():
    name = f"pyrt-{uuid.uuid4().hex}"
    write = f"open('/tmp/{name}', 'w').write('guest'); import os; print(os.path.exists('/tmp/{name}'))"
    first = run(["-c", write])
    assert first.ok, first.stderr
    assert first.stdout == b"True\n"
    # not on the host's /tmp
    assert not Path("/tmp", name).exists()
    # gone in the next run
    second = run(["-c", f"import os; print(os.path.exists('/tmp/{name}'))"])
    assert second.ok
    assert second.stdout == b"False\n"


_PROBE_FOLDERS = "import os\nfor p in ('/tmp', '/work'):\n    st = os.stat(p)\n    print(p, os.listdir(p), st.st_mtime_ns, st.st_size)"


def test_a_run_that_leaves_no_file_leaves_no_trace_in_the_next_runs_folders():
    # Unchanged folders are kept for the next run (tempdir.rs): a run that only made
    # and removed files, growing the folders, and set their times must not reach it.
    before = run(["-c", _PROBE_FOLDERS])
    assert before.ok, before.stderr
    mark = (
        "import os\nfor p in ('/tmp', '/work'):\n"
        "    for i in range(400): open(f'{p}/f{i:03}-' + 'x' * 100, 'w').close()\n"
        "    for f in os.listdir(p): os.remove(f'{p}/{f}')\n"
        "    os.utime(p, ns=(7_000_000_007, 7_000_000_007))\n"
        "    print(p, os.stat(p).st_mtime_ns, os.stat(p).st_size)"
    )
    marked = run(["-c", mark])
    assert marked.ok, marked.stderr
    assert all(line.split()[1] == "7000000007" for line in marked.stdout.decode().splitlines())
    after = run(["-c", _PROBE_FOLDERS])
    assert after.ok, after.stderr
    for was, now in zip(before.stdout.decode().splitlines(), after.stdout.decode().splitlines()):
        listing, mtime, size = now.split(" ", 1)[1].rsplit(" ", 2)
        assert listing == "[]" and mtime != "7000000007", now
        assert size == was.rsplit(" ", 1)[1], (was, now)


@pytest.mark.parametrize("path", [{}, {"fuel": 10**10}], ids=["standby-or-not", "never-standby"])
def test_the_command_line_frame_is_answered_once_and_never_to_the_program(path):
    # A fresh run from a preload image gets its command line through the door
    # (control.rs, the go frame; a guest on standby by its own frame) before its program starts;
    # the program asking again gets the door's usual answers: no host without tools, a
    # protocol error from the tool door. A run with fuel never takes a guest on standby.
    ask = (
        "import _host\n"
        "try:\n"
        "    print(_host.call(b'\\0wasi-python go'))\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)"
    )
    alone = run(["-c", ask], env={"SECRET": "s3cret"}, **path)
    assert alone.ok, alone.stderr
    assert alone.stdout == b"ConnectionRefusedError\n"

    @tool
    def echo(s: str) -> str:
        "Echoes."
        return s

    with_tools = run(["-c", ask], env={"SECRET": "s3cret"}, tools=[echo], **path)
    assert with_tools.ok, with_tools.stderr
    assert b"s3cret" not in with_tools.stdout and b"/work" not in with_tools.stdout
    assert with_tools.tools is not None
    assert [o.outcome for o in with_tools.tools.outcomes] == ["protocol"]


@pytest.mark.parametrize("first", [b"0123456789abcde", b"{}"], ids=["same-length", "other-length"])
def test_a_guest_whose_first_frame_is_another_never_gets_the_command_line(first):
    # A session's snapshot carries the session's own boot module: here its `go` sends
    # another frame before asking for the command line. The host hands the command line
    # only to a first door call that asks for it (control.rs, `ControlState`), so this guest gets
    # the door's usual answers, and the run its own command line never.
    patch = (
        "import _wasi_python_boot as b, _host, os\n"
        "def go(spec=None, restored=False):\n"
        "    out = []\n"
        f"    for frame in ({first!r}, b'\\0wasi-python go'):\n"
        "        try:\n"
        "            out.append(_host.call(frame))\n"
        "        except Exception as e:\n"
        "            out.append(type(e).__name__)\n"
        "    os.write(1, repr(out).encode())\n"
        "    os._exit(0)\n"
        "b.go = go\n"
    )
    with Session() as s:
        assert s.run(patch).ok
        snap = s.snapshot()
    done = run(["-c", "print('never')", "an-argument"], snapshot=snap, env={"SECRET": "s3cret"})
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"['ConnectionRefusedError', 'ConnectionRefusedError']"


def test_home_is_writable_and_private():
    done = run(["-c", "import os; open(os.path.expanduser('~/f'), 'w').write('x'); print(os.listdir(os.path.expanduser('~')))"])
    assert done.ok, done.stderr
    assert done.stdout == b"['f']\n"


def test_stdlib_cannot_be_modified():
    code = _try_each(["/usr/local/lib/python315.zip", "/usr/local/lib/new.py"], action="open(p, 'ab').write(b'x')")
    done = run(["-c", code])
    assert done.ok, done.stderr
    for p, r in _lines(done).items():
        assert not r.startswith("ok"), (p, r)
    assert run(["-c", "import json; print(json.dumps(1))"]).stdout == b"1\n"


# --- files: quotas, descriptors, leftovers, planted links (hostile guests) ---------------


_FILL = """
import errno, sys
n = 0
try:
    with open(sys.argv[1], 'wb') as f:
        while n < 4096:
            f.write(b'x' * (1 << 20)); f.flush(); n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
print('alive')
"""


@pytest.mark.parametrize("where", ["/tmp/big", "/work/big", "big", "~/big"])
def test_writes_past_file_write_bytes_fail_with_enospc_and_the_run_goes_on(where):
    path = where.replace("~", "/work")
    done = run(["-c", _FILL, path], file_write_bytes=4 << 20)
    assert done.ok, done.stderr
    first, last = done.stdout.decode().splitlines()
    assert first.split()[0] == "ENOSPC" and last == "alive"
    assert 4 << 20 <= done.file_bytes_written <= 5 << 20


def test_the_quota_counts_writable_grants_too(tree):
    done = run(["-c", _FILL, "/out/big"], grants=[Grant(tree / "out", "/out", writable=True)], file_write_bytes=2 << 20)
    assert done.stdout.decode().startswith("ENOSPC ")
    assert (tree / "out" / "big").stat().st_size <= 3 << 20


def test_a_quota_of_none_is_no_quota_and_the_default_is_256_mib():
    import inspect

    assert inspect.signature(run).parameters["file_write_bytes"].default == 256 << 20
    # A 300 MiB hole counts as written (past the default) but takes no disk.
    code = "f = open('/tmp/x', 'wb')\nf.seek(300 << 20)\nf.write(b'z')\nf.close()"
    done = run(["-c", code], file_write_bytes=None)
    assert done.ok and done.file_bytes_written == (300 << 20) + 1, done.stderr
    refused = run(["-c", code])
    assert not refused.ok and b"No space left" in refused.stderr, refused.stderr


def test_a_session_counts_its_turns_together():
    with Session(file_write_bytes=3 << 20) as s:
        assert s.run("open('/tmp/a', 'wb').write(b'a' * (2 << 20))").ok
        done = s.run(_FILL.replace("sys.argv[1]", "'/tmp/b'"))
        assert done.stdout.decode().startswith("ENOSPC ")
        assert done.file_bytes_written <= 4 << 20


def test_descriptors_past_max_open_files_fail_with_emfile():
    code = """
import errno
held = []
try:
    while len(held) < 5000:
        held.append(open('/tmp/f'))
except OSError as e:
    print(errno.errorcode[e.errno], len(held))
"""
    done = run(["-c", "open('/tmp/f', 'w').close()\n" + code], max_open_files=64)
    assert done.ok, done.stderr
    name, n = done.stdout.decode().split()
    assert name == "EMFILE" and 40 <= int(n) <= 64


def test_planted_symlinks_may_not_leave_a_writable_grant(tree):
    code = """
import errno, os
for i, t in enumerate(['/etc/passwd', '../secret.txt', 'sub/../../x', 'a.txt', 'sub/b.txt']):
    try:
        os.symlink(t, '/out/l%d' % i); print(t, 'made')
    except OSError as e:
        print(t, errno.errorcode[e.errno])
"""
    done = run(["-c", code], grants=[Grant(tree / "out", "/out", writable=True)])
    assert done.stdout.decode().splitlines() == [
        "/etc/passwd EPERM", "../secret.txt EPERM", "sub/../../x EPERM", "a.txt made", "sub/b.txt made",
    ], done.stderr
    for link in (tree / "out").iterdir():
        assert not os.readlink(link).startswith("/") and ".." not in os.readlink(link)


def _holding(name: str) -> list[str]:
    """This process's private folders whose /tmp or /work holds ``name``."""
    import tempfile

    top, me = tempfile.gettempdir(), f"wasi-python-{os.getpid()}-"
    return [
        n for n in os.listdir(top)
        if n.startswith(me) and any(os.path.lexists(os.path.join(top, n, d, name)) for d in ("tmp", "work"))
    ]


def test_a_tree_deeper_than_path_max_is_removed_with_the_run():
    code = """
import os
name = 'd' * 200
for top in ['/tmp/deep-a', '/tmp/deep-b', '/work/deep-c']:
    os.mkdir(top); os.chdir(top)
    for _ in range(18):
        os.mkdir(name); os.chdir(name); open('f', 'w').write('x')
os.chdir('/tmp')
os.rename('/tmp/deep-b', '/tmp/deep-a/' + '/'.join([name] * 18) + '/moved')
print('built')
"""
    done = run(["-c", code])
    assert done.stdout == b"built\n", done.stderr
    # Removed just after the result is handed back: wait for this run's trees alone.
    deadline = time.monotonic() + 10
    while _holding("deep-a") or _holding("deep-c"):
        assert time.monotonic() < deadline, (_holding("deep-a"), _holding("deep-c"))
        time.sleep(0.02)


def test_stale_folders_of_dead_processes_are_swept_at_start():
    import subprocess
    import sys
    import tempfile

    # A process that dies (SIGKILL) inside a run leaves its folders; the next process sweeps them.
    child = subprocess.run(
        [sys.executable, "-c", "import os, signal, threading, wasi_python\n"
         "threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
         "wasi_python.run(['-c', 'import time; open(\"/tmp/x\", \"w\").write(\"x\"); time.sleep(30)'])\n"],
        capture_output=True, timeout=120,
    )
    assert child.returncode == -9, child.stderr
    dead = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("wasi-python-") and not _alive(n)]
    assert dead, "the killed process left its folders"
    after = subprocess.run([sys.executable, "-c", "import wasi_python; wasi_python.run(['-c', 'pass'])"], timeout=120)
    assert after.returncode == 0
    still = [n for n in dead if os.path.exists(os.path.join(tempfile.gettempdir(), n))]
    assert still == [], still


def test_the_folders_of_runs_still_alive_at_exit_are_removed():
    import subprocess
    import sys
    import tempfile

    # The interpreter exits while a daemon thread's guest still sleeps: the atexit hook
    # removes the run's folders, which the run itself would never get to.
    child = subprocess.run(
        [sys.executable, "-c", "import os, threading, time, wasi_python\n"
         "prog = ['-c', 'import time; open(\"/tmp/x\", \"w\").write(\"x\"); time.sleep(60)']\n"
         "threading.Thread(target=wasi_python.run, args=(prog,), daemon=True).start()\n"
         "time.sleep(2)\n"
         "me = 'wasi-python-%d-' % os.getpid()\n"
         "import tempfile; print(sum(n.startswith(me) for n in os.listdir(tempfile.gettempdir())), os.getpid())\n"],
        capture_output=True, timeout=120,
    )
    assert child.returncode == 0, child.stderr
    live, pid = map(int, child.stdout.split())
    assert live == 1, "the run had its folder while it ran"
    left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"wasi-python-{pid}-")]
    assert left == [], left


def _alive(folder: str) -> bool:
    pid = int(folder.split("-")[2])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.mark.parametrize("what", ["artifacts", "package", "above"])
def test_a_writable_grant_over_the_runtimes_own_files_is_refused(what):
    import wasi_python

    own = {"artifacts": artifacts(), "package": Path(wasi_python.__file__).parent}
    own["above"] = own["package"].parent
    with pytest.raises(ValueError, match="grants|grant"):
        run(["-c", "pass"], grants=[Grant(own[what], "/own", writable=True)])
    assert run(["-c", "pass"], grants=[Grant(own[what], "/own")]).ok


def test_the_working_folder_is_private_writable_and_home():
    done = run(["-c", "import os; open('out.csv', 'w').write('a'); print(os.getcwd(), os.environ['HOME'], os.listdir())"])
    assert done.stdout == b"/work /work ['out.csv']\n", done.stderr
    assert run(["-c", "import os; print(os.listdir('/work'))"]).stdout == b"[]\n"


def test_workdir_on_a_writable_grant_gives_the_files_back(tree):
    out = tree / "out"
    done = run(["-c", "open('r.txt', 'w').write('back')"], grants=[Grant(out, "/out", writable=True)], workdir="/out")
    assert done.ok, done.stderr
    assert (out / "r.txt").read_text() == "back"
    with pytest.raises(ValueError, match="workdir"):
        run(["-c", "pass"], grants=[Grant(out, "/out")], workdir="/out")
    with pytest.raises(ValueError, match="workdir"):
        run(["-c", "pass"], workdir="/elsewhere")
    with pytest.raises(TypeError, match="workdir"):
        run(["-c", "pass"], workdir=5)


# --- the door under hostile arguments: checking is bounded, the deadline holds -------------


# A JSON value type with two array branches, as pydantic emits for a recursive model: nested
# lists whose leaf fails make every level try both, 2^depth applications if unbounded.
_BRANCHING = {
    "$defs": {"J": {"anyOf": [
        {"type": "null"},
        {"type": "array", "items": {"$ref": "#/$defs/J"}},
        {"type": "array", "items": {"$ref": "#/$defs/J"}, "maxItems": 3},
    ]}},
    "type": "object", "properties": {"x": {"$ref": "#/$defs/J"}}, "required": ["x"],
}


def _take(x):
    return "ran"


_bomb_tool = tool(_take, name="take", description="Takes a JSON value.", input_schema=_BRANCHING)

_BOMB = "from host import tools, ToolError\nx = True\nfor _ in range(40): x = [x]\n"
_BOMB_LOOP = _BOMB + "while True:\n    try: tools.take(x=x)\n    except ToolError: pass\n"


def test_a_schema_bomb_is_refused_as_too_complex_and_the_run_goes_on():
    code = _BOMB + (
        "try: tools.take(x=x)\n"
        "except ToolError as e: print(e.kind, 'too complex to check' in str(e))\n"
        "print(tools.take(x=[None, [None]]))\n"
    )
    done = run(["-c", code], tools=[_bomb_tool], deadline_s=30)
    assert done.stdout == b"invalid_arguments True\nran\n", done.stderr
    bomb, fine = done.tools.outcomes[-2:]
    assert (bomb.outcome, fine.outcome) == ("invalid_arguments", "ok")


def test_unique_items_over_90000_lists_is_answered():
    schema = {"type": "object", "properties": {"rows": {"type": "array", "uniqueItems": True}}}
    code = (
        "from host import tools, ToolError\n"
        "try: tools.rows(rows=[[1, 2]] * 90000)\n"
        "except ToolError as e: print(e.kind)\n"
        "print(tools.rows(rows=[[i, 2] for i in range(90000)]))\n"
    )
    t = tool(lambda rows: "ran", name="rows", description="Takes rows.", input_schema={**schema, "required": ["rows"]})
    done = run(["-c", code], tools=[t], deadline_s=30)
    assert done.stdout == b"invalid_arguments\nran\n", done.stderr


def test_the_run_ends_at_its_deadline_whatever_the_guest_sends_the_door():
    started = time.monotonic()
    done = run(["-c", _BOMB_LOOP], tools=[_bomb_tool], deadline_s=1.0)
    took = time.monotonic() - started
    assert done.trapped == "deadline", done.stderr
    # The target is 50 ms past the deadline (measured in tests/bench/api_bench.py); the
    # bound here only says "not the 42 s an unbounded check took", with room for a slow VM.
    assert took < 3.0, took
    assert {o.outcome for o in done.tools.outcomes[1:]} <= {"invalid_arguments", "timeout"}


def test_a_cancel_ends_the_run_while_the_door_checks():
    ev = threading.Event()
    threading.Timer(0.5, ev.set).start()
    started = time.monotonic()
    done = run(["-c", _BOMB_LOOP], tools=[_bomb_tool], deadline_s=60, cancel=ev)
    assert done.trapped == "cancelled", done.stderr
    assert time.monotonic() - started < 3.0


def test_eight_hostile_guests_at_once_leave_the_host_responsive():
    # Eight threads, each running one guest that sends bombs to the door until its deadline
    # (run_async's pool would run only as many at once as there are CPUs).
    gaps: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        last = time.monotonic()
        while not stop.wait(0.01):
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    results: list = [None] * 8

    def guest(i: int) -> None:
        results[i] = run(["-c", _BOMB_LOOP], tools=[_bomb_tool], deadline_s=2.0)

    tick = threading.Thread(target=ticker)
    tick.start()
    guests = [threading.Thread(target=guest, args=(i,)) for i in range(8)]
    started = time.monotonic()
    try:
        for g in guests:
            g.start()
        for g in guests:
            g.join()
        took = time.monotonic() - started
    finally:
        stop.set()
        tick.join()
    assert [r.trapped for r in results] == ["deadline"] * 8, [r.stderr[-200:] for r in results]
    # All eight end near their common deadline, and the host thread kept ticking.
    assert took < 5.0, took
    assert len(gaps) > 50 and max(gaps) < 1.0, (len(gaps), max(gaps))
