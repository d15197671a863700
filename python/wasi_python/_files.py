"""Serve files from your own code: ``Mount``, the provider protocols, ``MemoryFiles`` and
``ZipFiles`` (docs/files.md; the record of a run's file calls is `_records.FileRecord`)."""

from __future__ import annotations

import contextvars
import enum
import errno as _errno
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Optional, Protocol, Sequence, runtime_checkable

from . import _wasi_python as _ext
from ._types import MAX_SECONDS, items_of, show_number
from . import _otel

__all__ = [
    "Mount",
    "FileProvider",
    "WritableFileProvider",
    "Stat",
    "Errno",
    "MemoryFiles",
    "ZipFiles",
]

Kind = Literal["file", "dir"]


@dataclass(frozen=True, slots=True)
class Stat:
    """What ``stat`` answers: ``kind`` "file" or "dir", ``size`` in bytes, ``mtime_ns``."""

    kind: Kind
    size: int = 0
    mtime_ns: int = 0


#: The errnos a provider may answer with (by returning a member, or raising an
#: ``OSError`` with that errno); the guest sees the same one.
Errno = enum.IntEnum(  # type: ignore[misc]
    "Errno",
    {
        name: getattr(_errno, name)
        for name in (
            "EACCES", "EAGAIN", "EBADF", "EBUSY", "EEXIST", "EFBIG", "EILSEQ", "EINVAL", "EIO", "EISDIR",
            "ELOOP", "EMFILE", "ENAMETOOLONG", "ENOENT", "ENOMEM", "ENOSPC", "ENOSYS", "ENOTDIR",
            "ENOTEMPTY", "ENOTSUP", "EPERM", "EROFS", "ETIMEDOUT", "EXDEV",
        )
        if hasattr(_errno, name)
    },
)


@runtime_checkable
class FileProvider(Protocol):
    """The read half of a mount's provider. Paths are normalised and absolute inside the
    mount: ``"/"`` is the mount itself, ``"/a/b.csv"`` a file in its folder ``a``. Methods
    may be ``async def``. Refuse by raising ``OSError`` (its errno; with none, its class
    names one: FileNotFoundError is ENOENT) or by returning an ``Errno`` member; any other
    exception is a fault: the guest sees EIO, ``Completed.files`` keeps the type and first line."""

    def stat(self, path: str) -> Stat: ...
    def list(self, path: str) -> Sequence[tuple[str, Kind]]: ...
    def read(self, path: str) -> bytes: ...


