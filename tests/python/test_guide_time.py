"""The guide, sections "Bound a tool's time" and "Write an async tool"."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import numbers
import sqlite3
import subprocess
import threading
import time
from typing import ClassVar

import pytest
from wasi_python import run
from wasi_python.tools import tool

import helpers
from helpers import run_python

# A bound for runs whose tools may hang, so a hang fails fast instead of waiting 60 s.
BOUND_S = 5.0


def run_loop(coro, timeout: float = 3 * BOUND_S):
    """Runs a coroutine on a fresh event loop, bounded; unlike asyncio.run it does not wait
    for tasks left pending, so a hang fails the test instead of stalling the suite."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))
    finally:
        loop.close()


# Every run here is bounded (a test may pass its own deadline_s instead).
guest = functools.partial(helpers.guest, deadline_s=BOUND_S * 2)


# --- each call on a new thread ------------------------------------------------------------


def test_each_call_runs_on_a_new_thread():
    seen = []

    @tool
    def where() -> None:
        """Notes its thread."""
        seen.append((threading.get_ident(), threading.get_native_id()))

    done = guest("from host import tools\nfor _ in range(3): tools.where()", [where])
    assert done.ok, done.stderr
    assert len(seen) == 3
    assert all(ident != threading.get_ident() for ident, _ in seen)
    natives = [n for _, n in seen]
    assert threading.get_native_id() not in natives
    assert len(set(natives)) == 3  # a new thread each call


class Seven:
    """An integer the result encoder reads through ``__index__``; notes the thread."""

    threads: ClassVar[list[int]] = []

    def __index__(self) -> int:
        Seven.threads.append(threading.get_native_id())
        return 7


numbers.Integral.register(Seven)


def test_the_gate_the_tool_and_the_encoding_of_its_result_share_the_calls_thread():
    gate_threads, tool_threads = [], []
    Seven.threads.clear()

    @tool
    def seven() -> int:
        """Seven."""
        tool_threads.append(threading.get_native_id())
        return Seven()  # type: ignore[return-value]

    def gate(call):
        gate_threads.append(threading.get_native_id())

    done = guest("from host import tools\nprint(tools.seven(), tools.seven())", [seven], gate=gate)
    assert done.stdout == b"7 7\n", done.stderr
    assert gate_threads == tool_threads == Seven.threads
    assert len(set(tool_threads)) == 2
    assert threading.get_native_id() not in tool_threads


def test_a_threading_local_is_not_shared_with_a_tool_nor_between_calls():
    local = threading.local()
    local.who = "caller"
    seen = []

    @tool
    def peek() -> None:
        """Peeks at a threading.local."""
        seen.append(getattr(local, "who", None))
        local.who = "tool"

    done = guest("from host import tools\ntools.peek(); tools.peek()", [peek])
    assert done.ok, done.stderr
    assert seen == [None, None]
    assert local.who == "caller"


def test_calls_with_deep_frames_and_garbage_each_start_from_a_fresh_thread_state():
    """The extension keeps a finished tool thread's first frame chunk for the next thread
    (crates/pybind/src/frame_stacks.rs): frames that outgrow that chunk, and memory churned
    in a tool, go through CPython's own allocator, and no call sees another's state."""
    local = threading.local()
    fresh = []

    @tool
    def deep(n: int) -> int:
        """Recurses n frames deep over some garbage."""
        fresh.append(getattr(local, "seen", None) is None)
        local.seen = True

        def down(k: int) -> int:
            return 0 if k == 0 else 1 + down(k - 1)

        junk = [str(i) * 3 for i in range(20_000)]
        return down(n) + len(junk)

    done = guest("from host import tools\nprint(sum(tools.deep(n=300 + i) for i in range(60)))", [deep])
    assert done.stdout.decode().strip() == str(sum(300 + i + 20_000 for i in range(60))), done.stderr
    assert fresh == [True] * 60


