"""The guide, section "Know the limits"."""

from __future__ import annotations

import json

import pytest
from wasi_python import run
from wasi_python.tools import tool
from helpers import guest

MIB = 1 << 20
LIST = b'{"v":1,"id":1,"op":"list"}'


calls: list = []


@tool
def ping(s: str = "") -> int:
    """Returns the length of s."""
    calls.append(len(s))
    return len(s)


@pytest.fixture(autouse=True)
def _clear():
    calls.clear()


BUDGET_PROGRAM = """
from host import tools, ToolBudgetExceeded
out = []
for i in range({n}):
    try:
        tools.ping()
        out.append("ok")
    except ToolBudgetExceeded as e:
        out.append(e.kind)
print(" ".join(out))
print("runs on")
"""


# --- frames -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 4])
def test_max_tool_calls_counts_frames_the_discovery_frame_included(limit):
    done = run(["-c", BUDGET_PROGRAM.format(n=4)], tools=[ping], max_tool_calls=limit)
    words = done.stdout.decode().splitlines()[0].split()
    ok = limit - 1  # the discovery frame takes one
    assert words == ["ok"] * ok + ["budget_exceeded"] * (4 - ok)
    assert len(calls) == ok


def test_past_max_tool_calls_the_guest_gets_toolbudgetexceeded_and_runs_on():
    done = run(["-c", BUDGET_PROGRAM.format(n=3)], tools=[ping], max_tool_calls=2)
    assert done.ok, done.stderr
    assert done.stdout == b"ok budget_exceeded budget_exceeded\nruns on\n"
    assert [o.outcome for o in done.tools.outcomes] == ["ok", "ok", "budget_exceeded", "budget_exceeded"]


def test_the_default_is_1000_frames():
    # 999 more list frames (cheap: no tool runs) bring the run to 1,000 frames.
    done = guest(
        f"""
        import _host, json
        from host import tools, ToolBudgetExceeded
        for _ in range(999):
            assert json.loads(_host.call({LIST!r}))["ok"]
        try:
            tools.ping()
        except ToolBudgetExceeded:
            print("budget exceeded at frame 1001")
        """,
        [ping],
    )
    assert done.stdout == b"budget exceeded at frame 1001\n", done.stderr
    assert calls == []


def test_max_tool_calls_none_means_no_limit(many_calls_run):
    done, seen = many_calls_run
    assert done.stdout == b"done 0\n", done.stderr
    assert len(seen) == 1100
    assert done.tools.frames == 1101


# --- request bytes ----------------------------------------------------------------------


def call_frame(n: int, rid: int = 2) -> bytes:
    return b'{"v":1,"id":%d,"op":"call","tool":"ping","args":{"s":"%s"}}' % (rid, b"x" * n)


def test_max_tool_request_bytes_bounds_the_bytes_read():
    small = call_frame(10)
    limit = len(LIST) + 2 * len(small)
    done = guest(
        f"""
        import _host, json
        from host import tools
        for f in ({small!r}, {small!r}, {small!r}):
            a = json.loads(_host.call(f))
            print(a["value"] if a["ok"] else a["error"]["kind"])
        """,
        [ping],
        max_tool_request_bytes=limit,
    )
    assert done.stdout == b"10\n10\nbudget_exceeded\n", done.stderr
    assert calls == [10, 10]


def test_a_frame_that_would_pass_the_request_budget_is_refused_unread():
    big = call_frame(500)
    small = call_frame(10)
    limit = len(LIST) + len(small) + 100
    done = guest(
        f"""
        import _host, json
        from host import tools
        a = json.loads(_host.call({big!r}))
        print(a["id"], a["error"]["kind"])
        # unread, so a smaller frame that fits is still read
        a = json.loads(_host.call({small!r}))
        print(a["id"], a["value"])
        """,
        [ping],
        max_tool_request_bytes=limit,
    )
    assert done.stdout == b"None budget_exceeded\n2 10\n", done.stderr
    refused = done.tools.outcomes[1]
    # Unread: its op and tool are not known.
    assert (refused.op, refused.tool, refused.outcome) == ("unknown", None, "budget_exceeded")
    assert refused.request_bytes == len(big)
    assert calls == [10]


