"""Tools: the embedder's Python functions, offered to the guest (the pure-Python part).

This module is the tools layer's facade: `Tool`, `tool()`, `ToolCall`, the exceptions,
`as_tools` (what ``tools=`` goes through), `for_door` (a tool compiled for the runtime) and
`stubs`. The work is done by modules by concern: `_build` (what a tool is made of), `_hints`
(type hints -> JSON Schema), `_json` (JSON values), `_docstrings` and `_stubs`. It runs
nothing and imports no compiled code at import time: the runner (`wasi_python.run`) calls the
tools, gates them and records them.
"""

from __future__ import annotations

import collections.abc
import copy
import functools
import inspect
import json
import threading
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._build import Param, make
from ._errors import ToolDenied, ToolError, ToolTimeout
from ._json import type_name
from ._stubs import stub

__all__ = [
    "Tool",
    "ToolCall",
    "ToolDenied",
    "ToolError",
    "ToolTimeout",
    "as_tools",
    "face",
    "for_door",
    "forwarding",
    "stubs",
    "tool",
]


# --------------------------------------------------------------------------------------------
# The gate's view of a call


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What a gate sees of one call.

    ``arguments`` is a copy of the validated arguments: only what the guest sent, with no
    defaults filled in and no keyword a partial binds.
    """

    seq: int
    tool: str
    arguments: dict[str, Any]
    request_bytes: int


# --------------------------------------------------------------------------------------------
# The Tool object


class Tool:
    """A host function offered to the guest; made by `tool()`. Immutable.

    Calling it (``t(...)``) calls the wrapped callable, so a decorated function still works as a
    function in host code.
    """

    __slots__ = (
        "name",
        "description",
        "_input_schema",
        "_output_schema",
        "_annotations",
        "read_only",
        "destructive",
        "idempotent",
        "open_world",
        "timeout_s",
        "validates_input",
        "fn",
        "is_async",
        "fixed",
        "signature",
        "doc",
        "_params",
        "_returns",
        "_descriptor",
        "_target",
        "_options",
        "_compiled",
        "__wrapped__",
    )

    name: str
    description: str
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    timeout_s: float | None
    validates_input: bool
    fn: Callable[..., Any]
    is_async: bool
    fixed: tuple[str, ...]
    signature: inspect.Signature
    doc: str
    _input_schema: dict[str, Any]
    _output_schema: dict[str, Any] | None
    _annotations: dict[str, bool]
    _params: tuple[Param, ...]
    _returns: str | None
    _descriptor: dict[str, Any]
    _target: Callable[..., Any]
    _options: dict[str, Any]

    def __init__(self, **fields: Any) -> None:
        fields.setdefault("_compiled", None)
        for key in self.__slots__:
            object.__setattr__(self, key, fields.pop(key))
        if fields:  # pragma: no cover - internal misuse
            raise TypeError(f"unknown Tool fields: {sorted(fields)}")

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Tool {self.name!r} is immutable; make a new one with tool()")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"Tool {self.name!r} is immutable; make a new one with tool()")

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (a copy)."""
        return copy.deepcopy(self._input_schema)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the result (a copy), or None when the function declares none."""
        return copy.deepcopy(self._output_schema)

    @property
    def annotations(self) -> dict[str, bool]:
        """MCP's hints for the labels set True, such as ``{"readOnlyHint": True}``."""
        return dict(self._annotations)

    def descriptor(self) -> dict[str, Any]:
        """The MCP-style descriptor the `list` answer carries (a fresh copy each call)."""
        return copy.deepcopy(self._descriptor)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # A tool pickles as its callable and tool()'s options, and is made again where it
        # is loaded (wasi_python.ray sends tools to Ray workers this way, with cloudpickle):
        # the same schema and descriptor, compiled for that process's runtime on first use.
        # A tool made by `forwarding` pickles as its face and its callable.
        if self._options.get("face") is not None:
            return (forwarding, (self._options["face"], self._target))
        return (_made, (self._target, self._options))

    def __repr__(self) -> str:
        return f"<Tool {self.name}{self.signature}>"


# --------------------------------------------------------------------------------------------
# tool()