def test_a_sqlite3_connection_made_in_the_caller_does_not_work_inside_a_tool():
    db = sqlite3.connect(":memory:")  # check_same_thread defaults to True

    @tool
    def query() -> int:
        """Queries the caller's connection."""
        return db.execute("select 1").fetchone()[0]

    done = guest(
        """
        from host import tools, ToolError
        try:
            tools.query()
        except ToolError as e:
            print(e)
        """,
        [query],
    )
    assert done.stdout == b"query failed (internal error)\n"
    assert "ProgrammingError" in done.tools.outcomes[-1].fault
    db.close()


# --- contextvars ------------------------------------------------------------------------

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


def test_a_tool_runs_in_a_copy_of_the_callers_contextvars_context():
    seen = []

    @tool
    def peek() -> None:
        """Reads and sets a context variable."""
        seen.append(request_id.get())
        request_id.set("set-in-tool")

    def gate(call):
        seen.append("gate:" + request_id.get())

    token = request_id.set("req-42")
    try:
        done = guest("from host import tools\ntools.peek(); tools.peek()", [peek], gate=gate)
        after = request_id.get()
    finally:
        request_id.reset(token)
    assert done.ok, done.stderr
    # Visible in the gate and the tool; a set inside a call leaks neither to the next call
    # nor to the caller.
    assert seen == ["gate:req-42", "req-42", "gate:req-42", "req-42"]
    assert after == "req-42"


def test_run_async_runs_tools_in_a_copy_of_the_awaiting_tasks_context():
    # The awaiting task is run_async's caller: its context reaches the tools, though the
    # run itself is made on a worker thread.
    from wasi_python import Session, run_async

    @tool
    def peek() -> str:
        """Reads a context variable."""
        return request_id.get()

    async def main():
        request_id.set("task-7")
        done = await run_async(["-c", "from host import tools\nprint(tools.peek())"], tools=[peek])
        with Session(tools=[peek]) as s:
            request_id.set("turn-1")
            first = await s.run_async("from host import tools\nprint(tools.peek())")
            request_id.set("turn-2")
            second = s.run("print(tools.peek())")
        return done, first, second

    done, first, second = asyncio.run(main())
    assert done.stdout == b"task-7\n", done.stderr
    # A session turn's tools see a copy of that turn's caller's context.
    assert (first.stdout, second.stdout) == (b"turn-1\n", b"turn-2\n")


# --- when a call ends --------------------------------------------------------------------


def test_timeout_s_raises_tooltimeout_a_timeouterror_and_the_guest_runs_on():
    release = threading.Event()

    @tool(timeout_s=0.1)
    def slow() -> str:
        """Slow."""
        release.wait(BOUND_S)
        return "late"

    try:
        done = guest(
            """
            import time
            from host import tools, ToolTimeout
            t = time.monotonic()
            try:
                tools.slow()
            except TimeoutError as e:
                print(type(e).__name__, isinstance(e, ToolTimeout), e.kind)
            print(round(time.monotonic() - t, 3))
            print("runs on")
            """,
            [slow],
        )
    finally:
        release.set()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "ToolTimeout True timeout"
    assert 0.09 <= float(lines[1]) <= 0.6
    assert lines[2] == "runs on"
    assert done.ok
    last = done.tools.outcomes[-1]
    assert (last.outcome, last.abandoned) == ("timeout", True)


def test_a_call_ends_20_ms_before_the_runs_deadline():
    release = threading.Event()

    @tool
    def hang() -> None:
        """Hangs."""
        release.wait(BOUND_S)

    try:
        done = run(
            [
                "-c",
                (
                    "import time\nfrom host import tools\ntry:\n    tools.hang()\n"
                    "except TimeoutError:\n    print(repr(time.time()), flush=True)\nwhile True: pass"
                ),
            ],
            tools=[hang],
            deadline_s=1.0,
        )
        ended = time.time()
    finally:
        release.set()
    assert done.trapped == "deadline"
    # The guest read the timeout before the deadline, with time to spare: about 20 ms.
    caught = float(done.stdout)
    assert 0.010 <= ended - caught <= 0.5
    last = done.tools.outcomes[-1]
    assert (last.tool, last.outcome, last.abandoned) == ("hang", "timeout", True)


