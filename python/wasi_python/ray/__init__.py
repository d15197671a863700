"""Sandboxes on a Ray cluster: ``pip install wasi-python-sandbox[ray]``.

A `SandboxPool` is a set of Ray actors, each a process holding a warm runtime (the compiled
guest and the default preload snapshot loaded) that runs several guests at once, one per
CPU it is given. ``pool.run``, ``await pool.run_async`` and ``pool.map`` take ``run``'s
keywords and return the same `wasi_python.Completed` (tool and file records included) as
a local run; ``pool.session()`` is a `Session` that lives on one actor, can be saved after
each turn and continues on another actor when its own dies.

Tools and gates follow one rule. One that pickles (Ray's cloudpickle) is sent to the
worker and runs there, beside the sandbox. One that must keep the caller's authority (it
closes over a database connection, a client session, a lock) is marked ``stay(fn)``: the
worker offers the guest a tool with the same name, schema, docstring and timeout, and each
call crosses back to this process through the actor's mailbox, where the function runs;
the gate, the schema check, the timeout and the record are the worker's, as for a local
call. One that neither pickles nor is marked is refused before any work, naming it.

See docs/ray.md. Importing ``wasi_python`` never imports this module (nor Ray).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hashlib
import inspect
import itertools
import os
import sys
import threading
import time
import uuid
import warnings
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

try:
    import ray
    import ray.exceptions
    from ray import cloudpickle
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("wasi_python.ray needs Ray: pip install 'wasi-python-sandbox[ray]'") from e

import wasi_python
from wasi_python import Completed, MemoryFiles, Snapshot, _door, _tools
from wasi_python import _wasi_python as _ext
from wasi_python.tools import ToolCall, ToolDenied, ToolError, tool

__all__ = ["SandboxPool", "PoolSession", "stay", "Stay", "ActorLost", "SessionLost", "CompileNotice", "protect_local_runs"]


# --------------------------------------------------------------------------------------------
# Errors


class ActorLost(RuntimeError):
    """A run (or session turn) was held by a sandbox actor that died (killed, out of memory,
    its node lost). ``actor`` names it; the pool has replaced it, so a new run succeeds.
    Whether the lost run's tool calls had taken effect is not known."""

    def __init__(self, message: str, actor: str) -> None:
        super().__init__(message)
        self.actor = actor

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.actor))


class SessionLost(ActorLost):
    """A session's actor died. The session has been resumed on another actor from its last
    saved state (a fresh interpreter if it was never saved): ``lost_turns`` are the
    completed turns whose effects are gone (none when it saved after each turn); ``turn`` is
    the turn that was running, or being sent, when the actor was found dead (it did not
    complete). Run the next turn as usual."""

    def __init__(self, message: str, actor: str, lost_turns: tuple[int, ...], turn: int, resumed_on: str) -> None:
        super().__init__(message, actor)
        self.lost_turns = lost_turns
        self.turn = turn
        self.resumed_on = resumed_on

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.actor, self.lost_turns, self.turn, self.resumed_on))


class CompileNotice(RuntimeWarning):
    """A worker had to compile the guest (or build a snapshot) instead of loading what the
    install or the cache ships: minutes of CPU on that node, once. Warned once per message."""


# --------------------------------------------------------------------------------------------
# Local runs in a Ray driver: the trap handlers


class protect_local_runs:
    """``with protect_local_runs(): ray.init(...)`` (and the same around ``ray.shutdown()``):
    keeps this process's local guests' traps working after them.

    wasmtime turns a guest's stack overflow, ``unreachable`` or out-of-bounds access into
    that run's ``trapped`` through signal handlers installed at the process's first run.
    ``ray.init`` in a driver installs Ray's crash reporter over them (SIGSEGV, SIGILL,
    SIGFPE, SIGBUS), which does not pass a guest's fault back: a local run that traps after
    it would kill the process; ``ray.shutdown`` then leaves the defaults, just as fatal.
    At the block's end, the runtime puts wasmtime's handlers back where another has
    replaced them (then Ray's crash report is lost for this driver process only; in Ray's
    workers Ray comes first and wasmtime chains to it). `SandboxPool()` does it too, once
    Ray runs. Nothing is done in a process that has not run a guest yet (wasmtime will
    then chain to Ray's handler), nor to a handler set before wasmtime's."""

    def __enter__(self) -> "protect_local_runs":
        return self

    def __exit__(self, *exc: Any) -> None:
        _ext.restore_trap_handlers()


# --------------------------------------------------------------------------------------------
# stay(): served from the caller's process


