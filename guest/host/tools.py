"""The embedder's tools, one function each.

Call a tool like any Python function. Arguments cross as JSON values (None,
bool, int, float, str, list, tuple, dict with str keys) or bytes, and the
result comes back the same way. A refused or failed call raises a
host.ToolError subclass, and the program runs on. __all__ lists the tools
this run offers.

In a coroutine running on an asyncio loop, a call returns a coroutine
instead (as an async def would), and the call starts at once: `await tools.a(...)`, or
`await asyncio.gather(tools.a(...), tools.b(...))` to have the host run
them at the same time. Anywhere else (a plain function, even one a
coroutine calls) a call returns its result.
"""

# Every module-level name here but the tools, __all__ and __getattr__ starts with
# "_": tool names start with a letter, so a tool can never shadow a helper.

import json as _json
import sys as _sys
from binascii import a2b_base64 as _a2b
from binascii import b2a_base64 as _b2a

import host as _pkg

try:
    import _host as _door
except ImportError:
    raise ImportError(
        "host.tools works only inside the sandbox: there is no _host module"
    ) from None

# The error kinds a host may answer, and the name of the class the guest raises for
# each. The classes are host's, defined on first use (see host.__getattr__).
_CLASSES = {
    "protocol": "ToolProtocolError",
    "unknown_tool": "ToolArgumentError",
    "invalid_arguments": "ToolArgumentError",
    "denied": "ToolDenied",
    "tool_error": "ToolError",
    "timeout": "ToolTimeout",
    "cancelled": "ToolCancelled",
    "too_large": "ToolTooLarge",
    "budget_exceeded": "ToolBudgetExceeded",
}

# keyword.kwlist, spelled out: importing `keyword` costs more than it saves.
_KEYWORDS = frozenset(
    "False None True and as assert async await break class continue def del elif else "
    "except finally for from global if import in is lambda nonlocal not or pass raise "
    "return try while with yield".split()
)

_MIN_INT = -(10**63)  # exclusive bounds of the integers that cross
_MAX_INT = 10**64
_INF = float("inf")
_DEPTH = (
    62  # container levels an argument may hold: the frame adds 2, the host allows 64
)