def test_past_the_request_budget_the_guest_gets_toolbudgetexceeded_and_runs_on():
    done = guest(
        """
        from host import tools, ToolBudgetExceeded
        try:
            tools.ping("y" * 200)
        except ToolBudgetExceeded as e:
            print(type(e).__name__, e.kind)
        print(tools.ping("y"))
        """,
        [ping],
        max_tool_request_bytes=len(LIST) + 120,
    )
    assert done.stdout == b"ToolBudgetExceeded budget_exceeded\n1\n", done.stderr


NEAR_MIB = 1_000_000  # a frame a little under 1 MiB


def _bulk_program(count: int) -> str:
    return f"""
import _host, json
f = b'{{"v":1,"id":2,"op":"call","tool":"ping","args":{{"s":"' + b"x" * {NEAR_MIB} + b'"}}}}'
kinds = []
for _ in range({count}):
    a = json.loads(_host.call(f))
    kinds.append("ok" if a["ok"] else a["error"]["kind"])
print(json.dumps(kinds))
"""


def test_the_default_request_budget_is_16_mib():
    # 16 frames of ~1,000,050 bytes fit in 16 MiB (16,777,216); the 17th would pass it.
    done = run(["-c", _bulk_program(17)], tools=[ping])
    assert json.loads(done.stdout) == ["ok"] * 16 + ["budget_exceeded"], done.stderr


def test_max_tool_request_bytes_none_means_no_limit():
    done = run(["-c", _bulk_program(18)], tools=[ping], max_tool_request_bytes=None)
    assert json.loads(done.stdout) == ["ok"] * 18, done.stderr


# --- one request, one answer -------------------------------------------------------------


def _sized_frame(total: int) -> bytes:
    head = b'{"v":1,"id":2,"op":"call","tool":"ping","args":{"s":"'
    tail = b'"}}'
    return head + b"x" * (total - len(head) - len(tail)) + tail


def test_a_single_request_over_1_mib_is_refused_from_its_length():
    done = guest(
        f"""
        import _host, json
        ok = _host.call(b'{{"v":1,"id":2,"op":"call","tool":"ping","args":{{"s":"' + b"x" * ({MIB} - 56) + b'"}}}}')
        over = _host.call(b'{{"v":1,"id":3,"op":"call","tool":"ping","args":{{"s":"' + b"x" * ({MIB} - 55) + b'"}}}}')
        junk = _host.call(b"\\xff" * ({MIB} + 1))
        for a in (ok, over, junk):
            a = json.loads(a)
            print(a["id"], a["value"] if a["ok"] else a["error"]["kind"])
        """,
        [ping],
    )
    assert done.ok, done.stderr
    # Exactly 1 MiB is read; one byte more is refused unread (even bytes that are not JSON).
    assert done.tools.outcomes[0].request_bytes == MIB
    assert done.stdout.decode().splitlines() == [f"2 {MIB - 56}", "None too_large", "None too_large"]
    assert calls == [MIB - 56]
    assert [o.outcome for o in done.tools.outcomes] == ["ok", "too_large", "too_large"]


def test_a_too_large_request_raises_tooltoolarge_in_the_guest_which_runs_on():
    done = guest(
        f"""
        from host import tools, ToolTooLarge
        try:
            tools.ping("x" * ({MIB} + 1))
        except ToolTooLarge as e:
            print(type(e).__name__, e.kind)
        print(tools.ping("ab"))
        """,
        [ping],
    )
    assert done.stdout == b"ToolTooLarge too_large\n2\n", done.stderr
    assert calls == [2]


def test_an_answer_over_16_mib_is_refused_as_too_large():
    @tool
    def big(n: int) -> str:
        """A long string."""
        return "x" * n

    # The first call is frame 2: its answer {"v":1,"id":2,"ok":true,"value":"<n x>"} is n + 35 bytes.
    fits = 16 * MIB - len(b'{"v":1,"id":2,"ok":true,"value":""}')
    done = guest(
        f"""
        from host import tools, ToolTooLarge
        print(len(tools.big({fits})))
        try:
            tools.big({fits + 1})
        except ToolTooLarge as e:
            print(type(e).__name__, e.kind)
        print("runs on")
        """,
        [big],
    )
    assert done.stdout == f"{fits}\nToolTooLarge too_large\nruns on\n".encode(), done.stderr
    outcomes = done.tools.outcomes
    assert outcomes[1].response_bytes == 16 * MIB
    assert outcomes[2].outcome == "too_large"
    assert outcomes[2].response_bytes < 1000  # the refusal, not the result
