"""The door to the embedder: its tools, callable from guest code.

``from host import tools`` asks the host once for the tools this run offers
and gives one function per tool.  A call that fails raises a ToolError
subclass; the program runs on.  ``from host import display`` shows an object
as a notebook would (host._display).  ``import host`` alone sends nothing.
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


# The id of the last frame sent. It lives here, not in host.tools, so ids keep
# growing for the whole instance: across a session's turns, and across a retried
# `from host import tools` after an ImportError.
_last_id = 0

_ERRORS = frozenset(__all__[1:])


def __getattr__(name):
    # The exception classes live in host._errors, imported on first use: defining
    # eight classes costs a fifth of a millisecond in the guest, and most runs
    # never raise one.
    if name in _ERRORS:
        from host import _errors

        g = globals()
        for n in _ERRORS:
            g[n] = getattr(_errors, n)
        return g[name]
    if name == "display":
        # host._display, imported on first use like the exception classes.
        from host._display import display

        globals()["display"] = display
        return display
    raise AttributeError(f"module 'host' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _ERRORS | {"display"})

