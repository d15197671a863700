"""Modules of the package imported on first use, so that ``import wasi_python`` and a plain
``run`` load only what they need (a new process pays every import: a CLI call, a worker's
start).

``lazy("_door")`` is a stand-in for ``wasi_python._door`` whose first attribute lookup
imports the module; later lookups go to it directly. The package's ``__init__`` uses
``attribute`` for its public names the same way (PEP 562).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_PACKAGE = __name__.rpartition(".")[0]


class LazyModule:
    """A package module, imported when one of its attributes is first looked up."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = _import(f"{_PACKAGE}.{self._name}")
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {_PACKAGE}.{self._name}>"


def _import(name: str) -> Any:
    """``importlib.import_module(name)`` for an absolute name, without importing
    ``importlib``."""
    __import__(name)
    return sys.modules[name]


def lazy(name: str) -> Any:
    """The package module ``name`` (``"_door"``), imported on first use."""
    return LazyModule(name)


def attribute(namespace: dict[str, Any], where: dict[str, str], name: str) -> Any:
    """The public name ``name`` of a package whose names ``where`` maps to their modules
    (``{"Session": "_session"}``): imported now, and kept in ``namespace`` so the next
    lookup does not come here. AttributeError for a name it does not list."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
    value = getattr(_import(f"{_PACKAGE}.{module}"), name)
    namespace[name] = value
    return value
