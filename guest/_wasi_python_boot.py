"""The host's entry into the guest (crates/runtime): imported by a one-line prelude.

`main()` is what a run does (crates/runtime/src/run.rs): it runs the caller's command
line through the reactor's own runner (`_reactor.run`, what the `run` export does),
then what interpreter finalisation does that a program can observe: atexit handlers,
`__main__` torn down so unclosed files flush, the streams flushed. It ends with
`os._exit`, skipping CPython's ~20 ms teardown: the host drops the instance anyway.
A run from a session's snapshot runs its program in the session's `__main__`, with the
session's variables; any other run, in a fresh one.

`preload(names)` is the turn that builds a snapshot (crates/runtime/src/snapshot.rs):
it imports the modules, then freezes the garbage collector's view of them, so a run
from the snapshot does not walk (and dirty) every preloaded object at its first
collection. `restore(env, workdir)` is the first thing a run or session from a
snapshot does: it undoes what the build froze (the environment, the working folder,
the random generators' state, clocks cached by modules), and for a session's snapshot
(crates/runtime/src/fork.rs) re-lists the tools of `host.tools` from the new host.

`install()` is what a session's setup turn does; `main()` does it too. It puts this
module first on sys.meta_path as the finder and loader of the `host` package, whose
compiled modules `cargo xtask dist` bundles into one file beside this one
(`host.bundle`, a marshalled {name: marshalled code}). Importing `host` then reads
one file instead of walking the folder: each WASI file call costs the guest about
10 us, and the path finder makes dozens. The folder stays on sys.path and holds the
sources, for tracebacks, `inspect.getsource` and a missing bundle.
"""

import builtins
import gc
import marshal
import os
import sys
import time

# The reactor's own runner: loaded before this module in every guest. These modules are
# bound here once rather than imported on a run's path, where each `import` of a loaded
# module costs the guest 2,400 instructions more than a name.
import _reactor

_DIR = __file__.rpartition("/")[0]
# {module name: marshalled code}, read on the first `import host`; in a preload image,
# read by its build and each code object unmarshalled (`preload`).
_bundle = None
# In a preload image: {"host": module, "host.tools": module}, executed by its build
# (`_hold`) and kept out of sys.modules until a run imports them.
_held = None
_held_imports = {}  # the modules their execution imported: {name: module}
built_at = None  # in a snapshot: the monotonic clock when its build ended
_host_call = None  # in a snapshot: `_door_call()`, kept by its build
_builtins = builtins.__dict__  # where `install` puts `display`


def find_spec(name, path=None, target=None):
    """The spec of `host` or one of its modules, from the bundle; pyplot's, from the
    finders after this one, to show its figures as displays (`_hook_pyplot`);
    urllib.request's, to open its http and https through the host
    (`_urllib_through_host`); asyncio.selector_events', to make loops without a
    self-pipe (`_asyncio_without_self_pipe`): each with `_spec_then`; None for any other."""
    global _bundle
    if name != "host" and not name.startswith("host."):
        if name == "matplotlib.pyplot":
            return _spec_then(name, path, target, _hook_pyplot)
        if name == "urllib.request":
            return _spec_then(name, path, target, _urllib_through_host)
        if name == "asyncio.selector_events":
            return _spec_then(name, path, target, _asyncio_without_self_pipe)
        return None
    if _bundle is None:
        _bundle = _read_bundle()
    if name not in _bundle:
        return None
    package = name == "host"
    where = _DIR + "/" + name.replace(".", "/")
    spec = sys.modules["_frozen_importlib"].ModuleSpec(
        name,
        sys.modules[__name__],
        origin=where + "/__init__.py" if package else where + ".py",
        is_package=package,
    )
    spec.has_location = True
    if package:
        spec.submodule_search_locations = [where]
    return spec


def _read_bundle():
    """The bundle's {module name: marshalled code}; empty when there is none (the folder
    on sys.path then serves)."""
    try:
        with open(_DIR + "/host.bundle", "rb") as f:
            bundle = marshal.loads(f.read())
    except Exception:  # noqa: BLE001 - no bundle, or not one
        return {}
    return bundle if type(bundle) is dict else {}


def create_module(spec):
    """`host` and `host.tools` as a preload image's build executed them (`_hold`), else
    None (a new module)."""
    return _held.get(spec.name) if _held else None


def exec_module(module):
    name = module.__spec__.name
    if _held and _held.get(name) is module:
        # Executed by the build: `host` is ready; `host.tools` leaves in sys.modules
        # what its own imports would (`_host`, `binascii`), then asks for the run's tools.
        if name == "host.tools":
            for imported, held in _held_imports.items():
                sys.modules.setdefault(imported, held)
            module._discover()
        return
    code = _bundle[name]
    exec(marshal.loads(code) if type(code) is bytes else code, module.__dict__)


def install():
    if sys.modules[__name__] not in sys.meta_path:
        sys.meta_path.insert(0, sys.modules[__name__])
    global _reactor_refresh
    if _reactor._refresh is not _refresh:
        _reactor_refresh = _reactor._refresh
        _reactor._refresh = _refresh
    global _reactor_run_turn
    if _reactor._run_turn is not _run_turn:
        _reactor_run_turn = _reactor._run_turn
        _reactor._run_turn = _run_turn


