"""Run untrusted Python in a WebAssembly sandbox, and offer it your own functions as tools.

    >>> from wasi_python import run
    >>> run(["-c", "print(6 * 7)"]).stdout
    b'42\\n'
"""

from __future__ import annotations

from . import _lazy
from ._records import Completed, Display, FileFault, FileRecord, Stderr, Stdout
from ._run import DEFAULTS, TOOL_DEFAULTS, ArtifactsMissing, PreloadError, artifacts, default_preload, prepare, run
from ._types import Grant

# What `run` needs is imported above; the other public names on first use (PEP 562), so a
# new process that imports the package and makes a run loads only that (no `typing`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


    from ._async import run_async, set_async_workers, stream
    from ._files import Errno, FileProvider, MemoryFiles, Mount, Stat, WritableFileProvider, ZipFiles
    from ._launch import keep_frame_stacks, launch_policy, set_launch_policy
    from ._network import Network, NetworkRecord, NetworkRequest, Secret
    from ._notices import Notice, notices
    from ._session import Session, SessionBusy, SessionEnded
    from ._snapshot import Snapshot, SnapshotError

_ON_FIRST_USE = {
    name: module
    for module, names in (
        ("_async", ("run_async", "set_async_workers", "stream")),
        ("_files", ("Errno", "FileProvider", "MemoryFiles", "Mount", "Stat", "WritableFileProvider", "ZipFiles")),
        ("_launch", ("keep_frame_stacks", "launch_policy", "set_launch_policy")),
        ("_network", ("Network", "NetworkRecord", "NetworkRequest", "Secret")),
        ("_notices", ("Notice", "notices")),
        ("_session", ("Session", "SessionBusy", "SessionEnded")),
        ("_snapshot", ("Snapshot", "SnapshotError")),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    return _lazy.attribute(globals(), _ON_FIRST_USE, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_FIRST_USE))


__all__ = [
    "run",
    "run_async",
    "stream",
    "Session",
    "SessionEnded",
    "SessionBusy",
    "Snapshot",
    "SnapshotError",
    "Completed",
    "Display",
    "Stdout",
    "Stderr",
    "Grant",
    "Mount",
    "FileProvider",
    "WritableFileProvider",
    "Stat",
    "Errno",
    "MemoryFiles",
    "ZipFiles",
    "FileRecord",
    "FileFault",
    "Network",
    "Secret",
    "NetworkRecord",
    "NetworkRequest",
    "artifacts",
    "ArtifactsMissing",
    "PreloadError",
    "default_preload",
    "prepare",
    "set_async_workers",
    "keep_frame_stacks",
    "launch_policy",
    "set_launch_policy",
    "notices",
    "Notice",
    "DEFAULTS",
    "TOOL_DEFAULTS",
]
