"""Docstrings: a tool's description, its parameters' descriptions (the Google ``Args:``
section), and the docstring the guest's function carries. Each entry keeps the lines it
spans, so the entries of parameters the guest does not see (those a partial binds) are
dropped from the published docstring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ParamDocs", "description_of", "generated_doc", "param_docs"]

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


@dataclass(frozen=True, slots=True)
class ParamDocs:
    """The parameter entries of a docstring: each one's description, and the lines each
    entry spans."""

    lines: list[str]
    descriptions: dict[str, str]
    spans: list[tuple[frozenset[str], int, int]]  # names, first line, end line

    def without(self, drop: set[str]) -> str:
        """The docstring without the entries of the parameters in ``drop``, and without an
        ``Args:`` heading left empty."""
        gone: set[int] = set()
        for names, start, end in self.spans:
            if names <= drop:
                gone.update(range(start, end))
        if not gone:
            return "\n".join(self.lines).strip()
        kept = [line for i, line in enumerate(self.lines) if i not in gone]
        out: list[str] = []
        for j, line in enumerate(kept):
            if _ARGS_HEADING.match(line) and not _section_body(kept, j + 1):
                continue
            out.append(line)
        text = "\n".join(out)
        text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)
        return text.strip()


def description_of(doc: str) -> str:
    """The docstring up to its first heading (a Google-style section, a Markdown heading, a
    heading over a line of dashes or equals signs)."""
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


def param_docs(doc: str) -> ParamDocs:
    """The parameter entries of a docstring's Google ``Args:`` section."""
    lines = doc.splitlines()
    descriptions, spans = _google_entries(lines)
    return ParamDocs(lines, descriptions, spans)


def _google_entries(lines: list[str]) -> tuple[dict[str, str], list[tuple[frozenset[str], int, int]]]:
    """The ``Args:`` entries: each name's description and its lines (a name given twice: the
    first entry)."""
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
    descriptions = {k: v[0] for k, v in entries.items()}
    spans = [(frozenset([k]), start, end) for k, (_, start, end) in entries.items()]
    return descriptions, spans


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _section_body(lines: list[str], start: int) -> bool:
    """Whether a Google heading at ``start - 1`` has any line under it."""
    head = _indent(lines[start - 1])
    for ln in lines[start:]:
        if ln.strip() and _indent(ln) <= head:
            return False
        if ln.strip():
            return True
    return False


def generated_doc(description: str, schema: dict[str, Any]) -> str:
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
