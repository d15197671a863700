"""Displays on the host side: the display frame (docs/protocol.md, "Control frames"), sent
here raw through the guest's `_host.call` so these tests hold whatever the guest package's
`host.display` does; kept in order in `Completed.displays`, decoded (`Display`), capped by
`display_bytes` (the cut said in `truncated`), malformed frames answered `bad` and counted,
never a failure of the run, never the tool door's."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import zlib

import pytest

import wasi_python
from wasi_python import Display, Session, run, run_async

# The guest's helpers: `show(bundle)` sends a display frame of a JSON object, `raw(bytes)`
# any body; both return the runtime's answer.
SEND = """
import _host, json
def raw(body):
    return _host.call(b"\\0wasi-python display " + body)
def show(obj):
    return raw(json.dumps(obj).encode())
"""


def png(width: int, height: int) -> bytes:
    """A valid grey PNG of that size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def guest(body: str, **kw):
    return run(["-c", SEND + body], deadline_s=30, **kw)


def test_a_display_is_kept_in_order_with_each_type_decoded():
    image = png(3, 2)
    bundle = {
        "data": {
            "text/plain": "<Figure 3x2>",
            "image/png": base64.b64encode(image).decode(),
            "text/html": "<b>é</b>",
            "application/json": {"a": [1, 2.5, None, True], "big": 2**64},
            "application/vnd.custom+json": [1],
            "image/svg+xml": "<svg/>",
        },
        "metadata": {"image/png": {"width": 3, "height": 2}},
    }
    done = guest(f"print(show({bundle!r}))\nprint(show({{'data': {{'text/plain': 'second'}}}}))")
    assert done.ok, done.stderr
    assert done.stdout == b"b'kept'\nb'kept'\n"
    first, second = done.displays
    assert first.data["image/png"] == image
    assert first.data["text/plain"] == "<Figure 3x2>"
    assert first.data["text/html"] == "<b>é</b>"
    assert first.data["application/json"] == {"a": [1, 2.5, None, True], "big": 2**64}
    assert first.data["application/vnd.custom+json"] == [1]
    assert first.data["image/svg+xml"] == "<svg/>"
    assert first.metadata == {"image/png": {"width": 3, "height": 2}}
    assert second == Display({"text/plain": "second"}, {})
    assert done.bad_displays == 0 and done.truncated == ()


def test_the_jupyter_form_round_trips_and_a_notebook_shows_it():
    image = png(1, 1)
    d = Display({"image/png": image, "text/plain": "x", "application/json": {"k": 1}}, {"image/png": {"width": 1}})
    j = d.to_jupyter()
    assert j == {"data": {"image/png": base64.b64encode(image).decode(), "text/plain": "x", "application/json": {"k": 1}}, "metadata": {"image/png": {"width": 1}}}
    assert Display.from_json(json.dumps(j)) == d
    assert d._repr_mimebundle_() == (j["data"], j["metadata"])


def test_base64_with_line_breaks_is_decoded():
    image = png(4, 4)
    text = base64.encodebytes(image).decode()  # lines of 76 characters
    done = guest(f"print(show({{'data': {{'image/png': {text!r}}}}}))")
    assert done.stdout == b"b'kept'\n"
    assert done.displays[0].data["image/png"] == image


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"data": {}} trailing',
        b'{"metadata": {}}',
        b'{"data": [1]}',
        b'{"data": {}, "metadata": []}',
        b'{"data": {"text/plain": 1}}',
        b'{"data": {"image/png": "not base64!"}}',
        b'{"data": {"text/plain": NaN}}',
        b'{"data": {"application/json": Infinity}}',
        b'{"data": {"text/plain": "\xff"}}',
        b'{"data": {"application/json": ' + b"[" * 100 + b"]" * 100 + b"}}",
        b'{"data": {"application/json": ' + b"9" * 5000 + b"}}",
        b'{"data": {' + b",".join(b'"text/x%d": ""' % i for i in range(300)) + b"}}",
    ],
)
def test_a_malformed_frame_is_answered_bad_counted_and_not_kept(body):
    done = guest(f"print(raw({body!r}))\nprint(show({{'data': {{'text/plain': 'after'}}}}))")
    assert done.ok, done.stderr
    assert done.stdout == b"b'bad'\nb'kept'\n"
    assert done.bad_displays == 1
    assert [d.data for d in done.displays] == [{"text/plain": "after"}]
    assert done.truncated == ()