def _run_turn(text, name):
    """The reactor's `_run_turn(text, name)` (a session's turn), with the turn compiled
    from its source (`_compiled_turn`), where the reactor parses the text to an AST,
    splits off its last expression and compiles each part (a one-line expression such
    as `df.head()`: 16 against 80 us in the guest; `x = 1`: 35 against 95). What the
    reactor does with the code is done the same: the source registered for tracebacks,
    the turn run in `__main__`, its last expression's value handed to
    `sys.displayhook`. A turn that does not compile goes the reactor's way. A turn
    that is a name alone (`x`, `df`: showing a variable, the commonest turn there is)
    is looked up as the compiled expression would look it up (in `__main__`, then its
    builtins), with no compiling at all (30 us in the guest); one found in neither goes
    the compiled way, which raises the same NameError. A fresh run's turn (`_GO_TURN`, run.rs) calls `go`, and a guest on standby's
    (`_SERVE_TURN`) `serve`, without compiling anything either. A turn's displays: its
    last value's rich form (`_echo`), and the figures pyplot holds open at its end, even
    when it raised (`_figures_end`)."""
    if text == _GO_TURN:
        return go()
    if text == _SERVE_TURN:
        return serve()
    modules = sys.modules
    if "host._display" in modules:  # inline, as below: each call costs a turn 2,000 instructions
        _display_begin()
    global _image_env, _rng_views
    _image_env = None  # a turn may change the environment
    _rng_views = None  # and the generators
    try:
        bare = text.rstrip()
        if bare.isascii() and bare.isidentifier() and bare not in _NOT_NAMES:
            # ASCII only: the parser would NFKC-normalise any other identifier first.
            scope = modules["__main__"].__dict__
            if bare in scope:
                value = scope[bare]
                sys.displayhook(value)
                if value is not None and type(value) not in _PLAIN:  # `_echo`
                    _displays().result(value)
                return None
            builtins = scope.get("__builtins__")
            builtins = getattr(builtins, "__dict__", builtins)
            if type(builtins) is dict and bare in builtins:
                _echo(builtins[bare])
                return None
        compiled = _compiled_turn(text, name)
        if compiled is not None:
            linecache = modules.get("linecache") or __import__("linecache")
            codes, expr = compiled
            scope = modules["__main__"].__dict__
            for code in (*codes, expr) if expr is not None else codes:
                linecache._register_code(code, text, name)
            for code in codes:
                exec(code, scope)
            if expr is not None:
                _echo(eval(expr, scope))
            return None
        hook = sys.displayhook
        echo = sys.displayhook = _Echo(hook)
        try:
            return _reactor_run_turn(text, name)
        finally:
            if sys.displayhook is echo:  # the turn's own, if it set one, stays
                sys.displayhook = hook
    finally:
        if _figs:  # pyplot holds figures open: they become displays
            _figures_end()


def _echo(value, hook=None):
    """A turn's echo of its last expression: `sys.displayhook` (or `hook`) prints it, as
    the reactor does; then a value with a rich representation is also the turn's result
    display (guest/host/_display.py, `result`). Values of the types in `_PLAIN` have
    none: nothing more is done for them."""
    (hook or sys.displayhook)(value)
    if value is not None and type(value) not in _PLAIN:
        _displays().result(value)


class _Echo:
    """`sys.displayhook` while the reactor runs a turn (`_run_turn`): `_echo` with the
    hook it replaced."""

    __slots__ = ("hook",)

    def __init__(self, hook):
        self.hook = hook

    def __call__(self, value):
        _echo(value, self.hook)


def _compiled_turn(text, name):
    """A turn compiled from its source: (the code objects to run in turn, the code of
    its last statement to evaluate and echo if that is an expression, else None); None
    when it must go the reactor's way. The reactor parses the text to an AST, then
    compiles that (about 95 us in the guest for `x = 1`, against 35 from source), and
    runs the rest of the turn, then hands its last expression's value to
    `sys.displayhook`: so is it done here.

    The text is cut before its last top-level statement: the last line that starts at
    the first column with neither a comment, a closing bracket nor a clause that
    continues a compound statement (`else:`, `except:` ...), and the decorators right
    above it. What is before the cut is compiled alone ("exec"), so the cut is a
    statement boundary of the whole text: a cut inside brackets, a string or a continued
    line would leave that part unable to compile. The last statement (its line numbers
    the text's: newlines before it) is a compound statement ("exec"), an expression
    ("eval"), or else a simple statement ("exec"). Which of the last two: without `=`,
    "eval" is tried first; with it (`x = 1`, or `f(a=1)`), "single" mode tells, as it
    compiles an expression statement to end in echoing it (`_ECHO`), and an expression
    is compiled again in "eval". Left to the reactor: text that does not compile, `;`
    in the last statement, `from __future__` (it would not reach the second part), and
    annotations in both parts (the second's `__annotate__` would replace the first's)."""
    if not text or text[0].isspace() or "__future__" in text:
        return None
    cut, last = 0, text
    if "\n" in text:
        lines = text.split("\n")
        cut = len(lines)
        while True:
            cut -= 1
            if cut < 0:
                return None
            line = lines[cut]
            first = line[:1]
            if (first and not first.isspace() and first not in "#)]}"
                    and not (line.startswith(_CLAUSES) and _first_word(line) in _CLAUSES)):
                break
        while cut and lines[cut - 1][:1] == "@":
            cut -= 1
        last = "\n".join(lines[cut:])
    word = _first_word(last) if last.startswith(_COMPOUND) else ""
    compound = (word in _COMPOUND and word != "match") or last[0] == "@"
    if not compound and ";" in last:
        return None
    tail = "\n" * cut + last
    try:
        expr = code = None
        if compound:
            code = compile(tail, name, "exec")
        elif "=" in last and word != "match":  # `match` may start a compound statement
            code = compile(tail, name, "single")
            if code.co_code.endswith(_ECHO):
                code, expr = None, compile(tail, name, "eval")
        elif last.split(None, 1)[0] in _STATEMENTS:
            code = compile(tail, name, "exec")
        else:
            try:
                expr = compile(tail, name, "eval")
            except SyntaxError:
                code = compile(tail, name, "exec")
        codes = [code] if code is not None else []
        if cut:
            codes.insert(0, compile("\n".join(lines[:cut]), name, "exec"))
    except Exception:  # noqa: BLE001 - the reactor compiles it again and reports it
        return None
    if len(codes) == 2 and all("__annotate__" in c.co_names for c in codes):
        return None
    return codes, expr


def _first_word(line):
    """The identifier a line starts with, up to six characters (enough for a keyword)."""
    start = line[:6]
    end = 0
    while end < len(start) and (start[end].isalnum() or start[end] == "_"):
        end += 1
    return start[:end]


