"""Tools: the embedder's Python functions, offered to the guest (the pure-Python part).

This module builds `Tool` objects and their descriptors (the MCP-style dicts of the `list`
answer, artifact ABI section 6.3) from Python callables. It runs nothing and imports no compiled
code at import time: the runner (`wasi_python.run`) calls the tools, gates them and records them.

Choices made here (see the guide "Offer tools to the guest"):

- A tool's arguments are passed by keyword. A positional-only parameter is supported: it is
  published with ``"kind": "positional_only"`` in ``_meta.python.params`` and `Tool.fn` is then
  a small adapter that passes it by position.
- `Tool.fn` is what the runner calls with the validated JSON arguments as keywords. When a
  parameter is typed with a dataclass, a pydantic model, an Enum, a tuple or a set, `Tool.fn`
  converts that argument from its JSON form first, and converts such a result back to JSON.
  Otherwise `Tool.fn` is the callable itself (a `functools.partial` stays a partial).
- With ``input_schema=``, ``_meta.python.params`` come from the function's signature when it
  matches the schema (same property names, same required ones); otherwise from the schema's
  properties, required ones first, all positional-or-keyword.
- An optional parameter with no published default (only possible with ``input_schema=`` or a
  pydantic ``Field(default_factory=...)``) is listed with ``"optional": true`` and no
  ``"default"``. A ``**kwargs`` parameter is listed with ``"kind": "var_keyword"``.
"""

from __future__ import annotations

import base64
import collections.abc
import copy
import dataclasses
import enum
import functools
import inspect
import json
import keyword
import math
import numbers
import re
import sys
import threading
import types
import typing
import weakref
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from typing import Any

from ._types import MAX_SECONDS, show_number

__all__ = [
    "Tool",
    "ToolCall",
    "ToolDenied",
    "ToolError",
    "ToolTimeout",
    "stubs",
    "tool",
]

_EMPTY = inspect.Parameter.empty
_NONE_TYPE = type(None)
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
# The guest encodes integers with -10**63 < n < 10**64 (artifact ABI 6.2); defaults obey it too.
_INT_MIN = -(10**63)
_INT_MAX = 10**64


# --------------------------------------------------------------------------------------------
# Exceptions and the gate's view of a call


class ToolError(Exception):
    """Raised by a tool to fail a call; its message crosses to the guest (``host.ToolError``).

    Raised by a gate, it refuses the call with its message: the guest reads
    ``host.ToolDenied`` (a ``host.ToolError``), and the record says "denied" with the
    message, its fault "ToolError: ..." telling it from a ToolDenied."""


class ToolDenied(ToolError):
    """Raised by a gate to refuse a call; the guest reads its message as a ``PermissionError``."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool call that ran past its time; the guest raises ``host.ToolTimeout``."""


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
    _params: tuple[_Param, ...]
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

    def _for_door(self) -> Any:
        """The tool compiled for the runtime's door (its descriptor's JSON and its checked
        schema), made on first use and shared by every later run."""
        compiled = self._compiled
        if compiled is None:
            from ._wasi_python import CompiledTool

            compiled = CompiledTool(
                self.name,
                json.dumps(self._descriptor, ensure_ascii=False, separators=(",", ":"), allow_nan=False),
                json.dumps(self._input_schema, ensure_ascii=False, allow_nan=False),
                bool(self.validates_input),
                list(self.fixed),
                self.timeout_s,
            )
            object.__setattr__(self, "_compiled", compiled)
        return compiled

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
    to the first heading, its type hints and its ``Args:`` section) unless given. A keyword a
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
        return _make(fn._target, {**fn._options, **changed})
    return _make(fn, options)


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and isinstance(a, (bool, str)) and a == b)


def _as_tools(tools: Any) -> list[Tool]:
    """Normalise a ``tools=`` argument: each item through `tool()`; one name, one tool."""
    if (
        isinstance(tools, (str, bytes, collections.abc.Mapping))
        or callable(tools)
        or not isinstance(tools, Iterable)
    ):
        raise TypeError(f"tools= takes a list of tools or functions, not {_type_name(tools)}")
    out: list[Tool] = []
    seen: set[str] = set()
    for i, item in enumerate(tools):
        if not callable(item):
            raise TypeError(f"tools= holds {_type_name(item)} at index {i}: each item must be a function or a tool")
        t = _tool_of_function(item) if type(item) is types.FunctionType else tool(item)
        if t.name in seen:
            raise ValueError(f"two tools are named {t.name!r}; a run offers one tool per name")
        seen.add(t.name)
        out.append(t)
    return out


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


def _check_schema(schema: dict[str, Any], validates_input: bool) -> None:
    """Check an input schema with the runtime's checker (crates/schema), when it is built.

    Without the compiled extension this does nothing.
    """
    try:
        from wasi_python._wasi_python import check_schema  # type: ignore[attr-defined]
    except ImportError:
        return
    import json

    check_schema(json.dumps(schema, ensure_ascii=False), validates_input)


# --------------------------------------------------------------------------------------------
# Making a tool


@dataclass(slots=True)
class _Param:
    """One published parameter, as the guest sees it."""

    name: str
    kind: str  # positional_only | positional_or_keyword | keyword_only | var_keyword
    hint: Any = _EMPTY  # the resolved hint, or _EMPTY
    text: str | None = None  # the annotation text
    default: Any = _EMPTY  # the published JSON default, or _EMPTY
    py_default: Any = _EMPTY  # the Python default for the Signature
    optional: bool = False  # True when omittable (with or without a published default)

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.text is not None:
            out["annotation"] = self.text
        if self.default is not _EMPTY:
            out["default"] = copy.deepcopy(self.default)
        elif self.optional:
            out["optional"] = True
        return out


_KINDS: dict[Any, str] = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}
_PY_KINDS: dict[str, Any] = {v: k for k, v in _KINDS.items()}


