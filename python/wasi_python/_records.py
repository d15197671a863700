"""The records a run returns: `Completed`, and inside it the door's `ToolRecord` (a
`ToolOutcome` per frame) and the mounts' `FileRecord` (`FileFault`); and
`completed_from_ext`, which makes them from the extension's ``Outcome``.

Plain frozen data: this module imports neither the extension nor asyncio, so
`wasi_python.tools` (which re-exports the tool records) imports without compiled code.
The records are frozen dataclasses to ``dataclasses`` and type checkers, written out as
`_frozen.Record` classes: a new process imports neither ``dataclasses`` nor ``typing``
for them (_frozen.py).
"""

from __future__ import annotations

from ._frozen import FACTORY, Record, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional

    from ._network import NetworkRecord

_set = object.__setattr__

__all__ = ["Completed", "ToolOutcome", "ToolRecord", "FileFault", "FileRecord", "Display", "Stdout", "Stderr"]


@record(frozen=True)
class Completed(Record):
    """How a run ended. Every guest behaviour ends here; ``run`` does not raise for it.

    - ``exit_code``: the exit status (0-255), or None when the run trapped.
    - ``stdout``/``stderr``: captured bytes, at most ``output_bytes`` each.
    - ``trapped``: None, or why the host stopped the guest: "deadline", "out of fuel",
      "cancelled", "stack overflow", "memory", "unreachable", "memory out of bounds", ...
    - ``truncated``: the streams that dropped output past the cap ("stdout", "stderr").
    - ``fuel_used``: fuel spent when ``fuel=`` was given, else None.
    - ``tools``: the call record when ``tools=`` was given, else None.
    - ``file_bytes_written``: bytes the guest wrote to files (``/tmp``, ``/work``,
      writable grants, mounts), what ``file_write_bytes`` caps; for a session turn,
      the session's total so far.
    - ``files``: what the mounts' providers were asked (a ``FileRecord``) when
      ``mounts=`` was given, else None.
    - ``network``: the requests the guest made through the host (a ``NetworkRecord``)
      when ``network=`` was given, else None.
    - ``displays``: what the guest showed (``host.display``, figures, a turn's rich
      result), each a ``Display``, in order, at most ``display_bytes`` of them; past it
      they are cut and ``truncated`` names "displays". ``truncated`` names "stream" when
      a streaming run left events out of its stream (a callback too slow): they are here
      all the same.
    - ``bad_displays``: display frames the guest sent that were not one (not kept).
    """

    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    trapped: Optional[str]
    truncated: tuple[str, ...]
    fuel_used: Optional[int]
    duration_s: float
    tools: Optional[ToolRecord]
    file_bytes_written: int
    files: Optional[FileRecord]
    network: Optional[NetworkRecord]
    displays: tuple[Display, ...]
    bad_displays: int

    __slots__ = __match_args__ = (
        "exit_code", "stdout", "stderr", "trapped", "truncated", "fuel_used", "duration_s", "tools",
        "file_bytes_written", "files", "network", "displays", "bad_displays",
    )

    def __init__(
        self,
        exit_code: Optional[int],
        stdout: bytes,
        stderr: bytes,
        trapped: Optional[str],
        truncated: tuple[str, ...],
        fuel_used: Optional[int],
        duration_s: float,
        tools: Optional[ToolRecord] = None,
        file_bytes_written: int = 0,
        files: Optional[FileRecord] = None,
        network: Optional[NetworkRecord] = None,
        displays: tuple[Display, ...] = (),
        bad_displays: int = 0,
    ) -> None:
        _set(self, "exit_code", exit_code)
        _set(self, "stdout", stdout)
        _set(self, "stderr", stderr)
        _set(self, "trapped", trapped)
        _set(self, "truncated", truncated)
        _set(self, "fuel_used", fuel_used)
        _set(self, "duration_s", duration_s)
        _set(self, "tools", tools)
        _set(self, "file_bytes_written", file_bytes_written)
        _set(self, "files", files)
        _set(self, "network", network)
        _set(self, "displays", displays)
        _set(self, "bad_displays", bad_displays)

    @property
    def ok(self) -> bool:
        """True when the guest exited with status 0."""
        return self.exit_code == 0 and self.trapped is None


def mime_kind(mime: str) -> str:
    """How a display carries ``mime``'s value: "json" (``application/json``, ``*+json``: any
    JSON value), "binary" (``image/*`` but SVG, ``audio/*``, ``video/*``,
    ``application/pdf``, ``application/octet-stream``: base64 text on the wire, bytes
    here), or "text". The runtime checks frames by the same rule (display.rs)."""
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    if mime == "image/svg+xml" or mime.startswith("text/"):
        return "text"
    if mime.startswith(("image/", "audio/", "video/")) or mime in ("application/pdf", "application/octet-stream"):
        return "binary"
    return "text"


