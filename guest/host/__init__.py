"""The door to the embedder: its tools, callable from guest code.

``from host import tools`` asks the host once for the tools this run offers
and gives one function per tool.  A call that fails raises a ToolError
subclass; the program runs on.  ``import host`` alone sends nothing.
"""

PROTOCOL = 1

__all__ = [
    "PROTOCOL",
    "ToolError",
    "ToolDenied",
    "ToolArgumentError",
    "ToolTimeout",
    "ToolCancelled",
    "ToolTooLarge",
    "ToolBudgetExceeded",
    "ToolProtocolError",
]


class ToolError(Exception):
    """A tool call failed; str() is the reason and .kind names its kind."""

    kind = "tool_error"


class ToolDenied(ToolError, PermissionError):
    """The embedder refused the call."""

    kind = "denied"


class ToolArgumentError(ToolError, TypeError):
    """The arguments do not fit the tool (checked here or by the host)."""

    kind = "invalid_arguments"


class ToolTimeout(ToolError, TimeoutError):
    """The tool did not answer in time; it may still finish on the host."""

    kind = "timeout"


class ToolCancelled(ToolError):
    """The run was cancelled while the tool ran."""

    kind = "cancelled"


class ToolTooLarge(ToolError):
    """The request or the result is larger than the host allows."""

    kind = "too_large"


class ToolBudgetExceeded(ToolError):
    """This run has used up its tool calls or its request bytes."""

    kind = "budget_exceeded"


class ToolProtocolError(ToolError):
    """The door failed or the host's answer broke the protocol."""

    kind = "protocol"


# The id of the last frame sent. It lives here, not in host.tools, so ids keep
# growing for the whole instance: across a session's turns, and across a retried
# `from host import tools` after an ImportError.
_last_id = 0
