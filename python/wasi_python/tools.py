"""Offer your own Python functions to guest code as tools.

Decorate a function with `tool` and pass it in ``tools=`` to `wasi_python.run`; guest code calls
it from ``host.tools``. See the guide "Offer tools to the guest".

This module is pure Python: it imports without the compiled extension.
"""

from wasi_python._records import ToolOutcome, ToolRecord
from wasi_python._tools import (
    Tool,
    ToolCall,
    ToolDenied,
    ToolError,
    ToolTimeout,
    stubs,
    tool,
)

__all__ = [
    "Tool",
    "ToolCall",
    "ToolDenied",
    "ToolError",
    "ToolOutcome",
    "ToolRecord",
    "ToolTimeout",
    "stubs",
    "tool",
]
