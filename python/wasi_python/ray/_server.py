"""The caller's half of a call that stays with it: the `Server` that polls each actor's mailbox and runs the call here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from typing import Any, Optional

import ray
import ray.exceptions

from wasi_python import _door
from wasi_python.tools import tool


class _Flag:
    """A cancel flag for a call served here (``is_cancelled``, as the door's token)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def cancel(self) -> None:
        self._set = True

    def is_cancelled(self) -> bool:
        return self._set


def _allow(**arguments: Any) -> None:
    """Stands for the tool after a staying gate: the gate's verdict is the answer."""


class Server:
    """Serves the staying tools and gates of one pool in this process: a thread polls each
    actor's mailbox (a long poll: an answer returns at once when a request arrives), runs the
    call on a thread of its own here (`Dispatcher`, so gate, async tools, contextvars and
    errors are handled as for a local call), and delivers the answer to that actor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._units: dict[int, Any] = {}
        self._ids = itertools.count(1)
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="wasi-python-ray-tool")
        self._flags: dict[tuple[Any, int], _Flag] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._polled: dict[Any, Any] = {}
        self._closed = False

    def register(self, kind: str, target: Any) -> int:
        unit = next(self._ids)
        if kind == "tool":
            d = _door.Dispatcher([target], None)
        else:
            d = _door.Dispatcher([tool(_allow, name="allow")], target)
        with self._lock:
            self._units[unit] = (kind, d)
        return unit

    def release(self, unit: int) -> None:
        with self._lock:
            entry = self._units.pop(unit, None)
        if entry is not None:
            entry[1].close()

    def watch(self, actor: Any, name: str) -> None:
        """Polls ``actor``'s mailbox from now on (once per actor)."""
        with self._lock:
            if self._closed or actor in self._polled:
                return
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="wasi-python-ray-serve", daemon=True).start()
            self._polled[actor] = None
            loop = self._loop
        self._polled[actor] = asyncio.run_coroutine_threadsafe(self._poll(actor, name), loop)

    async def _poll(self, actor: Any, name: str) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                requests = await actor.poll.remote(10.0)
            except (ray.exceptions.RayActorError, ray.exceptions.RayError):
                with self._lock:
                    self._polled.pop(actor, None)
                return
            for req in requests:
                if req[0] == "cancel":
                    flag = self._flags.get((actor, req[1]))
                    if flag is not None:
                        flag.cancel()
                    continue
                _, rid, kind, unit, payload = req
                flag = _Flag()
                self._flags[(actor, rid)] = flag
                self._threads.submit(self._serve, loop, actor, rid, kind, unit, payload, flag)

    def _serve(self, loop: asyncio.AbstractEventLoop, actor: Any, rid: int, kind: str, unit: int, payload: Any, flag: _Flag) -> None:
        with self._lock:
            entry = self._units.get(unit)
        try:
            if entry is None:
                answer: Any = ("internal", None, "LookupError: the run that offered this tool has ended")
            elif kind == "tool":
                answer = entry[1].invoke(0, 0, "", payload, 0, flag)
            else:
                seq, name, arguments, request_bytes = payload
                answer = entry[1].invoke(0, seq, name, arguments, request_bytes, flag)
        except BaseException as e:  # noqa: BLE001 - the worker's call must get an answer
            answer = ("internal", None, f"{type(e).__name__}: {e}")
        finally:
            self._flags.pop((actor, rid), None)
        # Sent from the loop's thread, after the poll it may be submitting: two Ray
        # submissions at once from two threads contend for the GIL (measured: +0.4 ms).
        loop.call_soon_threadsafe(self._deliver, actor, rid, answer)

    @staticmethod
    def _deliver(actor: Any, rid: int, answer: Any) -> None:
        try:
            actor.deliver.remote([(rid, answer)])
        except Exception:  # noqa: BLE001 - the actor died: its run fails with ActorLost
            pass

    def close(self) -> None:
        self._closed = True
        with self._lock:
            units, self._units = list(self._units.values()), {}
        for _, d in units:
            d.close()
        if self._loop is not None:
            loop = self._loop

            async def _stop() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(_stop(), loop).result(timeout=2.0)
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
            loop.call_soon_threadsafe(loop.stop)
        self._threads.shutdown(wait=False)

