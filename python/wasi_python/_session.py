"""``Session``: one interpreter kept across turns, like a notebook."""

from __future__ import annotations

import contextvars
import functools
from typing import Any, Iterable, Mapping, Optional

from . import _door, _network, _otel, _run, _snapshot, _stream
from . import _wasi_python as _ext
from ._cancel import cancel_token, check_cancel
from ._records import Completed, completed_from_ext
from ._types import SIZE_MAX, Grant, check_int, check_seconds, check_utf8

#: The runtime's defaults (``SessionLimits::default()``), the one place they live.
_DEFAULTS = _ext.DEFAULTS

__all__ = ["Session", "SessionEnded", "SessionBusy"]


SessionEnded = _ext.SessionEnded
SessionBusy = _ext.SessionBusy


class Session:
    """One interpreter across turns. Imports and variables carry over, and a final
    expression is echoed like the interactive interpreter.

    Each turn gets its own deadline, fuel, output caps and tool budget (the limits
    given here are each turn's defaults), and its own tool record. The session ends
    when closed, when it rests longer than ``idle_s``, when ``lifetime_s`` passes, when
    the guest calls ``exit()``, or when a turn traps; ``run`` then raises
    ``SessionEnded``. Closing runs the guest's atexit handlers within ``shutdown_s``.
    Use it from one thread at a time; a concurrent turn raises ``SessionBusy``.
    The file keywords are ``run``'s; ``file_write_bytes`` caps all turns together, and
    the working folder (``/work`` or ``workdir=``) lives as long as the session.
    ``preload=`` is ``run``'s: the session starts with those modules imported.
    ``snapshot=`` starts it from a ``Snapshot`` instead (everything that session
    defined, a copy-on-write fork), with this session's own settings;
    ``keep_random=True`` keeps the random generators' state (else they are re-seeded,
    so forks differ). ``snapshot()`` takes one between turns. ``network=`` and
    ``secrets=`` are ``run``'s, their bounds each turn's (docs/network.md).
    """

    def __init__(
        self,
        *,
        env: Optional[Mapping[str, str]] = None,
        grants: Iterable[Grant] = (),
        memory_bytes: int = _run.DEFAULTS["memory_bytes"],
        deadline_s: Optional[float] = _run.DEFAULTS["deadline_s"],
        output_bytes: int = _run.DEFAULTS["output_bytes"],
        fuel: Optional[int] = None,
        tools: Optional[Iterable[Any]] = None,
        gate: Any = _run.UNSET,
        max_tool_calls: Any = _run.UNSET,
        max_tool_request_bytes: Any = _run.UNSET,
        idle_s: Optional[float] = _DEFAULTS["idle_s"],
        lifetime_s: Optional[float] = _DEFAULTS["lifetime_s"],
        shutdown_s: float = _DEFAULTS["shutdown_s"],
        file_write_bytes: Optional[int] = _run.DEFAULTS["file_write_bytes"],
        max_open_files: int = _run.DEFAULTS["max_open_files"],
        workdir: Optional[str] = None,
        preload: Optional[Iterable[str]] = None,
        mounts: Iterable[Any] = (),
        max_file_calls: Optional[int] = _run.DEFAULTS["max_file_calls"],
        snapshot: Optional[_snapshot.Snapshot] = None,
        keep_random: bool = False,
        network: Optional[_network.Network] = None,
        secrets: Optional[Mapping[str, _network.Secret]] = None,
        display_bytes: int = _run.DEFAULTS["display_bytes"],
    ) -> None:
        settings = _run.check_settings(
            env, grants, memory_bytes, deadline_s, output_bytes, fuel, file_write_bytes,
            max_open_files, workdir, preload, mounts, max_file_calls, display_bytes,
        )
        settings["snapshot"] = _snapshot.check_snapshot(snapshot, preload)
        if not isinstance(keep_random, bool):
            raise TypeError(f"keep_random must be a bool, not {type(keep_random).__name__}")
        settings["keep_random"] = keep_random
        self._deadline = settings["deadline_s"]
        self._output = settings["output_bytes"]
        self._fuel = settings["fuel"]
        self._display = settings["display_bytes"]
        idle = check_seconds("idle_s", idle_s)
        life = check_seconds("lifetime_s", lifetime_s)
        shut = check_seconds("shutdown_s", shutdown_s)
        door = _run.door_args(tools, gate, max_tool_calls, max_tool_request_bytes, None)
        secrets_d = _network.check_secrets(secrets, settings["env"])
        net = _network.check_network(network, secrets_d)
        # The session's requests, counted and recorded per turn (`_done`).
        self._network = _network.handler(net, secrets_d) if net is not None else None
        where = _run.artifacts_dir(door is not None)
        # Tools run, and async providers are awaited, on the loop of a dispatcher of the
        # session's own.
        self._dispatcher: Optional[_door.Dispatcher] = None
        if door is not None or settings["mounts"]:
            tool_list, gate_fn = (door[0], door[1]) if door is not None else ([], None)
            self._dispatcher = _door.Dispatcher(tool_list, gate_fn)
        options = _run.ext_options(settings, door, self._dispatcher, network=self._network)
        try:
            self._handle = _ext.SessionHandle(where, options, idle_s=idle, lifetime_s=life, shutdown_s=shut or _DEFAULTS["shutdown_s"])
        except BaseException:
            if self._dispatcher is not None:
                self._dispatcher.close()
            raise
        self._closed = False

    def _turn_args(self, code: Any, deadline_s: Any, output_bytes: Any, fuel: Any, display_bytes: Any = _run.UNSET) -> tuple[str, dict[str, Any]]:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        check_utf8("code", code)
        deadline = self._deadline if deadline_s is _run.UNSET else check_seconds("deadline_s", deadline_s)
        output = self._output if output_bytes is _run.UNSET else check_int("output_bytes", output_bytes, maximum=SIZE_MAX)
        fuel_cap = self._fuel if fuel is _run.UNSET else check_int("fuel", fuel, minimum=1, optional=True)
        if fuel_cap is not None and self._fuel is None:
            raise ValueError("fuel: this session was opened without fuel=, so its turns are not metered")
        display = self._display if display_bytes is _run.UNSET else check_int("display_bytes", display_bytes, maximum=SIZE_MAX)
        return code, {"deadline_s": deadline, "output_bytes": output, "fuel": fuel_cap, "display_bytes": display}

    def run(
        self, code: str, *, deadline_s: Any = _run.UNSET, output_bytes: Any = _run.UNSET, fuel: Any = _run.UNSET, cancel: Any = None,
        display_bytes: Any = _run.UNSET, on_stdout: Any = None, on_stderr: Any = None, on_display: Any = None,
    ) -> Completed:
        """Runs one turn and returns how it ended (its exit_code is the turn's status).
        ``display_bytes`` and the streaming callbacks (``on_stdout``, ``on_stderr``,
        ``on_display``) are ``run``'s, for this turn."""
        code, limits = self._turn_args(code, deadline_s, output_bytes, fuel, display_bytes)
        check_cancel(cancel)
        handlers = _stream.check_handlers(on_stdout, on_stderr, on_display, allow_async=False)
        tracer = _otel.tracer()
        if tracer is None:
            self._caller_context()
            return self._turn(code, limits, cancel, handlers)
        with _otel.span("wasi_python.turn", limits, tracer) as s:
            self._caller_context()
            done = self._turn(code, limits, cancel, handlers)
            _otel.end_run(s, done)
            return done

    def _caller_context(self) -> None:
        """A turn's tools and providers run in a copy of its caller's context (a traced
        turn's span is current in it)."""
        context = contextvars.copy_context()
        if self._dispatcher is not None:
            self._dispatcher.use_context(context)
        if self._network is not None:
            self._network.use_context(context)

    def _turn(self, code: str, limits: dict[str, Any], cancel: Any, handlers: Any) -> Completed:
        token, watch = cancel_token(cancel)
        try:
            if handlers is None:
                return self._done(self._handle.turn(code, cancel=token, **limits))
            token = token if token is not None else _ext.CancelToken()
            delivery = _stream.SyncDelivery(handlers, token)
            out = self._handle.turn(code, cancel=token, stream=_ext.EventStream(), on_event=delivery, **limits)
            return delivery.finish(self._done(out))
        finally:
            if watch is not None:
                watch.stop()

    async def run_async(
        self, code: str, *, deadline_s: Any = _run.UNSET, output_bytes: Any = _run.UNSET, fuel: Any = _run.UNSET,
        display_bytes: Any = _run.UNSET, on_stdout: Any = None, on_stderr: Any = None, on_display: Any = None,
    ) -> Completed:
        """``await session.run_async(code)``: one turn on a worker thread; cancelling the
        task stops the turn (which ends the session, as any trapped turn does). The
        callbacks are called on this event loop, async ones awaited in turn."""
        code, limits = self._turn_args(code, deadline_s, output_bytes, fuel, display_bytes)
        handlers = _stream.check_handlers(on_stdout, on_stderr, on_display, allow_async=True)
        tracer = _otel.tracer()
        if tracer is None:
            self._caller_context()
            return await self._turn_async(code, limits, handlers)
        with _otel.span("wasi_python.turn", limits, tracer) as s:
            self._caller_context()
            done = await self._turn_async(code, limits, handlers)
            _otel.end_run(s, done)
            return done

    async def _turn_async(self, code: str, limits: dict[str, Any], handlers: Any) -> Completed:
        import asyncio  # loaded already: an event loop is awaiting this

        from ._async import executor

        loop = asyncio.get_running_loop()
        token = _ext.CancelToken()
        if handlers is not None:
            stream = _ext.EventStream()
            delivery = _stream.AsyncDelivery(handlers, token)
            fut = loop.run_in_executor(executor(), functools.partial(self._handle.turn, code, cancel=token, stream=stream, **limits))
            out = await _stream.streamed(fut, stream, delivery, token, loop)
            return delivery.finish(self._done(out))
        fut = loop.run_in_executor(executor(), functools.partial(self._handle.turn, code, cancel=token, **limits))
        try:
            out = await asyncio.shield(fut)
        except asyncio.CancelledError:
            token.cancel()
            try:
                await asyncio.shield(fut)
            except BaseException:  # noqa: BLE001 - re-raising the cancellation
                pass
            raise
        return self._done(out)

    def _done(self, out: Any) -> Completed:
        """A turn's ``Completed``, with its network record; the next turn's counts start anew."""
        done = completed_from_ext(out)
        if self._network is not None:
            done = _network.completed_with(done, self._network)
            self._network.turn()
        return done

    def snapshot(self) -> _snapshot.Snapshot:
        """The interpreter as it rests between turns, to fork (``Session(snapshot=...)``,
        ``run(..., snapshot=...)``) or save. The session goes on. Raises ``SnapshotError``
        during a turn (``kind="busy"``), after the session ended (``"ended"``), or while the
        guest holds files open (``"open_files"``). It holds everything the guest held,
        secrets passed in ``env`` included; ``/tmp`` and the working folder's files are
        not carried."""
        return _snapshot.Snapshot(self._handle.snapshot())

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or None while it lives."""
        return self._handle.ended()

    def close(self) -> None:
        """Ends the session, running the guest's atexit handlers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._handle.close()
        finally:
            if self._dispatcher is not None:
                self._dispatcher.close()
            if self._network is not None:
                self._network.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed and self._dispatcher is not None:
                self._dispatcher.close()
        except Exception:  # noqa: BLE001
            pass
