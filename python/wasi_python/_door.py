"""The Python side of one tool call: gate, tool, async loop, contextvars (the record of the
calls is `_records.ToolRecord`).

The runtime (Rust) decodes, budgets, validates and bounds each call, then calls
`Dispatcher.invoke` on a new thread with the GIL held. What it answers is
``(status, payload, fault)``:

- ``("ok", result, None)``: the result, converted to JSON by the runtime on this thread;
- ``("denied", message, fault)``: the gate refused (``fault`` when the gate raised);
  a gate's ToolError refuses with its message, as its ToolDenied does (see `_gate`);
- ``("error", message, None)``: the tool raised ToolError; its message crosses;
- ``("internal", None, fault)``: anything else; only "<tool> failed (internal error)"
  crosses, ``fault`` ("Type: first line") stays in the record;
- ``("cancelled", None, None)``: the call ended (timeout, cancel) while an async tool
  awaited; it was cancelled at its await.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import copy
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ._tools import Tool, ToolCall, ToolDenied, ToolError
from . import _otel

if TYPE_CHECKING:
    import asyncio

# asyncio (6 MB and 10 ms to import) is imported where an async tool, gate or loop
# needs it, so a program that uses none never loads it.

__all__ = ["Dispatcher"]


def _fault(e: BaseException) -> str:
    text = str(e).split("\n", 1)[0]
    name = type(e).__name__
    return f"{name}: {text}" if text else name


def _is_async_callable(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)


def check_gate(gate: Any) -> None:
    """Refuses what cannot be a gate, before any work."""
    if gate is None:
        return
    if not callable(gate):
        raise TypeError(f"gate must be a callable taking a ToolCall, not {type(gate).__name__}")
    if inspect.isasyncgenfunction(gate) or inspect.isasyncgenfunction(getattr(type(gate), "__call__", None)):
        raise TypeError("gate must not be an async generator function")


class _OwnLoop:
    """An event loop on a thread of its own, for one run's async tools and gates."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="wasi-python-tools-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Cancels what still runs, lets each task reach its next await (bounded), stops."""
        import asyncio

        loop = self.loop

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=2.0)
        except Exception:  # noqa: BLE001 - closing must not raise
            pass
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            loop.close()