# Its frames carry the reactor's file name, so tracebacks leave them out as they leave
# out the reactor's own (the reactor's report skips leading `<reactor>` frames).
_run_turn.__code__ = _run_turn.__code__.replace(co_filename="<reactor>")
_echo.__code__ = _echo.__code__.replace(co_filename="<reactor>")
_Echo.__call__.__code__ = _Echo.__call__.__code__.replace(co_filename="<reactor>")
_reactor_run_turn = None  # the reactor's own, which `_run_turn` wraps

# A fresh run's turn from a snapshot (crates/runtime/src/run.rs, `GO_TURN`): one fixed
# text, which `_run_turn` answers by calling `go()` at once. `go` then asks the host for
# the run's command line with the door frame `_GO_FRAME`. A Python expression that does
# the same, should this module's `_run_turn` not be installed.
_GO_TURN = "__import__('_wasi_python_boot').go()"
_GO_FRAME = b"\0wasi-python go"
# A guest on standby's turn (crates/runtime/src/standby.rs, `SERVE`), answered the same
# way: the reactor would parse and compile it, 120 us and more of each standby's making.
_SERVE_TURN = "__import__('_wasi_python_boot').serve()"

# Identifiers that are not names to look up: the keywords (`keyword.kwlist`, here so
# that no run finds `keyword` imported), and `__debug__`, which the compiler makes a
# constant. Soft keywords (`match`, `type`, `_`) are names in an expression.
_NOT_NAMES = frozenset(
    "False None True and as assert async await break class continue def del elif else except "
    "finally for from global if import in is lambda nonlocal not or pass raise return try "
    "while with yield __debug__".split()
)

# First words of statements (a turn starting with one is not an expression).
_STATEMENTS = frozenset(
    "import from def class for while if elif else with try except finally del pass return "
    "raise assert global nonlocal break continue async".split()
)
# First words of compound statements, whose bodies hold statements of their own, and of
# the clauses that continue one.
# Tuples: `str.startswith` takes them, and `in` works as for a set.
_COMPOUND = tuple("if for while with try def class async match".split())
_CLAUSES = tuple("elif else except finally case".split())
# How "single" mode ends the code of an expression statement: it hands the value to
# `sys.displayhook` (CALL_INTRINSIC_1 INTRINSIC_PRINT), then returns None. No other
# simple statement ends so.
_ECHO = compile("0", "<echo>", "single").co_code[-8:]

# Values `_echo` hands to `sys.displayhook` only: no type here has a representation
# beside its repr (guest/host/_display.py), so no turn that shows one imports that module.
_PLAIN = frozenset(
    (int, float, complex, bool, str, bytes, bytearray, list, tuple, dict, set, frozenset,
     range, type, type(len), type(install), type(sys), type(Ellipsis))
)


# --- displays (guest/host/_display.py) --------------------------------------------------
# The module that makes them is imported when a program or turn first shows something:
# `display` is called, pyplot's `show` is, a turn's value may be rich (`_echo`), or pyplot
# holds figures at the end of a run or turn (`_figures_end`). Nothing else of a run looks
# at it, and nothing here imports matplotlib.


def display(*objs, include=None, exclude=None, metadata=None, raw=False):
    """Shows each object as a notebook would, beside the run's output: its MIME bundle
    (`text/plain`, `text/html`, `image/png`, ... from its `_repr_*_` methods; a
    matplotlib figure as a PNG). The builtin `display` of every run and session; the
    same as ``from host import display``."""
    _displays().display(*objs, include=include, exclude=exclude, metadata=metadata, raw=raw)


display.__module__ = "builtins"
# A builtin in every run and session, set as this module is imported: a preload image's
# build did it for its runs (a look in `install` cost each run 2,000 instructions).
_builtins["display"] = display


def _displays():
    """`host._display`, imported on first use."""
    module = sys.modules.get("host._display")
    if module is None:
        __import__("host._display")
        module = sys.modules["host._display"]
    return module


def _display_begin():
    """A run or turn starts: the displays' state of the last one is forgotten (the host's
    `cut`, the figures shown)."""
    module = sys.modules.get("host._display")
    if module is not None:
        module.begin()


def _figures_end():
    """A run or turn ends with figures open in pyplot (`_figs`, which the caller looks
    at): they become displays (with figures on), then are closed."""
    if "matplotlib.pyplot" not in sys.modules:
        return
    try:
        _displays().end()
    except Exception:  # noqa: BLE001 - host._display reports what failed; the run ends as it would
        pass


def _pyplot_show(*args, **kwargs):
    """`matplotlib.pyplot.show` in the guest: each open figure becomes a PNG display, then
    all are closed (the inline backend of notebooks); with `WASI_PYTHON_FIGURES=off`,
    matplotlib's own `show`."""
    return _displays().show(_pyplot_own_show, *args, **kwargs)


_pyplot_own_show = None  # matplotlib's `show`, which `_pyplot_show` replaced
# pyplot's open figures (`Gcf.figs`, a dict matplotlib changes in place) once pyplot is
# loaded (`_hook_pyplot`), else None: the end of a run or turn looks at it alone, a
# global where a look in sys.modules cost each run 5,000 instructions.
_figs = None


def _hook_pyplot(pyplot):
    """Puts `_pyplot_show` in `pyplot` in place of its `show` (once)."""
    global _pyplot_own_show, _figs
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    figs = getattr(getattr(helpers, "Gcf", None), "figs", None)
    if not isinstance(figs, dict):
        return
    _figs = figs
    own = getattr(pyplot, "show", None)
    if own is not None and own is not _pyplot_show:
        _pyplot_own_show = own
        _pyplot_show.__doc__ = own.__doc__
        pyplot.show = _pyplot_show


def _spec_then(name, path, target, then):
    """`name`'s spec, as the finders after this one find it, with a loader that calls
    `then(module)` once the module is executed (then leaves it its own loader): a
    program that never imports the module pays nothing, and pyplot's hook never
    imports pyplot itself."""
    me = sys.modules[__name__]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None) if finder is not me else None
        spec = find(name, path, target) if find is not None else None
        if spec is not None:
            if hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenLoader(spec.loader, then)
            return spec
    return None


