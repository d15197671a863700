"""`Grant`, and the small argument checks the modules share (the records a run returns
are in `_records`)."""

from __future__ import annotations

import os
import sys
from _collections_abc import Iterable  # collections.abc's own: `collections` not imported for it

from ._frozen import Record, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

__all__ = ["Grant"]

#: The longest finite time a limit accepts, in seconds (about 31.7 years): past it the
#: runtime could not add the time to the clock. None is the way to say "no limit".
MAX_SECONDS = 1e9


def show_number(value: object) -> str:
    """A number for an error message: a huge int by its size, not its thousands of digits
    (past 4,300 of them, str() itself raises ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 64:
        return f"{'-' if value < 0 else ''}an int of {value.bit_length()} bits"
    return repr(value)


def items_of(param: str, value: Any, kind: type, what: str, single: str = "") -> list[Any]:
    """The items of ``value``, an iterable of ``kind`` (``what`` names them); a TypeError
    naming ``param`` for anything else, one item alone (``single`` says how to write it)
    and a str included."""
    if isinstance(value, (str, bytes, kind)) or not isinstance(value, Iterable):
        hint = f"; {single}" if single and isinstance(value, (str, bytes, kind)) else ""
        raise TypeError(f"{param} must be an iterable of {what}, not {type(value).__name__}{hint}")
    out = list(value)
    for v in out:
        if not isinstance(v, kind):
            raise TypeError(f"{param} must hold {what}, not {type(v).__name__}")
    return out


def check_utf8(name: str, text: str) -> None:
    """Refuses a str the runtime cannot pass on: one with a lone surrogate (such as
    ``"\\ud800"``) has no UTF-8 form. ValueError naming ``name``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: {text[:40]!r} is not valid UTF-8 (a lone surrogate at index {e.start})") from None


#: The largest count the runtime takes (a u64), and the largest byte count (a usize).
_U64_MAX = (1 << 64) - 1
SIZE_MAX = sys.maxsize * 2 + 1


def check_int(name: str, value: Any, *, minimum: int = 0, maximum: int = _U64_MAX, optional: bool = False, why: str = "") -> Optional[int]:
    """An int (not a bool) in [minimum, maximum], else TypeError/ValueError naming ``name``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {show_number(value)}")
    if value > maximum:
        none = "; pass None for no limit" if optional else ""
        raise ValueError(f"{name} must be at most {maximum}{why}, not {show_number(value)}{none}")
    return int(value)


def check_seconds(name: str, value: Any) -> Optional[float]:
    """None, or a positive finite number of seconds up to MAX_SECONDS (not a bool)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
    # Compared, never converted first: an int past a float's range would raise
    # OverflowError. NaN fails both comparisons; infinities fail one.
    if not (0 < value <= MAX_SECONDS):
        raise ValueError(f"{name} must be a positive finite number of seconds at most {MAX_SECONDS:g} (None for no limit), not {show_number(value)}")
    return float(value)


@record(frozen=True)
class Grant(Record):
    """A host folder offered to the guest at ``guest_path``; read-only unless ``writable``.

    The guest cannot leave the folder by ``..``, absolute paths or symlinks.
    """

    host_path: str | os.PathLike[str]
    guest_path: str
    writable: bool

    __slots__ = __match_args__ = ("host_path", "guest_path", "writable")

    def __init__(self, host_path: str | os.PathLike[str], guest_path: str, writable: bool = False) -> None:
        object.__setattr__(self, "host_path", host_path)
        object.__setattr__(self, "guest_path", guest_path)
        object.__setattr__(self, "writable", writable)
        self.__post_init__()

    def __post_init__(self) -> None:
        # Checked here, where the mistake is made: writable="no" would otherwise be truthy.
        if not isinstance(os.fspath(self.host_path) if isinstance(self.host_path, (str, os.PathLike)) else None, str):
            raise TypeError(f"Grant.host_path must be a str or os.PathLike of str, not {type(self.host_path).__name__}")
        if not isinstance(self.guest_path, str):
            raise TypeError(f"Grant.guest_path must be a str, not {type(self.guest_path).__name__}")
        check_utf8("Grant.guest_path", self.guest_path)
        if type(self.writable) is not bool:
            raise TypeError(f"Grant.writable must be a bool (True or False), not {type(self.writable).__name__}")
