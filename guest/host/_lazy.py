"""The parts of host.tools that most runs never need, imported on first use.

- signatures for help() and inspect (this is where inspect gets imported);
- the signature and docstring protocol 1 derives from a descriptor's schemas,
  for a host whose descriptors carry no "_meta": {"python": ...};
- the wording of refused calls, and numbers that are not int or float.

Keeping them out of host.tools keeps `from host import tools` cheap: the guest
compiles less, and imports neither inspect nor numbers.
"""

from host import ToolArgumentError as _ArgumentError
from host.tools import (
    _NOT_SENT,
    _POSITIONAL_ONLY,
    _POSITIONAL_OR_KEYWORD,
    _REQUIRED,
    _VAR_KEYWORD,
    _copy,
    _param_name,
    _Refused,
    _unbytes,
)

# ------------------------------------------------------------------ values


def other_number(v):
    """An int or float for a number of another type, or _Refused with a hint."""
    import numbers

    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    name = type(v).__name__
    for method in ("tolist", "to_dict"):
        if _has_method(v, method):
            raise _Refused(
                f"is of type {name}, which does not cross; call .{method}() first"
            )
    raise _Refused(
        f"is of type {name}, which does not cross; "
        "pass None, bool, int, float, str, bytes, list, tuple or dict"
    )


def _has_method(v, name):
    try:
        return callable(getattr(v, name, None))
    except Exception:
        return False


def surrogate_error(tool, arguments):
    """The ToolArgumentError for arguments whose text is not valid Unicode."""
    for name, value in arguments.items():
        where = _surrogate(name)
        if where is None:
            where = _surrogate(value)
        if where is not None:
            return _ArgumentError(
                f"{tool.name}(): argument {name!r}{where} holds a lone surrogate; "
                "only valid Unicode crosses"
            )
    return _ArgumentError(f"{tool.name}(): the arguments hold a lone surrogate")