class _ThenLoader:
    """A module's own loader, which `_spec_then` wraps."""

    def __init__(self, loader, then):
        self.loader = loader
        self.then = then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def _asyncio_without_self_pipe(selector_events):
    """asyncio's event loops run in the guest: a loop's self-pipe (a socket pair, which
    wakes it from other threads and signal handlers) cannot be made on wasm32-wasip1,
    where neither exists, so a loop goes without one (`asyncio.run` failed with
    ENOTSUP). host.tools' calls in parallel wait in the loop's selector (host/_aio.py)."""
    cls = selector_events.BaseSelectorEventLoop
    make, close = cls._make_self_pipe, cls._close_self_pipe
    if getattr(make, "_wasi_python", False):
        return

    def _make_self_pipe(self):
        try:
            make(self)
        except OSError:
            self._ssock = self._csock = None

    def _close_self_pipe(self):
        if self._ssock is not None:
            close(self)

    _make_self_pipe._wasi_python = True
    cls._make_self_pipe = _make_self_pipe
    cls._close_self_pipe = _close_self_pipe


def _urllib_through_host(request):
    """urllib's http and https handlers open their requests through the host
    (guest/host/http.py, docs/network.md): `urlopen`, and so `pandas.read_csv(url)`,
    work with the network the embedder gave, and raise URLError naming the host's
    refusal without one. The guest has no ssl module, so `HTTPHandler` takes https
    too; an `HTTPSHandler` a program makes (if ssl ever exists) goes the same way."""
    request.HTTPHandler.http_open = _urllib_open
    request.HTTPHandler.https_open = _urllib_open
    https = getattr(request, "HTTPSHandler", None)
    if https is not None:
        https.https_open = _urllib_open


def _urllib_open(handler, req):
    from host.http import open_request

    return open_request(req)


_reactor_refresh = None  # the reactor's own, which `_refresh` wraps
_seeded = False  # the generators were reseeded ahead of this run (`serve`)
_ahead = None  # `serve` refreshed ahead of this run: (the PYTHONTZPATH it saw,)


def _refresh(unbuffered):
    """The reactor's `_refresh` (run before each program and at a session's first
    turn: `random` and `numpy.random` reseeded, `logging._startTime`, `zoneinfo`'s
    path reset when PYTHONTZPATH is set, `-u`, stdout's line buffering), with both
    generators reseeded by `_reseed` instead: the reactor's `random.seed()` and
    `numpy.random.seed()` cost the guest 15 and 330 us.

    A guest on standby did all this ahead (`serve`); its run then sets only what
    depends on the moment, logging's start time, unless the run differs from what
    was done: `-u`, or another PYTHONTZPATH (then the whole again, as before). It
    saves a standby run 67,000 of the guest's instructions (about 10 %)."""
    global _ahead, _seeded
    ahead, _ahead = _ahead, None
    if ahead is not None and not unbuffered and ahead[0] == _environ().get("PYTHONTZPATH"):
        _seeded = False
        logging = sys.modules.get("logging")
        if logging is not None:
            logging._startTime = time.time()
        return
    modules = sys.modules
    rnd = modules.pop("random", None)
    nprand = modules.pop("numpy.random", None)
    try:
        _reactor_refresh(unbuffered)
    finally:
        if rnd is not None:
            modules["random"] = rnd
        if nprand is not None:
            modules["numpy.random"] = nprand
    if _seeded:  # by `serve`, ahead of this run
        _seeded = False
    else:
        _reseed(rnd, nprand)


def _environ():
    return os.environ


def _reseed(rnd, nprand):
    """Seeds `random`'s and numpy's global generators (both MT19937). From the preload
    image, both states are written whole with the host's entropy through views of their
    memory (`_rng_views`, made by `preload`): 5 KB in one door call (`_entropy`) and four
    copies, where seeding them costs the guest 250,000 instructions. Else each
    is seeded from 256 bits of entropy through its documented seeding by a number
    (`random.seed(int)`) and by an array of words (`numpy.random.seed(array)`); without
    an argument, each draws more entropy than its state can use and mixes it first:
    2,496 bytes, and a SeedSequence."""
    if rnd is None and nprand is None:
        return
    plain_view, numpy_view = _rng_views or (None, None)
    # Disjoint parts for the two generators: the first and last 2,496 or 32 bytes.
    entropy = _entropy() if _rng_views else os.urandom(64)
    if rnd is not None:
        if plain_view is not None:
            # The state (624 random words: all zero, the one state MT19937 cannot leave,
            # has odds of 2**-19968) and the position that makes the next draw generate
            # from it, as seeding leaves it.
            plain_view[:4] = _MT_FRESH
            plain_view[4:] = entropy[:_MT_BYTES]
        else:
            rnd.seed(int.from_bytes(entropy[:32]))
    numpy = sys.modules.get("numpy")
    if nprand is not None and numpy is not None:
        if numpy_view is not None:
            numpy_view[:_MT_BYTES] = entropy[-_MT_BYTES:]
            numpy_view[_MT_BYTES:] = _MT_FRESH
        else:
            nprand.seed(numpy.frombuffer(entropy[-32:], dtype=numpy.uint32))


def _entropy():
    """`2 * _MT_BYTES` bytes of the host's entropy, in one door call (host.rs,
    ENTROPY_FRAME): `os.urandom` takes one WASI call per 256 bytes, 24 us for these. The
    host's door answers it in every guest; `os.urandom`'s serve should it not."""
    try:
        entropy = _ask(_ENTROPY_FRAME)
    except Exception:  # noqa: BLE001 - a door that does not answer: os.urandom serves
        entropy = b""
    return entropy if len(entropy) == 2 * _MT_BYTES else os.urandom(2 * _MT_BYTES)


