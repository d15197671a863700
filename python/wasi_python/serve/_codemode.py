"""Code mode's run for the framework adapters (`run_code`): a program that awaits the host's
functions, in full CPython. The guest's driver (``DRIVER``, one constant ``-c`` program, so
it is compiled once per process) reads the code, the inputs and the functions' names from
stdin, runs the code as the body of an ``async def`` (top-level ``await`` and ``return``; a
final expression is the result), each function an awaitable over our tool door, and hands
the result back through one more tool; an exception is a traceback of the code's own lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from .. import Completed, run_async
from ..tools import Tool, tool

__all__ = ["CodeModeError", "Outcome", "run_code", "RESULT_TOOL"]

#: The tool the driver hands the result to (not a function of the code's).
RESULT_TOOL = "wasi_python_result"

DRIVER = r'''
import json as _json, sys as _sys

def _wasi_python_code_mode():
    import ast, functools, linecache, traceback
    from host import tools
    spec = _json.loads(_sys.stdin.read())
    code = spec["code"]
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    scope = {"__name__": "__main__", "__builtins__": __builtins__}

    def awaitable(f):
        @functools.wraps(f)
        async def call(*args, **kwargs):
            return f(*args, **kwargs)
        return call

    for name in spec["functions"]:
        scope[name] = awaitable(getattr(tools, name))
    scope.update(spec["inputs"])
    if "asyncio" in code:
        # No event loop here (nor needed: every function answers at once): gather awaits
        # in turn, sleep sleeps.
        import asyncio, time

        async def gather(*aws, return_exceptions=False):
            out = []
            for a in aws:
                try:
                    out.append(await a)
                except Exception as e:
                    if not return_exceptions:
                        raise
                    out.append(e)
            return out

        async def sleep(delay, result=None):
            time.sleep(delay)
            return result

        asyncio.gather, asyncio.sleep = gather, sleep
    try:
        body = ast.parse(code, "<code>").body
        if body and isinstance(body[-1], ast.Expr):
            body[-1] = ast.copy_location(ast.Return(body[-1].value), body[-1])
        module = ast.parse("async def __code__():\n    pass\n", "<code>")
        module.body[0].body = body or module.body[0].body
        ast.fix_missing_locations(module)
        exec(compile(module, "<code>", "exec"), scope)
        coro = scope["__code__"]()
        try:
            while True:
                if coro.send(None) is not None:
                    coro.close()
                    raise RuntimeError("this sandbox runs the code without an event loop: await the functions given, asyncio.gather or asyncio.sleep only")
        except StopIteration as done:
            value = done.value
    except BaseException as e:
        te = traceback.TracebackException.from_exception(e)
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename == "<code>"])
        _sys.stderr.write("".join(te.format()))
        _sys.stderr.flush()
        raise SystemExit(1)

    def plain(v, depth=0):
        if v is None or isinstance(v, (bool, int, float, str)) or depth > 60:
            return v
        if isinstance(v, dict):
            return {str(k): plain(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            return [plain(x, depth + 1) for x in v]
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).decode("utf-8", "replace")
        for method in ("item", "tolist", "to_dict"):  # numpy scalars and arrays, pandas
            f = getattr(v, method, None)
            if callable(f):
                try:
                    return plain(f(), depth + 1)
                except Exception:
                    pass
        return repr(v)

    getattr(tools, spec["result_tool"])(value=plain(value))

_wasi_python_code_mode()
'''


class CodeModeError(Exception):
    """The code did not finish: its traceback (or why the sandbox stopped it), and what it
    printed."""

    def __init__(self, message: str, done: Completed) -> None:
        super().__init__(message)
        self.done = done


@dataclass(frozen=True)
class Outcome:
    """A code-mode run's result value, and how the run ended (its output and tool record)."""

    value: Any
    done: Completed


def _function_tool(name: str, fn: Callable[..., Any]) -> Tool:
    if isinstance(fn, Tool):
        return tool(fn, name=name)
    try:
        return tool(fn, name=name)
    except (TypeError, ValueError):
        # A callable tool() cannot read (no hints it understands): arguments by name, unchecked.
        return tool(fn, name=name, input_schema={"type": "object", "additionalProperties": True}, validates_input=True)


async def run_code(
    code: str,
    *,
    inputs: Optional[Mapping[str, Any]] = None,
    functions: Optional[Mapping[str, Callable[..., Any]]] = None,
    **run_kw: Any,
) -> Outcome:
    """Runs ``code`` in the sandbox with ``inputs`` as variables and each of ``functions``
    an awaitable the code calls (through our door: checked against its hints, bounded,
    recorded); returns its result. ``run_kw`` goes to `wasi_python.run_async`. Raises
    `CodeModeError` when the code raised or the sandbox stopped it."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, not {type(code).__name__}")
    functions = dict(functions or {})
    if RESULT_TOOL in functions:
        raise ValueError(f"{RESULT_TOOL!r} is the name the result is handed back by")
    got: dict[str, Any] = {}

    def wasi_python_result(value: Any = None) -> None:
        """Receives the code's result (the driver's own call)."""
        got["value"] = value

    tools = [_function_tool(n, f) for n, f in functions.items()]
    tools.append(tool(wasi_python_result, name=RESULT_TOOL))
    spec = json.dumps({"code": code, "inputs": dict(inputs or {}), "functions": list(functions), "result_tool": RESULT_TOOL}, default=repr)
    done = await run_async(["-c", DRIVER], stdin=spec, tools=tools, **run_kw)
    if done.ok and "value" in got:
        return Outcome(got["value"], done)
    if done.trapped is not None:
        why = f"the sandbox stopped the code ({done.trapped})"
    else:
        why = done.stderr.decode("utf-8", "replace").strip()[-4000:] or f"the code exited with status {done.exit_code}"
    out = done.stdout.decode("utf-8", "replace").strip()
    if out:
        why += "\n\nIt printed:\n" + out[-2000:]
    raise CodeModeError(why, done)