class Dispatcher:
    """Runs one run's gate and tools. Made per run; closed when the run ends."""

    def __init__(self, tools: Sequence[Tool], gate: Optional[Callable[[ToolCall], Any]], loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self._tools = list(tools)
        self._gate = gate
        self._context = contextvars.copy_context()
        self._loop = loop
        self._own: Optional[_OwnLoop] = None
        self._lock = threading.Lock()
        # Tasks started on the caller's loop (run_async) and not yet done.
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def context(self) -> contextvars.Context:
        """The context each call runs in a copy of: the run's caller's, or a session
        turn's (`use_context`)."""
        return self._context

    def use_context(self, context: contextvars.Context) -> None:
        """From now on, calls run in copies of ``context`` (a session's next turn's caller's)."""
        self._context = context

    def close(self) -> None:
        """Ends the run's async work: every task still running is cancelled and gets to
        its next await before the run returns."""
        if self._own is not None:
            self._own.close()
            self._own = None
        pending = [t for t in list(self._tasks) if not t.done()]
        loop = self._loop
        if pending and loop is not None and loop.is_running() and not loop.is_closed():
            import asyncio

            async def _cancel_all() -> None:
                for t in pending:
                    t.cancel()
                await asyncio.wait(pending, timeout=1.0)

            try:
                asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=2.0)
            except Exception:  # noqa: BLE001 - closing must not raise
                pass

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        with self._lock:
            if self._own is None:
                self._own = _OwnLoop()
            return self._own.loop

    def run_awaitable(self, awaitable: Any, context: contextvars.Context, cancel: Any) -> Any:
        """Awaits on the run's loop; cancels the task at its next await when the call ends."""
        import asyncio

        loop = self._event_loop()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        async def _wrap() -> Any:
            # Whatever the awaitable raises is the call's answer, SystemExit,
            # KeyboardInterrupt and GeneratorExit included: asyncio re-raises those out of
            # the loop, which would kill the run's loop thread (or escape into the
            # embedder's own asyncio.run) instead of failing this one call.
            try:
                return (True, await awaitable)
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - handed to the calling thread below
                return (False, e)

        # The call's context is entered on this thread; the task runs in a copy of it.
        task_context = context.copy()

        def _start() -> None:
            task = loop.create_task(_wrap(), context=task_context)

            def _finish(t: asyncio.Task[Any]) -> None:
                if t.cancelled():
                    done.cancel()
                elif t.exception() is not None:
                    done.set_exception(t.exception())  # type: ignore[arg-type]
                else:
                    ok, value = t.result()
                    if ok:
                        done.set_result(value)
                    else:
                        done.set_exception(value)

            task.add_done_callback(_finish)
            task.add_done_callback(self._tasks.discard)
            self._tasks.add(task)
            holder.append(task)

        holder: list[asyncio.Task[Any]] = []
        loop.call_soon_threadsafe(_start)
        while True:
            try:
                return done.result(timeout=0.005)
            except concurrent.futures.TimeoutError:
                if cancel.is_cancelled():
                    loop.call_soon_threadsafe(lambda: [t.cancel() for t in holder])
                    raise _Cancelled() from None

    def invoke(self, index: int, seq: int, name: str, args: dict[str, Any], request_bytes: int, cancel: Any) -> tuple[str, Any, Optional[str]]:
        context = self._context.copy()
        tracer = _otel.tracer()
        if tracer is None:
            return context.run(self._invoke, context, index, seq, name, args, request_bytes, cancel)
        return context.run(self._traced, tracer, context, index, seq, name, args, request_bytes, cancel)

    def _traced(self, tracer: Any, context: contextvars.Context, index: int, seq: int, name: str, args: dict[str, Any], request_bytes: int, cancel: Any) -> tuple[str, Any, Optional[str]]:
        """A tool call in a span of its own, under the run's (the context this dispatcher
        copied holds it)."""
        with _otel.span("wasi_python.tool_call", {"tool": name, "seq": seq, "request_bytes": request_bytes}, tracer) as s:
            out = self._invoke(context, index, seq, name, args, request_bytes, cancel)
            _otel.set_outcome(s, {"outcome": out[0], "fault": out[2]}, None if out[0] in ("ok", "error", "denied") else out[0])
            return out

    def _invoke(self, context: contextvars.Context, index: int, seq: int, name: str, args: dict[str, Any], request_bytes: int, cancel: Any) -> tuple[str, Any, Optional[str]]:
        t = self._tools[index]
        if self._gate is not None:
            call = ToolCall(seq=seq, tool=name, arguments=copy.deepcopy(args), request_bytes=request_bytes)
            try:
                verdict = self._gate(call)
                if inspect.isawaitable(verdict):
                    verdict = self.run_awaitable(verdict, context, cancel)
            except _Cancelled:
                return ("cancelled", None, None)
            except ToolDenied as e:
                return ("denied", str(e) or f"{name}: the host refused this call", None)
            except ToolError as e:
                # "A ToolError you raise crosses to the guest with its message", from a gate
                # as from a tool. A gate's answer is a refusal, so the call is refused as by
                # ToolDenied: outcome "denied", read by the guest as host.ToolDenied (a
                # PermissionError and a host.ToolError) with this message. The tool never
                # ran, so "tool_error" would misreport it; the record's fault keeps the
                # type ("ToolError: ..."), as for any other exception a gate raises.
                return ("denied", str(e) or f"{name}: the host refused this call", _fault(e))
            except BaseException as e:  # noqa: BLE001 - a failing gate refuses, whatever it raised
                return ("denied", f"{name}: the host refused this call (its gate failed)", _fault(e))
            if verdict is False:
                return ("denied", f"{name}: the host refused this call", None)
            if verdict is not None and verdict is not True:
                return ("denied", f"{name}: the host refused this call (its gate failed)", f"TypeError: the gate returned {type(verdict).__name__}, not None, True or False")
        try:
            result = t.fn(**args)
            if inspect.isawaitable(result):
                result = self.run_awaitable(result, context, cancel)
        except _Cancelled:
            return ("cancelled", None, None)
        except ToolDenied as e:
            return ("denied", str(e), None)
        except ToolError as e:
            return ("error", str(e), None)
        except BaseException as e:  # noqa: BLE001 - the guest learns only that it failed
            return ("internal", None, _fault(e))
        return ("ok", result, None)


class _Cancelled(Exception):
    pass
