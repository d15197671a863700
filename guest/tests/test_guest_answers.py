"""How the guest reads a call's answer (protocol 1's `_exchange`)."""

import pytest
from guest_fakes import FakeHost, answer, dumps, tool

TOOLS = [tool("f", "F.", {"x": {}}), tool("g", "G.")]


@pytest.fixture
def run(guest):
    """run(reply) -> what tools.f(x=1) returns when the door answers `reply` (id 2)."""
    fake = FakeHost(tools=TOOLS)
    host = guest(fake)
    from host import tools

    def call(reply):
        fake.script.append(reply)
        return tools.f(x=1)

    call.host, call.tools, call.fake = host, tools, fake
    return call


VALUES = [
    # answer fields, value returned
    ({"value": 3}, 3),
    ({"value": None}, None),
    ({}, None),
    ({"value": "é"}, "é"),
    ({"value": {"$bytes": "AQA="}}, b"\x01\x00"),
    ({"value": {"$bytes": ""}}, b""),
    (
        {"value": [{"$bytes": "eQ=="}, {"k": {"$bytes": "AP8="}}]},
        [b"y", {"k": b"\x00\xff"}],
    ),
    ({"value": {"a": [[{"$bytes": "eg=="}]]}}, {"a": [[b"z"]]}),
    # Only an object that is exactly {"$bytes": "<str>"} is bytes.
    ({"value": {"$bytes": "AA==", "x": 1}}, {"$bytes": "AA==", "x": 1}),
    ({"value": {"$bytes": 5}}, {"$bytes": 5}),
    ({"value": {"$bytes": None}}, {"$bytes": None}),
    ({"value": "$bytes"}, "$bytes"),
    ({"value": {"tools": []}, "tools": []}, {"tools": []}),
]


@pytest.mark.parametrize("fields, value", VALUES)
def test_ok_answers(run, fields, value):
    assert run(answer(id=2, ok=True, **fields)) == value


def test_escaped_bytes_key_is_still_bytes(run):
    assert run(b'{"v":1,"id":2,"ok":true,"value":[{"\\u0024bytes":"AA=="}]}') == [
        b"\x00"
    ]


def test_whitespace_around_the_answer_is_json(run):
    assert run(b' \n{"v":1,"id":2,"ok":true,"value":1}\r\n\t') == 1
    assert run(b'{ "v" : 1 , "id" : 3 , "ok" : true , "value" : [ 2 ] }') == [2]


def test_null_id_is_accepted(run):
    assert run(answer(id=None, ok=True, value=1)) == 1
    assert run(b'{"v":1,"ok":true,"value":2}') == 2


