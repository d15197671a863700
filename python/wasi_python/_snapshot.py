"""``Snapshot``: a resting session's interpreter, to fork, save and load.

A snapshot holds everything the guest held: modules, variables, functions, classes,
objects, and whatever secrets it was given in ``env`` or read. ``Session.snapshot()``
takes one between turns; ``Session(snapshot=...)`` and ``run(argv, snapshot=...)`` start
from it with their own limits, env, grants, mounts and tools (each start is a
copy-on-write fork). ``save(path)`` / ``Snapshot.load(path)`` and ``to_bytes()`` /
``Snapshot.from_bytes(data)`` carry it to another process of the same package version,
on the same guest artifacts. The file's checksum catches accidents only; ``key=`` signs
a file (HMAC-SHA256) and, on load, refuses one that is unsigned, edited or signed with
another key. ``to_bytes(since=parent)`` saves a delta, the pages that differ from a
snapshot saved (or loaded) before; ``from_bytes(delta, base=parent)`` loads it over that
snapshot. See docs/snapshots.md.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Any, Optional, Union

from . import _wasi_python as _ext

__all__ = ["Snapshot", "SnapshotError"]

SnapshotError = _ext.SnapshotError

#: The largest file ``Snapshot.load`` reads (a saved memory of 4 GiB compresses far below).
_MAX_FILE = 4 << 30

_Key = Union[bytes, bytearray, memoryview]


def _key(key: Optional[_Key]) -> Optional[bytes]:
    """``key=``: None, or bytes of at least 16 (the extension refuses shorter ones)."""
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"key must be bytes, not {type(key).__name__}")
    return bytes(key)


def _refused(message: str, kind: str) -> SnapshotError:
    err = SnapshotError(message)
    err.kind = kind
    return err


def _read_file(target: str) -> bytes:
    """A snapshot file's bytes: opened without blocking (a FIFO would wait for a writer)
    and without becoming a controlling terminal; refused unless the opened descriptor is a
    regular file (``fstat``, so a link swapped after a check cannot fool it); at most
    ``_MAX_FILE`` bytes read, so a file that grows meanwhile cannot be read forever."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(target, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(f"{target} is not a regular file", "not_a_file")
        if st.st_size > _MAX_FILE:
            raise _refused(f"{target} is {st.st_size} bytes, more than a snapshot file can be", "too_large")
        f = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with f:
        limit = _MAX_FILE + 1
        parts = []
        total = 0
        while total < limit:
            # The whole file in one read when it is as large as it said (plus a byte to
            # see its end); a read is at most 2 GiB on Linux, hence the loop.
            chunk = f.read(min(max(st.st_size + 1 - total, 1 << 20), limit - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        if total > _MAX_FILE:
            raise _refused(f"{target} grew past {_MAX_FILE} bytes while it was read", "too_large")
    return parts[0] if len(parts) == 1 else b"".join(parts)


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

    @property
    def new_pages(self) -> int:
        """The 4 KiB pages this snapshot added over what it was taken against (its
        session's previous snapshot, or what the session started from) or, loaded, the
        pages its file stored: what taking it copied."""
        return int(self._handle.new_pages)

    @property
    def layered_pages(self) -> int:
        """The 4 KiB pages it holds over its base image, shared by all its forks."""
        return int(self._handle.layered_pages)

    @property
    def id(self) -> Optional[str]:
        """The id (hex) of the file it was first saved as or loaded from, which a delta
        saved against it names; None before it is saved."""
        return self._handle.id

    def to_bytes(self, *, key: Optional[_Key] = None, since: Optional["Snapshot"] = None) -> bytes:
        """The saved form: a versioned header, then the memory pages that differ from
        the base image, compressed. ``Snapshot.from_bytes`` reads it back. With ``key``
        (bytes, at least 16: e.g. ``secrets.token_bytes(32)``) the file is signed, and
        ``from_bytes(data, key=key)`` accepts it only unedited and under that key.

        With ``since`` (a snapshot saved or loaded before, of the same line), a delta: only
        the pages that differ from ``since``'s, naming its file; it loads only over it
        (``from_bytes(data, base=since)``). ``SnapshotError`` with ``kind="parent_not_saved"``
        if ``since`` was never saved or loaded."""
        if since is not None and not isinstance(since, Snapshot):
            raise TypeError(f"since must be a wasi_python.Snapshot, not {type(since).__name__}")
        return bytes(self._handle.to_bytes(_key(key), None if since is None else since._handle))

    def save(self, path: Union[str, "os.PathLike[str]"], *, key: Optional[_Key] = None, since: Optional["Snapshot"] = None) -> None:
        """Writes ``to_bytes(key=key, since=since)`` to ``path``: a new temporary file in
        the same folder (created exclusively, readable by its owner only: a link planted
        there is never followed), synced, then renamed over ``path``; removed if anything
        fails."""
        target = os.fspath(path)
        if not isinstance(target, str):
            raise TypeError("path must be a str or os.PathLike[str]")
        data = self.to_bytes(key=key, since=since)
        folder, name = os.path.split(target)
        fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    @classmethod
    def from_bytes(cls, data: Union[bytes, bytearray, memoryview], *, key: Optional[_Key] = None, base: Optional["Snapshot"] = None) -> "Snapshot":
        """A saved snapshot back. Raises ``SnapshotError`` (``kind`` names the cause: a
        wrong magic, another format version, guest, wasmtime or package, a bad checksum,
        a truncated page list...) before any guest code runs. With ``key``, a file that
        is not signed (``"unsigned"``) or not signed with this key, or edited since
        (``"signature"``), is refused before anything else is read from it. A delta
        (``to_bytes(since=...)``) loads over ``base``, the snapshot of the file it was
        saved against: without it ``kind="no_parent"``, over another ``"other_parent"``;
        a file that is not a delta ignores ``base``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        if base is not None and not isinstance(base, Snapshot):
            raise TypeError(f"base must be a wasi_python.Snapshot, not {type(base).__name__}")
        secret = _key(key)
        from . import _run  # imports this module: here, not at the top

        return cls(_ext.SnapshotHandle.load(str(_run.artifacts()), bytes(data), secret, None if base is None else base._handle))

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"], *, key: Optional[_Key] = None, base: Optional["Snapshot"] = None) -> "Snapshot":
        """``Snapshot.from_bytes`` of a file: a regular file (else ``SnapshotError`` with
        ``kind="not_a_file"``: a device, a pipe or a folder is never read) of at most
        4 GiB."""
        target = os.fspath(path)
        if not isinstance(target, str):
            raise TypeError("path must be a str or os.PathLike[str]")
        secret = _key(key)
        return cls.from_bytes(_read_file(target), key=secret, base=base)

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