def _make(target: Any, options: dict[str, Any]) -> Tool:
    if not callable(target):
        raise TypeError(f"tool() takes a callable, not {_type_name(target)}")
    name_opt = options["name"]
    if name_opt is not None and not isinstance(name_opt, str):
        raise TypeError(f"tool name= must be a str, not {_type_name(name_opt)}")
    desc_opt = options["description"]
    if desc_opt is not None and not isinstance(desc_opt, str):
        raise TypeError(f"tool description= must be a str, not {_type_name(desc_opt)}")
    timeout = _check_timeout(options["timeout_s"])
    for flag in ("read_only", "destructive", "idempotent", "open_world", "validates_input"):
        if type(options[flag]) is not bool:
            raise TypeError(f"tool {flag}= must be a bool (True or False), not {_type_name(options[flag])}")

    base, n_bound, fixed_names = _unwrap(target)
    name = name_opt if name_opt is not None else _default_name(base)
    _check_name(name)
    label = f"tool {name!r}"

    if inspect.isasyncgenfunction(base) or inspect.isasyncgenfunction(
        getattr(type(base), "__call__", None)
    ):
        raise TypeError(f"{label}: an async generator function cannot be a tool; return a list")
    is_async = _is_async(base)

    raw_doc = _doc_of(base)
    sig = _signature_of(base)  # None when it cannot be read
    given_schema = options["input_schema"]
    hints = _hints_of(base, label, strict=given_schema is None) if sig is not None else {}

    # The published parameters of the signature, with fixed and positionally bound ones removed.
    sig_params, var_kw, fixed, drop_doc = _published(
        sig, n_bound, fixed_names, label, allow_var_positional=given_schema is not None
    )
    doc_entries, doc_lines = _parse_args_section(raw_doc)
    arg_docs = {k: v[0] for k, v in doc_entries.items()}

    builder = _SchemaBuilder(label)
    converters: dict[str, Callable[[Any], Any]] = {}
    fills: dict[str, Callable[[], Any]] = {}
    params: list[_Param] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in sig_params:
        _check_property_name(p.name, label)
        hint = hints.get(p.name, _EMPTY) if p.annotation is not _EMPTY else _EMPTY
        entry = _Param(p.name, _KINDS[p.kind], hint, _hint_text(hint))
        default = p.default
        field_desc = None
        field = _field_info(default)
        if field is not None:
            field_desc = field.description
            default, fill = _field_default(field)
            if fill is not None:
                fills[p.name] = fill
        if given_schema is None:
            prop, conv = builder.build(hint, where=f"parameter {p.name!r}")
            if conv is not None:
                converters[p.name] = conv
            desc = _annotated_description(hint) or field_desc or arg_docs.get(p.name)
            if desc:
                prop["description"] = desc
        else:
            prop, conv = None, _converter_or_none(builder, hint)
            if conv is not None:
                converters[p.name] = conv
        if default is not _EMPTY:
            entry.py_default = p.default
            entry.optional = True
            if prop is not None:
                entry.default = _json_default(default, label, p.name)
                prop["default"] = copy.deepcopy(entry.default)
            else:
                entry.default = _json_default_or_empty(default)
        elif p.name in fills:
            entry.py_default = p.default
            entry.optional = True
        elif given_schema is None:
            required.append(p.name)
        params.append(entry)
        if prop is not None:
            properties[p.name] = prop

    kw_conv = None
    var_entry = None
    extra: Any = True
    if var_kw is not None:
        kw_hint = hints.get(var_kw.name, _EMPTY) if var_kw.annotation is not _EMPTY else _EMPTY
        var_entry = _Param(var_kw.name, "var_keyword", kw_hint, _hint_text(kw_hint))
        if given_schema is None:
            extra, kw_conv = builder.build(kw_hint, where=f"parameter **{var_kw.name}")
            extra = extra or True
        else:
            kw_conv = _converter_or_none(builder, kw_hint)

    if given_schema is None:
        input_schema: dict[str, Any] = {"type": "object", "properties": properties}
        root = input_schema
        if required:
            input_schema["required"] = required
        input_schema["additionalProperties"] = extra if var_kw is not None else False
        if builder.defs:
            input_schema["$defs"] = builder.defs
    else:
        input_schema, root = _given_schema(given_schema, label)
        params = _params_for_schema(root, sig, params, var_kw is not None, label)
        # **kwargs is shown only when the schema says, in so many words, that extras are allowed.
        extra_ok = root.get("additionalProperties", False)
        if extra_ok is False:
            var_entry = None
        elif var_entry is None:
            if sig is not None:
                raise TypeError(
                    f"{label}: input_schema allows additional properties, "
                    "which the function cannot take"
                )
            var_entry = _Param("kwargs", "var_keyword")
    params = _fix_order(params)

    # The return.
    ret_hint = _EMPTY
    if sig is not None and sig.return_annotation is not _EMPTY:
        ret_hint = _unwrap_awaitable(hints.get("return", _EMPTY))
    output_schema = None
    result_conv = None
    if ret_hint is not _EMPTY and ret_hint is not None and ret_hint is not _NONE_TYPE:
        try:
            out_builder = _SchemaBuilder(label)
            out, result_conv = out_builder.build(ret_hint, where="the return annotation")
            if out_builder.defs:
                out["$defs"] = out_builder.defs
            output_schema = out or None
        except (TypeError, ValueError):
            output_schema, result_conv = None, None
        if result_conv is not None:
            result_conv = _to_json
    returns_text = _hint_text(ret_hint)

    # Description and the published docstring.
    all_params = params + ([var_entry] if var_entry is not None else [])
    description = desc_opt if desc_opt is not None else _description_of(raw_doc)
    if desc_opt is None and raw_doc:
        doc = _drop_doc_entries(doc_lines, doc_entries, drop_doc)
    else:
        doc = _generated_doc(description, root)

    labels = {
        "readOnlyHint": options["read_only"],
        "destructiveHint": options["destructive"],
        "idempotentHint": options["idempotent"],
        "openWorldHint": options["open_world"],
    }
    annotations = {k: True for k, v in labels.items() if v}

    descriptor: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": input_schema,
    }
    if output_schema is not None:
        descriptor["outputSchema"] = output_schema
    if annotations:
        descriptor["annotations"] = annotations
    python_meta: dict[str, Any] = {"params": [p.meta() for p in all_params]}
    if returns_text is not None:
        python_meta["returns"] = returns_text
    python_meta["doc"] = doc
    descriptor["_meta"] = {"python": python_meta}

    _check_schema(input_schema, bool(options["validates_input"]))

    fn = _invoker(
        target,
        is_async,
        posonly=[p for p in params if p.kind == "positional_only"],
        converters=converters,
        kw_conv=kw_conv,
        named={p.name for p in params},
        fills=fills,
        result_conv=result_conv,
        label=label,
    )
    signature = _published_signature(all_params, ret_hint, returns_text)
    return Tool(
        name=name,
        description=description,
        _input_schema=input_schema,
        _output_schema=output_schema,
        _annotations=annotations,
        read_only=bool(options["read_only"]),
        destructive=bool(options["destructive"]),
        idempotent=bool(options["idempotent"]),
        open_world=bool(options["open_world"]),
        timeout_s=timeout,
        validates_input=bool(options["validates_input"]),
        fn=fn,
        is_async=is_async,
        fixed=fixed,
        signature=signature,
        doc=doc,
        _params=tuple(all_params),
        _returns=returns_text,
        _descriptor=descriptor,
        _target=target,
        _options=dict(options),
        __wrapped__=target,
    )


