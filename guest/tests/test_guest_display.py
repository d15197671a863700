"""`from host import display`: MIME bundles by IPython's rules, the display frame, and what
happens when the host cuts, refuses or does not know the frame (a fake `_host` door)."""

import base64
import json
import sys

import pytest

HEAD = b"\0wasi-python display "


class DisplayDoor:
    """A `_host` that answers display frames with `answer` (bytes, or an exception to
    raise) and records them decoded."""

    def __init__(self, answer=b"kept"):
        self.answer = answer
        self.frames = []

    def call(self, frame):
        frame = bytes(frame)
        assert frame.startswith(HEAD), frame[:40]
        self.frames.append(json.loads(frame[len(HEAD):].decode("utf-8")))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.fixture
def shown(guest):
    """shown(answer=b"kept") -> (host.display, the door)."""

    def load(answer=b"kept"):
        door = DisplayDoor(answer)
        host = guest(door)
        return host.display, door

    return load


class Rich:
    def __repr__(self):
        return "Rich()"

    def _repr_html_(self):
        return "<b>rich</b>"

    def _repr_markdown_(self):
        return "**rich**"

    def _repr_png_(self):
        return b"\x89PNG-bytes"

    def _repr_json_(self):
        return {"a": [1, 2]}

    def _repr_svg_(self):
        return None  # None: that type is left out


def test_a_bundle_from_the_repr_methods(shown):
    display, door = shown()
    display(Rich())
    [frame] = door.frames
    assert frame == {
        "data": {
            "text/plain": "Rich()",
            "text/html": "<b>rich</b>",
            "text/markdown": "**rich**",
            "image/png": base64.b64encode(b"\x89PNG-bytes").decode(),
            "application/json": {"a": [1, 2]},
        },
        "metadata": {},
    }


def test_the_mimebundle_comes_first_and_the_methods_fill_in(shown):
    calls = []

    class Both:
        def _repr_mimebundle_(self, include=None, exclude=None):
            calls.append((include, exclude))
            return {"text/html": "<i>from bundle</i>", "image/png": b"raw"}, {"image/png": {"width": 3}}

        def _repr_html_(self):
            raise AssertionError("the bundle's html wins")

        def _repr_latex_(self):
            return "$x$"

    display, door = shown()
    display(Both())
    [frame] = door.frames
    assert calls == [(None, None)]
    assert frame["data"]["text/html"] == "<i>from bundle</i>"
    assert frame["data"]["image/png"] == base64.b64encode(b"raw").decode()
    assert frame["data"]["text/latex"] == "$x$"
    assert frame["data"]["text/plain"].startswith("<")
    assert frame["metadata"] == {"image/png": {"width": 3}}


def test_include_exclude_and_metadata(shown):
    display, door = shown()
    display(Rich(), include={"text/html", "text/plain"}, metadata={"k": 1})
    display(Rich(), exclude={"image/png", "application/json", "text/markdown"})
    first, second = door.frames
    assert set(first["data"]) == {"text/plain", "text/html"} and first["metadata"] == {"k": 1}
    assert set(second["data"]) == {"text/plain", "text/html"}


def test_raw_bundles_and_several_objects_in_order(shown):
    display, door = shown()
    display({"text/markdown": "# a"}, {"image/jpeg": b"\xff\xd8", "audio/wav": b"RIFF", "image/svg+xml": b"<svg/>"}, raw=True)
    display(1, "two")
    assert [f["data"] for f in door.frames] == [
        {"text/markdown": "# a"},
        {"image/jpeg": base64.b64encode(b"\xff\xd8").decode(), "audio/wav": base64.b64encode(b"RIFF").decode(), "image/svg+xml": "<svg/>"},
        {"text/plain": "1"},
        {"text/plain": "'two'"},
    ]
    with pytest.raises(TypeError):
        display("not a bundle", raw=True)


def test_a_failing_or_wrong_method_is_reported_and_left_out(shown, capsys):
    class Bad:
        def __repr__(self):
            return "Bad()"

        def _repr_html_(self):
            raise ValueError("no html today")

        def _repr_markdown_(self):
            return 42  # not str

        def _repr_json_(self):
            return {"x": float("nan")}  # JSON cannot carry it

    display, door = shown()
    display(Bad())
    [frame] = door.frames
    assert frame["data"] == {"text/plain": "Bad()"}
    err = capsys.readouterr().err
    assert "no html today" in err and "_repr_markdown_" in err and "_repr_json_" in err


