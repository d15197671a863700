"""What the package keeps between runs: a Tool made once per unchanged function, and its
compiled form; in the guest, the `host` package served from its bundle, with its
exception classes made on first use. Reuse must never serve a stale tool."""

from __future__ import annotations

import textwrap

from wasi_python import run
from wasi_python._tools import as_tools, for_door


def _fresh_function():
    def lookup(code: str, limit: int = 3) -> str:
        """Looks a code up."""
        return code * limit

    return lookup


SHOW = """
import inspect
from host import tools
print(tools.lookup.__doc__)
print(inspect.signature(tools.lookup))
print(tools.lookup(code="ab"))
"""


def _guest_view(fn):
    done = run(["-c", SHOW], tools=[fn])
    assert done.exit_code == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


def test_an_unchanged_function_is_read_once_and_compiled_once():
    fn = _fresh_function()
    first, again = as_tools([fn])[0], as_tools([fn])[0]
    assert first is again
    assert for_door(first) is for_door(again)
    assert as_tools([_fresh_function()])[0] is not first  # another function, another tool


def test_a_changed_function_is_read_again():
    fn = _fresh_function()
    assert _guest_view(fn) == ["Looks a code up.", "(code: str, limit: int = 3) -> str", "ababab"]

    fn.__doc__ = "Looks a code up, twice."
    fn.__defaults__ = (2,)
    assert _guest_view(fn) == ["Looks a code up, twice.", "(code: str, limit: int = 2) -> str", "abab"]

    fn.__annotations__["limit"] = float  # the same dict, a new value in it
    assert _guest_view(fn)[1] == "(code: str, limit: float = 2) -> str"


GUEST_PACKAGE = """
import traceback
import host
print(host.__spec__.loader.__name__)
print(host.ToolError.__module__, host.ToolArgumentError.__qualname__)
print(issubclass(host.ToolArgumentError, TypeError), issubclass(host.ToolDenied, PermissionError))
print(sorted(n for n in dir(host) if n.startswith("Tool")) == sorted(host.__all__[1:]))
from host import tools
try:
    tools.lookup(1)
except host.ToolArgumentError:
    text = traceback.format_exc()
print("host.ToolArgumentError:" in text, "raise _failure(answer)" in text)
"""


def test_the_guest_package_comes_from_its_bundle_with_its_own_exception_names():
    done = run(["-c", textwrap.dedent(GUEST_PACKAGE)], tools=[_fresh_function()])
    assert done.exit_code == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        "_wasi_python_boot",  # the bundle's finder, not the path's
        "host ToolArgumentError",
        "True True",
        "True",
        "True True",  # tracebacks name host's classes and show host's source lines
    ]


BUNDLE_STATE = """
import sys
boot = sys.modules["_wasi_python_boot"]
held = boot._bundle
print(None if held is None else sorted({type(c).__name__ for c in held.values()}))
print(sorted(boot._held or ()), [m in sys.modules for m in ("host", "host.tools", "_host")])
import host
print(host._last_id, hasattr(host, "tools"))
try:
    from host import tools
except ImportError as e:
    print("ImportError", e)
    try:
        from host import tools
    except ImportError as e:
        print("ImportError again", "host.tools" in sys.modules)
    raise SystemExit(0)
print(tools.__all__, sys.modules["host.tools"] is (boot._held or {}).get("host.tools"))
print([m in sys.modules for m in ("host", "host.tools", "_host", "binascii")], host.tools is tools, host._last_id)
"""


def test_a_preload_image_holds_the_guest_package_executed_and_the_plain_start_reads_it_at_import():
    # The image holds `host` and `host.tools` executed by its build, out of sys.modules,
    # each run's import asking for that run's tools; the plain start imports them anew.
    # Both end the same but for the module objects' origin.
    fn = _fresh_function()
    done = run(["-c", BUNDLE_STATE], tools=[fn])
    assert done.exit_code == 0, done.stderr.decode()
    after = ["0 False", f"[{fn.__name__!r}] True", "[True, True, True, True] True 1"]
    assert done.stdout.decode().splitlines() == ["['code']", "['host', 'host.tools'] [False, False, False]", *after]
    plain = run(["-c", BUNDLE_STATE], tools=[fn], preload=())
    assert plain.exit_code == 0, plain.stderr.decode()
    assert plain.stdout.decode().splitlines() == ["None", "[] [False, False, False]", after[0], after[1].replace("True", "False"), after[2]]
    # No tools offered: the import fails, again when retried, and leaves no module.
    for preload in (None, ()):
        none = run(["-c", BUNDLE_STATE], preload=preload)
        assert none.exit_code == 0, none.stderr.decode()
        assert none.stdout.decode().splitlines()[-2:] == [
            "ImportError this run has no tools: the embedder passed none",
            "ImportError again False",
        ]
