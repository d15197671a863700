"""What the package may change in its own process, each off unless the embedder asks:
for now, keeping finished tool threads' Python frame stacks (`keep_frame_stacks`)."""

from __future__ import annotations

from . import _wasi_python as _ext

__all__ = ["keep_frame_stacks"]


def keep_frame_stacks(on: bool = True) -> bool:
    """Keeps (or, with ``False``, stops keeping) the first 16 KiB chunk of Python frames of
    each finished tool thread, up to 16, for the next tool thread, by wrapping the
    interpreter's arena allocator (``PyObject_SetArenaAllocator``); every other allocation
    passes through to the allocator that was there. Off by default; on from import with
    ``WASI_PYTHON_KEEP_FRAME_STACKS=1``. Safe at any time. Returns whether chunks are
    kept now (``False`` where the interpreter lacks the hook).

    Why: each tool call runs on a new thread, whose frame chunk CPython unmaps when the
    thread ends; that unmapping interrupts the guest's CPU (a TLB shootdown) once per call.
    Switched off after being on, the wrapper gives back what it kept and stays in place,
    passing every call through."""
    if not isinstance(on, bool):
        raise TypeError(f"on must be a bool, not {type(on).__name__}")
    return _ext.keep_frame_stacks(on)
