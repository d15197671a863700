"""The typed binding: defaults live in the runtime, the package's signatures take them
from there, the extension takes its settings by keyword, and no number the embedder
passes makes a Rust panic reach Python."""

import inspect
import math
import threading

import pytest

import wasi_python
from wasi_python import Grant, MemoryFiles, Mount, Session, run, run_async
from wasi_python import _wasi_python as _ext

# Each keyword of the public API whose default is the runtime's, by the runtime's name.
_SIGNATURE_DEFAULTS = {
    "memory_bytes": "memory_bytes",
    "deadline_s": "deadline_s",
    "output_bytes": "output_bytes",
    "fuel": "fuel",
    "file_write_bytes": "file_write_bytes",
    "max_open_files": "max_open_files",
    "max_file_calls": "max_file_calls",
}
_SESSION_DEFAULTS = {"idle_s": "idle_s", "lifetime_s": "lifetime_s", "shutdown_s": "shutdown_s"}


@pytest.mark.parametrize("fn", [run, run_async, Session.__init__], ids=["run", "run_async", "Session"])
def test_every_default_in_a_signature_is_the_runtimes(fn):
    params = inspect.signature(fn).parameters
    names = dict(_SIGNATURE_DEFAULTS)
    if fn is Session.__init__:
        names.update(_SESSION_DEFAULTS)
    for keyword, runtime_name in names.items():
        assert params[keyword].default == _ext.DEFAULTS[runtime_name], keyword


def test_the_published_defaults_are_the_runtimes():
    for k, v in wasi_python.DEFAULTS.items():
        assert _ext.DEFAULTS[k] == v
    from wasi_python._run import TOOL_DEFAULTS

    assert TOOL_DEFAULTS["max_tool_calls"] == _ext.DEFAULTS["max_tool_calls"]
    assert TOOL_DEFAULTS["max_tool_request_bytes"] == _ext.DEFAULTS["max_tool_request_bytes"]
    assert Mount(MemoryFiles({}), "/m").timeout_s == _ext.DEFAULTS["mount_timeout_s"]


def _options(**over):
    kw = dict(
        env=[], grants=[], memory_bytes=1 << 30, deadline_s=5.0, output_bytes=1 << 20, fuel=None,
        file_write_bytes=None, max_open_files=64, workdir=None, preload=[], mounts=[], max_file_calls=None,
        tools=None, dispatcher=None, max_tool_calls=None, max_tool_request_bytes=None, host=None,
        snapshot=None, keep_random=False,
    )
    kw.update(over)
    return _ext.Options(**kw)


def test_the_extension_takes_its_settings_by_keyword_only():
    with pytest.raises(TypeError):
        _ext.Options([], [], 1 << 30)  # positional: refused
    kw = {}
    with pytest.raises(TypeError):
        _ext.Options(**kw)  # a keyword missing: refused, never defaulted silently


def test_options_serve_one_run():
    where = str(wasi_python.artifacts())
    options = _options()
    done = _ext.run(where, ["-c", "print(6 * 7)"], b"", options)
    assert (done.exit_code, done.stdout) == (0, b"42\n")
    with pytest.raises(ValueError):
        _ext.run(where, ["-c", "print(1)"], b"", options)


def test_options_without_a_door_copy_and_with_one_do_not():
    where = str(wasi_python.artifacts())
    template = _options(env=[("X", "7")])
    copies = [template.copy() for _ in range(2)]
    for c in copies:
        done = _ext.run(where, ["-c", "import os; print(os.environ['X'])"], b"", c)
        assert (done.exit_code, done.stdout) == (0, b"7\n")
    _ext.run(where, ["-c", "pass"], b"", template)
    with pytest.raises(ValueError):
        template.copy()  # used
    with pytest.raises(ValueError):
        _options(host=lambda b: b).copy()  # a door keeps one run's state


def test_grants_are_read_by_attribute():
    where = str(wasi_python.artifacts())
    import tempfile, pathlib

    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "f.txt").write_text("hi")
        done = _ext.run(where, ["-c", "print(open('/d/f.txt').read())"], b"", _options(grants=[Grant(d, "/d")]))
    assert done.stdout == b"hi\n"


_HOSTILE_SECONDS = [math.inf, -math.inf, math.nan, 1e300, -1.0, 2.0**64]


@pytest.mark.parametrize("value", _HOSTILE_SECONDS, ids=str)
def test_no_number_of_seconds_reaches_rust_unchecked(value):
    """Each float the extension turns into a Duration: a ValueError, never a panic."""
    where = str(wasi_python.artifacts())
    with pytest.raises(ValueError):
        _options(deadline_s=value)
    with pytest.raises(ValueError):
        _ext.MountSpec(provider=MemoryFiles({})._handle(False), guest_path="/m", writable=False, timeout_s=value)
    with pytest.raises(ValueError):
        _ext.SessionHandle(where, _options(), idle_s=value, lifetime_s=None, shutdown_s=1.0)
    with pytest.raises(ValueError):
        _ext.SessionHandle(where, _options(), idle_s=None, lifetime_s=value, shutdown_s=1.0)
    with pytest.raises(ValueError):
        _ext.SessionHandle(where, _options(), idle_s=None, lifetime_s=None, shutdown_s=value)
    with pytest.raises(ValueError):
        _ext.sweep_private_folders(value)
    with pytest.raises(ValueError):
        _ext.CompiledTool("t", '{"name": "t", "inputSchema": {"type": "object"}}', '{"type": "object"}', False, [], value)


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, -1.0, 0, True, "1"], ids=repr)
def test_a_mounts_timeout_is_checked_when_the_mount_is_made(value):
    with pytest.raises((TypeError, ValueError)) as e:
        Mount(MemoryFiles({}), "/m", timeout_s=value)
    assert "timeout_s" in str(e.value)


@pytest.mark.parametrize("value", [2**64, 2**64 + 1, -1, 10**30])
def test_integers_past_the_runtimes_range_are_refused_not_panicked(value):
    for keyword in ("memory_bytes", "output_bytes", "fuel", "file_write_bytes", "max_open_files", "max_file_calls"):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            _options(**{keyword: value})
        with pytest.raises((TypeError, ValueError, OverflowError)):
            run(["-c", "pass"], **{keyword: value})


def test_a_session_refusal_is_a_typed_exception():
    s = Session(deadline_s=5)
    s.run("x = 1")
    s.close()
    with pytest.raises(wasi_python.SessionEnded) as e:
        s._handle.turn("x", deadline_s=1.0, output_bytes=100, fuel=None)
    assert e.value.reason == "closed"
    assert wasi_python.SessionEnded is _ext.SessionEnded
    assert wasi_python.SessionBusy is _ext.SessionBusy


def test_a_busy_session_refuses_a_second_turn_with_session_busy():
    import time

    s = Session(deadline_s=10)
    done = threading.Event()

    def slow():
        while True:
            try:
                s.run("import time; time.sleep(1.0)")
                break
            except wasi_python.SessionBusy:  # our own short turn got in first: try again
                time.sleep(0.01)
        done.set()

    t = threading.Thread(target=slow)
    t.start()
    busy = 0
    while not done.is_set() and not busy:
        try:
            s.run("1")
        except wasi_python.SessionBusy:
            busy += 1
        time.sleep(0.01)
    t.join()
    s.close()
    assert busy == 1
