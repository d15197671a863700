"""Sandboxes on a Ray cluster: ``pip install wasi-python-sandbox[ray]``.

A `SandboxPool` is a set of Ray actors, each a process holding a warm runtime (the compiled
guest and the default preload snapshot loaded) that runs several guests at once, one per
CPU it is given. ``pool.run``, ``await pool.run_async`` and ``pool.map`` take ``run``'s
keywords and return the same `wasi_python.Completed` (tool and file records included) as
a local run; ``pool.session()`` is a `Session` that lives on one actor, can be saved after
each turn and continues on another actor when its own dies.

Tools and gates follow one rule. One that pickles (Ray's cloudpickle) is sent to the
worker and runs there, beside the sandbox. One that must keep the caller's authority (it
closes over a database connection, a client session, a lock) is marked ``stay(fn)``: the
worker offers the guest a tool with the same name, schema, docstring and timeout, and each
call crosses back to this process through the actor's mailbox, where the function runs;
the gate, the schema check, the timeout and the record are the worker's, as for a local
call. One that neither pickles nor is marked is refused before any work, naming it.

See docs/ray.md. Importing ``wasi_python`` never imports this module (nor Ray).
"""

from __future__ import annotations

try:
    import ray  # noqa: F401 - the extra's dependency, imported by every module below
    import ray.exceptions  # noqa: F401
    from ray import cloudpickle  # noqa: F401
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("wasi_python.ray needs Ray: pip install 'wasi-python-sandbox[ray]'") from e

from ._errors import ActorLost, CompileNotice, SessionLost
from ._pool import SandboxPool
from ._pool_session import PoolSession
from ._stay import Stay, stay
from ._traps import protect_local_runs
from ._worker import SandboxActor

__all__ = ["SandboxPool", "PoolSession", "stay", "Stay", "ActorLost", "SessionLost", "CompileNotice", "protect_local_runs"]

# Each public name is wasi_python.ray's, wherever in the package it is defined: reprs,
# tracebacks and pickles (by reference) name it here, so they do not depend on the layout.
for _public in (SandboxPool, PoolSession, stay, Stay, ActorLost, SessionLost, CompileNotice, protect_local_runs, SandboxActor):
    _public.__module__ = __name__
del _public
