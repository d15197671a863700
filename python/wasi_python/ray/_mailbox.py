"""The worker's half of a call that stays with the caller: the `Mailbox` the caller polls, and the stand-ins the guest's tools and gate call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from typing import Any, Optional

from wasi_python.tools import ToolCall, ToolDenied, ToolError


class Mailbox:
    """The worker's half of calls that cross back to the caller: requests wait here until
    the caller's poll takes them; answers arrive by `deliver`. Thread-safe: stubs await on
    whichever loop their run's tools use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[tuple[Any, ...]] = []
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._waiter: Optional[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = None

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            loop, fut = w
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

    async def ask(self, kind: str, unit: int, payload: Any) -> Any:
        rid = next(self._ids)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending[rid] = fut
            self._queue.append(("ask", rid, kind, unit, payload))
        self._wake()
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            # The call ended (timeout, deadline, cancel) while the caller ran it: tell the
            # caller, whose async tool is then cancelled at its next await.
            with self._lock:
                self._pending.pop(rid, None)
                self._queue.append(("cancel", rid))
            self._wake()
            raise

    def ask_blocking(self, kind: str, unit: int, payload: Any) -> Any:
        """`ask` from a tool's own thread, for a sync tool: the thread waits as a local sync
        tool's would (abandoned at a timeout, it waits on to the caller's answer)."""
        rid = next(self._ids)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending[rid] = fut
            self._queue.append(("ask", rid, kind, unit, payload))
        self._wake()
        return fut.result()

    async def poll(self, wait_s: float) -> list[tuple[Any, ...]]:
        with self._lock:
            if not self._queue:
                loop = asyncio.get_running_loop()
                fut: asyncio.Future[None] = loop.create_future()
                self._waiter = (loop, fut)
            else:
                fut = None  # type: ignore[assignment]
        if fut is not None:
            try:
                await asyncio.wait_for(fut, wait_s)
            except asyncio.TimeoutError:
                pass
        with self._lock:
            self._waiter = None
            out, self._queue = self._queue, []
        return out

    def deliver(self, answers: list[tuple[int, Any]]) -> None:
        for rid, answer in answers:
            with self._lock:
                fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(answer)


def _named_exception(fault: str) -> BaseException:
    """An exception whose ``"Type: first line"`` is ``fault`` (a class of that name whose
    text is the line as it was, not a builtin's ``str``), so the worker's record keeps what
    the caller's function raised."""
    name, _, text = fault.partition(": ")
    if not name.isidentifier():
        name = "Exception"
    cls = _FAULT_TYPES.get(name)
    if cls is None:
        cls = _FAULT_TYPES.setdefault(name, type(name, (Exception,), {"__str__": lambda self: self.args[0] if self.args else ""}))
    return cls(text) if text else cls()


_FAULT_TYPES: dict[str, type] = {}


def _answer(status: str, payload: Any, fault: Optional[str]) -> Any:
    """Turns the caller's answer into what the local tool would have returned or raised."""
    if status == "ok":
        return payload
    if status == "error":
        raise ToolError(payload)
    if status == "denied":
        if fault is not None:
            if fault.startswith("ToolError: ") or fault == "ToolError":
                raise ToolError(fault.partition(": ")[2])
            raise _named_exception(fault)
        raise ToolDenied(payload)
    if status == "internal":
        raise _named_exception(fault or "Exception")
    raise asyncio.CancelledError()


class Forward:
    """The worker's callable for a staying async tool: its arguments cross back to the
    caller; when the call ends first (timeout, deadline), the caller's task is cancelled."""

    def __init__(self, mail: Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    async def __call__(self, **arguments: Any) -> Any:
        return _answer(*await self.mail.ask("tool", self.unit, arguments))


class ForwardSync:
    """The same for a staying sync tool, waiting on its call's thread as a local sync tool
    runs on it (one fewer hop than an awaited call)."""

    def __init__(self, mail: Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    def __call__(self, **arguments: Any) -> Any:
        return _answer(*self.mail.ask_blocking("tool", self.unit, arguments))


def _gate_verdict(answer: tuple[str, Any, Optional[str]]) -> Any:
    status, payload, fault = answer
    if status == "ok":
        return None
    return _answer(status, payload, fault)


class ForwardGate:
    """The worker's gate for a staying async gate: the `ToolCall` crosses back to the caller."""

    def __init__(self, mail: Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    async def __call__(self, call: ToolCall) -> Any:
        return _gate_verdict(await self.mail.ask("gate", self.unit, (call.seq, call.tool, call.arguments, call.request_bytes)))


class ForwardGateSync:
    """The same for a staying sync gate."""

    def __init__(self, mail: Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    def __call__(self, call: ToolCall) -> Any:
        return _gate_verdict(self.mail.ask_blocking("gate", self.unit, (call.seq, call.tool, call.arguments, call.request_bytes)))

