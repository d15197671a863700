"""Tool calls in parallel from an asyncio program, against a fake host that speaks
`start` and `wait`: which calls become awaitables, the frames they send, the loop's
waits (never a spin), the host's cap, refusals, and a host that cannot start calls."""

import asyncio
import json

import pytest
from guest_fakes import dumps, tool

ECHO = tool("echo", "Echo.", {"x": {}}, required=["x"])
FAIL = tool("fail", "Fail.", {})


class ParallelHost:
    """Answers as a version-1 host with calls in parallel would. A started call's answer
    is held for `delay` waits; a wait that may block (no `timeout_ms`, or more than 0)
    with nothing in releases the oldest at once, as if it came meanwhile.
    `max_in_flight=None` makes a host that lists no cap (and serves no start)."""

    def __init__(self, max_in_flight=16, delay=1):
        self.max = max_in_flight
        self.delay = delay
        self.frames = []
        self.held = {}  # id -> [answer, waits left]
        self.most = 0  # the most calls held at once

    def call(self, frame):
        request = json.loads(bytes(frame))
        self.frames.append(request)
        rid, op = request["id"], request["op"]
        if op == "list":
            listed = {"v": 1, "id": rid, "ok": True, "tools": [ECHO, FAIL]}
            if self.max is not None:
                listed["max_in_flight"] = self.max
            return dumps(listed)
        if op == "call":
            return dumps(self.answer(rid, request))
        if op == "start" and self.max is not None:
            if len(self.held) >= self.max:
                error = {"kind": "budget_exceeded", "message": "too many in flight"}
                return dumps({"v": 1, "id": rid, "ok": False, "error": error})
            if request["tool"] == "nope":
                error = {"kind": "unknown_tool", "message": "no tool named 'nope'"}
                return dumps({"v": 1, "id": rid, "ok": False, "error": error})
            self.held[rid] = [self.answer(rid, request), self.delay]
            self.most = max(self.most, len(self.held))
            return b'{"v":1,"id":%d,"ok":true,"started":true}' % rid
        if op == "wait":
            out = []
            for i in request["ids"]:
                if i not in self.held:
                    out.append({"v": 1, "id": i, "ok": False, "error": {"kind": "protocol", "message": "not in flight"}})
                    continue
                self.held[i][1] -= 1
                if self.held[i][1] <= 0:
                    out.append(self.held.pop(i)[0])
            if not out and request.get("timeout_ms") != 0:
                oldest = min(i for i in request["ids"] if i in self.held)
                out.append(self.held.pop(oldest)[0])
            return dumps({"v": 1, "id": rid, "ok": True, "answers": out})
        error = {"kind": "protocol", "message": f"unknown op {op!r}"}
        return dumps({"v": 1, "id": rid, "ok": False, "error": error})

    def answer(self, rid, request):
        if request["tool"] == "fail":
            return {"v": 1, "id": rid, "ok": False, "error": {"kind": "tool_error", "message": "it failed"}}
        return {"v": 1, "id": rid, "ok": True, "value": request.get("args", {}).get("x")}

    def ops(self):
        return [f["op"] for f in self.frames]


@pytest.fixture
def setup(guest):
    def make(**kw):
        fake = ParallelHost(**kw)
        guest(fake)
        from host import tools

        return fake, tools

    return make


def test_gather_starts_every_call_before_waiting(setup):
    fake, tools = setup()

    async def main():
        return await asyncio.gather(tools.echo(1), tools.echo("b"), tools.echo([3]))

    assert asyncio.run(main()) == [1, "b", [3]]
    ops = fake.ops()
    assert ops[:4] == ["list", "start", "start", "start"], ops
    assert set(ops[4:]) == {"wait"}
    starts = [f for f in fake.frames if f["op"] == "start"]
    assert [f["args"] for f in starts] == [{"x": 1}, {"x": "b"}, {"x": [3]}]
    waited = {i for f in fake.frames if f["op"] == "wait" for i in f["ids"]}
    assert waited == {f["id"] for f in starts}


def test_the_form_follows_where_the_call_is_written(setup):
    fake, tools = setup()

    def helper():  # a plain function, even one a coroutine calls: the result
        return tools.echo("sync")

    async def main():
        inline = await tools.echo("awaited")
        spread = await asyncio.gather(*(tools.echo(i) for i in range(3)))
        listed = await asyncio.gather(*[tools.echo(i) for i in range(2)])
        return inline, spread, listed, helper()

    assert asyncio.run(main()) == ("awaited", [0, 1, 2], [0, 1], "sync")
    assert tools.echo("outside") == "outside"
    assert fake.ops().count("start") == 6
    assert [f["args"]["x"] for f in fake.frames if f["op"] == "call"] == ["sync", "outside"]


