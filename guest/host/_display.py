"""Display data as Jupyter defines it, made in the guest and handed to the host.

`display(obj)` (``from host import display``, and the builtin `display` our boot module
puts in every run and session) builds the object's MIME bundle by IPython's rules: its
`_repr_mimebundle_` first, then each `_repr_*_` method for the types the bundle lacks, in
IPython's order, and `text/plain` from `repr`. A matplotlib figure is also an
`image/png`, drawn at the figures' dpi. The bundle crosses as one control frame (the
boot module's `host.call`): ``\\0wasi-python display `` and the JSON object
``{"data": {mime: value}, "metadata": {...}}``, Jupyter's display_data content, binary
types (PNG, JPEG, PDF) as base64 text. The host answers `kept`, `cut` (past its cap: this
run or turn sends no more) or `bad` (a frame it refused); a host that does not know the
frame (an older one: no answer, or a tool door's error) gets none again in this run or
turn, and each `display()` or `plt.show()` then prints its `text/plain` to stdout, as
IPython's `display` does outside a notebook (a turn's result and the figures left open at
an end print nothing more: a program printed neither before displays).

matplotlib, the inline habit of notebooks (`show`, `end`): `plt.show()` and the figures
left open at the end of a run or a session's turn become PNG displays, then are closed.
`WASI_PYTHON_FIGURES` sets it: `on` (the default, 100 dpi), `off` (plt.show() and open
figures are left as matplotlib has them), or a dpi (`150`). Nothing here imports
matplotlib: the boot module calls `end` only when pyplot holds figures.

A session turn whose value has a rich representation (anything beside `text/plain`) gives
it as the turn's result display (`result`), marked `{"wasi_python": {"result": true}}` in
its metadata; its text is printed by `sys.displayhook` as before.
"""

import sys

__all__ = ["display"]

# The frame's head (crates/runtime/src/control.rs; docs/protocol.md, "Control frames").
_FRAME = b"\0wasi-python display "
_KEPT, _CUT, _BAD = b"kept", b"cut", b"bad"