@record(frozen=True)
class Display(Record):
    """One thing the guest showed, as Jupyter's ``display_data``: a MIME bundle.

    - ``data``: MIME type to value: ``bytes`` for binary types (``image/png``,
      ``image/jpeg``, ``application/pdf``, ...), the parsed JSON value for
      ``application/json`` and ``*+json``, ``str`` for the rest (``text/plain``,
      ``text/html``, ``text/markdown``, ``image/svg+xml``, ...).
    - ``metadata``: Jupyter's metadata (``{"image/png": {"width": 640, ...}}``), or ``{}``.

    ``to_jupyter()`` gives the wire form (binary as base64 text); in a notebook on the host,
    a ``Display`` shows itself (``_repr_mimebundle_``).
    """

    data: Mapping[str, Any]
    metadata: Mapping[str, Any]

    __slots__ = __match_args__ = ("data", "metadata")
    _factories = {"metadata": dict}

    def __init__(self, data: Mapping[str, Any], metadata: Mapping[str, Any] = FACTORY) -> None:
        _set(self, "data", data)
        _set(self, "metadata", {} if metadata is FACTORY else metadata)

    @classmethod
    def from_json(cls, raw: bytes | str) -> "Display":
        """A display from its JSON object (``{"data": {...}, "metadata": {...}}``), binary
        values decoded from base64."""
        import binascii
        import json

        obj = json.loads(raw)
        data = {mime: binascii.a2b_base64(value) if mime_kind(mime) == "binary" else value for mime, value in obj["data"].items()}
        return cls(data=data, metadata=obj.get("metadata") or {})

    def to_jupyter(self) -> dict[str, Any]:
        """Jupyter's ``display_data`` content: ``{"data": ..., "metadata": ...}`` with binary
        values as base64 text, ready for ``json.dumps`` or an nbformat output."""
        import base64

        data = {mime: base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v for mime, v in self.data.items()}
        return {"data": data, "metadata": dict(self.metadata)}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        j = self.to_jupyter()
        return j["data"], j["metadata"]


@record(frozen=True)
class Stdout(Record):
    """A streamed event: bytes the guest wrote to stdout (``wasi_python.stream``)."""

    data: bytes

    __slots__ = __match_args__ = ("data",)

    def __init__(self, data: bytes) -> None:
        _set(self, "data", data)


@record(frozen=True)
class Stderr(Record):
    """A streamed event: bytes the guest wrote to stderr (``wasi_python.stream``)."""

    data: bytes

    __slots__ = __match_args__ = ("data",)

    def __init__(self, data: bytes) -> None:
        _set(self, "data", data)


@record(frozen=True)
class ToolOutcome(Record):
    """One frame the guest sent, and how it was answered."""

    seq: int
    op: str  # "list", "call", or "unknown" for a frame that could not be read
    tool: Optional[str]
    outcome: str  # "ok", or the error kind the guest read
    message: Optional[str]  # what the guest read; None for "ok"
    request_bytes: int
    response_bytes: int
    fault: Optional[str]  # host-side detail, never sent: "Type: first line"
    abandoned: bool  # answered while the tool ran on
    # False when the guest never received the answer (it had no memory left for it):
    # the guest saw the door fail, ``fault`` says why, and the tool's effect stands.
    delivered: bool

    __slots__ = __match_args__ = (
        "seq", "op", "tool", "outcome", "message", "request_bytes", "response_bytes", "fault", "abandoned", "delivered",
    )

    def __init__(
        self,
        seq: int,
        op: str,
        tool: Optional[str],
        outcome: str,
        message: Optional[str],
        request_bytes: int,
        response_bytes: int,
        fault: Optional[str],
        abandoned: bool,
        delivered: bool = True,
    ) -> None:
        _set(self, "seq", seq)
        _set(self, "op", op)
        _set(self, "tool", tool)
        _set(self, "outcome", outcome)
        _set(self, "message", message)
        _set(self, "request_bytes", request_bytes)
        _set(self, "response_bytes", response_bytes)
        _set(self, "fault", fault)
        _set(self, "abandoned", abandoned)
        _set(self, "delivered", delivered)


@record(frozen=True)
class ToolRecord(Record):
    """What happened at the door during a run.

    - ``frames``: every frame counted;
    - ``outcomes``: the first 1,000 frames, in order;
    - ``unlisted``: the frames counted but not listed;
    - ``abandoned``: every call answered while its tool ran on.
    """

    frames: int
    outcomes: tuple[ToolOutcome, ...]
    unlisted: int
    abandoned: tuple[ToolOutcome, ...]

    __slots__ = __match_args__ = ("frames", "outcomes", "unlisted", "abandoned")

    def __init__(self, frames: int, outcomes: tuple[ToolOutcome, ...], unlisted: int, abandoned: tuple[ToolOutcome, ...]) -> None:
        _set(self, "frames", frames)
        _set(self, "outcomes", outcomes)
        _set(self, "unlisted", unlisted)
        _set(self, "abandoned", abandoned)


