"""The HTTP service of ``wasi-python serve http`` (Starlette on uvicorn): SandboxFusion's
``POST /run_code``; our ``POST /v1/run``, ``POST /v1/batch`` (NDJSON, in order, as the runs
finish) and ``/v1/sessions``; ``/healthz`` and Prometheus ``/metrics``. `Service` admits
each run (`Admission`), runs it on the backend and answers it; `Gate` checks the token,
the body's size and the shutdown before any endpoint; `serve` listens and, on SIGTERM,
drains: no new runs, those in flight finish within the grace or are cancelled, each
answered."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hmac
import json
import logging
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from .. import Completed, MemoryFiles, Mount
from ._http_admission import Admission, Stopping
from ._http_backend import Backend, BackendSession, LocalBackend, RayBackend, SessionGone, session_keywords
from ._config import ConfigError
from ._http_config import HttpConfig, config_from
from ._http_metrics import Metrics
from ._http_wire import (
    WORKDIR, Invalid, RunSpec, completed_json, fetched, fusion_cancelled, fusion_request, fusion_response,
    fusion_unsupported, run_request,
)

__all__ = ["Service", "Gate", "serve", "main", "CANCELLED"]

log = logging.getLogger("wasi_python.serve")

#: Why a run the shutdown cancelled was not answered with its end.
CANCELLED = "the server is shutting down: the run was cancelled"
#: Paths served without the token: liveness for probes, and SandboxFusion's ping.
OPEN_PATHS = ("/healthz", "/v1/ping")


class _TooLarge(Exception):
    pass


class _Refused(Exception):
    """The answer of a request refused by a step every endpoint shares (admission, reading
    the body); `_answers` returns it."""

    def __init__(self, response: Any) -> None:
        super().__init__()
        self.response = response


def _answers(endpoint: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """An endpoint that answers a `_Refused` it raises with that refusal's response."""

    @functools.wraps(endpoint)
    async def answered(self: Any, request: Any) -> Any:
        try:
            return await endpoint(self, request)
        except _Refused as e:
            return e.response

    return answered


def _loads(raw: bytes) -> Any:
    """JSON of a body; ValueError for any malformed one, nesting past the parser's depth
    included."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _json(data: Any, status: int = 200, headers: Optional[dict[str, str]] = None) -> Any:
    from starlette.responses import Response

    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _error(status: int, kind: str, message: str, headers: Optional[dict[str, str]] = None, **extra: Any) -> Any:
    return _json({"error": {"kind": kind, "message": message, **extra}}, status, headers)


def _invalid_json(e: ValueError) -> Any:
    """Our API's answer to a body that is not JSON."""
    return _error(400, "invalid_json", f"the body is not JSON: {str(e)[:200]}")


def _fusion_invalid_json(e: ValueError) -> Any:
    """SandboxFusion's (FastAPI's) answer to a body that is not JSON."""
    return _json({"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error", "ctx": {"error": str(e)[:200]}}]}, 422)


@dataclass
class _Live:
    session: BackendSession
    lock: asyncio.Lock
    #: The session's working folder, when it was opened with ``files``.
    files: Optional[MemoryFiles] = None
    turns: int = 0


