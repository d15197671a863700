"""Call frames: their exact bytes, binding, argument encoding and local refusals."""

import decimal
import enum
import fractions
import json

import pytest
from guest_fakes import FakeHost, echo_all, tool

F = tool(
    "f",
    "Do f.",
    {
        "a": {"type": "integer", "description": "an int"},
        "b": {"enum": ["x", "y"]},
        "c": {"type": "number", "default": 2.5},
        "d": {
            "anyOf": [{"type": "string", "contentEncoding": "base64"}, {"type": "null"}]
        },
    },
    required=["a"],
)
ECHO = tool("echo", "Echo.", {"x": {}}, required=["x"])
SEND = tool("send", "Send.", {"value": {}}, required=["value"])
META = tool(
    "lookup",
    "Look up.",
    {
        "code": {"type": "string"},
        "limit": {"type": "integer"},
        "tag": {"type": "string"},
    },
    required=["code"],
    meta={
        "params": [
            {"name": "code", "kind": "positional_only", "annotation": "str"},
            {
                "name": "limit",
                "kind": "positional_or_keyword",
                "annotation": "int",
                "default": 10,
            },
            {
                "name": "tag",
                "kind": "keyword_only",
                "annotation": "str | None",
                "default": None,
            },
        ],
        "returns": "dict",
        "doc": "Look up.",
    },
)
OPEN = {"name": "kw"}  # no schema: (**kwargs)
EMPTY = {"name": "empty", "inputSchema": {"type": "object"}}  # no properties: ()


@pytest.fixture
def setup(guest):
    fake = FakeHost(
        tools=[F, ECHO, SEND, META, OPEN, EMPTY],
        handlers={n: echo_all for n in ("f", "echo", "send", "lookup", "kw", "empty")},
    )
    guest(fake)
    from host import tools

    return fake, tools


def test_captured_frames_byte_for_byte(setup):
    fake, tools = setup
    assert tools.f(1, b=b"y", d=b"\x00\xff") == {"a": 1, "b": b"y", "d": b"\x00\xff"}
    tools.f(10**20)
    assert fake.frames == [
        b'{"v":1,"id":1,"op":"list"}',
        b'{"v":1,"id":2,"op":"call","tool":"f","args":{"a":1,"b":{"$bytes":"eQ=="},"d":{"$bytes":"AP8="}}}',
        b'{"v":1,"id":3,"op":"call","tool":"f","args":{"a":100000000000000000000}}',
    ]


def test_frame_is_exactly_what_json_dumps_gives(setup):
    fake, tools = setup
    value = {"é": "ü ☃ 𝄞", "list": [1, 2.5, True, None, "\u2028"], "q": 'say "hi"\n\\'}
    tools.echo(value)
    expected = json.dumps(
        {"v": 1, "id": 2, "op": "call", "tool": "echo", "args": {"x": value}},
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    ).encode("utf-8")
    assert fake.frames[-1] == expected
    assert "é".encode() in fake.frames[-1] and b"\\u" not in fake.frames[-1]


def test_ids_grow_by_one_per_frame(setup):
    fake, tools = setup
    for _ in range(3):
        tools.echo(1)
    assert [r["id"] for r in fake.requests()] == [1, 2, 3, 4]


def test_only_passed_arguments_are_sent_in_parameter_order(setup):
    fake, tools = setup
    tools.f(d=None, a=1)
    tools.f(a=1)
    tools.lookup("EMEA", tag="t")
    tools.lookup("EMEA", 3)
    tools.kw(z=1, a=2)
    tools.empty()
    assert [f.split(b'"args":', 1)[1] for f in fake.frames[1:]] == [
        b'{"a":1,"d":null}}',
        b'{"a":1}}',
        b'{"code":"EMEA","tag":"t"}}',
        b'{"code":"EMEA","limit":3}}',
        b'{"z":1,"a":2}}',
        b"{}}",
    ]


