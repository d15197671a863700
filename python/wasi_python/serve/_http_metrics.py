"""The Prometheus metrics of ``serve http`` (`Metrics`), on the standard client library
(``prometheus_client``) in a registry of the server's own: runs by API and outcome, their
latency, requests refused, and gauges read when scraped (queue depth, runs in flight,
sessions)."""

from __future__ import annotations

from typing import Callable, Optional

from .. import Completed

__all__ = ["Metrics", "outcome_of"]

#: Seconds from a request's admission to its answer.
BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def outcome_of(done: Optional[Completed]) -> str:
    """A run's outcome as a label: ``ok``, ``exit_nonzero``, the trap (``deadline``,
    ``memory``, ``cancelled``, ...), or ``shutdown`` for a run the server cancelled before
    it could answer (None)."""
    if done is None:
        return "shutdown"
    if done.trapped is not None:
        return done.trapped.replace(" ", "_")
    return "ok" if done.exit_code == 0 else "exit_nonzero"


class Metrics:
    """The server's metrics; `render` is the text a scrape gets."""

    def __init__(self, queued: Callable[[], float], in_flight: Callable[[], float], sessions: Callable[[], float]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.runs = Counter(
            "wasi_python_runs", "Runs (and session turns) answered, by API and outcome.",
            ["api", "outcome"], registry=self.registry,
        )
        self.latency = Histogram(
            "wasi_python_request_seconds", "Seconds from a run's admission to its answer, queueing included.",
            ["api"], buckets=BUCKETS, registry=self.registry,
        )
        self.refused = Counter(
            "wasi_python_refused_requests", "Requests refused before any run, by reason.",
            ["reason"], registry=self.registry,
        )
        Gauge("wasi_python_queue_depth", "Runs admitted and waiting for a guest.", registry=self.registry).set_function(queued)
        Gauge("wasi_python_runs_in_flight", "Runs admitted and not yet answered.", registry=self.registry).set_function(in_flight)
        Gauge("wasi_python_sessions", "Sessions alive.", registry=self.registry).set_function(sessions)

    def ran(self, api: str, done: Optional[Completed], seconds: float, outcome: Optional[str] = None) -> None:
        """A run answered: its outcome (`outcome_of`, unless given: ``server_error`` for a
        run the backend failed) and its seconds since admission."""
        self.runs.labels(api, outcome or outcome_of(done)).inc()
        self.latency.labels(api).observe(seconds)

    def refuse(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
