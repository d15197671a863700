"""Type hints -> JSON Schema, the converter from a call's JSON back to the hinted type, and
the annotation texts the guest shows (``dict[str, int] | None``).

A hint this module knows (scalars, containers, unions, Literal, enums, TypedDicts,
dataclasses, pydantic models) gets its schema here; any other goes to pydantic's
``TypeAdapter`` when pydantic is installed, and is refused otherwise.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from ._errors import ToolError
from ._json import NotJSON, field_info, is_pydantic_model, json_value

__all__ = [
    "Conv",
    "SchemaBuilder",
    "annotated_description",
    "converter_or_none",
    "hint_text",
    "schema_text",
    "unwrap_awaitable",
]

_EMPTY = inspect.Parameter.empty
_NONE_TYPE = type(None)


Conv = Callable[[Any], Any]
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


class SchemaBuilder:
    """Builds JSON Schemas for hints; collects lifted pydantic ``$defs``."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.defs: dict[str, Any] = {}
        self._stack: list[Any] = []

    def build(self, hint: Any, where: str) -> tuple[dict[str, Any], Conv | None]:
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

    def _build(self, h: Any) -> tuple[dict[str, Any], Conv | None]:
        if h is _EMPTY or h is Any or h is object:
            return {}, None
        if h is None or h is _NONE_TYPE:
            return {"type": "null"}, None
        origin = typing.get_origin(h)
        args = typing.get_args(h)
        if origin is typing.Annotated:
            schema, conv = self._build(args[0])
            desc = annotated_description(h)
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
                    value = json_value(v)
                except NotJSON as e:
                    raise _Unsupported(f"Literal value {v!r} is not JSON ({e})") from None
                if isinstance(value, (dict, list)):
                    raise _Unsupported(f"Literal value {v!r} is not a JSON scalar")
                values.append(value)
            conv = None
            if any(isinstance(v, enum.Enum) for v in args):
                members = {json_value(v): v for v in args if isinstance(v, enum.Enum)}
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

    def _build_class(self, h: type) -> tuple[dict[str, Any], Conv | None]:
        if issubclass(h, enum.Enum):
            try:
                values = [json_value(m.value) for m in h]
            except NotJSON as e:
                raise _Unsupported(f"the values of {h.__name__} are not JSON ({e})") from None
            return {"enum": values}, h
        if h in _SCALARS:
            return dict(_SCALARS[h]), (bytearray if h is bytearray else None)
        if is_pydantic_model(h):
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
    ) -> tuple[dict[str, Any], Conv | None]:
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

    def _build_mapping(self, args: tuple[Any, ...]) -> tuple[dict[str, Any], Conv | None]:
        schema: dict[str, Any] = {"type": "object"}
        if not args:
            return schema, None
        key, value = args
        key_base = typing.get_args(key)[0] if typing.get_origin(key) is typing.Annotated else key
        if key_base is not str and key_base is not Any:
            raise _Unsupported(f"a JSON object's keys are strings, not {hint_text(key)}")
        item, conv = self._build(value)
        if item:
            schema["additionalProperties"] = item
        if conv is None:
            return schema, None
        return schema, lambda v: {k: conv(x) for k, x in v.items()}

    def _build_typeddict(self, h: type) -> tuple[dict[str, Any], Conv | None]:
        hints = _field_hints(h)
        props: dict[str, Any] = {}
        convs: dict[str, Conv] = {}
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

    def _build_dataclass(self, h: type) -> tuple[dict[str, Any], Conv | None]:
        hints = _field_hints(h)
        props: dict[str, Any] = {}
        convs: dict[str, Conv] = {}
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
                    prop["default"] = json_value(f.default)
                except NotJSON:
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

    def _fallback(self, h: Any) -> tuple[dict[str, Any], Conv | None]:
        """Any other type: pydantic's schema for it, when pydantic is installed."""
        try:
            import pydantic
        except ImportError:
            raise _Unsupported(
                f"no JSON Schema is known for {hint_text(h)}; pass input_schema="
            ) from None
        try:
            adapter = pydantic.TypeAdapter(h)
            schema = adapter.json_schema()
        except Exception as e:  # pydantic's schema errors have several types
            raise _Unsupported(
                f"no JSON Schema is known for {hint_text(h)} ({type(e).__name__}); "
                "pass input_schema="
            ) from None
        return self._lift(schema), _adapter_converter(adapter)


class _Unsupported(Exception):
    pass


def _field_hints(h: type) -> dict[str, Any]:
    """The resolved hints of a TypedDict's or a dataclass's fields."""
    try:
        return typing.get_type_hints(h, include_extras=True)
    except (NameError, SyntaxError) as e:
        raise _Unsupported(f"a hint of {h.__name__} cannot be resolved ({e})") from None


def _check_key(k: str, owner: type) -> None:
    if not isinstance(k, str):
        raise _Unsupported(f"{owner.__name__} has a field name that is not a str")


def converter_or_none(builder: SchemaBuilder, hint: Any) -> Conv | None:
    """The converter for a hint when the schema is given: best effort, never refuses."""
    try:
        return builder.build(hint, where="")[1]
    except (TypeError, ValueError):
        return None


def _tuple_of(conv: Conv | None) -> Conv:
    if conv is None:
        return tuple
    return lambda v: tuple(conv(x) for x in v)


def _fixed_tuple(convs: list[Conv | None]) -> Conv:
    if all(c is None for c in convs):
        return tuple
    return lambda v: tuple(c(x) if c else x for c, x in zip(convs, v, strict=False))


def _union_converter(
    h: Any, args: tuple[Any, ...], parts: list[tuple[dict[str, Any], Conv | None]]
) -> Conv | None:
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


def _model_converter(model: Any) -> Conv:
    return _validating(model.model_validate, model)


def _adapter_converter(adapter: Any) -> Conv:
    return _validating(adapter.validate_python)


def _validating(validate: Callable[[Any], Any], model: type | None = None) -> Conv:
    """A converter through a pydantic validation (an instance of ``model`` passes as it is);
    a value it refuses fails the call with a ToolError the guest reads."""

    def conv(v: Any) -> Any:
        if model is not None and isinstance(v, model):
            return v
        try:
            return validate(v)
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


def annotated_description(h: Any) -> str | None:
    """The description an ``Annotated[X, "text"]`` or ``Annotated[X, Field(description=...)]``
    hint gives, at its top level."""
    if typing.get_origin(h) is not typing.Annotated:
        return None
    for m in h.__metadata__:
        if isinstance(m, str) and m.strip():
            return m.strip()
        desc = getattr(m, "description", None)
        if field_info(m) is not None and isinstance(desc, str) and desc.strip():
            return desc.strip()
    return None


def unwrap_awaitable(h: Any) -> Any:
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


def hint_text(h: Any) -> str | None:
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


def schema_text(s: Any, depth: int = 0) -> str:
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
            return " | ".join(schema_text(x, depth + 1) for x in s[key])
    t = s.get("type")
    if isinstance(t, list) and t:
        return " | ".join(schema_text({**s, "type": x}, depth + 1) for x in t)
    if t == "string":
        return "bytes" if s.get("contentEncoding") == "base64" else "str"
    simple = {"integer": "int", "number": "float", "boolean": "bool", "null": "None"}
    if t in simple:
        return simple[t]
    if t == "array":
        return f"list[{schema_text(s['items'], depth + 1)}]" if "items" in s else "list"
    if t == "object":
        extra = s.get("additionalProperties")
        if "properties" not in s and isinstance(extra, dict):
            return f"dict[str, {schema_text(extra, depth + 1)}]"
        return "dict"
    return "Any"
