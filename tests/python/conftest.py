"""Test setup for the Python package."""

# helpers.py puts python/ first on sys.path, and stands in for the package while its
# compiled extension is not built; imported first, before any test imports wasi_python.
import helpers  # noqa: F401


# --- the package's artifacts, held for the session ---------------------------------------
# `cargo xtask dist` (and test, wheel, sdist) re-lays python/wasi_python/_artifacts under an
# exclusive flock on python/wasi_python (xtask/src/dist.rs); this process holds it shared
# until it exits, so a re-lay from the same tree (a changed guest package, and with it new
# preload image keys) waits for the suite instead of reaching some of its processes only.
import fcntl as _fcntl
import os as _os

ARTIFACTS_HELD = _os.open(helpers.PYTHON_DIR / "wasi_python", _os.O_RDONLY | _os.O_DIRECTORY)
_fcntl.flock(ARTIFACTS_HELD, _fcntl.LOCK_SH)  # waits while a re-lay is under way


# --- fixtures (guidetests) ---------------------------------------------------------------
import pytest


# --- the GIL canary (gil_canary.py): on for every test ------------------------------------
import gil_canary as _gil_canary


def pytest_report_header(config):
    return f"GIL canary: a test that keeps the GIL {_gil_canary.STARVED} s fails; stacks in {_gil_canary.start().log_path}"


def pytest_configure(config):
    config.addinivalue_line("markers", "starves_gil: the test starves the GIL canary on purpose (its own test)")


@pytest.fixture(autouse=True)
def gil_canary(request):
    """Fails a test during which a thread could not take the GIL for over
    ``gil_canary.STARVED`` seconds, with every thread's stack at that moment."""
    canary = _gil_canary.start()
    since, log_at = _gil_canary.time.monotonic(), canary.log_size()
    yield canary
    starved = canary.starved_since(since)
    if starved is not None and request.node.get_closest_marker("starves_gil") is None:
        pytest.fail(
            f"the GIL canary could not take the GIL for {starved:.1f} s during this test; "
            f"the stacks then:\n{canary.log_tail(log_at)}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def many_calls_run():
    """One run whose guest makes 1,100 tool calls under ``max_tool_calls=None``: a costly run
    (~1,100 tool threads), shared by the record and limits tests of the guide."""
    from wasi_python import run
    from wasi_python.tools import tool

    calls = []

    @tool
    def ping(i: int) -> int:
        """Echoes i."""
        calls.append(i)
        return i

    program = (
        "from host import tools\n"
        "bad = [i for i in range(1100) if tools.ping(i) != i]\n"
        "print('done', len(bad))\n"
    )
    done = run(["-c", program], tools=[ping], max_tool_calls=None)
    return done, calls


# --- asynctests: a bounded asyncio runner (no pytest-asyncio here) ------------------------
import asyncio as _asyncio

import pytest as _pytest


def _run_bounded(coro, *, leftover_s: float = 5.0):
    """Like ``asyncio.run``, but tasks left over at the end get ``leftover_s`` seconds to
    finish after being cancelled, instead of forever: a stuck task fails the test, it
    does not hang the suite."""
    loop = _asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            tasks = [t for t in _asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(_asyncio.wait(tasks, timeout=leftover_s))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


@_pytest.fixture
def arun():
    """``arun(coro)``: runs a coroutine on a fresh event loop, bounded at its end."""
    return _run_bounded


@pytest.fixture
def no_artifacts(tmp_path, monkeypatch):
    """Points the artifact lookup at an empty folder: a check that raises TypeError or
    ValueError instead of ArtifactsMissing ran before any work."""
    empty = tmp_path / "empty-artifacts"
    empty.mkdir()
    monkeypatch.setenv("WASI_PYTHON_ARTIFACTS", str(empty))
    return empty