class Stay:
    """A tool or gate marked to run in the caller's process (made by `stay`)."""

    __slots__ = ("target",)

    def __init__(self, target: Any) -> None:
        if isinstance(target, Stay):
            target = target.target
        if not callable(target):
            raise TypeError(f"stay() takes a tool, a function or a gate, not {type(target).__name__}")
        self.target = target

    def __repr__(self) -> str:
        return f"stay({self.target!r})"


def stay(target: Any) -> Stay:
    """Marks a tool (or a function, or ``gate=``) to run here, in the caller's process, not
    on the worker: ``tools=[stay(query_db)]``, ``gate=stay(my_gate)``. The guest sees the
    same tool; each call crosses back to this process (2-3 ms on one machine, two Ray messages)."""
    return Stay(target)


def _why_not_picklable(obj: Any) -> Optional[str]:
    try:
        cloudpickle.dumps(obj)
    except Exception as e:  # noqa: BLE001 - any failure to pickle is the answer
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


# --------------------------------------------------------------------------------------------
# What a run sends: its keywords, and a bundle of tools, gate, mounts and snapshot

_REFUSED = {
    "cancel": "cancel= is not sent to a worker: cancel the run_async task instead (it stops the guest)",
    "host": "host= is not served by the pool: offer tools= instead",
}

_RUN_KEYWORDS = frozenset({
    "stdin", "env", "grants", "memory_bytes", "deadline_s", "output_bytes", "fuel", "tools", "gate",
    "max_tool_calls", "max_tool_request_bytes", "file_write_bytes", "max_open_files", "workdir",
    "preload", "mounts", "max_file_calls", "snapshot",
})
_SESSION_KEYWORDS = (_RUN_KEYWORDS - {"stdin"}) | {"idle_s", "lifetime_s", "shutdown_s", "keep_random"}


class _StaySpec:
    """A staying tool or gate as the worker receives it: its face, its unit number, and
    whether it is async (awaited, so cancelled when its call ends) or sync."""

    __slots__ = ("face", "unit", "is_async")

    def __init__(self, face: dict[str, Any], unit: int, is_async: bool) -> None:
        self.face, self.unit, self.is_async = face, unit, is_async

    def __reduce__(self) -> tuple[Any, ...]:
        return (_StaySpec, (self.face, self.unit, self.is_async))