BIND_ERRORS = [
    # tool, args, kwargs, message
    ("f", (), {}, "f(): missing a required argument: 'a'"),
    ("f", (1, "x", 2.0, None, 5), {}, "f(): too many positional arguments"),
    ("f", (1,), {"a": 2}, "f(): multiple values for argument 'a'"),
    ("f", (1,), {"e": 2}, "f(): got an unexpected keyword argument 'e'"),
    (
        "lookup",
        (),
        {"code": "x"},
        "lookup(): 'code' parameter is positional only, but was passed as a keyword",
    ),
    ("lookup", ("x", 1, None), {}, "lookup(): too many positional arguments"),
    ("lookup", (), {}, "lookup(): missing a required argument: 'code'"),
    ("kw", (1,), {}, "kw(): too many positional arguments"),
    ("empty", (), {"x": 1}, "empty(): got an unexpected keyword argument 'x'"),
    ("empty", (1,), {}, "empty(): too many positional arguments"),
]


@pytest.mark.parametrize("name, args, kwargs, message", BIND_ERRORS)
def test_signature_mismatch_is_refused_locally(setup, name, args, kwargs, message):
    fake, tools = setup
    import host

    with pytest.raises(host.ToolArgumentError) as info:
        getattr(tools, name)(*args, **kwargs)
    assert str(info.value) == message
    assert info.value.kind == "invalid_arguments"
    assert isinstance(info.value, TypeError)
    assert len(fake.frames) == 1
    assert tools.echo(1) == {"x": 1}  # the guest runs on, and no id was used
    assert fake.requests()[-1]["id"] == 2


class Color(enum.IntEnum):
    RED = 3


class Ratio(float):
    pass


class Matrix:
    def tolist(self):
        return [[1]]


class Frame:
    def to_dict(self):
        return {}


class MyDict(dict):
    pass


SENT = [
    # value, what crosses
    (None, None),
    (True, True),
    ("s", "s"),
    (-(10**63) + 1, -(10**63) + 1),
    (10**64 - 1, 10**64 - 1),
    (1.5, 1.5),
    (-0.0, -0.0),
    (b"", {"$bytes": ""}),
    (bytearray(b"\x01\x02"), {"$bytes": "AQI="}),
    (memoryview(b"abc"), {"$bytes": "YWJj"}),
    (memoryview(b"abcdef")[::2], {"$bytes": "YWNl"}),  # not contiguous
    ((1, (2, 3)), [1, [2, 3]]),
    ([b"\x00"], [{"$bytes": "AA=="}]),
    ({"k": (1,)}, {"k": [1]}),
    (MyDict(a=1), {"a": 1}),
    (Color.RED, 3),
    (Ratio(0.5), 0.5),
    (fractions.Fraction(1, 4), 0.25),
    (
        {"$bytesx": 1, "nested": {"a": b"z"}},
        {"$bytesx": 1, "nested": {"a": {"$bytes": "eg=="}}},
    ),
]


@pytest.mark.parametrize("value, wire", SENT)
def test_values_that_cross(setup, value, wire):
    fake, tools = setup
    tools.send(value)
    assert fake.requests()[-1]["args"] == {"value": wire}


def test_float_crosses_exactly(setup):
    fake, tools = setup
    tools.send(0.1)
    assert fake.frames[-1].endswith(b'"args":{"value":0.1}}')


def nested(levels, leaf=1):
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def depth(value):
    if isinstance(value, (list, dict)):
        children = value.values() if isinstance(value, dict) else value
        return 1 + max((depth(c) for c in children), default=0)
    return 0


def test_nesting_up_to_62_levels_crosses_and_the_frame_stays_within_64(setup):
    fake, tools = setup
    tools.send(nested(62))
    tools.send(nested(61, b"x"))  # the "$bytes" object is the 62nd level
    tools.send(nested(61, {"a": 1}))
    for frame in fake.frames[1:]:
        assert depth(json.loads(frame)["args"]["value"]) == 62
        assert depth(json.loads(frame)) == 64


