"""`from host import tools`: the list frame, the module it builds, its ImportErrors."""

import json
import sys

import pytest
from guest_fakes import FakeHost, answer, dumps, tool

PRICE = tool(
    "price",
    "Look up the unit price of an item.",
    {
        "item": {"type": "string", "description": 'The item\'s name, such as "apple".'},
        "qty": {"type": "integer", "description": "How many.", "default": 1},
    },
    required=["item"],
    output={"type": "number"},
    annotations={"readOnlyHint": True},
)


def import_tools():
    from host import tools

    return tools


def test_first_import_sends_exactly_one_list_frame(guest):
    fake = FakeHost(tools=[PRICE])
    guest(fake)
    import_tools()
    import_tools()
    from host import tools  # noqa: F401  (and again: modules are cached)

    assert fake.frames == [b'{"v":1,"id":1,"op":"list"}']


def test_module_offers_one_function_per_tool_in_list_order(guest):
    names = ["zeta", "alpha", "mid"]
    guest(FakeHost(tools=[tool(n) for n in names]))
    tools = import_tools()
    assert tools.__all__ == names
    for n in names:
        f = getattr(tools, n)
        assert callable(f)
        assert f.__name__ == f.__qualname__ == n
        assert f.__module__ == "host.tools"
        assert f.__code__.co_name == n  # tracebacks name the tool


def test_empty_list_gives_an_empty_module(guest):
    guest(FakeHost(tools=[]))
    tools = import_tools()
    assert tools.__all__ == []
    with pytest.raises(AttributeError) as info:
        tools.anything
    assert (
        str(info.value)
        == "module 'host.tools' has no tool 'anything'; this run offers: nothing"
    )


def test_unknown_attribute_names_the_offered_tools(guest):
    fake = FakeHost(tools=[tool("a"), tool("b")])
    guest(fake)
    tools = import_tools()
    with pytest.raises(AttributeError) as info:
        tools.x
    assert (
        str(info.value) == "module 'host.tools' has no tool 'x'; this run offers: a, b"
    )
    assert not hasattr(tools, "nope")
    assert len(fake.frames) == 1  # asking sends nothing


def test_descriptor_is_the_functions_own_copy(guest):
    guest(FakeHost(tools=[PRICE, tool("other", "x", {"n": {"type": "integer"}})]))
    tools = import_tools()
    assert tools.price.descriptor == PRICE
    assert tools.price.descriptor is not tools.other.descriptor
    # Mutating it changes nothing the function relies on.
    tools.price.descriptor["inputSchema"]["properties"].clear()
    tools.price.descriptor["name"] = "renamed"
    import inspect

    assert str(inspect.signature(tools.price)) == "(item: str, qty: int = 1) -> float"


def test_list_answer_with_null_id_is_accepted(guest):
    guest(FakeHost(script=[answer(id=None, ok=True, tools=[tool("f")])]))
    assert import_tools().__all__ == ["f"]


REFUSED = {"kind": "denied", "message": "no tools for you"}

