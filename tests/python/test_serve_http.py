"""``wasi-python serve http`` as a subprocess on 127.0.0.1: SandboxFusion's published client
(``sandbox-fusion``, pinned) against ``/run_code`` (success, a failing program, a time limit,
stdin, files in and out, 64 clients at once), that API's own answers to other languages and
malformed bodies, a 100 MB body refused from its Content-Length, our ``/v1/run``,
``/v1/batch`` and ``/v1/sessions``, the bearer token, ``/healthz`` and ``/metrics``; the
queue's bound (429 past it) and SIGTERM with runs in flight, a batch's included (each
answered or cancelled, none lost); the Ray backend on a local cluster.

One server for most tests (module scope); the token, back-pressure, shutdown and Ray tests
start their own. Every wait is bounded; each test stops the servers it starts.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any, Iterator, Optional

import pytest

from helpers import PYTHON_DIR
from serve_helpers import ListeningServer

import sandbox_fusion  # noqa: E402 - pinned in tests/requirements.txt
from sandbox_fusion import RunCodeRequest  # noqa: E402

BOUND_S = 60.0
TOKEN = "t0ken-for-the-http-tests"


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


class Server(ListeningServer):
    """``serve http --listen 127.0.0.1:0 OPTIONS``; `stop` sends SIGTERM (then SIGKILL
    after 30 s) and returns the exit status."""

    def __init__(self, *options: str, env: Optional[dict[str, str]] = None, start_s: float = BOUND_S) -> None:
        argv = [sys.executable, "-m", "wasi_python", "serve", "http", "--listen", "127.0.0.1:0", *options]
        super().__init__(argv, env=env or server_env(), start_s=start_s, stop_s=30)
        self.port = int(self.url.rsplit(":", 1)[1])

    def request(self, method: str, path: str, body: Any = None, token: Optional[str] = None, raw: Optional[bytes] = None, timeout: float = BOUND_S) -> tuple[int, dict[str, str], bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            c.request(method, path, data, headers)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        status, _, data = self.request(method, path, body, **kw)
        return status, json.loads(data)

    def health(self) -> dict[str, Any]:
        return self.json("GET", "/healthz")[1]

    def wait_for(self, what: str, ok: Any) -> None:
        """Polls /healthz until ``ok(health)`` (bounded)."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            if ok(self.health()):
                return
            time.sleep(0.02)
        raise AssertionError(f"the server never had {what}: {self.health()}")



@contextlib.contextmanager
def started(*options: str, **kw: Any) -> Iterator[Server]:
    s = Server(*options, **kw)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def server():
    s = Server("--deadline-s", "20", "--max-sessions", "2", "--max-body-bytes", str(1 << 20))
    yield s
    assert s.stop() == 0  # SIGTERM: a graceful end


def fusion(server: Server, **fields: Any) -> Any:
    return sandbox_fusion.run_code(RunCodeRequest(language="python", **fields), endpoint=server.url, max_attempts=1, client_timeout=BOUND_S)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------------------------
# SandboxFusion's client


def test_the_sandbox_fusion_client_runs_a_program(server):
    r = fusion(server, code="import math\nprint(math.factorial(5))")
    assert r.status.value == "Success" and r.message == ""
    assert r.compile_result is None
    run = r.run_result
    assert (run.status.value, run.return_code, run.stdout, run.stderr) == ("Finished", 0, "120\n", "")
    assert run.execution_time is not None and run.execution_time >= 0


def test_a_failing_program_is_failed_with_its_exit_status_and_traceback(server):
    r = fusion(server, code="raise ValueError('nope')")
    assert r.status.value == "Failed"
    assert (r.run_result.status.value, r.run_result.return_code) == ("Finished", 1)
    assert "ValueError: nope" in r.run_result.stderr
    r = fusion(server, code="import sys; print('partial'); sys.exit(3)")
    assert (r.status.value, r.run_result.return_code, r.run_result.stdout) == ("Failed", 3, "partial\n")