_ENTROPY_FRAME = b"\0wasi-python entropy"
# MT19937's state: 624 words of 32 bits, and a position in them; 624 (little-endian, as
# wasm is) makes the next draw generate the next 624 words first.
_MT_BYTES = 624 * 4
_MT_FRESH = (624).to_bytes(4, "little")
# In a preload image: writable views (bytes) of `random._inst`'s position and state
# (CPython's `RandomObject`: `int index; uint32_t state[624]`) and of numpy's global
# generator's state and position (`mt19937_state`: `uint32_t key[624]; int pos`), each
# found and checked by `preload` (`_find_rng_views`), or None. None elsewhere: a turn
# may have replaced a generator or left a cached Gaussian, which only seeding resets.
_rng_views = None


def _find_rng_views():
    """Where the image's two global generators keep their state, as writable memoryviews
    (either None where its module is not loaded or its state is not found as laid out
    above); None without numpy, whose arrays make the views. Each is found by searching
    the generator object's memory for the state its own `getstate()` reports, and checked
    by writing a known state through it and reading that back with `getstate()`; the
    generator is seeded after."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    rnd = sys.modules.get("random")
    nprand = sys.modules.get("numpy.random")
    views = (
        rnd and _rng_view(np, rnd.seed, id(rnd._inst), -1, lambda: rnd.getstate()[1]),
        nprand and _rng_view(np, nprand.seed, id(nprand.mtrand._rand._bit_generator), 624, lambda: _numpy_state(nprand)),
    )
    return views if views != (None, None) else None


def _numpy_state(nprand):
    """numpy's global generator's state and position, as `random.getstate()[1]` has them."""
    state = nprand.get_state()
    return (*state[1].tolist(), state[2])


def _rng_view(np, seed, at, position, state):
    """The writable view of a generator's position and state (in the order of `random`'s
    `getstate()[1]`: `position` -1) or state and position (`position` 624), whose object
    is at `at` and whose `state()` is the 625 words; None if not found or not as
    checked."""
    try:
        found = _state_at(np, at, state(), position)
        if found is None:
            return None
        view = _memory(np, found - 4 if position < 0 else found, 625, False)
        test = bytes(range(256)) * 9 + bytes(range(192))  # _MT_BYTES
        words = (*np.frombuffer(test, dtype="<u4").tolist(), 5)
        if position < 0:
            view[:4], view[4:] = (5).to_bytes(4, "little"), test
        else:
            view[:_MT_BYTES], view[_MT_BYTES:] = test, (5).to_bytes(4, "little")
        return view if tuple(state()) == words else None
    except Exception:  # noqa: BLE001 - not laid out as expected: seeding serves
        return None
    finally:
        seed(0)  # a state of the build's own, whatever happened above


def _state_at(np, at, words, position):
    """The address of a generator's 624-word state in the first 1 KB of the object at
    `at`: `words` is the state and then its position, which is in the word at `position`
    from the state (-1: just before, 624: just after); None if not there."""
    memory = _memory(np, at, 256 + 625, True)
    state, first = list(words[:624]), tuple(words[:8])
    for i in range(1, 256):
        if tuple(memory[i : i + 8].tolist()) == first:
            found = memory[i : i + 624].tolist() == state
            return at + 4 * i if found and memory[i + position] == words[624] else None
    return None


def _memory(np, at, words, readonly):
    """`words` 32-bit words of the guest's own memory from address `at`: a numpy array
    (`readonly`) or a writable memoryview of its bytes."""
    raw = type("_Raw", (), {})()
    raw.__array_interface__ = {"shape": (words,), "typestr": "<u4", "data": (at, readonly), "version": 3}
    array = np.asarray(raw)
    return array if readonly else memoryview(array).cast("B")


def preload(names):
    """Imports `names` one by one; a failure names its module on stderr and exits 3."""
    for name in names:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - any failure is reported by name
            import traceback

            sys.stderr.write(f"wasi-python-preload-failed: {name}\n")
            traceback.print_exc()
            sys.stderr.flush()
            raise SystemExit(3) from None
    _warm()
    if "matplotlib.pyplot" in sys.modules:
        _hook_pyplot(sys.modules["matplotlib.pyplot"])
    if "asyncio.selector_events" in sys.modules:
        _asyncio_without_self_pipe(sys.modules["asyncio.selector_events"])
    _bundle_loaded()
    _hold()
    global _host_call, _image_env, _rng_views
    _rng_views = _find_rng_views()
    _warm_run()
    _host_call = _door_call()
    _image_env = dict(os.environ)
    gc.collect()
    gc.freeze()
    global built_at
    built_at = __import__("time").monotonic()


def _bundle_loaded():
    """Reads the `host` package's bundle in the build, each module's code unmarshalled:
    a run that imports `host` then neither reads the file (about 40 KB through five WASI
    calls) nor unmarshals its modules, 0.2-0.5 ms of `from host import tools`. Executing
    a code object the image holds is what executing the same code unmarshalled anew is;
    the image's name follows the bundle (crates/runtime/src/snapshot.rs, `package_id`
    hashes the guest package's files)."""
    global _bundle
    try:
        _bundle = {name: marshal.loads(code) for name, code in _read_bundle().items()}
    except Exception:  # noqa: BLE001 - a damaged bundle: read as before, at import
        _bundle = None


def _hold():
    """Executes `host` and `host.tools` in the build, the latter without asking for
    tools (it does at each run's import: `exec_module`), and keeps both out of
    sys.modules: a run that imports them then neither executes their code (about 200
    of the 600 us of `from host import tools` in the guest) nor imports `_host` (100 us).
    Their state is what executing them anew makes: module-level definitions only, and
    `host._last_id` at 0; the image's name follows their code (`_bundle_loaded`). The
    modules their execution imports are taken out of sys.modules too, and put back by
    the run's import; should it import any but `_host` and `binascii` (C modules with
    no state of their own; json and the rest are the image's, or they are imported at
    each run as before), nothing is held."""
    global _held, _held_imports
    modules = sys.modules
    before = set(modules)
    held = {}
    try:
        for name in ("host", "host.tools"):
            spec = find_spec(name)
            if spec is None:
                return
            module = modules["_frozen_importlib"].module_from_spec(spec)
            if name == "host.tools":
                module._HOLD = True
            modules[name] = module
            exec_module(module)
            held[name] = module
        imported = set(modules) - before - set(held)
        if imported <= {"_host", "binascii"}:
            _held, _held_imports = held, {name: modules[name] for name in imported}
    except Exception:  # noqa: BLE001, S110 - imported at each run as before
        pass
    finally:
        for name in set(modules) - before:
            del modules[name]


