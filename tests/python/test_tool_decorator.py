"""`wasi_python.tools.tool`: tools, descriptors and schemas made from Python functions."""

from __future__ import annotations

import asyncio
import collections.abc
import dataclasses
import functools
import inspect
import json
import math
import typing
from typing import Annotated, Any, Literal, NewType, Optional, TypedDict, Union

import pytest
from pydantic import BaseModel, Field

from wasi_python import _build, _tools
from wasi_python.tools import Tool, ToolCall, ToolDenied, ToolError, ToolTimeout, tool

from helpers import REGIONS, Color, Size, lookup_region

# ---------------------------------------------------------------------------------------------
# Helpers and types used in the tables (module level, so type hints resolve).


class Point(TypedDict):
    x: int
    y: float


class Partial(TypedDict, total=False):
    label: str


@dataclasses.dataclass
class Pt:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)


UserId = NewType("UserId", int)


class Item(BaseModel):
    sku: str
    qty: int = 1


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Order(BaseModel):
    """An order."""

    items: list[Item]
    note: Optional[str] = Field(None, description="A note.")


def with_hint(hint: Any) -> Tool:
    """A tool taking one parameter `x` hinted `hint`."""

    def f(x):  # noqa: ANN001
        return x

    if hint is not inspect.Parameter.empty:
        f.__annotations__ = {"x": hint}
    return tool(f)


def schema_of(hint: Any) -> dict:
    t = with_hint(hint)
    schema = t.input_schema
    assert schema["required"] == ["x"]
    assert schema["additionalProperties"] is False
    return schema["properties"]["x"]


# ---------------------------------------------------------------------------------------------
# Type hints -> JSON Schema