def test_a_program_past_run_timeout_is_time_limit_exceeded(server):
    r = fusion(server, code="print('started', flush=True)\nwhile True:\n    pass", run_timeout=1.0)
    assert r.status.value == "Failed"
    assert r.run_result.status.value == "TimeLimitExceeded"
    assert r.run_result.return_code is None
    assert r.run_result.stdout == "started\n"


def test_stdin_reaches_the_program(server):
    r = fusion(server, code="import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="3\n4\n35\n")
    assert (r.status.value, r.run_result.stdout) == ("Success", "42\n")


def test_files_in_and_fetch_files_out(server):
    code = (
        "import json\n"
        "rows = open('in/data.csv').read().splitlines()\n"
        "open('out.json', 'w').write(json.dumps({'rows': len(rows)}))\n"
        "open('bytes.bin', 'wb').write(bytes(range(256)))\n"
    )
    r = fusion(
        server, code=code, files={"in/data.csv": b64(b"a,1\nb,2\nc,3\n")},
        fetch_files=["out.json", "bytes.bin", "missing.txt", "../escape"],
    )
    assert r.status.value == "Success", r
    assert set(r.files) == {"out.json", "bytes.bin"}  # what does not exist is left out
    assert json.loads(base64.b64decode(r.files["out.json"])) == {"rows": 3}
    assert base64.b64decode(r.files["bytes.bin"]) == bytes(range(256))


def test_64_clients_at_once(server):
    def one(i: int) -> tuple[int, Any]:
        return i, fusion(server, code=f"print({i} * {i})")

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64), timeout=BOUND_S * 2))
    for i, r in results:
        assert (r.status.value, r.run_result.stdout) == ("Success", f"{i * i}\n")


def test_memory_limit_mb_caps_the_guest(server):
    status, r = server.json("POST", "/run_code", {"code": "x = bytearray(512 << 20)", "language": "python", "memory_limit_MB": 128})
    assert status == 200 and r["status"] == "Failed"
    rr = r["run_result"]
    assert rr["return_code"] != 0 and (rr["return_code"] == -9 or "MemoryError" in rr["stderr"])


def test_other_languages_get_that_apis_own_answers(server):
    # A language SandboxFusion knows: its SandboxError, which its client raises (after retries).
    status, r = server.json("POST", "/run_code", {"code": "int main() { return 0; }", "language": "cpp"})
    assert status == 200 and r["status"] == "SandboxError" and r["run_result"] is None
    with pytest.raises(Exception):  # noqa: B017 - the client raises a bare Exception
        sandbox_fusion.run_code(RunCodeRequest(code="x", language="cpp"), endpoint=server.url, max_attempts=1)
    # A language it does not know: its validation error (FastAPI's 422).
    status, r = server.json("POST", "/run_code", {"code": "x", "language": "cobol"})
    assert status == 422 and r["detail"][0]["type"] == "literal_error" and r["detail"][0]["loc"] == ["body", "language"]
    status, r = server.json("POST", "/run_code", {"language": "python"})
    assert status == 422 and r["detail"][0]["type"] == "missing"
    assert fusion(server, code="print('up')").run_result.stdout == "up\n"


def test_a_malformed_json_body_is_refused_and_the_server_stays_up(server):
    status, _, data = server.request("POST", "/run_code", raw=b'{"code": "print(1)", "language":')
    assert status == 422 and json.loads(data)["detail"][0]["type"] == "json_invalid"
    status, _, data = server.request("POST", "/v1/run", raw=b"\xff\xfe not json")
    assert status == 400 and json.loads(data)["error"]["kind"] == "invalid_json"
    status, r = server.json("POST", "/run_code", {"code": 5, "language": "python"})
    assert status == 422 and r["detail"][0]["loc"] == ["body", "code"]
    # Hostile JSON: nested past the parser's depth, NaN, numbers past a float's range.
    status, _, data = server.request("POST", "/v1/run", raw=b"[" * 100_000)
    assert status == 400 and json.loads(data)["error"]["kind"] == "invalid_json"
    status, _, data = server.request("POST", "/run_code", raw=b'{"code": "print(1)", "language": "python", "run_timeout": NaN}')
    assert status == 422 and json.loads(data)["detail"][0]["loc"] == ["body", "run_timeout"]
    status, _, data = server.request("POST", "/run_code", raw=b'{"code": "print(1)", "language": "python", "run_timeout": -1e999}')
    assert status == 422 and json.loads(data)["detail"][0]["loc"] == ["body", "run_timeout"]
    status, r = server.json("POST", "/run_code", {"code": "print(1)", "language": "python", "run_timeout": 10**400, "memory_limit_MB": 10**400})
    assert status == 200 and r["status"] == "Success"  # capped at the server's own
    assert fusion(server, code="print('up')").run_result.stdout == "up\n"


