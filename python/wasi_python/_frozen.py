"""Frozen records that cost no import: the package's public records (`Completed`, `Grant`,
...) are plain slotted classes on `Record`, with the behaviour of the frozen, slotted
dataclasses they replace.

A new process pays for every module it imports, and ``dataclasses`` imports ``inspect``
(with ``ast``, ``dis``, ``tokenize``, ``re``: 7-8 ms), then compiles each class's methods
with ``exec`` (0.7 ms a class). A record here is written out: its ``__slots__``,
``__match_args__`` (its fields, in order) and ``__init__`` in its class body, the rest
from `Record`, so defining one costs what defining any class costs.

What `Record` keeps of a frozen dataclass (``@dataclass(frozen=True, slots=True)``):
the ``repr``, ``==`` (same class, fields equal in order), ``hash``, assignment and
deletion refused with ``dataclasses.FrozenInstanceError``, pickling and ``copy`` (the
state is the fields' values, as dataclasses make it), and ``dataclasses.fields``,
``asdict``, ``replace`` and ``is_dataclass``: ``__dataclass_fields__`` and
``__dataclass_params__`` are made on first use, from a twin dataclass with the same
fields, so ``dataclasses`` is imported only by code that asks for them. For type
checkers the classes are the dataclasses they were (`record`).
"""

from __future__ import annotations

import _thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass as record  # type checkers see frozen dataclasses
    from typing import Any
else:

    def record(**_kw):
        """At run time, a class's own body makes it a record (`Record`); type checkers see
        ``dataclasses.dataclass`` instead, with the same keywords."""
        return lambda cls: cls


__all__ = ["Record", "record", "FACTORY", "dataclass_twin"]


class _Factory:
    """The default of a field made per instance (a dataclass's ``default_factory``): the
    record's ``__init__`` makes the value when it gets this; signatures show
    ``<factory>``, as a dataclass's do."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


FACTORY: Any = _Factory()

#: The ``repr``s in progress, by (object, thread): a record that holds itself (through a
#: dict it holds) shows ``...`` there, as a dataclass's ``repr`` does.
_IN_REPR: set[tuple[int, int]] = set()


def _frozen(name: str) -> Exception:
    import dataclasses  # only when a program assigns to a record

    return dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _record_class(cls: type) -> type:
    """The class that defines ``cls``'s fields: itself, or the record it derives from."""
    for k in cls.__mro__:
        if "__match_args__" in k.__dict__ and issubclass(k, Record):
            return k
    raise AttributeError(f"{cls.__qualname__} is not a record")


def dataclass_twin(cls: type) -> type:
    """A frozen slotted dataclass with ``cls``'s name, fields, defaults and factories:
    the source of its ``__dataclass_fields__`` and ``__dataclass_params__`` (and what tests
    compare a record's behaviour with)."""
    import dataclasses

    base: Any = _record_class(cls)
    names = base.__match_args__
    defaults = base.__init__.__defaults__ or ()
    given = dict(zip(names[len(names) - len(defaults):], defaults))
    ns: dict[str, Any] = {
        "__annotations__": {n: base.__annotations__[n] for n in names},
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    }
    for n, d in given.items():
        ns[n] = dataclasses.field(default_factory=base._factories[n]) if d is FACTORY else d
    return dataclasses.dataclass(frozen=True, slots=True)(type(base.__name__, (), ns))


class _DataclassInfo:
    """``__dataclass_fields__`` or ``__dataclass_params__`` of a record, made when first
    looked up (``dataclasses.fields``, ``asdict``, ``is_dataclass`` ...) and then kept in
    the class as a plain attribute."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: Any, owner: type) -> Any:
        base = _record_class(owner)
        twin = dataclass_twin(base)
        for attr in ("__dataclass_fields__", "__dataclass_params__"):
            type.__setattr__(base, attr, getattr(twin, attr))
        return getattr(base, self.attr)


class Record:
    """A frozen record's behaviour; a record class names its fields in ``__slots__`` and
    ``__match_args__`` and sets them in its ``__init__`` with ``object.__setattr__``;
    ``_factories`` maps each field whose default is `FACTORY` to what makes it."""

    __slots__ = ()
    _factories = {}  # type: dict[str, Any]
    # Not annotated here: `typing.get_type_hints` of a record reads its bases' annotations.
    if TYPE_CHECKING:
        __match_args__: tuple[str, ...]
    else:
        __dataclass_fields__ = _DataclassInfo("__dataclass_fields__")
        __dataclass_params__ = _DataclassInfo("__dataclass_params__")

    def __repr__(self) -> str:
        key = (id(self), _thread.get_ident())
        if key in _IN_REPR:
            return "..."
        _IN_REPR.add(key)
        try:
            fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__match_args__)
        finally:
            _IN_REPR.discard(key)
        return f"{type(self).__qualname__}({fields})"

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if "__match_args__" in cls.__dict__ or name in cls.__match_args__:
            raise _frozen(name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        cls = type(self)
        if "__match_args__" in cls.__dict__ or name in cls.__match_args__:
            raise _frozen(name)
        object.__delattr__(self, name)

    # Pickling and copy: the fields' values in order, as a frozen slotted dataclass's
    # ``__getstate__`` gives them (so a pickle either made reads in the other).
    def __getstate__(self) -> list[Any]:
        return [getattr(self, n) for n in self.__match_args__]

    def __setstate__(self, state: list[Any]) -> None:
        for n, v in zip(self.__match_args__, state):
            object.__setattr__(self, n, v)

    def __replace__(self, /, **changes: Any) -> Any:
        """``copy.replace`` (Python 3.13): ``dataclasses.replace``."""
        import dataclasses

        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