# IPython's formatters after text/plain, in the order DisplayFormatter asks them; each
# MIME type with the method that gives it. Javascript is left out.
_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("application/pdf", "_repr_pdf_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)
# Types whose data are bytes, carried as base64 text (a str given for one is taken as
# base64): `image/*` but SVG, `audio/*`, `video/*` and these two, as the host reads them
# (crates/runtime/src/display.rs).
_BINARY = frozenset(("application/pdf", "application/octet-stream"))
_BINARY_KINDS = ("image/", "audio/", "video/")
# An attribute no object has: one that claims it claims every name (IPython's canary).
_CANARY = "_ipython_canary_method_should_not_exist_"

# The figures' setting, and its default.
_SETTING = "WASI_PYTHON_FIGURES"
_DPI = 100
_MAX_DPI = 1000

# This run's or turn's state (`begin` resets it): the host said `cut`; no host takes the
# frame (print text instead); the figures displayed, by id, so `end` does not show them
# twice (they are open until then).
_cut = False
_unheard = False
_shown = set()


def display(*objs, include=None, exclude=None, metadata=None, raw=False):
    """Displays each object as a notebook would: its MIME bundle (`text/plain` from
    `repr`, `text/html` from `_repr_html_`, ..., or its `_repr_mimebundle_`; a matplotlib
    figure as a PNG) goes to the host beside the run's output. `include`/`exclude`: the
    MIME types to keep or leave out; `metadata`: merged into each display's metadata;
    `raw=True`: each object is already a bundle ({mime: data}). Without a host that takes
    displays, each prints its `text/plain`."""
    for obj in objs:
        if raw:
            if type(obj) is not dict:
                raise TypeError(f"display(raw=True) takes MIME bundles (dict), not {type(obj).__name__}")
            data, meta = _cleaned(obj), {}
        else:
            data, meta = bundle(obj, include, exclude)
        if metadata:
            meta.update(metadata)
        if data:
            _send(data, meta)


def bundle(obj, include=None, exclude=None, plain=True):
    """(data, metadata): `obj`'s MIME bundle by IPython's rules (`DisplayFormatter.format`),
    every value JSON-ready (bytes as base64 text). A method that raises or returns the wrong
    type is reported on stderr and its type left out, as IPython does. `plain=False`
    leaves `text/plain` to the caller (`result`: `repr` only for a rich value)."""
    data, meta = {}, {}
    claims_all = _claims_every_name(obj)
    method = None if claims_all else _method(obj, "_repr_mimebundle_")
    if method is not None:
        got = _called(obj, "_repr_mimebundle_", method, include=include, exclude=exclude)
        given, given_meta = got if type(got) is tuple and len(got) == 2 else (got, None)
        if given is not None and not isinstance(given, dict):
            _wrong(obj, "_repr_mimebundle_", given, "a dict")
        elif given is not None:
            data.update(_cleaned(given))
            if isinstance(given_meta, dict):
                meta.update(given_meta)
        if include:
            data = {k: v for k, v in data.items() if k in include}
            meta = {k: v for k, v in meta.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
            meta = {k: v for k, v in meta.items() if k not in exclude}
    if plain and "text/plain" not in data and _wanted("text/plain", include, exclude):
        try:
            data["text/plain"] = repr(obj)
        except Exception:  # noqa: BLE001 - reported, as IPython reports a formatter's error
            _report(obj, "__repr__")
    figure = _is_figure(obj)
    for mime, name in _METHODS:
        if mime in data or not _wanted(mime, include, exclude):
            continue
        if mime == "image/png" and figure:
            png = _figure_png(obj, settings()[1])
            if png is not None:
                data[mime] = png
            continue
        method = None if claims_all else _method(obj, name)
        if method is None:
            continue
        got = _called(obj, name, method)
        value, value_meta = got if type(got) is tuple and len(got) == 2 else (got, None)
        if value is None:
            continue
        value = _checked(obj, name, mime, value)
        if value is None:
            continue
        data[mime] = value
        if value_meta is not None:
            meta[mime] = value_meta
    return data, meta


def result(value):
    """A session turn's last expression's value (the boot module's `_echo`, after
    `sys.displayhook` printed it): its bundle as the turn's result display, when it has
    more than `text/plain`."""
    try:
        if _plain_only(value):
            return
        data, meta = bundle(value, plain=False)
        if not data or list(data) == ["text/plain"]:
            return  # no rich form after all (pandas' Series: a `_repr_latex_` that gives None)
        if "text/plain" not in data:
            text = _text(value)
            if text is not None:
                data = {"text/plain": text, **data}
    except Exception:  # noqa: BLE001 - the echo printed; a broken representation is reported
        _report(value, "the result's representation")
        return
    meta["wasi_python"] = {"result": True}
    _send(data, meta, echo=False)  # its text is printed already


def _plain_only(value):
    """Whether `value` has no representation beside text: no `_repr_*_` method on its type
    and not a figure (the cheap look before `bundle`)."""
    if _is_figure(value):
        return False
    kind = type(value)
    if getattr(kind, "_repr_mimebundle_", None) is not None:
        return False
    return all(getattr(kind, name, None) is None for _, name in _METHODS)


# --- matplotlib ------------------------------------------------------------------------


def settings():
    """(figures shown, dpi) from `WASI_PYTHON_FIGURES`: `on` or unset (100 dpi), `off`,
    or a dpi from 1 to 1000; anything else is the default, said once on stderr."""
    global _said
    raw = _environ().get(_SETTING)
    if raw is None:
        return True, _DPI
    word = raw.strip().lower()
    if word in ("", "on", "1", "true", "yes"):
        return True, _DPI
    if word in ("off", "0", "false", "no"):
        return False, _DPI
    try:
        dpi = float(word)
    except ValueError:
        dpi = 0.0
    if 1 <= dpi <= _MAX_DPI:
        return True, int(dpi) if dpi == int(dpi) else dpi
    if not _said:
        _said = True
        sys.stderr.write(f"{_SETTING}={raw!r} is not on, off or a dpi from 1 to {_MAX_DPI}: figures are shown at {_DPI} dpi\n")
    return True, _DPI


_said = False


def _environ():
    return sys.modules["os"].environ


def show(own_show, *args, **kwargs):
    """`matplotlib.pyplot.show` in the guest (the boot module's `_pyplot_show`, whose
    original is `own_show`): each open figure displayed as a PNG, then all closed, as the
    inline backend of notebooks does; with figures off, matplotlib's own `show`."""
    on, dpi = settings()
    if not on:
        return own_show(*args, **kwargs)
    _show_open(dpi, skip_shown=False, echo=True)
    return None


def end():
    """The end of a run or turn (the boot module, when pyplot holds figures): with figures
    on, each open figure not displayed yet in it becomes a PNG display, then all are
    closed; with figures off, they stay open."""
    on, dpi = settings()
    if on:
        _show_open(dpi, skip_shown=True, echo=False)
    _shown.clear()


def begin():
    """The start of a run or turn: the host's `cut`, a host that does not take displays,
    and the figures displayed belong to the last one."""
    global _cut, _unheard
    _cut = _unheard = False
    _shown.clear()


def _show_open(dpi, skip_shown, echo):
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if helpers is None or pyplot is None:
        return
    try:
        managers = helpers.Gcf.get_all_fig_managers()
        for manager in managers:
            figure = manager.canvas.figure
            if skip_shown and id(figure) in _shown:
                continue
            text = _text(figure)
            png = _figure_png(figure, dpi)
            data = {"text/plain": text} if text is not None else {}
            if png is not None:
                data["image/png"] = png
            elif not _unheard:
                continue  # drawing it failed (reported), or the host cut the displays
            _send(data, {}, echo)
    finally:
        try:
            pyplot.close("all")
        except Exception:  # noqa: BLE001 - reported: the figures stay open
            _report(pyplot, "close('all')")


def _is_figure(obj):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def _figure_png(figure, dpi):
    """The figure drawn as PNG at `dpi` (its size in inches times `dpi`, no tight box),
    base64; None if drawing it failed (reported) or the host cut this run's displays."""
    if _cut or _unheard:
        return None  # the text alone is printed, or nothing is kept: no drawing
    try:
        import io

        out = io.BytesIO()
        figure.canvas.print_figure(
            out, format="png", dpi=dpi, facecolor=figure.get_facecolor(), edgecolor=figure.get_edgecolor()
        )
    except Exception:  # noqa: BLE001 - reported, as IPython reports a formatter's error
        _report(figure, "drawing it as PNG")
        return None
    _shown.add(id(figure))
    return _base64(out.getvalue())


# --- the bundle's values ------------------------------------------------------------------


def _claims_every_name(obj):
    if isinstance(obj, type):
        return True  # a class: its methods want an instance (IPython asks none)
    try:
        return getattr(obj, _CANARY, None) is not None
    except Exception:  # noqa: BLE001 - an object whose getattr fails offers nothing
        return True


def _method(obj, name):
    try:
        method = getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - as IPython's get_real_method
        return None
    return method if callable(method) else None


def _called(obj, name, method, **kwargs):
    try:
        return method(**kwargs)
    except Exception:  # noqa: BLE001 - reported, as IPython reports a formatter's error
        _report(obj, name)
        return None


def _checked(obj, name, mime, value):
    """A method's value as the bundle carries it, or None (reported) if of the wrong type."""
    if _binary(mime):
        if isinstance(value, (bytes, bytearray, memoryview)):
            return _base64(bytes(value))
        if type(value) is str:
            return value
        return _wrong(obj, name, value, "bytes")
    if mime == "application/json":
        if isinstance(value, (dict, list)):
            return value if _json_ready(value) else _wrong(obj, name, value, "JSON")
        return _wrong(obj, name, value, "a dict or list")
    if type(value) is str:
        return value
    return _wrong(obj, name, value, "str")


def _cleaned(given):
    """A bundle from `_repr_mimebundle_` or `raw=True`, its values JSON-ready: bytes as
    base64 (binary types) or UTF-8 text; values JSON cannot carry left out (reported)."""
    data = {}
    for mime, value in given.items():
        if type(mime) is not str:
            continue
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)
            value = _base64(value) if _binary(mime) else value.decode("utf-8", "replace")
        elif not _json_ready(value):
            _wrong(given, mime, value, "JSON")
            continue
        data[mime] = value
    return data


def _binary(mime):
    return mime in _BINARY or (mime.startswith(_BINARY_KINDS) and mime != "image/svg+xml")


def _json_ready(value):
    try:
        _encode(value)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _wanted(mime, include, exclude):
    return (not include or mime in include) and (not exclude or mime not in exclude)


def _text(obj):
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 - reported, as IPython reports a formatter's error
        _report(obj, "__repr__")
        return None


def _base64(raw):
    from binascii import b2a_base64

    return b2a_base64(raw, newline=False).decode("ascii")


def _encode(value):
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _report(obj, what):
    """A representation that failed, on stderr with its traceback (IPython shows it too)."""
    try:
        import traceback

        kind = type(obj).__name__
        sys.stderr.write(f"display: {what} of a {kind} failed; left out of its display\n")
        traceback.print_exc()
    except Exception:  # noqa: BLE001, S110 - nothing more to say it with
        pass


def _wrong(obj, name, value, wanted):
    sys.stderr.write(f"display: {name} of a {type(obj).__name__} gave {type(value).__name__}, not {wanted}; left out\n")


# --- the frame ------------------------------------------------------------------------------


def _send(data, meta, echo=True):
    """Hands one display to the host (after flushing stdout and stderr, so it lands after
    what was printed before it); prints its text instead (`echo`) when no host takes
    displays or the host refused the frame. A turn's result (printed by its echo) and the
    figures left open at an end (which a program without displays never printed) are not
    printed."""
    global _cut, _unheard
    if _cut:
        return
    if not _unheard:
        try:
            body = _encode({"data": data, "metadata": meta})
        except (ValueError, TypeError, RecursionError):
            body = _encode({"data": data, "metadata": {}})  # metadata JSON cannot carry: dropped
        _flush()
        answer = _call(_FRAME + body.encode("utf-8", "replace"))
        if answer == _KEPT:
            return
        if answer == _CUT:
            _cut = True
            return
        if answer != _BAD:
            _unheard = True
    text = data.get("text/plain")
    if echo and type(text) is str:
        print(text)


def _call(frame):
    """The host's answer to `frame`, or None when no host answers (-1/-2: an OSError)."""
    boot = sys.modules.get("_wasi_python_boot")
    try:
        if boot is not None:
            return boot._ask(frame)
        import _host

        return _host.call(frame)
    except (OSError, ImportError):
        return None


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed or broken stream loses nothing more
            pass
