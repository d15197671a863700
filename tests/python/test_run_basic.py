"""``wasi_python.run``: programs, exit codes, stdin, env, ``-m``, numpy/pandas, the CLI,
argument checking and the artifact folder."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import pytest

from wasi_python import ArtifactsMissing, Completed, Grant, artifacts, run
from wasi_python import _run
from wasi_python import _wasi_python as _ext

from helpers import run_python

# --- programs -------------------------------------------------------------------------


def test_hello_world():
    done = run(["-c", "print('hello, world')"])
    assert done.exit_code == 0
    assert done.stdout == b"hello, world\n"
    assert done.stderr == b""
    assert done.trapped is None
    assert done.truncated == ()
    assert done.ok


def test_argv_reaches_the_guest():
    done = run(["-c", "import sys; print(sys.argv)", "a", "b c"])
    assert done.exit_code == 0
    assert done.stdout == b"['-c', 'a', 'b c']\n"


def test_stderr_is_captured_apart_from_stdout():
    done = run(["-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert done.exit_code == 0
    assert done.stdout == b"out\n"
    assert done.stderr == b"err\n"


# --- exit codes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("import sys; sys.exit(0)", 0),
        ("import sys; sys.exit(3)", 3),
        ("import sys; sys.exit(255)", 255),
        ("import sys; sys.exit(300)", 44),  # CPython keeps the low 8 bits
        ("import os; os._exit(7)", 7),
        ("import os; os._exit(0)", 0),
        ("import os; os._exit(125)", 125),
        ("import os; os._exit(126)", 126),
        ("import os; os._exit(200)", 200),
        ("import sys; sys.exit('bye')", 1),
    ],
)
def test_exit_codes(code, status):
    done = run(["-c", code])
    assert done.trapped is None
    assert done.exit_code == status
    assert done.ok == (status == 0)


def test_sys_exit_with_a_message_writes_it_to_stderr():
    done = run(["-c", "import sys; sys.exit('bye now')"])
    assert done.exit_code == 1
    assert b"bye now" in done.stderr


def test_uncaught_exception_exits_1_with_a_traceback():
    done = run(["-c", "def f():\n    raise ValueError('boom')\nf()"])
    assert done.exit_code == 1
    assert done.trapped is None
    assert not done.ok
    assert b"Traceback (most recent call last)" in done.stderr
    assert b"ValueError: boom" in done.stderr
    assert done.stdout == b""


def test_syntax_error_exits_1():
    done = run(["-c", "def ("])
    assert done.exit_code == 1
    assert b"SyntaxError" in done.stderr


# A logging handler that says what is done with it.
HANDLER = (
    "import atexit, logging\n"
    "class H(logging.Handler):\n"
    "    def emit(self, record): print('emitted', record.getMessage())\n"
    "    def flush(self): print('flushed')\n"
    "    def close(self): print('closed'); super().close()\n"
)


@pytest.mark.parametrize(
    ("program", "said"),
    [
        # logging's exit handler runs at a run's end, as at CPython's exit (guest boot's
        # `finish`), after the program's own; and only if it is still registered.
        ("logging.getLogger().addHandler(H())\nlogging.warning('hello')", b"emitted hello\nflushed\nclosed\n"),
        ("atexit.register(lambda: logging.getLogger().addHandler(H()) or logging.warning('late'))", b"emitted late\nflushed\nclosed\n"),
        ("logging.getLogger().addHandler(H())\natexit.unregister(logging.shutdown)", b""),
    ],
    ids=["made-by-the-program", "made-at-exit", "shutdown-unregistered"],
)
def test_at_its_end_a_program_s_logging_handlers_are_flushed_and_closed(program, said):
    done = run(["-c", HANDLER + program])
    assert done.ok, done.stderr
    assert done.stdout == said


# --- stdin ----------------------------------------------------------------------------


def test_program_from_stdin_when_argv_is_empty():
    done = run([], stdin=b"import sys\nprint(sum(range(10)))\nsys.exit(5)\n")
    assert done.exit_code == 5
    assert done.stdout == b"45\n"


def test_stdin_is_readable_by_the_program():
    done = run(["-c", "import sys; print(sys.stdin.read().upper())"], stdin=b"abc")
    assert done.exit_code == 0
    assert done.stdout == b"ABC\n"


def test_stdin_may_be_str():
    done = run(["-c", "import sys; print(len(sys.stdin.buffer.read()))"], stdin="h\u00e9")
    assert done.exit_code == 0
    assert done.stdout == b"3\n"  # encoded as UTF-8


def test_empty_stdin_reads_as_eof():
    done = run(["-c", "import sys; print(repr(sys.stdin.read()))"])
    assert done.exit_code == 0
    assert done.stdout == b"''\n"


# --- env ------------------------------------------------------------------------------


def test_env_reaches_the_guest_with_the_fixed_variables(monkeypatch):
    monkeypatch.setenv("PYRT_HOST_SECRET", "do-not-leak")
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    done = run(["-c", code], env={"FOO": "bar", "EMPTY": ""})
    assert done.exit_code == 0, done.stderr
    env = json.loads(done.stdout)
    assert env["FOO"] == "bar"
    assert env["EMPTY"] == ""
    assert env["HOME"] == "/work"
    assert env["TMPDIR"] == "/tmp"
    assert env["PYTHONTZPATH"] == ""
    # the host's environment stays on the host
    assert "PYRT_HOST_SECRET" not in env
    assert "PATH" not in env
    assert set(env) == {"FOO", "EMPTY", "HOME", "TMPDIR", "PYTHONTZPATH"}


def test_without_env_the_guest_has_only_the_fixed_variables():
    done = run(["-c", "import os; print(sorted(os.environ))"])
    assert done.exit_code == 0
    assert done.stdout == b"['HOME', 'PYTHONTZPATH', 'TMPDIR']\n"


# --- -m -------------------------------------------------------------------------------


def test_dash_m_json_tool_reads_stdin():
    done = run(["-m", "json.tool"], stdin=b'{"a": [1, 2], "b": null}')
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == {"a": [1, 2], "b": None}


def test_dash_m_unknown_module_fails():
    done = run(["-m", "no_such_module_xyz"])
    assert done.exit_code == 1
    assert b"no_such_module_xyz" in done.stderr


# --- numpy and pandas -----------------------------------------------------------------


def test_numpy_and_pandas_import_and_compute():
    code = (
        "import numpy as np, pandas as pd\n"
        "a = np.arange(12).reshape(3, 4)\n"
        "print(int(a.sum()), a.shape)\n"
        "df = pd.DataFrame({'k': ['x', 'y', 'x', 'y', 'z'], 'v': [1, 2, 3, 4, 5]})\n"
        "s = df.groupby('k')['v'].sum()\n"
        "print(s.to_dict())\n"
    )
    done = run(["-c", code])
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"66 (3, 4)\n{'x': 4, 'y': 6, 'z': 5}\n"


# --- Completed ------------------------------------------------------------------------


def test_completed_is_a_frozen_dataclass():
    done = run(["-c", "pass"])
    assert isinstance(done, Completed)
    assert dataclasses.is_dataclass(done)
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.exit_code = 1  # type: ignore[misc]
    assert done.tools is None
    assert done.fuel_used is None
    assert isinstance(done.duration_s, float) and done.duration_s >= 0


@pytest.mark.parametrize(
    ("exit_code", "trapped", "ok"),
    [(0, None, True), (1, None, False), (None, "deadline", False), (44, None, False)],
)
def test_completed_ok(exit_code, trapped, ok):
    c = Completed(exit_code=exit_code, stdout=b"", stderr=b"", trapped=trapped, truncated=(), fuel_used=None, duration_s=0.0)
    assert c.ok is ok


# --- the CLI --------------------------------------------------------------------------


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return run_python("-m", "wasi_python", "run", *args, input=stdin, timeout=120)


def test_cli_prints_one_json_object():
    p = _cli("--", "-c", "print(6*7)")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["exit_code"] == 0
    assert out["stdout"] == "42\n"
    assert out["stderr"] == ""
    assert out["trapped"] is None
    assert out["truncated"] == []
    assert out["fuel_used"] is None


def test_cli_reports_the_guest_exit_code_and_stdin():
    p = _cli("--stdin", "--env", "X=y", "--", "-c", "import os, sys; print(sys.stdin.read() + os.environ['X']); sys.exit(3)", stdin=b"in-")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["exit_code"] == 3
    assert out["stdout"] == "in-y\n"


# --- bad arguments --------------------------------------------------------------------


OK = ["-c", "pass"]

BAD_CALLS = [
    # (kwargs for run, exception, parameter name)
    (dict(argv="print(1)"), TypeError, "argv"),
    (dict(argv=b"-c"), TypeError, "argv"),
    (dict(argv=["-c", 1]), TypeError, "argv"),
    (dict(argv=["-c", b"pass"]), TypeError, "argv"),
    (dict(argv=None), TypeError, "argv"),
    (dict(argv=OK, stdin=123), TypeError, "stdin"),
    (dict(argv=OK, stdin=["x"]), TypeError, "stdin"),
    (dict(argv=OK, env=["A=1"]), TypeError, "env"),
    (dict(argv=OK, env="A=1"), TypeError, "env"),
    (dict(argv=OK, env={"A": 1}), TypeError, "env"),
    (dict(argv=OK, env={1: "a"}), TypeError, "env"),
    (dict(argv=OK, env={"A": b"1"}), TypeError, "env"),
    (dict(argv=OK, env={"A=B": "1"}), ValueError, "env"),
    (dict(argv=OK, env={"": "1"}), ValueError, "env"),
    (dict(argv=OK, grants=["/tmp"]), TypeError, "grants"),
    (dict(argv=OK, grants=[("/tmp", "/t")]), TypeError, "grants"),
    (dict(argv=OK, grants="/tmp"), TypeError, "grants"),
    (dict(argv=OK, grants=Grant("/tmp", "/t")), TypeError, "grants"),
    (dict(argv=OK, memory_bytes=-1), ValueError, "memory_bytes"),
    (dict(argv=OK, memory_bytes=0), ValueError, "memory_bytes"),
    (dict(argv=OK, memory_bytes=(40 << 20) - 1), ValueError, "memory_bytes"),
    (dict(argv=OK, memory_bytes=True), TypeError, "memory_bytes"),
    (dict(argv=OK, memory_bytes=1.5e9), TypeError, "memory_bytes"),
    (dict(argv=OK, deadline_s=0), ValueError, "deadline_s"),
    (dict(argv=OK, deadline_s=-1.0), ValueError, "deadline_s"),
    (dict(argv=OK, deadline_s=math.nan), ValueError, "deadline_s"),
    (dict(argv=OK, deadline_s=math.inf), ValueError, "deadline_s"),
    (dict(argv=OK, deadline_s=True), TypeError, "deadline_s"),
    (dict(argv=OK, deadline_s="1"), TypeError, "deadline_s"),
    (dict(argv=OK, output_bytes=-1), ValueError, "output_bytes"),
    (dict(argv=OK, output_bytes=True), TypeError, "output_bytes"),
    (dict(argv=OK, output_bytes=1.0), TypeError, "output_bytes"),
    (dict(argv=OK, fuel=0), ValueError, "fuel"),
    (dict(argv=OK, fuel=-5), ValueError, "fuel"),
    (dict(argv=OK, fuel=True), TypeError, "fuel"),
    (dict(argv=OK, fuel=1e9), TypeError, "fuel"),
    (dict(argv=OK, host="not callable"), TypeError, "host"),
    (dict(argv=OK, host=b"x"), TypeError, "host"),
    (dict(argv=OK, cancel=object()), TypeError, "cancel"),
    (dict(argv=OK, timeout=3), TypeError, "timeout"),
    (dict(argv=OK, deadline=3), TypeError, "deadline"),
]


@pytest.mark.parametrize(("kwargs", "exc", "name"), BAD_CALLS, ids=[f"{n}-{i}" for i, (_, _, n) in enumerate(BAD_CALLS)])
def test_bad_arguments_raise_before_any_work(no_artifacts, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        run(**kwargs)


def test_argv_is_positional_and_required():
    with pytest.raises(TypeError):
        run()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        run(["-c", "pass"], b"")  # type: ignore[misc]  # stdin is keyword-only


# --- artifacts ------------------------------------------------------------------------


def test_artifacts_is_an_existing_folder():
    where = artifacts()
    assert isinstance(where, Path)
    assert where.is_dir()


def test_artifacts_env_var_points_elsewhere(monkeypatch):
    real = artifacts()
    monkeypatch.setenv("WASI_PYTHON_ARTIFACTS", str(real))
    assert artifacts() == real
    assert run(["-c", "print(1)"]).stdout == b"1\n"


def test_missing_artifacts_name_the_fix(no_artifacts):
    with pytest.raises(ArtifactsMissing, match="cargo xtask dist"):
        artifacts()
    with pytest.raises(ArtifactsMissing, match="cargo xtask dist"):
        run(["-c", "print(1)"])


def test_artifacts_missing_is_an_exception(no_artifacts, tmp_path, monkeypatch):
    monkeypatch.setenv("WASI_PYTHON_ARTIFACTS", str(tmp_path / "does-not-exist"))
    with pytest.raises(Exception) as info:
        artifacts()
    assert isinstance(info.value, ArtifactsMissing)
    assert "cargo xtask dist" in str(info.value)


# --- the plain call: argv and stdin alone --------------------------------------------


def test_a_plain_call_runs_as_the_same_call_through_every_check():
    # Only argv and stdin: the extension takes the call (`run_plain`). grants=[] is not
    # the default object, so the same call goes through the package's checks instead.
    code = "import sys, os; print(sys.argv[1:], repr(sys.stdin.read()), sorted(os.environ), os.getcwd())"
    assert run(["-c", "pass"]).ok  # the plain settings are known
    for argv, stdin in ((["-c", code, "a", "é"], b"in\n"), (("-c", code, "a", "é"), "ïn")):
        assert _ext.run_plain(argv, stdin) is not None
        # run_async's arguments (`_ext.plain_args`) as the package's checks make them.
        where, args, stdin_b, _ = _ext.plain_args(argv, stdin)
        assert (where, args, stdin_b) == (_run.plain_where(), _run._check_argv(argv), _run._check_stdin(stdin))
        fast, checked = run(argv, stdin=stdin), run(argv, stdin=stdin, grants=[])
        assert fast.ok, fast.stderr
        assert same_but_time(fast, checked)
    # Its Completed is the extension's own make: each end, field for field.
    for code in ("import sys; sys.exit(3)", "import os; os.abort()", "import sys; sys.stdout.write('x' * (17 << 20))"):
        fast, checked = run(["-c", code]), run(["-c", code], grants=[])
        assert same_but_time(fast, checked), code
    assert fast.truncated == ("stdout",)


def same_but_time(a: Completed, b: Completed) -> bool:
    """Both of one type, every field equal (and of one type) but how long they took."""
    fields = [f.name for f in dataclasses.fields(Completed) if f.name != "duration_s"]
    return type(a) is type(b) is Completed and all(
        getattr(a, f) == getattr(b, f) and type(getattr(a, f)) is type(getattr(b, f)) for f in fields
    ) and isinstance(a.duration_s, float)


def test_runs_plain_check_names_every_keyword_but_stdin_in_order():
    # run() spells the check out (for speed); it must compare each keyword-only
    # parameter but stdin with its own default, so a keyword added to run() and not to
    # the check would wrongly take the plain path.
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(_run.run)))
    tests = [n.test for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.BoolOp)]
    (check,) = [t for t in tests if all(isinstance(v, ast.Compare) for v in t.values)]
    pairs = [(c.left.id, c.comparators[0].value.id, c.comparators[0].slice.value) for c in check.values]
    names = _run.keyword_defaults(run)[0]
    assert pairs == [(name, "d", i) for i, name in enumerate(names)]
    assert all(isinstance(c.ops[0], ast.Is) for c in check.values)
    assert _run._RUN_PLAIN == tuple(v for k, v in run.__kwdefaults__.items() if k != "stdin")


def test_the_extension_makes_completed_only_with_the_fields_it_knows():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Other:
        exit_code: int
    with pytest.raises(ValueError):
        _ext.set_completed(Other, ("exit_code",))


@pytest.mark.parametrize(
    "argv, stdin",
    [
        ("-c pass", b""),  # a str, not a list
        (["-c", 1], b""),  # an argument that is not a str
        (["-c", "x\0"], b""),  # a NUL
        (["-c", "\ud800"], b""),  # no UTF-8 form
        (iter(["-c", "pass"]), b""),  # neither a list nor a tuple
        (["-c", "pass"], bytearray()),  # neither bytes nor str
        (["-c", "pass"], "\ud800"),
    ],
)
def test_the_extension_leaves_every_other_call_to_the_package(argv, stdin):
    assert run(["-c", "pass"]).ok  # the plain settings are known
    assert _ext.run_plain(argv, stdin) is None
    assert _ext.plain_args(argv, stdin) is None


def test_a_plain_call_follows_a_changed_artifacts_variable(tmp_path, monkeypatch):
    assert run(["-c", "pass"]).ok  # known for the variable as it is
    monkeypatch.setenv("WASI_PYTHON_ARTIFACTS", str(tmp_path))  # an empty folder
    with pytest.raises(ArtifactsMissing):
        run(["-c", "pass"])
    assert _ext.plain_args(["-c", "pass"], b"") is None
    monkeypatch.undo()
    assert run(["-c", "pass"]).ok


# --- host= raw door -------------------------------------------------------------------


def test_host_door_echo():
    seen = []

    def echo(data: bytes) -> bytes:
        seen.append(data)
        return b"echo:" + data

    done = run(["-c", "import _host; print(_host.call(b'ping')); print(_host.call(b''))"], host=echo)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"b'echo:ping'\nb'echo:'\n"
    assert seen == [b"ping", b""]


def _door_probe() -> list[str]:
    return [
        "-c",
        "import _host\n"
        "try:\n"
        "    _host.call(b'hi')\n"
        "except OSError as e:\n"
        "    print('OSError')\n"
        "else:\n"
        "    print('no error')\n",
    ]


def test_host_door_that_raises_is_an_oserror_in_the_guest():
    def boom(data: bytes) -> bytes:
        raise RuntimeError("secret host detail")

    done = run(_door_probe(), host=boom)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"OSError\n"
    assert b"secret host detail" not in done.stdout + done.stderr


@pytest.mark.parametrize("answer", ["a str", None, 42, [b"x"]])
def test_host_door_returning_non_bytes_is_an_oserror_in_the_guest(answer):
    done = run(_door_probe(), host=lambda data: answer)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"OSError\n"


def test_without_host_the_door_fails_in_the_guest():
    done = run(_door_probe())
    assert done.trapped is None
    assert done.exit_code == 0, done.stderr
    assert done.stdout in (b"OSError\n",)


# --- a call with only argv and stdin --------------------------------------------------


def test_a_call_with_defaults_only_runs_as_one_that_spells_them_out():
    # run() skips the settings' checks when every keyword but stdin is its default object
    # (_run.plain); an equal value passed explicitly goes the checked way. Both must run the
    # same guest.
    from wasi_python._run import DEFAULTS

    program = [
        "-c",
        "import os, sys\n"
        "print(sys.argv, sorted(os.environ.items()), os.getcwd(), sys.stdin.read(), os.listdir('/tmp'))",
        "x",
    ]
    fast = run(program, stdin="in")
    spelled = run(
        program, stdin="in", memory_bytes=int(str(DEFAULTS["memory_bytes"])), deadline_s=float(str(DEFAULTS["deadline_s"])),
        output_bytes=int(str(DEFAULTS["output_bytes"])), file_write_bytes=int(str(DEFAULTS["file_write_bytes"])),
        env={}, grants=[], mounts=[], preload=None, workdir="/work",
    )
    assert fast.ok, fast.stderr
    assert dataclasses.replace(fast, duration_s=0) == dataclasses.replace(spelled, duration_s=0)
    for bad in (["-c", b"x"], "print(1)", ["-c", "\0"]):
        with pytest.raises((TypeError, ValueError)) as fast_error:
            run(bad)
        with pytest.raises(type(fast_error.value)):
            run(bad, max_open_files=int(str(DEFAULTS["max_open_files"])))