def test_a_guest_timed_out_at_the_deadline_margin_may_still_finish():
    release = threading.Event()

    @tool
    def hang() -> None:
        """Hangs."""
        release.wait(BOUND_S)

    try:
        done = run(
            ["-c", "from host import tools\ntry:\n    tools.hang()\nexcept TimeoutError:\n    print('caught')"],
            tools=[hang],
            deadline_s=0.5,
        )
    finally:
        release.set()
    assert done.stdout == b"caught\n"
    assert done.ok or done.trapped == "deadline"


def test_the_runs_cancel_ends_the_call_and_the_run():
    cancel = threading.Event()
    release = threading.Event()

    @tool
    def hang() -> None:
        """Cancels its own run, then hangs."""
        cancel.set()
        release.wait(BOUND_S)

    t = time.monotonic()
    try:
        done = guest("from host import tools\ntools.hang()\nwhile True: pass", [hang], cancel=cancel)
    finally:
        release.set()
    assert time.monotonic() - t < BOUND_S / 2
    assert done.trapped == "cancelled"
    last = done.tools.outcomes[-1]
    assert (last.tool, last.outcome, last.abandoned) == ("hang", "cancelled", True)


CTRL_C = r"""
import _thread, signal, threading, time
# interrupt_main() does nothing while SIGINT is ignored, as it is in a background job
# of a non-interactive shell (CI may be one): install Python's Ctrl-C handler regardless.
signal.signal(signal.SIGINT, signal.default_int_handler)
from wasi_python import run
from wasi_python.tools import tool
release = threading.Event()

@tool
def hang() -> None:
    '''Presses Ctrl-C, then hangs.'''
    _thread.interrupt_main()
    release.wait(10)

t = time.monotonic()
try:
    run(["-c", "from host import tools\ntools.hang()\nwhile True: pass"], tools=[hang])
    print("returned")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
print(round(time.monotonic() - t, 2))
release.set()
time.sleep(0.5)  # let the abandoned tool end before the interpreter does
"""


def _python(program: str) -> subprocess.CompletedProcess:
    return run_python("-c", program, timeout=60, cwd=helpers.REPO)


def test_ctrl_c_ends_the_call():
    out = _python(CTRL_C)
    lines = out.stdout.decode().splitlines()
    assert len(lines) == 2, out.stderr.decode()[-2000:]
    assert lines[0] == "KeyboardInterrupt"
    assert float(lines[1]) < 3.0  # not the tool's 10 s
    assert out.returncode == 0


EXIT_WHILE_ABANDONED = r"""
import time
from wasi_python import run
from wasi_python.tools import tool

@tool(timeout_s=0.05)
def slow() -> str:
    '''Ends just as the interpreter exits.'''
    time.sleep(0.06)
    return "late"

done = run(["-c", "from host import tools\ntry:\n    tools.slow()\nexcept TimeoutError:\n    print('timeout')"], tools=[slow])
print(done.stdout.decode().strip(), done.tools.abandoned[0].abandoned)
"""


def test_an_abandoned_tool_that_ends_as_the_process_exits_runs_on_unseen():
    # "A tool whose call timed out runs on to its end, unseen": ending while the interpreter
    # shuts down must not crash the embedding process.
    out = _python(EXIT_WHILE_ABANDONED)
    assert out.stdout == b"timeout True\n", out.stderr.decode()[-2000:]
    assert out.returncode == 0


