"""The exceptions a tool or a gate raises to answer the guest.

They sit below every module of the tools layer (a converter raises ToolError too), so
none of those modules has to import the facade, `_tools`.
"""

from __future__ import annotations

__all__ = ["ToolDenied", "ToolError", "ToolTimeout"]


class ToolError(Exception):
    """Raised by a tool to fail a call; its message crosses to the guest (``host.ToolError``).

    Raised by a gate, it refuses the call with its message: the guest reads
    ``host.ToolDenied`` (a ``host.ToolError``), and the record says "denied" with the
    message, its fault "ToolError: ..." telling it from a ToolDenied."""


class ToolDenied(ToolError):
    """Raised by a gate to refuse a call; the guest reads its message as a ``PermissionError``."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool call that ran past its time; the guest raises ``host.ToolTimeout``."""
