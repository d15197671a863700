"""Test setup for the Python package."""

import sys
import types
from pathlib import Path

_PYTHON = Path(__file__).resolve().parents[2] / "python"
if str(_PYTHON) not in sys.path:
    sys.path.insert(0, str(_PYTHON))

# --- shim (pytools): lets the pure-Python `wasi_python.tools` tests run before the compiled
# extension is built. When `import wasi_python` fails (no `_wasi_python` yet), an empty package
# over python/wasi_python stands in, so `import wasi_python.tools` still works. Once the
# extension is built this does nothing.
try:
    import wasi_python  # noqa: F401
except ImportError:
    for _name in [n for n in sys.modules if n == "wasi_python" or n.startswith("wasi_python.")]:
        del sys.modules[_name]
    _pkg = types.ModuleType("wasi_python")
    _pkg.__path__ = [str(_PYTHON / "wasi_python")]
    sys.modules["wasi_python"] = _pkg
# --- end shim