def test_a_flood_of_displays_hits_display_bytes_and_truncated_says_so():
    # Each frame is about 1 KiB: 10 fit in 10,500 bytes; the rest are cut, in order.
    code = """
answers = [show({"data": {"text/plain": str(i).rjust(1000, ".")}}) for i in range(50)]
print(answers.count(b"kept"), answers.count(b"cut"), answers.index(b"cut"))
"""
    done = guest(code, display_bytes=10_500)
    assert done.ok, done.stderr
    assert done.stdout == b"10 40 10\n"
    assert [d.data["text/plain"].lstrip(".") for d in done.displays] == [str(i) for i in range(10)]
    assert "displays" in done.truncated
    assert "stdout" not in done.truncated


def test_a_frame_past_the_cap_is_cut_before_it_is_read_and_every_later_one_too():
    # Not JSON, but larger than the cap: cut (never read), not bad. A small one after is cut too.
    done = guest("print(raw(b'x' * 2000), show({'data': {}}))", display_bytes=1000)
    assert done.stdout == b"b'cut' b'cut'\n"
    assert done.displays == () and done.bad_displays == 0
    assert done.truncated == ("displays",)
    # display_bytes=0 keeps none.
    done = guest("print(show({'data': {}}))", display_bytes=0)
    assert done.stdout == b"b'cut'\n" and done.truncated == ("displays",)


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "1", True])
def test_display_bytes_is_checked_before_any_work(bad):
    with pytest.raises((TypeError, ValueError), match="display_bytes"):
        run(["-c", "pass"], display_bytes=bad)


def test_display_bytes_has_the_runtime_s_default():
    assert wasi_python.DEFAULTS["display_bytes"] == 16 << 20


def test_display_frames_never_reach_the_tool_door():
    from wasi_python.tools import tool

    @tool
    def ping() -> str:
        """Answers pong."""
        return "pong"

    done = guest("from host import tools\nprint(show({'data': {'text/plain': 'x'}}), tools.ping())", tools=[ping])
    assert done.ok, done.stderr
    assert done.stdout == b"b'kept' pong\n"
    assert len(done.displays) == 1
    assert [o.op for o in done.tools.outcomes] == ["list", "call"]


def test_a_session_keeps_each_turn_s_displays_with_each_turn_s_cap():
    with Session(display_bytes=100, deadline_s=30) as s:
        assert s.run(SEND).ok
        one = s.run("show({'data': {'text/plain': 'a'}}); show({'data': {'text/plain': 'b'}})")
        assert [d.data["text/plain"] for d in one.displays] == ["a", "b"]
        # The next turn starts with none, and its cap afresh.
        two = s.run("print(show({'data': {'text/plain': 'c'}}))")
        assert [d.data["text/plain"] for d in two.displays] == ["c"]
        assert two.truncated == ()
        three = s.run("print(show({'data': {'text/plain': 'x' * 200}}))")
        assert three.stdout == b"b'cut'\n" and three.truncated == ("displays",)
        # A turn's own cap.
        four = s.run("print(show({'data': {'text/plain': 'x' * 200}}))", display_bytes=1000)
        assert four.stdout == b"b'kept'\n" and len(four.displays) == 1
        assert s.run("print(1)").displays == ()


def test_run_async_returns_displays():
    done = asyncio.run(run_async(["-c", SEND + "show({'data': {'text/plain': 'x'}})"], deadline_s=30))
    assert [d.data for d in done.displays] == [{"text/plain": "x"}]


def test_a_display_from_a_snapshot_run_and_a_plain_run_without_any():
    assert run(["-c", "print(1)"]).displays == ()
    done = run(["-c", SEND + "show({'data': {'text/plain': 'x'}})"], preload=())
    assert [d.data for d in done.displays] == [{"text/plain": "x"}]


def test_a_ray_pool_takes_display_bytes_and_refuses_callbacks_by_name():
    from wasi_python.ray._keywords import RUN_KEYWORDS, SESSION_KEYWORDS, checked_keywords

    assert checked_keywords({"display_bytes": 10}, RUN_KEYWORDS, "run") == {"display_bytes": 10}
    assert "display_bytes" in SESSION_KEYWORDS
    for name in ("on_stdout", "on_stderr", "on_display"):
        with pytest.raises(TypeError, match="streaming callbacks"):
            checked_keywords({name: print}, RUN_KEYWORDS, "run")