def _surrogate(value):
    """Where a lone surrogate sits in `value` ('' for `value` itself), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return ""
        return None
    if isinstance(value, dict):
        for k, x in value.items():
            if _surrogate(k) is not None:
                return f" (the key {k!r})"
            where = _surrogate(x)
            if where is not None:
                return f"[{k!r}]{where}"
    elif isinstance(value, list):
        for i, x in enumerate(value):
            where = _surrogate(x)
            if where is not None:
                return f"[{i}]{where}"
    return None


def bind_error(tool, args, kwargs):
    """The ToolArgumentError for a call that does not fit, worded as Signature.bind."""

    def error(message):
        return _ArgumentError(f"{tool.name}(): {message}")

    if len(args) > len(tool.positional):
        return error("too many positional arguments")
    if "$bytes" in kwargs:
        return error(
            "got the keyword argument '$bytes', which the protocol keeps for bytes"
        )
    taken = tool.positional[: len(args)]
    for name, kind, _, default in tool.params:
        if name in taken:
            if name in kwargs:
                if kind != _POSITIONAL_ONLY:
                    return error(f"multiple values for argument {name!r}")
                # Python would put the keyword in **kwargs; the call sends every
                # argument by name, so it cannot carry both.
                return error(
                    f"got {name!r} both as a positional-only argument and as a "
                    "keyword; a tool call cannot carry both"
                )
        elif kind == _VAR_KEYWORD:
            continue
        elif name in kwargs:
            if kind == _POSITIONAL_ONLY:
                passed = "but was passed as a keyword"
                return error(f"{name!r} parameter is positional only, {passed}")
        elif default is _REQUIRED:
            return error(f"missing a required argument: {name!r}")
    for name in kwargs:
        if tool.keywords is not None and name not in tool.keywords:
            return error(f"got an unexpected keyword argument {name!r}")
    return error("the arguments do not fit the signature")


# -------------------------------------------------- signature from schemas

_KWARGS = [("kwargs", _VAR_KEYWORD, None, _REQUIRED)]


def from_schema(descriptor):
    """(params, returns, doc) as protocol 1 derives them from the schemas.

    A parameter's annotation is its property schema here, and `returns` the output
    schema (copies: the descriptor stays the tool function's own); signature() turns
    them into text. Parameters: the required properties, then the optional ones,
    all positional-or-keyword; (**kwargs) when the input schema is not usable."""
    description = descriptor.get("description")
    doc = description.strip() if type(description) is str else ""
    returns = _copy(descriptor.get("outputSchema"))
    schema = descriptor.get("inputSchema")
    if type(schema) is not dict:
        return _KWARGS, returns, doc
    props, required = schema.get("properties", {}), schema.get("required", [])
    if type(props) is not dict or type(required) is not list:
        return _KWARGS, returns, doc
    if props:
        lines = ["Args:"]
        for name, prop in props.items():
            text = prop.get("description") if type(prop) is dict else None
            text = text.strip() if type(text) is str else ""
            lines.append(f"    {name}: {text}" if text else f"    {name}")
        doc = "\n".join([doc, ""] + lines if doc else lines)
    if not all(_param_name(name) for name in props):
        return _KWARGS, returns, doc  # names Python cannot spell: pass them as **kwargs
    required = {r for r in required if type(r) is str}
    params = []
    for name, prop in props.items():
        if name in required:
            params.append((name, _POSITIONAL_OR_KEYWORD, _copy(prop), _REQUIRED))
    for name, prop in props.items():
        if name not in required:
            has_default = type(prop) is dict and "default" in prop
            default = _copy(prop["default"]) if has_default else _NOT_SENT
            params.append((name, _POSITIONAL_OR_KEYWORD, _copy(prop), default))
    return params, returns, doc


_SIMPLE = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


def schema_text(schema, depth=0):
    """The annotation text protocol 1 derives from a JSON schema ("Any" when unsure)."""
    if type(schema) is not dict or depth > 8:
        return "Any"
    enum = schema.get("enum")
    if type(enum) is list and enum and all(_json_scalar(x) for x in enum):
        return f"Literal[{', '.join(map(repr, enum))}]"
    if "const" in schema and _json_scalar(schema["const"]):
        return f"Literal[{schema['const']!r}]"
    for key in ("anyOf", "oneOf"):
        alternatives = schema.get(key)
        if type(alternatives) is list and alternatives:
            return _union(schema_text(a, depth + 1) for a in alternatives)
    kind = schema.get("type")
    if type(kind) is list and kind:
        return _union(_type_text(schema, k, depth) for k in kind)
    return _type_text(schema, kind, depth)


def _type_text(schema, kind, depth):
    if kind == "string":
        return "bytes" if schema.get("contentEncoding") == "base64" else "str"
    if kind == "array":
        items = schema.get("items")
        return (
            f"list[{schema_text(items, depth + 1)}]" if type(items) is dict else "Any"
        )
    if kind == "object":
        values = schema.get("additionalProperties")
        if type(values) is dict and "properties" not in schema:
            return f"dict[str, {schema_text(values, depth + 1)}]"
        return "Any"
    return _SIMPLE.get(kind, "Any") if type(kind) is str else "Any"


def _union(texts):
    return " | ".join(dict.fromkeys(texts))


def _json_scalar(x):
    return x is None or type(x) in (str, int, float, bool)


# ------------------------------------------------------------- signatures


class Shown:
    """An annotation or default that inspect and pydoc print as its text, unquoted."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


NOT_SENT = Shown("...")  # the default of an optional parameter with none published


def signature(tool):
    """The inspect.Signature of `tool` (a host.tools._Tool)."""
    import inspect

    parameter = inspect.Parameter
    kinds = (
        parameter.POSITIONAL_ONLY,
        parameter.POSITIONAL_OR_KEYWORD,
        parameter.KEYWORD_ONLY,
    )
    params = []
    for name, kind, annotation, default in tool.params:
        if kind == _VAR_KEYWORD:
            text = annotation if tool.from_meta else None
            empty = parameter.empty
            shown = empty if text is None else Shown(text)
            params.append(parameter(name, parameter.VAR_KEYWORD, annotation=shown))
            continue
        text = annotation if tool.from_meta else schema_text(annotation)
        params.append(
            parameter(
                name,
                kinds[kind],
                default=_default(default, parameter.empty),
                annotation=parameter.empty if text is None else Shown(text),
            )
        )
    returns = tool.returns
    if returns is not None and not tool.from_meta:
        returns = schema_text(returns)
    empty = inspect.Signature.empty
    return inspect.Signature(
        params, return_annotation=empty if returns is None else Shown(returns)
    )


def _default(default, empty):
    if default is _REQUIRED:
        return empty
    if default is _NOT_SENT:
        return NOT_SENT
    try:
        return _unbytes(_copy(default))
    except ValueError:  # not strict base64: show it as the host sent it
        return default
