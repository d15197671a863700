"""JSON values: a Python default as the JSON a descriptor carries, a JSON default back as
Python, and a tool's result with dataclasses, models, enums, tuples or sets as plain JSON.

pydantic is never imported here: a value can only be a pydantic model if pydantic is
already loaded, so these look it up in `sys.modules`.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import math
import numbers
import sys
import typing
from typing import Any

__all__ = [
    "NotJSON",
    "field_info",
    "is_pydantic_model",
    "json_to_python",
    "json_value",
    "pydantic_base_model",
    "to_json",
    "type_name",
]

# The guest encodes integers with -10**63 < n < 10**64 (artifact ABI 6.2); defaults obey it too.
_INT_MIN = -(10**63)
_INT_MAX = 10**64


class NotJSON(Exception):
    """A value that has no JSON form in the protocol; the message says why."""


def type_name(x: Any) -> str:
    """The name of a value's type, for a message."""
    return type(x).__qualname__


def pydantic_base_model() -> type | None:
    mod = sys.modules.get("pydantic")
    return getattr(mod, "BaseModel", None) if mod is not None else None


def is_pydantic_model(h: Any) -> bool:
    bm = pydantic_base_model()
    return bm is not None and isinstance(h, type) and issubclass(h, bm)


def field_info(default: Any) -> Any:
    """``default`` if it is a pydantic ``Field(...)``, else None."""
    mod = sys.modules.get("pydantic.fields")
    fi = getattr(mod, "FieldInfo", None) if mod is not None else None
    return default if fi is not None and isinstance(default, fi) else None


def json_value(v: Any, depth: int = 0) -> Any:
    """A Python default as the JSON the descriptor carries; raises NotJSON."""
    if depth > 62:
        raise NotJSON("it nests too deeply")
    if isinstance(v, enum.Enum):
        return json_value(v.value, depth + 1)
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        return str(v)
    if isinstance(v, numbers.Integral):
        n = int(v)
        if not _INT_MIN < n < _INT_MAX:
            raise NotJSON("it is an integer too large for the protocol")
        return n
    if isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):
            raise NotJSON(f"it is {f!r}; only finite numbers cross")
        return f
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (list, tuple)):
        return [json_value(x, depth + 1) for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise NotJSON(f"it has a key {k!r} that is not a str")
            if k == "$bytes":
                raise NotJSON('it has a key "$bytes", which the protocol reserves')
            out[str(k)] = json_value(x, depth + 1)
        return out
    bm: Any = pydantic_base_model()
    if bm is not None and isinstance(v, bm):
        return json_value(typing.cast(Any, v).model_dump(mode="json"), depth + 1)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return json_value({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}, depth + 1)
    raise NotJSON(f"it is a {type_name(v)}")


def json_to_python(v: Any) -> Any:
    """A JSON default as the Python value a signature shows (``{"$bytes": ...}`` as bytes)."""
    if isinstance(v, dict):
        if set(v) == {"$bytes"} and isinstance(v["$bytes"], str):
            try:
                return base64.b64decode(v["$bytes"], validate=True)
            except ValueError:
                return v
        return {k: json_to_python(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_to_python(x) for x in v]
    return v


def to_json(value: Any) -> Any:
    """A result with dataclasses, pydantic models, enums, tuples or sets, as plain JSON values."""
    if value is None or isinstance(value, (bool, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, (str, int, float)):
        return value
    bm: Any = pydantic_base_model()
    if bm is not None and isinstance(value, bm):
        return typing.cast(Any, value).model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    core = sys.modules.get("pydantic_core")
    if core is not None:
        try:
            return core.to_jsonable_python(value)
        except Exception:
            return value
    return value