def _warm():
    """Runs the first steps most programs take with a preloaded numpy or pandas once, in
    the build: their one-time set-up (caches, dtype and dispatch tables filled on first
    use) then lies in the snapshot instead of costing every run. numpy's steps import
    nothing; pandas' import `numpy.rec` and `pandas.io.formats.string`, which are then in
    `sys.modules` as in a program that takes them. Nothing else is left behind. (A
    figure is not drawn here: matplotlib's font would stay open, which no snapshot can
    carry.)"""
    np = sys.modules.get("numpy")
    pd = sys.modules.get("pandas")
    try:
        if np is not None:
            a = np.arange(10)
            a.sum(), a.mean(), a.std(), a * 2.5, a + a, np.sqrt(a), np.linspace(0, 1, 5)
            a.reshape(2, 5).T @ np.ones(2), np.array([1.5, 2.5]).max(), repr(a), a.astype(float).tolist()
        if pd is not None:
            df = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "c": ["x", "y", "x"]})
            df.a.sum(), df["b"].mean(), df[df.a > 1], df.groupby("c").sum(), df.describe(), repr(df)
    except Exception:  # noqa: BLE001 - a warm-up that fails leaves the build as it was
        pass


def _warm_run():
    """Takes a run's own steps twice in the build (`_run_c` with an empty program), then
    puts back what they changed: `sys.argv`, `__main__` and the sources registered for
    tracebacks. A code object's first run prepares it (its inline caches, the specialised
    instructions, the type caches it fills), and that is then in the snapshot: 40,000
    fewer instructions per run."""
    import linecache

    argv, main = sys.argv, sys.modules.get("__main__")
    try:
        for _ in range(2):
            _sources_kept(linecache, _run_c, [sys.executable, "-c", "pass"], dict(os.environ))
    except Exception:  # noqa: BLE001 - a warm-up that fails leaves the build as it was
        pass
    finally:
        sys.argv = argv
        if main is not None:
            sys.modules["__main__"] = main


def _sources_kept(linecache, work, *args):
    """`work(*args)`, with the sources registered for tracebacks put back as they were
    after it, whatever it registered (the warm-ups' throwaway programs)."""
    cache = linecache._interactive_cache
    sources = dict(cache)
    try:
        return work(*args)
    finally:
        cache.clear()
        cache.update(sources)


# The PYTHONTZPATH the last `restore` saw (zoneinfo's path was reset for it, or
# imported under it): a fork whose environment has the same skips the reset.
_tz_seen = object()  # none yet: the first restore resets


def restore(env, workdir, reseed=True):
    """Makes a run from a snapshot look like one that imported its modules itself.
    `reseed=False` leaves `random`, `numpy.random` and `logging._startTime` to the
    reactor's runner, which resets them before a program (`main`); `env=None` leaves
    the environment to it too."""
    if os.getcwd() != workdir:  # getcwd is wasi-libc's own string; chdir asks the host
        os.chdir(workdir)
    global _image_env, _tz_seen
    environ = os.environ
    # Each step below writes only what differs: a fork's memory is what it writes
    # (docs/snapshots.md), and most forks get the environment and time zone path their
    # snapshot had.
    changed = env is not None and dict(environ) != env
    if env is not None:
        _image_env = None
    if changed:
        # Through putenv/unsetenv: C's environment (getenv) follows.
        environ.clear()
        environ.update(env)
    modules = sys.modules
    if reseed:
        _reseed(modules.get("random"), modules.get("numpy.random"))
    if reseed and "logging" in modules:
        logging = modules["logging"]
        logging._startTime = time.time_ns() if type(logging._startTime) is int else time.time()
    # zoneinfo's path follows PYTHONTZPATH (else the build's constant): reset when that
    # differs from what the last restore saw, or the session had changed its
    # environment; a reset costs a fork some 80 pages of memory.
    tz = environ.get("PYTHONTZPATH")
    if "zoneinfo" in modules and (changed or tz != _tz_seen):
        modules["zoneinfo"].reset_tzpath()
        modules["zoneinfo"].ZoneInfo.clear_cache()
    _tz_seen = tz
    tempfile = modules.get("tempfile")
    if tempfile is not None:
        if tempfile.tempdir is not None:
            tempfile.tempdir = None
        if tempfile._name_sequence is not None:
            tempfile._name_sequence = None
    # A session snapshot that had imported `host.tools` holds the old host's tools: the
    # module is refilled in place (so names bound to it see the new ones) from this
    # host's list, one `list` frame; a host without tools leaves it empty.
    tools = modules.get("host.tools")
    if tools is not None:
        tools._discover(refused_empties=True)
    # matplotlib's config and cache folder keeps the name its import gave it (under the
    # build's HOME) but is not made in this run's HOME: a program that never plots must
    # leave no `.matplotlib` behind, as it would without the snapshot (README.md).