def test_a_coroutine_driven_by_hand_calls_synchronously(setup):
    """No running loop (code mode drives its coroutine itself): a plain call."""
    fake, tools = setup()

    async def body():
        return tools.echo(5)

    coro = body()
    with pytest.raises(StopIteration) as done:
        coro.send(None)
    assert done.value.value == 5
    assert fake.ops() == ["list", "call"]


def test_errors_raise_where_the_call_is_awaited(setup):
    fake, tools = setup()
    import host

    async def main():
        bad = tools.echo()  # no argument: refused in the guest, nothing sent
        refused = tools.fail()
        ok = tools.echo(1)
        results = await asyncio.gather(bad, refused, ok, return_exceptions=True)
        return results

    bad, refused, ok = asyncio.run(main())
    assert isinstance(bad, host.ToolArgumentError)
    assert isinstance(refused, host.ToolError) and refused.kind == "tool_error"
    assert ok == 1
    assert fake.ops().count("start") == 2


def test_a_refused_start_is_the_calls_error(setup):
    fake, tools = setup()
    import host

    tools.__dict__["nope"] = tools._function(tools.echo.__wrapped__, {})
    tools.nope.__wrapped__.ascii_name = b"nope"

    async def main():
        return await tools.nope(1)

    with pytest.raises(host.ToolArgumentError) as e:
        asyncio.run(main())
    assert e.value.kind == "unknown_tool"


def test_calls_past_the_hosts_cap_queue_in_the_guest(setup):
    fake, tools = setup(max_in_flight=2, delay=2)

    async def main():
        return await asyncio.gather(*[tools.echo(i) for i in range(7)])

    assert asyncio.run(main()) == list(range(7)), "none refused for the host's cap"
    assert fake.most == 2
    assert fake.ops().count("start") == 7


def test_the_loop_blocks_in_the_host_only_when_nothing_else_is_ready(setup):
    """A wait that blocks carries the loop's next timer (none: no timeout_ms); with work
    ready, it only asks (timeout_ms 0)."""
    fake, tools = setup(delay=10**9)  # answers only to a blocking wait

    async def ticker():
        for _ in range(3):
            await asyncio.sleep(0)  # always ready: the loop only asks meanwhile

    async def main():
        call = tools.echo("x")
        await ticker()
        return await call

    assert asyncio.run(main()) == "x"
    waits = [f for f in fake.frames if f["op"] == "wait"]
    assert [w.get("timeout_ms") for w in waits[:-1]] == [0] * (len(waits) - 1)
    assert "timeout_ms" not in waits[-1], "nothing else to do: the last wait blocks"

    fake.frames.clear()

    async def with_timer():
        call = tools.echo("y")
        sleeper = asyncio.ensure_future(asyncio.sleep(30))
        value = await call
        sleeper.cancel()
        return value

    assert asyncio.run(with_timer()) == "y"
    waits = [f for f in fake.frames if f["op"] == "wait"]
    assert 0 < waits[-1]["timeout_ms"] <= 30_000, "it blocks until the loop's next timer"


def test_a_cancelled_call_runs_on_and_its_answer_is_dropped(setup):
    fake, tools = setup(delay=10**9)

    async def main():
        slow = asyncio.ensure_future(tools.echo("slow"))
        await asyncio.sleep(0)  # it awaits the call's answer
        slow.cancel()
        return await tools.echo("next"), slow.cancelled()

    assert asyncio.run(main()) == ("next", True)
    # Its answer was taken (and dropped): the host holds nothing for the guest.
    assert not fake.held
    assert fake.ops().count("start") == 2


def test_a_call_is_a_coroutine_tasks_and_task_groups_take(setup):
    fake, tools = setup()

    async def main():
        call = tools.echo(1)
        assert asyncio.iscoroutine(call) and call.__name__ == "echo"
        task = asyncio.create_task(tools.echo(2))
        async with asyncio.TaskGroup() as group:
            grouped = [group.create_task(tools.echo(i)) for i in (3, 4)]
        return await call, await task, [t.result() for t in grouped]

    assert asyncio.run(main()) == (1, 2, [3, 4])
    # Each started when it was called, before anything awaited it.
    assert fake.ops()[:3] == ["list", "start", "start"]


def test_a_host_without_starts_answers_each_call_synchronously(setup):
    fake, tools = setup(max_in_flight=None)

    async def main():
        return await asyncio.gather(tools.echo(1), tools.echo(2))

    assert asyncio.run(main()) == [1, 2]
    assert fake.ops() == ["list", "call", "call"]
