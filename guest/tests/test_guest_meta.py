"""The host's "_meta": {"python": ...} format in full: "optional", var_keyword,
positional-only, and a round trip of real descriptors made by the host side
(python/wasi_python/_tools.py)."""

import functools
import importlib.util
import inspect
import sys
from typing import Literal, Optional

import pytest
from guest_fakes import GUEST, FakeHost, echo_all, modules_loaded, tool

HOST_TOOLS = GUEST.parent / "python" / "wasi_python" / "_tools.py"


def args_sent(fake):
    """The args of every call frame, as sent (bytes after '"args":')."""
    return [f.split(b'"args":', 1)[1][:-1] for f in fake.frames if b'"op":"call"' in f]


def load(guest, *descriptors):
    fake = FakeHost(
        tools=list(descriptors), handlers={d["name"]: echo_all for d in descriptors}
    )
    host = guest(fake)
    from host import tools

    return host, fake, tools


# ------------------------------------------------------------------- "optional"

OPTIONAL = tool(
    "find",
    "Find.",
    {"q": {"type": "string"}, "since": {"type": "string"}, "n": {"type": "integer"}},
    required=["q"],
    meta={
        "params": [
            {"name": "q", "kind": "positional_or_keyword", "annotation": "str"},
            {
                "name": "since",
                "kind": "positional_or_keyword",
                "annotation": "str",
                "optional": True,
            },
            {"name": "n", "kind": "keyword_only", "optional": True},
        ],
        "returns": "list[str]",
        "doc": "Find.",
    },
)


def test_optional_shows_ellipsis_and_is_not_sent(guest):
    _host, fake, tools = load(guest, OPTIONAL)
    assert str(inspect.signature(tools.find)) == (
        "(q: str, since: str = ..., *, n=...) -> list[str]"
    )
    assert tools.find("x") == {"q": "x"}
    tools.find("x", "2024")
    tools.find(n=3, q="x")
    tools.find("x", since=None)  # passed, so sent, even as None
    assert args_sent(fake) == [
        b'{"q":"x"}',
        b'{"q":"x","since":"2024"}',
        b'{"q":"x","n":3}',
        b'{"q":"x","since":null}',
    ]


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {}, "find(): missing a required argument: 'q'"),
        (("x", "y", 3), {}, "find(): too many positional arguments"),
        ((), {"since": "y"}, "find(): missing a required argument: 'q'"),
        (("x",), {"m": 1}, "find(): got an unexpected keyword argument 'm'"),
    ],
)
def test_optional_binding_errors(guest, args, kwargs, message):
    host, fake, tools = load(guest, OPTIONAL)
    with pytest.raises(host.ToolArgumentError) as info:
        tools.find(*args, **kwargs)
    assert str(info.value) == message
    assert args_sent(fake) == []


def test_optional_false_means_required(guest):
    d = tool("g", "", {}, meta={"params": [], "doc": ""})
    d["_meta"]["python"]["params"] = [
        {"name": "a", "kind": "positional_or_keyword", "optional": False}
    ]
    host, _fake, tools = load(guest, d)
    assert str(inspect.signature(tools.g)) == "(a)"
    with pytest.raises(host.ToolArgumentError):
        tools.g()


def test_a_default_wins_over_optional(guest):
    d = tool("g", "", {}, meta={"doc": ""})
    d["_meta"]["python"]["params"] = [
        {"name": "a", "kind": "positional_or_keyword", "default": 2, "optional": True}
    ]
    _host, _fake, tools = load(guest, d)
    assert str(inspect.signature(tools.g)) == "(a=2)"


# ---------------------------------------------------------------- var_keyword

TAG = tool(
    "tag",
    "Tag.",
    {"item": {"type": "string"}},
    required=["item"],
    meta={
        "params": [
            {"name": "item", "kind": "positional_or_keyword", "annotation": "str"},
            {"name": "force", "kind": "keyword_only", "default": False},
            {"name": "labels", "kind": "var_keyword", "annotation": "str"},
        ],
        "returns": "None",
        "doc": "Tag it.",
    },
)


def test_var_keyword_signature(guest):
    _host, _fake, tools = load(guest, TAG)
    sig = inspect.signature(tools.tag)
    assert str(sig) == "(item: str, *, force=False, **labels: str) -> None"
    assert sig.parameters["labels"].kind is inspect.Parameter.VAR_KEYWORD
    assert repr(sig.parameters["labels"].annotation) == "str"


