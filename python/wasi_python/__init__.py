"""Run untrusted Python in a WebAssembly sandbox, and offer it your own functions as tools.

    >>> from wasi_python import run
    >>> run(["-c", "print(6 * 7)"]).stdout
    b'42\\n'
"""

from ._async import run_async, set_async_workers, stream
from ._files import Errno, FileProvider, MemoryFiles, Mount, Stat, WritableFileProvider, ZipFiles
from ._launch import keep_frame_stacks, launch_policy, set_launch_policy
from ._network import Network, NetworkRecord, NetworkRequest, Secret
from ._notices import Notice, notices
from ._records import Completed, Display, FileFault, FileRecord, Stderr, Stdout
from ._run import DEFAULTS, TOOL_DEFAULTS, ArtifactsMissing, PreloadError, artifacts, default_preload, prepare, run
from ._session import Session, SessionBusy, SessionEnded
from ._snapshot import Snapshot, SnapshotError
from ._types import Grant

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
