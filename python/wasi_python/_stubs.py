"""Stubs: the tools as Python source, as the guest sees them, for a prompt."""

from __future__ import annotations

import base64
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._build import Param

__all__ = ["stub"]

_EMPTY = inspect.Parameter.empty


def stub(name: str, params: Sequence[Param], returns: str | None, doc: str) -> str:
    """One tool's stub: its published parameters, return annotation text and docstring."""
    parts: list[str] = []
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
    ret = _stub_annotation(returns)
    head = f"def {name}({', '.join(parts)})" + (f" -> {ret}" if ret else "") + ":"
    lines = [head]
    if doc:
        lines.append(_docstring_literal(doc, "    "))
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
