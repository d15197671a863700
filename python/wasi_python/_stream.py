"""Streaming: ``on_stdout``, ``on_stderr`` and ``on_display`` called as the guest writes.

A streaming run's guest pushes what it writes (what the output caps keep) and the
displays it keeps into a bounded queue of its run (the extension's ``EventStream``, the
runtime's ``Events``). The guest never waits on Python: only on that queue, and at most
``STREAM_STALL_S`` in all per run or turn, never past its deadline or cancel; what does
not fit then is left out of the stream (``Completed.truncated`` names "stream") and kept
in the ``Completed`` all the same. The callbacks run on the caller's side, in the order
the guest wrote: ``run`` and ``Session.run`` call them on the calling thread (which waits
with the GIL released between events); ``run_async`` and ``Session.run_async`` on the
event loop, awaiting async ones in turn (``pump``); ``wasi_python.stream`` yields them.

A callback that raises: no callback is called after it in that run, the run goes on to
its end (an ``Exception``) or is cancelled (a ``BaseException`` that is not one:
``KeyboardInterrupt``, ``SystemExit``), and the exception is raised once the run has
ended, with the run's ``Completed`` as its ``completed`` attribute. No output is lost:
the ``Completed`` has it all.
"""

from __future__ import annotations

from ._records import Completed, Display, Stderr, Stdout

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from typing import Any, AsyncIterator, Callable, Optional

__all__ = ["Handlers", "check_handlers", "SyncDelivery", "AsyncDelivery", "LoopReader", "pump", "event_object", "STREAM_STALL_S"]

#: The kinds of event the extension hands over, as ``(kind, payload)``.
STDOUT, STDERR, DISPLAY = 0, 1, 2
#: How long in all a run's guest may wait for its caller to take events (the runtime's
#: ``STREAM_STALL``).
STREAM_STALL_S = 1.0
#: The note added to an exception a callback raised.
_NOTE = "raised by a streaming callback (on_stdout, on_stderr, on_display); the run went on to its end: its Completed is this exception's `completed`"


def _is_async(fn: Any) -> bool:
    import inspect  # here: a run without callbacks does not need it

    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(type(fn), "__call__", None))


def _isawaitable(value: Any) -> bool:
    import inspect

    return inspect.isawaitable(value)


class Handlers:
    """The callbacks of one run, by the extension's event kinds."""

    __slots__ = ("by_kind", "any_async")

    def __init__(self, on_stdout: Any, on_stderr: Any, on_display: Any) -> None:
        self.by_kind: tuple[Optional[Callable[[Any], Any]], ...] = (on_stdout, on_stderr, on_display)
        self.any_async = any(fn is not None and _is_async(fn) for fn in self.by_kind)


