"""``Snapshot``: a resting session's interpreter, to fork, save and load.

A snapshot holds everything the guest held: modules, variables, functions, classes,
objects, and whatever secrets it was given in ``env`` or read. ``Session.snapshot()``
takes one between turns; ``Session(snapshot=...)`` and ``run(argv, snapshot=...)`` start
from it with their own limits, env, grants, mounts and tools (each start is a
copy-on-write fork). ``save(path)`` / ``Snapshot.load(path)`` and ``to_bytes()`` /
``Snapshot.from_bytes(data)`` carry it to another process of the same package version,
on the same guest artifacts. See docs/snapshots.md.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from . import _wasi_python as _ext

__all__ = ["Snapshot", "SnapshotError"]

SnapshotError = _ext.SnapshotError

#: The largest file ``Snapshot.load`` reads (a saved memory of 4 GiB compresses far below).
_MAX_FILE = 4 << 30


class Snapshot:
    """A session's interpreter as it rested between turns. Not made directly: use
    ``Session.snapshot()``, ``Snapshot.load(path)`` or ``Snapshot.from_bytes(data)``."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any) -> None:
        if not isinstance(handle, _ext.SnapshotHandle):
            raise TypeError("Snapshot is made by Session.snapshot(), Snapshot.load() or Snapshot.from_bytes()")
        self._handle = handle

    @property
    def memory_bytes(self) -> int:
        """The guest memory it holds: a session or run from it needs ``memory_bytes`` at least this."""
        return int(self._handle.memory_bytes)

    @property
    def base_modules(self) -> tuple[str, ...]:
        """The modules of the preload image its first session started from (a saved file
        stores only the pages that differ from that image)."""
        return tuple(self._handle.base_modules)

    def to_bytes(self) -> bytes:
        """The saved form: a versioned header, then the memory pages that differ from
        the base image, compressed. ``Snapshot.from_bytes`` reads it back."""
        return bytes(self._handle.to_bytes())

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes ``to_bytes()`` to ``path`` (a temporary file, then renamed)."""
        target = os.fspath(path)
        if not isinstance(target, str):
            raise TypeError("path must be a str or os.PathLike[str]")
        data = self.to_bytes()
        tmp = f"{target}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)

    @classmethod
    def from_bytes(cls, data: Union[bytes, bytearray, memoryview]) -> "Snapshot":
        """A saved snapshot back. Raises ``SnapshotError`` (``kind`` names the cause: a
        wrong magic, another format version, guest, wasmtime or package, a bad checksum,
        a truncated page list...) before any guest code runs."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        from . import _run  # imports this module: here, not at the top

        return cls(_ext.SnapshotHandle.load(str(_run.artifacts()), bytes(data)))

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Snapshot":
        """``Snapshot.from_bytes`` of a file."""
        target = os.fspath(path)
        size = os.stat(target).st_size
        if size > _MAX_FILE:
            err = SnapshotError(f"{target} is {size} bytes, more than a snapshot file can be")
            err.kind = "too_large"
            raise err
        with open(target, "rb") as f:
            return cls.from_bytes(f.read())

    def __repr__(self) -> str:
        base = ", ".join(self.base_modules) or "no preload"
        return f"<Snapshot {self.memory_bytes >> 20} MiB of guest memory, base: {base}>"


def check_snapshot(snapshot: Any, preload: Any = None) -> Optional[Any]:
    """``snapshot=``: None or a ``Snapshot``; its extension handle. A snapshot has the
    modules its session had, so naming ``preload=`` too is a ValueError."""
    if snapshot is None:
        return None
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"snapshot must be a wasi_python.Snapshot, not {type(snapshot).__name__}")
    if preload is not None:
        raise ValueError("preload: a guest started from a snapshot has the snapshot's modules; pass one or the other")
    return snapshot._handle
