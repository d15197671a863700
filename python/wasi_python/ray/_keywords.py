"""The keywords a pool run and a pool session take (``run``'s and `Session`'s), and those refused by name."""

from __future__ import annotations

from typing import Any

_REFUSED = {
    "cancel": "cancel= is not sent to a worker: cancel the run_async task instead (it stops the guest)",
    "host": "host= is not served by the pool: offer tools= instead",
    "on_stdout": "streaming callbacks are not sent to a worker: the pool returns the Completed (its stdout, stderr and displays)",
    "on_stderr": "streaming callbacks are not sent to a worker: the pool returns the Completed (its stdout, stderr and displays)",
    "on_display": "streaming callbacks are not sent to a worker: the pool returns the Completed (its stdout, stderr and displays)",
}

RUN_KEYWORDS = frozenset({
    "stdin", "env", "grants", "memory_bytes", "deadline_s", "output_bytes", "fuel", "tools", "gate",
    "max_tool_calls", "max_tool_request_bytes", "file_write_bytes", "max_open_files", "workdir",
    "preload", "mounts", "max_file_calls", "snapshot", "network", "secrets", "display_bytes",
})
SESSION_KEYWORDS = (RUN_KEYWORDS - {"stdin"}) | {"idle_s", "lifetime_s", "shutdown_s", "keep_random"}


def checked_keywords(kw: dict[str, Any], allowed: frozenset[str], what: str) -> dict[str, Any]:
    """A copy of ``kw``; a TypeError for a refused keyword (saying what to do instead) or
    one ``what`` does not take."""
    for k in kw:
        if k in _REFUSED:
            raise TypeError(_REFUSED[k])
        if k not in allowed:
            raise TypeError(f"{what} got an unexpected keyword argument {k!r}")
    return dict(kw)