def _type_name(x: Any) -> str:
    return type(x).__qualname__


def _check_timeout(t: Any) -> float | None:
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"timeout_s must be a number of seconds, not {_type_name(t)}")
    # Compared, never converted first: an int past a float's range would raise
    # OverflowError. NaN fails both comparisons; infinities fail one.
    if not (0 < t <= MAX_SECONDS):
        raise ValueError(f"timeout_s must be positive and finite, at most {MAX_SECONDS:g} seconds, not {show_number(t)}")
    return float(t)


def _check_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name) or keyword.iskeyword(name):
        why = (
            "is a Python keyword"
            if keyword.iskeyword(name)
            else ("must be a letter then up to 63 letters, digits or underscores")
        )
        raise ValueError(f"tool name {name!r} {why}; pass name= with a Python identifier")


def _check_property_name(name: str, label: str) -> None:
    if (
        not isinstance(name, str)
        or not (name.isascii() and name.isidentifier())
        or keyword.iskeyword(name)
    ):
        raise ValueError(
            f"{label}: property name {name!r} is not an ASCII Python identifier, so the guest's "
            "function cannot take it; rename it in the schema"
        )


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


def _default_name(base: Any) -> str:
    name = getattr(base, "__name__", None)
    if not isinstance(name, str):
        name = type(base).__name__
    return name


def _is_async(base: Any) -> bool:
    if inspect.iscoroutinefunction(base):
        return True
    if not isinstance(base, (types.FunctionType, types.MethodType, type)):
        call = getattr(type(base), "__call__", None)
        return inspect.iscoroutinefunction(call)
    return False


def _doc_of(base: Any) -> str:
    doc = inspect.getdoc(base)
    if not doc and not isinstance(base, (types.FunctionType, types.MethodType, type)):
        doc = inspect.getdoc(getattr(type(base), "__call__", None))
    return doc or ""


def _signature_of(base: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(base)
    except (TypeError, ValueError):
        return None


def _hints_of(base: Any, label: str, *, strict: bool) -> dict[str, Any]:
    """The resolved type hints; an unresolvable one is refused unless the schema is given."""
    if isinstance(base, (types.FunctionType, types.MethodType)):
        source: Any = getattr(base, "__func__", base)
    elif isinstance(base, type):
        source = base.__init__  # type: ignore[misc]
    else:
        source = getattr(type(base), "__call__", base)
    source = getattr(source, "__func__", source)
    try:
        return typing.get_type_hints(source, include_extras=True)
    except (NameError, SyntaxError) as e:
        if not strict:
            return {}
        raise TypeError(
            f"{label}: a type hint cannot be resolved ({type(e).__name__}: {e}); "
            "make it importable from the function's module or pass input_schema="
        ) from None
    except TypeError:
        return {}  # not a function typing knows (a builtin, say): no hints


def _published(
    sig: inspect.Signature | None,
    n_bound: int,
    fixed_names: list[str],
    label: str,
    *,
    allow_var_positional: bool,
) -> tuple[list[inspect.Parameter], inspect.Parameter | None, tuple[str, ...], set[str]]:
    """The parameters the guest sees; the **kwargs one; the fixed keywords; doc names to drop."""
    if sig is None:
        return [], None, tuple(fixed_names), set(fixed_names)
    P = inspect.Parameter
    params = list(sig.parameters.values())
    var_kw = next((p for p in params if p.kind is P.VAR_KEYWORD), None)
    var_pos = next((p for p in params if p.kind is P.VAR_POSITIONAL), None)
    drop: set[str] = set()
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if n_bound > len(positional) and var_pos is None:
        raise TypeError(
            f"{label}: the partial binds {n_bound} positional arguments, "
            f"but the function takes {len(positional)}"
        )
    bound = {p.name for p in positional[:n_bound]}
    drop |= bound
    by_name = {p.name: p for p in params if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)}
    for k in fixed_names:
        p = by_name.get(k)
        if k in bound or (p is not None and p.kind is P.POSITIONAL_ONLY and var_kw is None):
            raise TypeError(f"{label}: the partial binds {k!r}, which it cannot pass by keyword")
        if p is None and var_kw is None:
            raise TypeError(f"{label}: the partial binds {k!r}, which the function does not take")
    drop |= set(fixed_names)
    if var_pos is not None and not allow_var_positional:
        raise TypeError(
            f"{label}: *{var_pos.name} cannot be published: the guest passes arguments by name; "
            "name the parameters or pass input_schema="
        )
    order = [p.name for p in params]
    fixed = tuple(sorted(fixed_names, key=lambda k: order.index(k) if k in order else len(order)))
    published = [
        p for p in params if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and p.name not in drop
    ]
    return published, var_kw, fixed, drop