def refused_head(server: Server, head: bytes, pieces: Iterator[bytes]) -> bytes:
    """Sends ``head`` then ``pieces`` from a thread (a send the server cut short ends it)
    while reading the answer's status line and headers here."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND_S) as s:
        s.sendall(head)

        def sender() -> None:
            with contextlib.suppress(OSError):
                for piece in pieces:
                    s.sendall(piece)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            sent = pool.submit(sender)
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            with contextlib.suppress(OSError):  # the server may have reset it already
                s.shutdown(socket.SHUT_RDWR)
            sent.result(BOUND_S)
    return got


def test_a_100_mb_body_is_refused_from_its_length(server):
    head = b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"
    # The answer comes with 99.99 % of the body never sent.
    got = refused_head(server, head, iter([b'{"code": "' + b"x" * 1000]))
    assert got.startswith(b"HTTP/1.1 413")
    # A body without a length (chunked) is cut at the cap (1 MiB here) as it arrives.
    head = b"POST /v1/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"x" * (64 << 10)
    got = refused_head(server, head, iter([b"%x\r\n%s\r\n" % (len(piece), piece)] * 24))
    assert got.startswith(b"HTTP/1.1 413")
    assert fusion(server, code="print('up')").run_result.stdout == "up\n"


# --------------------------------------------------------------------------------------------
# Our API


def test_v1_run_answers_the_completed_with_its_records(server):
    status, r = server.json("POST", "/v1/run", {
        "code": "import sys, os\nprint(os.environ['GREETING'], sys.stdin.read())\nopen('o.txt', 'w').write(open('i.txt').read().upper())\nsys.stdout.flush(); os.write(1, b'\\xff')",
        "stdin": "from stdin", "env": {"GREETING": "hello"}, "files": {"i.txt": b64(b"abc")}, "fetch_files": ["o.txt"],
    })
    assert status == 200, r
    assert (r["exit_code"], r["trapped"], r["ok"]) == (0, None, True)
    assert base64.b64decode(r["stdout_base64"]) == b"hello from stdin\n\xff"  # not UTF-8: the bytes beside the text
    assert r["files"]["files_written"] == 1 and r["files"]["calls"]["read"] >= 1  # the mount's record
    assert base64.b64decode(r["fetched_files"]["o.txt"]) == b"ABC"
    status, r = server.json("POST", "/v1/run", {"argv": ["-c", "while True: pass"], "deadline_s": 0.3})
    assert status == 200 and r["trapped"] == "deadline" and r["exit_code"] is None and r["ok"] is False


def test_v1_run_refuses_bad_fields_naming_them(server):
    status, r = server.json("POST", "/v1/run", {"code": "print(1)", "tools": []})
    assert status == 422 and r["error"]["kind"] == "invalid_request" and r["error"]["field"] == "tools"
    status, r = server.json("POST", "/v1/run", {"code": "print(1)", "memory_bytes": "lots"})
    assert status == 422 and r["error"]["field"] == "memory_bytes"
    status, r = server.json("POST", "/v1/run", {"code": "print(1)", "files": {"../x": b64(b"1")}})
    assert status == 422 and r["error"]["field"].startswith("files")


def batch_lines(server: Server, body: Any, timeout: float = BOUND_S) -> list[dict[str, Any]]:
    status, headers, data = server.request("POST", "/v1/batch", body, timeout=timeout)
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in data.splitlines()]


def test_v1_batch_streams_results_in_order(server):
    runs = [{"code": f"import time; time.sleep({0.2 if i % 5 == 0 else 0}); print({i})"} for i in range(20)]
    runs[7] = {"code": "raise SystemExit(7)"}
    lines = batch_lines(server, {"runs": runs, "defaults": {"deadline_s": 10}})
    assert [x["index"] for x in lines[:-1]] == list(range(20))
    assert lines[-1] == {"end": True, "runs": 20, "results": 20, "errors": 0}
    for i, x in enumerate(lines[:-1]):
        assert x["result"]["exit_code"] == (7 if i == 7 else 0)
        if i != 7:
            assert x["result"]["stdout"] == f"{i}\n"
    # Out of order on request; strings are code.
    lines = batch_lines(server, {"runs": ["import time; time.sleep(0.5); print('slow')", "print('fast')"], "ordered": False})
    assert sorted(x["index"] for x in lines[:-1]) == [0, 1]
    status, r = server.json("POST", "/v1/batch", {"runs": [{"code": "1"}, {"cod": "1"}]})
    assert status == 422 and r["error"]["field"].startswith("runs.1")


def test_v1_sessions_keep_variables_across_turns(server):
    status, s = server.json("POST", "/v1/sessions", {"files": {"seed.txt": b64(b"41")}})
    assert status == 201
    sid = s["id"]
    status, r = server.json("POST", f"/v1/sessions/{sid}", {"code": "x = int(open('seed.txt').read())"})
    assert status == 200 and r["ok"] and r["session_ended"] is None
    status, r = server.json("POST", f"/v1/sessions/{sid}", {"code": "open('y.txt', 'w').write(str(x + 1))\nx + 1", "fetch_files": ["y.txt"]})
    assert r["stdout"] == "42\n" and base64.b64decode(r["fetched_files"]["y.txt"]) == b"42"
    # A second session is apart; a third is past --max-sessions 2.
    status, other = server.json("POST", "/v1/sessions", {})
    assert status == 201
    status, r = server.json("POST", f"/v1/sessions/{other['id']}", {"code": "print('x' in globals())"})
    assert r["stdout"] == "False\n"
    status, r = server.json("POST", "/v1/sessions", {})
    assert status == 503 and r["error"]["kind"] == "too_many_sessions"
    assert server.json("DELETE", f"/v1/sessions/{other['id']}")[0] == 200
    # A turn that traps ends its session.
    status, r = server.json("POST", f"/v1/sessions/{sid}", {"code": "while True: pass", "deadline_s": 0.3})
    assert r["trapped"] == "deadline" and r["session_ended"] is not None
    status, r = server.json("POST", f"/v1/sessions/{sid}", {"code": "x"})
    assert status == 404 and r["error"]["kind"] == "no_session"
    assert server.json("DELETE", f"/v1/sessions/{sid}")[0] == 404


def test_healthz_and_metrics(server):
    fusion(server, code="print(1)")
    fusion(server, code="raise SystemExit(2)")
    h = server.health()
    assert h["status"] == "ok" and h["backend"] == "local" and h["guests"] >= 1
    status, headers, data = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    text = data.decode()
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    runs = {(s.labels["api"], s.labels["outcome"]): s.value for s in families["wasi_python_runs"].samples if s.name.endswith("_total")}
    assert runs[("run_code", "ok")] >= 1 and runs[("run_code", "exit_nonzero")] >= 1
    assert any(s.name == "wasi_python_request_seconds_count" and s.labels["api"] == "run_code" for s in families["wasi_python_request_seconds"].samples)
    assert "wasi_python_queue_depth" in families and "wasi_python_runs_in_flight" in families
    status, _, data = server.request("GET", "/v1/ping")
    assert (status, data) == (200, b"pong")


# --------------------------------------------------------------------------------------------
# Operations: each with a server of its own


def test_the_bearer_token_is_required_but_for_health():
    with started("--token", TOKEN) as s:
        assert s.request("POST", "/v1/run", {"code": "print(1)"})[0] == 401
        assert s.request("POST", "/v1/run", {"code": "print(1)"}, token="wrong")[0] == 401
        assert s.request("GET", "/metrics")[0] == 401
        status, r = s.json("POST", "/v1/run", {"code": "print(1)"}, token=TOKEN)
        assert status == 200 and r["stdout"] == "1\n"
        assert s.request("GET", "/metrics", token=TOKEN)[0] == 200
        assert s.request("GET", "/healthz")[0] == 200


def test_past_the_queue_requests_are_refused_and_sigterm_answers_runs_in_flight():
    with started("--workers", "1", "--max-queue", "1", "--busy-status", "429", "--shutdown-grace-s", "0.5") as s:
        hold = {"code": "import time; time.sleep(60)", "language": "python", "run_timeout": 60}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            held = [pool.submit(s.json, "POST", "/run_code", hold) for _ in range(2)]
            s.wait_for("2 runs in flight", lambda h: h["in_flight"] == 2 and h["queued"] == 1)
            status, headers, data = s.request("POST", "/run_code", hold)
            assert status == 429 and headers["retry-after"] == "1" and json.loads(data)["error"]["kind"] == "busy"
            s.proc.send_signal(signal.SIGTERM)
            answers = [f.result(BOUND_S) for f in held]
        # Both answered: cancelled after the grace, SandboxFusion's SandboxError.
        assert [(st, r["status"], r["run_result"]["status"]) for st, r in answers] == [(200, "SandboxError", "Error")] * 2
        assert s.proc.wait(BOUND_S) == 0


def test_sigterm_during_a_batch_answers_or_cancels_every_run():
    with started("--workers", "2", "--shutdown-grace-s", "1") as s:
        runs = [{"code": "while True: pass", "deadline_s": 60}] * 2 + [{"code": f"print({i})"} for i in range(30)]
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=BOUND_S)
        try:
            c.request("POST", "/v1/batch", json.dumps({"runs": runs}), {"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200
            s.wait_for("the looping runs on both guests", lambda h: h["in_flight"] >= 2)
            s.proc.send_signal(signal.SIGTERM)
            lines = [json.loads(line) for line in r.read().splitlines()]
        finally:
            c.close()
        assert s.proc.wait(BOUND_S) == 0
    assert lines[-1]["end"] is True and lines[-1]["runs"] == 32
    body = lines[:-1]
    assert [x["index"] for x in body] == list(range(32))  # each run answered once, in order
    for x in body[:2]:  # the loops: cancelled after the grace
        assert x["error"]["kind"] == "cancelled"
    for x in body[2:]:
        assert ("result" in x and x["result"]["stdout"] == f"{x['index'] - 2}\n") or x["error"]["kind"] == "cancelled"
    assert lines[-1]["results"] + lines[-1]["errors"] == 32


def test_the_ray_backend_on_a_local_cluster():
    import ray

    from wasi_python.ray import protect_local_runs

    top = tempfile.mkdtemp(prefix="wphttp-")  # short: Ray's socket paths must fit in 107 bytes
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    try:
        with protect_local_runs():
            info = ray.init(num_cpus=1, include_dashboard=False, _temp_dir=f"{top}/ray", log_to_driver=False)
        address = info.address_info["gcs_address"]
        with started("--ray", address, "--ray-actors", "1", env=server_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0"), start_s=180) as s:
            assert s.health()["backend"] == "ray"
            r = fusion(s, code="import os, sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="40 2")
            assert (r.status.value, r.run_result.stdout) == ("Success", "42\n")
            status, out = s.json("POST", "/v1/run", {"code": "open('o', 'w').write('ray')", "fetch_files": ["o"]})
            assert status == 200 and base64.b64decode(out["fetched_files"]["o"]) == b"ray"
            status, made = s.json("POST", "/v1/sessions", {})
            assert status == 201
            s.json("POST", f"/v1/sessions/{made['id']}", {"code": "x = 41"})
            status, out = s.json("POST", f"/v1/sessions/{made['id']}", {"code": "x + 1"})
            assert status == 200 and out["stdout"] == "42\n"
            assert s.json("DELETE", f"/v1/sessions/{made['id']}")[0] == 200
            assert s.stop() == 0
    finally:
        with protect_local_runs():
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(top, ignore_errors=True)