_DEFAULT_OPTIONS: dict[str, Any] = {
    "name": None,
    "description": None,
    "input_schema": None,
    "read_only": False,
    "destructive": False,
    "idempotent": False,
    "open_world": False,
    "timeout_s": None,
    "validates_input": False,
}


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | type | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = False,
    timeout_s: float | None = None,
    validates_input: bool = False,
) -> Any:
    """Make a tool from a function: ``@tool``, ``@tool(...)`` or ``tool(fn, ...)``.

    The name, description and input schema come from the function (its name, its docstring up
    to the first heading, its type hints and its parameter docs: a Google ``Args:`` section,
    numpydoc's ``Parameters`` or reST ``:param:`` fields) unless given. A keyword a
    `functools.partial` binds is fixed: it is not in the schema and the guest never sees it.
    The labels ``read_only``, ``destructive``, ``idempotent`` and ``open_world`` are shown to the
    guest as MCP's hints; they grant nothing. Raises TypeError or ValueError, saying why, for a
    function that cannot be a tool.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "input_schema": input_schema,
        "read_only": read_only,
        "destructive": destructive,
        "idempotent": idempotent,
        "open_world": open_world,
        "timeout_s": timeout_s,
        "validates_input": validates_input,
    }
    if fn is None:

        def decorate(f: Callable[..., Any]) -> Tool:
            return tool(f, **options)

        return decorate
    if isinstance(fn, Tool):
        changed = {k: v for k, v in options.items() if not _same(v, _DEFAULT_OPTIONS[k])}
        if not changed:
            return fn
        return _made(fn._target, {**fn._options, **changed})
    return _made(fn, options)


def _made(target: Any, options: dict[str, Any]) -> Tool:
    fields = make(target, options, _unwrap(target))
    return Tool(**fields, _target=target, _options=dict(options), __wrapped__=target)


#: What a tool shows the guest and the door, as plain values (`face`): everything but its
#: callable, its Python signature and its parameters' hints.
_FACE = (
    "name", "description", "_input_schema", "_output_schema", "_annotations", "read_only",
    "destructive", "idempotent", "open_world", "timeout_s", "validates_input", "fixed", "doc",
    "_returns", "_descriptor",
)


def face(t: Tool) -> dict[str, Any]:
    """``t`` as the guest and the door see it (name, descriptor, schemas, labels, timeout),
    as plain picklable values: `forwarding` makes it a tool again in another process."""
    return {k: copy.deepcopy(getattr(t, k)) for k in _FACE}


def forwarding(tool_face: dict[str, Any], fn: Callable[..., Any]) -> Tool:
    """A tool with the face of another (`face`) whose calls go to ``fn(**arguments)``, the
    arguments as the guest sent them and the door checked them: the worker's half of a
    tool served from another process (wasi_python.ray's ``stay``). The guest, the gate,
    the schema check, the timeout and the record see the original tool."""
    fields = {k: tool_face[k] for k in _FACE}
    return Tool(
        **fields,
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(type(fn), "__call__", None)),
        signature=inspect.Signature(),
        _params=(),
        _target=fn,
        _options={**_DEFAULT_OPTIONS, "face": fields},
        __wrapped__=fn,
    )


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and isinstance(a, (bool, str)) and a == b)


def as_tools(tools: Any) -> list[Tool]:
    """Normalise a ``tools=`` argument: each item through `tool()`; one name, one tool."""
    if (
        isinstance(tools, (str, bytes, collections.abc.Mapping))
        or callable(tools)
        or not isinstance(tools, Iterable)
    ):
        raise TypeError(f"tools= takes a list of tools or functions, not {type_name(tools)}")
    out: list[Tool] = []
    seen: set[str] = set()
    for i, item in enumerate(tools):
        if not callable(item):
            raise TypeError(f"tools= holds {type_name(item)} at index {i}: each item must be a function or a tool")
        t = _tool_of_function(item) if type(item) is types.FunctionType else tool(item)
        if t.name in seen:
            raise ValueError(f"two tools are named {t.name!r}; a run offers one tool per name")
        seen.add(t.name)
        out.append(t)
    return out


def for_door(t: Tool) -> Any:
    """The tool compiled for the runtime's door (its descriptor's JSON and its checked
    schema), made on first use and shared by every later run."""
    compiled = t._compiled
    if compiled is None:
        from ._wasi_python import CompiledTool

        compiled = CompiledTool(
            t.name,
            json.dumps(t._descriptor, ensure_ascii=False, separators=(",", ":"), allow_nan=False),
            json.dumps(t._input_schema, ensure_ascii=False, allow_nan=False),
            bool(t.validates_input),
            list(t.fixed),
            t.timeout_s,
        )
        object.__setattr__(t, "_compiled", compiled)
    return compiled


# tool(fn) for the plain functions passed in tools=, kept while the function lives and
# stays as it was: a run offering the same functions as the last skips reading them
# again (signature, hints, docstring, schema).
_FUNCTION_TOOLS: weakref.WeakKeyDictionary[Any, tuple[Any, Tool]] = weakref.WeakKeyDictionary()
_FUNCTION_TOOLS_LOCK = threading.Lock()


def _fingerprint(fn: types.FunctionType) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """What tool() reads of a function: its attributes, and the (name, value) pairs of
    its annotations and its __dict__."""
    attributes = (
        fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__doc__, fn.__name__, fn.__qualname__,
        fn.__module__, fn.__globals__, fn.__annotations__,
    )
    return attributes, (*fn.__annotations__.items(), *fn.__dict__.items())


def _unchanged(was: Any, now: Any) -> bool:
    """Every object the same one, every name equal."""
    (attrs_was, pairs_was), (attrs_now, pairs_now) = was, now
    return (
        all(a is b for a, b in zip(attrs_was, attrs_now))
        and len(pairs_was) == len(pairs_now)
        and all(k == j and v is w for (k, v), (j, w) in zip(pairs_was, pairs_now))
    )


def _tool_of_function(fn: types.FunctionType) -> Tool:
    mark = _fingerprint(fn)
    with _FUNCTION_TOOLS_LOCK:
        hit = _FUNCTION_TOOLS.get(fn)
    if hit is not None and _unchanged(hit[0], mark):
        return hit[1]
    t = tool(fn)
    with _FUNCTION_TOOLS_LOCK:
        _FUNCTION_TOOLS[fn] = (mark, t)
    return t


def _unwrap(fn: Any) -> tuple[Any, int, list[str]]:
    """Flatten partials (and Tools): the base callable, bound positional count, fixed keywords."""
    base = fn
    n_bound = 0
    fixed: list[str] = []
    while True:
        if isinstance(base, functools.partial):
            n_bound += len(base.args)
            fixed.extend(k for k in base.keywords if k not in fixed)
            base = base.func
        elif isinstance(base, Tool):
            base = base._target
        else:
            return base, n_bound, fixed


# --------------------------------------------------------------------------------------------
# Stubs


def stubs(tools: Iterable[Any]) -> str:
    """The tools as Python stub source, as the guest sees them, for a prompt."""
    return "".join(
        ("\n\n" if i else "") + stub(t.name, t._params, t._returns, t.doc) + "\n"
        for i, t in enumerate(as_tools(tools))
    )

