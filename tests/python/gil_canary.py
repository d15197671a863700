"""The GIL canary: a thread that must take the GIL every few milliseconds.

The extension promises never to wait, spin or send on a channel with the GIL held while
another thread may need the GIL to answer (ARCHITECTURE.md, "Who holds the GIL"). A
breach freezes the embedder's whole process; this catches it in the suite:

- the canary thread sleeps ``PERIOD`` and takes the GIL again, again and again; a gap
  between two of its turns longer than ``STARVED`` is a starvation, and the test that
  was running fails at its teardown (``check``);
- faulthandler's watchdog, which needs no GIL, is armed for ``STARVED`` seconds and
  re-armed by every canary turn: when it fires, every thread's stack (the test's
  included) is written to the log, and the failure message carries it;
- a starvation of ``HUNG`` seconds, a deadlock, ends the process by ``SIGALRM``'s
  default action (no handler, so no GIL needed); the log then holds the stacks, and
  ``cargo xtask test`` prints it.

``WASI_PYTHON_GIL_CANARY_LOG`` names the log (default: a file in the temp folder).
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import tempfile
import threading
import time
from typing import Optional

PERIOD = 0.005
STARVED = 2.0
HUNG = 120
REARM_EVERY = 0.25


class Canary:
    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.log = open(log_path, "w+b", buffering=0)
        self.last_tick = time.monotonic()
        self.starvations: list[tuple[float, float]] = []  # (start, end), monotonic
        self.ticked = threading.Event()
        self._lock = threading.Lock()
        # SIGALRM's default action ends the process without the GIL; a handler someone
        # installed (pytest-timeout) would need the GIL, so then no alarm is used.
        self.use_alarm = signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
        self.thread = threading.Thread(target=self._loop, name="gil-canary", daemon=True)
        self.thread.start()

    def _arm(self) -> None:
        faulthandler.dump_traceback_later(STARVED, repeat=False, file=self.log, exit=False)
        if self.use_alarm:
            signal.alarm(HUNG)

    def _loop(self) -> None:
        armed = 0.0
        while True:
            time.sleep(PERIOD)
            now = time.monotonic()
            gap = now - self.last_tick
            if gap > STARVED:
                with self._lock:
                    self.starvations.append((self.last_tick, now))
            self.last_tick = now
            if now - armed > REARM_EVERY:
                self._arm()
                armed = now
            self.ticked.set()

    def log_tail(self, start: int) -> str:
        self.log.seek(start)
        return self.log.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return os.fstat(self.log.fileno()).st_size

    def starved_since(self, since: float) -> Optional[float]:
        """The longest starvation that overlapped ``[since, now]``, in seconds, or None.
        Waits for one fresh turn of the canary first when it has not run lately, so a
        starvation that ends just now is seen by this test, not the next."""
        if time.monotonic() - self.last_tick > 0.05:
            self.ticked.clear()
            self.ticked.wait(HUNG)
        with self._lock:
            worst = [end - start for start, end in self.starvations if end >= since]
        return max(worst) if worst else None


_canary: Optional[Canary] = None


def start() -> Canary:
    global _canary
    if _canary is None:
        path = os.environ.get("WASI_PYTHON_GIL_CANARY_LOG") or os.path.join(
            tempfile.gettempdir(), f"pytest-gil-canary-{os.getpid()}.log"
        )
        _canary = Canary(path)
        if "WASI_PYTHON_GIL_CANARY_LOG" not in os.environ:
            atexit.register(_remove_if_empty, path)
    return _canary


def _remove_if_empty(path: str) -> None:
    # A log of one pytest process left in the temp folder: kept only if it holds stacks.
    try:
        if os.path.getsize(path) == 0:
            os.remove(path)
    except OSError:
        pass
