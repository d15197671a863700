"""Keeping tool threads' Python frame stacks (pybind frame_stacks.rs, ``_launch.py``): the
interpreter's arena allocator is the embedder's unless asked; asked, by the environment
at import or by `wasi_python.keep_frame_stacks` at any time, ours wraps it and tool calls
work the same, before, while and after.

Each case in a child process: the allocator is the process's, and this one's tests may
have switched it."""

from __future__ import annotations

import textwrap

import pytest

from helpers import run_python

PRELUDE = textwrap.dedent('''
    import ctypes

    class Arena(ctypes.Structure):
        _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]

    def arena():
        a = Arena()
        ctypes.pythonapi.PyObject_GetArenaAllocator(ctypes.byref(a))
        return (a.ctx, a.alloc, a.free)

    own = arena()

    import wasi_python
    from wasi_python.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    def tool_runs(n):
        code = "from host import tools\\nprint(sum(tools.add(a=i, b=1) for i in range(4)))"
        for _ in range(n):
            done = wasi_python.run(["-c", code], tools=[add])
            assert (done.exit_code, done.stdout, done.tools.frames) == (0, b"10\\n", 5), done
''')


def child(body: str) -> list[str]:
    out = run_python("-c", PRELUDE + textwrap.dedent(body), timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    return out.stdout.decode().split()


def test_by_default_the_interpreters_allocator_stays_through_import_and_tool_runs() -> None:
    assert child('''
        print(arena() == own)
        tool_runs(3)
        print(arena() == own)
    ''') == ["True", "True"]


def test_switched_on_after_tool_runs_ours_wraps_it_and_tool_calls_work_then_off_again() -> None:
    # Chunks the interpreter's allocator made before the switch are freed through ours
    # after it (kept, served again, given back), and the other way round after "off".
    assert child('''
        tool_runs(3)
        print(wasi_python.keep_frame_stacks(True), arena() != own)
        tool_runs(40)
        print(wasi_python.keep_frame_stacks(False))
        tool_runs(10)
        print(wasi_python.keep_frame_stacks(True))
        tool_runs(10)
    ''') == ["True", "True", "False", "True"]


def test_the_environment_switches_it_on_at_import(monkeypatch) -> None:
    monkeypatch.setenv("WASI_PYTHON_KEEP_FRAME_STACKS", "1")
    assert child('''
        print(arena() != own)
        tool_runs(20)
    ''') == ["True"]
    monkeypatch.setenv("WASI_PYTHON_KEEP_FRAME_STACKS", "0")
    assert child("print(arena() == own)") == ["True"]


def test_the_switch_takes_a_bool_only() -> None:
    import wasi_python

    with pytest.raises(TypeError):
        wasi_python.keep_frame_stacks(1)  # type: ignore[arg-type]
