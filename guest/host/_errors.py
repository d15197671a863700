"""The exception classes of `host`, defined on first use (most runs never raise
one): `host.ToolError` and the rest are attributes of `host` through its
__getattr__, and each class says it is `host`'s own (set at the end)."""

# The names are listed once, in host.__all__.


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


for _class in (ToolError, *ToolError.__subclasses__()):
    _class.__module__ = "host"
del _class
