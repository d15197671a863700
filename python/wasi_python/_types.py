"""The plain data types of the public API."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .tools import ToolRecord

__all__ = ["Completed", "Grant"]


@dataclass(frozen=True, slots=True)
class Grant:
    """A host folder offered to the guest at ``guest_path``; read-only unless ``writable``.

    The guest cannot leave the folder by ``..``, absolute paths or symlinks.
    """

    host_path: str | os.PathLike[str]
    guest_path: str
    writable: bool = False


@dataclass(frozen=True, slots=True)
class Completed:
    """How a run ended. Every guest behaviour ends here; ``run`` does not raise for it.

    - ``exit_code``: the exit status (0-255), or None when the run trapped.
    - ``stdout``/``stderr``: captured bytes, at most ``output_bytes`` each.
    - ``trapped``: None, or why the host stopped the guest: "deadline", "out of fuel",
      "cancelled", "stack overflow", "memory", "unreachable", "memory out of bounds", ...
    - ``truncated``: the streams that dropped output past the cap ("stdout", "stderr").
    - ``fuel_used``: fuel spent when ``fuel=`` was given, else None.
    - ``tools``: the call record when ``tools=`` was given, else None.
    """

    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    trapped: Optional[str]
    truncated: tuple[str, ...]
    fuel_used: Optional[int]
    duration_s: float
    tools: Optional["ToolRecord"] = field(default=None)

    @property
    def ok(self) -> bool:
        """True when the guest exited with status 0."""
        return self.exit_code == 0 and self.trapped is None
