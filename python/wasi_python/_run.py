"""``run``: argument checking and defaults; the work happens in the extension."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from . import _wasi_python as _ext
from ._types import Completed, Grant

__all__ = ["run", "artifacts", "ArtifactsMissing", "DEFAULTS"]

ArtifactsMissing = _ext.ArtifactsMissing

#: The default limits of a run.
DEFAULTS: Mapping[str, Any] = {
    "memory_bytes": 1 << 30,
    "deadline_s": 60.0,
    "output_bytes": 16 << 20,
    "fuel": None,
}

_ARTIFACTS_ENV = "WASI_PYTHON_ARTIFACTS"
_FIX = "cargo xtask dist"


def artifacts() -> Path:
    """The folder holding the guest artifacts: ``$WASI_PYTHON_ARTIFACTS``, else the
    ``_artifacts`` folder inside this package (filled by ``cargo xtask dist``, and
    carried by a built wheel).

    Raises ArtifactsMissing, naming what is missing and the command that fixes it.
    """
    env = os.environ.get(_ARTIFACTS_ENV)
    path = Path(env) if env else Path(__file__).resolve().parent / "_artifacts"
    _ext.check_artifacts(str(path))
    return path


def _precompile(where: str | os.PathLike[str] | None = None) -> None:
    """Compiles the guest for this machine's wasmtime now (``cargo xtask dist`` calls it)."""
    import time

    path = str(where) if where is not None else str(artifacts())
    t = time.perf_counter()
    files = _ext.precompile(path)
    print(f"guest ready in {time.perf_counter() - t:.1f} s: {', '.join(map(str, files))}")


def _check_int(name: str, value: Any, *, minimum: int = 0, optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


def _check_seconds(name: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, not {value!r}")
    return float(value)


def _check_argv(argv: Any) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError(f"argv must be a list of str, such as ['-c', 'print(1)'], not {type(argv).__name__}")
    for a in argv:
        if not isinstance(a, str):
            raise TypeError(f"argv must hold only str, not {type(a).__name__}")
    return list(argv)


def _check_env(env: Any) -> list[tuple[str, str]]:
    if env is None:
        return []
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str, not {type(env).__name__}")
    out = []
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"env must map str to str; {k!r}: {v!r} is not")
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError(f"env: {k!r} is not a valid environment variable name")
        out.append((k, v))
    return out


def _check_grants(grants: Any) -> list[tuple[str, str, bool]]:
    if isinstance(grants, (Grant, str)) or not isinstance(grants, Iterable):
        raise TypeError("grants must be a sequence of Grant")
    out = []
    for g in grants:
        if not isinstance(g, Grant):
            raise TypeError(f"grants must hold Grant objects, not {type(g).__name__}")
        if not isinstance(g.guest_path, str):
            raise TypeError("Grant.guest_path must be a str")
        out.append((os.fspath(g.host_path), g.guest_path, bool(g.writable)))
    return out


def _check_stdin(stdin: Any) -> bytes:
    if isinstance(stdin, str):
        return stdin.encode()
    if not isinstance(stdin, (bytes, bytearray, memoryview)):
        raise TypeError(f"stdin must be bytes or str, not {type(stdin).__name__}")
    return bytes(stdin)


class _CancelWatch:
    """Forwards a ``threading.Event``-like ``cancel=`` to the runtime's token."""

    def __init__(self, cancel: Any, token: Any) -> None:
        self._done = threading.Event()
        self._cancel = cancel
        self._token = token
        self._thread = threading.Thread(target=self._watch, name="wasi-python-cancel", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        wait = getattr(self._cancel, "wait", None)
        while not self._done.is_set():
            fired = wait(0.005) if wait is not None else self._cancel.is_set()
            if fired:
                self._token.cancel()
                return
            if wait is None:
                self._done.wait(0.005)

    def stop(self) -> None:
        self._done.set()


def _cancel_token(cancel: Any) -> tuple[Any, Optional[_CancelWatch]]:
    if cancel is None:
        return None, None
    if isinstance(cancel, _ext.CancelToken):
        return cancel, None
    if not callable(getattr(cancel, "is_set", None)):
        raise TypeError("cancel must be a threading.Event or have is_set()")
    token = _ext.CancelToken()
    if cancel.is_set():
        token.cancel()
        return token, None
    return token, _CancelWatch(cancel, token)


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | str = b"",
    env: Optional[Mapping[str, str]] = None,
    grants: Iterable[Grant] = (),
    memory_bytes: int = DEFAULTS["memory_bytes"],
    deadline_s: Optional[float] = DEFAULTS["deadline_s"],
    output_bytes: int = DEFAULTS["output_bytes"],
    fuel: Optional[int] = None,
    cancel: Any = None,
    host: Any = None,
) -> Completed:
    """Runs a CPython command line in the sandbox and returns how it ended.

    ``argv`` is CPython's command line without the program name: ``["-c", code]``,
    ``["-m", module, ...]``, ``[script_path, ...]`` (a path inside a grant), or ``[]``
    to read the program from ``stdin``. Nothing the guest does makes ``run`` raise:
    exits, exceptions, traps and exhausted limits are all a ``Completed``.
    Bad arguments raise TypeError or ValueError naming the parameter, before any work.
    """
    args = _check_argv(argv)
    stdin_b = _check_stdin(stdin)
    env_l = _check_env(env)
    grants_l = _check_grants(grants)
    memory = _check_int("memory_bytes", memory_bytes, minimum=40 << 20)
    deadline = _check_seconds("deadline_s", deadline_s)
    out_cap = _check_int("output_bytes", output_bytes)
    fuel_cap = _check_int("fuel", fuel, minimum=1, optional=True)
    if host is not None and not callable(host):
        raise TypeError("host must be a callable taking bytes and returning bytes")
    where = str(artifacts())
    token, watch = _cancel_token(cancel)
    try:
        d = _ext.run(where, args, stdin_b, env_l, grants_l, memory, deadline, out_cap, fuel_cap, token, host)
    finally:
        if watch is not None:
            watch.stop()
    return Completed(
        exit_code=d["exit_code"],
        stdout=d["stdout"],
        stderr=d["stderr"],
        trapped=d["trapped"],
        truncated=tuple(d["truncated"]),
        fuel_used=d["fuel_used"],
        duration_s=d["duration_s"],
    )