def _not_json(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:
    # json's C encoder, made once: JSONEncoder.encode makes one per call, and its
    # Python layers cost a call 26,000 of the guest's instructions against 8,000. No
    # circular check: `_check` hands over fresh containers at most _DEPTH deep.
    from _json import make_encoder as _make_encoder
    from json.encoder import encode_basestring as _basestring

    _chunks = _make_encoder(
        None, _not_json, _basestring, None, ":", ",", False, False, False
    )

    def _encode(arguments):
        """JSON text of checked arguments, as JSONEncoder(ensure_ascii=False,
        separators=(",", ":"), allow_nan=False).encode gives it."""
        return "".join(_chunks(arguments, 0))

except ImportError:
    _encode = _json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


_decoder = _json.JSONDecoder(parse_constant=_no_constant)
_scan = _decoder.scan_once
_NOT_QUICK = object()


def _decode(text):
    """json.loads(text), refusing NaN and Infinity, which are not JSON."""
    try:
        value, end = _scan(text, 0)  # the quick way, when no whitespace wraps it
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass
    return _decoder.decode(text)


# Parameter kinds, numbered as inspect numbers them, and the two defaults that are
# not values: required (no default) and "not sent" (optional, with no default given:
# "optional": true in "_meta", or an optional property without "default").
_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD, _VAR_KEYWORD = 0, 1, 4
_META_KINDS = {
    "positional_only": 0,
    "positional_or_keyword": 1,
    "keyword_only": 2,
    "var_keyword": 4,
}
_REQUIRED = object()
_NOT_SENT = object()


# ---------------------------------------------------------------------- answers


def _read(raw, rid, prefix):
    """The answer to frame `rid`, checked: a protocol 1 object with our id and an ok."""
    try:
        answer = _decode(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _pkg.ToolProtocolError(prefix + "the answer is not JSON") from None
    return _checked(answer, rid, prefix)


def _checked(answer, rid, prefix):
    """`answer` (decoded JSON), if it is a protocol 1 object with id `rid` (or null)
    and an ok; else ToolProtocolError."""
    if type(answer) is not dict or type(answer.get("v")) is not int:
        raise _pkg.ToolProtocolError(prefix + "the answer is not a protocol 1 object")
    if answer["v"] != 1:
        raise _pkg.ToolProtocolError(f"{prefix}the answer is protocol {answer['v']}, not 1")
    aid = answer.get("id")
    if aid is not None and (type(aid) is not int or aid != rid):
        raise _pkg.ToolProtocolError(prefix + "the answer's id does not match the call")
    ok = answer.get("ok")
    if ok is not True and ok is not False:
        raise _pkg.ToolProtocolError(prefix + "the answer has no ok")
    return answer


def _failure(answer):
    """The exception an ok:false answer stands for."""
    error = answer.get("error")
    if type(error) is not dict:
        error = {}
    kind = error.get("kind")
    if type(kind) is not str:
        kind = "tool_error"
    message = error.get("message")
    if type(message) is not str:
        message = ""
    exc = getattr(_pkg, _CLASSES.get(kind, "ToolError"))(message)
    exc.kind = kind
    return exc


def _unbytes(value):
    """`value` with every {"$bytes": "<base64>"} object turned into bytes (in place).

    Raises ValueError when such a value is not strict base64."""
    if type(value) is dict:
        if len(value) == 1 and type(value.get("$bytes")) is str:
            return _a2b(value["$bytes"], strict_mode=True)
        for k, x in value.items():
            if type(x) is dict or type(x) is list:
                value[k] = _unbytes(x)
    elif type(value) is list:
        for i, x in enumerate(value):
            if type(x) is dict or type(x) is list:
                value[i] = _unbytes(x)
    return value


def _quick(raw, rid):
    """The value of an ok answer written as the host writes one (crates/protocol,
    `encode_ok`): `{"v":1,"id":<rid>,"ok":true,"value":<value>}`, nothing around it.
    Only the value is decoded and there is nothing to check: 10,000 of the guest's
    instructions where `_read` and `_result` take 31,000. `_NOT_QUICK` for any other
    answer, which they then read in full."""
    head = b'{"v":1,"id":%d,"ok":true,"value":' % rid
    if not raw.startswith(head):
        return _NOT_QUICK
    try:
        text = raw.decode("utf-8")
        value, end = _scan(text, len(head))  # the head is ASCII: the same index
    except (ValueError, StopIteration, RecursionError):
        return _NOT_QUICK
    if end != len(text) - 1 or text[end] != "}":
        return _NOT_QUICK
    return value


def _result(answer, raw, prefix):
    """The value of an answer, or the exception it carries raised."""
    if answer["ok"] is False:
        raise _failure(answer)
    return _value(answer.get("value"), raw, prefix)


def _value(value, raw, prefix):
    """An ok answer's value, with its `{"$bytes": ...}` objects made bytes."""
    # A "$bytes" key can only be there if the text says so, or hides it in an escape.
    if (type(value) is dict or type(value) is list) and (
        b"$bytes" in raw or b"\\u00" in raw
    ):
        try:
            value = _unbytes(value)
        except ValueError:
            raise _pkg.ToolProtocolError(
                prefix + 'a "$bytes" value is not strict base64'
            ) from None
        except RecursionError:
            raise _pkg.ToolProtocolError(prefix + "the answer is nested too deeply") from None
    return value


# -------------------------------------------------------------------- arguments


class _Refused(Exception):
    """An argument value that may not cross; `path` is filled in on the way out,
    unless it is None (a path 62 levels deep would bury the reason)."""

    def __init__(self, why, path=()):
        self.why = why
        self.path = None if path is None else []


def _scalar(x):
    """Whether `x` crosses as it is (the common case, checked without recursion)."""
    t = type(x)
    return (
        t is str
        or t is bool
        or x is None
        or (t is int and _MIN_INT < x < _MAX_INT)
        or (t is float and -_INF < x < _INF)
    )


def _convert(v, depth):
    """`v` ready for JSON, holding at most `depth` container levels; or _Refused."""
    if _scalar(v):
        return v
    t = type(v)
    if t is int:
        raise _Refused("is out of range; integers cross only when -10**63 < n < 10**64")
    if t is float:
        raise _Refused(f"is {v!r}; only finite numbers cross")
    if isinstance(v, (list, tuple, dict, bytes, bytearray, memoryview)):
        if depth == 0:
            raise _Refused(f"is nested deeper than {_DEPTH} levels", path=None)
        depth -= 1
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise _Refused(
                        f"has a key of type {type(k).__name__}; dict keys must be str"
                    )
                if k == "$bytes":
                    raise _Refused(
                        'has the key "$bytes", which the protocol keeps for bytes'
                    )
                try:
                    out[k] = x if _scalar(x) else _convert(x, depth)
                except _Refused as r:
                    if r.path is not None:
                        r.path.append(f"[{k!r}]")
                    raise
            return out
        if isinstance(v, (list, tuple)):
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(x if _scalar(x) else _convert(x, depth))
                except _Refused as r:
                    if r.path is not None:
                        r.path.append(f"[{i}]")
                    raise
            return out
        if t is memoryview:
            try:
                v = v.tobytes()
            except ValueError:
                raise _Refused("is a released memoryview") from None
        return {"$bytes": _b2a(v, newline=False).decode("ascii")}
    if isinstance(v, str):
        return v
    from host._lazy import other_number

    return _convert(other_number(v), depth)


def _check(tool, arguments):
    """Makes `arguments` JSON-ready in place, or raises ToolArgumentError."""
    for name, value in arguments.items():
        if _scalar(value):
            continue
        try:
            converted = _convert(value, _DEPTH)
        except _Refused as r:
            where = "".join(reversed(r.path or ()))
            raise _pkg.ToolArgumentError(
                f"{tool.name}(): argument {name!r}{where} {r.why}"
            ) from None
        if converted is not value:
            arguments[name] = converted


# ------------------------------------------------------------------------ calls


def _body(tool, args, kwargs):
    """The call's `args` object, as bytes; or ToolArgumentError, sending nothing."""
    arguments = tool.bind(args, kwargs)
    if not arguments:
        return b"{}"
    _check(tool, arguments)
    try:
        return _encode(arguments).encode("utf-8")
    except UnicodeEncodeError:
        from host._lazy import surrogate_error

        raise surrogate_error(tool, arguments) from None


def _call(tool, args, kwargs):
    # `_body`'s lines, inline: a sync call's path is the one most runs take.
    arguments = tool.bind(args, kwargs)
    if arguments:
        _check(tool, arguments)
        try:
            body = _encode(arguments).encode("utf-8")
        except UnicodeEncodeError:
            from host._lazy import surrogate_error

            raise surrogate_error(tool, arguments) from None
    else:
        body = b"{}"
    rid = _pkg._last_id + 1
    _pkg._last_id = rid
    frame = b'{"v":1,"id":%d,"op":"call","tool":"%s","args":%s}' % (
        rid,
        tool.ascii_name,
        body,
    )
    try:
        raw = _door.call(frame)
    except ConnectionRefusedError:
        raise _pkg.ToolProtocolError("no host is bound to the door") from None
    except OSError as e:
        raise _pkg.ToolProtocolError(f"the door failed: {e}") from None
    value = _quick(raw, rid)
    if value is _NOT_QUICK:
        return _result(_read(raw, rid, tool.prefix), raw, tool.prefix)
    return _value(value, raw, tool.prefix)


class _Tool:
    """One host function as the guest sees it; `tools.<name>.__wrapped__`.

    It binds a call as the host function would, and builds the inspect.Signature
    on first use, so importing host.tools needs no inspect: inspect.signature()
    and help() follow __wrapped__ to __signature__ here. It keeps no reference
    into the descriptor, which the tool function holds as its own.
    """

    __slots__ = (
        "name",
        "ascii_name",
        "prefix",
        "params",
        "returns",
        "from_meta",
        "doc",
        "positional",
        "keywords",
        "required",
        "order",
        "not_keywords",
        "_signature",
    )

    def __init__(self, descriptor):
        name = descriptor["name"]
        self.name, self.ascii_name, self.prefix = (
            name,
            name.encode("ascii"),
            name + ": ",
        )
        self._signature = None
        meta = _from_meta(descriptor)
        self.from_meta = meta is not None
        if meta is None or meta[2] is None:
            from host._lazy import from_schema

            schema = from_schema(descriptor)
        if meta is None:
            self.params, self.returns, self.doc = schema
        else:
            self.params, self.returns, doc = meta
            self.doc = schema[2] if doc is None else doc
        positional, keywords, required, var_keyword = [], set(), set(), False
        order, posonly = [], set()
        for param, kind, _, default in self.params:  # (name, kind, annotation, default)
            if kind == _VAR_KEYWORD:
                var_keyword = True
                continue
            order.append(param)
            if kind <= _POSITIONAL_OR_KEYWORD:
                positional.append(param)
            if kind == _POSITIONAL_ONLY:
                posonly.add(param)
            else:
                keywords.add(param)
            if default is _REQUIRED:
                required.add(param)
        self.positional = tuple(positional)
        self.required = required
        self.order = tuple(order)
        if var_keyword:
            # Any keyword goes, but for a positional-only name (the call sends every
            # argument by name, so it could not tell the two apart) and "$bytes".
            self.keywords = None
            self.not_keywords = frozenset(posonly | {"$bytes"})
        else:
            self.keywords = keywords
            self.not_keywords = None

    def __call__(self, /, *args, **kwargs):
        return _call(self, args, kwargs)

    def __repr__(self):
        return f"<host function {self.name}>"

    @property
    def __signature__(self):
        if self._signature is None:
            from host._lazy import signature

            self._signature = signature(self)
        return self._signature

    def bind(self, args, kwargs):
        """The arguments the caller passed, by name in parameter order; no defaults."""
        if args:
            if len(args) > len(self.positional):
                raise self.bind_error(args, kwargs)
            bound = dict(zip(self.positional, args))
            if kwargs:
                bound.update(kwargs)
                if len(bound) != len(args) + len(kwargs):
                    raise self.bind_error(args, kwargs)
        else:
            bound = kwargs
        if kwargs:
            if self.keywords is not None:
                if not self.keywords.issuperset(kwargs):
                    raise self.bind_error(args, kwargs)
            elif not self.not_keywords.isdisjoint(kwargs):
                raise self.bind_error(args, kwargs)
        if not bound.keys() >= self.required:
            raise self.bind_error(args, kwargs)
        if len(kwargs) > 1:
            # Keywords come after the positional arguments in parameter order;
            # among themselves they may not. Extra keywords (**kwargs) follow the
            # parameters, in the order the caller gave them.
            ordered = {n: bound[n] for n in self.order if n in bound}
            if len(ordered) != len(bound):
                ordered.update(bound)
            bound = ordered
        return bound

    def bind_error(self, args, kwargs):
        from host._lazy import bind_error

        return bind_error(self, args, kwargs)


def _copy(value):
    """A deep copy of a JSON value."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def _param_name(name):
    return type(name) is str and name.isidentifier() and name not in _KEYWORDS


def _from_meta(descriptor):
    """(params, returns, doc) from the descriptor's "_meta": {"python": ...}, or None.

    Each param is {"name", "kind", "annotation"?, "default"?, "optional"?}: kind is
    positional_only, positional_or_keyword, keyword_only or var_keyword (**name, last);
    no "default" means required, unless "optional" is true (then shown as `= ...`
    and not sent unless passed). None when it is absent or malformed: the schema
    then gives the signature."""
    meta = descriptor.get("_meta")
    python = meta.get("python") if type(meta) is dict else None
    if type(python) is not dict:
        return None
    raw, returns, doc = python.get("params"), python.get("returns"), python.get("doc")
    if type(raw) is not list:
        return None
    if (returns is not None and type(returns) is not str) or (
        doc is not None and type(doc) is not str
    ):
        return None
    params, seen, last, defaulted = [], set(), 0, False
    for p in raw:
        if type(p) is not dict:
            return None
        name, kind, annotation = p.get("name"), p.get("kind"), p.get("annotation")
        if not _param_name(name) or name in seen or type(kind) is not str:
            return None
        kind = _META_KINDS.get(kind)
        optional = p.get("optional", False)
        if (
            kind is None
            or kind < last
            or last == _VAR_KEYWORD  # **kwargs comes last, and once
            or (annotation is not None and type(annotation) is not str)
            or (optional is not True and optional is not False)
        ):
            return None
        if "default" in p:
            if kind == _VAR_KEYWORD:  # **kwargs has no default
                return None
            default = _copy(p["default"])
        elif optional and kind != _VAR_KEYWORD:
            default = _NOT_SENT  # may be left out; then it is not sent
        else:
            default = _REQUIRED
        if kind <= _POSITIONAL_OR_KEYWORD:  # Python's rule: no required after a default
            if default is not _REQUIRED:
                defaulted = True
            elif defaulted:
                return None
        seen.add(name)
        last = kind
        params.append((name, kind, annotation, default))
    return params, returns, doc


# ---------------------------------------------------------------------- the list


def _valid_name(name):
    """[A-Za-z][A-Za-z0-9_]{0,63} and not a Python keyword."""
    return (
        type(name) is str
        and 0 < len(name) <= 64
        and name.isascii()
        and name.isidentifier()
        and name[0] != "_"
        and name not in _KEYWORDS
    )


# Code flags of a coroutine's frame (CO_COROUTINE, CO_ITERABLE_COROUTINE,
# CO_ASYNC_GENERATOR): a call written in one may be awaited.
_ASYNC_CODE = 0x80 | 0x100 | 0x200
# Code that runs in a frame of its own inside the one that wrote it: a generator
# expression (and, before Python 3.12, a comprehension).
_NESTED = frozenset(("<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>"))
_modules = _sys.modules
_frame = _sys._getframe
# What host._aio makes of a call written in a coroutine on a running asyncio loop: set
# on the first such call (importing it costs a run that never makes one nothing).
_parallel = None
# How many calls the host runs at once for this guest (its list answer's
# "max_in_flight"); 0: the host runs one call at a time.
_max_in_flight = 0


def _function(tool, descriptor):
    def function(*args, **kwargs):
        # Written in a coroutine (or in a generator expression in one) that runs on an
        # asyncio loop: a coroutine, the call started on the host at once (host/_aio.py).
        # Without asyncio imported, no loop runs: one look at sys.modules.
        if "asyncio.events" in _modules:
            code = _frame(1).f_code
            if code.co_flags & _ASYNC_CODE or (
                code.co_name in _NESTED and _frame(2).f_code.co_flags & _ASYNC_CODE
            ):
                loop = _modules["asyncio.events"]._get_running_loop()
                if loop is not None:
                    global _parallel
                    if _parallel is None:
                        from host._aio import call as _parallel
                    return _parallel(loop, tool, args, kwargs)
        return _call(tool, args, kwargs)

    # Tracebacks name the tool, not this factory.
    function.__code__ = function.__code__.replace(
        co_name=tool.name, co_qualname=tool.name
    )
    function.__name__ = function.__qualname__ = tool.name
    function.__doc__ = tool.doc
    function.descriptor = descriptor
    function.__wrapped__ = tool
    return function


def _load():
    """Asks the host for its tools: {name: function}, in the host's order."""
    rid = _pkg._last_id + 1
    _pkg._last_id = rid
    broken = "the host's answer is not protocol 1: "
    try:
        raw = _door.call(b'{"v":1,"id":%d,"op":"list"}' % rid)
    except ConnectionRefusedError:
        raise ImportError("this run has no tools: the embedder passed none") from None
    except OSError as e:
        raise ImportError(f"{broken}the door failed: {e}") from None
    try:
        answer = _read(raw, rid, "")
    except _pkg.ToolProtocolError as e:
        raise ImportError(f"{broken}{e}") from None
    if answer["ok"] is False:
        e = _failure(answer)
        raise ImportError(f"the host refused the tool list ({e.kind}): {e}")
    listed = answer.get("tools")
    if type(listed) is not list:
        raise ImportError(f"{broken}the answer has no tools list")
    # Every name is checked before any function is made, so a refused list never
    # leaves host._lazy imported against a module that is then thrown away.
    functions = {}
    for descriptor in listed:
        name = descriptor.get("name") if type(descriptor) is dict else None
        if not _valid_name(name):
            raise ImportError(f"{broken}a tool has an invalid name: {repr(name)[:70]}")
        if name in functions:
            raise ImportError(f"{broken}two tools are named {name!r}")
        functions[name] = None
    for descriptor in listed:
        functions[descriptor["name"]] = _function(_Tool(descriptor), descriptor)
    global _max_in_flight
    most = answer.get("max_in_flight")
    _max_in_flight = most if type(most) is int and most > 0 else 0
    return functions


def _discover(refused_empties=False):
    """Asks the host for its tools and puts them in this module (and in __all__), in
    place of any it held (a session's snapshot resumed with another host refills the
    module in place, so names bound to it see the new tools: _wasi_python_boot's
    `restore`). When the host refuses or has none: ImportError, changing nothing; or,
    with `refused_empties`, the module left with no tools."""
    global __all__
    try:
        functions = _load()
    except ImportError:
        if not refused_empties:
            raise
        functions = {}
    names = globals()
    for name in names.get("__all__", ()):
        names.pop(name, None)
    __all__ = list(functions)
    names.update(functions)


# A preload image's build executes this module ahead with _HOLD set, without asking
# for tools: a run that imports it then only asks (_wasi_python_boot, `_hold`).
if globals().pop("_HOLD", False):
    __all__ = []  # until a run's import asks
else:
    _discover()


def __getattr__(name):
    """Only the tools in __all__ live here: any other name is an AttributeError."""
    offers = ", ".join(__all__) if __all__ else "nothing"
    raise AttributeError(
        f"module 'host.tools' has no tool {name!r}; this run offers: {offers}"
    )
