"""Stopping a guest early: cancelling the ``run_async`` task, ``cancel=`` on ``run``,
``run_async`` and ``Session.run``, and Ctrl-C during a blocking ``run``.

Each stop is an epoch interrupt, so it lands within milliseconds, not at the deadline
(30 s in every test here). A run that returns says what ended it (``trapped ==
"cancelled"``, not ``"deadline"``); where nothing comes back (a cancelled task, Ctrl-C),
the time to the stop is bounded instead, at half the deadline (``STOPPED_WITHIN_S``): that
tells the cancel's stop from the deadline's, on a machine however busy, and asserts no pace.
"""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from wasi_python import Session, SessionEnded, run, run_async
from wasi_python.tools import ToolRecord, tool

SPIN = ["-c", "while True: pass"]
# Half the 30 s deadline of every run here: a stop before it was the cancel's.
STOPPED_WITHIN_S = 15


# --- cancelling the awaiting task ------------------------------------------------------------


def test_cancelling_the_task_stops_the_guest_promptly(arun):
    async def main():
        task = asyncio.create_task(run_async(SPIN, deadline_s=30))
        await asyncio.sleep(0.2)
        assert not task.done()
        task.cancel()
        t = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t

    after_cancel = arun(main())
    assert after_cancel < STOPPED_WITHIN_S, f"CancelledError came {after_cancel:.2f} s after the cancel"


def test_the_loop_runs_on_after_a_cancelled_guest(arun):
    async def main():
        task = asyncio.create_task(run_async(SPIN, deadline_s=30))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await run_async(["-c", "print('next')"])

    done = arun(main())
    assert done.ok and done.stdout == b"next\n"


def test_cancelling_the_task_cancels_an_async_tool_at_its_await(arun):
    flags = {"cancelled": threading.Event(), "finished": threading.Event()}

    async def main():
        entered = asyncio.Event()

        @tool
        async def slow() -> str:
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                flags["cancelled"].set()
                raise
            flags["finished"].set()
            return "late"

        task = asyncio.create_task(
            run_async(["-c", "from host import tools\ntools.slow()\nwhile True: pass"], tools=[slow], deadline_s=30)
        )
        await asyncio.wait_for(entered.wait(), 10)
        await asyncio.sleep(0.05)
        task.cancel()
        t = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        elapsed = time.monotonic() - t
        # Give the tool's handler its turns on this loop, should it be late.
        until = time.monotonic() + STOPPED_WITHIN_S
        while not flags["cancelled"].is_set() and time.monotonic() < until:
            await asyncio.sleep(0.01)
        return elapsed

    elapsed = arun(main())
    # The tool would sleep 30 s, the guest spin until its 30 s deadline.
    assert elapsed < STOPPED_WITHIN_S, f"CancelledError came {elapsed:.2f} s after the cancel"
    assert flags["cancelled"].is_set(), "the async tool was not cancelled at its await"
    assert not flags["finished"].is_set()


def test_cancelling_the_task_abandons_a_running_sync_tool(arun):
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    @tool
    def blocking() -> str:
        entered.set()
        release.wait(60)
        finished.set()
        return "late"

    async def main():
        task = asyncio.create_task(
            run_async(["-c", "from host import tools\ntools.blocking()\nwhile True: pass"], tools=[blocking], deadline_s=30)
        )
        ok = await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        assert ok, "the tool was never called"
        task.cancel()
        t = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t

    try:
        elapsed = arun(main())
        # The task did not wait for the sync tool: it is still running, abandoned.
        still_running = not finished.is_set()
    finally:
        release.set()
    # Not stopped, the guest would spin until its 30 s deadline after the tool.
    assert elapsed < STOPPED_WITHIN_S, f"CancelledError came {elapsed:.2f} s after the cancel"
    assert still_running
    assert finished.wait(5)  # released, it runs to its end unseen


# --- cancel= ------------------------------------------------------------------------------


def _timer(ev: threading.Event, after: float = 0.2) -> threading.Timer:
    t = threading.Timer(after, ev.set)
    t.start()
    return t


def test_cancel_event_ends_run_with_cancelled_and_a_full_record():
    @tool
    def ping() -> str:
        return "pong"

    ev = threading.Event()
    timer = _timer(ev)
    try:
        done = run(
            ["-c", "from host import tools\nprint(tools.ping(), flush=True)\nwhile True: pass"],
            tools=[ping],
            cancel=ev,
            deadline_s=30,
        )
    finally:
        timer.cancel()
    assert done.trapped == "cancelled"
    assert done.exit_code is None
    assert done.stdout == b"pong\n"
    assert isinstance(done.tools, ToolRecord)
    assert [(o.op, o.tool, o.outcome) for o in done.tools.outcomes] == [("list", None, "ok"), ("call", "ping", "ok")]
    assert done.tools.frames == 2


def test_cancel_event_ends_run_async_with_cancelled_and_a_full_record(arun):
    @tool
    async def ping() -> str:
        await asyncio.sleep(0)
        return "pong"

    ev = threading.Event()

    async def main():
        timer = _timer(ev)
        try:
            return await run_async(
                ["-c", "from host import tools\nprint(tools.ping(), flush=True)\nwhile True: pass"],
                tools=[ping],
                cancel=ev,
                deadline_s=30,
            )
        finally:
            timer.cancel()

    done = arun(main())
    assert done.trapped == "cancelled"
    assert done.exit_code is None
    assert done.stdout == b"pong\n"
    assert isinstance(done.tools, ToolRecord)
    assert [o.op for o in done.tools.outcomes] == ["list", "call"]
    assert all(o.outcome == "ok" for o in done.tools.outcomes)


