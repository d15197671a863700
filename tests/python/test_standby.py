"""Fresh runs served by a guest on standby (crates/runtime/src/standby.rs): a run from
a preload image takes an instance prepared before it asked. Each test first makes sure
a guest waits, then checks that the run behaves as a fresh run: its own arguments,
environment, stdin, limits, tools and cancel, and nothing of another run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from wasi_python import Grant, prepare, run
from wasi_python import _wasi_python as _ext
from wasi_python.tools import tool

PRELOAD = ("numpy",)


def waiting(preload: tuple[str, ...] = PRELOAD) -> int:
    """Guests on standby for runs from the `preload` image (other tests leave some for
    other images, which these runs cannot take)."""
    return _ext.guests_on_standby(str(prepare(preload)))


def warmups(preload: tuple[str, ...] = PRELOAD) -> int:
    """How often guests on standby for runs from the `preload` image were sent to warm up
    while they waited (standby.rs, WARM_EVERY)."""
    return _ext.standby_warmups(str(prepare(preload)))


def standby_waits(preload: tuple[str, ...] = PRELOAD, **kw) -> None:
    """Runs until a guest waits on standby for runs like this one (the first run of an
    image starts one; a run that takes it starts the next)."""
    until = time.monotonic() + 60
    while True:
        if waiting(preload):
            return
        assert run(["-c", "pass"], preload=preload, **kw).ok
        while time.monotonic() < until and not waiting(preload):
            time.sleep(0.01)
        assert time.monotonic() < until, "no guest came on standby"


# The guest's monotonic clock starts at 1 h when its store is made (host.rs,
# GUEST_CLOCK_START): a run served by a guest that waited 0.3 s reads at least 1 h + 0.3 s.
CLOCK_START_NS = 3_600 * 10**9


def test_a_run_on_standby_gets_its_own_arguments_environment_stdin_and_folder():
    standby_waits()
    done = run(
        ["-c", "import os, sys; print(sys.argv, os.environ['X'], os.getcwd(), sys.stdin.read(), os.listdir('/tmp'))", "a1"],
        preload=PRELOAD, env={"X": "y"}, stdin=b"from stdin",
    )
    assert done.ok, done.stderr
    assert done.stdout == b"['-c', 'a1'] y /work from stdin []\n"
    assert done.stderr == b""


def test_a_run_is_served_by_the_waiting_guest():
    # The guest's monotonic clock starts at 1 h when its store is made (host.rs,
    # GUEST_CLOCK_START): a run served by a guest that waited 0.3 s reads at least
    # 1 h + 0.3 s; a run on a store made for it reads about 1 h. So this tells the paths
    # apart, and the tests above, whose checks hold on either path, are known to take
    # this one.
    start = CLOCK_START_NS
    standby_waits()
    time.sleep(0.3)
    done = run(["-c", "import time; print(time.monotonic_ns())"], preload=PRELOAD)
    assert done.ok, done.stderr
    assert int(done.stdout) - start >= 300_000_000
    fresh = run(["-c", "import time; print(time.monotonic_ns())"], preload=PRELOAD, fuel=10**9)
    assert int(fresh.stdout) - start < 300_000_000


def test_a_runs_main_module_on_standby_is_the_one_a_fresh_run_gets():
    # A guest on standby makes the run's fresh `__main__` ahead (guest boot's `serve`).
    code = (
        "import sys; m = sys.modules['__main__']; "
        "print(sorted(vars(m)), m.__name__, m.__spec__, m.__loader__, m.__doc__, m is sys.modules[__name__])"
    )
    standby_waits()
    ahead = run(["-c", code], preload=PRELOAD)
    fresh = run(["-c", code], preload=PRELOAD, fuel=10**9)  # never served by a standby
    assert ahead.ok and fresh.ok, (ahead.stderr, fresh.stderr)
    assert ahead.stdout == fresh.stdout
    assert b"'__builtins__'" in ahead.stdout and ahead.stdout.endswith(b" True\n")


@pytest.mark.parametrize("pause", [0, 0.25], ids=["at-once", "after-warm-ups"])
@pytest.mark.parametrize("from_stdin", [False, True], ids=["-c", "stdin"])
def test_a_run_on_standby_starts_in_the_interpreter_a_fresh_run_gets(from_stdin, pause):
    # A guest on standby takes the run's calls ahead on throwaway objects (guest boot's
    # `_warm_calls`: it registers a `<string>` source, writes a line, shuts down a
    # stand-in logging handler, collects), and again every 20 ms while it waits
    # (standby.rs, WARM_EVERY): none of it may show in the run, one whose program
    # registers no `<string>` source of its own (from stdin) included.
    code = (
        "import sys, gc, linecache, logging; "
        "print(sorted(sys.modules), sorted(linecache._interactive_cache.items()), gc.garbage, "
        "len(logging._handlerList), logging.lastResort._closed, logging.lastResort.lock._is_owned())"
    )
    argv, stdin = ([], code) if from_stdin else (["-c", code], "")
    standby_waits()
    time.sleep(pause)
    ahead = run(argv, stdin=stdin, preload=PRELOAD)
    fresh = run(argv, stdin=stdin, preload=PRELOAD, fuel=10**9)  # never served by a standby
    assert ahead.ok and fresh.ok, (ahead.stderr, fresh.stderr)
    assert ahead.stdout == fresh.stdout
    assert ahead.stdout.endswith(b" [] 1 False False\n")


def test_a_waiting_guest_warms_up_again_and_still_serves_one_run():
    # No run for 0.25 s: the guest on standby warmed its caches again every 20 ms
    # (standby.rs, WARM_EVERY), left the list of waiting guests only for that while, and
    # serves the next run; its warm-ups wrote a line each, which the run does not get.
    standby_waits()
    before = warmups()
    time.sleep(0.25)
    assert waiting() == 1
    assert warmups() - before >= 3
    done = run(["-c", "import time; print(time.monotonic_ns())"], preload=PRELOAD)
    assert done.ok, done.stderr
    assert int(done.stdout) - CLOCK_START_NS >= 250_000_000, "not served by the guest that waited"
    assert done.stderr == b""


def test_only_the_guest_of_the_image_used_last_warms_up():
    # One guest per image waits on standby; only the one made last (after a run of its
    # image) warms up, so a process with many images spends one guest's warm-ups.
    other = ("numpy", "json")
    standby_waits()
    standby_waits(other)  # made after the first: this image was used last
    before = (warmups(PRELOAD), warmups(other))
    time.sleep(0.25)
    after = (warmups(PRELOAD), warmups(other))
    assert waiting() == 1 and waiting(other) == 1
    assert after[0] == before[0], "the older image's guest warmed up"
    assert after[1] - before[1] >= 3


def test_runs_on_standby_do_not_share_random_state_or_globals():
    code = "import random, numpy as np; print(random.random(), np.random.random(), 'leak' in globals()); leak = 1"
    outs = []
    for _ in range(3):
        standby_waits()
        done = run(["-c", code], preload=PRELOAD)
        assert done.ok, done.stderr
        outs.append(done.stdout.split())
    assert len({o[0] for o in outs}) == 3 and len({o[1] for o in outs}) == 3
    assert all(o[2] == b"False" for o in outs)


# A guest on standby runs the reactor's refresh before its run comes (guest boot's
# `serve`); the run then redoes what depends on its own moment or settings.
REFRESHED = ("logging", "zoneinfo")


def test_a_run_on_standby_starts_logging_s_clock_when_it_starts():
    standby_waits(REFRESHED)
    time.sleep(0.5)
    code = "import logging, time; print(time.monotonic_ns(), time.time() - logging._startTime)"
    done = run(["-c", code], preload=REFRESHED)
    assert done.ok, done.stderr
    clock, since_start = done.stdout.split()
    assert int(clock) - CLOCK_START_NS >= 500_000_000, "not served by the guest on standby"
    assert 0 <= float(since_start) < 0.4


def test_a_run_on_standby_with_its_own_time_zone_path_or_u_gets_them():
    standby_waits(REFRESHED)
    done = run(["-c", "import zoneinfo; print(zoneinfo.TZPATH)"], preload=REFRESHED, env={"PYTHONTZPATH": "/opt/tz"})
    assert done.ok, done.stderr
    assert done.stdout == b"('/opt/tz',)\n"
    standby_waits(REFRESHED)
    done = run(["-u", "-c", "import sys; print(sys.stdout.write_through, sys.stderr.write_through)"], preload=REFRESHED)
    assert done.ok, done.stderr
    assert done.stdout == b"True True\n"
    standby_waits(REFRESHED)
    done = run(["-c", "import sys, zoneinfo; print(sys.stdout.write_through, zoneinfo.TZPATH)"], preload=REFRESHED)
    assert done.stdout == b"False ()\n"


def test_a_run_on_standby_keeps_its_own_deadline_memory_and_output_limits():
    standby_waits()
    t = time.monotonic()
    spin = run(["-c", "while True: pass"], preload=PRELOAD, deadline_s=0.3)
    assert spin.trapped == "deadline" and time.monotonic() - t < 5
    standby_waits()
    big = run(["-c", "x = bytearray(400 << 20)"], preload=PRELOAD, memory_bytes=300 << 20)
    assert big.exit_code == 1 and b"MemoryError" in big.stderr
    standby_waits()
    loud = run(["-c", "print('x' * 5000)"], preload=PRELOAD, output_bytes=100)
    assert loud.ok and len(loud.stdout) == 100 and loud.truncated


def test_a_run_on_standby_is_cancelled_by_its_token():
    standby_waits()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    done = run(["-c", "while True: pass"], preload=PRELOAD, cancel=cancel)
    assert done.trapped == "cancelled"


def test_a_run_on_standby_reaches_its_own_tools_and_records_them():
    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    standby_waits()
    done = run(["-c", "from host import tools; print(tools.add(a=2, b=3))"], preload=PRELOAD, tools=[add])
    assert done.ok, done.stderr
    assert done.stdout == b"5\n"
    assert [(o.op, o.tool, o.outcome) for o in done.tools.outcomes] == [("list", None, "ok"), ("call", "add", "ok")]


def test_runs_the_standby_cannot_serve_run_as_before(tmp_path):
    (tmp_path / "f.txt").write_text("granted")
    for kw in (dict(fuel=10**9), dict(grants=[Grant(str(tmp_path), "/data")])):
        standby_waits()
        before = waiting()
        done = run(["-c", "import os; print(os.listdir('/data') if os.path.exists('/data') else 'none')"], preload=PRELOAD, **kw)
        assert done.ok, done.stderr
        assert waiting() == before, kw
    assert done.stdout == b"['f.txt']\n"


def primed(preload: tuple[str, ...] = PRELOAD) -> int:
    """How many runs primed instances served for runs from the `preload` image."""
    return _ext.primed_runs(str(prepare(preload)))


def run_primed(argv: list[str], preload: tuple[str, ...] = PRELOAD, **kw):
    """Runs `argv` right after other runs back to back, again until a primed instance
    served it (runs back to back leave one ready by their third run: standby.rs)."""
    for _ in range(100):
        for _ in range(3):
            assert run(["-c", "pass"], preload=preload).ok
        before = primed(preload)
        done = run(argv, preload=preload, **kw)
        if primed(preload) > before:
            return done
    pytest.fail("no primed instance served a run back to back")


def test_runs_back_to_back_are_served_by_primed_instances():
    before = primed()
    for _ in range(60):
        assert run(["-c", "pass"], preload=PRELOAD).ok
    assert primed() - before >= 5


def test_a_primed_run_gets_its_own_arguments_environment_stdin_and_folder():
    done = run_primed(
        ["-c", "import os, sys; print(sys.argv, os.environ['X'], os.getcwd(), sys.stdin.read(), os.listdir('/tmp'))", "a1"],
        env={"X": "y"}, stdin=b"from stdin",
    )
    assert done.ok, done.stderr
    assert done.stdout == b"['-c', 'a1'] y /work from stdin []\n"
    assert done.stderr == b""


def test_primed_runs_do_not_share_random_state_globals_or_files():
    code = (
        "import os, random, numpy as np; "
        "print(random.random(), np.random.random(), 'leak' in globals(), os.listdir('/tmp'), os.environ.get('LEAK')); "
        "leak = 1; open('/tmp/left', 'w').write('x'); os.environ['LEAK'] = '1'"
    )
    outs = [run_primed(["-c", code]) for _ in range(3)]
    assert all(d.ok for d in outs), [d.stderr for d in outs]
    rows = [d.stdout.split() for d in outs]
    assert len({r[0] for r in rows}) == 3 and len({r[1] for r in rows}) == 3
    assert all(r[2:] == [b"False", b"[]", b"None"] for r in rows), rows


def test_a_primed_run_keeps_its_own_deadline_memory_and_output_limits():
    t = time.monotonic()
    spin = run_primed(["-c", "while True: pass"], deadline_s=0.3)
    assert spin.trapped == "deadline" and time.monotonic() - t < 30
    big = run_primed(["-c", "x = bytearray(400 << 20)"], memory_bytes=300 << 20)
    assert big.exit_code == 1 and b"MemoryError" in big.stderr
    loud = run_primed(["-c", "print('x' * 5000)"], output_bytes=100)
    assert loud.ok and len(loud.stdout) == 100 and loud.truncated


def test_a_primed_run_is_cancelled_by_its_token():
    cancel = threading.Event()
    cancel.set()
    done = run_primed(["-c", "while True: pass"], cancel=cancel)
    assert done.trapped == "cancelled"


def test_a_primed_run_reaches_its_own_tools_and_records_them():
    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    done = run_primed(["-c", "from host import tools; print(tools.add(a=2, b=3))"], tools=[add])
    assert done.ok, done.stderr
    assert done.stdout == b"5\n"
    assert [(o.op, o.tool, o.outcome) for o in done.tools.outcomes] == [("list", None, "ok"), ("call", "add", "ok")]


def exits_leaving_no_folder(script: str) -> int:
    """Runs `script` in a new process, which prints a count and its pid, and checks that
    none of its private folders is left after it exits; returns the count."""
    import tempfile

    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == 0, child.stderr
    count, pid = map(int, child.stdout.split())
    left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"wasi-python-{pid}-")]
    assert left == [], left
    return count


def test_a_process_with_a_guest_on_standby_exits_and_leaves_no_folder():
    waiting = exits_leaving_no_folder(
        "import os, time, wasi_python\n"
        "from wasi_python import _wasi_python as ext\n"
        "wasi_python.run(['-c', 'pass'], preload=('numpy',))\n"
        "until = time.monotonic() + 30\n"
        "while not ext.guests_on_standby() and time.monotonic() < until: time.sleep(0.01)\n"
        "print(ext.guests_on_standby(), os.getpid())\n"
    )
    assert waiting == 1


def test_a_process_that_ends_runs_back_to_back_leaves_no_folder():
    served = exits_leaving_no_folder(
        "import os, wasi_python\n"
        "from wasi_python import _wasi_python as ext\n"
        "for _ in range(50): wasi_python.run(['-c', 'pass'], preload=('numpy',))\n"
        "print(ext.primed_runs(), os.getpid())\n"
    )
    assert served > 0, "no primed instance served a run: the exit was not tested with one"


FORKED = r"""
import os, signal, sys, time
from wasi_python import Session, SessionEnded, prepare, run
from wasi_python import _wasi_python as _ext
from wasi_python.tools import tool

