"""The pool's places: the actor each holds, started, picked by load, and replaced when it is lost."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable, Optional

import ray

from ._bundle import Bundle
from ._errors import ActorLost
from ._server import Server
from ._worker import RemoteActor


class Slot:
    """One place in the pool: its current actor, replaced when it dies."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.actor: Any = None
        self.name = ""
        self.in_flight = 0


class Slots:
    """A pool's slots (``all``) and its actors: started now, one per slot, named
    ``wasi-python-<pool>-<slot>.<generation>``; each run goes to the least busy (`pick`,
    `done`); an actor found dead is replaced in its slot (`lost`), and the new one's facts
    go to ``took`` when it is warm. ``lock`` guards the slots and ``closed``. Once a run
    has a staying tool or gate, ``server`` polls every actor's mailbox, new ones included."""

    def __init__(self, count: int, cpus_per_actor: int, max_in_flight: int, options: dict[str, Any], server: Server, took: Callable[[dict[str, Any]], None]) -> None:
        self.cpus_per_actor = cpus_per_actor
        self.max_in_flight = max_in_flight
        self._options = options
        self._id = uuid.uuid4().hex[:8]
        self.lock = threading.Lock()
        self.server = server
        self.all = [Slot(i) for i in range(count)]
        self._took = took
        self.closed = False
        self._watching = False
        for slot in self.all:
            self.start(slot)

    def start(self, slot: Slot) -> None:
        slot.generation += 1
        slot.name = f"wasi-python-{self._id}-{slot.index}.{slot.generation}"
        options = {"num_cpus": self.cpus_per_actor, "max_concurrency": self.max_in_flight + 16, "name": slot.name, **self._options}
        slot.actor = RemoteActor.options(**options).remote(slot.name, self.cpus_per_actor)
        slot.in_flight = 0
        if self._watching:
            self.server.watch(slot.actor, slot.name)

    def watch_all(self) -> None:
        """From the first run with a staying tool or gate on, every actor's mailbox is polled."""
        self._watching = True
        for slot in self.all:
            self.server.watch(slot.actor, slot.name)

    def bundle(self, kw: dict[str, Any]) -> Bundle:
        """A run's `Bundle`, its staying tools served from now on."""
        b = Bundle(kw, self.server)
        if b.has_stays:
            self.watch_all()
        return b

    def lost(self, slot: Slot, actor: Any, name: str, err: BaseException) -> ActorLost:
        """The error for a run ``actor`` held; replaces the actor (once)."""
        with self.lock:
            if slot.actor is actor and not self.closed:
                self.start(slot)
                replaced = threading.Thread(target=self._info_later, args=(slot.actor,), daemon=True)
                replaced.start()
        cause = type(err).__name__
        return ActorLost(f"the sandbox actor {name} was lost ({cause}) while it held this run; the pool replaced it with {slot.name}", name)

    def _info_later(self, actor: Any) -> None:
        try:
            self._took(ray.get(actor.info.remote()))
        except Exception:  # noqa: BLE001 - that one died too; the next run says so
            pass

    def pick(self) -> Slot:
        """The least busy slot, counted busier by one run until `done`."""
        with self.lock:
            if self.closed:
                raise RuntimeError("this SandboxPool is closed")
            slot = min(self.all, key=lambda s: s.in_flight)
            slot.in_flight += 1
            return slot

    def done(self, slot: Slot, generation: int) -> None:
        with self.lock:
            if slot.generation == generation:
                slot.in_flight -= 1

    def choose(self, index: Optional[int], avoid: Any = None) -> Slot:
        """The slot at ``index``, or else the least busy whose actor is not ``avoid`` (a
        session's home: not counted as a run)."""
        if index is not None:
            return self.all[index]
        candidates = [s for s in self.all if s.actor is not avoid] or self.all
        return min(candidates, key=lambda s: s.in_flight)

    def close(self) -> bool:
        """Refuses runs from now on; False when it was already closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            return True

    def kill(self) -> None:
        """Ends every actor (the runs they hold fail)."""
        for s in self.all:
            try:
                ray.kill(s.actor)
            except Exception:  # noqa: BLE001
                pass
