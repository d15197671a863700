"""``cancel=``: what a run, a session turn and ``run_async`` take to stop a guest (a
``threading.Event`` or anything with ``is_set()``, an ``asyncio.Event``, or the extension's
``CancelToken``), checked and forwarded to the runtime's token."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

from . import _wasi_python as _ext

__all__ = ["CancelWatch", "check_cancel", "cancel_token", "is_asyncio_event"]


class CancelWatch:
    """Forwards a ``threading.Event``-like ``cancel=`` to the runtime's token."""

    def __init__(self, cancel: Any, token: Any) -> None:
        import threading  # here: a run without cancel= does not need it

        self._done = threading.Event()
        self._cancel = cancel
        self._token = token
        self._thread = threading.Thread(target=self._watch, name="wasi-python-cancel", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import threading

        wait = self._cancel.wait if isinstance(self._cancel, threading.Event) else None
        while not self._done.is_set():
            fired = wait(0.005) if wait is not None else self._cancel.is_set()
            if fired:
                self._token.cancel()
                return
            if wait is None:
                self._done.wait(0.005)

    def stop(self) -> None:
        self._done.set()


def is_asyncio_event(x: Any) -> bool:
    """Whether ``x`` is an asyncio.Event, without importing asyncio (6 MB, 10 ms) for
    callers that never use it: if asyncio is not loaded, nothing is one."""
    aio = sys.modules.get("asyncio")
    return aio is not None and isinstance(x, aio.Event)


def check_cancel(cancel: Any) -> None:
    """Refuses a ``cancel=`` that is none of the kinds a run takes, before any work."""
    if cancel is None or isinstance(cancel, _ext.CancelToken) or is_asyncio_event(cancel):
        return
    if not callable(getattr(cancel, "is_set", None)):
        raise TypeError("cancel must be a threading.Event or have is_set()")


def cancel_token(cancel: Any) -> tuple[Any, Optional[CancelWatch]]:
    """The runtime's token for a checked ``cancel=`` (None for none), and the watch that
    forwards a ``threading.Event``-like one to it (stop it when the run ends)."""
    if cancel is None:
        return None, None
    if isinstance(cancel, _ext.CancelToken):
        return cancel, None
    token = _ext.CancelToken()
    if cancel.is_set():
        token.cancel()
        return token, None
    return token, CancelWatch(cancel, token)