class _Bundle:
    """The parts of a run that are not plain values, checked and pickled once: tools, gate,
    mounts (their providers), snapshot bytes. ``units`` are this process's staying tools and
    gate, registered with the pool's server while runs use the bundle."""

    def __init__(self, kw: dict[str, Any], server: "_Server") -> None:
        self.units: list[int] = []
        self.server = server
        self.has_stays = False
        try:
            self._make(kw)
        except BaseException:
            self.release()  # the units registered before a refusal
            raise

    def _make(self, kw: dict[str, Any]) -> None:
        server = self.server
        sendable: dict[str, Any] = {}
        tools = kw.pop("tools", None)
        gate = kw.pop("gate", _tools_unset)
        if tools is not None:
            if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
                raise TypeError(f"tools= takes a list of tools or functions, not {type(tools).__name__}")
            out: list[Any] = []
            staying: list[tuple[int, Any]] = []
            for i, item in enumerate(tools):
                if isinstance(item, Stay):
                    t = _tools.as_tools([item.target])[0]
                    staying.append((len(out), t))
                    out.append(t)
                    continue
                t = _tools.as_tools([item])[0]
                why = _why_not_picklable(t)
                if why is not None:
                    raise TypeError(
                        f"tool {t.name!r} cannot be sent to the Ray workers ({why}). Make it picklable "
                        f"(nothing unpicklable in what it closes over or binds) so it runs on the worker, "
                        f"beside the sandbox; or mark it stay({t.name}) (wasi_python.ray.stay) so it runs "
                        f"in this process and each call crosses back here"
                    )
                out.append(t)
            _tools.as_tools(out)  # one name, one tool
            for index, t in staying:
                unit = server.register("tool", t)
                self.units.append(unit)
                out[index] = _StaySpec(_tools.face(t), unit, t.is_async)
            sendable["tools"] = out
        if gate is not _tools_unset:
            if isinstance(gate, Stay):
                _door.check_gate(gate.target)
                unit = server.register("gate", gate.target)
                self.units.append(unit)
                sendable["gate"] = _StaySpec({}, unit, _is_async(gate.target))
            elif gate is None:
                sendable["gate"] = None
            else:
                _door.check_gate(gate)
                why = _why_not_picklable(gate)
                if why is not None:
                    raise TypeError(
                        f"gate {getattr(gate, '__name__', type(gate).__name__)!r} cannot be sent to the Ray workers ({why}). "
                        f"Make it picklable so it runs on the worker, or pass gate=stay(...) (wasi_python.ray.stay) "
                        f"so it runs in this process"
                    )
                sendable["gate"] = gate
        mounts = kw.pop("mounts", ())
        if mounts:
            mounts = list(mounts)
            for m in mounts:
                why = _why_not_picklable(m)
                if why is not None:
                    raise TypeError(
                        f"the provider of the mount at {getattr(m, 'guest_path', '?')!r} cannot be sent to the Ray "
                        f"workers ({why}); a mount's provider runs on the worker, so it must pickle"
                    )
            sendable["mounts"] = mounts
            self.mounts = mounts
        else:
            self.mounts = []
        snapshot = kw.pop("snapshot", None)
        if snapshot is not None:
            if isinstance(snapshot, Snapshot):
                snapshot = snapshot.to_bytes()
            if not isinstance(snapshot, (bytes, bytearray)):
                raise TypeError(f"snapshot must be a wasi_python.Snapshot or its bytes, not {type(snapshot).__name__}")
            sendable["snapshot"] = bytes(snapshot)
        self.has_stays = bool(self.units)
        if sendable:
            data = cloudpickle.dumps(sendable)
            self.key: Optional[str] = hashlib.blake2b(data, digest_size=16).hexdigest()
            self.ref: Optional[list[Any]] = [ray.put(data)]
        else:
            self.key, self.ref = None, None

    def wire(self) -> Optional[tuple[str, list[Any]]]:
        return (self.key, self.ref) if self.key is not None else None

    def take_back(self, files: Optional[list[Optional[dict[str, bytes]]]]) -> None:
        """A writable `MemoryFiles` mount's files as the worker's copy left them."""
        if not files:
            return
        for m, new in zip(self.mounts, files):
            if new is not None and isinstance(m.provider, MemoryFiles) and isinstance(m.provider.files, dict):
                m.provider.files.clear()
                m.provider.files.update(new)

    def release(self) -> None:
        for unit in self.units:
            self.server.release(unit)
        self.units = []


class _ToolsUnset:
    def __repr__(self) -> str:
        return "<not given>"


_tools_unset = _ToolsUnset()


def _split(kw: dict[str, Any], allowed: frozenset[str], what: str) -> dict[str, Any]:
    for k in kw:
        if k in _REFUSED:
            raise TypeError(_REFUSED[k])
        if k not in allowed:
            raise TypeError(f"{what} got an unexpected keyword argument {k!r}")
    return dict(kw)


# --------------------------------------------------------------------------------------------
# The worker: one actor process, a warm runtime, many guests


class _Mailbox:
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