def test_var_keyword_without_annotation(guest):
    d = tool("g", "", {}, meta={"doc": ""})
    d["_meta"]["python"]["params"] = [{"name": "kw", "kind": "var_keyword"}]
    _host, _fake, tools = load(guest, d)
    assert str(inspect.signature(tools.g)) == "(**kw)"
    assert tools.g(a=1, b=2) == {"a": 1, "b": 2}


def test_var_keyword_sends_extra_keywords_after_the_parameters(guest):
    _host, fake, tools = load(guest, TAG)
    assert tools.tag("box", color="red", size="L") == {
        "item": "box",
        "color": "red",
        "size": "L",
    }
    tools.tag(size="L", force=True, item="box", color="red")
    tools.tag(item="box")
    tools.tag("box", labels="x")  # a key named like **labels is just an extra key
    tools.tag("box", data=b"\x00")
    assert args_sent(fake) == [
        b'{"item":"box","color":"red","size":"L"}',
        b'{"item":"box","force":true,"size":"L","color":"red"}',
        b'{"item":"box"}',
        b'{"item":"box","labels":"x"}',
        b'{"item":"box","data":{"$bytes":"AA=="}}',
    ]


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {"color": "red"}, "tag(): missing a required argument: 'item'"),
        (("a",), {"item": "b"}, "tag(): multiple values for argument 'item'"),
        (("a", True), {}, "tag(): too many positional arguments"),
        (
            ("a",),
            {"$bytes": "AA=="},
            "tag(): got the keyword argument '$bytes', which the protocol keeps for bytes",
        ),
        (
            ("a",),
            {"x": float("nan")},
            "tag(): argument 'x' is nan; only finite numbers cross",
        ),
    ],
)
def test_var_keyword_binding_errors(guest, args, kwargs, message):
    host, fake, tools = load(guest, TAG)
    with pytest.raises(host.ToolArgumentError) as info:
        tools.tag(*args, **kwargs)
    assert str(info.value) == message
    assert args_sent(fake) == []


# ------------------------------------------------------------- positional-only

POSONLY = tool(
    "mix",
    "",
    {},
    meta={
        "params": [
            {"name": "a", "kind": "positional_only", "annotation": "int"},
            {
                "name": "b",
                "kind": "positional_only",
                "annotation": "bytes",
                "default": {"$bytes": "AP8="},
            },
            {"name": "c", "kind": "positional_or_keyword", "default": None},
            {"name": "rest", "kind": "var_keyword"},
        ],
        "doc": "",
    },
)


def test_positional_only_signature_and_frames(guest):
    _host, fake, tools = load(guest, POSONLY)
    assert (
        str(inspect.signature(tools.mix))
        == "(a: int, b: bytes = b'\\x00\\xff', /, c=None, **rest)"
    )
    kinds = [p.kind for p in inspect.signature(tools.mix).parameters.values()]
    assert kinds[:2] == [inspect.Parameter.POSITIONAL_ONLY] * 2
    tools.mix(1)
    tools.mix(1, b"x", 3)
    tools.mix(1, c=3, z=4)
    assert args_sent(fake) == [
        b'{"a":1}',
        b'{"a":1,"b":{"$bytes":"eA=="},"c":3}',
        b'{"a":1,"c":3,"z":4}',
    ]


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        # With **rest, Python would put these keywords in rest; the frame could not
        # tell them from the positional-only arguments, so they are refused.
        (
            (),
            {"a": 1},
            "mix(): 'a' parameter is positional only, but was passed as a keyword",
        ),
        (
            (1,),
            {"b": b"x"},
            "mix(): 'b' parameter is positional only, but was passed as a keyword",
        ),
        (
            (1,),
            {"a": 2},
            (
                "mix(): got 'a' both as a positional-only argument and as a keyword; "
                "a tool call cannot carry both"
            ),
        ),
        ((), {"c": 1}, "mix(): missing a required argument: 'a'"),
    ],
)
def test_positional_only_binding_errors(guest, args, kwargs, message):
    host, fake, tools = load(guest, POSONLY)
    with pytest.raises(host.ToolArgumentError) as info:
        tools.mix(*args, **kwargs)
    assert str(info.value) == message
    assert args_sent(fake) == []