@record(frozen=True)
class FileFault(Record):
    """A provider call that failed by a fault (the guest saw EIO or ETIMEDOUT), or a
    write the provider refused."""

    method: str
    path: str
    error: str

    __slots__ = __match_args__ = ("method", "path", "error")

    def __init__(self, method: str, path: str, error: str) -> None:
        _set(self, "method", method)
        _set(self, "path", path)
        _set(self, "error", error)


@record(frozen=True)
class FileRecord(Record):
    """What a run's mounts did (``Completed.files``; None without mounts).

    - ``calls``: provider calls by method ("stat", "list", "read", "write", ...); ``total``.
    - ``refused_calls``: calls refused because ``max_file_calls`` was spent (EIO).
    - ``faults``: the first 1,000 faults (exceptions, timeouts); ``faults_total``.
    - ``refused_writes``: the first 1,000 whole-file writes the provider refused or
      failed; ``refused_writes_total``.
    - ``files_written``/``bytes_written``: writes that landed.
    - ``undelivered``: the first 1,000 files (guest paths) whose changes the write-back at
      the run's end did not deliver (refused, failed, timed out, or not tried within its
      grace of 0.5 s after the deadline or cancel); ``undelivered_total``.
    """

    calls: Mapping[str, int]
    total: int
    refused_calls: int
    faults: tuple[FileFault, ...]
    faults_total: int
    refused_writes: tuple[FileFault, ...]
    refused_writes_total: int
    files_written: int
    bytes_written: int
    undelivered: tuple[str, ...]
    undelivered_total: int

    __slots__ = __match_args__ = (
        "calls", "total", "refused_calls", "faults", "faults_total", "refused_writes", "refused_writes_total",
        "files_written", "bytes_written", "undelivered", "undelivered_total",
    )
    _factories = {"calls": dict}

    def __init__(
        self,
        calls: Mapping[str, int] = FACTORY,
        total: int = 0,
        refused_calls: int = 0,
        faults: tuple[FileFault, ...] = (),
        faults_total: int = 0,
        refused_writes: tuple[FileFault, ...] = (),
        refused_writes_total: int = 0,
        files_written: int = 0,
        bytes_written: int = 0,
        undelivered: tuple[str, ...] = (),
        undelivered_total: int = 0,
    ) -> None:
        _set(self, "calls", {} if calls is FACTORY else calls)
        _set(self, "total", total)
        _set(self, "refused_calls", refused_calls)
        _set(self, "faults", faults)
        _set(self, "faults_total", faults_total)
        _set(self, "refused_writes", refused_writes)
        _set(self, "refused_writes_total", refused_writes_total)
        _set(self, "files_written", files_written)
        _set(self, "bytes_written", bytes_written)
        _set(self, "undelivered", undelivered)
        _set(self, "undelivered_total", undelivered_total)


# --------------------------------------------------------------------------------------------
# From the extension's objects


def completed_from_ext(outcome: Any) -> Completed:
    """The extension's ``Outcome`` (of a run or a session turn) as the public ``Completed``;
    the extension makes a ``Completed`` itself for an end without a tool or file record
    (``_ext.set_completed``), which passes as it is."""
    if type(outcome) is Completed:
        return outcome
    return Completed(
        exit_code=outcome.exit_code,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        trapped=outcome.trapped,
        truncated=tuple(outcome.truncated),
        fuel_used=outcome.fuel_used,
        duration_s=outcome.duration_s,
        tools=_tool_record(outcome.tools) if outcome.tools is not None else None,
        file_bytes_written=outcome.file_bytes_written,
        files=_file_record(outcome.files) if outcome.files is not None else None,
        displays=tuple(map(Display.from_json, outcome.displays)),
        bad_displays=outcome.bad_displays,
    )


_OUTCOME_FIELDS = ToolOutcome.__match_args__


def _tool_record(r: Any) -> ToolRecord:
    """From the extension's ``ToolRecord``, field by field by name."""

    def outcome(o: Any) -> ToolOutcome:
        return ToolOutcome(**{f: getattr(o, f) for f in _OUTCOME_FIELDS})

    return ToolRecord(
        frames=r.frames,
        outcomes=tuple(map(outcome, r.outcomes)),
        unlisted=r.unlisted,
        abandoned=tuple(map(outcome, r.abandoned)),
    )


def _file_record(d: Mapping[str, Any]) -> FileRecord:
    """From the dict the extension makes of a run's file calls."""
    return FileRecord(
        calls=dict(d["calls"]),
        total=d["total"],
        refused_calls=d["refused_calls"],
        faults=tuple(FileFault(*f) for f in d["faults"]),
        faults_total=d["faults_total"],
        refused_writes=tuple(FileFault(*f) for f in d["refused_writes"]),
        refused_writes_total=d["refused_writes_total"],
        files_written=d["files_written"],
        bytes_written=d["bytes_written"],
        undelivered=tuple(d["undelivered"]),
        undelivered_total=d["undelivered_total"],
    )
