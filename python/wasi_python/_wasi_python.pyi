"""The compiled extension (crates/pybind). Private: use the `wasi_python` package."""

from os import PathLike
from typing import Any, Optional

WASMTIME_VERSION: str

class ArtifactsMissing(Exception): ...

class PreloadError(RuntimeError):
    module: Optional[str]

class MemoryFilesHandle:
    def __init__(self, files: dict[str, bytes], writable: bool, observer: Any = None) -> None: ...

#: (mounts as (kind, provider, guest_path, writable, timeout_s), max_file_calls).
Mounts = tuple[list[tuple[str, Any, str, bool, float]], Optional[int]]

class CancelToken:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    def is_cancelled(self) -> bool: ...

class CompiledTool:
    """One tool compiled for the door (descriptor JSON, checked input schema)."""

    def __init__(
        self,
        name: str,
        descriptor: str,
        schema: str,
        validates_input: bool,
        fixed: list[str],
        timeout_s: Optional[float],
    ) -> None: ...

def check_artifacts(dir: str) -> Optional[int]: ...
def precompile(dir: str) -> list[PathLike[str]]: ...
def default_preload(dir: str) -> list[str]: ...
def prepare_preload(dir: str, modules: list[str]) -> PathLike[str]: ...
def check_schema(schema_json: str, validates_input: bool) -> None: ...
def shutdown_tools(timeout_s: float) -> int: ...
def sweep_private_folders(wait_s: float) -> int: ...

#: (file_write_bytes, max_open_files, workdir, preload), as the package passes them;
#: preload None is the default set.
FileLimits = tuple[Optional[int], int, Optional[str], Optional[list[str]]]
def run(
    artifacts: str,
    argv: list[str],
    stdin: bytes,
    env: list[tuple[str, str]],
    grants: list[tuple[str, str, bool]],
    memory_bytes: int,
    deadline_s: Optional[float],
    output_bytes: int,
    fuel: Optional[int],
    cancel: Optional[CancelToken],
    host: Any,
    tools: Optional[list[CompiledTool]] = None,
    dispatcher: Any = None,
    max_frames: Optional[int] = None,
    max_request_bytes: Optional[int] = None,
    files: FileLimits = ...,
    mounts: Optional[Mounts] = ...,
) -> dict[str, Any]: ...

class SessionHandle:
    def __init__(
        self,
        artifacts: str,
        env: list[tuple[str, str]],
        grants: list[tuple[str, str, bool]],
        memory_bytes: int,
        metered: bool,
        idle_s: Optional[float],
        lifetime_s: Optional[float],
        shutdown_s: float,
        tools: Optional[list[CompiledTool]] = None,
        dispatcher: Any = None,
        max_frames: Optional[int] = None,
        max_request_bytes: Optional[int] = None,
        files: FileLimits = ...,
    mounts: Optional[Mounts] = ...,
    ) -> None: ...
    def turn(
        self,
        code: str,
        deadline_s: Optional[float],
        output_bytes: int,
        fuel: Optional[int],
        cancel: Optional[CancelToken] = None,
    ) -> tuple[Any, ...]: ...
    def close(self) -> Optional[dict[str, Any]]: ...
    def ended(self) -> Optional[str]: ...