def test_positional_only_without_var_keyword(guest):
    d = tool("g", "", {}, meta={"doc": ""})
    d["_meta"]["python"]["params"] = [{"name": "a", "kind": "positional_only"}]
    host, fake, tools = load(guest, d)
    assert str(inspect.signature(tools.g)) == "(a, /)"
    tools.g(5)
    assert args_sent(fake) == [b'{"a":5}']
    with pytest.raises(host.ToolArgumentError) as info:
        tools.g(a=5)
    assert "positional only" in str(info.value)


# --------------------------------------------------------------- malformed

PK = {"name": "p", "kind": "positional_or_keyword"}

BAD_PARAMS = [
    # **kwargs comes last, once, and without a default
    [{"name": "kw", "kind": "var_keyword"}, PK],
    [{"name": "kw", "kind": "var_keyword"}, {"name": "kx", "kind": "var_keyword"}],
    [{"name": "kw", "kind": "var_keyword", "default": {}}],
    # "optional" is a boolean, and an optional positional is followed by defaults only
    [{**PK, "optional": "yes"}],
    [{**PK, "optional": 1}],
    [{**PK, "optional": True}, {"name": "q", "kind": "positional_or_keyword"}],
    [{"name": "kw", "kind": "VAR_KEYWORD"}],
]


@pytest.mark.parametrize("params", BAD_PARAMS)
def test_malformed_params_fall_back_to_the_schema(guest, params):
    d = tool("f", "Do f.", {"n": {"type": "integer"}}, required=["n"])
    d["_meta"] = {"python": {"params": params, "doc": "Meta doc."}}
    _host, _fake, tools = load(guest, d)
    assert str(inspect.signature(tools.f)) == "(n: int)"
    assert tools.f.__doc__ == "Do f.\n\nArgs:\n    n"


def test_optional_keyword_only_may_precede_a_required_one(guest):
    d = tool("g", "", {}, meta={"doc": ""})
    d["_meta"]["python"]["params"] = [
        {"name": "a", "kind": "keyword_only", "optional": True},
        {"name": "b", "kind": "keyword_only"},
    ]
    _host, _fake, tools = load(guest, d)
    assert str(inspect.signature(tools.g)) == "(*, a=..., b)"


# ------------------------------------------------------ the fast path stays fast



def test_new_kinds_load_no_introspection():
    descriptor = tool(
        "f",
        "F.",
        {},
        meta={
            "params": [
                {"name": "a", "kind": "positional_only", "annotation": "int"},
                {"name": "b", "kind": "positional_or_keyword", "optional": True},
                {"name": "x", "kind": "keyword_only", "optional": True},
                {"name": "kw", "kind": "var_keyword", "annotation": "Any"},
            ],
            "doc": "F.",
        },
    )
    loaded = modules_loaded(descriptor, 'tools.f(1, 2, x=[1, b"x"], extra={"k": 2.5})\ntools.f(1)')
    assert "host.tools" in loaded
    for heavy in ("inspect", "numbers", "typing", "host._lazy"):
        assert heavy not in loaded


# ------------------------------------------- real descriptors from the host side
#
# The host's python/wasi_python/_tools.py is loaded by path, inside a stand-in package
# over its folder (so its relative imports of the pure-Python modules resolve, and the
# package's __init__, which needs the compiled extension, never runs), and its tool()
# makes the descriptors the guest then reads.


