"""The compiled extension (crates/pybind). Private: use the `wasi_python` package.

Checked against the built extension by `mypy.stubtest` (tests/python/test_stubtest.py).
"""

from os import PathLike
from typing import Any, Callable, Mapping, Optional, Sequence, final


__all__ = [
    "ArtifactsMissing", "PreloadError", "SessionEnded", "SessionBusy", "SnapshotError", "CancelToken", "Completions",
    "SessionHandle", "SnapshotHandle",
    "CompiledTool", "MemoryFilesHandle", "Options", "MountSpec", "Outcome", "ToolRecord", "ToolOutcome",
    "run", "run_plain", "set_plain", "plain_args", "set_completed", "start", "check_artifacts", "precompile", "cpu_level", "cache_origin", "default_preload", "prepare_preload", "check_schema",
    "shutdown_tools", "sweep_private_folders", "guests_on_standby", "standby_warmups", "primed_runs", "compiled_programs", "WASMTIME_VERSION", "DEFAULTS",
]

WASMTIME_VERSION: str
#: Every limit's default, from the runtime (`Limits`, `SessionLimits`, the budget's).
DEFAULTS: dict[str, Any]

class ArtifactsMissing(Exception): ...

class PreloadError(RuntimeError):
    module: Optional[str]

class SessionEnded(RuntimeError):
    reason: str

class SessionBusy(RuntimeError): ...

class SnapshotError(RuntimeError):
    kind: str

@final
class SnapshotHandle:
    """A session's snapshot (the package's `Snapshot` wraps it)."""

    @staticmethod
    def load(dir: str, data: bytes, key: Optional[bytes] = None) -> SnapshotHandle: ...
    def to_bytes(self, key: Optional[bytes] = None) -> bytes: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def base_modules(self) -> list[str]: ...

@final
class MemoryFilesHandle:
    def __new__(cls, files: dict[str, bytes], writable: bool, observer: Any = None) -> MemoryFilesHandle: ...

@final
class CancelToken:
    def __new__(cls) -> CancelToken: ...
    def cancel(self) -> None: ...
    def is_cancelled(self) -> bool: ...

@final
class CompiledTool:
    """One tool compiled for the door (descriptor JSON, checked input schema)."""

    def __new__(
        cls,
        name: str,
        descriptor: str,
        schema: str,
        validates_input: bool,
        fixed: Sequence[str],
        timeout_s: Optional[float],
    ) -> CompiledTool: ...

@final
class MountSpec:
    """A mount as the package hands it over (`provider`: a MemoryFilesHandle or an adapter)."""

    def __new__(cls, *, provider: Any, guest_path: str, writable: bool, timeout_s: float) -> MountSpec: ...

@final
class Options:
    """A run's or a session's settings, by keyword; used by one run or session."""

    def __new__(
        cls,
        *,
        env: Sequence[tuple[str, str]],
        grants: Sequence[Any],
        memory_bytes: int,
        deadline_s: Optional[float],
        output_bytes: int,
        fuel: Optional[int],
        file_write_bytes: Optional[int],
        max_open_files: int,
        workdir: Optional[str],
        preload: Optional[Sequence[str]],
        mounts: Sequence[MountSpec],
        max_file_calls: Optional[int],
        tools: Optional[Sequence[CompiledTool]],
        dispatcher: Any,
        max_tool_calls: Optional[int],
        max_tool_request_bytes: Optional[int],
        host: Any,
        snapshot: Optional[SnapshotHandle],
        keep_random: bool,
    ) -> Options: ...
    def copy(self) -> Options: ...

@final
class ToolOutcome:
    @property
    def seq(self) -> int: ...
    @property
    def op(self) -> str: ...
    @property
    def tool(self) -> Optional[str]: ...
    @property
    def outcome(self) -> str: ...
    @property
    def message(self) -> Optional[str]: ...
    @property
    def request_bytes(self) -> int: ...
    @property
    def response_bytes(self) -> int: ...
    @property
    def fault(self) -> Optional[str]: ...
    @property
    def abandoned(self) -> bool: ...
    @property
    def delivered(self) -> bool: ...

@final
class ToolRecord:
    @property
    def frames(self) -> int: ...
    @property
    def unlisted(self) -> int: ...
    @property
    def outcomes(self) -> list[ToolOutcome]: ...
    @property
    def abandoned(self) -> list[ToolOutcome]: ...

@final
class Outcome:
    """How a run or turn ended (the package's `Completed` is made from it)."""

    @property
    def exit_code(self) -> Optional[int]: ...
    @property
    def stdout(self) -> bytes: ...
    @property
    def stderr(self) -> bytes: ...
    @property
    def trapped(self) -> Optional[str]: ...
    @property
    def truncated(self) -> list[str]: ...
    @property
    def fuel_used(self) -> Optional[int]: ...
    @property
    def file_bytes_written(self) -> int: ...
    @property
    def files(self) -> Optional[Mapping[str, Any]]: ...
    @property
    def tools(self) -> Optional[ToolRecord]: ...
    @property
    def duration_s(self) -> float: ...

def check_artifacts(dir: str) -> Optional[int]: ...
def precompile(dir: str) -> PathLike[str]: ...
def cpu_level(dir: str) -> str: ...
def cache_origin(path: str | PathLike[str]) -> Optional[str]: ...
def default_preload(dir: str) -> list[str]: ...
def prepare_preload(dir: str, preload: Optional[Sequence[str]]) -> Optional[PathLike[str]]: ...
def check_schema(schema_json: str, validates_input: bool) -> None: ...
def shutdown_tools(timeout_s: float) -> int: ...
def sweep_private_folders(wait_s: float) -> int: ...
def guests_on_standby(image: Optional[str | PathLike[str]] = None) -> int: ...
def standby_warmups(image: Optional[str | PathLike[str]] = None) -> int: ...
def primed_runs(image: Optional[str | PathLike[str]] = None) -> int: ...
def compiled_programs() -> int: ...
def run(artifacts: str, argv: Sequence[str], stdin: bytes, options: Options, cancel: Optional[CancelToken] = None) -> Outcome: ...
def run_plain(argv: object, stdin: object) -> Optional[Any]: ...
def set_completed(cls: type, fields: tuple[str, ...]) -> None: ...
def set_plain(var: str, value: Optional[str], artifacts: str, options: Options) -> None: ...
def plain_args(argv: object, stdin: object) -> Optional[tuple[str, list[str], bytes, Options]]: ...
def start(
    artifacts: str,
    argv: Sequence[str],
    stdin: bytes,
    options: Options,
    cancel: CancelToken,
    on_done: Completions | Callable[[bool, Any], object],
    key: int = 0,
) -> None: ...
@final
class Completions:
    def __new__(cls, orphan: Callable[[], object]) -> Completions: ...
    @property
    def fd(self) -> int: ...
    def drain(self) -> list[tuple[int, bool, Any]]: ...

@final
class SessionHandle:
    def __new__(
        cls, artifacts: str, options: Options, *, idle_s: Optional[float], lifetime_s: Optional[float], shutdown_s: float
    ) -> SessionHandle: ...
    def turn(
        self,
        code: str,
        *,
        deadline_s: Optional[float],
        output_bytes: int,
        fuel: Optional[int],
        cancel: Optional[CancelToken] = None,
    ) -> Any: ...  # the package's Completed, or an Outcome when the turn has a tool record
    def close(self) -> Optional[Outcome]: ...
    def snapshot(self) -> SnapshotHandle: ...
    def ended(self) -> Optional[str]: ...