def main(argv=None, env=None, workdir=None, restored=False, compiled=None, in_main=False):
    """Runs a command line to its end. From a snapshot, `argv`, `env` and `workdir`
    come from the host (the turn's code); else from the `run` export's own. `compiled`:
    see `_run_c`. `in_main`: a run from a session's snapshot, whose program runs in the
    session's own `__main__` (its variables, functions and imports), whatever its form
    (`-c`, a script, `-m`, stdin), as CPython runs each in `__main__`'s namespace; a run
    from a preload image or without one gets a fresh `__main__`."""
    if env is not None and not restored:
        restore(None, workdir, reseed=False)
    install()
    if in_main:  # a session's snapshot may hold the displays' state; a fresh image does not
        _display_begin()
    argv = [sys.executable, *(sys.argv[1:] if argv is None else argv)]
    sys.orig_argv = argv
    if env is not None and len(argv) > 2 and argv[1] == "-c":
        code = _run_c(argv, env, compiled, in_main)
    else:
        if compiled == b"":  # asked for, and none to give: the offer ends here
            _ask(_OFFER_FRAME)
        # The runner sets the environment itself (os.environ, and C's through putenv).
        env = dict(os.environ) if env is None else env
        code = _in_session_main(argv, env) if in_main else _reactor.run(argv, env)
    finish()
    os._exit(code)


def _in_session_main(argv, env):
    """The reactor's `run` with the session's `__main__` as the one it runs the program
    in: its `_fresh_main` (a new module put in sys.modules) answers that module instead,
    for this call. A snapshot without a `__main__` (a session may delete it) gets a
    fresh one as before."""
    fresh = _reactor._fresh_main
    main = sys.modules.get("__main__")
    if main is not None:
        _reactor._fresh_main = lambda: main
    try:
        return _reactor.run(argv, env)
    finally:
        _reactor._fresh_main = fresh


def _run_c(argv, env, compiled=None, in_main=False):
    """The reactor's `run` for a command line `-c CODE [ARG ...]` from a snapshot, its
    commonest: the same steps (the environment, `_refresh`, a fresh `__main__`, `sys.argv`,
    CODE compiled as `<string>` and registered for tracebacks, run, the streams flushed;
    `SystemExit` and other exceptions ended and reported by the reactor's own functions),
    without its parsing of options, and with the environment left as it is when it already
    equals the run's: the snapshot's own, recorded by `preload` (`_image_env`). Setting it
    anew (`os.environ.clear()` then `update()`, through unsetenv and putenv) was 52,000
    of the 500,000 instructions of a run of `print(1)` on standby.

    `compiled` is the host's word on CODE's compiled form (crates/runtime/src/compiled.rs):
    None, compile it; the marshalled code object an earlier run from this image made of
    the same text, load it (200,000 instructions fewer for `print(1)`); empty, compile it
    and offer the code (`_compile_offered`).

    `in_main`: from a session's snapshot, CODE runs in the session's own `__main__`
    rather than a fresh one (`main`); its code is never the cache's (the host keeps
    programs per preload image only)."""
    global _image_env
    image_env, _image_env = _image_env, None
    if env != image_env:
        environ = os.environ
        environ.clear()
        environ.update(env)
    _refresh(False)
    source = argv[2]
    global _main_ahead
    main, _main_ahead = _main_ahead, None
    try:
        if in_main:
            main = sys.modules.get("__main__")
        if main is None or sys.modules.get("__main__") is not main:
            main = _reactor._fresh_main()
        sys.argv = ["-c", *argv[3:]]
        if compiled == b"":
            code = _compile_offered(source)
        else:
            code = compiled and _loaded(compiled) or compile(source, "<string>", "exec")
        linecache = sys.modules.get("linecache") or __import__("linecache")
        linecache._register_code(code, source, "<string>")
        exec(code, main.__dict__)
    except SystemExit as exc:
        return _reactor._exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as the reactor reports it
        _reactor._report(exc, False)
        return 1
    finally:
        _flush()
    return 0


def _loaded(compiled):
    """The code object `compiled` holds (marshalled); None if it holds none."""
    try:
        code = marshal.loads(compiled)
    except Exception:  # noqa: BLE001 - not a code object after all: compiled anew
        return None
    return code if type(code) is type(_loaded.__code__) else None


def _compile_offered(source):
    """Compiles `source` as `_run_c` does and offers the code to the host, which asked
    for it (crates/runtime/src/compiled.rs). The offer is the next frame, sent whatever
    happens and before anything of the program runs: the host takes the code from that
    frame only. It holds no code when compiling failed or showed a warning (a run that
    loads the code would not show it), or when a warning could not be seen: without the
    `warnings` module, CPython writes one to stderr itself."""
    offer = b""
    warnings = sys.modules.get("warnings")
    show = getattr(warnings, "_showwarnmsg", None)
    shown = []
    if show is not None:
        warnings._showwarnmsg = lambda message: (shown.append(message), show(message))
    try:
        code = compile(source, "<string>", "exec")
        if show is not None and not shown:
            offer = marshal.dumps(code)
        return code
    finally:
        if show is not None:
            warnings._showwarnmsg = show
        _ask(_OFFER_FRAME + offer)


# Named as the reactor's own frames, which its report leaves out of a traceback.
_run_c.__code__ = _run_c.__code__.replace(co_filename="<reactor>")
_compile_offered.__code__ = _compile_offered.__code__.replace(co_filename="<reactor>")
# The frame that offers a compiled program (crates/runtime/src/compiled.rs, OFFER_FRAME).
_OFFER_FRAME = b"\0wasi-python compiled "
# A fresh `__main__` a guest on standby made ahead for `_run_c` (23,000 instructions).
_main_ahead = None
# The environment a snapshot holds, as `preload` left it; None once a turn or `restore`
# may have changed it (then `_run_c` sets the run's environment as the reactor does).
_image_env = None


def serve():
    """A guest on standby (crates/runtime/src/standby.rs): what a run from a snapshot
    does before its program (`restore`, `install`, the reactor's `_refresh` with the
    generators reseeded, and a `-c` program's fresh `__main__`), done before any run asks;
    then a door call that the host answers, when a run takes this guest, with the run's
    `go` string, or, after 20 ms without a run, with `_WARM_ANSWER`: the warm-up runs
    again, so the run finds the caches warm, and the guest asks again."""
    global _seeded, _ahead, _main_ahead
    restore(None, "/work", reseed=False)
    install()
    _refresh(False)
    _ahead = (_environ().get("PYTHONTZPATH"),)
    _seeded = True
    _main_ahead = _reactor._fresh_main()
    _warm_calls()
    spec = _ask(_STANDBY_FRAME)
    while spec == _WARM_ANSWER:  # no run yet: the caches warmed again (standby.rs)
        _warm_calls()
        spec = _ask(_STANDBY_FRAME)
    go(spec, restored=True)