@pytest.fixture(scope="module")
def host_tools():
    import types

    package = "wasi_python_under_test"
    stand_in = types.ModuleType(package)
    stand_in.__path__ = [str(HOST_TOOLS.parent)]
    name = f"{package}._tools"
    spec = importlib.util.spec_from_file_location(name, HOST_TOOLS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = stand_in
    sys.modules[name] = module  # its dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        for m in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[m]


def lookup_region(code: str) -> dict:
    """Look up a sales region by its code.

    Args:
        code: The region code, such as "EMEA".

    Returns:
        The region's record.
    """
    return {}


def my_orders(limit: int = 10) -> list[dict]:
    """This user's latest orders, newest first."""
    return []


def search(query: str, region: str = "eu", *, max_hits: int = 5) -> list[str]:
    """Search the catalogue.

    Args:
        query: What to find.
        region: Where to look.
        max_hits: How many hits at most.
    """
    return []


def tag(item: str, **labels: str) -> None:
    """Tag an item with labels."""


def mixed(
    a: int,
    b: bytes = b"\x00\xff",
    /,
    c: Optional[str] = None,  # noqa: UP045 (the spelling under test)
    *,
    d: Literal["a", "b"] = "a",
    e: float,
) -> bytes:
    """Positional-only, keyword-only, Optional, Literal and bytes."""
    return b""


def untyped(x, y=2.5, *, z=None):
    pass


ROUND_TRIP = [
    lookup_region,
    my_orders,
    functools.partial(search, region="us"),
    tag,
    mixed,
    untyped,
]


def expected_text(host_tool, fn):
    """str(inspect.signature(fn)) without the keywords a partial fixes.

    One spelling differs by design: the host publishes Optional[X] as `X | None`
    (Python 3.14 and later print it so themselves; 3.11 prints `Optional[X]`)."""
    sig = inspect.signature(fn)
    sig = sig.replace(
        parameters=[p for p in sig.parameters.values() if p.name not in host_tool.fixed]
    )
    return str(sig).replace("Optional[str]", "str | None")


def expected_doc(fn):
    if isinstance(fn, functools.partial):  # the fixed keyword's Args entry is dropped
        doc = inspect.getdoc(fn.func)
        return "\n".join(line for line in doc.splitlines() if "region:" not in line)
    return inspect.getdoc(fn) or ""  # no docstring: an empty one


@pytest.mark.parametrize(
    "fn", ROUND_TRIP, ids=lambda f: getattr(f, "__name__", "partial")
)
def test_real_host_descriptor_round_trips(guest, host_tools, fn):
    host_tool = host_tools.tool(fn)
    descriptor = host_tool.descriptor()
    _host, _fake, tools = load(guest, descriptor)
    guest_fn = getattr(tools, host_tool.name)
    assert guest_fn.__wrapped__.from_meta  # read from "_meta", not the fallback
    assert str(inspect.signature(guest_fn)) == expected_text(host_tool, fn)
    assert guest_fn.__doc__ == host_tool.doc == expected_doc(fn)


def test_the_partial_drops_its_fixed_keyword(host_tools):
    host_tool = host_tools.tool(functools.partial(search, region="us"))
    assert host_tool.fixed == ("region",)
    assert expected_text(host_tool, functools.partial(search, region="us")) == (
        "(query: str, *, max_hits: int = 5) -> list[str]"
    )


def test_real_host_descriptor_calls(guest, host_tools):
    descriptors = [host_tools.tool(f).descriptor() for f in (my_orders, tag, mixed)]
    host, fake, tools = load(guest, *descriptors)
    tools.my_orders()
    tools.my_orders(3)
    tools.tag("box", color="red")
    tools.mixed(1, e=2.5)
    tools.mixed(1, b"\x01", "c", d="b", e=0.5)
    assert args_sent(fake) == [
        b"{}",
        b'{"limit":3}',
        b'{"item":"box","color":"red"}',
        b'{"a":1,"e":2.5}',
        b'{"a":1,"b":{"$bytes":"AQ=="},"c":"c","d":"b","e":0.5}',
    ]
    with pytest.raises(host.ToolArgumentError) as info:
        tools.mixed(a=1, e=2.5)
    assert str(info.value) == (
        "mixed(): 'a' parameter is positional only, but was passed as a keyword"
    )


class Stamp:
    """A default that is not JSON: the host publishes the parameter as optional."""

    def __repr__(self):
        return "Stamp()"


def stamped(note: str, when: object = Stamp()) -> str:
    """Stamp a note."""
    return note


def test_real_host_optional_without_default(guest, host_tools):
    schema = {
        "type": "object",
        "properties": {"note": {"type": "string"}, "when": {"type": "string"}},
        "required": ["note"],
        "additionalProperties": False,
    }
    host_tool = host_tools.tool(stamped, input_schema=schema)
    params = host_tool.descriptor()["_meta"]["python"]["params"]
    assert params[1] == {
        "name": "when",
        "kind": "positional_or_keyword",
        "annotation": "object",
        "optional": True,
    }
    _host, fake, tools = load(guest, host_tool.descriptor())
    assert (
        str(inspect.signature(tools.stamped))
        == "(note: str, when: object = ...) -> str"
    )
    tools.stamped("n")
    tools.stamped("n", "today")
    assert args_sent(fake) == [b'{"note":"n"}', b'{"note":"n","when":"today"}']