def check_handlers(on_stdout: Any, on_stderr: Any, on_display: Any, *, allow_async: bool) -> Optional[Handlers]:
    """The callbacks checked (each None or callable), or None when none is given."""
    for name, fn in (("on_stdout", on_stdout), ("on_stderr", on_stderr), ("on_display", on_display)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a callable (taking bytes, or a Display) or None, not {type(fn).__name__}")
        if fn is not None and not allow_async and _is_async(fn):
            raise TypeError(f"{name} is an async def: await run_async(...) (or Session.run_async) to have it awaited")
    if on_stdout is None and on_stderr is None and on_display is None:
        return None
    return Handlers(on_stdout, on_stderr, on_display)


def event_object(kind: int, payload: bytes) -> Any:
    """An event as the caller sees it: ``Stdout``, ``Stderr`` or ``Display``; None for a
    kind this package does not know."""
    if kind == STDOUT:
        return Stdout(payload)
    if kind == STDERR:
        return Stderr(payload)
    if kind == DISPLAY:
        return Display.from_json(payload)
    return None


def _argument(kind: int, payload: bytes) -> Any:
    """What a callback is given: the bytes, or the ``Display``."""
    return Display.from_json(payload) if kind == DISPLAY else payload


class _Delivery:
    """What the callbacks of one run raised, and the token a ``BaseException`` cancels."""

    def __init__(self, handlers: Handlers, token: Any) -> None:
        self.handlers = handlers
        self.token = token
        self.error: Optional[BaseException] = None

    def _handler(self, kind: int) -> Optional[Callable[[Any], Any]]:
        if self.error is not None or not 0 <= kind < len(self.handlers.by_kind):
            return None
        return self.handlers.by_kind[kind]

    def failed(self, e: BaseException) -> None:
        """A callback raised: the first exception is kept; one that is not an
        ``Exception`` (KeyboardInterrupt, SystemExit) also cancels the run."""
        if self.error is None:
            self.error = e
            if not isinstance(e, Exception) and self.token is not None:
                self.token.cancel()

    def finish(self, done: Completed) -> Completed:
        """The run's end: ``done``, or the callback's exception raised with it."""
        e, self.error = self.error, None
        if e is None:
            return done
        try:
            e.completed = done  # type: ignore[attr-defined]
            e.add_note(_NOTE)
        except (AttributeError, TypeError):  # an exception that takes no attributes
            pass
        raise e


class SyncDelivery(_Delivery):
    """Called by the extension (``on_event``) on the caller's thread, with the GIL, for each
    event in turn; never raises."""

    def __call__(self, kind: int, payload: bytes) -> None:
        fn = self._handler(kind)
        if fn is None:
            return
        try:
            fn(_argument(kind, payload))
        except BaseException as e:  # noqa: BLE001 - kept, raised after the run's end
            self.failed(e)


class AsyncDelivery(_Delivery):
    """Awaits the callbacks on the event loop, in order; a sync one is called there."""

    async def deliver(self, kind: int, payload: bytes) -> None:
        fn = self._handler(kind)
        if fn is None:
            return
        try:
            result = fn(_argument(kind, payload))
            if _isawaitable(result):
                await result
        except BaseException as e:  # noqa: BLE001 - kept, raised after the run's end
            self.failed(e)


class LoopReader:
    """Takes an ``EventStream``'s events on an event loop: it watches the stream's
    descriptor (written by the guest thread when the queue gets an event while empty, and
    when it ends), or, on a loop that watches none, waits on a thread of the loop's
    default executor."""

    def __init__(self, stream: Any, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio

        self.stream = stream
        self.loop = loop
        self.ready = asyncio.Event()
        self.fd: Optional[int] = None
        try:
            fd = stream.fd
            loop.add_reader(fd, self._readable)
            self.fd = fd
        except NotImplementedError:
            pass

    def _readable(self) -> None:
        self.stream.woken()
        self.ready.set()

    def wake(self) -> None:
        """Looks again (the run ended, perhaps without its stream: a failure before its guest ran)."""
        self.ready.set()

    async def batches(self, over: Callable[[], bool]) -> AsyncIterator[list[tuple[int, bytes]]]:
        """The events as they come, a batch at a time, until the stream ends, or until
        ``over()`` says the run has ended without it."""
        while True:
            events, ended = self.stream.drain()
            if events:
                yield events
            if ended:
                return
            if over():
                events, _ = self.stream.drain()
                if events:
                    yield events
                return
            self.ready.clear()
            if self.fd is not None:
                await self.ready.wait()
            else:
                waiting = self.loop.run_in_executor(None, self.stream.wait, 0.05)
                await waiting

    def close(self) -> None:
        if self.fd is not None:
            self.loop.remove_reader(self.fd)
            self.fd = None


async def pump(reader: LoopReader, delivery: AsyncDelivery, over: Callable[[], bool]) -> None:
    """Hands every event of ``reader`` to ``delivery``'s callbacks, in order."""
    async for events in reader.batches(over):
        for kind, payload in events:
            await delivery.deliver(kind, payload)


async def streamed(fut: asyncio.Future[Any], stream: Any, delivery: AsyncDelivery, token: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """Awaits ``fut`` (a run's or a turn's end), the events of ``stream`` handed to
    ``delivery``'s callbacks on ``loop`` meanwhile, every one before this returns. Cancelled,
    it cancels the run (``token``), stops the callbacks, waits for the guest to stop, and
    raises."""
    import asyncio

    reader = LoopReader(stream, loop)
    fut.add_done_callback(lambda _: reader.wake())
    task = loop.create_task(pump(reader, delivery, fut.done))
    try:
        try:
            out = await asyncio.shield(fut)
        except asyncio.CancelledError:
            token.cancel()
            stream.detach()
            task.cancel()
            try:
                await asyncio.shield(fut)
            except BaseException:  # noqa: BLE001 - re-raising the cancellation
                pass
            raise
        except BaseException:
            stream.end()
            raise
        # The guest is out: the stream ends before its end is handed over, so this
        # delivers what is left and returns.
        await task
        return out
    finally:
        if not task.done():
            task.cancel()
        reader.close()
