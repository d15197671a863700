"""`_wasi_python.pyi` matches the built extension, as pydantic-core checks its stubs:
`mypy.stubtest` imports the extension and compares every name, signature and type
with the stub (entries it may not judge are in tests/stubtest-allowlist.txt, each
with a comment saying why)."""

import os
import subprocess
import sys

from helpers import REPO


def test_the_stub_matches_the_extension():
    env = dict(os.environ, MYPYPATH=str(REPO / "python"))
    p = subprocess.run(
        [
            sys.executable, "-m", "mypy.stubtest", "wasi_python._wasi_python",
            "--allowlist", str(REPO / "tests" / "stubtest-allowlist.txt"),
            "--mypy-config-file", str(REPO / "pyproject.toml"),
        ],
        cwd=REPO / "python", env=env, capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
