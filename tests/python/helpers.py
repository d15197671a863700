"""What the Python tests share: where the package's source is, `guest(code, tools, **kw)`,
a Python subprocess that imports the package from its source, enums used as type hints, and
the guide's example tool.

Importing this module puts ``python/`` first on ``sys.path`` (conftest.py imports it first).
When ``import wasi_python`` fails there (no compiled extension yet), an empty package over
``python/wasi_python`` stands in, so the pure-Python tests (``wasi_python.tools``) still run;
once the extension is built the stand-in is never made.
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))
try:
    import wasi_python  # noqa: F401
except ImportError:
    for _name in [n for n in sys.modules if n == "wasi_python" or n.startswith("wasi_python.")]:
        del sys.modules[_name]
    _pkg = types.ModuleType("wasi_python")
    _pkg.__path__ = [str(PYTHON_DIR / "wasi_python")]
    sys.modules["wasi_python"] = _pkg

from wasi_python.tools import ToolError, tool  # noqa: E402 (after the stand-in)


def guest(code: str, tools: Any, **kw: Any) -> Any:
    """Runs ``code`` (dedented) in a guest offered ``tools``; ``kw`` goes to `run`."""
    from wasi_python import run

    return run(["-c", textwrap.dedent(code)], tools=tools, **kw)


def flocks(pid: int) -> set[tuple[str, int]]:
    """The flocks process ``pid`` holds, as (READ or WRITE, inode), from /proc/locks."""
    held = set()
    for line in Path("/proc/locks").read_text().splitlines():
        words = line.split()
        # "1: FLOCK  ADVISORY  READ 1234 fe:00:10133506 0 EOF" ("->" marks a waiter).
        if len(words) >= 6 and words[1] == "FLOCK" and words[4] == str(pid):
            held.add((words[3], int(words[5].rsplit(":", 1)[1])))
    return held


def run_python(*args: str, **kw: Any) -> subprocess.CompletedProcess:
    """This Python run with ``args`` in a new process that imports `wasi_python` from
    ``python/``; its output is captured, and ``kw`` goes to `subprocess.run`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, *args], capture_output=True, env=env, check=False, **kw)


# --- enums used as type hints --------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    L = 3


# --- the guide's example tool ("Offer a tool"), exactly ---------------------------------

REGIONS = {"EMEA": {"code": "EMEA", "manager": "Ada"}}


@tool(read_only=True)
def lookup_region(code: str) -> dict:
    """Look up a sales region by its code.

    Args:
        code: The region code, such as "EMEA".
    """
    if code not in REGIONS:
        raise ToolError(f"no region {code!r}")  # the guest reads this message
    return REGIONS[code]