def test_cancel_event_on_run_async_without_tools(arun):
    ev = threading.Event()

    async def main():
        timer = _timer(ev)
        try:
            return await run_async(SPIN, cancel=ev, deadline_s=30)
        finally:
            timer.cancel()

    done = arun(main())
    assert done.trapped == "cancelled"
    assert done.tools is None


def test_an_asyncio_event_cancels_run_async(arun):
    async def main():
        ev = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, ev.set)
        return await run_async(SPIN, cancel=ev, deadline_s=30)

    done = arun(main())
    assert done.trapped == "cancelled"


def test_a_cancel_set_before_the_call_stops_run_async_at_once(arun):
    ev = threading.Event()
    ev.set()
    done = arun(run_async(SPIN, cancel=ev, deadline_s=30))
    assert done.trapped == "cancelled"


def test_cancel_event_ends_a_session_turn_and_the_session():
    with Session(deadline_s=30) as s:
        s.run("x = 1")
        ev = threading.Event()
        timer = _timer(ev)
        try:
            done = s.run("while True: pass", cancel=ev)
        finally:
            timer.cancel()
        assert done.trapped == "cancelled"
        assert s.ended == "cancelled"
        with pytest.raises(SessionEnded) as e:
            s.run("x")
        assert e.value.reason == "cancelled"


# --- Ctrl-C -----------------------------------------------------------------------------

_CTRL_C = textwrap.dedent(
    """
    import signal, sys, time
    # Python leaves SIGINT alone when it starts ignored (a background job of a
    # non-interactive shell, as CI may be): install its Ctrl-C handler regardless.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from wasi_python import Session, run

    from wasi_python import Mount
    from wasi_python.tools import tool

    @tool
    def slow() -> int:
        "Takes a minute."
        print("entered", flush=True)
        time.sleep(60)
        return 1

    class SlowWrites:
        # A provider whose reads are quick and whose writes take a minute.
        def stat(self, path):
            from wasi_python import Stat
            if path == "/":
                return Stat("dir")
            raise FileNotFoundError(path)
        def list(self, path):
            return []
        def read(self, path):
            raise FileNotFoundError(path)
        def write(self, path, data):
            print("entered", flush=True)
            time.sleep(60)
        def mkdir(self, path):
            raise PermissionError(path)
        remove = rmdir = mkdir
        def rename(self, a, b):
            raise PermissionError(a)

    mode = sys.argv[1]
    run(["-c", "pass"])  # warm: the guest is loaded before "started"
    slow_mount = [Mount(SlowWrites(), "/out", writable=True, timeout_s=60)]
    s = None
    if mode == "session":
        s = Session(deadline_s=30)
    elif mode == "session-tool":
        s = Session(deadline_s=30, tools=[slow])
    elif mode == "close":
        s = Session(deadline_s=30, mounts=slow_mount)
        s.run("f = open('/out/x', 'w'); f.write('x'); f.flush()")
    print("started", flush=True)
    try:
        if mode == "run":
            run(["-c", "while True: pass"], deadline_s=30)
        elif mode == "run-tool":
            run(["-c", "from host import tools; tools.slow()"], tools=[slow], deadline_s=30)
        elif mode == "run-provider":
            run(["-c", "f = open('/out/x', 'w'); f.write('x'); f.close()"], mounts=slow_mount, deadline_s=30)
        elif mode == "session":
            s.run("while True: pass")
        elif mode == "session-tool":
            s.run("from host import tools\\ntools.slow()")
        elif mode == "close":
            s.close()
        print("returned", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
    if s is not None:
        print("ended", s.ended, flush=True)
    if mode not in ("run", "session"):
        # The abandoned tool or write still sleeps: exit would give it 10 s first.
        import os
        os._exit(0)
    """
)


# Ctrl-C ends each long wait, also while a tool or a provider is slow: a guest spinning
# (run, session), a tool that takes a minute (run-tool, session-tool), a provider's
# write that takes a minute (run-provider, at the file's close; close, at a session's
# close, which writes open files back). The signal comes once the tool or the write has
# begun (it says so), or, for a spinning guest, 0.3 s into the call.
@pytest.mark.parametrize("mode", ["run", "session", "run-tool", "session-tool", "run-provider", "close"])
def test_ctrl_c_stops_a_blocking_call_and_raises_keyboard_interrupt(mode):
    proc = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "started", line + proc.stderr.read()
        if mode in ("run", "session"):
            time.sleep(0.3)
        else:
            line = proc.stdout.readline()
            assert line.strip() == "entered", line + proc.stderr.read()
        assert proc.poll() is None, "the guest ended before the signal"
        sent = time.monotonic()  # CLOCK_MONOTONIC is one clock for every process here
        os.kill(proc.pid, signal.SIGINT)
        # Under the guest's 30 s deadline: a process that waited for it hangs here.
        out, err = proc.communicate(timeout=25)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    words = out.split()
    assert "interrupted" in words, out + err
    caught = float(words[words.index("interrupted") + 1])
    # The signal, not the end of the wait, raised it: far under the guest's 30 s deadline
    # and the minute a slow tool or provider takes (a slow provider's write-back gets its
    # 0.5 s of grace after the cancel first).
    assert caught - sent < STOPPED_WITHIN_S, f"KeyboardInterrupt came {caught - sent:.3f} s after SIGINT"
    assert "returned" not in words
    assert proc.returncode == 0, err
    if mode.startswith("session"):
        assert "ended cancelled" in out
    if mode == "close":
        assert "ended closed" in out
