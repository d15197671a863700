"""The launch policy: how the package's runtime schedules runs (`set_launch_policy`,
`launch_policy`), and what it may change in the embedder's process, each off unless the
embedder asks (`keep_frame_stacks`; the caller-thread pin is the policy's `pin_caller`)."""

from __future__ import annotations

from typing import Any

from . import _wasi_python as _ext

__all__ = ["keep_frame_stacks", "launch_policy", "set_launch_policy"]

_BOOLS = ("standby", "primed", "pin_caller", "wake_on_caller_cpu")
_SECONDS = ("standby_idle_s", "warm_every_s", "primed_for_s", "thread_idle_s")


def set_launch_policy(**fields: Any) -> dict[str, Any]:
    """Sets how the package's runtime schedules runs; call it before the first run (a
    runtime keeps the policy it was made with: later, ``RuntimeError``). Fields not given
    keep their defaults, which `WASI_PYTHON_STANDBY` and `WASI_PYTHON_PIN_CALLER` set:

    - ``standby`` (True): fresh runs from a preload image take a guest made ahead;
    - ``primed`` (True): runs back to back take an instance made while the last one ran;
    - ``pin_caller`` (False): the calling thread waits pinned to its CPU back to back
      (its mask given back only if nothing changed it meanwhile);
    - ``wake_on_caller_cpu`` (True): the runtime's thread that serves a waiting caller is
      woken on the caller's CPU (only the runtime's own threads move);
    - ``idle_threads`` (16): guest threads kept waiting for the next run;
    - ``standby_idle_s`` (30), ``warm_every_s`` (0.02; 0 for never), ``primed_for_s``
      (0.1), ``thread_idle_s`` (30);
    - ``idle_memory`` (64 MiB): bytes that idle pool slots keep resident for the next
      runs, in all; past it, the slots unused longest give their memory back to the
      system once unused for a second (0: they keep nothing once idle);
    - ``standby_after`` (2): the fresh run from which on a guest is made ahead (the
      second: a process that makes one run and exits makes none; 1: from the first).

    Returns the whole policy as a dict (docs/benchmarks.md says what each knob changes)."""
    for name, value in fields.items():
        if name in _BOOLS:
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
        elif name in _SECONDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
        elif name in ("idle_threads", "standby_after"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if not 0 <= value <= 1024:
                raise ValueError(f"{name} must be from 0 to 1024, not {value}")
        elif name == "idle_memory":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"idle_memory must be an int (bytes), not {type(value).__name__}")
            if not 0 <= value < 1 << 64:
                raise ValueError(f"idle_memory must be from 0 to 2**64 - 1 bytes, not {value}")
        else:
            raise TypeError(f"set_launch_policy() got an unexpected keyword argument {name!r}")
    return dict(_ext.set_launch_policy(**fields))


def launch_policy() -> dict[str, Any]:
    """The launch policy the package's runtime is (or will be) made with, as a dict."""
    return dict(_ext.launch_policy())


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
