"""Endings and errors a user can rely on (issue 11, section 3): exit codes as a POSIX
parent reads them, embedder mistakes refused before any work naming the parameter, and a
gate's ToolError crossing to the guest with its message."""

from __future__ import annotations

import asyncio
import math
import textwrap

import pytest
from wasi_python import Grant, Session, run, run_async
from wasi_python.tools import ToolError, tool

# --- exit codes ----------------------------------------------------------------------------

EXITS = [
    # (program, exit_code): the status modulo 256, never negative
    ("import os; os._exit(3)", 3),
    ("import os; os._exit(-1)", 255),
    ("import os; os._exit(-256)", 0),
    ("import os; os._exit(2**31 - 1)", 255),
    ("import os; os._exit(-2**31)", 0),
    ("import os; os._exit(256)", 0),
    ("import os; os._exit(257)", 1),
    ("import sys; sys.exit(-1)", 255),
    ("import sys; sys.exit(256)", 0),
]


@pytest.mark.parametrize(("program", "want"), EXITS, ids=[p for p, _ in EXITS])
def test_exit_code_is_the_status_modulo_256(program, want):
    done = run(["-c", program])
    assert done.trapped is None, done.stderr
    assert done.exit_code == want, done.stderr
    assert done.ok is (want == 0)


def test_os_exit_in_a_session_turn_reports_the_posix_status():
    with Session(deadline_s=20) as s:
        assert s.run("x = 1").exit_code == 0
        done = s.run("import os; os._exit(-1)")
        assert (done.exit_code, done.trapped) == (255, None)
        assert s.ended == "exit"


# --- embedder mistakes, before any work ---------------------------------------------------


def ping() -> str:
    """Ping."""
    return "pong"


SURROGATE = "\ud800"

# Keywords run, run_async and Session share: (kwargs, exception, the name the message holds).
SHARED = [
    (dict(memory_bytes=2**64), ValueError, "memory_bytes"),
    (dict(memory_bytes=(4 << 30) + 1), ValueError, "memory_bytes"),
    (dict(memory_bytes=10**30), ValueError, "memory_bytes"),
    (dict(memory_bytes=-(2**64)), ValueError, "memory_bytes"),
    (dict(memory_bytes=True), TypeError, "memory_bytes"),
    (dict(env={"A": SURROGATE}), ValueError, "env"),
    (dict(env={SURROGATE: "a"}), ValueError, "env"),
    (dict(env={"A": "x" + SURROGATE + "y"}), ValueError, "env"),
    (dict(grants=[Grant("/tmp", "/t")], env={"B": "\udfff"}), ValueError, "env"),
    (dict(deadline_s=1e300), ValueError, "deadline_s"),
    (dict(deadline_s=10**400), ValueError, "deadline_s"),
    (dict(deadline_s=-(10**400)), ValueError, "deadline_s"),
    (dict(deadline_s=math.nan), ValueError, "deadline_s"),
    (dict(deadline_s=-math.inf), ValueError, "deadline_s"),
    (dict(deadline_s=False), TypeError, "deadline_s"),
    (dict(output_bytes=2**64), ValueError, "output_bytes"),
    (dict(output_bytes=10**100), ValueError, "output_bytes"),
    (dict(output_bytes=False), TypeError, "output_bytes"),
    (dict(output_bytes=math.nan), TypeError, "output_bytes"),
    (dict(fuel=2**64), ValueError, "fuel"),
    (dict(fuel=True), TypeError, "fuel"),
    (dict(fuel=math.inf), TypeError, "fuel"),
    (dict(tools=[5]), TypeError, "tools"),
    (dict(tools=[ping, "ping"]), TypeError, "tools"),
    (dict(tools=[None]), TypeError, "tools"),
    (dict(max_tool_calls=None), TypeError, "max_tool_calls"),
    (dict(max_tool_calls=10), TypeError, "max_tool_calls"),
    (dict(max_tool_request_bytes=None), TypeError, "max_tool_request_bytes"),
    (dict(gate=None), TypeError, "gate"),
    (dict(gate=lambda call: None), TypeError, "gate"),
    (dict(tools=None, max_tool_calls=None), TypeError, "max_tool_calls"),
    (dict(tools=[ping], max_tool_calls=2**64), ValueError, "max_tool_calls"),
    (dict(tools=[ping], max_tool_calls=True), TypeError, "max_tool_calls"),
    (dict(tools=[ping], max_tool_calls=1.0), TypeError, "max_tool_calls"),
    (dict(tools=[ping], max_tool_request_bytes=2**64), ValueError, "max_tool_request_bytes"),
    (dict(tools=[ping], max_tool_request_bytes=0), ValueError, "max_tool_request_bytes"),
]

