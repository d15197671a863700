"""Run untrusted Python in a WebAssembly sandbox, and offer it your own functions as tools.

    >>> from wasi_python import run
    >>> run(["-c", "print(6 * 7)"]).stdout
    b'42\\n'
"""

from ._run import DEFAULTS, ArtifactsMissing, artifacts, run
from ._types import Completed, Grant

__all__ = ["run", "Completed", "Grant", "artifacts", "ArtifactsMissing", "DEFAULTS"]