def _given_schema(given: Any, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The schema given with ``input_schema=`` (a copy), and its root object schema: the schema
    itself, or the one a root ``$ref`` names (pydantic's shape for a recursive model)."""
    if isinstance(given, dict):
        schema = copy.deepcopy(given)
    elif isinstance(given, type) and hasattr(given, "model_json_schema"):
        schema = given.model_json_schema()
    elif isinstance(given, type) and hasattr(given, "schema"):  # a pydantic 1 model
        schema = copy.deepcopy(given.schema())
    else:
        raise TypeError(
            f"{label}: input_schema= takes a dict or a pydantic model class, "
            f"not {_type_name(given)}"
        )
    root = schema
    if "type" not in root and "properties" not in root and isinstance(root.get("$ref"), str):
        root = _resolve_root_ref(schema, root["$ref"], label)
    if root.get("type", "object" if "properties" in root else None) != "object":
        raise ValueError(f'{label}: input_schema must be an object schema ("type": "object")')
    props = root.get("properties", {})
    req = root.get("required", [])
    if not isinstance(props, dict):
        raise ValueError(f"{label}: input_schema's properties must be an object")
    if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
        raise ValueError(f"{label}: input_schema's required must be a list of names")
    for k in props:
        _check_property_name(k, label)
    for r in req:
        if r not in props:
            raise ValueError(f"{label}: input_schema requires {r!r}, which it does not define")
    return schema, root


def _resolve_root_ref(schema: dict[str, Any], ref: str, label: str) -> dict[str, Any]:
    for section in ("$defs", "definitions"):
        prefix = f"#/{section}/"
        defs = schema.get(section)
        if ref.startswith(prefix) and isinstance(defs, dict):
            target = defs.get(ref[len(prefix) :])
            if isinstance(target, dict):
                return target
    raise ValueError(f"{label}: input_schema's root $ref {ref!r} names no schema in it")


def _params_for_schema(
    schema: dict[str, Any],
    sig: inspect.Signature | None,
    sig_params: list[_Param],
    has_var_kw: bool,
    label: str,
) -> list[_Param]:
    """The published parameters for a given schema: the signature's if it matches, else the
    schema's (required first, all positional-or-keyword)."""
    props: dict[str, Any] = schema.get("properties", {})
    req: list[str] = schema.get("required", [])
    names = [p.name for p in sig_params]
    sig_required = {p.name for p in sig_params if not p.optional}
    if sig is not None:
        if set(names) == set(props) and set(req) == sig_required:
            for p in sig_params:  # the schema's own default wins in the published one
                prop = props[p.name]
                if isinstance(prop, dict) and "default" in prop:
                    p.default = copy.deepcopy(prop["default"])
                if p.text is None:
                    text = _schema_text(prop)
                    p.text = None if text == "Any" else text
            return sig_params
        if not has_var_kw:
            for k in props:
                if k not in names:
                    raise TypeError(
                        f"{label}: input_schema has property {k!r}, which the function "
                        "does not take"
                    )
        for k in sig_required:
            if k not in req:
                raise TypeError(
                    f"{label}: the function requires {k!r}, which input_schema does not require"
                )
    out: list[_Param] = []
    for group in (True, False):
        for k, prop in props.items():
            if (k in req) != group:
                continue
            p = _Param(k, "positional_or_keyword", text=_schema_text(prop))
            if not group:
                p.optional = True
                if isinstance(prop, dict) and "default" in prop:
                    p.default = copy.deepcopy(prop["default"])
                    p.py_default = _json_to_python(p.default)
                else:
                    p.py_default = ...
            out.append(p)
    return out


def _fix_order(params: list[_Param]) -> list[_Param]:
    """Make a required positional parameter after an optional one keyword-only (possible only
    with a pydantic ``Field()`` default that has no value), so the signature stays valid."""
    seen_optional = False
    for p in params:
        if p.kind in ("positional_only", "positional_or_keyword"):
            if p.optional:
                seen_optional = True
            elif seen_optional:
                break
    else:
        return params
    out = []
    seen_optional = False
    for p in params:
        if p.kind in ("positional_only", "positional_or_keyword"):
            if not p.optional and seen_optional:
                p.kind = "keyword_only"
            seen_optional = seen_optional or p.optional
            if seen_optional and p.kind == "positional_or_keyword":
                p.kind = "keyword_only"
        out.append(p)
    return out


def _published_signature(
    params: list[_Param], ret_hint: Any, returns_text: str | None
) -> inspect.Signature:
    out = []
    for p in params:
        if p.hint is not _EMPTY:
            ann = p.hint
        elif p.text is not None:
            ann = p.text
        else:
            ann = _EMPTY
        default: Any = _EMPTY
        if p.kind != "var_keyword" and p.optional:
            default = p.py_default if p.py_default is not _EMPTY else ...
        out.append(inspect.Parameter(p.name, _PY_KINDS[p.kind], default=default, annotation=ann))
    # get_type_hints turns `-> None` into NoneType; show it as written.
    if ret_hint is _NONE_TYPE:
        ret_hint = None
    return inspect.Signature(out, return_annotation=ret_hint)


# --------------------------------------------------------------------------------------------
# Defaults


class _NotJSON(Exception):
    pass


def _pydantic_base_model() -> type | None:
    mod = sys.modules.get("pydantic")
    return getattr(mod, "BaseModel", None) if mod is not None else None


def _is_pydantic_model(h: Any) -> bool:
    bm = _pydantic_base_model()
    return bm is not None and isinstance(h, type) and issubclass(h, bm)


def _field_info(default: Any) -> Any:
    mod = sys.modules.get("pydantic.fields")
    fi = getattr(mod, "FieldInfo", None) if mod is not None else None
    return default if fi is not None and isinstance(default, fi) else None


def _field_default(field: Any) -> tuple[Any, Callable[[], Any] | None]:
    """A pydantic Field used as a parameter default: (default or _EMPTY, a filler or None)."""
    if field.default_factory is not None:
        factory = field.default_factory
        return _EMPTY, factory
    default = field.default
    if type(default).__name__ == "PydanticUndefinedType" or default is Ellipsis:
        return _EMPTY, None
    return default, (lambda: default)


def _json_value(v: Any, depth: int = 0) -> Any:
    """A Python default as the JSON the descriptor carries; raises _NotJSON."""
    if depth > 62:
        raise _NotJSON("it nests too deeply")
    if isinstance(v, enum.Enum):
        return _json_value(v.value, depth + 1)
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        return str(v)
    if isinstance(v, numbers.Integral):
        n = int(v)
        if not _INT_MIN < n < _INT_MAX:
            raise _NotJSON("it is an integer too large for the protocol")
        return n
    if isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):
            raise _NotJSON(f"it is {f!r}; only finite numbers cross")
        return f
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (list, tuple)):
        return [_json_value(x, depth + 1) for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise _NotJSON(f"it has a key {k!r} that is not a str")
            if k == "$bytes":
                raise _NotJSON('it has a key "$bytes", which the protocol reserves')
            out[str(k)] = _json_value(x, depth + 1)
        return out
    bm: Any = _pydantic_base_model()
    if bm is not None and isinstance(v, bm):
        return _json_value(typing.cast(Any, v).model_dump(mode="json"), depth + 1)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _json_value({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}, depth + 1)
    raise _NotJSON(f"it is a {_type_name(v)}")


def _json_default(v: Any, label: str, pname: str) -> Any:
    try:
        return _json_value(v)
    except _NotJSON as e:
        raise TypeError(
            f"{label}: the default of parameter {pname!r} is not JSON ({e}). A default is "
            "published to the guest in the schema; bind a value the guest must not see or "
            "send with functools.partial instead"
        ) from None


def _json_default_or_empty(v: Any) -> Any:
    try:
        return _json_value(v)
    except _NotJSON:
        return _EMPTY


def _json_to_python(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"$bytes"} and isinstance(v["$bytes"], str):
            try:
                return base64.b64decode(v["$bytes"], validate=True)
            except ValueError:
                return v
        return {k: _json_to_python(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_to_python(x) for x in v]
    return v


# --------------------------------------------------------------------------------------------
# Type hints -> JSON Schema (and the converter from JSON back to the hinted type)

_Conv = Callable[[Any], Any]
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    bytes: {"type": "string", "contentEncoding": "base64"},
    bytearray: {"type": "string", "contentEncoding": "base64"},
}
_SEQUENCES = {
    list,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Collection,
    collections.abc.Iterable,
}
_SETS = {set, frozenset, collections.abc.Set, collections.abc.MutableSet}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
_WRAPPERS = tuple(
    w
    for w in (
        getattr(typing, "Required", None),
        getattr(typing, "NotRequired", None),
        getattr(typing, "ReadOnly", None),
    )
    if w is not None
)


class _SchemaBuilder:
    """Builds JSON Schemas for hints; collects lifted pydantic ``$defs``."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.defs: dict[str, Any] = {}
        self._stack: list[Any] = []

    def build(self, hint: Any, where: str) -> tuple[dict[str, Any], _Conv | None]:
        try:
            return self._build(hint)
        except _Unsupported as e:
            raise TypeError(f"{self.label}: {where}: {e}") from None

    def _lift(self, schema: dict[str, Any]) -> dict[str, Any]:
        schema = dict(schema)
        for k, v in schema.pop("$defs", {}).items():
            if k in self.defs and self.defs[k] != v:
                raise _Unsupported(f"two types named {k!r} have different schemas")
            self.defs[k] = v
        return schema

    def _build(self, h: Any) -> tuple[dict[str, Any], _Conv | None]:
        if h is _EMPTY or h is Any or h is object:
            return {}, None
        if h is None or h is _NONE_TYPE:
            return {"type": "null"}, None
        origin = typing.get_origin(h)
        args = typing.get_args(h)
        if origin is typing.Annotated:
            schema, conv = self._build(args[0])
            desc = _annotated_description(h)
            if desc:
                schema = {**schema, "description": desc}
            return schema, conv
        if origin is not None and origin in _WRAPPERS:
            return self._build(args[0])
        if origin is typing.Union or origin is types.UnionType:
            parts = [self._build(a) for a in args]
            return {"anyOf": [s for s, _ in parts]}, _union_converter(h, args, parts)
        if origin is typing.Literal:
            values = []
            for v in args:
                try:
                    value = _json_value(v)
                except _NotJSON as e:
                    raise _Unsupported(f"Literal value {v!r} is not JSON ({e})") from None
                if isinstance(value, (dict, list)):
                    raise _Unsupported(f"Literal value {v!r} is not a JSON scalar")
                values.append(value)
            conv = None
            if any(isinstance(v, enum.Enum) for v in args):
                members = {_json_value(v): v for v in args if isinstance(v, enum.Enum)}
                conv = lambda x: members.get(x, x)  # noqa: E731
            return ({"const": values[0]} if len(values) == 1 else {"enum": values}), conv
        if isinstance(h, typing.NewType):
            return self._build(h.__supertype__)
        if isinstance(h, typing.TypeVar):
            if h.__bound__ is not None:
                return self._build(h.__bound__)
            if h.__constraints__:
                return self._build(typing.Union[h.__constraints__])  # type: ignore[arg-type]
            return {}, None
        if isinstance(h, (str, typing.ForwardRef)):
            raise _Unsupported(f"the type hint {h!r} is not resolved")
        if origin is None and isinstance(h, type):
            return self._build_class(h)
        if origin in _SEQUENCES or origin is tuple or origin in _SETS:
            return self._build_array(origin, args)
        if origin in _MAPPINGS:
            return self._build_mapping(args)
        return self._fallback(h)

    def _build_class(self, h: type) -> tuple[dict[str, Any], _Conv | None]:
        if issubclass(h, enum.Enum):
            try:
                values = [_json_value(m.value) for m in h]
            except _NotJSON as e:
                raise _Unsupported(f"the values of {h.__name__} are not JSON ({e})") from None
            return {"enum": values}, h
        if h in _SCALARS:
            return dict(_SCALARS[h]), (bytearray if h is bytearray else None)
        if _is_pydantic_model(h):
            return self._lift(typing.cast(Any, h).model_json_schema()), _model_converter(h)
        if typing.is_typeddict(h):
            return self._guarded(h, self._build_typeddict)
        if dataclasses.is_dataclass(h):
            return self._guarded(h, self._build_dataclass)
        if h in _SEQUENCES or h is tuple or h in _SETS:
            return self._build_array(h, ())
        if h in _MAPPINGS:
            return {"type": "object"}, None
        return self._fallback(h)

    def _guarded(self, h: type, fn: Callable[[Any], Any]) -> Any:
        if h in self._stack:
            raise _Unsupported(f"{h.__name__} is recursive; use a pydantic model for it")
        self._stack.append(h)
        try:
            return fn(h)
        finally:
            self._stack.pop()

    def _build_array(
        self, origin: Any, args: tuple[Any, ...]
    ) -> tuple[dict[str, Any], _Conv | None]:
        schema: dict[str, Any] = {"type": "array"}
        if origin is tuple:
            if args and args[-1] is Ellipsis:
                item, conv = self._build(args[0])
                if item:
                    schema["items"] = item
                return schema, _tuple_of(conv)
            if not args:  # bare tuple (tuple[()] reads the same in 3.11)
                return schema, tuple
            items = [self._build(a) for a in args]
            schema["prefixItems"] = [s for s, _ in items]
            schema["minItems"] = schema["maxItems"] = len(args)
            return schema, _fixed_tuple([c for _, c in items])
        item, conv = self._build(args[0]) if args else ({}, None)
        if item:
            schema["items"] = item
        if origin in _SETS:
            schema["uniqueItems"] = True
            make = frozenset if origin is frozenset else set
            return schema, (lambda v: make(conv(x) for x in v)) if conv else make
        if conv is None:
            return schema, None
        return schema, lambda v: [conv(x) for x in v]

    def _build_mapping(self, args: tuple[Any, ...]) -> tuple[dict[str, Any], _Conv | None]:
        schema: dict[str, Any] = {"type": "object"}
        if not args:
            return schema, None
        key, value = args
        key_base = typing.get_args(key)[0] if typing.get_origin(key) is typing.Annotated else key
        if key_base is not str and key_base is not Any:
            raise _Unsupported(f"a JSON object's keys are strings, not {_hint_text(key)}")
        item, conv = self._build(value)
        if item:
            schema["additionalProperties"] = item
        if conv is None:
            return schema, None
        return schema, lambda v: {k: conv(x) for k, x in v.items()}

    def _build_typeddict(self, h: type) -> tuple[dict[str, Any], _Conv | None]:
        try:
            hints = typing.get_type_hints(h, include_extras=True)
        except (NameError, SyntaxError) as e:
            raise _Unsupported(f"a hint of {h.__name__} cannot be resolved ({e})") from None
        props: dict[str, Any] = {}
        convs: dict[str, _Conv] = {}
        for k, v in hints.items():
            _check_key(k, h)
            props[k], c = self._build(v)
            if c is not None:
                convs[k] = c
        schema: dict[str, Any] = {"type": "object", "properties": props}
        req = [k for k in hints if k in getattr(h, "__required_keys__", set(hints))]
        if req:
            schema["required"] = req
        schema["additionalProperties"] = False
        if not convs:
            return schema, None
        return schema, lambda v: {k: (convs[k](x) if k in convs else x) for k, x in v.items()}

    def _build_dataclass(self, h: type) -> tuple[dict[str, Any], _Conv | None]:
        try:
            hints = typing.get_type_hints(h, include_extras=True)
        except (NameError, SyntaxError) as e:
            raise _Unsupported(f"a hint of {h.__name__} cannot be resolved ({e})") from None
        props: dict[str, Any] = {}
        convs: dict[str, _Conv] = {}
        req: list[str] = []
        for f in dataclasses.fields(h):
            if not f.init:
                continue
            _check_key(f.name, h)
            prop, c = self._build(hints.get(f.name, _EMPTY))
            if c is not None:
                convs[f.name] = c
            if f.default is not dataclasses.MISSING:
                try:
                    prop["default"] = _json_value(f.default)
                except _NotJSON:
                    pass  # not published; the host fills it in
            elif f.default_factory is dataclasses.MISSING:
                req.append(f.name)
            props[f.name] = prop
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if req:
            schema["required"] = req
        schema["additionalProperties"] = False

        def conv(v: Any) -> Any:
            if isinstance(v, h) or not isinstance(v, dict):
                return v
            return h(**{k: (convs[k](x) if k in convs else x) for k, x in v.items()})

        return schema, conv

    def _fallback(self, h: Any) -> tuple[dict[str, Any], _Conv | None]:
        """Any other type: pydantic's schema for it, when pydantic is installed."""
        try:
            import pydantic
        except ImportError:
            raise _Unsupported(
                f"no JSON Schema is known for {_hint_text(h)}; pass input_schema="
            ) from None
        try:
            adapter = pydantic.TypeAdapter(h)
            schema = adapter.json_schema()
        except Exception as e:  # pydantic's schema errors have several types
            raise _Unsupported(
                f"no JSON Schema is known for {_hint_text(h)} ({type(e).__name__}); "
                "pass input_schema="
            ) from None
        return self._lift(schema), _adapter_converter(adapter)


class _Unsupported(Exception):
    pass


def _check_key(k: str, owner: type) -> None:
    if not isinstance(k, str):
        raise _Unsupported(f"{owner.__name__} has a field name that is not a str")


def _converter_or_none(builder: _SchemaBuilder, hint: Any) -> _Conv | None:
    """The converter for a hint when the schema is given: best effort, never refuses."""
    try:
        return builder.build(hint, where="")[1]
    except (TypeError, ValueError):
        return None


def _tuple_of(conv: _Conv | None) -> _Conv:
    if conv is None:
        return tuple
    return lambda v: tuple(conv(x) for x in v)


def _fixed_tuple(convs: list[_Conv | None]) -> _Conv:
    if all(c is None for c in convs):
        return tuple
    return lambda v: tuple(c(x) if c else x for c, x in zip(convs, v, strict=False))


def _union_converter(
    h: Any, args: tuple[Any, ...], parts: list[tuple[dict[str, Any], _Conv | None]]
) -> _Conv | None:
    convs = [c for _, c in parts]
    if all(c is None for c in convs):
        return None
    non_none = [
        (a, c)
        for a, (_, c) in zip(args, parts, strict=True)
        if a is not _NONE_TYPE and a is not None
    ]
    if len(non_none) == 1:
        conv = non_none[0][1]
        if conv is not None:
            return lambda v: None if v is None else conv(v)
    try:  # several types: let pydantic pick, when it is installed
        import pydantic

        return _adapter_converter(pydantic.TypeAdapter(h))
    except Exception:
        return None


def _model_converter(model: Any) -> _Conv:
    def conv(v: Any) -> Any:
        if isinstance(v, model):
            return v
        try:
            return model.model_validate(v)
        except Exception as e:
            raise ToolError(_validation_message(e)) from None

    return conv


def _adapter_converter(adapter: Any) -> _Conv:
    def conv(v: Any) -> Any:
        try:
            return adapter.validate_python(v)
        except Exception as e:
            raise ToolError(_validation_message(e)) from None

    return conv


def _validation_message(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False)
            return "invalid arguments: " + "; ".join(
                ".".join(str(x) for x in item.get("loc", ())) + ": " + str(item.get("msg"))
                for item in items
            )
        except Exception:  # pragma: no cover - defensive
            pass
    return f"invalid arguments: {type(e).__name__}"


def _to_json(value: Any) -> Any:
    """A result with dataclasses, pydantic models, enums, tuples or sets, as plain JSON values."""
    if value is None or isinstance(value, (bool, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return _to_json(value.value)
    if isinstance(value, (str, int, float)):
        return value
    bm: Any = _pydantic_base_model()
    if bm is not None and isinstance(value, bm):
        return typing.cast(Any, value).model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_to_json(v) for v in value]
    core = sys.modules.get("pydantic_core")
    if core is not None:
        try:
            return core.to_jsonable_python(value)
        except Exception:
            return value
    return value


def _annotated_description(h: Any) -> str | None:
    """The description an ``Annotated[X, "text"]`` or ``Annotated[X, Field(description=...)]``
    hint gives, at its top level."""
    if typing.get_origin(h) is not typing.Annotated:
        return None
    for m in h.__metadata__:
        if isinstance(m, str) and m.strip():
            return m.strip()
        desc = getattr(m, "description", None)
        if _field_info(m) is not None and isinstance(desc, str) and desc.strip():
            return desc.strip()
    return None


def _unwrap_awaitable(h: Any) -> Any:
    origin = typing.get_origin(h)
    if origin in (collections.abc.Awaitable, collections.abc.Coroutine):
        args = typing.get_args(h)
        return args[-1] if args else _EMPTY
    return h


# --------------------------------------------------------------------------------------------
# Annotation texts

_ORIGIN_NAMES = {
    list: "list",
    dict: "dict",
    tuple: "tuple",
    set: "set",
    frozenset: "frozenset",
    type: "type",
}


def _hint_text(h: Any) -> str | None:
    """The annotation as the guest shows it, such as ``dict[str, int] | None``; None if absent."""
    if h is _EMPTY:
        return None
    return _text(h)


def _text(h: Any) -> str:
    if h is None or h is _NONE_TYPE:
        return "None"
    if h is Any:
        return "Any"
    if h is Ellipsis:
        return "..."
    origin = typing.get_origin(h)
    args = typing.get_args(h)
    if origin is typing.Annotated:
        return _text(args[0])
    if origin is not None and origin in _WRAPPERS:
        return _text(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_text(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(_literal_text(v) for v in args) + "]"
    if isinstance(h, list):  # the argument list of Callable[[...], R]
        return "[" + ", ".join(_text(a) for a in h) + "]"
    if origin is not None:
        name = _ORIGIN_NAMES.get(origin) or getattr(origin, "__name__", None) or _text(origin)
        if origin is tuple and not args:
            return "tuple[()]"
        if not args:
            return name
        return f"{name}[{', '.join(_text(a) for a in args)}]"
    if isinstance(h, typing.ForwardRef):
        return h.__forward_arg__
    if isinstance(h, str):
        return h
    if isinstance(h, (type, typing.TypeVar, typing.NewType)):
        return h.__name__
    name = getattr(h, "__name__", None)
    if isinstance(name, str) and name.isidentifier():
        return name
    return repr(h).replace("typing.", "")


def _literal_text(v: Any) -> str:
    if isinstance(v, enum.Enum):
        return f"{type(v).__name__}.{v.name}"
    return repr(v)


def _schema_text(s: Any, depth: int = 0) -> str:
    """An annotation text derived from a JSON Schema (the guest's own mapping, ABI 6.5)."""
    if not isinstance(s, dict) or depth > 8:
        return "Any"
    if (
        isinstance(s.get("enum"), list)
        and s["enum"]
        and all(v is None or isinstance(v, (str, int, float, bool)) for v in s["enum"])
    ):
        return "Literal[" + ", ".join(repr(v) for v in s["enum"]) + "]"
    if "const" in s and (s["const"] is None or isinstance(s["const"], (str, int, float, bool))):
        return f"Literal[{s['const']!r}]"
    for key in ("anyOf", "oneOf"):
        if isinstance(s.get(key), list) and s[key]:
            return " | ".join(_schema_text(x, depth + 1) for x in s[key])
    t = s.get("type")
    if isinstance(t, list) and t:
        return " | ".join(_schema_text({**s, "type": x}, depth + 1) for x in t)
    if t == "string":
        return "bytes" if s.get("contentEncoding") == "base64" else "str"
    simple = {"integer": "int", "number": "float", "boolean": "bool", "null": "None"}
    if t in simple:
        return simple[t]
    if t == "array":
        return f"list[{_schema_text(s['items'], depth + 1)}]" if "items" in s else "list"
    if t == "object":
        extra = s.get("additionalProperties")
        if "properties" not in s and isinstance(extra, dict):
            return f"dict[str, {_schema_text(extra, depth + 1)}]"
        return "dict"
    return "Any"


# --------------------------------------------------------------------------------------------
# Docstrings

_ARGS_HEADING = re.compile(
    r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)"
    r"\s*:\s*$"
)
_HEADING = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns?|Yields?|Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Warns|Todo|"
    r"References|Methods)\s*:\s*$"
)
_MD_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_UNDERLINE = re.compile(r"^\s*(-{3,}|={3,})\s*$")
_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")


def _description_of(doc: str) -> str:
    """The docstring up to its first heading (a Google-style section or a Markdown heading)."""
    lines = doc.splitlines()
    end = len(lines)
    for i, line in enumerate(lines):
        if _HEADING.match(line) or _MD_HEADING.match(line):
            end = i
            break
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and _UNDERLINE.match(nxt):
            end = i
            break
    return "\n".join(lines[:end]).strip()


def _parse_args_section(
    doc: str,
) -> tuple[dict[str, tuple[str, int, int]], list[str]]:
    """The ``Args:`` entries: name -> (description, first line, end line), and the lines."""
    lines = doc.splitlines()
    entries: dict[str, tuple[str, int, int]] = {}
    i = 0
    while i < len(lines):
        m = _ARGS_HEADING.match(lines[i])
        if not m:
            i += 1
            continue
        head = len(m.group(1))
        i += 1
        entry_indent: int | None = None
        current: str | None = None
        parts: list[str] = []
        start = end = 0
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= head:
                break
            if entry_indent is None:
                entry_indent = indent
            if indent <= entry_indent:
                if current is not None:
                    entries.setdefault(current, (" ".join(parts), start, end))
                em = _ENTRY.match(line.strip())
                current = em.group(1) if em else None
                parts = [em.group(2).strip()] if em and em.group(2) else []
                start, end = i, i + 1
            elif current is not None:
                parts.append(line.strip())
                end = i + 1
            i += 1
        if current is not None:
            entries.setdefault(current, (" ".join(parts), start, end))
    return entries, lines


def _drop_doc_entries(
    lines: list[str], entries: dict[str, tuple[str, int, int]], drop: set[str]
) -> str:
    """The docstring without the ``Args:`` entries of parameters the guest does not see."""
    gone: set[int] = set()
    for name in drop:
        if name in entries:
            _, start, end = entries[name]
            gone.update(range(start, end))
    if not gone:
        return "\n".join(lines).strip()
    kept = [line for i, line in enumerate(lines) if i not in gone]
    # Drop an Args heading left with no entries under it.
    out: list[str] = []
    for j, line in enumerate(kept):
        m = _ARGS_HEADING.match(line)
        if m:
            head = len(m.group(1))
            rest = kept[j + 1 :]
            body = []
            for ln in rest:
                if ln.strip() and len(ln) - len(ln.lstrip()) <= head:
                    break
                body.append(ln)
            if not any(ln.strip() for ln in body):
                continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)
    return text.strip()


def _generated_doc(description: str, schema: dict[str, Any]) -> str:
    """A docstring made from a description and the schema (the guest's own format, ABI 6.5)."""
    doc = description.strip()
    props = schema.get("properties")
    described = isinstance(props, dict) and any(
        isinstance(p, dict) and p.get("description") for p in props.values()
    )
    if isinstance(props, dict) and props and (doc or described):
        lines = []
        for k, prop in props.items():
            desc = prop.get("description") if isinstance(prop, dict) else None
            lines.append(f"    {k}: {desc}" if isinstance(desc, str) and desc else f"    {k}")
        doc = (doc + "\n\n" if doc else "") + "Args:\n" + "\n".join(lines)
    return doc


# --------------------------------------------------------------------------------------------
# The callable the runner invokes


def _invoker(
    target: Any,
    is_async: bool,
    *,
    posonly: list[_Param],
    converters: dict[str, _Conv],
    kw_conv: _Conv | None,
    named: set[str],
    fills: dict[str, Callable[[], Any]],
    result_conv: _Conv | None,
    label: str,
) -> Callable[..., Any]:
    """`Tool.fn`: the target itself, or an adapter when arguments need work first."""
    if not (posonly or converters or kw_conv or fills or result_conv):
        return target
    pos_names = [p.name for p in posonly]
    pos_defaults = {p.name: p.py_default for p in posonly}

    def prepare(kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        for k, conv in converters.items():
            if k in kwargs:
                kwargs[k] = conv(kwargs[k])
        if kw_conv is not None:
            for k in kwargs:
                if k not in named:
                    kwargs[k] = kw_conv(kwargs[k])
        for k, fill in fills.items():
            if k not in kwargs and k not in pos_names:
                kwargs[k] = fill()
        args: list[Any] = []
        if pos_names:
            last = max((i for i, k in enumerate(pos_names) if k in kwargs), default=-1)
            for k in pos_names[: last + 1]:
                if k in kwargs:
                    args.append(kwargs.pop(k))
                elif k in fills:
                    args.append(fills[k]())
                else:
                    args.append(pos_defaults[k])
        return args, kwargs

    if is_async:

        async def invoke_async(**kwargs: Any) -> Any:
            args, kw = prepare(kwargs)
            result = await target(*args, **kw)
            return result_conv(result) if result_conv is not None else result

        invoke_async.__wrapped__ = target  # type: ignore[attr-defined]
        invoke_async.__qualname__ = invoke_async.__name__ = f"invoke[{label}]"
        return invoke_async

    def invoke(**kwargs: Any) -> Any:
        args, kw = prepare(kwargs)
        result = target(*args, **kw)
        if result_conv is None:
            return result
        if inspect.isawaitable(result):
            return _convert_later(result, result_conv)
        return result_conv(result)

    invoke.__wrapped__ = target  # type: ignore[attr-defined]
    invoke.__qualname__ = invoke.__name__ = f"invoke[{label}]"
    return invoke


async def _convert_later(awaitable: Any, conv: _Conv) -> Any:
    return conv(await awaitable)


# --------------------------------------------------------------------------------------------
# Stubs


def stubs(tools: Iterable[Any]) -> str:
    """The tools as Python stub source, as the guest sees them, for a prompt."""
    return "".join(("\n\n" if i else "") + _stub(t) + "\n" for i, t in enumerate(_as_tools(tools)))


def _stub(t: Tool) -> str:
    parts: list[str] = []
    params = t._params
    seen_kw_only = False
    for j, p in enumerate(params):
        if p.kind == "keyword_only" and not seen_kw_only:
            parts.append("*")
            seen_kw_only = True
        ann = _stub_annotation(p.text)
        if p.kind == "var_keyword":
            parts.append(f"**{p.name}{': ' + ann if ann else ''}")
            continue
        text = p.name + (f": {ann}" if ann else "")
        if p.optional:
            value = _py_literal(p.default) if p.default is not _EMPTY else "..."
            text += f" = {value}" if ann else f"={value}"
        parts.append(text)
        if p.kind == "positional_only" and (
            j + 1 == len(params) or params[j + 1].kind != "positional_only"
        ):
            parts.append("/")
    ret = _stub_annotation(t._returns)
    head = f"def {t.name}({', '.join(parts)})" + (f" -> {ret}" if ret else "") + ":"
    lines = [head]
    if t.doc:
        lines.append(_docstring_literal(t.doc, "    "))
    lines.append("    ...")
    return "\n".join(lines)


def _stub_annotation(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        compile(text, "<annotation>", "eval")
    except SyntaxError:
        return repr(text)
    return text


def _py_literal(v: Any) -> str:
    if isinstance(v, dict):
        if set(v) == {"$bytes"} and isinstance(v["$bytes"], str):
            try:
                return repr(base64.b64decode(v["$bytes"], validate=True))
            except ValueError:
                pass
        return "{" + ", ".join(f"{k!r}: {_py_literal(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_py_literal(x) for x in v) + "]"
    return repr(v)


def _docstring_literal(doc: str, indent: str) -> str:
    body = doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if body.endswith('"'):
        body = body[:-1] + '\\"'
    lines = body.split("\n")
    if len(lines) == 1:
        return f'{indent}"""{body}"""'
    out = [f'{indent}"""{lines[0]}']
    out += [(indent + line) if line.strip() else "" for line in lines[1:]]
    out.append(f'{indent}"""')
    return "\n".join(out)
