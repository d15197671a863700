"""The MCP server of ``wasi-python serve mcp`` (on the official ``mcp`` SDK's low-level
``Server``): the ``run_python`` tool, named sessions (`Sessions`), the discovery tools over
upstream servers, and the two transports (stdio, streamable HTTP with an optional bearer
token). Whatever the guest does is a tool result, ``isError`` when it did not exit 0."""

from __future__ import annotations

import hmac
import json
import logging
import re
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

import anyio
import anyio.to_thread

from .. import DEFAULTS, Completed, Session, SessionEnded, run_async
from ..tools import stubs
from ._config import ServeConfig
from ._displays import displays_json, mcp_content, summary
from ._upstream import Upstreams

__all__ = ["SandboxServer", "Refused", "serve"]

log = logging.getLogger("wasi_python.serve")

SESSION_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: Text of one stream shown to the model; the structured content carries it whole.
SHOWN_CHARS = 100_000


class Refused(Exception):
    """A call the server answers with ``isError`` and this text, before any guest runs."""


# --------------------------------------------------------------------------------------------
# Sessions


@dataclass
class _Live:
    session: Session
    lock: anyio.Lock


class Sessions:
    """Named sessions: each name keeps its interpreter across calls, up to ``max_sessions``
    alive at once; each ends after ``session_idle_s`` at rest (the runtime's idle end), at
    its lifetime, or when a turn traps. A name whose session ended starts a new one, and the
    result says so."""

    def __init__(self, cfg: ServeConfig, tools: list[Any]) -> None:
        self.cfg = cfg
        self.tools = tools
        self.live: dict[str, _Live] = {}
        self.lock = anyio.Lock()

    def _open(self) -> Session:
        kw: dict[str, Any] = dict(
            memory_bytes=self.cfg.memory_bytes, deadline_s=self.cfg.deadline_s, output_bytes=self.cfg.output_bytes,
            preload=self.cfg.preload, grants=self.cfg.mounts,
            idle_s=self.cfg.session_idle_s, lifetime_s=self.cfg.session_lifetime_s, network=self.cfg.network(),
        )
        if self.tools:
            kw.update(tools=self.tools, max_tool_calls=self.cfg.max_tool_calls)
        return Session(**kw)

    async def _drop(self, name: str) -> None:
        live = self.live.pop(name, None)
        if live is not None:
            await anyio.to_thread.run_sync(live.session.close)

    async def turn(self, name: str, code: str, timeout_s: Optional[float]) -> tuple[Completed, list[str]]:
        notes: list[str] = []
        async with self.lock:
            for other, was in list(self.live.items()):
                if was.session.ended is not None and not was.lock.locked():
                    if other == name:
                        notes.append(f"session {name!r} had ended ({was.session.ended}); this call started a new one, without its variables")
                    await self._drop(other)
            found = self.live.get(name)
            if found is not None:
                live = found
            else:
                if len(self.live) >= self.cfg.max_sessions:
                    raise Refused(
                        f"{len(self.live)} sessions are alive, the most this server keeps: end one with end_session, "
                        f"or call without a session; a session ends after {self.cfg.session_idle_s:g} s at rest"
                    )
                live = _Live(await anyio.to_thread.run_sync(self._open), anyio.Lock())
                self.live[name] = live
                if not notes:
                    notes.append(f"new session {name!r}")
        async with live.lock:
            limits = self.cfg.run_limits(timeout_s)
            try:
                done = await live.session.run_async(code, deadline_s=limits["deadline_s"])
            except SessionEnded:
                done = None
            ended = live.session.ended
        if ended is not None:
            async with self.lock:
                if self.live.get(name) is live:
                    await self._drop(name)
            notes.append(f"session {name!r} ended ({ended}); the next call with this name starts a new one")
        if done is None:
            raise Refused(" ".join(notes))
        return done, notes

    async def end(self, name: str) -> bool:
        async with self.lock:
            if name not in self.live:
                return False
            await self._drop(name)
            return True

    async def close(self) -> None:
        async with self.lock:
            for name in list(self.live):
                await self._drop(name)