# run and run_async only.
RUN_ONLY = [
    (dict(argv=["-c", SURROGATE]), ValueError, "argv"),
    (dict(argv=["-c", "pass", "a" + SURROGATE]), ValueError, "argv"),
    (dict(argv=["-c", "pass\0"]), ValueError, "argv"),
    (dict(stdin=SURROGATE), ValueError, "stdin"),
]

# Session only.
SESSION_ONLY = [
    (dict(idle_s=1e300), ValueError, "idle_s"),
    (dict(lifetime_s=10**400), ValueError, "lifetime_s"),
    (dict(shutdown_s=math.nan), ValueError, "shutdown_s"),
    (dict(idle_s=True), TypeError, "idle_s"),
]


def _ids(cases):
    return [f"{name}-{i}" for i, (_, _, name) in enumerate(cases)]


def _check(exc_info, name):
    assert exc_info.type in (TypeError, ValueError)
    assert name in str(exc_info.value)


@pytest.mark.parametrize(("kwargs", "exc", "name"), SHARED + RUN_ONLY, ids=_ids(SHARED + RUN_ONLY))
def test_run_refuses_before_any_work(no_artifacts, kwargs, exc, name):
    kwargs = {"argv": ["-c", "pass"], **kwargs}
    with pytest.raises(exc) as e:
        run(**kwargs)
    _check(e, name)


@pytest.mark.parametrize(("kwargs", "exc", "name"), SHARED + RUN_ONLY, ids=_ids(SHARED + RUN_ONLY))
def test_run_async_refuses_before_any_work(no_artifacts, kwargs, exc, name):
    kwargs = {"argv": ["-c", "pass"], **kwargs}
    with pytest.raises(exc) as e:
        asyncio.run(run_async(**kwargs))
    _check(e, name)


@pytest.mark.parametrize(("kwargs", "exc", "name"), SHARED + SESSION_ONLY, ids=_ids(SHARED + SESSION_ONLY))
def test_session_refuses_before_any_work(no_artifacts, kwargs, exc, name):
    with pytest.raises(exc) as e:
        Session(**kwargs)
    _check(e, name)


TURN = [
    (dict(code="x = '" + SURROGATE + "'"), ValueError, "code"),
    (dict(code="pass", deadline_s=1e300), ValueError, "deadline_s"),
    (dict(code="pass", deadline_s=10**400), ValueError, "deadline_s"),
    (dict(code="pass", output_bytes=2**64), ValueError, "output_bytes"),
    (dict(code="pass", output_bytes=True), TypeError, "output_bytes"),
]


def test_a_session_turn_refuses_bad_arguments_and_the_session_lives_on():
    with Session(deadline_s=20) as s:
        for kwargs, exc, name in TURN:
            with pytest.raises(exc) as e:
                s.run(**kwargs)
            _check(e, name)
            with pytest.raises(exc) as e:
                asyncio.run(s.run_async(**kwargs))
            _check(e, name)
        assert s.ended is None
        assert s.run("print('alive')").stdout == b"alive\n"


@pytest.mark.parametrize("writable", ["yes", "no", 1, 0, None, [True]])
def test_grant_writable_must_be_a_real_bool(tmp_path, writable):
    with pytest.raises(TypeError) as e:
        Grant(tmp_path, "/data", writable=writable)
    _check(e, "writable")


