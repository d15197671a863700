"""``stay()``: a tool or gate marked to run in the caller's process, and its spec as a worker receives it."""

from __future__ import annotations

from typing import Any


class Stay:
    """A tool or gate marked to run in the caller's process (made by `stay`)."""

    __slots__ = ("target",)

    def __init__(self, target: Any) -> None:
        if isinstance(target, Stay):
            target = target.target
        if not callable(target):
            raise TypeError(f"stay() takes a tool, a function or a gate, not {type(target).__name__}")
        self.target = target

    def __repr__(self) -> str:
        return f"stay({self.target!r})"


def stay(target: Any) -> Stay:
    """Marks a tool (or a function, or ``gate=``) to run here, in the caller's process, not
    on the worker: ``tools=[stay(query_db)]``, ``gate=stay(my_gate)``. The guest sees the
    same tool; each call crosses back to this process (2-3 ms on one machine, two Ray messages)."""
    return Stay(target)


class StaySpec:
    """A staying tool or gate as the worker receives it: its face, its unit number, and
    whether it is async (awaited, so cancelled when its call ends) or sync."""

    __slots__ = ("face", "unit", "is_async")

    def __init__(self, face: dict[str, Any], unit: int, is_async: bool) -> None:
        self.face, self.unit, self.is_async = face, unit, is_async

    def __reduce__(self) -> tuple[Any, ...]:
        return (StaySpec, (self.face, self.unit, self.is_async))
