"""``run``: argument checking and defaults; the work happens in the extension."""

from __future__ import annotations

import atexit
import os
from _collections_abc import Iterable, Mapping, Sequence  # collections.abc's own: `collections` not imported for them
from _operator import is_  # operator.is_, without `operator`

MappingProxyType = type(type.__dict__)  # types.MappingProxyType, without `types`

# What a new process imports costs it (``import wasi_python`` and one run: issue 43): no
# `typing`, `dataclasses` or `pathlib` here, nor in the modules imported below.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from pathlib import Path
    from typing import Any, Callable, Optional, overload

    from ._snapshot import Snapshot
else:

    def overload(fn):  # the overloads are for type checkers; the last definition stands
        return fn

from . import _otel, _stream
from . import _wasi_python as _ext
from ._cancel import cancel_token, check_cancel
from ._lazy import lazy
from ._records import Completed, Display, completed_from_ext

# Imported on first use: a plain run needs none of them, and a new process would pay for
# them (the tools layer, mounts, the network, snapshots; _lazy.py).
if TYPE_CHECKING:
    from . import _door, _files, _network, _snapshot, _tools
    from ._files import Mount
else:
    _door, _files, _network, _snapshot, _tools = map(lazy, ("_door", "_files", "_network", "_snapshot", "_tools"))
from ._types import SIZE_MAX, Grant, check_int, check_seconds, check_utf8, items_of

__all__ = ["run", "artifacts", "ArtifactsMissing", "PreloadError", "DEFAULTS", "TOOL_DEFAULTS", "default_preload", "prepare"]

ArtifactsMissing = _ext.ArtifactsMissing
PreloadError = _ext.PreloadError

# At exit, tool threads still running (abandoned calls) run to their end first: a
# thread that enters Python while the interpreter finalises would be killed mid-call.
atexit.register(_ext.shutdown_tools, 10.0)
# Registered after, so run before it (atexit is last in, first out): runs still alive
# at exit get 0.25 s to end, then their private folders are removed whatever they hold.
atexit.register(_ext.sweep_private_folders, 0.25)

#: The default limits of a run: the runtime's own (``Limits::default()``), so the two
#: cannot drift; every signature takes its defaults from here (a test checks).
DEFAULTS: Mapping[str, Any] = MappingProxyType({k: _ext.DEFAULTS[k] for k in (
    "memory_bytes", "deadline_s", "output_bytes", "fuel", "file_write_bytes", "max_open_files", "max_file_calls",
    "display_bytes",
)})

_ARTIFACTS_ENV = "WASI_PYTHON_ARTIFACTS"
_FIX = "cargo xtask dist"


# Resolved once: resolving walks the path with a system call per component. A str, as
# the extension takes it (`artifacts` gives a Path).
_PACKAGE = os.path.dirname(os.path.realpath(__file__))
_PACKAGE_ARTIFACTS = os.path.join(_PACKAGE, "_artifacts")


def artifacts() -> Path:
    """The folder holding the guest artifacts: ``$WASI_PYTHON_ARTIFACTS``, else the
    ``_artifacts`` folder inside this package (filled by ``cargo xtask dist``, and
    carried by a built wheel).

    Raises ArtifactsMissing, naming what is missing and the command that fixes it.
    """
    from pathlib import Path

    return Path(_artifacts())


def _artifacts() -> str:
    """`artifacts`, as a str: ``str(artifacts())``, without importing `pathlib`."""
    env = os.environ.get(_ARTIFACTS_ENV)
    path = _path_str(env) if env else _PACKAGE_ARTIFACTS
    _ext.check_artifacts(path)
    return path


def _path_str(path: str) -> str:
    """``str(pathlib.Path(path))``: on POSIX, the same text made here (empty and ``.``
    parts dropped, a leading ``//`` kept, as `pathlib` does)."""
    if os.name != "posix":
        from pathlib import Path

        return str(Path(path))
    root = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return root + "/".join(p for p in path.split("/") if p and p != ".") or "."


def default_preload() -> tuple[str, ...]:
    """The modules a run, ``run_async`` or ``Session`` preloads when ``preload=`` is not
    given: numpy and pandas, and matplotlib with ``matplotlib.pyplot`` (Agg backend)."""
    return tuple(_ext.default_preload(_artifacts()))