def test_grant_paths_are_checked_where_the_grant_is_made(tmp_path):
    with pytest.raises(TypeError) as e:
        Grant(tmp_path, 5)  # type: ignore[arg-type]
    _check(e, "guest_path")
    with pytest.raises(ValueError) as e:
        Grant(tmp_path, "/d" + SURROGATE)
    _check(e, "guest_path")
    with pytest.raises(TypeError) as e:
        Grant(5, "/d")  # type: ignore[arg-type]
    _check(e, "host_path")
    with pytest.raises(TypeError) as e:
        Grant(b"/tmp", "/d")  # type: ignore[arg-type]
    _check(e, "host_path")
    assert Grant(tmp_path, "/d", writable=True).writable is True
    assert Grant(str(tmp_path), "/d").writable is False


@pytest.mark.parametrize("flag", ["read_only", "destructive", "idempotent", "open_world", "validates_input"])
def test_tool_labels_must_be_real_bools(flag):
    with pytest.raises(TypeError) as e:
        tool(ping, **{flag: "no"})
    _check(e, flag)


@pytest.mark.parametrize("timeout", [1e300, 10**400, -(10**400), math.nan, math.inf, 0])
def test_tool_timeout_is_bounded(timeout):
    with pytest.raises(ValueError) as e:
        tool(ping, timeout_s=timeout)
    _check(e, "timeout_s")


def test_the_tool_keywords_still_work_with_tools(tmp_path):
    done = run(
        ["-c", "from host import tools; print(tools.ping())"],
        tools=[ping], gate=None, max_tool_calls=None, max_tool_request_bytes=None,
        grants=[Grant(tmp_path, "/d", writable=False)], env={"A": "é"},
    )
    assert done.stdout == b"pong\n", done.stderr


# --- a gate's ToolError --------------------------------------------------------------------

GUEST = """
from host import tools, ToolError, ToolDenied
try:
    tools.ping()
except ToolError as e:
    print(type(e).__name__, e.kind, isinstance(e, PermissionError), str(e), sep="|")
print("runs on")
"""


def _gated(gate, **kw):
    ran: list = []

    def ping() -> str:
        """Ping."""
        ran.append(1)
        return "pong"

    done = run(["-c", textwrap.dedent(GUEST)], tools=[ping], gate=gate, **kw)
    return done, ran


def test_a_gate_tool_error_crosses_with_its_message_and_refuses_the_call():
    def gate(call):
        raise ToolError("your quota is used up")

    done, ran = _gated(gate)
    assert done.ok, done.stderr
    assert done.stdout == b"ToolDenied|denied|True|your quota is used up\nruns on\n"
    assert ran == []  # still refused: the tool never ran
    last = done.tools.outcomes[-1]
    assert (last.op, last.tool, last.outcome, last.message) == ("call", "ping", "denied", "your quota is used up")
    assert last.fault == "ToolError: your quota is used up"


def test_an_async_gate_tool_error_crosses_too():
    async def gate(call):
        await asyncio.sleep(0)
        raise ToolError("not during maintenance")

    done, ran = _gated(gate, deadline_s=10)
    assert done.stdout == b"ToolDenied|denied|True|not during maintenance\nruns on\n", done.stderr
    assert ran == []
    assert done.tools.outcomes[-1].message == "not during maintenance"


def test_a_gate_tool_error_subclass_crosses_and_the_fault_names_it():
    class QuotaError(ToolError):
        pass

    def gate(call):
        raise QuotaError("3 of 3 calls used")

    done, ran = _gated(gate)
    assert done.stdout == b"ToolDenied|denied|True|3 of 3 calls used\nruns on\n", done.stderr
    assert ran == []
    assert done.tools.outcomes[-1].fault == "QuotaError: 3 of 3 calls used"


def test_a_gate_tool_error_without_a_message_still_says_it_was_refused():
    def gate(call):
        raise ToolError()

    done, ran = _gated(gate)
    assert done.stdout == b"ToolDenied|denied|True|ping: the host refused this call\nruns on\n", done.stderr
    assert ran == []


def test_any_other_gate_exception_still_crosses_only_as_a_refusal():
    def gate(call):
        raise RuntimeError("secret /etc/path")

    done, ran = _gated(gate)
    assert done.stdout == b"ToolDenied|denied|True|ping: the host refused this call (its gate failed)\nruns on\n"
    assert b"secret" not in done.stdout + done.stderr
    assert ran == []
