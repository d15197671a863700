"""Notices: what the runtime tells the embedder that is neither an error nor a run's
result (a compile of minutes ahead, a shipped file it could not use, a default preload
it dropped), as data (`notices()`) and through the ``logging`` logger ``wasi_python``.

Each is logged at WARNING when it happens, on the thread doing the work, with
``record.notice_kind`` set to its kind; with no logging configured, Python's last-resort
handler prints it on stderr. The package adds no handler of its own.
"""

from __future__ import annotations

from typing import NamedTuple

from . import _wasi_python as _ext

__all__ = ["Notice", "notices"]


class Notice(NamedTuple):
    """One notice of the runtime."""

    #: ``"compiling"`` (the guest is compiled now: minutes, once per machine),
    #: ``"shipped_unusable"`` (a shipped preload snapshot is damaged: built instead),
    #: ``"preload_skipped"`` (the default preload cannot be had: runs start without it);
    #: later versions may add kinds.
    kind: str
    #: A sentence for a person: what happens and why.
    message: str


def notices() -> list[Notice]:
    """The runtime's notices in this process so far, oldest first (the last 64)."""
    return [Notice(kind, message) for kind, message in _ext.notices()]