@overload
def prepare(preload: Optional[Iterable[str]] = None) -> Path: ...
@overload
def prepare(preload: Optional[Iterable[str]] = None, *, setup: str, deadline_s: Optional[float] = ...) -> "Snapshot": ...
def prepare(preload: Optional[Iterable[str]] = None, *, setup: Optional[str] = None, deadline_s: Optional[float] = DEFAULTS["deadline_s"]) -> "Path | Snapshot":
    """Builds the snapshot for ``preload`` (default: ``default_preload()``) now, instead of
    at the first run that needs it, and returns its file in the cache folder. A second
    process finds it there. Raises PreloadError naming a module that does not import.

    With ``setup=`` (Python source), returns a ``Snapshot`` instead: a session with those
    modules runs ``setup`` as one turn (within ``deadline_s``) and is snapshotted, the
    "warm once, start many" pattern: ``Session(snapshot=...)`` and ``run(...,
    snapshot=...)`` then start with what the setup defined. A setup that fails raises
    ``SnapshotError`` (``kind="setup"``) with its stderr."""
    if setup is not None:
        return _prepare_setup(preload, setup, deadline_s)
    path = _ext.prepare_preload(_artifacts(), _check_preload(preload))
    if path is None:
        raise ValueError("preload: () names no modules, so there is no snapshot to prepare")
    from pathlib import Path

    return Path(path)


def _prepare_setup(preload: Any, setup: Any, deadline_s: Any) -> "Snapshot":
    """``prepare(setup=...)``: one session, one setup turn, its snapshot."""
    from ._session import Session  # imports this module: here, not at the top

    if not isinstance(setup, str):
        raise TypeError(f"setup must be a str of Python source, not {type(setup).__name__}")
    with Session(preload=preload, deadline_s=deadline_s) as s:
        done = s.run(setup)
        if done.exit_code != 0 or done.trapped is not None:
            why = done.trapped or f"exit code {done.exit_code}"
            err = _snapshot.SnapshotError(f"the setup failed ({why}):\n{done.stderr.decode(errors='replace')}")
            err.kind = "setup"
            raise err
        return s.snapshot()


def _precompile(where: str | os.PathLike[str] | None = None) -> None:
    """Compiles the guest for this machine's wasmtime now (``cargo xtask dist`` calls it):
    the plain flavour only; the fuel-metered one is compiled by the first run with ``fuel=``."""
    import time
    from pathlib import Path

    path = str(where) if where is not None else _artifacts()
    t = time.perf_counter()
    file = _ext.precompile(path)
    print(f"guest ready in {time.perf_counter() - t:.1f} s ({_ext.cpu_level(path)}, {_ext.cache_origin(file)}): {file}")
    n = _compile_guest_package(Path(path))
    print(f"guest package: {n} modules compiled to bytecode by the guest's CPython")
    t = time.perf_counter()
    image = _ext.prepare_preload(path, None)
    print(f"default preload ({', '.join(_ext.default_preload(path))}) ready in {time.perf_counter() - t:.1f} s: {image}")


def _shippable(where: str) -> str:
    """What ``cargo xtask wheel`` ships: the CPU level this machine compiles for, the
    compiled guest and the default preload's snapshot (built now if missing), a line each."""
    files = [_ext.precompile(where), _ext.prepare_preload(where, None)]
    return "\n".join([f"cpu {_ext.cpu_level(where)}", *(f"file {f}" for f in files)])


_GUEST_PKG = "/usr/local/lib/wasi-python"
_COMPILE_PKG = f"""
import importlib.util, os, py_compile
root = {_GUEST_PKG!r}
n = 0
for d, _, files in os.walk(root):
    for f in sorted(files):
        if f.endswith('.py'):
            src = os.path.join(d, f)
            cfile = importlib.util.cache_from_source(src)
            out = '/out' + cfile[len(root):]
            os.makedirs(os.path.dirname(out), exist_ok=True)
            py_compile.compile(src, cfile=out, dfile=src, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            n += 1
# The host package as one file, a marshalled dict of marshalled code: the boot module's
# finder serves `import host` from it (see guest/_wasi_python_boot.py).
import marshal
bundle = {{}}
for f in sorted(os.listdir(root + '/host')):
    if f.endswith('.py'):
        src = root + '/host/' + f
        with open(src, 'rb') as fh:
            code = compile(fh.read(), src, 'exec', dont_inherit=True)
        bundle['host' if f == '__init__.py' else 'host.' + f[:-3]] = marshal.dumps(code)
with open('/out/host.bundle', 'wb') as fh:
    fh.write(marshal.dumps(bundle))
print(n)
"""


