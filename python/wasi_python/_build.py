"""Building a tool: what `tool()` reads of a callable (signature, partials, hints, defaults,
docstring) or takes from ``input_schema=``, and what it makes of them: the published
parameters, the input and output schemas, the descriptor, and `Tool.fn`, the callable the
runner invokes with the validated JSON arguments.

`make` returns the fields of a `Tool`; the facade (`_tools`) builds the object.

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

import copy
import inspect
import json
import keyword
import numbers
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._docstrings import description_of, generated_doc, param_docs
from ._hints import (
    Conv,
    SchemaBuilder,
    annotated_description,
    converter_or_none,
    hint_text,
    schema_text,
    unwrap_awaitable,
)
from ._json import NotJSON, field_info, json_to_python, json_value, to_json, type_name
from ._types import MAX_SECONDS, show_number

__all__ = ["Param", "check_schema", "make"]

_EMPTY = inspect.Parameter.empty
_NONE_TYPE = type(None)
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def check_schema(schema: dict[str, Any], validates_input: bool) -> None:
    """Check an input schema with the runtime's checker (crates/schema), when it is built.

    Without the compiled extension this does nothing.
    """
    try:
        from wasi_python._wasi_python import check_schema as check  # type: ignore[attr-defined]
    except ImportError:
        return
    check(json.dumps(schema, ensure_ascii=False), validates_input)


@dataclass(slots=True)
class Param:
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


def make(target: Any, options: dict[str, Any], unwrapped: tuple[Any, int, list[str]]) -> dict[str, Any]:
    """The fields of the Tool for ``target`` with `tool()`'s ``options``. ``unwrapped`` is
    ``target`` with its partials (and Tools) flattened: the base callable, the count of
    positional arguments they bind, and the keywords they bind."""
    if not callable(target):
        raise TypeError(f"tool() takes a callable, not {type_name(target)}")
    name_opt = options["name"]
    if name_opt is not None and not isinstance(name_opt, str):
        raise TypeError(f"tool name= must be a str, not {type_name(name_opt)}")
    desc_opt = options["description"]
    if desc_opt is not None and not isinstance(desc_opt, str):
        raise TypeError(f"tool description= must be a str, not {type_name(desc_opt)}")
    timeout = _check_timeout(options["timeout_s"])
    for flag in ("read_only", "destructive", "idempotent", "open_world", "validates_input"):
        if type(options[flag]) is not bool:
            raise TypeError(f"tool {flag}= must be a bool (True or False), not {type_name(options[flag])}")

    base, n_bound, fixed_names = unwrapped
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
    docs = param_docs(raw_doc)
    arg_docs = docs.descriptions

    builder = SchemaBuilder(label)
    converters: dict[str, Callable[[Any], Any]] = {}
    fills: dict[str, Callable[[], Any]] = {}
    params: list[Param] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in sig_params:
        _check_property_name(p.name, label)
        hint = hints.get(p.name, _EMPTY) if p.annotation is not _EMPTY else _EMPTY
        entry = Param(p.name, _KINDS[p.kind], hint, hint_text(hint))
        default = p.default
        field_desc = None
        field = field_info(default)
        if field is not None:
            field_desc = field.description
            default, fill = _field_default(field)
            if fill is not None:
                fills[p.name] = fill
        if given_schema is None:
            prop, conv = builder.build(hint, where=f"parameter {p.name!r}")
            if conv is not None:
                converters[p.name] = conv
            desc = annotated_description(hint) or field_desc or arg_docs.get(p.name)
            if desc:
                prop["description"] = desc
        else:
            prop, conv = None, converter_or_none(builder, hint)
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
        var_entry = Param(var_kw.name, "var_keyword", kw_hint, hint_text(kw_hint))
        if given_schema is None:
            extra, kw_conv = builder.build(kw_hint, where=f"parameter **{var_kw.name}")
            extra = extra or True
        else:
            kw_conv = converter_or_none(builder, kw_hint)

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
            var_entry = Param("kwargs", "var_keyword")
    params = _fix_order(params)

    # The return.
    ret_hint = _EMPTY
    if sig is not None and sig.return_annotation is not _EMPTY:
        ret_hint = unwrap_awaitable(hints.get("return", _EMPTY))
    output_schema = None
    result_conv = None
    if ret_hint is not _EMPTY and ret_hint is not None and ret_hint is not _NONE_TYPE:
        try:
            out_builder = SchemaBuilder(label)
            out, result_conv = out_builder.build(ret_hint, where="the return annotation")
            if out_builder.defs:
                out["$defs"] = out_builder.defs
            output_schema = out or None
        except (TypeError, ValueError):
            output_schema, result_conv = None, None
        if result_conv is not None:
            result_conv = to_json
    returns_text = hint_text(ret_hint)

    # Description and the published docstring.
    all_params = params + ([var_entry] if var_entry is not None else [])
    description = desc_opt if desc_opt is not None else description_of(raw_doc)
    if desc_opt is None and raw_doc:
        doc = docs.without(drop_doc)
    else:
        doc = generated_doc(description, root)

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

    check_schema(input_schema, bool(options["validates_input"]))

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
    return dict(
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
    )


def _check_timeout(t: Any) -> float | None:
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"timeout_s must be a number of seconds, not {type_name(t)}")
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
            f"not {type_name(given)}"
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
    sig_params: list[Param],
    has_var_kw: bool,
    label: str,
) -> list[Param]:
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
                    text = schema_text(prop)
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
    out: list[Param] = []
    for group in (True, False):
        for k, prop in props.items():
            if (k in req) != group:
                continue
            p = Param(k, "positional_or_keyword", text=schema_text(prop))
            if not group:
                p.optional = True
                if isinstance(prop, dict) and "default" in prop:
                    p.default = copy.deepcopy(prop["default"])
                    p.py_default = json_to_python(p.default)
                else:
                    p.py_default = ...
            out.append(p)
    return out


def _fix_order(params: list[Param]) -> list[Param]:
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
    params: list[Param], ret_hint: Any, returns_text: str | None
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


def _field_default(field: Any) -> tuple[Any, Callable[[], Any] | None]:
    """A pydantic Field used as a parameter default: (default or _EMPTY, a filler or None)."""
    if field.default_factory is not None:
        factory = field.default_factory
        return _EMPTY, factory
    default = field.default
    if type(default).__name__ == "PydanticUndefinedType" or default is Ellipsis:
        return _EMPTY, None
    return default, (lambda: default)


def _json_default(v: Any, label: str, pname: str) -> Any:
    try:
        return json_value(v)
    except NotJSON as e:
        raise TypeError(
            f"{label}: the default of parameter {pname!r} is not JSON ({e}). A default is "
            "published to the guest in the schema; bind a value the guest must not see or "
            "send with functools.partial instead"
        ) from None


def _json_default_or_empty(v: Any) -> Any:
    try:
        return json_value(v)
    except NotJSON:
        return _EMPTY


# --------------------------------------------------------------------------------------------
# The callable the runner invokes


def _invoker(
    target: Any,
    is_async: bool,
    *,
    posonly: list[Param],
    converters: dict[str, Conv],
    kw_conv: Conv | None,
    named: set[str],
    fills: dict[str, Callable[[], Any]],
    result_conv: Conv | None,
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


async def _convert_later(awaitable: Any, conv: Conv) -> Any:
    return conv(await awaitable)