def test_fuel_counts_only_the_guests_instructions():
    @tool
    def quick() -> int:
        """Returns at once."""
        return 1

    @tool(name="quick")
    def sleepy() -> int:
        """Sleeps 0.2 s."""
        time.sleep(0.2)
        return 1

    program = "from host import tools\nfor _ in range(3): tools.quick()"
    fast = run(["-c", program], tools=[quick], fuel=10**11)
    slow = run(["-c", program], tools=[sleepy], fuel=10**11)
    assert fast.ok and slow.ok
    assert slow.duration_s >= 0.6 > fast.duration_s
    assert abs(slow.fuel_used - fast.fuel_used) <= 0.2 * fast.fuel_used


def test_a_timed_out_call_is_abandoned_and_its_effect_may_still_land():
    effects = []
    ended = threading.Event()

    @tool(timeout_s=0.05)
    def write(x: int) -> str:
        """Writes, slowly."""
        time.sleep(0.2)
        effects.append(x)
        ended.set()
        return "written"

    done = guest(
        """
        from host import tools
        try:
            tools.write(1)
        except TimeoutError:
            print("timeout")
        """,
        [write],
    )
    assert done.stdout == b"timeout\n"
    (o,) = done.tools.abandoned
    assert (o.tool, o.outcome, o.abandoned) == ("write", "timeout", True)
    assert ended.wait(BOUND_S)
    assert effects == [1]  # the effect landed after the guest was told it timed out


def test_a_retry_after_tooltimeout_may_act_twice():
    count = []
    both = threading.Semaphore(0)

    @tool(timeout_s=0.05)
    def increment() -> int:
        """Increments, slowly."""
        time.sleep(0.15)
        count.append(1)
        both.release()
        return len(count)

    done = guest(
        """
        from host import tools, ToolTimeout
        for attempt in range(2):
            try:
                tools.increment()
                break
            except ToolTimeout:
                print("retry")
        """,
        [increment],
    )
    assert done.stdout == b"retry\nretry\n"
    assert both.acquire(timeout=BOUND_S) and both.acquire(timeout=BOUND_S)
    assert len(count) == 2


def test_four_abandoned_threads_make_the_next_call_time_out_at_once():
    started = []
    ran = []

    @tool(timeout_s=0.1)
    def hang(i: int) -> None:
        """Sleeps past its timeout."""
        started.append(i)
        time.sleep(0.5)

    @tool
    def quick() -> str:
        """Quick."""
        ran.append(1)
        return "quick"

    done = guest(
        """
        import time
        from host import tools
        for i in range(4):
            try:
                tools.hang(i)
            except TimeoutError:
                pass
        for f in (lambda: tools.hang(4), tools.quick):
            t = time.monotonic()
            try:
                f()
                print("ran")
            except TimeoutError:
                print("timeout", round(time.monotonic() - t, 3))
        time.sleep(0.6)  # the abandoned threads end
        print(tools.quick())
        """,
        [hang, quick],
    )
    lines = done.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["timeout", "timeout", "quick"], done.stderr
    assert float(lines[0].split()[1]) < 0.05  # at once, not after the 0.1 s timeout
    assert float(lines[1].split()[1]) < 0.05
    assert started == [0, 1, 2, 3]  # the fifth hang never started
    assert ran == [1]  # quick ran only once the threads had ended
    outcomes = [(o.tool, o.outcome, o.abandoned) for o in done.tools.outcomes[5:]]
    assert outcomes == [("hang", "timeout", False), ("quick", "timeout", False), ("quick", "ok", False)]


# --- async tools -------------------------------------------------------------------------


def test_an_async_tool_is_called_synchronously_by_the_guest():
    @tool
    async def fetch(n: int) -> list[int]:
        """Fetches."""
        await asyncio.sleep(0.01)
        return list(range(n))

    done = guest("from host import tools\nprint(tools.fetch(3))", [fetch], deadline_s=BOUND_S)
    assert done.stdout == b"[0, 1, 2]\n", done.stderr