HINT_SCHEMAS = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (type(None), {"type": "null"}),
    (bytes, {"type": "string", "contentEncoding": "base64"}),
    (Any, {}),
    (inspect.Parameter.empty, {}),
    (list, {"type": "array"}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (typing.List[str], {"type": "array", "items": {"type": "string"}}),
    (list[dict], {"type": "array", "items": {"type": "object"}}),
    (list[Any], {"type": "array"}),
    (collections.abc.Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (
        tuple[int, str],
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (set[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (dict, {"type": "object"}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (dict[str, Any], {"type": "object"}),
    (
        collections.abc.Mapping[str, list[str]],
        {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    ),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (
        dict[str, int] | None,
        {
            "anyOf": [
                {"type": "object", "additionalProperties": {"type": "integer"}},
                {"type": "null"},
            ]
        },
    ),
    (Literal["a", "b"], {"enum": ["a", "b"]}),
    (Literal["only"], {"const": "only"}),
    (Literal[1, True, None], {"enum": [1, True, None]}),
    (Color, {"enum": ["red", "blue"]}),
    (Size, {"enum": [1, 3]}),
    (UserId, {"type": "integer"}),
    (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
    (
        Annotated[str, Field(description="From a Field.")],
        {"type": "string", "description": "From a Field."},
    ),
    (
        list[Annotated[int, "one"]],
        {"type": "array", "items": {"type": "integer", "description": "one"}},
    ),
    (
        Point,
        {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "number"}},
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    ),
    (
        Partial,
        {
            "type": "object",
            "properties": {"label": {"type": "string"}},
            "additionalProperties": False,
        },
    ),
    (
        Pt,
        {
            "type": "object",
            "properties": {
                "x": {"type": "integer"},
                "y": {"type": "integer", "default": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["x"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("hint", "expected"), HINT_SCHEMAS, ids=[repr(h) for h, _ in HINT_SCHEMAS])
def test_hint_to_schema(hint: Any, expected: dict) -> None:
    assert schema_of(hint) == expected


HINT_REFUSED = [
    dict[int, str],  # a JSON object's keys are strings
    Literal[b"x"],  # not JSON
    "NotAType",  # an unresolved forward reference
]


@pytest.mark.parametrize("hint", HINT_REFUSED, ids=repr)
def test_hint_without_a_schema_is_refused(hint: Any) -> None:
    with pytest.raises(TypeError):
        with_hint(hint)


def test_pydantic_fallback_covers_other_types() -> None:
    import datetime

    assert schema_of(datetime.date) == {"type": "string", "format": "date"}


# ---------------------------------------------------------------------------------------------
# Annotation texts (what the guest's signature shows)

HINT_TEXTS = [
    (str, "str"),
    (int, "int"),
    (None, "None"),
    (Any, "Any"),
    (list[dict], "list[dict]"),
    (typing.List[int], "list[int]"),
    (dict[str, int] | None, "dict[str, int] | None"),
    (Optional[dict[str, int]], "dict[str, int] | None"),
    (Literal["a", "b"], "Literal['a', 'b']"),
    (Literal[Color.RED], "Literal[Color.RED]"),
    (tuple[int, ...], "tuple[int, ...]"),
    (collections.abc.Sequence[str], "Sequence[str]"),
    (Annotated[int, "desc"], "int"),
    (Color, "Color"),
    (Order, "Order"),
    (UserId, "UserId"),
]


@pytest.mark.parametrize(("hint", "text"), HINT_TEXTS, ids=[t for _, t in HINT_TEXTS])
def test_hint_text(hint: Any, text: str) -> None:
    [param] = with_hint(hint).descriptor()["_meta"]["python"]["params"]
    assert param["annotation"] == text


def test_a_missing_hint_has_no_annotation_text() -> None:
    [param] = with_hint(inspect.Parameter.empty).descriptor()["_meta"]["python"]["params"]
    assert param == {"name": "x", "kind": "positional_or_keyword"}


# ---------------------------------------------------------------------------------------------
# The guide's example, exactly (helpers.lookup_region)


def test_guide_example_descriptor() -> None:
    assert lookup_region.descriptor() == {
        "name": "lookup_region",
        "description": "Look up a sales region by its code.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": 'The region code, such as "EMEA".'}
            },
            "required": ["code"],
            "additionalProperties": False,
        },
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
        "_meta": {
            "python": {
                "params": [{"name": "code", "kind": "positional_or_keyword", "annotation": "str"}],
                "returns": "dict",
                "doc": (
                    "Look up a sales region by its code.\n\n"
                    'Args:\n    code: The region code, such as "EMEA".'
                ),
            }
        },
    }
    # The descriptor is JSON, and a fresh copy each time.
    json.dumps(lookup_region.descriptor(), allow_nan=False)
    d = lookup_region.descriptor()
    d["inputSchema"]["properties"].clear()
    assert lookup_region.descriptor()["inputSchema"]["properties"]


def test_guide_example_tool_object() -> None:
    t = lookup_region
    assert isinstance(t, Tool)
    assert (t.name, t.read_only, t.destructive, t.is_async, t.fixed) == (
        "lookup_region",
        True,
        False,
        False,
        (),
    )
    assert t.timeout_s is None and t.validates_input is False
    assert t.annotations == {"readOnlyHint": True}
    assert t.output_schema == {"type": "object"}
    assert str(t.signature) == "(code: str) -> dict"
    # Still a function in host code, and fn is what the runner calls with keywords.
    assert t("EMEA") == REGIONS["EMEA"]
    assert t.fn(code="EMEA") == REGIONS["EMEA"]
    with pytest.raises(ToolError):
        t("nope")


# ---------------------------------------------------------------------------------------------
# Docstrings: description up to the first heading, and the Args: section


def f_multi(query: str, limit: int = 5, *, exact: bool = False) -> list[str]:
    """Search the catalogue.

    Matches names and descriptions.

    Args:
        query (str): What to look for; words
            are ANDed together,
            case-insensitive.
        limit: At most this many.
        exact: Match whole words only.

    Returns:
        The names found.
    """
    return []


def test_args_section_with_continuation_lines() -> None:
    t = tool(f_multi)
    props = t.input_schema["properties"]
    assert props["query"]["description"] == (
        "What to look for; words are ANDed together, case-insensitive."
    )
    assert props["limit"] == {"type": "integer", "description": "At most this many.", "default": 5}
    assert props["exact"]["description"] == "Match whole words only."
    assert t.description == "Search the catalogue.\n\nMatches names and descriptions."
    assert t.doc == inspect.cleandoc(f_multi.__doc__)


DESCRIPTIONS = [
    ("One line.", "One line."),
    ("Summary.\n\n    More text.\n    ", "Summary.\n\nMore text."),
    ("Summary.\n\n    Args:\n        x: y\n", "Summary."),
    ("Summary.\n\n    Arguments:\n        x: y\n", "Summary."),
    ("Summary.\n\n    Returns:\n        A thing.\n", "Summary."),
    ("Summary.\n\n    Raises:\n        ValueError: no.\n", "Summary."),
    ("Summary.\n\n    Example:\n        >>> f()\n", "Summary."),
    ("Summary.\n\n    Examples:\n        >>> f()\n", "Summary."),
    ("Summary.\n\n    Note:\n        careful.\n", "Summary."),
    ("Summary.\n\n    Notes:\n        careful.\n", "Summary."),
    ("Summary.\n\n    Yields:\n        things.\n", "Summary."),
    ("Summary.\n    Second line.\n\n    # Details\n    more\n", "Summary.\nSecond line."),
    ("Summary.\n\n    ## Usage\n", "Summary."),
    ("Summary.\n\n    Parameters\n    ----------\n    x : int\n", "Summary."),
    ("Args:\n        x: y\n", ""),
    ("The args: are these.", "The args: are these."),
]


@pytest.mark.parametrize(("doc", "expected"), DESCRIPTIONS)
def test_description_stops_at_first_heading(doc: str, expected: str) -> None:
    def f(x: int) -> None:
        pass

    f.__doc__ = doc
    assert tool(f).description == expected


def test_no_docstring() -> None:
    def bare(x: int) -> None:
        pass

    t = tool(bare)
    assert t.description == ""
    assert t.doc == ""
    assert "description" not in t.input_schema["properties"]["x"]


def test_description_override_makes_the_doc() -> None:
    t = tool(f_multi, description="Find things.")
    assert t.description == "Find things."
    assert t.doc == (
        "Find things.\n\nArgs:\n"
        "    query: What to look for; words are ANDed together, case-insensitive.\n"
        "    limit: At most this many.\n"
        "    exact: Match whole words only."
    )


def test_annotated_description_wins_over_args_section() -> None:
    def f(x: Annotated[int, "From the hint."]) -> None:
        """Do it.

        Args:
            x: From the docstring.
        """

    assert tool(f).input_schema["properties"]["x"]["description"] == "From the hint."


def test_pydantic_field_default_gives_description_and_default() -> None:
    def f(
        n: int = Field(3, description="How many."), m: int = Field(default_factory=lambda: 7)
    ) -> list:
        return [n, m]

    t = tool(f)
    assert t.input_schema["properties"] == {
        "n": {"type": "integer", "description": "How many.", "default": 3},
        "m": {"type": "integer"},
    }
    assert "required" not in t.input_schema
    params = t.descriptor()["_meta"]["python"]["params"]
    assert params[1] == {
        "name": "m",
        "kind": "positional_or_keyword",
        "annotation": "int",
        "optional": True,
    }
    # The runner passes only what the guest sent; the real defaults are filled in, not FieldInfo.
    assert t.fn() == [3, 7]
    assert t.fn(m=1) == [3, 1]


# ---------------------------------------------------------------------------------------------
# Defaults


class Blob:
    pass


DEFAULTS = [
    (10, 10),
    (2.5, 2.5),
    ("x", "x"),
    (None, None),
    (True, True),
    ([1, "a"], [1, "a"]),
    ((1, 2), [1, 2]),
    ({"k": [None]}, {"k": [None]}),
    (Color.BLUE, "blue"),
    (b"\x00\xff", {"$bytes": "AP8="}),
]


@pytest.mark.parametrize(("default", "published"), DEFAULTS, ids=repr)
def test_default_is_published(default: Any, published: Any) -> None:
    def f(x=default):  # noqa: ANN001
        return x

    t = tool(f)
    assert t.input_schema["properties"]["x"] == {"default": published}
    assert "required" not in t.input_schema
    [param] = t.descriptor()["_meta"]["python"]["params"]
    assert param["default"] == published


NON_JSON_DEFAULTS = [object(), Blob(), math.nan, math.inf, {1: "a"}, {"$bytes": "AA=="}, 10**70]


@pytest.mark.parametrize("default", NON_JSON_DEFAULTS, ids=repr)
def test_non_json_default_is_refused(default: Any) -> None:
    def f(x=default):  # noqa: ANN001
        return x

    with pytest.raises(TypeError, match="partial"):
        tool(f)


# ---------------------------------------------------------------------------------------------
# functools.partial: fixed keywords

KEY = "sk-secret-value"


def orders_for(user_id: int, api_key: str, conn: object, limit: int = 10) -> list[dict]:
    """This user's latest orders.

    Args:
        user_id: Whose orders.
        api_key: The key of the orders service,
            never shown.
        conn: A database connection.
        limit: How many to return.
    """
    return [{"user": user_id, "limit": limit, "key_ok": api_key == KEY, "conn": conn is not None}]


class Connection:
    """Not JSON."""


def test_partial_fixes_its_keywords() -> None:
    conn = Connection()
    t = tool(functools.partial(orders_for, user_id=42, api_key=KEY, conn=conn), name="my_orders")
    assert t.name == "my_orders"
    assert t.fixed == ("user_id", "api_key", "conn")
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "description": "How many to return.", "default": 10}
        },
        "additionalProperties": False,
    }
    text = json.dumps(t.descriptor())
    for hidden in ("user_id", "api_key", "conn", KEY, "42", "never shown"):
        assert hidden not in text
    assert t.descriptor()["_meta"]["python"]["params"] == [
        {"name": "limit", "kind": "positional_or_keyword", "annotation": "int", "default": 10}
    ]
    assert t.doc == "This user's latest orders.\n\nArgs:\n    limit: How many to return."
    assert str(t.signature) == "(limit: int = 10) -> list[dict]"
    assert t.fn(limit=3) == [{"user": 42, "limit": 3, "key_ok": True, "conn": True}]
    assert t.fn() == [{"user": 42, "limit": 10, "key_ok": True, "conn": True}]


def test_partial_name_defaults_to_the_function() -> None:
    assert (
        tool(functools.partial(orders_for, user_id=1, api_key="k", conn=None)).name == "orders_for"
    )


def test_nested_partials_flatten() -> None:
    inner = functools.partial(orders_for, user_id=1)

    class Sub(functools.partial):  # a subclass is not flattened by functools itself
        pass

    t = tool(Sub(inner, api_key="k", conn=None), name="o")
    assert t.fixed == ("user_id", "api_key", "conn")
    assert list(t.input_schema["properties"]) == ["limit"]
    assert t.fn(limit=1)[0]["user"] == 1


def test_partial_positional_args_remove_leading_params() -> None:
    def f(a: int, b: int, c: int = 3) -> list:
        return [a, b, c]

    t = tool(functools.partial(f, 1))
    assert list(t.input_schema["properties"]) == ["b", "c"]
    assert t.input_schema["required"] == ["b"]
    assert t.fixed == ()
    assert t.fn(b=2) == [1, 2, 3]


def test_partial_keyword_of_a_middle_param() -> None:
    def f(a: int, b: int, c: int) -> list:
        return [a, b, c]

    t = tool(functools.partial(f, b=2))
    assert [p["name"] for p in t.descriptor()["_meta"]["python"]["params"]] == ["a", "c"]
    assert all(
        p["kind"] == "positional_or_keyword" for p in t.descriptor()["_meta"]["python"]["params"]
    )
    assert t.fn(a=1, c=3) == [1, 2, 3]


def test_a_default_is_not_fixed() -> None:
    def f(limit: int = 10, user_id: int = 7) -> int:
        return user_id

    t = tool(f)
    assert t.fixed == ()
    assert t.input_schema["properties"]["user_id"] == {"type": "integer", "default": 7}


PARTIAL_REFUSED = [
    lambda: functools.partial(orders_for, nope=1),  # not a parameter
    lambda: functools.partial(orders_for, 1, 2, 3, 4, 5),  # too many positionals
    lambda: functools.partial(orders_for, 1, user_id=2),  # bound twice
]


@pytest.mark.parametrize("make", PARTIAL_REFUSED)
def test_broken_partial_is_refused(make: Any) -> None:
    with pytest.raises(TypeError):
        tool(make())


def test_partial_keyword_into_kwargs_is_fixed() -> None:
    def f(x: int, **extra: Any) -> dict:
        return {"x": x, **extra}

    t = tool(functools.partial(f, token="t"))
    assert t.fixed == ("token",)
    assert t.input_schema["additionalProperties"] is True
    assert t.fn(x=1) == {"x": 1, "token": "t"}


# ---------------------------------------------------------------------------------------------
# Labels, names, timeouts and other options

LABELS = [
    ({}, {}),
    ({"read_only": True}, {"readOnlyHint": True}),
    ({"destructive": True}, {"destructiveHint": True}),
    ({"idempotent": True}, {"idempotentHint": True}),
    ({"open_world": True}, {"openWorldHint": True}),
    (
        {"read_only": True, "destructive": True, "idempotent": True, "open_world": True},
        {
            "readOnlyHint": True,
            "destructiveHint": True,
            "idempotentHint": True,
            "openWorldHint": True,
        },
    ),
]


@pytest.mark.parametrize(("labels", "hints"), LABELS)
def test_labels_become_mcp_hints(labels: dict, hints: dict) -> None:
    t = tool(lookup_region.fn, **labels)
    assert t.annotations == hints
    d = t.descriptor()
    assert d.get("annotations", {}) == hints
    assert ("annotations" in d) == bool(hints)
    for label in ("read_only", "destructive", "idempotent", "open_world"):
        assert getattr(t, label) is labels.get(label, False)


NAMES = [
    ("a", True),
    ("lookup_region", True),
    ("A1_b2", True),
    ("x" * 64, True),
    ("match", True),  # a soft keyword is a fine name
    ("x" * 65, False),
    ("_private", False),
    ("1abc", False),
    ("has-dash", False),
    ("has space", False),
    ("", False),
    ("café", False),
    ("class", False),
    ("None", False),
    ("<lambda>", False),
]


@pytest.mark.parametrize(("name", "ok"), NAMES)
def test_name_validation(name: str, ok: bool) -> None:
    if ok:
        assert tool(lookup_region.fn, name=name).name == name
    else:
        with pytest.raises(ValueError):
            tool(lookup_region.fn, name=name)


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ValueError):
        tool(lambda x: x)
    assert tool(lambda x: x, name="ident").name == "ident"


TIMEOUTS = [(None, None), (1, 1.0), (0.25, 0.25)]
BAD_TIMEOUTS = [0, -1, math.inf, math.nan, "1", True]


@pytest.mark.parametrize(("given", "stored"), TIMEOUTS)
def test_timeout(given: Any, stored: Any) -> None:
    assert tool(lookup_region.fn, timeout_s=given).timeout_s == stored


@pytest.mark.parametrize("given", BAD_TIMEOUTS, ids=repr)
def test_bad_timeout_is_refused(given: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        tool(lookup_region.fn, timeout_s=given)


@pytest.mark.parametrize("thing", [1, "lookup", 3.5, [lookup_region]], ids=repr)
def test_non_callable_is_refused(thing: Any) -> None:
    with pytest.raises(TypeError):
        tool(thing)


def test_var_positional_is_refused() -> None:
    def f(*args: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"\*args"):
        tool(f)


def test_var_keyword_allows_additional_properties() -> None:
    def f(x: int, **rest) -> None:  # noqa: ANN003
        pass

    def g(**counts: int) -> None:
        pass

    assert tool(f).input_schema["additionalProperties"] is True
    assert tool(g).input_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": {"type": "integer"},
    }
    assert tool(g).descriptor()["_meta"]["python"]["params"] == [
        {"name": "counts", "kind": "var_keyword", "annotation": "int"}
    ]


def test_positional_only_params_are_supported() -> None:
    def f(a: int, b: int = 2, /, c: int = 3, *, d: int = 4) -> list:
        return [a, b, c, d]

    t = tool(f)
    assert [(p["name"], p["kind"]) for p in t.descriptor()["_meta"]["python"]["params"]] == [
        ("a", "positional_only"),
        ("b", "positional_only"),
        ("c", "positional_or_keyword"),
        ("d", "keyword_only"),
    ]
    assert t.fn(a=1) == [1, 2, 3, 4]
    assert t.fn(a=1, b=5, d=6) == [1, 5, 3, 6]
    assert t.fn(b=5, a=1, c=0) == [1, 5, 0, 4]


def test_options_must_have_their_types() -> None:
    with pytest.raises(TypeError):
        tool(lookup_region.fn, name=3)
    with pytest.raises(TypeError):
        tool(lookup_region.fn, description=b"x")


# ---------------------------------------------------------------------------------------------
# Kinds of callables


def test_plain_function_decorator_forms() -> None:
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    t1 = tool(add)
    t2 = tool()(add)
    t3 = tool(add, name="plus")
    assert t1.descriptor() == t2.descriptor()
    assert t3.name == "plus"
    assert t1(2) == 3 and t1.fn(a=2, b=2) == 4
    assert inspect.signature(t1) == inspect.signature(add)  # __wrapped__ points at the function


def test_bound_method_and_callable_object() -> None:
    class Shop:
        """A shop."""

        def __init__(self) -> None:
            self.stock = {"apple": 3}

        def count(self, item: str) -> int:
            """How many of an item are left."""
            return self.stock.get(item, 0)

    class Counter:
        """Count things."""

        def __call__(self, n: int) -> int:
            return n + 1

    m = tool(Shop().count)
    assert m.name == "count"
    assert list(m.input_schema["properties"]) == ["item"]
    assert m.fn(item="apple") == 3
    c = tool(Counter())
    assert (c.name, c.description) == ("Counter", "Count things.")
    assert c.input_schema["required"] == ["n"]
    assert c.fn(n=1) == 2


def test_tool_passed_again() -> None:
    assert tool(lookup_region) is lookup_region
    assert tool(lookup_region, read_only=False) is lookup_region
    renamed = tool(lookup_region, name="region", timeout_s=2)
    assert renamed is not lookup_region
    assert (renamed.name, renamed.timeout_s, renamed.read_only) == ("region", 2.0, True)
    assert renamed.input_schema == lookup_region.input_schema


def test_tool_is_immutable() -> None:
    with pytest.raises(AttributeError):
        lookup_region.name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del lookup_region.description
    schema = lookup_region.input_schema
    schema["properties"].clear()
    assert lookup_region.input_schema["properties"]


# ---------------------------------------------------------------------------------------------
# async


async def async_lookup(code: str) -> dict:
    """Look up, asynchronously."""
    return {"code": code}


async def async_gen(n: int):  # noqa: ANN201
    yield n


def sync_lookup(code: str) -> dict:
    return {"code": code}


def sync_returning_awaitable(code: str):  # noqa: ANN201
    return async_lookup(code)


class AsyncCallable:
    async def __call__(self, code: str) -> dict:
        return {"code": code}


class AsyncMethods:
    async def lookup(self, code: str) -> dict:
        return {"code": code}


ASYNC_CASES = [
    (async_lookup, True),
    (functools.partial(async_lookup, code="x"), True),
    (functools.partial(sync_lookup, code="x"), False),
    (AsyncCallable(), True),
    (AsyncMethods().lookup, True),
    (sync_lookup, False),
    (sync_returning_awaitable, False),  # handled by the runner at call time
]


@pytest.mark.parametrize(("fn", "is_async"), ASYNC_CASES, ids=repr)
def test_async_is_detected(fn: Any, is_async: bool) -> None:
    t = tool(fn, name="f")
    assert t.is_async is is_async
    result = t.fn(**({} if t.fixed else {"code": "x"}))
    if inspect.isawaitable(result):
        result = asyncio.run(_awaited(result))
    assert result == {"code": "x"}


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def test_async_tool_runs() -> None:
    t = tool(async_lookup)
    assert t.output_schema == {"type": "object"}
    assert asyncio.run(t.fn(code="EMEA")) == {"code": "EMEA"}


ASYNC_GENS = [async_gen, functools.partial(async_gen, n=1)]


@pytest.mark.parametrize("fn", ASYNC_GENS, ids=repr)
def test_async_generator_is_refused(fn: Any) -> None:
    with pytest.raises(TypeError, match="async generator"):
        tool(fn, name="g")


def test_awaitable_return_hint_is_unwrapped() -> None:
    def f() -> collections.abc.Awaitable[int]:
        return async_lookup("x")  # type: ignore[return-value]

    t = tool(f)
    assert t.output_schema == {"type": "integer"}
    assert t.descriptor()["_meta"]["python"]["returns"] == "int"


# ---------------------------------------------------------------------------------------------
# Returns

RETURNS = [
    (int, {"type": "integer"}, "int"),
    (list[dict], {"type": "array", "items": {"type": "object"}}, "list[dict]"),
    (None, None, "None"),
    (Any, None, "Any"),
    (inspect.Parameter.empty, None, None),
]


@pytest.mark.parametrize(("hint", "schema", "text"), RETURNS, ids=repr)
def test_return_annotation(hint: Any, schema: Any, text: Any) -> None:
    def f():  # noqa: ANN202
        pass

    if hint is not inspect.Parameter.empty:
        f.__annotations__ = {"return": hint}
    t = tool(f)
    assert t.output_schema == schema
    d = t.descriptor()
    assert ("outputSchema" in d) == (schema is not None)
    assert d["_meta"]["python"].get("returns") == text


# ---------------------------------------------------------------------------------------------
# pydantic, dataclasses and enums: schemas and conversion


def place(order: Order, priority: int = 0) -> Order:
    """Place an order.

    Args:
        order: What to order.
    """
    assert isinstance(order, Order)
    return order


def test_pydantic_model_parameter() -> None:
    t = tool(place)
    schema = t.input_schema
    item_schema = Item.model_json_schema()
    assert schema["$defs"] == {"Item": item_schema}
    order_schema = Order.model_json_schema()
    del order_schema["$defs"]
    order_schema["description"] = "What to order."
    assert schema["properties"]["order"] == order_schema
    assert schema["required"] == ["order"]
    # The argument arrives as JSON and the function gets the model; the result goes back as JSON.
    assert t.fn(order={"items": [{"sku": "a"}]}) == {
        "items": [{"sku": "a", "qty": 1}],
        "note": None,
    }
    with pytest.raises(ToolError):
        t.fn(order={"items": "nope"})


def test_pydantic_model_as_input_schema() -> None:
    seen = {}

    def call(**args: Any) -> str:
        seen.update(args)
        return "ok"

    t = tool(
        call,
        name="make_order",
        description="Make an order.",
        input_schema=Order,
        validates_input=True,
    )
    assert t.input_schema == Order.model_json_schema()
    assert t.validates_input is True
    meta = t.descriptor()["_meta"]["python"]
    assert meta["params"] == [
        {"name": "items", "kind": "positional_or_keyword", "annotation": "list[Any]"},
        {
            "name": "note",
            "kind": "positional_or_keyword",
            "annotation": "str | None",
            "default": None,
        },
    ]
    assert meta["doc"] == "Make an order.\n\nArgs:\n    items\n    note: A note."
    assert t.fn(items=[]) == "ok" and seen == {"items": []}


def test_dict_input_schema_matching_the_signature() -> None:
    def f(a: int, b: str = "x") -> None:
        pass

    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"type": "string"}},
        "required": ["a"],
    }
    t = tool(f, input_schema=schema)
    assert t.input_schema == schema
    assert t.descriptor()["_meta"]["python"]["params"] == [
        {"name": "a", "kind": "positional_or_keyword", "annotation": "int"},
        {"name": "b", "kind": "positional_or_keyword", "annotation": "str", "default": "x"},
    ]
    schema["properties"].clear()  # the tool keeps its own copy
    assert t.input_schema["properties"]


INPUT_SCHEMA_REFUSED = [
    {"type": "object", "properties": {"a": {}, "zzz": {}}, "required": ["a"]},  # f has no zzz
    {"type": "object", "properties": {"a": {}, "b": {}}},  # f requires a
    {"type": "array"},
    {"$ref": "#/$defs/Missing"},
    {"type": "object", "properties": [], "required": []},
    {"type": "object", "properties": {"a": {}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": True},
]


@pytest.mark.parametrize("schema", INPUT_SCHEMA_REFUSED, ids=repr)
def test_input_schema_the_function_cannot_take_is_refused(schema: dict) -> None:
    def f(a: int, b: str = "x") -> None:
        pass

    with pytest.raises((TypeError, ValueError)):
        tool(f, input_schema=schema)


def test_recursive_pydantic_model_as_input_schema_and_as_parameter() -> None:
    t = tool(lambda **kw: kw, name="tree", input_schema=Node)
    assert t.input_schema == Node.model_json_schema()
    assert "$ref" in t.input_schema  # the root names its schema in $defs
    assert [p["name"] for p in t.descriptor()["_meta"]["python"]["params"]] == [
        "value",
        "children",
    ]

    def walk(root: Node) -> int:
        return root.value + sum(walk(c) for c in root.children)

    w = tool(walk)
    assert w.input_schema["properties"]["root"] == {"$ref": "#/$defs/Node"}
    assert set(w.input_schema["$defs"]) == {"Node"}
    assert w.fn(root={"value": 1, "children": [{"value": 2}]}) == 3


def test_input_schema_without_type_but_with_properties() -> None:
    t = tool(
        lambda a: a,
        name="f",
        input_schema={"properties": {"a": {"type": "integer"}}, "required": ["a"]},
    )
    assert t.descriptor()["_meta"]["python"]["params"] == [
        {"name": "a", "kind": "positional_or_keyword", "annotation": "int"}
    ]


PROPERTY_NAMES = [
    ("query", True),
    ("match", True),
    ("_x1", True),
    ("not-an-identifier", False),
    ("class", False),
    ("caf\u00e9", False),  # an identifier, but not ASCII
    ("1st", False),
    ("", False),
]


@pytest.mark.parametrize(("name", "ok"), PROPERTY_NAMES)
def test_property_names_must_be_identifiers(name: str, ok: bool) -> None:
    def g(**kw: Any) -> None:
        pass

    schema = {"type": "object", "properties": {name: {"type": "string"}}}
    if ok:
        assert list(tool(g, input_schema=schema).input_schema["properties"]) == [name]
    else:
        with pytest.raises(ValueError):
            tool(g, input_schema=schema)


def test_input_schema_of_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError):
        tool(lookup_region.fn, input_schema="{}")


def test_dataclass_enum_and_tuple_arguments_are_converted() -> None:
    def f(p: Pt, c: Color, pair: tuple[int, int], maybe: Optional[Pt] = None) -> tuple[Pt, Color]:
        assert isinstance(p, Pt) and isinstance(c, Color) and isinstance(pair, tuple)
        assert maybe is None or isinstance(maybe, Pt)
        return (p, c)

    t = tool(f)
    assert t.fn(p={"x": 1}, c="blue", pair=[1, 2]) == [{"x": 1, "y": 0, "tags": []}, "blue"]
    assert t.fn(p={"x": 1}, c="red", pair=[1, 2], maybe={"x": 2})[1] == "red"
    # Host code calling the tool directly passes Python objects through untouched.
    assert t(Pt(1), Color.RED, (1, 2)) == (Pt(1), Color.RED)


def test_recursive_dataclass_is_refused() -> None:
    @dataclasses.dataclass
    class Node:
        value: int
        children: list[Node]

    def f(n: Node) -> None:
        pass

    f.__annotations__ = {"n": Node}  # resolved by hand: Node is local
    Node.__annotations__ = {"value": int, "children": list[Node]}
    with pytest.raises(TypeError, match="recursive"):
        tool(f)


def test_unresolvable_hint_is_refused() -> None:
    def f(x: "Missing") -> None:  # noqa: F821
        pass

    with pytest.raises(TypeError):
        tool(f)
    # With the schema given, the hints are not needed.
    t = tool(f, input_schema={"type": "object", "properties": {"x": {}}, "required": ["x"]})
    assert t.descriptor()["_meta"]["python"]["params"] == [
        {"name": "x", "kind": "positional_or_keyword"}
    ]


# ---------------------------------------------------------------------------------------------
# _meta.python


def test_meta_python_contents() -> None:
    def search(
        query: str,
        /,
        tags: list[str] | None = None,
        *,
        mode: Literal["fast", "exact"] = "fast",
        limits: dict[str, int] | None = None,
        **extra: Any,
    ) -> list[dict]:
        """Search.

        Args:
            query: Words.
        """
        return []

    meta = tool(search).descriptor()["_meta"]
    assert meta == {
        "python": {
            "params": [
                {"name": "query", "kind": "positional_only", "annotation": "str"},
                {
                    "name": "tags",
                    "kind": "positional_or_keyword",
                    "annotation": "list[str] | None",
                    "default": None,
                },
                {
                    "name": "mode",
                    "kind": "keyword_only",
                    "annotation": "Literal['fast', 'exact']",
                    "default": "fast",
                },
                {
                    "name": "limits",
                    "kind": "keyword_only",
                    "annotation": "dict[str, int] | None",
                    "default": None,
                },
                {"name": "extra", "kind": "var_keyword", "annotation": "Any"},
            ],
            "returns": "list[dict]",
            "doc": "Search.\n\nArgs:\n    query: Words.",
        }
    }


# ---------------------------------------------------------------------------------------------
# as_tools, check_schema, ToolCall and the exceptions


def other_lookup(code: str) -> dict:
    return {}


def test_as_tools_normalises() -> None:
    tools = _tools.as_tools(
        [
            lookup_region,
            other_lookup,
            functools.partial(orders_for, user_id=1, api_key="k", conn=None),
        ]
    )
    assert [t.name for t in tools] == ["lookup_region", "other_lookup", "orders_for"]
    assert tools[0] is lookup_region
    assert all(isinstance(t, Tool) for t in tools)
    assert _tools.as_tools(iter([])) == []


def test_as_tools_refuses_two_tools_with_one_name() -> None:
    with pytest.raises(ValueError, match="'lookup_region'"):
        _tools.as_tools([lookup_region, tool(other_lookup, name="lookup_region")])
    with pytest.raises(ValueError):
        _tools.as_tools([lookup_region, lookup_region])


@pytest.mark.parametrize("bad", [lookup_region, "lookup_region", {"a": lookup_region}, 3], ids=repr)
def test_as_tools_wants_a_list(bad: Any) -> None:
    with pytest.raises(TypeError):
        _tools.as_tools(bad)


def test_check_schema_hook_gets_the_final_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(_build, "check_schema", lambda s, v: calls.append((s, v)))
    t = tool(lookup_region.fn, validates_input=True)
    assert calls == [(t.input_schema, True)]

    def refuse(schema: dict, validates_input: bool) -> None:
        raise ValueError("unsupported keyword")

    monkeypatch.setattr(_build, "check_schema", refuse)
    with pytest.raises(ValueError):
        tool(lookup_region.fn)


def test_check_schema_without_the_extension_is_a_no_op() -> None:
    try:
        import wasi_python._wasi_python  # noqa: F401
    except ImportError:
        _build.check_schema({"type": "object", "properties": {}}, False)
    else:
        pytest.skip("the extension is built: its checker runs instead")


def test_tool_call_is_frozen() -> None:
    call = ToolCall(seq=3, tool="lookup_region", arguments={"code": "EMEA"}, request_bytes=57)
    assert (call.seq, call.tool, call.arguments, call.request_bytes) == (
        3,
        "lookup_region",
        {"code": "EMEA"},
        57,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.seq = 4  # type: ignore[misc]
    assert not hasattr(call, "__dict__")


def test_exception_hierarchy() -> None:
    assert issubclass(ToolError, Exception)
    assert issubclass(ToolDenied, ToolError)
    assert issubclass(ToolTimeout, ToolError) and issubclass(ToolTimeout, TimeoutError)
    assert str(ToolDenied("not yours")) == "not yours"


def test_public_module() -> None:
    import wasi_python.tools as public

    assert sorted(public.__all__) == sorted(
        ["Tool", "ToolCall", "ToolDenied", "ToolError", "ToolOutcome", "ToolRecord", "ToolTimeout", "stubs", "tool"]
    )
    for name in public.__all__:
        if name not in ("ToolOutcome", "ToolRecord"):  # the record lives in _records
            assert getattr(public, name) is getattr(_tools, name)


def test_a_none_return_reads_as_written() -> None:
    def f(x: int) -> None:
        """Do."""

    assert str(tool(f).signature) == "(x: int) -> None"


def _scaled(x: int, factor: int = 2) -> int:
    """Scale a number.

    Args:
        x: The number.
    """
    return x * factor


def test_a_tool_pickles_as_its_function_and_options() -> None:
    import pickle

    t = tool(functools.partial(_scaled, factor=3), name="scaled", read_only=True, timeout_s=2.0)
    back = pickle.loads(pickle.dumps(t))
    assert back.descriptor() == t.descriptor() and back.input_schema == t.input_schema
    assert (back.name, back.timeout_s, back.fixed, back(4)) == ("scaled", 2.0, ("factor",), 12)


def test_a_forwarding_tool_has_the_face_of_the_original() -> None:
    import pickle

    from wasi_python import _tools

    t = tool(functools.partial(_scaled, factor=3), name="scaled", timeout_s=2.0)
    calls: list[dict[str, Any]] = []

    async def elsewhere(**arguments: Any) -> str:
        calls.append(arguments)
        return "sent"

    f = _tools.forwarding(_tools.face(t), elsewhere)
    assert f.descriptor() == t.descriptor() and f.input_schema == t.input_schema and f.is_async
    assert (f.name, f.timeout_s, f.fixed, f.validates_input) == ("scaled", 2.0, ("factor",), False)
    assert asyncio.run(f.fn(x=1)) == "sent" and calls == [{"x": 1}]
    again = pickle.loads(pickle.dumps(_tools.forwarding(_tools.face(t), len)))
    assert again.descriptor() == t.descriptor() and again.fn is len