class _Forward:
    """The worker's callable for a staying async tool: its arguments cross back to the
    caller; when the call ends first (timeout, deadline), the caller's task is cancelled."""

    def __init__(self, mail: _Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    async def __call__(self, **arguments: Any) -> Any:
        return _answer(*await self.mail.ask("tool", self.unit, arguments))


class _ForwardSync:
    """The same for a staying sync tool, waiting on its call's thread as a local sync tool
    runs on it (one fewer hop than an awaited call)."""

    def __init__(self, mail: _Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    def __call__(self, **arguments: Any) -> Any:
        return _answer(*self.mail.ask_blocking("tool", self.unit, arguments))


def _gate_verdict(answer: tuple[str, Any, Optional[str]]) -> Any:
    status, payload, fault = answer
    if status == "ok":
        return None
    return _answer(status, payload, fault)


class _ForwardGate:
    """The worker's gate for a staying async gate: the `ToolCall` crosses back to the caller."""

    def __init__(self, mail: _Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    async def __call__(self, call: ToolCall) -> Any:
        return _gate_verdict(await self.mail.ask("gate", self.unit, (call.seq, call.tool, call.arguments, call.request_bytes)))


class _ForwardGateSync:
    """The same for a staying sync gate."""

    def __init__(self, mail: _Mailbox, unit: int) -> None:
        self.mail, self.unit = mail, unit

    def __call__(self, call: ToolCall) -> Any:
        return _gate_verdict(self.mail.ask_blocking("gate", self.unit, (call.seq, call.tool, call.arguments, call.request_bytes)))


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(type(fn), "__call__", None))


def _rss_bytes() -> int:
    return _memory()["rss"]


def _memory() -> dict[str, int]:
    """This process's resident memory, and its proportional share (PSS: pages shared with
    other processes, such as the compiled guest's file mapping, divided among them)."""
    out = {"rss": 0, "pss": 0}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    out[key.lower()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


class _Capture:
    """Copies what this process writes to its stderr (fd 2) while warming up, to find the
    runtime's ``wasi_python: ...`` notices; the text still reaches stderr afterwards."""

    def __enter__(self) -> "_Capture":
        import tempfile

        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()
        if self.text:
            os.write(2, self.text.encode())


class SandboxActor:
    """One worker process of a `SandboxPool` (used through Ray: ``ray.remote(SandboxActor)``)."""

    def __init__(self, name: str, cpus: int) -> None:
        self.name = name
        self.cpus = cpus
        wasi_python.set_async_workers(max(1, cpus))
        self.mail = _Mailbox()
        self.bundles: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.sessions: dict[str, Any] = {}
        t = time.perf_counter()
        with _Capture() as cap:
            # The compiled guest and the default preload snapshot, loaded (or, with a notice,
            # compiled and built) now, before any run waits for them.
            done = wasi_python.run(["-c", "pass"])
        self.warm_s = time.perf_counter() - t
        self.notices = [line for line in cap.text.splitlines() if line.startswith("wasi_python:")]
        self.warm_ok = done.ok

    def info(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {
            "name": self.name, "pid": os.getpid(), "node": ctx.get_node_id(), "warm_s": self.warm_s,
            "notices": self.notices, "warm_ok": self.warm_ok, "rss_bytes": _rss_bytes(),
            "artifacts": str(wasi_python.artifacts()),
        }

    async def ping(self) -> None:
        """Nothing: a health check, and Ray's own round trip to this actor."""

    def rss(self) -> int:
        return _rss_bytes()

    def memory(self) -> dict[str, int]:
        return _memory()

    async def _bundle(self, wire: Optional[tuple[str, list[Any]]]) -> dict[str, Any]:
        if wire is None:
            return {}
        key, (ref,) = wire
        hit = self.bundles.get(key)
        if hit is not None:
            self.bundles.move_to_end(key)
            return hit
        data = await ref
        sent = cloudpickle.loads(data)
        kw: dict[str, Any] = {}
        if "tools" in sent:
            kw["tools"] = [
                _tools.forwarding(t.face, (_Forward if t.is_async else _ForwardSync)(self.mail, t.unit))
                if isinstance(t, _StaySpec) else t
                for t in sent["tools"]
            ]
        if "gate" in sent:
            g = sent["gate"]
            if isinstance(g, _StaySpec):
                g = (_ForwardGate if g.is_async else _ForwardGateSync)(self.mail, g.unit)
            kw["gate"] = g
        if "mounts" in sent:
            kw["mounts"] = sent["mounts"]
        if "snapshot" in sent:
            kw["snapshot"] = await asyncio.get_running_loop().run_in_executor(None, Snapshot.from_bytes, sent["snapshot"])
        # Writable MemoryFiles are changed by a run: not shared between runs.
        if not any(getattr(m, "writable", False) for m in kw.get("mounts", ())):
            self.bundles[key] = kw
            while len(self.bundles) > 64:
                self.bundles.popitem(last=False)
        return kw

    @staticmethod
    def _mount_files(kw: dict[str, Any]) -> Optional[list[Optional[dict[str, bytes]]]]:
        mounts = kw.get("mounts") or ()
        out = [dict(m.provider.files) if m.writable and isinstance(m.provider, MemoryFiles) else None for m in mounts]
        return out if any(f is not None for f in out) else None

    async def run(self, argv: Any, kw: dict[str, Any], wire: Optional[tuple[str, list[Any]]]) -> tuple[str, Any, Any]:
        """One guest: ``("ok", Completed, files of writable MemoryFiles)`` or ``("raise", error, None)``."""
        try:
            parts = await self._bundle(wire)
            if parts.get("mounts"):
                parts = dict(parts, mounts=cloudpickle.loads(cloudpickle.dumps(parts["mounts"])))
            done = await wasi_python.run_async(argv, **kw, **parts)
            return ("ok", done, self._mount_files(parts))
        except Exception as e:  # noqa: BLE001 - the caller raises it (bad arguments and the like)
            return ("raise", e, None)

    async def run_many(self, jobs: list[tuple[Any, dict[str, Any]]], wire: Optional[tuple[str, list[Any]]]) -> list[tuple[str, Any, Any]]:
        """Several guests, one at a time in order, answered together (fewer messages)."""
        return [await self.run(argv, kw, wire) for argv, kw in jobs]

    async def poll(self, wait_s: float) -> list[tuple[Any, ...]]:
        return await self.mail.poll(wait_s)

    async def deliver(self, answers: list[tuple[int, Any]]) -> None:
        self.mail.deliver(answers)

    # Sessions

    async def open_session(self, sid: str, kw: dict[str, Any], wire: Optional[tuple[str, list[Any]]], saved: Optional[bytes]) -> tuple[str, Any]:
        try:
            parts = dict(await self._bundle(wire))
            if saved is not None:
                parts["snapshot"] = await asyncio.get_running_loop().run_in_executor(None, Snapshot.from_bytes, saved)
                kw = {k: v for k, v in kw.items() if k != "preload"}
            self.sessions[sid] = await asyncio.get_running_loop().run_in_executor(None, lambda: wasi_python.Session(**kw, **parts))
            return ("ok", self.name)
        except Exception as e:  # noqa: BLE001
            return ("raise", e)

    async def turn(self, sid: str, code: str, limits: dict[str, Any], save: bool) -> tuple[str, Any, Any]:
        s = self.sessions.get(sid)
        if s is None:
            return ("raise", wasi_python.SessionEnded("this session is not open on this actor"), None)
        try:
            done = await s.run_async(code, **limits)
        except Exception as e:  # noqa: BLE001
            return ("raise", e, None)
        saved = None
        if save and s.ended is None:
            saved = await self._save(s)
        return ("ok", done, saved)

    async def _save(self, s: Any) -> Any:
        def take() -> Any:
            try:
                return s.snapshot().to_bytes()
            except wasi_python.SnapshotError as e:
                return e

        return await asyncio.get_running_loop().run_in_executor(None, take)

    async def save_session(self, sid: str) -> Any:
        s = self.sessions.get(sid)
        if s is None:
            return wasi_python.SessionEnded("this session is not open on this actor")
        return await self._save(s)

    async def close_session(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            await asyncio.get_running_loop().run_in_executor(None, s.close)


_RemoteActor = ray.remote(SandboxActor)


# --------------------------------------------------------------------------------------------
# The caller's side: serving staying tools and gates


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


class _Server:
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


# --------------------------------------------------------------------------------------------
# The pool


class _Slot:
    """One place in the pool: its current actor, replaced when it dies."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.actor: Any = None
        self.name = ""
        self.in_flight = 0


class SandboxPool:
    """``actors`` Ray actors, each a process with a warm runtime running up to
    ``cpus_per_actor`` guests at once (it reserves that many CPUs). ``max_in_flight`` (default
    ``2 * cpus_per_actor``) bounds the runs `map` keeps queued at one actor.
    ``actor_options`` goes to Ray's ``.options()`` (``runtime_env``, ``resources``,
    ``scheduling_strategy``, ``memory``...). Needs ``ray.init()`` first (or connects as
    Ray does by default). Blocks until every actor is warm; a worker that had to compile
    the guest warns once (`CompileNotice`)."""

    def __init__(self, actors: int = 2, *, cpus_per_actor: int = 1, max_in_flight: Optional[int] = None, actor_options: Optional[Mapping[str, Any]] = None, warm: bool = True) -> None:
        for label, v in (("actors", actors), ("cpus_per_actor", cpus_per_actor)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{label} must be a positive int, not {v!r}")
        if max_in_flight is None:
            max_in_flight = 2 * cpus_per_actor
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive int, not {max_in_flight!r}")
        self.cpus_per_actor = cpus_per_actor
        self.max_in_flight = max_in_flight
        self._options = dict(actor_options or {})
        self._id = uuid.uuid4().hex[:8]
        self._lock = threading.Lock()
        self._server = _Server()
        self._slots = [_Slot(i) for i in range(actors)]
        self._notices_seen: set[str] = set()
        #: (actor name, notice) for every compile notice a worker reported.
        self.notices: list[tuple[str, str]] = []
        self._infos: dict[str, dict[str, Any]] = {}
        self._closed = False
        self._watching = False
        for slot in self._slots:
            self._start(slot)
        # Ray runs now (ray.init(), or started by the first actor): in a driver that ran
        # guests before, its crash reporter replaced wasmtime's trap handlers; put back.
        _ext.restore_trap_handlers()
        if warm:
            self.ready()

    # Actors

    def _start(self, slot: _Slot) -> None:
        slot.generation += 1
        slot.name = f"wasi-python-{self._id}-{slot.index}.{slot.generation}"
        options = {"num_cpus": self.cpus_per_actor, "max_concurrency": self.max_in_flight + 16, "name": slot.name, **self._options}
        slot.actor = _RemoteActor.options(**options).remote(slot.name, self.cpus_per_actor)
        slot.in_flight = 0
        if self._watching:
            self._server.watch(slot.actor, slot.name)

    def _watch_all(self) -> None:
        """From the first run with a staying tool or gate on, every actor's mailbox is polled."""
        self._watching = True
        for slot in self._slots:
            self._server.watch(slot.actor, slot.name)

    def ready(self, timeout_s: Optional[float] = None) -> list[dict[str, Any]]:
        """Waits until every actor is warm; each actor's facts (name, node, pid, seconds to
        warm, RSS, notices). Warns (`CompileNotice`) once per notice a worker printed."""
        infos = ray.get([s.actor.info.remote() for s in self._slots], timeout=timeout_s)
        for info in infos:
            self._took(info)
        return infos

    def _took(self, info: dict[str, Any]) -> None:
        self._infos[info["name"]] = info
        for n in info["notices"]:
            self.notices.append((info["name"], n))
            if n not in self._notices_seen:
                self._notices_seen.add(n)
                warnings.warn(f"Ray worker {info['name']} (node {info['node'][:12]}): {n}", CompileNotice, stacklevel=3)

    @property
    def actors(self) -> list[Any]:
        """The current actor handles, one per slot (e.g. for ``ray.kill`` in a test)."""
        return [s.actor for s in self._slots]

    @property
    def actor_names(self) -> list[str]:
        return [s.name for s in self._slots]

    def _slot_of(self, actor: Any) -> Optional[_Slot]:
        for s in self._slots:
            if s.actor is actor:
                return s
        return None

    def _lost(self, slot: _Slot, actor: Any, name: str, err: BaseException) -> ActorLost:
        """The error for a run ``actor`` held; replaces the actor (once)."""
        with self._lock:
            if slot.actor is actor and not self._closed:
                self._start(slot)
                replaced = threading.Thread(target=self._info_later, args=(slot.actor,), daemon=True)
                replaced.start()
        cause = type(err).__name__
        return ActorLost(f"the sandbox actor {name} was lost ({cause}) while it held this run; the pool replaced it with {slot.name}", name)

    def _info_later(self, actor: Any) -> None:
        try:
            self._took(ray.get(actor.info.remote()))
        except Exception:  # noqa: BLE001 - that one died too; the next run says so
            pass

    def _pick(self) -> _Slot:
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxPool is closed")
            slot = min(self._slots, key=lambda s: s.in_flight)
            slot.in_flight += 1
            return slot

    def _done(self, slot: _Slot, generation: int) -> None:
        with self._lock:
            if slot.generation == generation:
                slot.in_flight -= 1

    def _bundle(self, kw: dict[str, Any]) -> _Bundle:
        b = _Bundle(kw, self._server)
        if b.has_stays:
            self._watch_all()
        return b

    @staticmethod
    def _result(bundle: _Bundle, out: tuple[str, Any, Any]) -> Completed:
        status, value, files = out
        if status == "raise":
            raise value
        bundle.take_back(files)
        return value

    # Runs

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        """``wasi_python.run`` on one of the pool's actors: the same keywords (not ``cancel``
        or ``host``) and the same `Completed`. Raises `ActorLost` if the actor dies meanwhile."""
        kw = _split(kw, _RUN_KEYWORDS, "run()")
        bundle = self._bundle(kw)
        try:
            slot = self._pick()
            actor, name, gen = slot.actor, slot.name, slot.generation
            try:
                out = ray.get(actor.run.remote(list(argv), kw, bundle.wire()))
            except ray.exceptions.RayActorError as e:
                raise self._lost(slot, actor, name, e) from None
            finally:
                self._done(slot, gen)
            return self._result(bundle, out)
        finally:
            bundle.release()

    async def run_async(self, argv: Sequence[str], **kw: Any) -> Completed:
        """``await pool.run_async(argv, ...)``: `run`, awaited. Cancelling the task cancels
        the actor's run (the guest ends "cancelled")."""
        kw = _split(kw, _RUN_KEYWORDS, "run_async()")
        bundle = self._bundle(kw)
        try:
            slot = self._pick()
            actor, name, gen = slot.actor, slot.name, slot.generation
            ref = actor.run.remote(list(argv), kw, bundle.wire())
            try:
                out = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)
                raise
            except ray.exceptions.RayActorError as e:
                raise self._lost(slot, actor, name, e) from None
            finally:
                self._done(slot, gen)
            return self._result(bundle, out)
        finally:
            bundle.release()

    def map(self, programs: Iterable[Union[str, Sequence[str]]], *, batch: Optional[int] = None, **kw: Any) -> list[Union[Completed, ActorLost]]:
        """Runs each program (a str of code, or an argv list) with the same keywords, over
        every actor, at most ``max_in_flight`` runs queued at each, and returns the results
        in the programs' order. A run its actor held when it died is an `ActorLost` in the
        list, not raised; the others are unaffected. Bad keywords raise before any run.
        ``batch`` runs that many programs per message to an actor (default: 1 for a few
        programs, more for long lists, so messages do not cost more than the runs)."""
        kw = _split(kw, _RUN_KEYWORDS, "map()")
        argvs = [["-c", p] if isinstance(p, str) else list(p) for p in programs]
        n = len(argvs)
        results: list[Any] = [None] * n
        if n == 0:
            return results
        if batch is None:
            # Enough messages for every actor to stay busy (4 rounds of max_in_flight), no
            # more than 32 runs each: a message costs about 2.5 ms of CPU (driver, actor,
            # Ray's threads) against 5-10 ms for a small guest.
            batch = max(1, min(32, n // (4 * len(self._slots) * self.max_in_flight)))
        bundle = self._bundle(kw)
        wire = bundle.wire()
        todo = collections.deque(range(0, n, batch))
        inflight: dict[Any, tuple[list[int], _Slot, Any, str, int]] = {}
        try:
            while todo or inflight:
                with self._lock:
                    if self._closed:
                        raise RuntimeError("this SandboxPool is closed")
                    for slot in sorted(self._slots, key=lambda s: s.in_flight):
                        while todo and slot.in_flight < self.max_in_flight:
                            start = todo.popleft()
                            idx = list(range(start, min(start + batch, n)))
                            ref = slot.actor.run_many.remote([(argvs[i], kw) for i in idx], wire)
                            slot.in_flight += 1
                            inflight[ref] = (idx, slot, slot.actor, slot.name, slot.generation)
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    idx, slot, actor, name, gen = inflight.pop(ref)
                    self._done(slot, gen)
                    try:
                        outs = ray.get(ref)
                    except ray.exceptions.RayActorError as e:
                        err = self._lost(slot, actor, name, e)
                        for i in idx:
                            results[i] = err
                        continue
                    for i, out in zip(idx, outs):
                        results[i] = self._result(bundle, out)  # an argument error raises
        except BaseException:
            for ref in inflight:
                ray.cancel(ref)
            raise
        finally:
            bundle.release()
        return results

    def session(self, *, autosave: bool = True, snapshot: Union[None, bytes, Snapshot] = None, actor: Optional[int] = None, **kw: Any) -> "PoolSession":
        """A `Session` on one actor (``actor``: a slot index; default the least busy), with
        `Session`'s keywords. ``autosave`` (default) saves it after each turn, so an actor's
        death loses no completed turn; ``snapshot=`` (bytes from ``PoolSession.save()`` or a
        `Snapshot`) continues a saved session."""
        kw = _split(kw, _SESSION_KEYWORDS, "session()")
        return PoolSession(self, kw, autosave, snapshot, actor)

    def rss(self) -> dict[str, int]:
        """Each actor's resident memory in bytes."""
        return dict(zip(self.actor_names, ray.get([s.actor.rss.remote() for s in self._slots])))

    def memory(self) -> dict[str, dict[str, int]]:
        """Each actor's resident memory (``rss``) and its share of pages shared with other
        processes (``pss``), in bytes."""
        return dict(zip(self.actor_names, ray.get([s.actor.memory.remote() for s in self._slots])))

    def close(self) -> None:
        """Ends the actors (runs they hold fail) and the serving of staying tools."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.close()
        for s in self._slots:
            try:
                ray.kill(s.actor)
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PoolSession:
    """A `Session` living on one actor of a `SandboxPool` (made by ``pool.session()``).

    ``run(code)`` runs a turn there and returns its `Completed`. ``save()`` takes the session
    as it rests and keeps its bytes here (``saved``, at turn ``saved_turn``); with
    ``autosave`` that happens after every turn. When the actor dies, the next ``run`` (or
    the one in flight) raises `SessionLost` after resuming the session on another actor from
    ``saved``; ``lost_turns`` says which completed turns are gone. ``move()`` continues it
    on another actor."""

    def __init__(self, pool: SandboxPool, kw: dict[str, Any], autosave: bool, snapshot: Any, actor: Optional[int]) -> None:
        self._pool = pool
        self._kw = kw
        self._bundle = pool._bundle(dict(kw))
        self._plain = {k: v for k, v in kw.items() if k not in ("tools", "gate", "mounts", "snapshot")}
        self.autosave = autosave
        if isinstance(snapshot, Snapshot):
            snapshot = snapshot.to_bytes()
        #: The last saved state (bytes of a `Snapshot`), or None.
        self.saved: Optional[bytes] = snapshot
        #: The turn count when ``saved`` was taken.
        self.saved_turn = 0
        #: Turns completed so far (on the current interpreter's line).
        self.turns = 0
        #: Turns completed after the last save that could not be saved (``SnapshotError``).
        self.unsaved: list[int] = []
        self._id = uuid.uuid4().hex
        self._closed = False
        self._open(self._choose(actor))

    def _choose(self, index: Optional[int], avoid: Any = None) -> _Slot:
        slots = self._pool._slots
        if index is not None:
            return slots[index]
        candidates = [s for s in slots if s.actor is not avoid] or slots
        return min(candidates, key=lambda s: s.in_flight)

    def _open(self, slot: _Slot) -> None:
        self._slot, self._actor, self._name = slot, slot.actor, slot.name
        try:
            status, value = ray.get(self._actor.open_session.remote(self._id, self._plain, self._bundle.wire(), self.saved))
        except ray.exceptions.RayActorError as e:
            self._pool._lost(slot, self._actor, self._name, e)
            return self._open(self._choose(None, avoid=self._actor))
        if status == "raise":
            raise value

    @property
    def actor(self) -> str:
        """The name of the actor it lives on."""
        return self._name

    def run(self, code: str, **limits: Any) -> Completed:
        """One turn (``deadline_s``, ``output_bytes``, ``fuel`` as `Session.run`)."""
        if self._closed:
            raise wasi_python.SessionEnded("this session is closed")
        for k in limits:
            if k not in ("deadline_s", "output_bytes", "fuel"):
                raise TypeError(f"run() got an unexpected keyword argument {k!r}")
        turn = self.turns + 1
        try:
            status, value, saved = ray.get(self._actor.turn.remote(self._id, code, limits, self.autosave))
        except ray.exceptions.RayActorError as e:
            self._resume(e, turn)
        if status == "raise":
            raise value
        self.turns = turn
        if isinstance(saved, bytes):
            self.saved, self.saved_turn, self.unsaved = saved, turn, []
        elif self.autosave:
            self.unsaved.append(turn)
        return value

    def _resume(self, err: BaseException, turn: int) -> None:
        old = self._name
        lost = tuple(range(self.saved_turn + 1, self.turns + 1))
        self._pool._lost(self._slot, self._actor, old, err)
        self.turns = self.saved_turn
        self.unsaved = []
        self._open(self._choose(None, avoid=self._actor))
        what = f"turns {list(lost)} are lost" if lost else "no completed turn is lost"
        raise SessionLost(
            f"the sandbox actor {old} holding this session was lost ({type(err).__name__}) at turn {turn}; "
            f"resumed on {self._name} from the state saved after turn {self.saved_turn}: {what}",
            old, lost, turn, self._name,
        )

    def save(self) -> bytes:
        """Saves the session as it rests (``saved``) and returns the bytes, which
        ``pool.session(snapshot=...)`` (or `Snapshot.from_bytes`) continues anywhere."""
        try:
            out = ray.get(self._actor.save_session.remote(self._id))
        except ray.exceptions.RayActorError as e:
            self._resume(e, self.turns + 1)
        if isinstance(out, BaseException):
            raise out
        self.saved, self.saved_turn, self.unsaved = out, self.turns, []
        return out

    def move(self, actor: Optional[int] = None) -> str:
        """Saves the session, ends it here, and continues it on another actor (``actor``:
        a slot index); returns that actor's name."""
        self.save()
        old_actor, old_id = self._actor, self._id
        self._id = uuid.uuid4().hex
        self._open(self._choose(actor, avoid=old_actor))
        try:
            ray.get(old_actor.close_session.remote(old_id))
        except ray.exceptions.RayError:
            pass
        return self._name

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self._actor.close_session.remote(self._id))
        except ray.exceptions.RayError:
            pass
        finally:
            self._bundle.release()

    def __enter__(self) -> "PoolSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
