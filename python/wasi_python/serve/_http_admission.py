"""Back-pressure for ``serve http``: `Admission`, the bounded count of runs admitted (the
guests' worth running, ``max_queue`` more waiting), which a request past it is refused by
(`try_admit`) and a batch's runs wait for in turn (`admit`), until the server stops."""

from __future__ import annotations

import asyncio
import collections

__all__ = ["Admission", "Stopping"]


class Stopping(Exception):
    """The server is shutting down: no run is admitted any more."""


class Admission:
    """At most ``guests + max_queue`` runs admitted at once. Waiters are served first come,
    first served; a place given back goes to the longest waiter. One event loop's."""

    def __init__(self, guests: int, max_queue: int) -> None:
        self.guests = guests
        self.capacity = guests + max_queue
        self.admitted = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.stopped = False

    @property
    def queued(self) -> int:
        """Runs admitted or waiting, beyond those the guests can be running."""
        return max(0, self.admitted - self.guests) + len(self._waiters)

    def has_room(self) -> bool:
        return not self.stopped and self.admitted < self.capacity

    def try_admit(self) -> bool:
        """A place now, or False (the queue is full, or others wait, or the server stops)."""
        if self.stopped or self.admitted >= self.capacity or self._waiters:
            return False
        self.admitted += 1
        return True

    async def admit(self) -> None:
        """Waits for a place, in turn; raises `Stopping` once the server stops."""
        if self.try_admit():
            return
        if self.stopped:
            raise Stopping()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # given a place, then cancelled: pass it on
                self.release()
            else:
                self._drop(fut)
            raise

    def _drop(self, fut: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def release(self) -> None:
        """Gives a place back: to the longest waiter, if any."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.admitted -= 1

    def stop(self) -> None:
        """No more admissions; every waiter gets `Stopping`."""
        self.stopped = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(Stopping())
