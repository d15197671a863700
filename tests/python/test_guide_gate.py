"""The guide, section "Gate each call"."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest
from wasi_python.tools import ToolCall, ToolDenied, tool
from helpers import guest

# A bound for the runs with async gates, so a hang fails fast.
ASYNC_DEADLINE_S = 5.0


def _make_tools(ran: list):
    def place(item: str, qty: int = 1, *, note: str = "", account: str) -> str:
        """Place an order."""
        ran.append(("place", item, qty, note, account))
        return f"{qty} {item}"

    @tool
    def ping() -> str:
        """Ping."""
        ran.append(("ping",))
        return "pong"

    return [tool(partial(place, account="acct-1"), name="place"), ping]


def test_the_gate_gets_a_toolcall_with_seq_tool_arguments_and_request_bytes():
    seen: list[ToolCall] = []
    ran: list = []

    def gate(call):
        seen.append(call)

    done = guest(
        """
        from host import tools
        tools.place("apple")
        tools.place("pear", 3, note="x")
        tools.ping()
        """,
        _make_tools(ran),
        gate=gate,
    )
    assert done.ok, done.stderr
    assert all(isinstance(c, ToolCall) for c in seen)
    assert [c.tool for c in seen] == ["place", "place", "ping"]
    calls = [o for o in done.tools.outcomes if o.op == "call"]
    assert [c.seq for c in seen] == [o.seq for o in calls] == [2, 3, 4]
    assert [c.request_bytes for c in seen] == [o.request_bytes for o in calls]
    assert seen[0].request_bytes == len(b'{"v":1,"id":2,"op":"call","tool":"place","args":{"item":"apple"}}')
    # Only what the guest sent: no defaults (qty, note), no keyword the partial binds (account).
    assert seen[0].arguments == {"item": "apple"}
    assert seen[1].arguments == {"item": "pear", "qty": 3, "note": "x"}
    assert seen[2].arguments == {}
    assert len(ran) == 3


def test_the_gates_arguments_are_a_copy():
    ran: list = []

    def gate(call):
        call.arguments["item"] = "diamond"
        call.arguments["qty"] = 1000

    done = guest("from host import tools\nprint(tools.place('apple'))", _make_tools(ran), gate=gate)
    assert done.stdout == b"1 apple\n"
    assert ran == [("place", "apple", 1, "", "acct-1")]


def test_the_gate_sees_only_validated_arguments():
    seen: list = []
    ran: list = []
    done = guest(
        """
        from host import tools
        try:
            tools.place(5)
        except TypeError as e:
            print(e.kind)
        """,
        _make_tools(ran),
        gate=seen.append,
    )
    assert done.stdout == b"invalid_arguments\n"
    assert seen == [] and ran == []


@pytest.mark.parametrize("verdict", [None, True])
def test_the_gate_allows_by_returning_none_or_true(verdict):
    ran: list = []
    done = guest("from host import tools\nprint(tools.ping())", _make_tools(ran), gate=lambda call: verdict)
    assert done.stdout == b"pong\n"
    assert ran == [("ping",)]
    assert done.tools.outcomes[-1].outcome == "ok"


def test_the_gate_refuses_by_returning_false():
    ran: list = []
    done = guest(
        """
        from host import tools, ToolDenied
        try:
            tools.ping()
        except PermissionError as e:
            print(type(e).__name__, isinstance(e, ToolDenied), e.kind)
        print("runs on")
        """,
        _make_tools(ran),
        gate=lambda call: False,
    )
    assert done.stdout == b"ToolDenied True denied\nruns on\n"
    assert ran == []
    assert done.tools.outcomes[-1].outcome == "denied"


def test_the_gate_refuses_with_tooldenied_whose_message_the_guest_reads_as_permissionerror():
    ran: list = []

    def gate(call):
        if call.arguments.get("qty", 1) > 2:
            raise ToolDenied("at most 2 per order")

    done = guest(
        """
        from host import tools
        print(tools.place("fig", 2))
        try:
            tools.place("fig", 3)
        except PermissionError as e:
            print("refused:", e)
        """,
        _make_tools(ran),
        gate=gate,
    )
    assert done.stdout == b"2 fig\nrefused: at most 2 per order\n"
    assert len(ran) == 1
    last = done.tools.outcomes[-1]
    assert (last.outcome, last.message) == ("denied", "at most 2 per order")


def test_a_gate_that_raises_anything_else_refuses_and_the_record_keeps_its_fault():
    ran: list = []

    def gate(call):
        raise LookupError("no policy for /etc/policies/ping.toml\nsecond line")

    done = guest(
        """
        from host import tools
        try:
            tools.ping()
        except PermissionError as e:
            print("refused")
        print("runs on")
        """,
        _make_tools(ran),
        gate=gate,
    )
    assert done.stdout == b"refused\nruns on\n"
    assert ran == []
    last = done.tools.outcomes[-1]
    assert last.outcome == "denied"
    assert "LookupError" in last.fault
    assert "/etc/policies/ping.toml" in last.fault
    assert "second line" not in last.fault
    # The fault stays on the host.
    assert b"/etc/policies" not in done.stdout + done.stderr
    assert "/etc/policies" not in (last.message or "")


def test_with_no_gate_every_valid_call_runs():
    ran: list = []
    done = guest(
        """
        from host import tools
        tools.ping(); tools.place("a"); tools.place("b", 2, note="n")
        """,
        _make_tools(ran),
    )
    assert done.ok, done.stderr
    assert [r[0] for r in ran] == ["ping", "place", "place"]
    assert [o.outcome for o in done.tools.outcomes] == ["ok"] * 4


def test_an_async_gate():
    ran: list = []
    seen: list = []

    async def gate(call):
        await asyncio.sleep(0.001)
        seen.append(call.tool)
        return call.tool == "ping"

    done = guest(
        """
        from host import tools
        print(tools.ping())
        try:
            tools.place("a")
        except PermissionError:
            print("refused")
        """,
        _make_tools(ran),
        gate=gate,
        deadline_s=ASYNC_DEADLINE_S,
    )
    assert done.stdout == b"pong\nrefused\n"
    assert seen == ["ping", "place"]
    assert ran == [("ping",)]


def test_an_async_gate_may_raise_tooldenied():
    async def gate(call):
        await asyncio.sleep(0)
        raise ToolDenied("not today")

    ran: list = []
    done = guest(
        """
        from host import tools
        try:
            tools.ping()
        except PermissionError as e:
            print(e)
        """,
        _make_tools(ran),
        gate=gate,
        deadline_s=ASYNC_DEADLINE_S,
    )
    assert done.stdout == b"not today\n"
    assert ran == []


def test_a_gate_that_returns_an_awaitable():
    async def decide(call):
        return False

    ran: list = []
    done = guest(
        """
        from host import tools
        try:
            tools.ping()
        except PermissionError:
            print("refused")
        """,
        _make_tools(ran),
        gate=lambda call: decide(call),
        deadline_s=ASYNC_DEADLINE_S,
    )
    assert done.stdout == b"refused\n"
    assert ran == []