@runtime_checkable
class WritableFileProvider(FileProvider, Protocol):
    """Adds the write half. ``write`` gets a file's whole content when the guest closes
    it (or fsyncs it, or the run ends with it open); a creation or truncation arrives as
    ``write(path, b"")``."""

    def write(self, path: str, data: bytes) -> None: ...
    def mkdir(self, path: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def rmdir(self, path: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...


_READ = ("stat", "list", "read")
_WRITE = ("write", "mkdir", "remove", "rmdir", "rename")


@dataclass(frozen=True, slots=True)
class Mount:
    """Serves ``guest_path`` (absolute, such as ``/data``) from ``provider``.

    ``writable=True`` lets the guest change it and needs the provider's write half.
    ``timeout_s`` bounds one provider call (the guest then gets ETIMEDOUT); calls also
    end at the run's deadline or cancel. ``workdir=`` may name a writable mount, so the
    guest starts in it and you get its files back."""

    provider: Any
    guest_path: str
    writable: bool = False
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.guest_path, str):
            raise TypeError(f"Mount: guest_path must be a str, not {type(self.guest_path).__name__}")
        if not self.guest_path.startswith("/"):
            raise ValueError(f"Mount: guest_path must be absolute, not {self.guest_path!r}")
        if not isinstance(self.writable, bool):
            raise TypeError(f"Mount: writable must be a bool, not {type(self.writable).__name__}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)):
            raise TypeError(f"Mount: timeout_s must be a number of seconds, not {type(self.timeout_s).__name__}")
        # Compared, never converted first: NaN fails both comparisons, infinities one.
        if not (0 < self.timeout_s <= MAX_SECONDS):
            raise ValueError(f"Mount: timeout_s must be a positive finite number of seconds at most {MAX_SECONDS:g}, not {show_number(self.timeout_s)}")
        # MemoryFiles is served by the runtime itself, its write half too.
        halves = _READ + (_WRITE if self.writable and not isinstance(self.provider, MemoryFiles) else ())
        missing = [m for m in halves if not callable(getattr(self.provider, m, None))]
        if missing:
            half = "a WritableFileProvider" if self.writable else "a FileProvider"
            raise TypeError(f"Mount: the provider {type(self.provider).__name__} is not {half}: it lacks {', '.join(missing)}")

    def _for_ext(self, dispatcher: Any) -> Any:
        if isinstance(self.provider, MemoryFiles):
            provider = self.provider._handle(self.writable)
        else:
            provider = _Adapter(self.provider, dispatcher)
        return _ext.MountSpec(provider=provider, guest_path=self.guest_path, writable=self.writable, timeout_s=float(self.timeout_s))


class _NeverCancelled:
    @staticmethod
    def is_cancelled() -> bool:
        return False


_CLASS_ERRNO = (
    (FileNotFoundError, "ENOENT"),
    (FileExistsError, "EEXIST"),
    (IsADirectoryError, "EISDIR"),
    (NotADirectoryError, "ENOTDIR"),
    (PermissionError, "EACCES"),
    (TimeoutError, "ETIMEDOUT"),
    (BlockingIOError, "EAGAIN"),
)


def _first_line(e: BaseException) -> str:
    line = str(e).split("\n", 1)[0]
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


class _Adapter:
    """What the extension calls for a Python provider: ``call(op, path, arg)`` answers
    ``("ok", value)``, ``("errno", name)`` or ``("fault", "Type: first line")``."""

    def __init__(self, provider: Any, dispatcher: Any) -> None:
        self._provider = provider
        self._dispatcher = dispatcher

    def call(self, op: str, path: str, arg: Any) -> tuple[str, Any]:
        tracer = _otel.tracer()
        if tracer is None:
            return self._call(op, path, arg)
        # Under the run's span: the dispatcher's context holds it (this thread's has none).
        if self._dispatcher is None:
            return self._traced(tracer, op, path, arg)
        return self._dispatcher.context.copy().run(self._traced, tracer, op, path, arg)

    def _traced(self, tracer: Any, op: str, path: str, arg: Any) -> tuple[str, Any]:
        with _otel.span("wasi_python.file_call", {"op": op, "path": path}, tracer) as s:
            out = self._call(op, path, arg)
            _otel.set_outcome(s, {"outcome": out[0] if out[0] != "errno" else out[1]}, out[1] if out[0] == "fault" else None)
            return out

    def _call(self, op: str, path: str, arg: Any) -> tuple[str, Any]:
        try:
            fn = getattr(self._provider, op)
            out = fn(path, arg) if op in ("write", "rename") else fn(path)
            if inspect.isawaitable(out):
                out = self._dispatcher.run_awaitable(out, contextvars.copy_context(), _NeverCancelled)
            if isinstance(out, Errno):
                return ("errno", out.name)
            if op == "stat":
                kind = getattr(out, "kind", None)
                if kind not in ("file", "dir"):
                    return ("fault", f"TypeError: stat answered {type(out).__name__}, not a Stat")
                return ("ok", (kind, int(getattr(out, "size", 0) or 0), int(getattr(out, "mtime_ns", 0) or 0)))
            if op == "list":
                return ("ok", [(str(n), str(k)) for n, k in out])
            if op == "read":
                if not isinstance(out, (bytes, bytearray, memoryview)):
                    return ("fault", f"TypeError: read answered {type(out).__name__}, not bytes")
                return ("ok", bytes(out))
            return ("ok", None)
        except OSError as e:
            if e.errno is not None and e.errno in _errno.errorcode:
                return ("errno", _errno.errorcode[e.errno])
            for cls, name in _CLASS_ERRNO:
                if isinstance(e, cls):
                    return ("errno", name)
            return ("errno", "EIO")
        except BaseException as e:  # noqa: BLE001 - a provider's fault never crosses to the guest
            return ("fault", _first_line(e))


def _norm(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


class MemoryFiles:
    """Files in a dict, ``{"data.csv": b"...", "sub/x.json": b"..."}`` (folders are implied
    by the paths). Read-only unless its ``Mount`` is writable; then the dict is updated as
    the guest closes files (keys in the dict's style: without a leading ``/`` unless the
    dict used one), and removed or renamed ones follow. Empty folders the guest makes are
    not in the dict. Each run starts from the dict as it is then. Served by the runtime
    itself, without a thread or the GIL per call."""

    def __init__(self, files: Optional[Mapping[str, bytes]] = None) -> None:
        if files is None:
            files = {}
        if not isinstance(files, Mapping):
            raise TypeError(f"MemoryFiles: files must be a dict of path -> bytes, not {type(files).__name__}")
        for k, v in files.items():
            if not isinstance(k, str):
                raise TypeError(f"MemoryFiles: a path must be a str, not {type(k).__name__}")
            if not isinstance(v, (bytes, bytearray)):
                raise TypeError(f"MemoryFiles: {k!r} must hold bytes, not {type(v).__name__}")
        self.files = files
        self._lock = threading.Lock()

    # The read half, for use from Python (the runtime serves the guest itself).
    def stat(self, path: str) -> Stat:
        p = _norm(path)
        for k, v in self.files.items():
            if _norm(k) == p:
                return Stat("file", len(v))
        if p == "/" or any(_norm(k).startswith(p + "/") for k in self.files):
            return Stat("dir")
        raise FileNotFoundError(path)

    def list(self, path: str) -> list[tuple[str, Kind]]:
        p = _norm(path).rstrip("/") + "/"
        out: dict[str, Kind] = {}
        for k in self.files:
            n = _norm(k)
            if n.startswith(p):
                rest = n[len(p):].split("/")
                out[rest[0]] = "file" if len(rest) == 1 else "dir"
        return sorted(out.items())

    def read(self, path: str) -> bytes:
        p = _norm(path)
        for k, v in self.files.items():
            if _norm(k) == p:
                return bytes(v)
        raise FileNotFoundError(path)

    def _key(self, path: str) -> str:
        """The dict key for a mount path, in the dict's own style."""
        for k in self.files:
            if _norm(k) == path:
                return k
        slash = any(k.startswith("/") for k in self.files)
        return path if slash else path.lstrip("/")

    def _observe(self, op: str, path: str, data: Optional[bytes], to: Optional[str]) -> None:
        files = self.files
        if not isinstance(files, dict):
            return
        with self._lock:
            if op == "write":
                files[self._key(path)] = data  # type: ignore[index]
            elif op == "remove":
                files.pop(self._key(path), None)
            elif op == "rename" and to is not None:
                moved = {k: v for k, v in files.items() if _norm(k) == path or _norm(k).startswith(path + "/")}
                for k, v in moved.items():
                    del files[k]
                    files[self._key(to + _norm(k)[len(path):])] = v

    def _handle(self, writable: bool) -> Any:
        with self._lock:
            snapshot = {_norm(k): (bytes(v) if isinstance(v, bytearray) else v) for k, v in self.files.items()}
        return _ext.MemoryFilesHandle(snapshot, writable, self._observe if writable else None)

    # Pickles as a copy of its files (without the lock), so a mount can be sent to another
    # process (wasi_python.ray): a run there changes that copy.
    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"files": dict(self.files)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.files = state["files"]
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryFiles({len(self.files)} files)"


class ZipFiles:
    """The members of a zip archive, read-only (folders implied by member names too)."""

    def __init__(self, path: Any) -> None:
        import os
        import zipfile

        self._zip = zipfile.ZipFile(os.fspath(path))
        self._lock = threading.Lock()
        self._files: dict[str, Any] = {}
        self._dirs: dict[str, dict[str, Kind]] = {"/": {}}
        for info in self._zip.infolist():
            p = _norm(info.filename)
            if p == "/":
                continue
            parts = p.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/" + "/".join(parts[:i])
                parent = "/" + "/".join(parts[: i - 1])
                self._dirs.setdefault(d, {})
                self._dirs.setdefault(parent, {})[parts[i - 1]] = "dir"
            parent = "/" + "/".join(parts[:-1])
            if info.is_dir():
                self._dirs.setdefault(p, {})
                self._dirs.setdefault(parent, {})[parts[-1]] = "dir"
            else:
                self._files[p] = info
                self._dirs.setdefault(parent, {})[parts[-1]] = "file"

    def stat(self, path: str) -> Stat:
        if path in self._dirs:
            return Stat("dir")
        info = self._files.get(path)
        if info is None:
            raise FileNotFoundError(path)
        import calendar

        mtime = calendar.timegm(info.date_time + (0, 0, 0)) * 10**9
        return Stat("file", info.file_size, mtime)

    def list(self, path: str) -> list[tuple[str, Kind]]:
        if path in self._files:
            raise NotADirectoryError(path)
        entries = self._dirs.get(path)
        if entries is None:
            raise FileNotFoundError(path)
        return sorted(entries.items())

    def read(self, path: str) -> bytes:
        if path in self._dirs:
            raise IsADirectoryError(path)
        info = self._files.get(path)
        if info is None:
            raise FileNotFoundError(path)
        with self._lock:
            return self._zip.read(info)

    def close(self) -> None:
        self._zip.close()


def check_mounts(mounts: Any) -> list[Mount]:
    """``mounts=``: an iterable of ``Mount``."""
    if mounts is None:
        return []
    return items_of("mounts", mounts, Mount, "Mount objects", "write mounts=[Mount(...)]")


def for_ext(mounts: Iterable[Mount], dispatcher: Any) -> list[Any]:
    """The mounts as the extension takes them; Python providers answer on ``dispatcher``."""
    return [m._for_ext(dispatcher) for m in mounts]