_STANDBY_FRAME = b"\0wasi-python standby"
_WARM_ANSWER = b"\0wasi-python warm"


def _warm_calls():
    """A guest on standby takes, ahead and on throwaway objects, the calls a run's path
    makes through function pointers (`go`'s parsing, loading and running code,
    registering it for tracebacks, a write to stdout, the streams flushed, the exit
    handlers' ordered dict, weak reference and lock, a young collection). Each such call
    target is set up in the instance's function table at its first call (wasmtime
    fills the table lazily, per instance): a run of `print(1)`, a program kept compiled,
    made 93 such first calls on its path, 30-50 us with cold caches; 14 are left. A
    new program's run (`print(N)`) made 40 without the sample compiled here, 15 with
    it. Nothing it does is left for the run: its objects are garbage, the sources it
    registered are taken back, what it wrote before the run the host drops
    (crates/runtime/src/standby.rs), and it imports nothing. A warm-up that fails is
    only a slower run."""
    try:
        argv, env, _, _, _ = _spec_parts(b"0\0/work\x002\0-c\0pass\0HOME\0/work")
        _ = (env != dict(env), (argv, env)[0], len(argv))  # as `_run_c` compares
        modules = sys.modules
        linecache = modules.get("linecache")
        compile("print(0)", "<string>", "exec")  # a new program's compiling
        code = _loaded(_WARM_CODE)
        if linecache is not None:
            _sources_kept(linecache, linecache._register_code, code, "pass", "<string>")
        exec(code, {"__builtins__": __builtins__})
        print()
        _flush()
        logging, weakref, thread = modules.get("logging"), modules.get("weakref"), modules.get("_thread")
        if logging is not None and weakref is not None and thread is not None:
            logging.shutdown([weakref.ref(_Quiet(thread.RLock()))])
        collections = modules.get("collections")
        if collections is not None:
            figures = collections.OrderedDict()
            list(figures.values())
            figures.clear()
        cycle = [{}, type(sys)("_")]  # a list, a dict and a module for the collector
        cycle[0]["c"] = cycle[1].c = cycle
        del cycle
        gc.collect(1)  # the young: a full collection costs the making 30 us more
    except Exception:  # noqa: BLE001, S110 - the run does the same again, slower
        pass


# The code `_warm_calls` loads and runs as a kept program's is loaded (`_loaded`):
# marshalled once, at import.
_WARM_CODE = marshal.dumps(compile("pass", "<string>", "exec"))


class _Quiet:
    """A stand-in for logging's last-resort handler at `logging.shutdown` (`_warm_calls`)."""

    def __init__(self, lock):
        self.lock = lock

    stream = property(lambda self: sys.stderr)

    def acquire(self):
        self.lock.acquire()

    def release(self):
        self.lock.release()

    def flush(self):
        with self.lock:
            if self.stream and hasattr(self.stream, "flush"):
                self.stream.flush()

    def close(self):
        pass


def _ask(frame):
    """The host's answer to one of our frames (host.rs)."""
    call = _host_call or _door_call()
    return call(frame)


def _door_call():
    """`_host.call`, the door, with `_host` left out of sys.modules as in a program that
    never imports it. A snapshot keeps it (`preload`): importing the builtin module cost
    each run 60-120 us of import machinery."""
    modules = sys.modules
    had_host = "_host" in modules
    import _host

    if not had_host:
        del modules["_host"]
    return _host.call


def go(spec=None, restored=False):
    """A run from a snapshot (crates/runtime/src/run.rs, `go_spec`): `spec` holds the
    host's word on the program's compiled form (empty, `0`: asked for, or the length of
    the marshalled code at its end; see `_run_c`), or `m` for a run from a session's
    snapshot, whose program runs in that `__main__` (`main`), the working folder, the number of
    arguments, the arguments, then the environment's names and values, separated by NUL
    (which none of them holds), then that code; None asks the host for it
    (`_GO_FRAME`). The host hands it through the door rather than in the turn's code,
    which the guest would compile: 35 us for the string literal, 120 us more through
    the reactor's parsing of a statement."""
    if spec is None:
        spec = _ask(_GO_FRAME)
    argv, env, workdir, compiled, in_main = _spec_parts(spec)
    main(argv, env, workdir, restored, compiled, in_main)


def _spec_parts(spec):
    """`go`'s spec as (arguments, environment, working folder, compiled code or None,
    whether the program runs in the snapshot's `__main__`)."""
    head, _, spec = spec.partition(b"\0")
    compiled = None
    in_main = head == _IN_MAIN
    if head and not in_main:
        end = len(spec) - int(head)
        spec, compiled = spec[:end], spec[end:]
    parts = spec.decode().split("\0")
    n = int(parts[1])
    env = parts[2 + n :]
    return parts[2 : 2 + n], dict(zip(env[::2], env[1::2])), parts[0], compiled, in_main


# The spec's head for a run from a session's snapshot (run.rs, `IN_MAIN`).
_IN_MAIN = b"m"


def finish():
    """What interpreter finalisation does that a program can observe: atexit handlers,
    `__main__` torn down so unclosed files flush, the streams flushed. The end of a run,
    and a session's close: the rest of CPython's teardown (hundreds of milliseconds with
    pandas loaded) is skipped, since the host drops the instance anyway. First, the
    figures pyplot holds open become displays (`_figures_end`), as at a turn's end."""
    if _figs:
        _figures_end()
    atexit = sys.modules.get("atexit") or __import__("atexit")
    atexit._run_exitfuncs()
    main = sys.modules.get("__main__")
    if main is not None:
        main.__dict__.clear()
    gc.collect()
    _flush()


def _flush():
    """Flushes stdout and stderr, as the reactor does after a program and CPython at
    exit: a closed or broken stream loses nothing more."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream loses nothing more
            pass
