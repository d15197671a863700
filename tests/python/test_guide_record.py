"""The guide, section "Read the record"."""

from __future__ import annotations

import json
import threading
import time

import pytest
from wasi_python import run
from wasi_python.tools import ToolError, ToolOutcome, ToolRecord, tool
from helpers import guest


@tool
def echo(x: int) -> int:
    """Echoes x."""
    return x


@tool
def fail() -> None:
    """Fails."""
    raise ToolError("it failed")


@tool
def internal() -> None:
    """Fails inside."""
    raise ZeroDivisionError("division by zero")


def test_no_record_without_tools():
    done = run(["-c", "print(1)"])
    assert done.tools is None


def test_a_record_with_tools_even_when_the_guest_uses_none():
    done = run(["-c", "print(1)"], tools=[echo])
    assert isinstance(done.tools, ToolRecord)
    assert (done.tools.frames, done.tools.outcomes, done.tools.unlisted, done.tools.abandoned) == (0, (), 0, ())


def test_a_record_with_an_empty_tools_list():
    done = run(["-c", "from host import tools\nprint(tools.__all__)"], tools=[])
    assert done.stdout == b"[]\n"
    assert isinstance(done.tools, ToolRecord)
    assert [(o.op, o.outcome) for o in done.tools.outcomes] == [("list", "ok")]


FRAMES = [
    b'{"v":1,"id":1,"op":"list"}',
    b'{"v":1,"id":2,"op":"call","tool":"echo","args":{"x":41}}',
    b'{"v":1,"id":3,"op":"call","tool":"fail","args":{}}',
    b'{"v":1,"id":4,"op":"call","tool":"nope","args":{}}',
    b"not a frame",
    b'{"v":1,"id":6,"op":"call","tool":"internal"}',
    b'{"v":1,"id":7,"op":"call","tool":"echo","args":{"x":"no"}}',
]


def test_each_outcome_has_its_fields():
    program = f"""
import _host, json
answers = [_host.call(f) for f in {FRAMES!r}]
print(json.dumps([[len(a), json.loads(a)] for a in answers]))
"""
    done = run(["-c", program], tools=[echo, fail, internal])
    assert done.ok, done.stderr
    answers = json.loads(done.stdout)
    rec = done.tools
    assert rec.frames == len(FRAMES)
    assert rec.unlisted == 0
    assert rec.abandoned == ()
    assert all(isinstance(o, ToolOutcome) for o in rec.outcomes)
    got = [(o.seq, o.op, o.tool, o.outcome, o.abandoned) for o in rec.outcomes]
    assert got == [
        (1, "list", None, "ok", False),
        (2, "call", "echo", "ok", False),
        (3, "call", "fail", "tool_error", False),
        (4, "call", "nope", "unknown_tool", False),
        (5, "unknown", None, "protocol", False),
        (6, "call", "internal", "tool_error", False),
        (7, "call", "echo", "invalid_arguments", False),
    ]
    for frame, (length, answer), o in zip(FRAMES, answers, rec.outcomes):
        assert o.request_bytes == len(frame)
        assert o.response_bytes == length
        if answer["ok"]:
            assert o.message is None
        else:
            # The message is what the guest read.
            assert o.message == answer["error"]["message"]
            assert o.outcome == answer["error"]["kind"]
    assert answers[1][1]["value"] == 41
    assert rec.outcomes[2].message == "it failed"
    faults = [o.fault for o in rec.outcomes]
    assert faults[5] is not None and faults[5].startswith("ZeroDivisionError")
    assert "division by zero" in faults[5]
    assert [f for i, f in enumerate(faults) if i != 5] == [None] * 6


def test_the_first_1000_frames_are_listed_and_unlisted_counts_the_rest(many_calls_run):
    done, calls = many_calls_run
    assert done.stdout == b"done 0\n", done.stderr
    rec = done.tools
    assert rec.frames == 1101  # the discovery frame and 1,100 calls
    assert len(rec.outcomes) == 1000
    assert rec.unlisted == 101
    assert [o.seq for o in rec.outcomes] == list(range(1, 1001))
    assert rec.outcomes[0].op == "list"
    assert all(o.op == "call" and o.outcome == "ok" for o in rec.outcomes[1:])
    assert len(calls) == 1100


def test_abandoned_holds_every_call_answered_while_its_tool_ran_on():
    ended = threading.Event()

    @tool(timeout_s=0.05)
    def slow() -> str:
        """Sleeps."""
        time.sleep(0.3)
        ended.set()
        return "late"

    done = guest(
        """
        from host import tools
        for _ in range(2):
            try:
                tools.slow()
            except TimeoutError:
                print("timeout")
        print(tools.echo(1))
        """,
        [slow, echo],
    )
    assert done.stdout == b"timeout\ntimeout\n1\n"
    rec = done.tools
    assert len(rec.abandoned) == 2
    assert all(o.abandoned and o.tool == "slow" and o.outcome == "timeout" for o in rec.abandoned)
    assert [o.seq for o in rec.abandoned] == [2, 3]
    assert [o.abandoned for o in rec.outcomes] == [False, True, True, False]
    assert ended.wait(2)


# --- the record comes back on every ending -----------------------------------------------


def _ending(kind: str):
    cancel = threading.Event()

    @tool
    def stop() -> str:
        """Asks the host to cancel the run."""
        cancel.set()
        return "stopping"

    tail = {
        "exit": "import sys; sys.exit(3)",
        "trap": "import os; os.abort()",
        "deadline": "while True: pass",
        "cancelled": "tools.stop()\nwhile True: pass",
    }[kind]
    program = "from host import tools\nprint(tools.echo(5), flush=True)\n" + tail
    return run(["-c", program], tools=[echo, stop], deadline_s=1.0 if kind == "deadline" else 20.0, cancel=cancel)


@pytest.mark.parametrize("kind", ["exit", "trap", "deadline", "cancelled"])
def test_the_record_comes_back_on_every_ending(kind):
    done = _ending(kind)
    assert done.stdout == b"5\n"
    if kind == "exit":
        assert done.exit_code == 3 and done.trapped is None
    elif kind == "trap":
        assert done.exit_code is None and done.trapped is not None
    else:
        assert done.trapped == kind
    assert isinstance(done.tools, ToolRecord)
    ops = [(o.op, o.tool, o.outcome) for o in done.tools.outcomes]
    assert ops[:2] == [("list", None, "ok"), ("call", "echo", "ok")]
    if kind == "cancelled":
        assert ops[2] == ("call", "stop", "ok")


def test_the_record_comes_back_when_a_tool_is_running_at_the_deadline():
    release = threading.Event()

    @tool
    def hang() -> None:
        """Waits."""
        release.wait(5)

    try:
        done = guest(
            "from host import tools\ntry:\n    tools.hang()\nexcept TimeoutError:\n    pass\nwhile True: pass",
            [hang],
            deadline_s=0.5,
        )
    finally:
        release.set()
    assert done.trapped == "deadline"
    last = done.tools.outcomes[-1]
    assert (last.tool, last.outcome, last.abandoned) == ("hang", "timeout", True)
