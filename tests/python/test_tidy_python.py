"""Tidy: no module of the package reaches into another module's private names.

A leading underscore says "this module's own". A module may import another private module
(``from . import _run``) and use its public names, but not ``_run._UNSET``, not
``from ._tools import _as_tools``, and not ``tool._for_door()`` on an object whose class lives
elsewhere. What another module needs is made public within the package (the module itself stays
private by its own underscore) or moved to the module that owns the concern.

Read with `ast`, without importing. An attribute ``x._name`` (``x`` not ``self`` or ``cls``)
counts as reaching in when ``_name`` is defined in another module of the package and not in
this one: a def, a class, an assignment or a string such as a ``__slots__`` entry. The
extension, ``_wasi_python``, is compiled code and out of scope.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import pytest

from helpers import PYTHON_DIR

PACKAGE = "wasi_python"
EXTENSION = "_wasi_python"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: defs, classes, assignment targets (names and
    attributes), parameters, and string constants (``__slots__``, ``setattr``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[0])
    return {n for n in out if _private(n)}


def _imported_module(node: ast.ImportFrom) -> str | None:
    """The package module an import takes names from (``"_run"``, or ``""`` for the package
    itself), or None for a module outside the package."""
    if node.level == 1:
        return node.module or ""
    if node.level == 0 and node.module == PACKAGE:
        return ""
    if node.level == 0 and node.module and node.module.startswith(PACKAGE + "."):
        return node.module[len(PACKAGE) + 1 :]
    return None


def violations(sources: Mapping[str, str]) -> list[str]:
    """Every place a module of ``sources`` (module name -> source) uses another module's
    private name, as ``"module:line what"``."""
    trees = {name: ast.parse(text, f"{name}.py") for name, text in sources.items()}
    defined = {name: _defined(tree) for name, tree in trees.items()}
    found: list[str] = []
    for name, tree in trees.items():
        others = set().union(*(d for m, d in defined.items() if m != name))
        # Local names bound to a package module: `from . import _run`, `import wasi_python._run as r`.
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _imported_module(node)
                if source is None:
                    continue
                for a in node.names:
                    if source == "" and a.name in sources:
                        aliases[a.asname or a.name] = a.name
                    elif source != EXTENSION and a.name != EXTENSION and _private(a.name):
                        found.append(f"{name}:{node.lineno} from {source or PACKAGE} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if a.asname and parts[0] == PACKAGE and len(parts) == 2 and parts[1] in sources:
                        aliases[a.asname] = parts[1]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                if aliases[base.id] != name:
                    found.append(f"{name}:{node.lineno} {base.id}.{node.attr}")
            elif isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            elif node.attr in others and node.attr not in defined[name]:
                found.append(f"{name}:{node.lineno} {ast.unparse(base)}.{node.attr}")
    return sorted(found, key=lambda v: (v.split(":")[0], int(v.split(":")[1].split()[0])))


CASES = [
    # (module "a", module "b", what is found in "b")
    ("X = 1", "from . import a\nprint(a.X)", []),
    ("_X = 1", "from . import a\nprint(a._X)", ["b:2 a._X"]),
    ("_X = 1", "import wasi_python.a as r\nprint(r._X)", ["b:2 r._X"]),
    ("_X = 1", "from .a import _X", ["b:1 from a import _X"]),
    ("_X = 1", "def f():\n    from wasi_python.a import _X", ["b:2 from a import _X"]),
    ("class T:\n    def _door(self): ...", "def f(t):\n    return t._door()", ["b:2 t._door"]),
    ("class T:\n    __slots__ = ('_c',)", "def f(t):\n    return t.x._c", ["b:2 t.x._c"]),
    ("class T:\n    def _h(self): ...", "class U:\n    def _h(self): ...\n    def g(self, u):\n        return u._h()", []),
    ("class T:\n    def _h(self): ...", "class U:\n    def g(self):\n        return self._h() + cls._h()", []),
    ("", "import sys\nsys._getframe()", []),
    ("", "from . import _wasi_python as _ext\nfrom ._wasi_python import _x\n_ext._y", []),
    ("", "from . import a\nfrom wasi_python import a as b2\nprint(a.__name__)", []),
]


@pytest.mark.parametrize(("a", "b", "expected"), CASES)
def test_the_check_finds_what_it_should(a: str, b: str, expected: list[str]) -> None:
    assert [v for v in violations({"a": a, "b": b}) if v.startswith("b:")] == expected


def test_no_module_reaches_into_another_modules_private_names() -> None:
    package = PYTHON_DIR / PACKAGE
    sources = {p.stem: p.read_text(encoding="utf-8") for p in sorted(package.glob("*.py"))}
    assert "_run" in sources and "_tools" in sources  # found the package
    assert violations(sources) == []