def circular():
    x = []
    x.append(x)
    return x


def surrogate_key():
    return {"ok": 1, "\udfff": 2}


REFUSED = [
    # value, part of the message after "send(): argument 'value'"
    (float("nan"), " is nan; only finite numbers cross"),
    (float("inf"), " is inf; only finite numbers cross"),
    (float("-inf"), " is -inf; only finite numbers cross"),
    ([1, {"p": float("nan")}], "[1]['p'] is nan; only finite numbers cross"),
    (10**64, " is out of range"),
    (-(10**63), " is out of range"),
    ([10**70], "[0] is out of range"),
    (
        Color,
        " is of type EnumType" if hasattr(enum, "EnumType") else " is of type EnumMeta",
    ),
    (nested(63), " is nested deeper than 62 levels"),
    (nested(62, b"x"), " is nested deeper than 62 levels"),
    (nested(62, {}), " is nested deeper than 62 levels"),
    (circular(), " is nested deeper than 62 levels"),
    ({1: "a"}, " has a key of type int; dict keys must be str"),
    ({("t",): 1}, " has a key of type tuple"),
    ({"a": {None: 1}}, "['a'] has a key of type NoneType"),
    ({"$bytes": "AA=="}, ' has the key "$bytes"'),
    ([{"$bytes": "AA==", "x": 1}], '[0] has the key "$bytes"'),
    ("\ud800", " holds a lone surrogate; only valid Unicode crosses"),
    (["ok", "a\udc80b"], "[1] holds a lone surrogate"),
    (surrogate_key(), " (the key '\\udfff') holds a lone surrogate"),
    (Matrix(), " is of type Matrix, which does not cross; call .tolist() first"),
    (Frame(), " is of type Frame, which does not cross; call .to_dict() first"),
    (
        decimal.Decimal("1.5"),
        " is of type Decimal, which does not cross; pass None, bool",
    ),
    (object(), " is of type object, which does not cross"),
    ({1, 2}, " is of type set"),
    (complex(1, 2), " is of type complex"),
]


@pytest.mark.parametrize("value, message", REFUSED)
def test_values_refused_locally_without_sending(setup, value, message):
    fake, tools = setup
    import host

    with pytest.raises(host.ToolArgumentError) as info:
        tools.send(value)
    assert str(info.value).startswith("send(): argument 'value'" + message)
    assert info.value.kind == "invalid_arguments"
    assert len(fake.frames) == 1
    tools.send(1)  # the guest runs on; the refused call used no id
    assert fake.requests()[-1]["id"] == 2


def test_refusal_names_the_argument(setup):
    fake, tools = setup
    import host

    with pytest.raises(host.ToolArgumentError) as info:
        tools.f(1, c=float("nan"))
    assert str(info.value) == "f(): argument 'c' is nan; only finite numbers cross"


def test_lone_surrogate_in_a_keyword_name(setup):
    fake, tools = setup
    import host

    with pytest.raises(host.ToolArgumentError) as info:
        tools.kw(**{"\ud800": 1})
    assert "lone surrogate" in str(info.value)
    assert len(fake.frames) == 1


def test_released_memoryview_is_refused(setup):
    fake, tools = setup
    import host

    view = memoryview(b"abc")
    view.release()
    with pytest.raises(host.ToolArgumentError):
        tools.send(view)
    assert len(fake.frames) == 1


def test_callers_values_are_not_modified(setup):
    fake, tools = setup
    value = {"a": (1, b"x"), "b": [bytearray(b"y")]}
    tools.send(value)
    assert value == {"a": (1, b"x"), "b": [bytearray(b"y")]}


def test_the_wrapped_host_function_calls_too(setup):
    fake, tools = setup
    assert tools.echo.__wrapped__(x=2) == {"x": 2}
    assert repr(tools.echo.__wrapped__) == "<host function echo>"
