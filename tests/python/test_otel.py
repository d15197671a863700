"""OpenTelemetry spans (the `otel` extra, issue 41 part 4): a span per run, turn, tool call
and file-provider call, under the caller's current span, with limits and outcome as
attributes; nothing imported or made when the embedder does not trace."""

import asyncio
import http.server
import threading
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import wasi_python
from wasi_python import Mount, MemoryFiles
from wasi_python.tools import ToolError, tool

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider():
    # The global provider can be set once per process; this module's tests share it.
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(p)
    yield p


@pytest.fixture
def spans():
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@tool
def add(a: int, b: int) -> int:
    """Adds."""
    return a + b


@tool
def broken() -> int:
    """Fails."""
    raise ToolError("no")


class Files:
    def stat(self, path):
        return wasi_python.Stat(kind="dir" if path == "/" else "file", size=2)

    def list(self, path):
        return [("a.txt", "file")]

    def read(self, path):
        return b"hi"


def by_name(exported, name):
    return [s for s in exported if s.name == name]


def test_a_run_has_a_span_under_the_callers_with_its_calls_under_it(spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller:
        done = wasi_python.run(
            ["-c", "from host import tools\nprint(tools.add(a=1, b=2))\ntry:\n    tools.broken()\nexcept Exception:\n    pass\nprint(open('/data/a.txt').read())"],
            tools=[add, broken],
            mounts=[Mount(Files(), "/data")],
            deadline_s=30,
        )
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"3\nhi\n"
    got = spans.get_finished_spans()
    (run,) = by_name(got, "wasi_python.run")
    assert run.parent is not None and run.parent.span_id == caller.get_span_context().span_id
    assert run.attributes["wasi_python.exit_code"] == 0
    assert run.attributes["wasi_python.deadline_s"] == 30
    assert run.status.status_code != StatusCode.ERROR
    calls = by_name(got, "wasi_python.tool_call")
    assert sorted(c.attributes["wasi_python.tool"] for c in calls) == ["add", "broken"]
    assert {c.attributes["wasi_python.tool"]: c.attributes["wasi_python.outcome"] for c in calls} == {"add": "ok", "broken": "error"}
    for c in calls:
        assert c.parent.span_id == run.context.span_id
    files = by_name(got, "wasi_python.file_call")
    assert files, "the provider's calls have spans"
    assert {f.attributes["wasi_python.op"] for f in files} >= {"read"}
    for f in files:
        assert f.parent.span_id == run.context.span_id


def test_a_failed_run_sets_an_error_status(spans):
    done = wasi_python.run(["-c", "raise SystemExit(3)"])
    assert done.exit_code == 3
    (run,) = by_name(spans.get_finished_spans(), "wasi_python.run")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["wasi_python.exit_code"] == 3


def test_a_trapped_run_says_why(spans):
    done = wasi_python.run(["-c", "while True: pass"], deadline_s=0.3)
    assert done.trapped == "deadline"
    (run,) = by_name(spans.get_finished_spans(), "wasi_python.run")
    assert run.attributes["wasi_python.trapped"] == "deadline"
    assert run.status.status_code == StatusCode.ERROR


def test_session_turns_have_spans_under_the_callers(spans):
    tracer = trace.get_tracer("test")
    with wasi_python.Session(tools=[add]) as s:
        with tracer.start_as_current_span("turn caller") as caller:
            r = s.run("from host import tools\nx = tools.add(a=2, b=2)\nprint(x)")
        assert r.stdout == b"4\n"
    got = spans.get_finished_spans()
    turns = by_name(got, "wasi_python.turn")
    assert len(turns) == 1
    (turn,) = turns
    assert turn.parent.span_id == caller.get_span_context().span_id
    (call,) = by_name(got, "wasi_python.tool_call")
    assert call.parent.span_id == turn.context.span_id


def test_run_async_has_a_span_under_the_tasks_current(spans):
    tracer = trace.get_tracer("test")

    async def main():
        with tracer.start_as_current_span("async caller") as caller:
            done = await wasi_python.run_async(["-c", "from host import tools\nprint(tools.add(a=5, b=5))"], tools=[add])
        return caller, done

    caller, done = asyncio.run(main())
    assert done.stdout == b"10\n"
    got = spans.get_finished_spans()
    (run,) = by_name(got, "wasi_python.run")
    assert run.parent.span_id == caller.get_span_context().span_id
    (call,) = by_name(got, "wasi_python.tool_call")
    assert call.parent.span_id == run.context.span_id


def test_nothing_is_imported_or_made_without_a_tracer():
    # In a process of its own: the package never imports opentelemetry itself.
    code = (
        "import sys, wasi_python\n"
        "from wasi_python.tools import tool\n"
        "@tool\n"
        "def one() -> int:\n"
        "    'One.'\n"
        "    return 1\n"
        "d = wasi_python.run(['-c', 'from host import tools; print(tools.one())'], tools=[one])\n"
        "assert d.stdout == b'1\\n', d\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_api_alone_makes_no_spans(spans):
    # The API imported but no SDK provider set (a child, where the global is unset): no span.
    code = (
        "import opentelemetry.trace as t, wasi_python\n"
        "from wasi_python import _otel\n"
        "assert _otel.tracer() is None\n"
        "print(wasi_python.run(['-c', 'print(2)']).stdout)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b'2\\n'"


def test_memory_files_calls_are_counted_on_the_run(spans):
    done = wasi_python.run(["-c", "print(open('/m/x').read())"], mounts=[Mount(MemoryFiles({"x": b"y"}), "/m")])
    assert done.stdout == b"y\n"
    (run,) = by_name(spans.get_finished_spans(), "wasi_python.run")
    assert run.attributes["wasi_python.file_calls"] >= 1


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    s.daemon_threads = True
    t = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield s
    s.shutdown()
    s.server_close()


def test_network_requests_have_spans_under_their_run_and_turn(spans, server):
    port = server.server_address[1]
    code = f"from host import http\nprint(http.request('GET', 'http://127.0.0.1:{port}/x?q=1').status)\nhttp.request('GET', 'http://example.invalid/')"
    net = wasi_python.Network(["127.0.0.1"])
    done = wasi_python.run(["-c", code], network=net, deadline_s=30)
    assert done.stdout.startswith(b"200\n"), done.stderr
    got = spans.get_finished_spans()
    (run,) = by_name(got, "wasi_python.run")
    reqs = by_name(got, "wasi_python.network_request")
    assert [r.attributes["wasi_python.outcome"] for r in reqs] == ["ok", "refused"]
    ok = reqs[0]
    assert ok.parent.span_id == run.context.span_id
    assert (ok.attributes["wasi_python.method"], ok.attributes["wasi_python.host"], ok.attributes["wasi_python.status"]) == ("GET", "127.0.0.1", 200)
    assert ok.attributes["wasi_python.path"] == "/x", "no query string"
    assert reqs[1].status.status_code == StatusCode.ERROR
    spans.clear()
    with wasi_python.Session(network=net) as s:
        for _ in range(2):
            s.run(f"from host import http\nhttp.request('GET', 'http://127.0.0.1:{port}/')")
    got = spans.get_finished_spans()
    turns = by_name(got, "wasi_python.turn")
    reqs = by_name(got, "wasi_python.network_request")
    assert len(turns) == 2 and len(reqs) == 2
    assert [r.parent.span_id for r in reqs] == [t.context.span_id for t in turns], "each request under its own turn"
