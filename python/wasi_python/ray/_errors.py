"""The errors and warnings of `wasi_python.ray`: `ActorLost`, `SessionLost`, `CompileNotice`."""

from __future__ import annotations

from typing import Any


class ActorLost(RuntimeError):
    """A run (or session turn) was held by a sandbox actor that died (killed, out of memory,
    its node lost). ``actor`` names it; the pool has replaced it, so a new run succeeds.
    Whether the lost run's tool calls had taken effect is not known."""

    def __init__(self, message: str, actor: str) -> None:
        super().__init__(message)
        self.actor = actor

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.actor))


class SessionLost(ActorLost):
    """A session's actor died. The session has been resumed on another actor from its last
    saved state (a fresh interpreter if it was never saved): ``lost_turns`` are the
    completed turns whose effects are gone (none when it saved after each turn); ``turn`` is
    the turn that was running, or being sent, when the actor was found dead (it did not
    complete). Run the next turn as usual."""

    def __init__(self, message: str, actor: str, lost_turns: tuple[int, ...], turn: int, resumed_on: str) -> None:
        super().__init__(message, actor)
        self.lost_turns = lost_turns
        self.turn = turn
        self.resumed_on = resumed_on

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.actor, self.lost_turns, self.turn, self.resumed_on))


class CompileNotice(RuntimeWarning):
    """A worker had to compile the guest (or build a snapshot) instead of loading what the
    install or the cache ships: minutes of CPU on that node, once. Warned once per message."""
