"""OpenTelemetry spans, when the embedder uses OpenTelemetry (the ``otel`` extra).

A span per run, session turn, tool call, file-provider call and network request, each
under the caller's current span (a tool's, a provider's and a request's under their run's),
with the run's limits and outcome as attributes.

Nothing is imported for it: spans are made only when ``opentelemetry.trace`` is already
imported (the embedder's own set-up imported it) and a real tracer provider is set. A
program that never touches OpenTelemetry pays one ``sys.modules`` lookup per run; one
with the API installed and no provider set pays an ``isinstance`` more.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional

__all__ = ["tracer", "span", "end_run"]

_SCOPE = "wasi_python"


def tracer() -> Any:
    """The tracer spans go to, or None when nobody traces (see the module's text)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        provider = trace.get_tracer_provider()
        # The API's stand-ins: no SDK (or another provider) was set, so a span goes nowhere.
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
        return provider.get_tracer(_SCOPE)
    except Exception:  # noqa: BLE001 - tracing never fails a run
        return None


def _attr(value: Any) -> Any:
    """An attribute value OpenTelemetry takes (str, bool, int, float), or None to skip."""
    if value is None:
        return None
    if isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        # Attributes are 64-bit signed; a larger count is said as text.
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
        return list(value)
    return str(value)


def attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in values.items():
        a = _attr(v)
        if a is not None:
            out[f"wasi_python.{k}"] = a
    return out


class span:
    """``with span(name, values) as s``: a span named ``name`` made current for the body
    (``s``), or nothing (``s`` is None) when nobody traces. Pass ``tracer_`` when it was
    already looked up (a run's calls share their run's). An exception leaving the body is
    recorded on the span, which ends, and goes on. (A class, not a
    ``contextlib.contextmanager``: a new process does not import ``contextlib`` for it.)"""

    __slots__ = ("_name", "_values", "_tracer", "_cm", "_span")

    def __init__(self, name: str, values: Mapping[str, Any] = {}, tracer_: Any = None) -> None:
        self._name, self._values, self._tracer = name, values, tracer_
        self._cm: Any = None
        self._span: Any = None

    def __enter__(self) -> Optional[Any]:
        t = self._tracer if self._tracer is not None else tracer()
        if t is None:
            return None
        try:
            cm = t.start_as_current_span(self._name, attributes=attributes(self._values), record_exception=False, set_status_on_exception=False)
            self._span = cm.__enter__()
        except Exception:  # noqa: BLE001 - tracing never fails a run
            return None
        self._cm = cm
        return self._span

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        cm, self._cm = self._cm, None
        if cm is None:
            return
        if kind is not None:
            _error(self._span, error if error is not None else kind())
        cm.__exit__(None, None, None)


def _error(s: Any, e: BaseException) -> None:
    try:
        from opentelemetry.trace import Status, StatusCode

        s.record_exception(e)
        s.set_status(Status(StatusCode.ERROR, type(e).__name__))
    except Exception:  # noqa: BLE001
        pass


def set_outcome(s: Any, values: Mapping[str, Any], error: Optional[str] = None) -> None:
    """Sets a finished call's outcome on its span (None: nothing traced)."""
    if s is None:
        return
    try:
        s.set_attributes(attributes(values))
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            s.set_status(Status(StatusCode.ERROR, error))
    except Exception:  # noqa: BLE001
        pass


def end_run(s: Any, done: Any) -> None:
    """Puts a ``Completed``'s outcome on its run's (or turn's) span."""
    if s is None:
        return
    error = None
    if done.trapped is not None:
        error = f"trapped: {done.trapped}"
    elif done.exit_code not in (0, None):
        error = f"exit code {done.exit_code}"
    values: dict[str, Any] = {
        "exit_code": done.exit_code,
        "trapped": done.trapped,
        "truncated": list(done.truncated),
        "duration_s": done.duration_s,
        "fuel_used": done.fuel_used,
        "stdout_bytes": len(done.stdout),
        "stderr_bytes": len(done.stderr),
        "file_bytes_written": getattr(done, "file_bytes_written", None),
    }
    if done.tools is not None:
        values["tool_frames"] = done.tools.frames
    files = getattr(done, "files", None)
    if files is not None:
        values["file_calls"] = getattr(files, "total", None)
    displays = getattr(done, "displays", None)
    if displays:
        values["displays"] = len(displays)
    set_outcome(s, values, error)
