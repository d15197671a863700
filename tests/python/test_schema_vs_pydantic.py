"""A differential test: our type hint -> JSON Schema builder (`wasi_python._hints`) against
pydantic's ``TypeAdapter.json_schema``, on the types both support.

Both schemas are compared after `normalised`, which removes only what does not change which
values a schema accepts: titles, ``$ref``s into ``$defs`` (inlined), ``items: {}`` and
``additionalProperties: true`` (they allow anything, as their absence does), a ``type`` beside
``enum``/``const`` values all of that type, and the order of ``anyOf``. Where the two differ
by design, `DIFFERENT` says how and why, and a test checks that the difference is still there
(so an entry moves to `SAME` the day it goes).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import json
import uuid
from typing import Annotated, Any, Literal, NewType, Optional, Union

import pytest
from pydantic import BaseModel, Field, TypeAdapter
from wasi_python._hints import SchemaBuilder

from helpers import Color, Size


class Inner(BaseModel):
    n: int = 1
    tags: list[str] = []


class Outer(BaseModel):
    inner: Inner
    maybe: Optional[Inner] = None  # noqa: UP045 (the spelling under test)
    title: str  # a property named "title" is not a title


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.5


UserId = NewType("UserId", int)

SAME = [
    int,
    str,
    float,
    bool,
    None,
    Any,
    object,
    list,
    dict,
    tuple,
    set,
    list[int],
    list[list[str]],
    dict[str, int],
    dict[str, Any],
    dict[str, list[float]],
    tuple[int, ...],
    tuple[int, str],
    set[int],
    frozenset[str],
    Optional[int],  # noqa: UP045
    int | str,
    Union[int, None, str],  # noqa: UP007
    collections.abc.Sequence[int],
    collections.abc.Mapping[str, float],
    collections.abc.Iterable[bool],
    Annotated[int, Field(description="How many.")],
    UserId,
    Color,
    Size,
    list[Optional[Color]],  # noqa: UP045
    Literal["a", "b"],
    Literal["a"],
    Literal[1, 2],
    Literal[1, "a"],
    Inner,
    Outer,
    list[Outer],
    # Types we hand to pydantic ourselves: its schema comes back as it was.
    datetime.date,
    uuid.UUID,
]

DIFFERENT = [
    # (hint, our schema, why)
    (bytes, {"type": "string", "contentEncoding": "base64"},
     "bytes cross the protocol as base64 ({'$bytes': ...}); pydantic says format: binary"),
    (Annotated[int, "How many."], {"type": "integer", "description": "How many."},
     "a plain string in Annotated is a description for us; pydantic ignores it"),
    (Point, {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "number", "default": 0.5}},
             "required": ["x"], "additionalProperties": False},
     "a dataclass's fields are all it takes: unknown keys are refused before the tool runs; "
     "pydantic ignores them"),
]


def ours(hint: Any) -> Any:
    builder = SchemaBuilder("tool 't'")
    schema, _ = builder.build(hint, where="the hint")
    if builder.defs:
        schema = {**schema, "$defs": builder.defs}
    return normalised(schema)


def theirs(hint: Any) -> Any:
    return normalised(TypeAdapter(hint).json_schema())


_TYPE_OF = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "null": type(None)}


def normalised(schema: Any) -> Any:
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}

    def walk(s: Any) -> Any:
        if isinstance(s, list):
            return [walk(x) for x in s]
        if not isinstance(s, dict):
            return s
        if "$ref" in s:
            rest = {k: v for k, v in s.items() if k != "$ref"}
            return walk({**defs[s["$ref"].rsplit("/", 1)[1]], **rest})
        out = {}
        for k, v in s.items():
            if k in ("$defs", "title"):
                continue
            if k == "properties":  # its keys are names, not keywords
                out[k] = {name: walk(p) for name, p in v.items()}
            elif (k, v) in (("items", {}), ("additionalProperties", True)):
                continue
            else:
                out[k] = walk(v)
        values = out["enum"] if "enum" in out else [out["const"]] if "const" in out else None
        kind = _TYPE_OF.get(out.get("type"))
        if values is not None and kind is not None and all(
            isinstance(v, kind) and not (isinstance(v, bool) and kind is not bool) for v in values
        ):
            del out["type"]
        if "anyOf" in out:
            out["anyOf"] = sorted(out["anyOf"], key=lambda x: json.dumps(x, sort_keys=True))
        return out

    return walk(schema)


@pytest.mark.parametrize("hint", SAME, ids=repr)
def test_the_same_schema_as_pydantic(hint: Any) -> None:
    assert ours(hint) == theirs(hint)


@pytest.mark.parametrize(("hint", "schema", "why"), DIFFERENT, ids=lambda x: repr(x)[:40])
def test_a_difference_by_design(hint: Any, schema: dict, why: str) -> None:
    assert ours(hint) == schema
    assert theirs(hint) != schema, f"no longer different ({why}): move it to SAME"


def test_normalised_keeps_what_changes_the_values_a_schema_accepts() -> None:
    # A check of the check: what it removes never changes a verdict, what it keeps does.
    assert normalised({"type": "string", "title": "T"}) == {"type": "string"}
    assert normalised({"enum": [1, True], "type": "integer"}) == {"enum": [1, True], "type": "integer"}
    assert normalised({"const": "a", "type": "integer"}) == {"const": "a", "type": "integer"}
    assert normalised({"items": {"type": "integer"}}) != normalised({"items": {}})
    assert normalised({"properties": {"title": {"type": "string"}}}) == {"properties": {"title": {"type": "string"}}}