def _compile_guest_package(dist: Path) -> int:
    """Compiles our guest package (lib/wasi-python) to unchecked-hash .pyc, and the host
    package into one bundle file, with the guest's own CPython, so no run compiles it
    again (the guest cannot write bytecode itself)."""
    import shutil
    import tempfile
    from pathlib import Path

    pkg = dist / "lib" / "wasi-python"
    for cache in pkg.rglob("__pycache__"):
        shutil.rmtree(cache)
    with tempfile.TemporaryDirectory() as out:
        # preload=(): the default snapshot is keyed by this package's files, which this run changes.
        options = ext_options(check_settings(grants=[Grant(out, "/out", writable=True)], deadline_s=120.0, output_bytes=1 << 20, preload=()))
        d = _ext.run(str(dist), ["-c", _COMPILE_PKG], b"", options)
        if d.exit_code != 0:
            raise RuntimeError(f"compiling the guest package failed: {d.trapped} {d.stderr.decode(errors='replace')}")
        _replace_tree(Path(out), pkg)
    return int(d.stdout)


def _replace_tree(src: Path, dst: Path) -> None:
    """Puts each file under ``src`` at its place under ``dst``, each replacing what was
    there (a new file renamed over its name), never writing into a file in place: the
    files of a dist are hard links shared with ``python/wasi_python/_artifacts`` and any
    copy linked from it, and a process running from one of those must not see a file
    change under it (``shutil.copytree`` rewrote ``host.bundle`` in place)."""
    import shutil
    import tempfile
    from pathlib import Path

    for d, _, files in os.walk(src):
        into = dst / Path(d).relative_to(src)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=into)
            try:
                with os.fdopen(fd, "wb") as w, open(os.path.join(d, name), "rb") as r:
                    shutil.copyfileobj(r, w)
                os.chmod(tmp, 0o644)
                os.replace(tmp, into / name)
            except BaseException:
                os.unlink(tmp)
                raise


#: A 32-bit guest cannot address more.
_MEMORY_MAX = 4 << 30


def _check_argv(argv: Any) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError(f"argv must be a list of str, such as ['-c', 'print(1)'], not {type(argv).__name__}")
    for a in argv:
        if not isinstance(a, str):
            raise TypeError(f"argv must hold only str, not {type(a).__name__}")
        check_utf8("argv", a)
        if "\0" in a:
            raise ValueError(f"argv: {a[:40]!r} holds a NUL character")
    return list(argv)


def _check_env(env: Any) -> list[tuple[str, str]]:
    if env is None:
        return []
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str, not {type(env).__name__}")
    out = []
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"env must map str to str; {k!r}: {v!r} is not")
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError(f"env: {k!r} is not a valid environment variable name")
        check_utf8("env", k)
        check_utf8(f"env[{k!r}]", v)
        out.append((k, v))
    return out


def _check_grants(grants: Any) -> list[Grant]:
    if isinstance(grants, (Grant, str)) or not isinstance(grants, Iterable):
        raise TypeError("grants must be a sequence of Grant")
    out = []
    for g in grants:
        if not isinstance(g, Grant):
            raise TypeError(f"grants must hold Grant objects, not {type(g).__name__}")
        if not isinstance(g.guest_path, str):
            raise TypeError("Grant.guest_path must be a str")
        if type(g.writable) is not bool:  # Grant() checks it; this catches a forced one
            raise TypeError(f"grants: Grant.writable must be a bool, not {type(g.writable).__name__}")
        os.fspath(g.host_path)  # a TypeError naming the type, here rather than in the extension
        out.append(g)
    return out


def _check_stdin(stdin: Any) -> bytes:
    if isinstance(stdin, str):
        check_utf8("stdin", stdin)
        return stdin.encode()
    if not isinstance(stdin, (bytes, bytearray, memoryview)):
        raise TypeError(f"stdin must be bytes or str, not {type(stdin).__name__}")
    return bytes(stdin)


class _Unset:
    def __repr__(self) -> str:
        return "<default>"