def test_a_function_that_returns_an_awaitable_is_awaited():
    async def later(x):
        await asyncio.sleep(0)
        return x * 2

    def double(x: int) -> int:
        """Doubles, later."""
        return later(x)  # type: ignore[return-value]

    done = guest("from host import tools\nprint(tools.double(21))", [double], deadline_s=BOUND_S)
    assert done.stdout == b"42\n", done.stderr


def test_under_run_an_async_tool_runs_on_a_loop_of_the_calls_own():
    loops = []

    @tool
    async def where() -> None:
        """Notes its loop."""
        loops.append((asyncio.get_running_loop(), threading.get_native_id()))

    program = "from host import tools\ntools.where()"
    first = guest(program, [where], deadline_s=BOUND_S)
    second = guest(program, [where], deadline_s=BOUND_S)
    assert first.ok and second.ok, (first.stderr, second.stderr)
    (loop1, thread1), (loop2, thread2) = loops
    assert loop1 is not loop2
    assert threading.get_native_id() not in (thread1, thread2)


def test_under_run_an_async_tool_does_not_use_the_callers_running_loop():
    loops = []

    @tool
    async def where() -> None:
        """Notes its loop."""
        loops.append(asyncio.get_running_loop())

    async def main():
        # A blocking run() called from a coroutine: the tool must not need this loop.
        done = guest("from host import tools\ntools.where()", [where], deadline_s=BOUND_S)
        return asyncio.get_running_loop(), done

    caller_loop, done = run_loop(main())
    assert done.ok, done.stderr
    assert loops and loops[0] is not caller_loop


def _cancel_probe():
    cancelled = threading.Event()

    @tool(timeout_s=0.1)
    async def wait_long() -> None:
        """Awaits for long."""
        try:
            await asyncio.sleep(BOUND_S)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return wait_long, cancelled


def test_an_async_tool_is_cancelled_at_its_next_await_when_the_call_times_out():
    wait_long, cancelled = _cancel_probe()
    t = time.monotonic()
    done = guest(
        """
        from host import tools
        try:
            tools.wait_long()
        except TimeoutError:
            print("timeout")
        """,
        [wait_long],
        deadline_s=BOUND_S,
    )
    assert done.stdout == b"timeout\n", done.stderr
    assert cancelled.wait(1.0)
    assert time.monotonic() - t < BOUND_S / 2


def test_an_async_tool_is_cancelled_when_the_run_is_cancelled():
    cancel = threading.Event()
    cancelled = threading.Event()

    @tool
    async def wait_long() -> None:
        """Cancels the run, then awaits."""
        cancel.set()
        try:
            await asyncio.sleep(BOUND_S)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    done = guest("from host import tools\ntools.wait_long()", [wait_long], cancel=cancel, deadline_s=BOUND_S)
    assert done.trapped == "cancelled"
    assert cancelled.wait(1.0)


# --- run_async ---------------------------------------------------------------------------


def test_under_run_async_an_async_tool_runs_on_the_loop_that_awaits_it():
    from wasi_python import run_async

    loops = []

    @tool
    async def where() -> str:
        """Notes its loop."""
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return "here"

    async def main():
        done = await run_async(["-c", "from host import tools\nprint(tools.where())"], tools=[where], deadline_s=BOUND_S)
        return asyncio.get_running_loop(), done

    loop, done = run_loop(main())
    assert done.stdout == b"here\n", done.stderr
    assert loops == [loop]


def test_cancelling_the_run_async_task_ends_the_tool_call():
    from wasi_python import run_async

    cancelled = threading.Event()

    @tool
    async def wait_long() -> None:
        """Awaits for long."""
        try:
            await asyncio.sleep(BOUND_S)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main():
        task = asyncio.ensure_future(
            run_async(["-c", "from host import tools\ntools.wait_long()"], tools=[wait_long], deadline_s=BOUND_S)
        )
        await asyncio.sleep(0.5)
        task.cancel()
        t = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t

    waited = run_loop(main())
    assert waited < 1.0
    assert cancelled.wait(1.0)
