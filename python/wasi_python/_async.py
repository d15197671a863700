"""``run_async``: the same run, awaited. The guest runs on a guest thread of its own and
the event loop stays free. A run takes one of ``set_async_workers`` slots for its guest.
A run without tools and mounts is started by the extension, which hands its end to the
event loop (no thread waits for it, and the guest thread does not enter Python: the
loop watches a descriptor, ``_LoopEnds``); one with tools or mounts runs
``_run.execute`` on a worker thread of a small pool, where its dispatcher lives."""

from __future__ import annotations

import collections
import concurrent.futures
import contextvars
import itertools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import asyncio

from . import _otel, _run, _stream
from . import _wasi_python as _ext
from ._cancel import CancelWatch, is_asyncio_event
from ._records import Completed, Display, Stderr, Stdout, completed_from_ext
from ._types import Grant

__all__ = ["run_async", "set_async_workers", "stream"]

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
# One guest more than the CPUs: a run's slot passes to the next run through the event
# loop (the end read, the slot given, the next run started on its guest thread), and
# while it does, the extra guest keeps every CPU busy. 16 concurrent runs on 2 CPUs,
# alternating processes: 1,600-2,030 runs/s with 2 guests, 2,070-2,350 with 3 (peak RSS
# 127-141 -> 144-157 MiB); docs/dev/perf-log/.
_pool_size = min((os.cpu_count() or 1) + 1, 8)
_pool_lock = threading.Lock()


def set_async_workers(n: int) -> None:
    """Sets how many guests ``run_async`` runs at once (default: one more than the CPUs,
    at most 8).

    Runs already started keep their thread; later ones use the new pool.
    """
    global _pool, _pool_size
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_async_workers takes a positive int, not {n!r}")
    with _pool_lock:
        old, _pool, _pool_size = _pool, None, n
    if old is not None:
        old.shutdown(wait=False)
    _slots.grow()


