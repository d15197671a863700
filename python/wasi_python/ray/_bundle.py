"""What a pool run sends to a worker and takes back: tools, gate, mounts and snapshot checked and pickled once, and writable files."""

from __future__ import annotations

import hashlib
import inspect
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

import ray
from ray import cloudpickle

from wasi_python import Completed, MemoryFiles, Snapshot, _door, _tools

from ._stay import Stay, StaySpec

if TYPE_CHECKING:
    from ._server import Server


def _why_not_picklable(obj: Any) -> Optional[str]:
    try:
        cloudpickle.dumps(obj)
    except Exception as e:  # noqa: BLE001 - any failure to pickle is the answer
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


class Bundle:
    """The parts of a run that are not plain values, checked and pickled once: tools, gate,
    mounts (their providers), snapshot bytes. ``units`` are this process's staying tools and
    gate, registered with the pool's server while runs use the bundle."""

    def __init__(self, kw: dict[str, Any], server: "Server") -> None:
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
                out[index] = StaySpec(_tools.face(t), unit, t.is_async)
            sendable["tools"] = out
        if gate is not _tools_unset:
            if isinstance(gate, Stay):
                _door.check_gate(gate.target)
                unit = server.register("gate", gate.target)
                self.units.append(unit)
                sendable["gate"] = StaySpec({}, unit, _is_async(gate.target))
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

    def result(self, out: tuple[str, Any, Any]) -> Completed:
        """A worker's answer to one run: its `Completed` (the files taken back), or the
        error it raised, raised here."""
        status, value, files = out
        if status == "raise":
            raise value
        self.take_back(files)
        return value

    def release(self) -> None:
        for unit in self.units:
            self.server.release(unit)
        self.units = []


class _ToolsUnset:
    def __repr__(self) -> str:
        return "<not given>"


_tools_unset = _ToolsUnset()


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(type(fn), "__call__", None))


def writable_files(kw: dict[str, Any]) -> Optional[list[Optional[dict[str, bytes]]]]:
    """On the worker, after a run: each writable `MemoryFiles` mount's files (None for the
    other mounts), for `Bundle.take_back`; None when there is none."""
    mounts = kw.get("mounts") or ()
    out = [dict(m.provider.files) if m.writable and isinstance(m.provider, MemoryFiles) else None for m in mounts]
    return out if any(f is not None for f in out) else None
