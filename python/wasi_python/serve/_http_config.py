"""The settings of ``wasi-python serve http``: the limits it shares with ``serve mcp`` (a
`ServeConfig`, checked by the same code) and its own (guests, queue, body cap, batch size,
shutdown grace, the Ray backend), from the defaults, then a config file, then the command
line (`HttpConfig`, `add_arguments`, `config_from`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ._config import ConfigError, ServeConfig, add_guest_arguments, checked, given_settings, help_text, positive

__all__ = ["HttpConfig", "add_arguments", "config_from", "DEFAULT_LISTEN", "BUSY_STATUSES"]

DEFAULT_LISTEN = "127.0.0.1:8080"
#: What a request past the queue is answered: 503 (the default) or 429 make SandboxFusion's
#: client retry; verl retries only 504.
BUSY_STATUSES = (429, 503, 504)


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class HttpConfig:
    """What ``serve http`` runs with. ``serve`` holds the limits shared with ``serve mcp``
    (``deadline_s`` also caps a request's own timeout; ``memory_bytes`` and ``output_bytes``
    cap a request's own asks; ``http`` is where it listens; ``token`` the bearer token)."""

    serve: ServeConfig = field(default_factory=lambda: ServeConfig(http=("127.0.0.1", 8080)))
    #: Guests running at once (in-process backend): ``set_async_workers``.
    workers: int = field(default_factory=_cpus)
    #: Runs admitted beyond those the guests are running; past it, ``busy_status``.
    max_queue: int = 256
    busy_status: int = 503
    #: A request body's cap; a larger Content-Length is refused before anything is read.
    max_body_bytes: int = 16 << 20
    #: Programs in one ``/v1/batch``.
    max_batch: int = 10_000
    #: After SIGTERM: how long runs in flight may go on before they are cancelled.
    shutdown_grace_s: float = 10.0
    #: None: in-process; "auto", "local" or a cluster's address: a `SandboxPool`.
    ray: Optional[str] = None
    #: The pool's actors (None: the cluster's CPUs over ``ray_cpus_per_actor``).
    ray_actors: Optional[int] = None
    ray_cpus_per_actor: int = 1


_OWN = {f.name for f in fields(HttpConfig)} - {"serve"}
#: The settings of `ServeConfig` that mean something here.
_SHARED = (
    "deadline_s", "memory_bytes", "output_bytes", "preload", "mounts", "max_sessions",
    "session_idle_s", "session_lifetime_s", "token", "network_allow",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``serve http``; every default shown is the one in force. A value
    given here beats the config file's."""
    d = HttpConfig()
    s = d.serve
    p.add_argument("--config", metavar="FILE", help="a JSON (or, on Python 3.11+, TOML) file of these settings by their long names with underscores, such as {\"deadline_s\": 30, \"max_queue\": 512}")
    p.add_argument("--listen", metavar="HOST:PORT", help=help_text("where to listen; port 0 picks a free one, printed on stderr", DEFAULT_LISTEN))
    p.add_argument("--token", metavar="TOKEN", help="require 'Authorization: Bearer TOKEN' on every request but /healthz and /v1/ping; needed to listen on any address but loopback (also $WASI_PYTHON_MCP_TOKEN, as serve mcp)")
    p.add_argument("--deadline-s", type=float, help=help_text("each run's wall-clock deadline, and the most a request's run_timeout or deadline_s may ask", s.deadline_s))
    p.add_argument("--memory-bytes", type=int, help=help_text("each guest's memory cap, and the most a request's memory_limit_MB or memory_bytes may ask", s.memory_bytes))
    add_guest_arguments(p, s)
    p.add_argument("--max-sessions", type=int, help=help_text("sessions (/v1/sessions) alive at once", s.max_sessions))
    p.add_argument("--workers", type=int, help=help_text("guests running at once (in-process backend)", f"the CPUs, {d.workers}"))
    p.add_argument("--max-queue", type=int, help=help_text("runs waiting for a guest; past it a request is answered --busy-status", d.max_queue))
    p.add_argument("--busy-status", type=int, choices=BUSY_STATUSES, help=help_text("the HTTP status past the queue (with Retry-After: 1)", d.busy_status))
    p.add_argument("--max-body-bytes", type=int, help=help_text("a request body's cap (413 past it, refused from Content-Length before reading)", d.max_body_bytes))
    p.add_argument("--max-batch", type=int, help=help_text("programs in one /v1/batch", d.max_batch))
    p.add_argument("--shutdown-grace-s", type=float, help=help_text("after SIGTERM, how long runs in flight may finish before they are cancelled", d.shutdown_grace_s))
    p.add_argument("--ray", metavar="auto|local|ADDRESS", help="run the guests on a wasi_python.ray SandboxPool: 'auto' joins the running cluster, ADDRESS the cluster there, 'local' starts one in this process (needs the ray extra; default: in-process)")
    p.add_argument("--ray-actors", type=int, help=help_text("the pool's actors", "the cluster's CPUs over --ray-cpus-per-actor"))
    p.add_argument("--ray-cpus-per-actor", type=int, help=help_text("guests at once per actor (and the CPUs each reserves)", d.ray_cpus_per_actor))


def config_from(ns: argparse.Namespace) -> HttpConfig:
    """The settings of a parsed command line, over its config file's, over the defaults."""
    return checked_http(given_settings(ns, set(_SHARED) | _OWN | {"listen"}))


def checked_http(given: dict[str, Any]) -> HttpConfig:
    """An `HttpConfig` of settings by name, each checked (the shared ones by ``serve mcp``'s
    own checks, the loopback rule for the token included)."""
    shared = {k: v for k, v in given.items() if k in _SHARED}
    shared["http"] = given.get("listen") or DEFAULT_LISTEN
    out: dict[str, Any] = {"serve": checked(shared)}
    for name in ("workers", "max_body_bytes", "max_batch"):
        if given.get(name) is not None:
            out[name] = positive(name, given[name], int)
    if given.get("max_queue") is not None:
        out["max_queue"] = positive("max_queue", given["max_queue"], int, zero=True)
    if given.get("shutdown_grace_s") is not None:
        out["shutdown_grace_s"] = positive("shutdown_grace_s", given["shutdown_grace_s"], float, zero=True)
    if given.get("busy_status") is not None:
        status = given["busy_status"]
        if isinstance(status, bool) or status not in BUSY_STATUSES:
            raise ConfigError(f"busy_status: one of {', '.join(map(str, BUSY_STATUSES))}, not {status!r}")
        out["busy_status"] = int(status)
    ray = given.get("ray")
    if ray is not None:
        if not isinstance(ray, str) or not ray.strip():
            raise ConfigError(f"ray: 'auto', 'local' or a cluster's address, not {ray!r}")
        out["ray"] = ray.strip()
    if given.get("ray_actors") is not None:
        out["ray_actors"] = positive("ray_actors", given["ray_actors"], int)
    if given.get("ray_cpus_per_actor") is not None:
        out["ray_cpus_per_actor"] = positive("ray_cpus_per_actor", given["ray_cpus_per_actor"], int)
    if out.get("ray") is None and ("ray_actors" in out or "ray_cpus_per_actor" in out):
        raise ConfigError("ray_actors and ray_cpus_per_actor need --ray")
    return HttpConfig(**out)
