"""Docstrings: a tool's description, its parameters' descriptions, and the docstring the
guest's function carries.

Three forms of parameter docs are read:

- Google's ``Args:`` section (and its synonyms), by our own parser;
- numpydoc's ``Parameters`` section under a ``----`` line, and reST fields
  (``:param x: ...``), by ``docstring_parser``. It is imported only for a docstring in one
  of these forms (about 10 ms, once), so a tool with a Google or plain docstring, and
  ``import wasi_python``, never load it.

Each entry keeps the lines it spans, so the entries of parameters the guest does not see
(those a partial binds) are dropped from the published docstring in every form.
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
# A reST field (":param x: ...", ":returns: ..."); a role such as ":class:`X`" is not one.
_FIELD = re.compile(r"^\s*:[A-Za-z]\w*(?:\s+[^:\s][^:]*)?:(?:\s|$)")
# The reST fields of a parameter: ":param x:", ":param int x:", ":type x:", ...
_PARAM_FIELD = re.compile(
    r"^(\s*):(param|parameter|arg|argument|key|keyword|type)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:(?:\s|$)"
)
# numpydoc's parameter sections, each a title over a line of dashes.
_NUMPY_PARAM_TITLE = re.compile(
    r"^(\s*)(Parameters|Params|Arguments|Args|Other Parameters|Other Params|Other Arguments|"
    r"Other Args)\s*$"
)
_NUMPY_DASHES = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")
# Kinds of docstring_parser's params that are not a function's parameters.
_NOT_PARAMS = {"attribute", "receives"}


@dataclass(frozen=True, slots=True)
class ParamDocs:
    """The parameter entries of a docstring: each one's description, and the lines each
    entry spans (an entry may name several parameters: numpydoc's ``a, b : int``)."""

    lines: list[str]
    descriptions: dict[str, str]
    spans: list[tuple[frozenset[str], int, int]]  # names, first line, end line

    def without(self, drop: set[str]) -> str:
        """The docstring without the entries of the parameters in ``drop`` (an entry that
        also names a parameter the guest sees stays), and without a section left empty."""
        gone: set[int] = set()
        for names, start, end in self.spans:
            if names <= drop:
                gone.update(range(start, end))
        if not gone:
            return "\n".join(self.lines).strip()
        kept = [line for i, line in enumerate(self.lines) if i not in gone]
        out: list[str] = []
        skip = 0
        for j, line in enumerate(kept):
            if skip:
                skip -= 1
                continue
            if _ARGS_HEADING.match(line) and not _section_body(kept, j + 1):
                continue
            title = _NUMPY_PARAM_TITLE.match(line)
            if title and j + 1 < len(kept) and _NUMPY_DASHES.match(kept[j + 1]):
                if not _numpy_section_body(kept, j + 2, len(title.group(1))):
                    skip = 1  # the dashes go with their title
                    continue
            out.append(line)
        text = "\n".join(out)
        text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)
        return text.strip()


def description_of(doc: str) -> str:
    """The docstring up to its first heading (a Google-style section, a Markdown heading, a
    heading over a line of dashes or equals signs) or its first reST field."""
    lines = doc.splitlines()
    end = len(lines)
    for i, line in enumerate(lines):
        if _HEADING.match(line) or _MD_HEADING.match(line) or _FIELD.match(line):
            end = i
            break
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and _UNDERLINE.match(nxt):
            end = i
            break
    return "\n".join(lines[:end]).strip()


def param_docs(doc: str) -> ParamDocs:
    """The parameter entries of a docstring: its Google ``Args:`` section if it has one with
    entries; else its numpydoc ``Parameters`` sections or reST ``:param`` fields."""
    lines = doc.splitlines()
    descriptions, spans = _google_entries(lines)
    if descriptions:
        return ParamDocs(lines, descriptions, spans)
    numpy = _numpy_spans(lines)
    rest = _rest_spans(lines)
    if numpy or rest:
        descriptions = _parsed_descriptions(doc, numpydoc=bool(numpy))
        return ParamDocs(lines, descriptions, numpy or rest)
    return ParamDocs(lines, {}, [])


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


def _continued(lines: list[str], i: int, indent: int) -> int:
    """The end of an entry whose first line is ``i``: the lines after it indented deeper than
    ``indent``, blank lines between them included, trailing blank lines not."""
    end = i + 1
    j = i + 1
    while j < len(lines):
        if lines[j].strip():
            if _indent(lines[j]) <= indent:
                break
            end = j + 1
        j += 1
    return end


def _rest_spans(lines: list[str]) -> list[tuple[frozenset[str], int, int]]:
    spans = []
    for i, line in enumerate(lines):
        m = _PARAM_FIELD.match(line)
        if m:
            spans.append((frozenset([m.group(3)]), i, _continued(lines, i, len(m.group(1)))))
    return spans


def _numpy_spans(lines: list[str]) -> list[tuple[frozenset[str], int, int]]:
    spans = []
    i = 0
    while i + 1 < len(lines):
        title = _NUMPY_PARAM_TITLE.match(lines[i])
        if not (title and _NUMPY_DASHES.match(lines[i + 1])):
            i += 1
            continue
        base = len(title.group(1))
        i += 2
        while i < len(lines) and not _is_numpy_heading(lines, i):
            line = lines[i]
            if line.strip() and _indent(line) < base:
                break
            m = _NUMPY_ENTRY.match(line.strip()) if line.strip() and _indent(line) == base else None
            if m:
                names = frozenset(n.strip().lstrip("*") for n in m.group(1).split(","))
                end = _continued(lines, i, base)
                spans.append((names, i, end))
                i = end
            else:
                i += 1
    return spans


def _is_numpy_heading(lines: list[str], i: int) -> bool:
    return bool(lines[i].strip()) and i + 1 < len(lines) and bool(_NUMPY_DASHES.match(lines[i + 1]))


def _section_body(lines: list[str], start: int) -> bool:
    """Whether a Google heading at ``start - 1`` has any line under it."""
    head = _indent(lines[start - 1])
    for ln in lines[start:]:
        if ln.strip() and _indent(ln) <= head:
            return False
        if ln.strip():
            return True
    return False


def _numpy_section_body(lines: list[str], start: int, base: int) -> bool:
    """Whether a numpydoc section whose dashes end at ``start`` has any line under it."""
    for i in range(start, len(lines)):
        if _is_numpy_heading(lines, i) or (lines[i].strip() and _indent(lines[i]) < base):
            return False
        if lines[i].strip():
            return True
    return False


def _parsed_descriptions(doc: str, *, numpydoc: bool) -> dict[str, str]:
    """The parameters' descriptions docstring_parser reads, each on one line (as the Google
    entries are); a docstring it cannot parse gives none."""
    import docstring_parser

    style = docstring_parser.DocstringStyle.NUMPYDOC if numpydoc else docstring_parser.DocstringStyle.REST
    try:
        parsed = docstring_parser.parse(doc, style=style)
    except docstring_parser.ParseError:
        return {}
    out: dict[str, str] = {}
    for p in parsed.params:
        if p.args and p.args[0] in _NOT_PARAMS:
            continue
        text = " ".join(line.strip() for line in (p.description or "").splitlines() if line.strip())
        for name in p.arg_name.split(","):
            name = name.strip().lstrip("*")
            if name and text:
                out.setdefault(name, text)
    return out


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