class _Slots:
    """The ``set_async_workers`` slots, across threads and event loops: a run takes one
    before its guest starts and gives it back when the guest ends, to the run that has
    waited longest if any (on that run's loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used = 0
        self._waiting: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = collections.deque()

    async def take(self) -> None:
        import asyncio

        with self._lock:
            if self._used < _pool_size and not self._waiting:
                self._used += 1
                return
            fut = asyncio.get_running_loop().create_future()
            self._waiting.append((fut.get_loop(), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled: pass it on
                self.give()
            raise

    def give(self) -> None:
        """Gives a slot back (from any thread)."""
        import asyncio  # loaded: only runs of run_async take slots

        while True:
            with self._lock:
                if not self._waiting or self._used > _pool_size:
                    self._used -= 1
                    return
                loop, fut = self._waiting.popleft()
            try:
                # On that loop's own thread (a run's end read by the loop) no wake-up is
                # needed.
                if asyncio._get_running_loop() is loop:
                    loop.call_soon(self._grant, fut)
                else:
                    loop.call_soon_threadsafe(self._grant, fut)
                return
            except RuntimeError:  # that run's loop is closed: the next one
                continue

    def grow(self) -> None:
        """After ``set_async_workers`` raised the count: waiting runs take the new slots."""
        while True:
            with self._lock:
                if not self._waiting or self._used >= _pool_size:
                    return
                self._used += 1
            self.give()

    def _grant(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            self.give()
        else:
            fut.set_result(None)


_slots = _Slots()


def executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=_pool_size, thread_name_prefix="wasi-python-guest")
        return _pool


async def run_async(
    argv: Sequence[str],
    *,
    stdin: bytes | str = b"",
    env: Optional[Mapping[str, str]] = None,
    grants: Iterable[Grant] = (),
    memory_bytes: int = _run.DEFAULTS["memory_bytes"],
    deadline_s: Optional[float] = _run.DEFAULTS["deadline_s"],
    output_bytes: int = _run.DEFAULTS["output_bytes"],
    fuel: Optional[int] = None,
    cancel: Any = None,
    tools: Optional[Iterable[Any]] = None,
    gate: Any = _run.UNSET,
    max_tool_calls: Any = _run.UNSET,
    max_tool_request_bytes: Any = _run.UNSET,
    host: Any = None,
    file_write_bytes: Optional[int] = _run.DEFAULTS["file_write_bytes"],
    max_open_files: int = _run.DEFAULTS["max_open_files"],
    workdir: Optional[str] = None,
    preload: Optional[Iterable[str]] = None,
    mounts: Iterable[Any] = (),
    max_file_calls: Optional[int] = _run.DEFAULTS["max_file_calls"],
    snapshot: Any = None,
    network: Any = None,
    secrets: Any = None,
    display_bytes: int = _run.DEFAULTS["display_bytes"],
    on_stdout: Any = None,
    on_stderr: Any = None,
    on_display: Any = None,
) -> Completed:
    """``await run_async(argv, ...)``: like ``run``, with the same keywords and result.

    Cancelling the awaiting task stops the guest at once (it ends "cancelled"); a tool
    running then is cancelled at its next await (async) or abandoned (sync). Async tools
    and gates run on the event loop that awaits this call, and so do the streaming
    callbacks (``on_stdout``, ``on_stderr``, ``on_display``): async ones are awaited in
    turn, in the order the guest wrote, all before this returns.
    """
    import asyncio  # loaded already: an event loop is awaiting this

    handlers = None
    tracer = _otel.tracer()
    if tracer is None and _run.plain(locals(), _RUN_ASYNC_DEFAULTS):
        plan = None
        start = _run.plain_args(argv, stdin)[:4]
    else:
        plan = _run.make_plan(
            argv, stdin, env, grants, memory_bytes, deadline_s, output_bytes, fuel, cancel,
            tools, gate, max_tool_calls, max_tool_request_bytes, host,
            file_write_bytes, max_open_files, workdir, preload, mounts, max_file_calls, snapshot, network, secrets,
            display_bytes,
        )
        handlers = _stream.check_handlers(on_stdout, on_stderr, on_display, allow_async=True)
        start = None
        if plan.door is None and not plan.settings["mounts"] and plan.network is None and tracer is None:
            start = (plan.where, plan.args, plan.stdin, _run.ext_options(plan.settings, host=plan.host))
    loop = asyncio.get_running_loop()
    token = _ext.CancelToken()
    watch = _watch(cancel, token, loop)
    events = _ext.EventStream() if handlers is not None else None
    try:
        await _slots.take()
        try:
            if start is not None:
                fut = _started(start, token, loop, events)
            else:
                # In a copy of this task's context, as the guide says of tool calls (the
                # dispatcher copies it), and so a traced run's span is under the task's.
                context = contextvars.copy_context()
                fut = loop.run_in_executor(executor(), context.run, _run.execute, plan, token, loop, (events,) if events is not None else ())
                fut.add_done_callback(lambda _: _slots.give())
        except BaseException:
            _slots.give()
            raise
        if handlers is not None:
            delivery = _stream.AsyncDelivery(handlers, token)
            return delivery.finish(await _stream.streamed(fut, events, delivery, token, loop))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            token.cancel()
            # The guest stops at its next epoch check; wait for it so nothing runs on.
            try:
                await asyncio.shield(fut)
            except BaseException:  # noqa: BLE001 - we are re-raising the cancellation
                pass
            raise
    finally:
        if watch is not None:
            watch()


_RUN_ASYNC_DEFAULTS = _run.keyword_defaults(run_async)


async def stream(argv: Sequence[str], **kwargs: Any) -> AsyncIterator[Stdout | Stderr | Display | Completed]:
    """``async for event in wasi_python.stream(argv, ...)``: ``run_async``'s run (its
    keywords but the callbacks), as it happens: a ``Stdout`` or ``Stderr`` (``.data``:
    bytes) or a ``Display`` as the guest writes or shows it, in its order, and its
    ``Completed`` last. Between two ``await``s of the loop the guest goes on; a consumer
    that takes longer makes it wait at most 1 s in all, then events are left out of the
    stream (``truncated`` names "stream"; the ``Completed`` has them). Leaving the loop
    early (``break``, an exception, ``aclose()``) cancels the run."""
    import asyncio

    for name in ("on_stdout", "on_stderr", "on_display"):
        if name in kwargs:
            raise TypeError(f"stream() yields the events; {name}= is run_async's")
    # One event at a time: the run's callbacks wait here while the consumer is busy,
    # and the guest's bounded queue holds the rest.
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    run = asyncio.ensure_future(
        run_async(
            argv,
            on_stdout=lambda data: queue.put(Stdout(data)),
            on_stderr=lambda data: queue.put(Stderr(data)),
            on_display=queue.put,
            **kwargs,
        )
    )
    get: Optional[asyncio.Future[Any]] = None
    try:
        while True:
            get = asyncio.ensure_future(queue.get())
            await asyncio.wait((get, run), return_when=asyncio.FIRST_COMPLETED)
            if get.done():
                yield get.result()
                continue
            get.cancel()
            # The run delivered every event before it returned: the last may wait here.
            while not queue.empty():
                yield queue.get_nowait()
            yield run.result()
            return
    finally:
        if get is not None and not get.done():
            get.cancel()
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)


class _LoopEnds:
    """The ends of one event loop's runs started by the extension. Guest threads leave
    them in ``_ext.Completions`` and wake the loop through its descriptor, without the
    GIL; the loop's reader (``drain``) gives each run's slot back and settles its future.
    The reader is the only holder: when the loop is closed, its selector drops it, and a
    run that ends after that gives its slot back from the guest thread (``orphan``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ext = _ext.Completions(_slots.give)
        self.futures: dict[int, asyncio.Future[Completed]] = {}
        self.keys = itertools.count()
        loop.add_reader(self.ext.fd, self.drain)  # NotImplementedError: no readers

    def drain(self) -> None:
        for key, ok, value in self.ext.drain():
            _slots.give()
            fut = self.futures.pop(key, None)
            if fut is None:
                continue
            try:
                _settle(fut, ok, value)
            except Exception as e:  # noqa: BLE001 - one run's failure stays its own
                if not fut.done():
                    fut.set_exception(e)


# Per event loop: a weak reference to its `_LoopEnds`, or False for a loop that watches
# no descriptors (its runs are called back on the guest thread instead).
_loop_ends: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _ends_of(loop: asyncio.AbstractEventLoop) -> Optional[_LoopEnds]:
    entry = _loop_ends.get(loop)
    if entry is False:
        return None
    ends: Optional[_LoopEnds] = entry() if entry is not None else None
    if ends is None:
        try:
            ends = _LoopEnds(loop)
        except NotImplementedError:
            _loop_ends[loop] = False
            return None
        _loop_ends[loop] = weakref.ref(ends)
    return ends


def _started(start: tuple[str, list[str], bytes, Any], token: Any, loop: asyncio.AbstractEventLoop, events: Any = None) -> asyncio.Future[Completed]:
    """Starts a guest through the extension; the future is settled on ``loop`` when the
    run ends (and its slot is given back): by the loop's reader (``_LoopEnds``), or, on a
    loop without readers, by a call back from the guest thread."""
    fut: asyncio.Future[Completed] = loop.create_future()
    ends = _ends_of(loop)
    if ends is not None:
        key = next(ends.keys)
        ends.futures[key] = fut
        try:
            _ext.start(*start, token, ends.ext, key, events)
        except BaseException:
            del ends.futures[key]
            raise
        return fut

    def on_done(ok: bool, value: Any) -> None:  # on the guest thread
        _slots.give()
        try:
            loop.call_soon_threadsafe(_settle, fut, ok, value)
        except RuntimeError:  # the loop is closed: nobody awaits this run
            pass

    _ext.start(*start, token, on_done, 0, events)
    return fut


def _settle(fut: asyncio.Future[Completed], ok: bool, value: Any) -> None:
    if fut.cancelled():
        return
    if ok:
        fut.set_result(completed_from_ext(value))
    else:
        fut.set_exception(value)


def _watch(cancel: Any, token: Any, loop: asyncio.AbstractEventLoop) -> Optional[Callable[[], None]]:
    """Forwards ``cancel=`` (an Event, asyncio.Event, or CancelToken) to the token."""
    if cancel is None:
        return None
    if isinstance(cancel, _ext.CancelToken):
        stop = threading.Event()

        def poll_token() -> None:
            while not stop.wait(0.005):
                if cancel.is_cancelled():
                    token.cancel()
                    return

        threading.Thread(target=poll_token, daemon=True).start()
        return stop.set
    if is_asyncio_event(cancel):
        async def wait_event() -> None:
            await cancel.wait()
            token.cancel()

        task = loop.create_task(wait_event())
        return task.cancel
    if cancel.is_set():
        token.cancel()
        return None
    w = CancelWatch(cancel, token)
    return w.stop