IMPORT_ERRORS = [
    # (door answer or exception, the ImportError's message)
    (
        ConnectionRefusedError("no host is bound to the door"),
        "this run has no tools: the embedder passed none",
    ),
    (
        OSError("the host faulted while answering the door"),
        "the host's answer is not protocol 1: the door failed: "
        "the host faulted while answering the door",
    ),
    (
        OSError("host door returned 7"),
        "the host's answer is not protocol 1: the door failed: host door returned 7",
    ),
    (
        answer(id=1, ok=False, error=REFUSED),
        "the host refused the tool list (denied): no tools for you",
    ),
    (
        answer(id=1, ok=False, error={"kind": 3}),
        "the host refused the tool list (tool_error): ",
    ),
    (answer(id=1, ok=False), "the host refused the tool list (tool_error): "),
    (b"not json", "the host's answer is not protocol 1: the answer is not JSON"),
    (b"", "the host's answer is not protocol 1: the answer is not JSON"),
    (
        b'{"v":1,"id":1,"ok":true,"tools":[]}\xff',
        "the host's answer is not protocol 1: the answer is not JSON",
    ),
    (
        dumps([1]),
        "the host's answer is not protocol 1: the answer is not a protocol 1 object",
    ),
    (
        dumps({"id": 1, "ok": True, "tools": []}),
        "the host's answer is not protocol 1: the answer is not a protocol 1 object",
    ),
    (
        dumps({"v": "1", "id": 1, "ok": True, "tools": []}),
        "the host's answer is not protocol 1: the answer is not a protocol 1 object",
    ),
    (
        dumps({"v": 2, "id": 1, "ok": True, "tools": []}),
        "the host's answer is not protocol 1: the answer is protocol 2, not 1",
    ),
    (
        answer(id=2, ok=True, tools=[]),
        "the host's answer is not protocol 1: the answer's id does not match the call",
    ),
    (
        answer(id=1, tools=[]),
        "the host's answer is not protocol 1: the answer has no ok",
    ),
    (
        answer(id=1, ok=True),
        "the host's answer is not protocol 1: the answer has no tools list",
    ),
    (
        answer(id=1, ok=True, tools={"f": {}}),
        "the host's answer is not protocol 1: the answer has no tools list",
    ),
    (
        answer(id=1, ok=True, tools=[tool("f"), tool("f")]),
        "the host's answer is not protocol 1: two tools are named 'f'",
    ),
]


@pytest.mark.parametrize("reply, message", IMPORT_ERRORS)
def test_import_errors(guest, reply, message):
    fake = FakeHost(script=[reply])
    guest(fake)
    with pytest.raises(ImportError) as info:
        import_tools()
    assert str(info.value) == message
    assert "host.tools" not in sys.modules
    assert fake.frames == [b'{"v":1,"id":1,"op":"list"}']


BAD_NAMES = [
    None,
    3,
    "",
    "_private",
    "1abc",
    "has space",
    "dash-name",
    "caf\u00e9",
    "a" * 65,
    "class",
    "None",
    "True",
    "lambda",
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_tool_with_an_invalid_name_fails_the_import(guest, name):
    guest(FakeHost(tools=[tool("good"), {"name": name}]))
    with pytest.raises(ImportError) as info:
        import_tools()
    assert str(info.value).startswith(
        "the host's answer is not protocol 1: a tool has an invalid name"
    )


@pytest.mark.parametrize(
    "name", ["a", "A9", "snake_case_1", "a" * 64, "match", "case", "type"]
)
def test_valid_names(guest, name):
    guest(FakeHost(tools=[tool(name)]))
    assert import_tools().__all__ == [name]


def test_a_descriptor_that_is_not_an_object_fails_the_import(guest):
    guest(FakeHost(tools=["f"]))
    with pytest.raises(ImportError):
        import_tools()


def test_keywords_match_this_python(guest):
    import keyword

    guest(FakeHost(tools=[]))
    from host.tools import _KEYWORDS

    assert _KEYWORDS == frozenset(keyword.kwlist)


def test_a_failed_import_can_be_retried_and_ids_keep_growing(guest):
    fake = FakeHost(tools=[tool("f")], script=[OSError("host door returned 5")])
    host = guest(fake)
    with pytest.raises(ImportError):
        import_tools()
    tools = import_tools()
    assert tools.__all__ == ["f"]
    assert fake.frames == [b'{"v":1,"id":1,"op":"list"}', b'{"v":1,"id":2,"op":"list"}']
    assert host._last_id == 2


def test_import_without_a_door_module_is_an_import_error(guest, monkeypatch):
    guest(FakeHost())
    monkeypatch.setitem(sys.modules, "_host", None)
    with pytest.raises(ImportError) as info:
        import_tools()
    assert "_host" in str(info.value)


def test_list_frame_is_valid_json_protocol_1(guest):
    fake = FakeHost(tools=[])
    guest(fake)
    import_tools()
    assert json.loads(fake.frames[0]) == {"v": 1, "id": 1, "op": "list"}
