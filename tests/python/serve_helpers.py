"""What the tests of ``wasi-python serve mcp`` share: the server started as a subprocess
(stdio through the ``mcp`` SDK's own client, or streamable HTTP on an ephemeral loopback
port), and `McpClient`, that SDK client driven from sync tests on an event loop thread of
its own. Every wait is bounded; each fixture stops the server it started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from helpers import PYTHON_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CALL_BOUND_S = 60.0


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def serve_argv(*options: str) -> list[str]:
    return [sys.executable, "-m", "wasi_python", "serve", "mcp", *options]


class McpClient:
    """An ``mcp.Client`` entered and left in one task on a loop thread of its own; `call`
    and `list` are sync and bounded."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-test-client", daemon=True)
        self.thread.start()
        self._stop: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Future[Any]] = None
        self.client: Any = None
        try:
            self._submit(self._enter(make), CALL_BOUND_S)
        except BaseException:
            self.close()
            raise

    def _submit(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _enter(self, make: Callable[[], Any]) -> None:
        ready: asyncio.Future[None] = self.loop.create_future()
        self._stop = asyncio.Event()

        async def hold() -> None:
            try:
                async with make() as client:
                    self.client = client
                    ready.set_result(None)
                    await self._stop.wait()  # type: ignore[union-attr]
            except BaseException as e:
                if not ready.done():
                    ready.set_exception(e)
                raise

        self._task = asyncio.ensure_future(hold())
        await ready

    def call(self, name: str, arguments: Optional[dict[str, Any]] = None, timeout: float = CALL_BOUND_S) -> Any:
        return self._submit(self.client.call_tool(name, arguments or {}), timeout)

    def list(self) -> Any:
        return self._submit(self.client.list_tools(), CALL_BOUND_S)

    def close(self) -> None:
        async def leave() -> None:
            if self._stop is not None:
                self._stop.set()
            if self._task is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self._task, 30)

        if self.thread.is_alive():
            with contextlib.suppress(BaseException):
                self._submit(leave(), 40)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def stdio_client(*options: str) -> McpClient:
    """The server started over stdio by the SDK's client (which stops it when it leaves)."""
    import mcp

    argv = serve_argv(*options)
    params = mcp.StdioServerParameters(command=argv[0], args=argv[1:], env=server_env())
    return McpClient(lambda: mcp.Client(params))


class ListeningServer:
    """A server process started with `argv` whose URL is read from its stderr ("listening
    on http://..."), bounded by `start_s`; `stop` sends SIGTERM (a graceful end), SIGKILL
    after `stop_s`, and returns the exit status."""

    def __init__(self, argv: list[str], *, env: Optional[dict[str, str]] = None, start_s: float = CALL_BOUND_S, stop_s: float = 20) -> None:
        self.stop_s = stop_s
        self.log = tempfile.NamedTemporaryFile("w+b", prefix="serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            argv, env=env or server_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
        )
        self.url = ""
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(rb"listening on (http://\S+)", Path(self.log.name).read_bytes())
            if m:
                self.url = m.group(1).decode()
                break
            time.sleep(0.05)
        if not self.url:
            self.stop()
            raise RuntimeError(f"the HTTP server did not start:\n{self.stderr()}")

    def stderr(self) -> str:
        return Path(self.log.name).read_bytes().decode(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)
        return self.proc.returncode


class HttpServer(ListeningServer):
    """``serve mcp --http 127.0.0.1:0``."""

    def __init__(self, *options: str) -> None:
        super().__init__(serve_argv("--http", "127.0.0.1:0", *options))

    def client(self, token: Optional[str]) -> McpClient:
        import httpx2
        import mcp
        from mcp.client.streamable_http import streamable_http_client

        @contextlib.asynccontextmanager
        async def transport() -> Any:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx2.AsyncClient(headers=headers, timeout=CALL_BOUND_S) as http:
                async with streamable_http_client(self.url, http_client=http) as streams:
                    yield streams

        return McpClient(lambda: mcp.Client(transport()))