PRELOAD = ("numpy",)

@tool
def echo(s: str) -> str:
    "Echoes."
    return s

def standby_waits():
    until = time.monotonic() + 60
    while not _ext.guests_on_standby(str(prepare(PRELOAD))):
        assert time.monotonic() < until, "no guest came on standby"
        assert run(["-c", "pass"], preload=PRELOAD).ok
        time.sleep(0.05)

standby_waits()
assert run(["-c", "pass"], preload=PRELOAD).ok  # leaves its folders for the next run
standby_waits()
probe = "import os; print(sorted(os.listdir('/tmp'))); open('/tmp/mine', 'w').write('x')"
with Session() as session:
    session.run("x = 1")
    time.sleep(0.1)  # a quiet parent: no run in progress, the epoch ticker asleep
    pid = os.fork()
    if pid == 0:  # the child: its status says what it saw
        status = 9
        try:
            signal.alarm(60)  # a hang ends the child
            said = run(["-c", "from host import tools; print(tools.echo(s='hi'))"], preload=PRELOAD, tools=[echo])
            spun = run(["-c", "while True: pass"], preload=PRELOAD, deadline_s=0.5)  # needs the ticker
            mine = run(["-c", probe], preload=PRELOAD)
            status = 0 if (said.stdout, spun.trapped, mine.stdout) == (b"hi\n", "deadline", b"[]\n") else 1
            try:  # the parent's session is closed here: its thread is not in the child
                session.run("x")
                status = status or 2
            except SessionEnded as e:
                status = status or (0 if e.reason == "closed" else 3)
        finally:
            os._exit(status)
    _, waited = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(waited))
    # The parent's runs and session go on, its runs on folders of their own.
    print("after", run(["-c", probe], preload=PRELOAD).stdout, session.run("x").stdout)
"""


def test_a_forked_child_runs_its_own_guests_and_folders():
    # A fork copies the runtime's lists (forks.rs): the guest waiting on standby, idle
    # guest threads, the epoch ticker's thread, the folders kept for the next run, none
    # of whose threads exist in the child. Its runs must neither wait for them (a hang
    # before the fix) nor share a folder with the parent's runs. In a process of its
    # own: a fork while other threads run guests (this suite's leftovers) may leave a
    # lock held in the child, as in any threaded process (README).
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, timeout=300, env=os.environ.copy())
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().splitlines() == ["child 0", "after b'[]\\n' b'1\\n'"]