#: A keyword not given, told apart from None (``max_tool_calls=None`` means no limit): the
#: default of the door's keywords (``run``, ``run_async``, ``Session``) and of a turn's limits.
UNSET = _Unset()
#: The tool door's default limits (the budget crate's).
TOOL_DEFAULTS: Mapping[str, Any] = MappingProxyType({k: _ext.DEFAULTS[k] for k in ("max_tool_calls", "max_tool_request_bytes")})


def door_args(tools: Any, gate: Any, max_calls: Any, max_bytes: Any, host: Any) -> Optional[tuple[list[Any], Any, Optional[int], Optional[int]]]:
    """Checks the door's arguments (the guide's "Know what run refuses"), before any work."""
    if host is not None:
        if tools is not None:
            raise TypeError("host= and tools= together: the host has one channel to the guest; pass host= for a raw host function or tools= for the protocol")
        if not callable(host):
            raise TypeError("host must be a callable taking bytes and returning bytes")
        import inspect  # here, not at the top: a plain run does not need it

        if inspect.iscoroutinefunction(host) or inspect.iscoroutinefunction(getattr(type(host), "__call__", None)):
            raise TypeError("host= cannot be an async def: serve it as a tool instead")
    if tools is None:
        # Any of them passed at all, None included: a caller who writes max_tool_calls=None
        # means "no limit on tool calls", and a run without tools= has none to bound.
        for name, value in (("gate", gate), ("max_tool_calls", max_calls), ("max_tool_request_bytes", max_bytes)):
            if value is not UNSET:
                raise TypeError(f"{name}= without tools=: it governs tool calls, and this run offers none")
        return None
    tool_list = _tools.as_tools(tools)
    if gate is UNSET:
        gate = None
    _door.check_gate(gate)
    frames = TOOL_DEFAULTS["max_tool_calls"] if max_calls is UNSET else check_int("max_tool_calls", max_calls, minimum=1, optional=True)
    req = TOOL_DEFAULTS["max_tool_request_bytes"] if max_bytes is UNSET else check_int("max_tool_request_bytes", max_bytes, minimum=1, optional=True)
    return tool_list, gate, frames, req


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | str = b"",
    env: Optional[Mapping[str, str]] = None,
    grants: Iterable[Grant] = (),
    memory_bytes: int = DEFAULTS["memory_bytes"],
    deadline_s: Optional[float] = DEFAULTS["deadline_s"],
    output_bytes: int = DEFAULTS["output_bytes"],
    fuel: Optional[int] = None,
    cancel: Any = None,
    tools: Optional[Iterable[Any]] = None,
    gate: Optional[Callable[[Any], Any]] | _Unset = UNSET,
    max_tool_calls: Optional[int] | _Unset = UNSET,
    max_tool_request_bytes: Optional[int] | _Unset = UNSET,
    host: Any = None,
    file_write_bytes: Optional[int] = DEFAULTS["file_write_bytes"],
    max_open_files: int = DEFAULTS["max_open_files"],
    workdir: Optional[str] = None,
    preload: Optional[Iterable[str]] = None,
    mounts: Iterable[Mount] = (),
    max_file_calls: Optional[int] = DEFAULTS["max_file_calls"],
    snapshot: Optional["Snapshot"] = None,
    network: Optional[_network.Network] = None,
    secrets: Optional[Mapping[str, _network.Secret]] = None,
    display_bytes: int = DEFAULTS["display_bytes"],
    on_stdout: Optional[Callable[[bytes], Any]] = None,
    on_stderr: Optional[Callable[[bytes], Any]] = None,
    on_display: Optional[Callable[[Display], Any]] = None,
) -> Completed:
    """Runs a CPython command line in the sandbox and returns how it ended.

    ``argv`` is CPython's command line without the program name: ``["-c", code]``,
    ``["-m", module, ...]``, ``[script_path, ...]`` (a path inside a grant), or ``[]``
    to read the program from ``stdin``. Nothing the guest does makes ``run`` raise:
    exits, exceptions, traps and exhausted limits are all a ``Completed``.
    Bad arguments raise TypeError or ValueError naming the parameter, before any work.

    ``tools=`` offers host functions to the guest (``from host import tools``); ``gate=``
    is called before each tool call; ``max_tool_calls`` (default 1,000 frames, the
    discovery frame included) and ``max_tool_request_bytes`` (default 16 MiB) bound
    the door, None meaning no limit; passing any of these three without ``tools=``, even
    as None, is a TypeError. ``host=`` is a raw door instead: bytes in, bytes out.

    ``preload=`` names modules the guest has imported before the program starts, from a
    snapshot built on first need (seconds) and cached on disk: ``("numpy", "pandas")``.
    Not given (or None): ``default_preload()``, numpy, pandas and matplotlib's pyplot,
    quietly skipped when its snapshot does not fit ``memory_bytes``. ``()``: none. A
    module that does not import raises PreloadError naming it, before the run.

    ``mounts=[Mount(provider, "/data")]`` serves guest folders from your own code (see
    ``Mount``); ``max_file_calls`` (default 10,000, None for no limit) bounds the provider
    calls of a run: past it the guest's file calls there fail with EIO.

    ``snapshot=`` (a ``Snapshot`` from ``Session.snapshot()`` or ``Snapshot.load``) starts
    the guest from that interpreter, with its modules imported, instead of ``preload=``;
    the program runs in the session's ``__main__``, with its variables. A snapshot larger
    than ``memory_bytes`` is a ValueError before the run.

    ``network=Network(hosts=[...])`` lets the guest make HTTP and HTTPS requests through
    the host (``urllib.request.urlopen``, ``host.http``), within its allow-list and
    bounds; ``secrets={"NAME": Secret(value, hosts=[...])}`` gives the guest placeholders
    the host swaps for the values on requests to their hosts. ``Completed.network``
    lists the requests. Off by default; see docs/network.md.

    ``Completed.displays`` holds what the guest showed (``host.display``, figures), at
    most ``display_bytes`` (default 16 MiB) of them. ``on_stdout``/``on_stderr`` (called
    with bytes) and ``on_display`` (with a ``Display``) stream the run: called on this
    thread as the guest writes, in its order; what they get is in the ``Completed`` too.
    A slow callback stalls the guest at most 1 s in all (then events are left out of the
    stream: ``truncated`` names "stream"); one that raises is called no more, and its
    exception is raised once the run ends, with the ``Completed`` as its ``completed``
    (a KeyboardInterrupt or SystemExit cancels the run first). See docs/displays.md.
    """
    # Only argv and stdin given (every other keyword its default object): spelled out,
    # since `plain(locals(), ...)` cost a run spaced 5 ms apart 50-60 us against 15-25
    # with cold caches. A test holds the names to the signature.
    d = _RUN_PLAIN
    if (
        env is d[0] and grants is d[1] and memory_bytes is d[2] and deadline_s is d[3]
        and output_bytes is d[4] and fuel is d[5] and cancel is d[6] and tools is d[7]
        and gate is d[8] and max_tool_calls is d[9] and max_tool_request_bytes is d[10]
        and host is d[11] and file_write_bytes is d[12] and max_open_files is d[13]
        and workdir is d[14] and preload is d[15] and mounts is d[16]
        and max_file_calls is d[17] and snapshot is d[18] and network is d[19] and secrets is d[20]
        and display_bytes is d[21] and on_stdout is d[22] and on_stderr is d[23] and on_display is d[24]
    ):
        if _otel.tracer() is None:  # a traced run is made by execute, in its span
            # The extension takes the commonest calls itself (its answer is the Completed),
            # or answers None: then checked here.
            done = _ext.run_plain(argv, stdin)
            if done is None:
                return completed_from_ext(_ext.run(*checked_plain_args(argv, stdin)))
            return done if type(done) is Completed else completed_from_ext(done)  # an Outcome when it showed displays
    plan = make_plan(
        argv, stdin, env, grants, memory_bytes, deadline_s, output_bytes, fuel, cancel,
        tools, gate, max_tool_calls, max_tool_request_bytes, host,
        file_write_bytes, max_open_files, workdir, preload, mounts, max_file_calls, snapshot, network, secrets,
        display_bytes,
    )
    handlers = _stream.check_handlers(on_stdout, on_stderr, on_display, allow_async=False)
    token, watch = cancel_token(cancel)
    try:
        if handlers is None:
            return execute(plan, token, None)
        token = token if token is not None else _ext.CancelToken()
        delivery = _stream.SyncDelivery(handlers, token)
        return delivery.finish(execute(plan, token, None, (_ext.EventStream(), delivery)))
    finally:
        if watch is not None:
            watch.stop()