# --------------------------------------------------------------------------------------------
# Results


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _shown(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + f"\n[... {len(text) - SHOWN_CHARS} more characters in the structured result]"


def tool_calls(done: Completed) -> list[dict[str, Any]]:
    """The run's tool calls, from its record (``list`` frames left out)."""
    if done.tools is None:
        return []
    return [
        {"seq": o.seq, "tool": o.tool, "outcome": o.outcome, "message": o.message, "abandoned": o.abandoned}
        for o in done.tools.outcomes if o.op != "list"
    ]


def describe(done: Completed, cfg: ServeConfig, deadline_s: float, session: Optional[str], notes: list[str]) -> Any:
    """A run's end as an MCP tool result: text for the model, the same as structured content;
    then its displays, each a content item of its own (a PNG an image, HTML or markdown
    text), and whole in the structured content."""
    import mcp_types as t

    calls = tool_calls(done)
    displays = displays_json(done)
    out: dict[str, Any] = {
        "exit_code": done.exit_code,
        "stdout": _text(done.stdout),
        "stderr": _text(done.stderr),
        "trapped": done.trapped,
        "truncated": list(done.truncated),
        "duration_s": round(done.duration_s, 6),
        "session": session,
        "notes": notes,
        "tool_calls": calls,
        "displays": displays,
    }
    lines = [f"[{n}]" for n in notes]
    if done.trapped is not None:
        why = {
            "deadline": f"the run passed its deadline of {deadline_s:g} s and was stopped",
            "memory": f"the run needed more than its memory cap of {cfg.memory_bytes} bytes and was stopped",
        }.get(done.trapped, "the run was stopped")
        lines.append(f"trapped: {done.trapped} ({why})")
    else:
        lines.append(f"exit code: {done.exit_code}")
    for stream in ("stdout", "stderr"):
        if out[stream]:
            cut = " (cut at the output cap)" if stream in done.truncated else ""
            lines.append(f"{stream}{cut}:\n{_shown(out[stream]).rstrip()}")
    if calls:
        kinds: dict[str, int] = {}
        for c in calls:
            kinds[c["outcome"]] = kinds.get(c["outcome"], 0) + 1
        lines.append(f"tool calls: {len(calls)} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    if displays:
        cut = " (cut at the display cap)" if "displays" in done.truncated else ""
        lines.append(f"displays{cut}: {summary(displays)}, each a content item below")
    return t.CallToolResult(
        content=[t.TextContent(type="text", text="\n".join(lines)), *mcp_content(displays, SHOWN_CHARS)],
        structured_content=out,
        is_error=not done.ok,
    )


def _error(text: str) -> Any:
    import mcp_types as t

    return t.CallToolResult(content=[t.TextContent(type="text", text=text)], is_error=True)


def _ok(text: str, structured: Any = None) -> Any:
    import mcp_types as t

    return t.CallToolResult(content=[t.TextContent(type="text", text=text)], structured_content=structured)


# --------------------------------------------------------------------------------------------
# The server


_RUN_OUTPUT = {
    "type": "object",
    "properties": {
        "exit_code": {"type": ["integer", "null"]},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "trapped": {"type": ["string", "null"]},
        "truncated": {"type": "array", "items": {"type": "string"}},
        "duration_s": {"type": "number"},
        "session": {"type": ["string", "null"]},
        "notes": {"type": "array", "items": {"type": "string"}},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "displays": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["exit_code", "stdout", "stderr", "trapped"],
}


class SandboxServer:
    """The MCP server: `tools` lists what it offers, `call` answers a ``tools/call``;
    `serve_stdio` and `serve_http` run it."""

    def __init__(self, cfg: ServeConfig, upstreams: Optional[Upstreams] = None) -> None:
        self.cfg = cfg
        self.upstreams = upstreams
        self.guest_tools = upstreams.tools() if upstreams is not None else []
        self.sessions = Sessions(cfg, self.guest_tools)
        self.handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "run_python": self._run_python,
            "end_session": self._end_session,
        }
        if upstreams is not None:
            self.handlers.update({
                "list_upstream_tools": self._list_upstream,
                "search_upstream_tools": self._search_upstream,
                "get_upstream_tool": self._get_upstream,
                "upstream_stubs": self._stubs,
            })

    # ---- what it offers

    def _run_description(self) -> str:
        c = self.cfg
        lines = [
            "Run Python (full CPython 3.15, with numpy, pandas, scipy, scikit-learn and matplotlib) in a "
            "WebAssembly sandbox: no network, no subprocesses; the working folder /work is private to the run. "
            "The result has stdout, stderr, the exit code and, if the sandbox stopped the run, why (trapped).",
            "Figures and tables come back as in a notebook: plt.show() and matplotlib figures left open become PNG "
            "images, display(obj) shows an object's rich form (a DataFrame as HTML), and in a session a final "
            "expression with one (a DataFrame, a figure) is shown too.",
            f"Limits: {c.deadline_s:g} s (timeout_s may ask less), {c.memory_bytes // (1 << 20)} MiB of memory, "
            f"{c.output_bytes} bytes of output per stream.",
            f"session: a name (letters, digits, _ . -) keeps one interpreter across calls, like a notebook: variables "
            f"and imports stay, a final expression is echoed. At most {c.max_sessions} live at once; one ends after "
            f"{c.session_idle_s:g} s at rest, or when a turn is stopped (deadline, memory); end_session ends one.",
        ]
        if c.mounts:
            lines.append("Folders: " + ", ".join(f"{g.guest_path} ({'read-write' if g.writable else 'read-only'})" for g in c.mounts) + ".")
        if self.upstreams is not None:
            servers = ", ".join(f"{u.name} ({len(u.listed)} tools)" if u.client else f"{u.name} (unavailable: {u.error})" for u in self.upstreams.upstreams)
            lines.append(
                "Tools of other MCP servers are functions here: `from host import tools` then "
                "`tools.<server>__<tool>(arg=...)` returns the tool's result (structured content, else its text) "
                "and raises host.ToolError (a ToolTimeout past its timeout) when it fails; the program runs on. "
                f"Servers: {servers}. Find tools with search_upstream_tools / list_upstream_tools, read one with "
                "get_upstream_tool, or get Python stubs with upstream_stubs; help(tools.<name>) works in the code."
            )
        return "\n\n".join(lines)

    def tools(self) -> list[Any]:
        import mcp_types as t

        name_prop = {"type": "string", "pattern": SESSION_NAME.pattern, "description": "a session's name"}
        out = [
            t.Tool(
                name="run_python",
                description=self._run_description(),
                input_schema={
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "description": "Python source to run"},
                        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": f"wall-clock deadline in seconds (at most {self.cfg.deadline_s:g})"},
                        "session": dict(name_prop, description="run in this named session, keeping its variables (omit for a fresh interpreter)"),
                    },
                    "required": ["code"],
                    "additionalProperties": False,
                },
                output_schema=_RUN_OUTPUT,
                annotations=t.ToolAnnotations(open_world_hint=self.upstreams is not None, destructive_hint=bool(any(g.writable for g in self.cfg.mounts))),
            ),
            t.Tool(
                name="end_session",
                description="End a named session of run_python, freeing its place.",
                input_schema={"type": "object", "properties": {"session": name_prop}, "required": ["session"], "additionalProperties": False},
            ),
        ]
        if self.upstreams is not None:
            server_prop = {"type": "string", "description": "only this upstream server's tools"}
            out += [
                t.Tool(name="list_upstream_tools", description="List the tools of the upstream MCP servers that run_python code can call (name: first line of its description), and the servers that failed to start.",
                       input_schema={"type": "object", "properties": {"server": server_prop}, "additionalProperties": False},
                       annotations=t.ToolAnnotations(read_only_hint=True)),
                t.Tool(name="search_upstream_tools", description="Search the upstream tools by words of their names and descriptions; the best matches first.",
                       input_schema={"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}}, "required": ["query"], "additionalProperties": False},
                       annotations=t.ToolAnnotations(read_only_hint=True)),
                t.Tool(name="get_upstream_tool", description="One upstream tool in full: its Python stub (how code calls it), description, input schema, and what of the schema is not checked here.",
                       input_schema={"type": "object", "properties": {"name": {"type": "string", "description": "the tool's name in code (server__tool) or server.tool"}}, "required": ["name"], "additionalProperties": False},
                       annotations=t.ToolAnnotations(read_only_hint=True)),
                t.Tool(name="upstream_stubs", description="Python stubs of the upstream tools as code calls them (`from host import tools`), for the prompt.",
                       input_schema={"type": "object", "properties": {"server": server_prop}, "additionalProperties": False},
                       annotations=t.ToolAnnotations(read_only_hint=True)),
            ]
        return out

    # ---- calls

    async def call(self, name: str, arguments: Any) -> Any:
        """One ``tools/call``: a tool result whatever the arguments; an unknown tool is the
        protocol's error (INVALID_PARAMS)."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        handler = self.handlers.get(name)
        if handler is None:
            raise MCPError(INVALID_PARAMS, f"no tool named {name[:64]!r}; this server offers {', '.join(self.handlers)}")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _error("the arguments must be an object")
        try:
            return await handler(arguments)
        except Refused as e:
            return _error(str(e))
        except Exception as e:  # noqa: BLE001 - a fault here must not end the server
            log.exception("%s failed", name)
            return _error(f"{name} failed (internal error: {type(e).__name__})")

    def _args(self, args: dict[str, Any], spec: dict[str, tuple[type | tuple[type, ...], bool]]) -> dict[str, Any]:
        unknown = sorted(set(args) - set(spec))
        if unknown:
            raise Refused(f"unknown argument {unknown[0][:64]!r}; this tool takes {', '.join(spec)}")
        for key, (kind, required) in spec.items():
            if key not in args or args[key] is None:
                if required:
                    raise Refused(f"missing required argument {key!r}")
                continue
            v = args[key]
            if isinstance(v, bool) and kind is not bool or not isinstance(v, kind):
                names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
                raise Refused(f"argument {key!r}: expected {names}, got {type(v).__name__}")
        return args

    def _session_name(self, value: Any) -> Optional[str]:
        if value is None:
            return None
        if not SESSION_NAME.match(value):
            raise Refused(f"session: {value[:64]!r} is not a name of 1-64 letters, digits, '_', '.' or '-'")
        return str(value)

    async def _run_python(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"code": (str, True), "timeout_s": ((int, float), False), "session": (str, False)})
        code: str = a["code"]
        if "\0" in code:
            raise Refused("code holds a NUL character")
        timeout = a.get("timeout_s")
        if timeout is not None and not (timeout > 0 and timeout == timeout):
            raise Refused(f"timeout_s must be a positive number of seconds, not {timeout!r}")
        session = self._session_name(a.get("session"))
        limits = self.cfg.run_limits(timeout)
        if session is not None:
            done, notes = await self.sessions.turn(session, code, timeout)
        else:
            done, notes = await run_async(["-c", code], **self._run_kw(limits)), []
        return describe(done, self.cfg, limits["deadline_s"], session, notes)

    def _run_kw(self, limits: dict[str, Any]) -> dict[str, Any]:
        """``run_async``'s keywords, leaving out those at their default (so a plain run
        takes the extension's fast path)."""
        kw = {k: v for k, v in limits.items() if v != DEFAULTS[k]}
        if self.cfg.preload is not None:
            kw["preload"] = self.cfg.preload
        if self.cfg.mounts:
            kw["grants"] = self.cfg.mounts
        if self.cfg.network_allow:
            kw["network"] = self.cfg.network()
        if self.guest_tools:
            kw["tools"] = self.guest_tools
            kw["max_tool_calls"] = self.cfg.max_tool_calls
        return kw

    async def _end_session(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"session": (str, True)})
        name = self._session_name(a["session"])
        assert name is not None
        ended = await self.sessions.end(name)
        return _ok(f"session {name!r} ended" if ended else f"no session {name!r} is alive", {"ended": ended})

    def _ups(self) -> Upstreams:
        assert self.upstreams is not None
        return self.upstreams

    async def _list_upstream(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"server": (str, False)})
        ups = self._ups()
        server = a.get("server")
        entries = [e for e in ups.entries if server is None or e.server == server]
        lines = [e.summary() for e in entries]
        failed = {k: v for k, v in ups.failed().items() if server is None or k == server}
        lines += [f"(server {k!r} is unavailable: {v})" for k, v in failed.items()]
        if server is not None and not entries and server not in failed:
            raise Refused(f"no upstream server {server[:64]!r}; servers: {', '.join(u.name for u in ups.upstreams)}")
        return _ok("\n".join(lines) or "no upstream tools", {"tools": [e.name for e in entries], "unavailable": failed})

    async def _search_upstream(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"query": (str, True), "limit": (int, False)})
        limit = max(1, min(100, a.get("limit") or 10))
        found = self._ups().search(a["query"][:1000], limit)
        return _ok("\n".join(e.summary() for e in found) or "no upstream tool matches", {"tools": [e.name for e in found]})

    async def _get_upstream(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"name": (str, True)})
        e = self._ups().find(a["name"])
        if e is None:
            raise Refused(f"no upstream tool {a['name'][:64]!r}; list_upstream_tools lists them")
        stub = stubs([e.offered])
        unchecked = ", ".join(e.unchecked) if e.unchecked else "nothing: every keyword is checked here"
        text = f"{stub}\nInput schema (of the upstream server):\n{json.dumps(e.input_schema, indent=1)}\n\nNot checked here: {unchecked}"
        if e.note:
            text += f"\nNote: {e.note}"
        return _ok(text, {"name": e.name, "server": e.server, "tool": e.tool, "description": e.description,
                          "input_schema": e.input_schema, "stub": stub, "unchecked": e.unchecked})

    async def _stubs(self, args: dict[str, Any]) -> Any:
        a = self._args(args, {"server": (str, False)})
        server = a.get("server")
        chosen = [e.offered for e in self._ups().entries if server is None or e.server == server]
        text = "from host import tools  # each function below is tools.<name>\n\n" + stubs(chosen) if chosen else "no upstream tools"
        return _ok(text)

    # ---- transports

    def lowlevel(self) -> Any:
        from mcp.server.lowlevel import Server
        import mcp_types as t

        async def on_list_tools(ctx: Any, params: Any) -> Any:
            return t.ListToolsResult(tools=self.tools())

        async def on_call_tool(ctx: Any, params: Any) -> Any:
            return await self.call(params.name, params.arguments)

        return Server(
            "wasi-python", version=_version(),
            instructions="run_python runs Python in a sandbox; see its description.",
            on_list_tools=on_list_tools, on_call_tool=on_call_tool,
        )

    async def serve_stdio(self) -> None:
        from mcp.server.stdio import stdio_server

        server = self.lowlevel()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    async def serve_http(self, ready: Optional[Callable[[str], None]] = None) -> None:
        import uvicorn

        host, port = self.cfg.http  # type: ignore[misc]
        app = self.lowlevel().streamable_http_app(host=host)
        if self.cfg.token:
            app = _Bearer(app, self.cfg.token)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/mcp"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        print(f"wasi-python serve mcp: listening on {url}", file=sys.stderr, flush=True)
        if ready is not None:
            ready(url)
        # uvicorn shuts down on SIGTERM, then raises it again under the handler it found:
        # with the default one the process would die before the sessions and upstreams
        # are closed, so it finds one that only notes it.
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:
            await server.serve(sockets=[sock])
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    async def close(self) -> None:
        await self.sessions.close()


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("wasi-python-sandbox")
    except Exception:  # noqa: BLE001 - not installed: a source tree
        return "0"


class _Bearer:
    """ASGI: every HTTP request needs ``Authorization: Bearer <token>`` (compared in
    constant time), else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


async def serve(cfg: ServeConfig) -> None:
    """Runs the server with ``cfg`` until its client leaves (stdio) or a signal (HTTP)."""
    ups = Upstreams.from_file(cfg.upstream, cfg.upstream_timeout_s, cfg.upstream_start_s) if cfg.upstream else None
    async with anyio.create_task_group() as tg:
        if ups is not None:
            await ups.start(tg)
            for name, why in ups.failed().items():
                print(f"wasi-python serve mcp: upstream {name!r} is unavailable: {why}", file=sys.stderr, flush=True)
        app = SandboxServer(cfg, ups)
        try:
            if cfg.http is not None:
                await app.serve_http()
            else:
                await app.serve_stdio()
        finally:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(10):
                    await app.close()
                if ups is not None:
                    ups.stop()
            tg.cancel_scope.deadline = anyio.current_time() + 5