class Service:
    """The endpoints and their state: admission, runs in flight, sessions, metrics."""

    def __init__(self, cfg: HttpConfig, backend: Backend) -> None:
        self.cfg = cfg
        self.limits = cfg.serve
        self.backend = backend
        self.admission = Admission(backend.guests, cfg.max_queue)
        self.inflight: set[asyncio.Task[Completed]] = set()
        self.sessions: dict[str, _Live] = {}
        self.sessions_lock = asyncio.Lock()
        self.draining = False
        self.metrics = Metrics(
            lambda: self.admission.queued, lambda: len(self.inflight), lambda: len(self.sessions),
        )

    # ---- runs

    def busy(self) -> Any:
        self.metrics.refuse("busy")
        return _error(
            self.cfg.busy_status, "busy",
            f"{self.admission.admitted} runs are admitted, the most this server queues ({self.backend.guests} guests, "
            f"--max-queue {self.cfg.max_queue}); retry later",
            {"Retry-After": "1"},
        )

    async def execute(self, spec: RunSpec) -> Optional[Completed]:
        """Runs ``spec`` on the backend; None when the shutdown cancelled it. The run is in
        ``inflight`` until it ends, even if the request leaves first."""
        task = asyncio.ensure_future(self.backend.run(spec.argv, spec.kw))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task.cancelled():
            return None
        return task.result()

    async def _body(self, request: Any) -> bytes:
        cap = self.cfg.max_body_bytes
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise _TooLarge()
            chunks.append(chunk)
        return b"".join(chunks)

    async def _read_json(self, request: Any, invalid: Callable[[ValueError], Any] = _invalid_json, empty_ok: bool = False) -> Any:
        """The body as JSON (None for an empty one, if ``empty_ok``); raises `_Refused` with
        413 past the body's cap, or ``invalid``'s answer for malformed JSON."""
        try:
            raw = await self._body(request)
        except _TooLarge:
            raise _Refused(self._too_large()) from None
        if empty_ok and not raw.strip():
            return None
        try:
            return _loads(raw)
        except ValueError as e:
            raise _Refused(invalid(e)) from None

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        """A run admitted for the block, released after it; raises `_Refused` with the busy
        answer when the queue is full."""
        if not self.admission.try_admit():
            raise _Refused(self.busy())
        try:
            yield
        finally:
            self.admission.release()

    def _too_large(self) -> Any:
        self.metrics.refuse("too_large")
        return _error(413, "too_large", f"the body is larger than this server takes ({self.cfg.max_body_bytes} bytes)", {"Connection": "close"})

    def _failed(self, e: BaseException, api: str) -> Any:
        """A run that raised: a bad argument the run's own checks found (422), or the
        backend's fault (503 for a lost actor, else 500; logged)."""
        if isinstance(e, (TypeError, ValueError)):
            return _error(422, "invalid_request", str(e))
        if type(e).__name__ == "ActorLost":
            return _error(503, "actor_lost", str(e), {"Retry-After": "1"})
        log.error("%s failed: %s: %s", api, type(e).__name__, e)
        return _error(500, "server_error", f"the run failed on the server ({type(e).__name__})")

    # ---- SandboxFusion

    @_answers
    async def run_code(self, request: Any) -> Any:
        async with self._admitted():
            started = time.monotonic()
            body = await self._read_json(request, _fusion_invalid_json)
            try:
                language, spec = fusion_request(body, self.limits)
            except Invalid as e:
                return _json({"detail": [e.detail()]}, 422)
            if language != "python":
                return _json(fusion_unsupported(language))
            try:
                done = await self.execute(spec)
            except (TypeError, ValueError) as e:
                return _json({"detail": [{"type": "value_error", "loc": ["body"], "msg": str(e)}]}, 422)
            except Exception as e:  # noqa: BLE001 - the backend's fault is SandboxFusion's SandboxError
                log.error("run_code failed: %s: %s", type(e).__name__, e)
                self.metrics.ran("run_code", None, time.monotonic() - started, "server_error")
                return _json(fusion_cancelled(f"the run failed on the server ({type(e).__name__})"))
            self.metrics.ran("run_code", done, time.monotonic() - started)
            if done is None:
                return _json(fusion_cancelled(CANCELLED))
            return _json(fusion_response(done, fetched(spec)))

    async def ping(self, request: Any) -> Any:
        from starlette.responses import PlainTextResponse

        return PlainTextResponse("pong")

    # ---- our API

    def _answer(self, done: Completed, spec: RunSpec) -> dict[str, Any]:
        out = completed_json(done)
        out["fetched_files"] = fetched(spec)
        return out

    @_answers
    async def run(self, request: Any) -> Any:
        async with self._admitted():
            started = time.monotonic()
            body = await self._read_json(request)
            try:
                spec = run_request(body, self.limits)
            except Invalid as e:
                return _json({"error": e.error()}, 422)
            try:
                done = await self.execute(spec)
            except Exception as e:  # noqa: BLE001
                self.metrics.ran("run", None, time.monotonic() - started, "server_error")
                return self._failed(e, "run")
            self.metrics.ran("run", done, time.monotonic() - started)
            if done is None:
                return _error(503, "cancelled", CANCELLED)
            return _json(self._answer(done, spec))

    @_answers
    async def batch(self, request: Any) -> Any:
        from starlette.responses import StreamingResponse

        if not self.admission.has_room():
            return self.busy()
        body = await self._read_json(request)
        try:
            specs, ordered = self._batch_specs(body)
        except Invalid as e:
            return _json({"error": e.error()}, 422)
        return StreamingResponse(self._stream(specs, ordered), media_type="application/x-ndjson")

    def _batch_specs(self, body: Any) -> tuple[list[RunSpec], bool]:
        if not isinstance(body, dict):
            raise Invalid(["body"], "an object is needed", "model_attributes_type")
        unknown = sorted(set(body) - {"runs", "defaults", "ordered"})
        if unknown:
            raise Invalid(["body", unknown[0]], f"unknown field {unknown[0][:64]!r}; known: defaults, ordered, runs", "extra_forbidden")
        runs = body.get("runs")
        if not isinstance(runs, list):
            raise Invalid(["body", "runs"], "a list of runs is needed", "list_type")
        if len(runs) > self.cfg.max_batch:
            raise Invalid(["body", "runs"], f"{len(runs)} runs; this server takes at most {self.cfg.max_batch} in one batch", "too_long")
        defaults = body.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise Invalid(["body", "defaults"], "an object of run fields is needed", "dict_type")
        ordered = body.get("ordered", True)
        if not isinstance(ordered, bool):
            raise Invalid(["body", "ordered"], "true or false", "bool_type")
        specs = []
        for i, r in enumerate(runs):
            if isinstance(r, str):
                r = {"code": r}
            elif not isinstance(r, dict):
                raise Invalid(["body", "runs", i], "a run object, or a string of code, is needed", "model_attributes_type")
            specs.append(run_request({**defaults, **r}, self.limits, ["body", "runs", i]))
        return specs, ordered

    async def _stream(self, specs: list[RunSpec], ordered: bool) -> AsyncIterator[bytes]:
        """The batch's lines: ``{"index", "result"}`` or ``{"index", "error"}`` for each run,
        in order (or as they end, ``ordered: false``), then ``{"end": true, ...}``. At most
        twice the guests' worth of runs are between admission and their line."""
        n = len(specs)
        results: dict[int, dict[str, Any]] = {}
        changed = asyncio.Event()
        window = asyncio.Semaphore(max(2, 2 * self.backend.guests))
        tasks: list[asyncio.Task[None]] = []
        counts = {"results": 0, "errors": 0}

        def put(i: int, line: dict[str, Any]) -> None:
            results[i] = line
            changed.set()

        async def one(i: int, spec: RunSpec) -> None:
            started = time.monotonic()
            try:
                await self.admission.admit()
            except Stopping:
                put(i, {"index": i, "error": {"kind": "cancelled", "message": CANCELLED}})
                return
            try:
                done = await self.execute(spec)
            except Exception as e:  # noqa: BLE001 - one run's failure is its own line
                self.metrics.ran("batch", None, time.monotonic() - started, "server_error")
                put(i, {"index": i, "error": {"kind": "server_error" if not isinstance(e, (TypeError, ValueError)) else "invalid_request", "message": str(e)[:500]}})
                return
            finally:
                self.admission.release()
            self.metrics.ran("batch", done, time.monotonic() - started)
            if done is None:
                put(i, {"index": i, "error": {"kind": "cancelled", "message": CANCELLED}})
            else:
                put(i, {"index": i, "result": self._answer(done, spec)})

        async def feed() -> None:
            for i, spec in enumerate(specs):
                await window.acquire()
                if self.draining:
                    put(i, {"index": i, "error": {"kind": "cancelled", "message": CANCELLED}})
                    continue
                tasks.append(asyncio.ensure_future(one(i, spec)))

        feeder = asyncio.ensure_future(feed())
        try:
            emitted, next_i = 0, 0
            while emitted < n:
                while True:
                    if ordered:
                        if next_i not in results:
                            break
                        i = next_i
                        next_i += 1
                    else:
                        if not results:
                            break
                        i = next(iter(results))
                    line = results.pop(i)
                    counts["errors" if "error" in line else "results"] += 1
                    emitted += 1
                    window.release()
                    yield (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
                if emitted < n:
                    changed.clear()
                    await changed.wait()
            yield (json.dumps({"end": True, "runs": n, **counts}) + "\n").encode()
        finally:
            feeder.cancel()
            for t in tasks:
                t.cancel()

    # ---- sessions

    def _session_body(self, body: Any) -> tuple[dict[str, Any], Optional[MemoryFiles]]:
        """A session's keywords from its request (``deadline_s``, ``memory_bytes``,
        ``output_bytes``, each capped as a run's; ``files``, mounted writable at the working
        folder for the session's life), and those files."""
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise Invalid(["body"], "an object is needed", "model_attributes_type")
        unknown = sorted(set(body) - {"deadline_s", "memory_bytes", "output_bytes", "files"})
        if unknown:
            raise Invalid(["body", unknown[0]], f"unknown field {unknown[0][:64]!r}; known: deadline_s, files, memory_bytes, output_bytes", "extra_forbidden")
        # A run's checks and caps, on a run that is never made.
        spec = run_request({"code": "", **{k: v for k, v in body.items() if k != "files"}}, self.limits)
        kw = session_keywords(self.limits)
        for k in ("deadline_s", "memory_bytes", "output_bytes"):
            if k in spec.kw:
                kw[k] = spec.kw[k]
        if body.get("files") is None:
            return kw, None
        if isinstance(self.backend, RayBackend):
            raise Invalid(["body", "files"], "files are not offered to sessions on the Ray backend", "value_error")
        with_files = run_request({"code": "", "files": body["files"], "fetch_files": []}, self.limits)
        mf = MemoryFiles(with_files.files.files if with_files.files is not None else {})
        kw["mounts"] = [Mount(mf, WORKDIR, writable=True)]
        return kw, mf

    @_answers
    async def open_session(self, request: Any) -> Any:
        body = await self._read_json(request, empty_ok=True)
        try:
            kw, files = self._session_body(body)
        except Invalid as e:
            return _json({"error": e.error()}, 422)
        async with self.sessions_lock:
            for sid, live in list(self.sessions.items()):
                if live.session.ended is not None and not live.lock.locked():
                    self.sessions.pop(sid, None)
                    await live.session.close()
            if len(self.sessions) >= self.limits.max_sessions:
                self.metrics.refuse("sessions")
                return _error(
                    self.cfg.busy_status, "too_many_sessions",
                    f"{len(self.sessions)} sessions are alive, the most this server keeps (--max-sessions); delete one, "
                    f"or wait: one ends after {self.limits.session_idle_s:g} s at rest",
                    {"Retry-After": "1"},
                )
            try:
                session = await self.backend.open_session(kw)
            except (TypeError, ValueError) as e:
                return _error(422, "invalid_request", str(e))
            sid = secrets.token_urlsafe(16)
            self.sessions[sid] = _Live(session, asyncio.Lock(), files)
        return _json({"id": sid, "deadline_s": kw["deadline_s"], "memory_bytes": kw["memory_bytes"],
                      "idle_s": self.limits.session_idle_s, "lifetime_s": self.limits.session_lifetime_s}, 201)

    def _gone(self, sid: str, why: str) -> Any:
        return _error(404, "no_session", f"no session {sid[:64]!r}: {why}")

    @_answers
    async def turn(self, request: Any) -> Any:
        sid = request.path_params["sid"]
        live = self.sessions.get(sid)
        if live is None:
            return self._gone(sid, "it was deleted, ended, or never made")
        body = await self._read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return _json({"error": Invalid(["body", "code"], "a string of code is needed", "missing").error()}, 422)
        unknown = sorted(set(body) - {"code", "deadline_s", "fetch_files"})
        if unknown:
            return _json({"error": Invalid(["body", unknown[0]], f"unknown field {unknown[0][:64]!r}; known: code, deadline_s, fetch_files", "extra_forbidden").error()}, 422)
        try:
            spec = run_request({"code": body["code"], "deadline_s": body.get("deadline_s"), "fetch_files": body.get("fetch_files")}, self.limits)
        except Invalid as e:
            return _json({"error": e.error()}, 422)
        deadline = spec.kw.get("deadline_s", self.limits.deadline_s)
        started = time.monotonic()
        async with live.lock:
            if self.sessions.get(sid) is not live:
                return self._gone(sid, "it was deleted")
            task = asyncio.ensure_future(live.session.turn(body["code"], deadline))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                task.cancel()
                raise
            if task.cancelled():
                done: Optional[Completed] = None
            else:
                try:
                    done = task.result()
                except SessionGone as e:
                    self.sessions.pop(sid, None)
                    return self._gone(sid, f"it ended ({e.reason})")
                except Exception as e:  # noqa: BLE001
                    return self._failed(e, "session turn")
            live.turns += 1
            ended = live.session.ended
        self.metrics.ran("session", done, time.monotonic() - started)
        if done is None:
            return _error(503, "cancelled", CANCELLED)
        out = completed_json(done)
        out["session_ended"] = ended
        out["fetched_files"] = fetched(RunSpec([], {}, spec.fetch, live.files))
        if ended is not None:
            async with self.sessions_lock:
                if self.sessions.get(sid) is live:
                    self.sessions.pop(sid, None)
                    await live.session.close()
        return _json(out)

    async def close_session(self, request: Any) -> Any:
        sid = request.path_params["sid"]
        async with self.sessions_lock:
            live = self.sessions.pop(sid, None)
        if live is None:
            return self._gone(sid, "it was deleted, ended, or never made")
        async with live.lock:
            await live.session.close()
        return _json({"id": sid, "ended": True})

    async def close_sessions(self) -> None:
        async with self.sessions_lock:
            lives = list(self.sessions.values())
            self.sessions.clear()
        for live in lives:
            try:
                await live.session.close()
            except Exception as e:  # noqa: BLE001 - closing the others matters more
                log.warning("closing a session failed: %s", e)

    # ---- operations

    async def healthz(self, request: Any) -> Any:
        body = {
            "status": "draining" if self.draining else "ok", "backend": self.backend.name, "guests": self.backend.guests,
            "in_flight": len(self.inflight), "queued": self.admission.queued, "sessions": len(self.sessions),
        }
        return _json(body, 503 if self.draining else 200)

    async def metrics_text(self, request: Any) -> Any:
        from starlette.responses import Response

        data, ctype = self.metrics.render()
        return Response(data, media_type=None, headers={"Content-Type": ctype})

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        routes = [
            Route("/run_code", self.run_code, methods=["POST"]),
            Route("/v1/ping", self.ping, methods=["GET"]),
            Route("/v1/run", self.run, methods=["POST"]),
            Route("/v1/batch", self.batch, methods=["POST"]),
            Route("/v1/sessions", self.open_session, methods=["POST"]),
            Route("/v1/sessions/{sid}", self.turn, methods=["POST"]),
            Route("/v1/sessions/{sid}", self.close_session, methods=["DELETE"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics_text, methods=["GET"]),
        ]
        return Gate(Starlette(routes=routes), self)

    # ---- shutdown

    async def drain(self, grace_s: float, stop_listening: Callable[[], None]) -> None:
        """No new runs; runs in flight get ``grace_s`` to end, then are cancelled; returns
        when every run has ended (so each was answered, or is being)."""
        self.draining = True
        self.admission.stop()
        stop_listening()
        pending = set(self.inflight)
        if pending:
            log.info("draining: %d runs in flight, %g s to finish", len(pending), grace_s)
            _, pending = await asyncio.wait(pending, timeout=grace_s)
        if pending:
            log.info("draining: cancelling %d runs", len(pending))
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=30)
        # Runs admitted meanwhile (a batch's last) were refused by the stopped admission.
        while self.inflight:
            left = set(self.inflight)
            for t in left:
                t.cancel()
            await asyncio.wait(left, timeout=30)


class Gate:
    """ASGI in front of the routes: the bearer token (compared in constant time; 401), the
    body's declared size (413 before a byte of it is read), and the shutdown (503)."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app = app
        self.service = service
        token = service.limits.token
        self.expected = f"Bearer {token}".encode() if token else None

    async def _send(self, send: Any, status: int, kind: str, message: str, extra: list[tuple[bytes, bytes]]) -> None:
        body = json.dumps({"error": {"kind": kind, "message": message}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())] + extra
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        path = scope.get("path", "")
        if self.expected is not None and path not in OPEN_PATHS:
            if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                self.service.metrics.refuse("unauthorized")
                return await self._send(send, 401, "unauthorized", "a bearer token is required", [(b"www-authenticate", b"Bearer")])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return await self._send(send, 400, "invalid_request", "Content-Length is not a number", [(b"connection", b"close")])
            if declared > self.service.cfg.max_body_bytes:
                self.service.metrics.refuse("too_large")
                return await self._send(
                    send, 413, "too_large",
                    f"the body is {declared} bytes; this server takes at most {self.service.cfg.max_body_bytes}",
                    [(b"connection", b"close")],
                )
        if self.service.draining and path not in ("/healthz", "/metrics"):
            self.service.metrics.refuse("shutting_down")
            return await self._send(send, 503, "shutting_down", "the server is shutting down", [(b"connection", b"close"), (b"retry-after", b"1")])
        await self.app(scope, receive, send)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(cfg: HttpConfig, ready: Optional[Callable[[str], Awaitable[None] | None]] = None) -> None:
    """Runs the service with ``cfg`` until SIGTERM or SIGINT, then drains it."""
    import uvicorn

    backend: Backend
    if cfg.ray is not None:
        backend = RayBackend(cfg.ray, cfg.ray_actors, cfg.ray_cpus_per_actor)
    else:
        backend = LocalBackend(cfg.workers)
    await backend.start()
    try:
        service = Service(cfg, backend)
        # One run first: the guest compiled or loaded, and the preload image, before the
        # first request pays for them.
        _, warm = fusion_request({"code": "pass", "language": "python"}, cfg.serve)
        await backend.run(warm.argv, warm.kw)
        host, port = cfg.serve.http  # type: ignore[misc]
        sock = _listen(host, port)
        bound = sock.getsockname()[1]
        url = f"http://{f'[{host}]' if ':' in host else host}:{bound}"
        server = _draining_server(
            uvicorn.Config(service.app(), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5),
            service, cfg.shutdown_grace_s,
        )
        print(f"wasi-python serve http: listening on {url} ({backend.name} backend, {backend.guests} guests)", file=sys.stderr, flush=True)
        if ready is not None:
            r = ready(url)
            if r is not None:
                await r
        try:
            await server.serve(sockets=[sock])
        finally:
            await service.close_sessions()
    finally:
        await backend.close()


def _draining_server(config: Any, service: Service, grace_s: float) -> Any:
    """uvicorn's server, whose SIGTERM and SIGINT drain the service first (`Service.drain`)
    and only then stop it; a second signal cancels what is left at once. The signal is
    not raised again after (uvicorn's own way), so the process ends with status 0."""
    import uvicorn

    class Draining(uvicorn.Server):
        loop: Optional[asyncio.AbstractEventLoop] = None
        draining: Optional[asyncio.Future[None]] = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            loop = self.loop
            if loop is None:
                self.should_exit = True
            elif self.draining is not None:
                loop.call_soon_threadsafe(self.cancel_now)
            else:
                loop.call_soon_threadsafe(self.start_drain, sig)

        def start_drain(self, sig: int) -> None:
            if self.draining is None:
                log.info("signal %d: draining", sig)
                self.draining = asyncio.ensure_future(self.drain_then_exit())

        def cancel_now(self) -> None:
            for t in list(service.inflight):
                t.cancel()

        def stop_listening(self) -> None:
            for s in getattr(self, "servers", []):
                s.close()

        async def drain_then_exit(self) -> None:
            try:
                await service.drain(grace_s, self.stop_listening)
            finally:
                self.should_exit = True

        async def serve(self, sockets: Any = None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().serve(sockets=sockets)

    return Draining(config)


def main(ns: argparse.Namespace) -> int:
    """``serve http`` of a parsed command line (``wasi_python.__main__``)."""
    try:
        cfg = config_from(ns)
    except (ConfigError, OSError, ValueError) as e:
        print(f"wasi-python serve http: {e}", file=sys.stderr)
        return 2
    missing = []
    for module in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(f"wasi-python serve http needs {', '.join(missing)}: pip install 'wasi-python-sandbox[serve]'", file=sys.stderr)
        return 2
    log_to = logging.StreamHandler(sys.stderr)
    log_to.setFormatter(logging.Formatter("wasi-python serve http: %(message)s"))
    if not log.handlers:
        log.addHandler(log_to)
        log.setLevel(logging.INFO)
    try:
        asyncio.run(serve(cfg))
    except KeyboardInterrupt:
        pass
    return 0
