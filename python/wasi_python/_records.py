"""The records a run returns: `Completed`, and inside it the door's `ToolRecord` (a
`ToolOutcome` per frame) and the mounts' `FileRecord` (`FileFault`); and
`completed_from_ext`, which makes them from the extension's ``Outcome``.

Plain frozen data: this module imports neither the extension nor asyncio, so
`wasi_python.tools` (which re-exports the tool records) imports without compiled code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional

__all__ = ["Completed", "ToolOutcome", "ToolRecord", "FileFault", "FileRecord"]


@dataclass(frozen=True, slots=True)
class Completed:
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
    """

    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    trapped: Optional[str]
    truncated: tuple[str, ...]
    fuel_used: Optional[int]
    duration_s: float
    tools: Optional["ToolRecord"] = field(default=None)
    file_bytes_written: int = 0
    files: Optional["FileRecord"] = field(default=None)

    @property
    def ok(self) -> bool:
        """True when the guest exited with status 0."""
        return self.exit_code == 0 and self.trapped is None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
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
    delivered: bool = True


@dataclass(frozen=True, slots=True)
class ToolRecord:
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


@dataclass(frozen=True, slots=True)
class FileFault:
    """A provider call that failed by a fault (the guest saw EIO or ETIMEDOUT), or a
    write the provider refused."""

    method: str
    path: str
    error: str


@dataclass(frozen=True, slots=True)
class FileRecord:
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

    calls: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    refused_calls: int = 0
    faults: tuple[FileFault, ...] = ()
    faults_total: int = 0
    refused_writes: tuple[FileFault, ...] = ()
    refused_writes_total: int = 0
    files_written: int = 0
    bytes_written: int = 0
    undelivered: tuple[str, ...] = ()
    undelivered_total: int = 0


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
    )


_OUTCOME_FIELDS = tuple(f.name for f in fields(ToolOutcome))


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
