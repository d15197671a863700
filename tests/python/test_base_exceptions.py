"""Exceptions that are not errors (SystemExit, KeyboardInterrupt, GeneratorExit), raised
by an async provider, an async tool or an async gate: the guest sees a prompt failure,
the record keeps the fault, no thread the run depends on dies, nothing escapes into the
embedder's event loop, and the host process exits cleanly (issue 18)."""

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from wasi_python import Mount, Stat, run, run_async
from wasi_python.tools import tool

BASE = [SystemExit, KeyboardInterrupt, GeneratorExit]


class AsyncRaising:
    """A read-only provider whose async `stat` raises `exc`."""

    def __init__(self, exc):
        self.exc = exc

    async def stat(self, path):
        raise self.exc("from the provider")

    def list(self, path):
        return []

    def read(self, path):
        return b""


PROVIDER_PROGRAM = "import errno, os\ntry:\n    os.stat('/m/x')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])"


def _tool_raising(exc):
    @tool
    async def explode() -> int:
        """Raises."""
        raise exc("from the tool")

    return explode


@tool
async def fine() -> int:
    """Answers 1."""
    return 1


TOOL_PROGRAM = "from host import tools, ToolError\ntry:\n    tools.explode()\nexcept ToolError as e:\n    print(type(e).__name__)"
GATE_PROGRAM = "from host import tools\ntry:\n    tools.fine()\nexcept PermissionError as e:\n    print('denied')"


def _gate_raising(exc):
    async def gate(call):
        raise exc("from the gate")

    return gate


def _check_provider(done, exc):
    assert done.stdout == b"EIO\n", done.stderr
    assert done.files.faults[0].error.startswith(exc.__name__)


def _check_tool(done, exc):
    assert done.stdout == b"ToolError\n", done.stderr
    call = done.tools.outcomes[-1]
    assert call.outcome == "tool_error"
    assert call.fault.startswith(exc.__name__)


def _check_gate(done, exc):
    assert done.stdout == b"denied\n", done.stderr
    call = done.tools.outcomes[-1]
    assert call.outcome == "denied"
    assert call.fault.startswith(exc.__name__)


@pytest.mark.parametrize("exc", BASE, ids=lambda e: e.__name__)
def test_under_run_each_fails_only_its_call_and_promptly(exc):
    t = time.perf_counter()
    _check_provider(run(["-c", PROVIDER_PROGRAM], mounts=[Mount(AsyncRaising(exc), "/m", timeout_s=20)]), exc)
    _check_tool(run(["-c", TOOL_PROGRAM], tools=[_tool_raising(exc)]), exc)
    _check_gate(run(["-c", GATE_PROGRAM], tools=[fine], gate=_gate_raising(exc)), exc)
    # Before the fix the provider's call waited for its whole timeout (20 s).
    assert time.perf_counter() - t < 15
    # The run's machinery still serves: a later run with async tools works.
    assert run(["-c", "from host import tools\nprint(tools.fine())"], tools=[fine]).stdout == b"1\n"


@pytest.mark.parametrize("exc", BASE, ids=lambda e: e.__name__)
def test_under_run_async_nothing_escapes_into_the_embedders_loop(exc):
    async def main():
        a = await run_async(["-c", PROVIDER_PROGRAM], mounts=[Mount(AsyncRaising(exc), "/m", timeout_s=20)])
        b = await run_async(["-c", TOOL_PROGRAM], tools=[_tool_raising(exc)])
        c = await run_async(["-c", GATE_PROGRAM], tools=[fine], gate=_gate_raising(exc))
        await asyncio.sleep(0.05)  # a stray exception on the loop would surface here
        return a, b, c

    a, b, c = asyncio.run(main())
    _check_provider(a, exc)
    _check_tool(b, exc)
    _check_gate(c, exc)


def test_the_host_process_exits_cleanly_after_them():
    script = textwrap.dedent(
        """
        import asyncio
        from wasi_python import Mount, run, run_async
        from wasi_python.tools import tool

        class P:
            async def stat(self, path):
                raise SystemExit(3)
            def list(self, path):
                return []
            def read(self, path):
                return b""

        @tool
        async def explode() -> int:
            '''Raises.'''
            raise KeyboardInterrupt

        prog = "import os\\ntry:\\n    os.stat('/m/x')\\nexcept OSError:\\n    print('eio')"
        print(run(["-c", prog], mounts=[Mount(P(), "/m")]).stdout.decode().strip())
        async def main():
            d = await run_async(["-c", "from host import tools\\ntry:\\n    tools.explode()\\nexcept Exception as e:\\n    print(type(e).__name__)"], tools=[explode])
            return d.stdout.decode().strip()
        print(asyncio.run(main()))
        print("end")
        """
    )
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split() == ["eio", "ToolError", "end"]
    # Before the fix, exit waited 10 s for a stuck call and then died with SIGABRT.
    assert time.perf_counter() - t < 9


def test_an_answer_the_guest_had_no_memory_for_is_recorded_not_delivered():
    """The record said "ok" for an answer the guest never received (issue 18)."""

    @tool
    def big() -> str:
        """A 12 MB answer."""
        return "x" * (12 << 20)

    program = textwrap.dedent(
        """
        from host import tools
        hog = []
        try:
            while True:
                hog.append(bytearray(1 << 20))
        except MemoryError:
            pass
        del hog[-3:]  # room to go on, not for a 12 MB answer
        try:
            tools.big()
            print("received")
        except BaseException as e:
            print(type(e).__name__)
        """
    )
    done = run(["-c", program], tools=[big], memory_bytes=96 << 20, preload=())
    assert done.stdout.strip() != b"received", done.stderr
    call = done.tools.outcomes[-1]
    assert (call.tool, call.outcome, call.delivered) == ("big", "ok", False), call
    assert call.fault.startswith("not delivered: "), call.fault
    # An answer that arrives is delivered.
    assert run(["-c", "from host import tools\nprint(len(tools.big()))"], tools=[big]).tools.outcomes[-1].delivered