PROTOCOL_ERRORS = [
    # door answer or exception, message
    (
        ConnectionRefusedError("no host is bound to the door"),
        "no host is bound to the door",
    ),
    (
        OSError("the host faulted while answering the door"),
        "the door failed: the host faulted while answering the door",
    ),
    (OSError("host door returned 9"), "the door failed: host door returned 9"),
    (b"", "f: the answer is not JSON"),
    (b"{", "f: the answer is not JSON"),
    (b'{"v":1,"id":2,"ok":true} x', "f: the answer is not JSON"),
    (b'{"v":1,"id":2,"ok":true,"value":NaN}', "f: the answer is not JSON"),
    (b'{"v":1,"id":2,"ok":true,"value":"\xff"}', "f: the answer is not JSON"),
    ('{"v":1,"id":2,"ok":true}'.encode("utf-16"), "f: the answer is not JSON"),
    (dumps(None), "f: the answer is not a protocol 1 object"),
    (dumps([]), "f: the answer is not a protocol 1 object"),
    (dumps({"id": 2, "ok": True}), "f: the answer is not a protocol 1 object"),
    (
        dumps({"v": 1.0, "id": 2, "ok": True}),
        "f: the answer is not a protocol 1 object",
    ),
    (
        dumps({"v": True, "id": 2, "ok": True}),
        "f: the answer is not a protocol 1 object",
    ),
    (dumps({"v": 2, "id": 2, "ok": True}), "f: the answer is protocol 2, not 1"),
    (dumps({"v": 0, "id": 2, "ok": True}), "f: the answer is protocol 0, not 1"),
    (answer(id=3, ok=True), "f: the answer's id does not match the call"),
    (answer(id=1, ok=True), "f: the answer's id does not match the call"),
    (answer(id="2", ok=True), "f: the answer's id does not match the call"),
    (answer(id=2.0, ok=True), "f: the answer's id does not match the call"),
    (answer(id=True, ok=True), "f: the answer's id does not match the call"),
    (answer(id=2), "f: the answer has no ok"),
    (answer(id=2, ok=1), "f: the answer has no ok"),
    (answer(id=2, ok="true"), "f: the answer has no ok"),
    (answer(id=2, ok=None), "f: the answer has no ok"),
    (
        answer(id=2, ok=True, value={"$bytes": "AA"}),
        'f: a "$bytes" value is not strict base64',
    ),
    (
        answer(id=2, ok=True, value={"$bytes": "A A="}),
        'f: a "$bytes" value is not strict base64',
    ),
    (
        answer(id=2, ok=True, value={"$bytes": "AA==\n"}),
        'f: a "$bytes" value is not strict base64',
    ),
    (
        answer(id=2, ok=True, value={"$bytes": "-_8="}),
        'f: a "$bytes" value is not strict base64',
    ),
    (
        answer(id=2, ok=True, value={"$bytes": "AA==AA=="}),
        'f: a "$bytes" value is not strict base64',
    ),
    (
        answer(id=2, ok=True, value=[{"$bytes": "é"}]),
        'f: a "$bytes" value is not strict base64',
    ),
]


@pytest.mark.parametrize("reply, message", PROTOCOL_ERRORS)
def test_protocol_errors(run, reply, message):
    with pytest.raises(run.host.ToolProtocolError) as info:
        run(reply)
    assert str(info.value) == message
    assert info.value.kind == "protocol"
    assert run(answer(id=3, ok=True, value="on")) == "on"  # the guest runs on


KINDS = [
    # error.kind, class name, .kind
    ("protocol", "ToolProtocolError", "protocol"),
    ("unknown_tool", "ToolArgumentError", "unknown_tool"),
    ("invalid_arguments", "ToolArgumentError", "invalid_arguments"),
    ("denied", "ToolDenied", "denied"),
    ("tool_error", "ToolError", "tool_error"),
    ("timeout", "ToolTimeout", "timeout"),
    ("cancelled", "ToolCancelled", "cancelled"),
    ("too_large", "ToolTooLarge", "too_large"),
    ("budget_exceeded", "ToolBudgetExceeded", "budget_exceeded"),
    ("brand_new_kind", "ToolError", "brand_new_kind"),
    ("", "ToolError", ""),
    (7, "ToolError", "tool_error"),
    (None, "ToolError", "tool_error"),
    (["denied"], "ToolError", "tool_error"),
]


@pytest.mark.parametrize("kind, cls, exc_kind", KINDS)
def test_error_kinds(run, kind, cls, exc_kind):
    with pytest.raises(run.host.ToolError) as info:
        run(answer(id=2, ok=False, error={"kind": kind, "message": "the host's words"}))
    assert type(info.value) is getattr(run.host, cls)
    assert info.value.kind == exc_kind
    assert str(info.value) == "the host's words"


@pytest.mark.parametrize(
    "error",
    [
        None,
        "boom",
        [],
        {"kind": "denied"},
        {"kind": "denied", "message": 5},
        {"kind": "denied", "message": None},
    ],
)
def test_error_without_usable_message(run, error):
    fields = {} if error is None else {"error": error}
    with pytest.raises(run.host.ToolError) as info:
        run(answer(id=2, ok=False, **fields))
    assert str(info.value) == ""
    expected = "denied" if isinstance(error, dict) else "tool_error"
    assert info.value.kind == expected