def test_an_object_that_claims_every_name_gives_its_repr_only(shown):
    class Anything:
        def __getattr__(self, name):
            return lambda *a, **k: "<p>claimed</p>"

        def __repr__(self):
            return "Anything()"

    display, door = shown()
    display(Anything(), type)  # a class's methods want an instance: its repr only
    assert [f["data"] for f in door.frames] == [{"text/plain": "Anything()"}, {"text/plain": repr(type)}]


def test_output_is_flushed_before_the_frame(guest):
    order = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def write(self, text):
            order.append(("write", self.name))

        def flush(self):
            order.append(("flush", self.name))

    class Door(DisplayDoor):
        def call(self, frame):
            order.append(("display",))
            return super().call(frame)

    host = guest(Door())
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
    try:
        host.display(Rich())
    finally:
        sys.stdout, sys.stderr = out, err
    assert order == [("flush", "stdout"), ("flush", "stderr"), ("display",)]


@pytest.mark.parametrize("answer", [ConnectionRefusedError(), OSError("-2"), b'{"v":1,"id":null,"ok":false}'])
def test_without_a_host_that_takes_displays_the_text_is_printed(shown, capsys, answer):
    # -1 (no host bound), -2, or a tool door's error: an older host. Asked once per run.
    display, door = shown(answer)
    display(Rich())
    display({"text/plain": "raw text", "text/html": "<p>"}, raw=True)
    display({"text/html": "<p>no text</p>"}, raw=True)
    assert capsys.readouterr().out == "Rich()\nraw text\n"
    assert len(door.frames) == 1


def test_cut_stops_sending_for_the_run_and_bad_prints_the_text(shown, capsys, guest):
    display, door = shown(b"cut")
    display(Rich())
    display(Rich())
    assert len(door.frames) == 1 and capsys.readouterr().out == ""
    sys.modules["host._display"].begin()  # the next run or turn sends again
    display(Rich())
    assert len(door.frames) == 2

    display, door = shown(b"bad")
    display(Rich())
    display(Rich())
    assert len(door.frames) == 2  # a refused frame is not a missing host
    assert capsys.readouterr().out == "Rich()\nRich()\n"


def test_a_turn_result_is_sent_only_when_rich(shown):
    display, door = shown()
    result = sys.modules["host._display"].result
    reprs = []

    class LatexNone:  # as pandas' Series: a rich method that gives nothing
        def _repr_latex_(self):
            return None

        def __repr__(self):
            reprs.append(1)
            return "LatexNone()"

    result(5)
    result(object())
    result(LatexNone())
    assert reprs == []  # its echo printed it; no rich form, so not made again
    result(Rich())
    [frame] = door.frames
    assert frame["metadata"] == {"wasi_python": {"result": True}}
    assert frame["data"]["text/html"] == "<b>rich</b>"


def test_without_a_host_a_turn_result_is_not_printed_again(shown, capsys):
    shown(ConnectionRefusedError())
    sys.modules["host._display"].result(Rich())  # its echo printed it already
    assert capsys.readouterr().out == ""


def test_the_figures_setting(shown, monkeypatch, capsys):
    shown()
    settings = sys.modules["host._display"].settings
    monkeypatch.delenv("WASI_PYTHON_FIGURES", raising=False)
    assert settings() == (True, 100)
    for value, expected in [("off", (False, 100)), ("ON", (True, 100)), ("150", (True, 150)), ("72.5", (True, 72.5))]:
        monkeypatch.setenv("WASI_PYTHON_FIGURES", value)
        assert settings() == expected
    for value in ["lots", "0.5", "5000", "nan", "inf"]:
        monkeypatch.setenv("WASI_PYTHON_FIGURES", value)
        assert settings() == (True, 100)
    assert "WASI_PYTHON_FIGURES" in capsys.readouterr().err


def test_import_host_still_sends_nothing_and_imports_no_display(guest):
    door = DisplayDoor()
    host = guest(door)
    assert "host._display" not in sys.modules
    assert "display" in dir(host)
    from host import display

    assert callable(display) and display is host.display
    assert door.frames == []