def keyword_defaults(fn: Callable[..., Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """``fn``'s keyword-only parameters but ``stdin``, and their defaults: what ``plain``
    compares a call's arguments with."""
    kw = {k: v for k, v in (fn.__kwdefaults__ or {}).items() if k != "stdin"}
    return tuple(kw), tuple(kw.values())


def plain(given: Mapping[str, Any], defaults: tuple[tuple[str, ...], tuple[Any, ...]]) -> bool:
    """Whether a call passed nothing but ``argv`` and ``stdin``: every other keyword is its
    default object itself (not an equal one). Such a call skips the settings' checks, whose
    result is known (``plain_options``): about 20 of the 30 us Python spends per run. The
    comparison runs in C (``map``), not a loop of Python: each line of Python costs a run
    several microseconds when its caches are cold."""
    names, values = defaults
    return all(map(is_, map(given.__getitem__, names), values))


def plain_args(argv: Any, stdin: Any) -> tuple[str, list[str], bytes, Any, None]:
    """The extension's ``run`` arguments for a call that passed only ``argv`` and ``stdin``,
    checked as ``make_plan`` checks them (by the extension, ``_ext.plain_args``, when they
    are surely accepted: see ``_ext.run_plain``)."""
    fast = _ext.plain_args(argv, stdin)
    return (*fast, None) if fast is not None else checked_plain_args(argv, stdin)


def checked_plain_args(argv: Any, stdin: Any) -> tuple[str, list[str], bytes, Any, None]:
    """``plain_args`` by the package's own checks: for a call the extension left to them
    (its ``run_plain`` or ``plain_args`` answered None), so it is not asked again."""
    args = _check_argv(argv)
    stdin_b = _check_stdin(stdin)
    return plain_where(), args, stdin_b, plain_options().copy(), None


_plain: Optional[Any] = None
_plain_where: tuple[object, str] = (object(), "")  # ($WASI_PYTHON_ARTIFACTS, its folder)


def plain_options() -> Any:
    """The extension's ``Options`` of the default settings (``ext_options`` of
    ``check_settings()``), made once: each run takes a copy (``Options.copy``), since a
    run consumes its ``Options``."""
    global _plain
    if _plain is None:
        _plain = ext_options(check_settings())
    return _plain


def plain_where() -> str:
    """``artifacts_dir(False)``, checked once per value of ``$WASI_PYTHON_ARTIFACTS``;
    the extension's ``run_plain`` is told each new one, with the default settings."""
    global _plain_where
    env = os.environ.get(_ARTIFACTS_ENV)
    if _plain_where[0] != env:
        _plain_where = (env, artifacts_dir(False))
        _ext.set_plain(_ARTIFACTS_ENV, env, _plain_where[1], plain_options())
    return _plain_where[1]


_RUN_PLAIN = keyword_defaults(run)[1]
_ext.set_completed(Completed, Completed.__match_args__)


class _Plan:
    """A run's checked arguments, ready for the extension."""

    __slots__ = ("where", "args", "stdin", "settings", "host", "door", "network")

    def __init__(
        self,
        where: str,
        args: list[str],
        stdin: bytes,
        settings: dict[str, Any],
        host: Any,
        door: Optional[tuple[list[Any], Any, Optional[int], Optional[int]]],
        network: Optional[tuple[Any, dict[str, Any]]] = None,
    ) -> None:
        self.where = where
        self.args = args
        self.stdin = stdin
        self.settings = settings
        self.host = host
        self.door = door
        #: ``(Network, {name: Secret})`` when the run has a network.
        self.network = network


def make_plan(
    argv: Any, stdin: Any, env: Any, grants: Any, memory_bytes: Any, deadline_s: Any,
    output_bytes: Any, fuel: Any, cancel: Any, tools: Any, gate: Any,
    max_tool_calls: Any, max_tool_request_bytes: Any, host: Any,
    file_write_bytes: Any, max_open_files: Any, workdir: Any, preload: Any = None,
    mounts: Any = (), max_file_calls: Any = DEFAULTS["max_file_calls"], snapshot: Any = None,
    network: Any = None, secrets: Any = None, display_bytes: Any = DEFAULTS["display_bytes"],
) -> _Plan:
    """Checks every argument, then finds the artifacts: all before any work."""
    args = _check_argv(argv)
    stdin_b = _check_stdin(stdin)
    settings = check_settings(env, grants, memory_bytes, deadline_s, output_bytes, fuel, file_write_bytes, max_open_files, workdir, preload, mounts, max_file_calls, display_bytes)
    settings["snapshot"] = _snapshot.check_snapshot(snapshot, preload)
    door = door_args(tools, gate, max_tool_calls, max_tool_request_bytes, host)
    secrets_d = _network.check_secrets(secrets, settings["env"])
    net = _network.check_network(network, secrets_d)
    check_cancel(cancel)
    where = artifacts_dir(door is not None)
    return _Plan(where, args, stdin_b, settings, host, door, (net, secrets_d) if net is not None else None)


def check_settings(
    env: Any = None, grants: Any = (), memory_bytes: Any = DEFAULTS["memory_bytes"], deadline_s: Any = DEFAULTS["deadline_s"],
    output_bytes: Any = DEFAULTS["output_bytes"], fuel: Any = None, file_write_bytes: Any = DEFAULTS["file_write_bytes"],
    max_open_files: Any = DEFAULTS["max_open_files"], workdir: Any = None, preload: Any = None, mounts: Any = (),
    max_file_calls: Any = DEFAULTS["max_file_calls"], display_bytes: Any = DEFAULTS["display_bytes"],
) -> dict[str, Any]:
    """The settings ``run`` and ``Session`` share, checked, by the extension's names
    (``_ext.Options``); the tools and mounts are added where the run is made."""
    grants_l = _check_grants(grants)
    # No mounts (the default): `_files` is not imported for them.
    mounts_l = [] if type(mounts) in (tuple, list) and not mounts else _files.check_mounts(mounts)
    settings: dict[str, Any] = {
        "env": _check_env(env),
        "grants": grants_l,
        "memory_bytes": _check_memory(memory_bytes),
        "deadline_s": check_seconds("deadline_s", deadline_s),
        "output_bytes": check_int("output_bytes", output_bytes, maximum=SIZE_MAX),
        "fuel": check_int("fuel", fuel, minimum=1, optional=True),
        "mounts": mounts_l,
        "max_file_calls": check_int("max_file_calls", max_file_calls, minimum=1, optional=True),
        "display_bytes": check_int("display_bytes", display_bytes, maximum=SIZE_MAX),
    }
    settings.update(_check_files(file_write_bytes, max_open_files, workdir, grants_l, preload, mounts_l))
    return settings


def ext_options(settings: dict[str, Any], door: Optional[tuple[list[Any], Any, Optional[int], Optional[int]]] = None, dispatcher: Any = None, host: Any = None, network: Any = None) -> Any:
    """The extension's ``Options`` for one run or session: ``settings`` with the mounts
    served through ``dispatcher``, the tools of ``door``, and ``network`` (a
    ``NetworkRun``, whose secrets' placeholders join the environment)."""
    kw = dict(settings)
    if network is not None:
        kw["network"] = network
        kw["env"] = [*settings["env"], *network.env()]
    kw["mounts"] = _files.for_ext(settings["mounts"], dispatcher) if settings["mounts"] else []
    kw.setdefault("snapshot", None)
    kw.setdefault("keep_random", False)
    tools, _, frames, req = door if door is not None else (None, None, None, None)
    return _ext.Options(
        **kw,
        tools=[_tools.for_door(t) for t in tools] if tools is not None else None,
        dispatcher=dispatcher if tools is not None else None,
        max_tool_calls=frames,
        max_tool_request_bytes=req,
        host=host,
    )


def _check_preload(preload: Any) -> Optional[list[str]]:
    """``preload=``: None (the default set) or an iterable of module names."""
    if preload is None:
        return None
    names = items_of("preload", preload, str, "module names (str)", f"write ({preload!r},)")
    for n in names:
        if not n or not all(part.isidentifier() and part.isascii() for part in n.split(".")):
            raise ValueError(f"preload: {n!r} is not a module name")
    return names


def _check_files(file_write_bytes: Any, max_open_files: Any, workdir: Any, grants: list[Grant], preload: Any = None, mounts: Sequence[Mount] = ()) -> dict[str, Any]:
    """The file and start keywords, by the extension's names; and no writable grant
    over this package (the runtime refuses the artifacts and the compiled-guest cache itself)."""
    for g in grants:
        if g.writable:
            from pathlib import Path

            h, package = Path(g.host_path).resolve(), Path(_PACKAGE)
            if h == package or h in package.parents or package in h.parents:
                raise ValueError(f"grants: a writable grant of {g.host_path} would let the guest rewrite this package ({_PACKAGE})")
    quota = check_int("file_write_bytes", file_write_bytes, optional=True)
    fds = check_int("max_open_files", max_open_files, minimum=1, maximum=SIZE_MAX)
    if workdir is not None:
        if not isinstance(workdir, str):
            raise TypeError(f"workdir must be a guest path (str) or None, not {type(workdir).__name__}")
        if workdir != "/work" and not any(g.guest_path == workdir and g.writable for g in grants) and not any(m.guest_path == workdir and m.writable for m in mounts):
            raise ValueError(f"workdir: {workdir!r} is not the guest path of a writable grant or mount (or '/work')")
    return {"file_write_bytes": quota, "max_open_files": fds, "workdir": workdir, "preload": _check_preload(preload)}


def _check_memory(memory_bytes: Any) -> int:
    return check_int("memory_bytes", memory_bytes, minimum=40 << 20, maximum=_MEMORY_MAX, why=" (4 GiB: a 32-bit guest cannot use more)")  # type: ignore[return-value]


def artifacts_dir(tools: bool) -> str:
    """The artifact folder, as the extension takes it; ArtifactsMissing when ``tools``
    are offered and the set there predates the tool protocol."""
    where = _artifacts()
    if tools and _ext.check_artifacts(where) is None:
        raise ArtifactsMissing(
            f"the guest artifacts in {where} predate the tool protocol, so tools= cannot be served; "
            f"run `{_FIX}` to lay out a current set"
        )
    return where


def execute(p: _Plan, token: Any, loop: Optional[asyncio.AbstractEventLoop], streaming: tuple[Any, ...] = ()) -> Completed:
    """Runs a planned guest; ``loop`` is where async tools and providers run (None: a
    loop of the run's own). ``streaming``: ``(EventStream,)``, where the run's events go
    for another reader, or ``(EventStream, on_event)``, called here as they come."""
    tracer = _otel.tracer()
    if tracer is not None:
        # The run's span is current while the dispatcher copies the context, so its tool
        # and provider calls' spans are its children.
        with _otel.span("wasi_python.run", span_values(p), tracer) as s:
            done = _execute_networked(p, token, loop, streaming)
            _otel.end_run(s, done)
            return done
    return _execute_networked(p, token, loop, streaming)


_LIMITS = ("memory_bytes", "deadline_s", "output_bytes", "fuel", "file_write_bytes", "max_open_files", "max_file_calls", "display_bytes")


def span_values(p: Any, limits: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A run's (or turn's) limits, as its span's attributes."""
    settings = p.settings if limits is None else limits
    values = {k: settings.get(k) for k in _LIMITS}
    if getattr(p, "door", None) is not None:
        values["tools"] = [t.name for t in p.door[0]]
        values["max_tool_calls"] = p.door[2]
    if getattr(p, "network", None) is not None:
        values["network"] = True
    return values


def _execute_networked(p: _Plan, token: Any, loop: Optional[asyncio.AbstractEventLoop], streaming: tuple[Any, ...]) -> Completed:
    if p.network is not None:
        return _network.run_with(p.network, lambda net: _execute(p, token, loop, net, streaming))
    return _execute(p, token, loop, None, streaming)


def _execute(p: _Plan, token: Any, loop: Optional[asyncio.AbstractEventLoop], net: Any, streaming: tuple[Any, ...] = ()) -> Completed:
    if p.door is None and not p.settings["mounts"] and net is None:
        return completed_from_ext(_ext.run(p.where, p.args, p.stdin, ext_options(p.settings, host=p.host), token, *streaming))
    if p.door is None and not p.settings["mounts"]:
        return completed_from_ext(_ext.run(p.where, p.args, p.stdin, ext_options(p.settings, host=p.host, network=net), token, *streaming))
    tool_list, gate_fn = (p.door[0], p.door[1]) if p.door is not None else ([], None)
    dispatcher = _door.Dispatcher(tool_list, gate_fn, loop)
    try:
        options = ext_options(p.settings, p.door, dispatcher, p.host, net)
        return completed_from_ext(_ext.run(p.where, p.args, p.stdin, options, token, *streaming))
    finally:
        dispatcher.close()