def test_builtin_bases_catch_host_errors(run):
    with pytest.raises(PermissionError):
        run(answer(id=2, ok=False, error={"kind": "denied", "message": "no"}))
    with pytest.raises(TimeoutError):
        run(
            answer(
                id=3,
                ok=False,
                error={"kind": "timeout", "message": "f timed out after 0.2 s"},
            )
        )
    with pytest.raises(TypeError):
        run(
            answer(
                id=4,
                ok=False,
                error={"kind": "unknown_tool", "message": "no tool named 'f'"},
            )
        )


def test_a_real_round_trip_of_bytes(guest):
    fake = FakeHost(
        tools=[
            tool(
                "blob",
                "Blob.",
                {"data": {"type": "string", "contentEncoding": "base64"}},
                required=["data"],
            )
        ],
        handlers={"blob": lambda data: {"back": data[::-1], "list": [data, b""]}},
    )
    guest(fake)
    from host import tools

    data = bytes(range(256))
    assert tools.blob(data) == {"back": data[::-1], "list": [data, b""]}
    assert tools.blob(bytearray(b"\x00\x01")) == {
        "back": b"\x01\x00",
        "list": [b"\x00\x01", b""],
    }


def test_the_answer_is_not_shared_between_calls(run):
    first = run(answer(id=2, ok=True, value={"a": [1]}))
    first["a"].append(2)
    assert run(answer(id=3, ok=True, value={"a": [1]})) == {"a": [1]}


# An ok answer in the host's own form ({"v":1,"id":<id>,"ok":true,"value":<value>}, as
# crates/protocol writes it) is read by decoding its value alone (`tools._quick`); an
# answer that only starts like one is read in full, as any other.
ALMOST_THE_HOSTS_FORM = [
    # reply, what the call returns or the exception it raises
    (b'{"v":1,"id":2,"ok":true,"value":[1,{"a":"\\u00e9"}]}', [1, {"a": "é"}]),
    (b'{"v":1,"id":2,"ok":true,"value":1 }', 1),
    (b'{"v":1,"id":2,"ok":true,"value":1}\n', 1),
    (b'{"v":1,"id":2,"ok":true,"value":1,"extra":2}', 1),
    (
        b'{"v":1,"id":2,"ok":true,"value":1,"ok":false,"error":{"kind":"denied","message":"no"}}',
        "ToolDenied",
    ),
    (b'{"v":1,"id":2,"ok":true,"value":1}x', "ToolProtocolError"),
    (b'{"v":1,"id":2,"ok":true,"value":"a"}}', "ToolProtocolError"),
    (b'{"v":1,"id":2,"ok":true,"value":}', "ToolProtocolError"),
    (b'{"v":1,"id":2,"ok":true,"value":Infinity}', "ToolProtocolError"),
    (b'{"v":1,"id":2,"ok":true,"value":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "ToolProtocolError"),
    (b'{"v":1,"id":22,"ok":true,"value":1}', "ToolProtocolError"),
]


@pytest.mark.parametrize("reply, expected", ALMOST_THE_HOSTS_FORM)
def test_an_answer_that_only_starts_like_the_hosts_form_is_read_in_full(run, reply, expected):
    if isinstance(expected, str):
        with pytest.raises(getattr(run.host, expected)):
            run(reply)
    else:
        assert run(reply) == expected


def test_an_ok_answer_in_the_hosts_form_is_read_without_the_full_checks(run, monkeypatch):
    import host.tools as module

    def never(*args):
        raise AssertionError("read in full")

    monkeypatch.setattr(module, "_read", never)
    assert run(b'{"v":1,"id":2,"ok":true,"value":{"$bytes":"AQA="}}') == b"\x01\x00"
    assert run(b'{"v":1,"id":3,"ok":true,"value":"x"}') == "x"
    with pytest.raises(AssertionError, match="read in full"):
        run(b'{"v":1,"id":4,"ok":true,"value":"x"} ')
