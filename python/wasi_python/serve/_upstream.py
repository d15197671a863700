"""Code mode's upstream MCP servers: the ``mcpServers`` file read (`read_servers`), each server
held open by a task of its own (`Upstream`), and each of its tools made a guest tool
(`Upstreams.tools`) named ``<server>__<tool>`` that calls it through our door: checked, gated,
bounded and recorded like any tool. A server that fails to start, dies or hangs fails only
its own calls."""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import json
import keyword
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Optional

import anyio

from ..tools import Tool, ToolError, tool

#: The SDK's error code for a connection that closed (mcp_types.CONNECTION_CLOSED).
CONNECTION_CLOSED = -32000

__all__ = ["UpstreamSpec", "Upstream", "Upstreams", "Entry", "read_servers", "flat_name", "unchecked_keywords"]

log = logging.getLogger("wasi_python.serve")

#: Pages of ``tools/list`` read from one upstream, and tools kept from it.
MAX_PAGES = 20
MAX_TOOLS = 500


@dataclass(frozen=True)
class UpstreamSpec:
    """One entry of ``mcpServers``: a command (with args, env, cwd) or a URL (with headers)."""

    name: str
    command: Optional[str] = None
    args: tuple[str, ...] = ()
    env: Optional[dict[str, str]] = None
    cwd: Optional[str] = None
    url: Optional[str] = None
    headers: Optional[dict[str, str]] = None


def read_servers(path: str) -> list[UpstreamSpec]:
    """The ``mcpServers`` object of a desktop client's JSON file (or the object itself)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    servers = data.get("mcpServers", data) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: expected {{\"mcpServers\": {{name: {{\"command\": ...}} or {{\"url\": ...}}}}}}")
    out = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: mcpServers[{name!r}] must be an object")
        if entry.get("disabled") is True:
            continue
        if "command" in entry:
            args = entry.get("args", [])
            env = entry.get("env")
            if not isinstance(entry["command"], str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValueError(f"{path}: mcpServers[{name!r}]: command is a string and args a list of strings")
            if env is not None and not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
                raise ValueError(f"{path}: mcpServers[{name!r}]: env maps strings to strings")
            out.append(UpstreamSpec(name, command=entry["command"], args=tuple(args), env=env, cwd=entry.get("cwd")))
        elif "url" in entry:
            headers = entry.get("headers")
            if not isinstance(entry["url"], str) or (headers is not None and not isinstance(headers, dict)):
                raise ValueError(f"{path}: mcpServers[{name!r}]: url is a string and headers an object")
            out.append(UpstreamSpec(name, url=entry["url"], headers={str(k): str(v) for k, v in (headers or {}).items()}))
        else:
            raise ValueError(f"{path}: mcpServers[{name!r}] has neither a command nor a url")
    return out


# --------------------------------------------------------------------------------------------
# Names and schemas


def _ident(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if not s or not s[0].isalpha():
        s = "x" + s
    return s


def flat_name(server: str, tool_name: str, taken: set[str]) -> str:
    """The guest's name of an upstream tool: ``<server>__<tool>``, each part cut to
    ``[A-Za-z0-9_]``, at most 64 characters, made unique with ``_2``, ``_3``..."""
    base = f"{_ident(server)}__{re.sub(r'[^A-Za-z0-9_]', '_', tool_name)}"[:60]
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


#: The keywords our door checks (crates/schema): anything else in an upstream schema is
#: let through unchecked (``validates_input``) and left to the upstream server.
SUBSET = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema", "format", "contentMediaType", "$id", "type", "enum", "const", "properties", "required",
    "additionalProperties", "minProperties", "maxProperties", "items", "prefixItems", "minItems",
    "maxItems", "uniqueItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minLength", "maxLength", "pattern", "contentEncoding", "anyOf", "oneOf", "allOf",
    "not", "$ref", "$defs", "definitions",
})


def unchecked_keywords(schema: Any) -> list[str]:
    """The keywords of ``schema`` outside our subset, sorted: what the door does not check."""
    found: set[str] = set()
    todo, seen = [schema], 0
    while todo and seen < 10_000:
        s = todo.pop()
        seen += 1
        if not isinstance(s, dict):
            continue
        for k, v in s.items():
            if k not in SUBSET:
                found.add(k)
            elif k in ("properties", "$defs", "definitions") and isinstance(v, dict):
                todo.extend(v.values())
            elif k in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(v, list):
                todo.extend(v)
            elif k in ("items", "additionalProperties", "not"):
                todo.append(v)
    return sorted(found)


def _renamed(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The schema with top-level property names made Python identifiers (the guest's
    parameters), and the map from the new names back to the upstream's."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return schema, {}
    back: dict[str, str] = {}
    new_props: dict[str, Any] = {}
    for name, sub in props.items():
        new = name
        if not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name):
            new = re.sub(r"[^A-Za-z0-9_]", "_", name)
            if not new or new[0].isdigit():
                new = "p_" + new
            if keyword.iskeyword(new):
                new += "_"
        while new in new_props or (new != name and new in props):
            new += "_"
        new_props[new] = sub
        if new != name:
            back[new] = name
    if not back:
        return schema, {}
    out = dict(schema, properties=new_props)
    if isinstance(schema.get("required"), list):
        fwd = {v: k for k, v in back.items()}
        out["required"] = [fwd.get(r, r) for r in schema["required"]]
    return out, back


def _plain(value: Any) -> Any:
    """Guest arguments as JSON for the upstream: bytes as base64 text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# One upstream server


class Upstream:
    """One upstream server, held open by `hold` (a task of its own, so its failure stays its
    own) on the server's event loop; `call` may be awaited from any loop."""

    def __init__(self, spec: UpstreamSpec, call_timeout_s: float, start_s: float) -> None:
        self.spec = spec
        self.name = spec.name
        self.call_timeout_s = call_timeout_s
        self.start_s = start_s
        self.client: Any = None
        self.listed: list[Any] = []
        self.error: Optional[str] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.ready = anyio.Event()
        self._stop = anyio.Event()
        self._inflight: set[anyio.CancelScope] = set()

    @property
    def state(self) -> str:
        if self.client is not None:
            return "running"
        return f"failed: {self.error}" if self.error else "starting"

    def _transport(self) -> Any:
        from mcp import StdioServerParameters

        s = self.spec
        if s.command is not None:
            return StdioServerParameters(command=s.command, args=list(s.args), env=s.env, cwd=s.cwd)
        if not s.headers:
            return s.url

        @contextlib.asynccontextmanager
        async def with_headers() -> AsyncIterator[Any]:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(headers=s.headers, timeout=self.call_timeout_s) as http:
                async with streamable_http_client(s.url, http_client=http) as streams:  # type: ignore[arg-type]
                    yield streams

        return with_headers()

    async def hold(self) -> None:
        """Starts the server, lists its tools, and keeps it until `stop`; any failure is
        kept in ``error`` and fails later calls."""
        import mcp

        self.loop = asyncio.get_running_loop()
        started = False
        try:
            # One scope around the client's whole life (its task groups nest inside), its
            # deadline the start's bound until the tools are listed.
            with anyio.CancelScope(deadline=anyio.current_time() + self.start_s) as scope:
                async with mcp.Client(self._transport(), read_timeout_seconds=None, cache=None) as client:
                    self.listed = await self._list(client)
                    scope.deadline = math.inf
                    self.client = client
                    started = True
                    self.ready.set()
                    log.info("upstream %r: %d tools", self.name, len(self.listed))
                    await self._stop.wait()
            if scope.cancelled_caught and not started:
                self.error = f"did not start within {self.start_s:g} s"
        except Exception as e:  # noqa: BLE001 - one upstream's failure is its own
            self.error = _why(e)
        finally:
            self.client = None
            for scope in list(self._inflight):
                scope.cancel()
            self.ready.set()
            if self.error:
                log.warning("upstream %r %s", self.name, self.state)

    async def _list(self, client: Any) -> list[Any]:
        listed: list[Any] = []
        cursor = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(listed) >= MAX_TOOLS:
                break
        return listed[:MAX_TOOLS]

    def stop(self) -> None:
        self._stop.set()

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        """Calls one of its tools, from any event loop; a failure is a `ToolError` whose text
        the guest reads."""
        loop = self.loop
        if loop is None or self.client is None:
            raise ToolError(f"upstream server {self.name!r} is not running ({self.state})")
        if asyncio.get_running_loop() is loop:
            return await self._call(name, args)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._call(name, args), loop))

    async def _call(self, name: str, args: dict[str, Any]) -> Any:
        client = self.client
        if client is None:
            raise ToolError(f"upstream server {self.name!r} is not running ({self.state})")
        result = None
        with anyio.CancelScope() as scope:
            self._inflight.add(scope)
            try:
                result = await client.call_tool(name, _plain(args))
            except ToolError:
                raise
            except Exception as e:  # noqa: BLE001 - the upstream's failure, told to the guest
                if getattr(e, "code", None) == CONNECTION_CLOSED or isinstance(e, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
                    # It is gone: later calls fail at once, and its task ends (reaping a process).
                    self.error = f"it closed its connection during a call to {name!r}"
                    self.client = None
                    self._stop.set()
                raise ToolError(f"upstream server {self.name!r} failed the call to {name!r}: {_why(e)}") from None
            finally:
                self._inflight.discard(scope)
        if result is None:
            raise ToolError(f"upstream server {self.name!r} stopped during the call to {name!r} ({self.state})")
        text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
        if result.is_error:
            raise ToolError(text or f"{self.name}.{name} failed")
        if result.structured_content is not None:
            return result.structured_content
        if all(getattr(c, "type", None) == "text" for c in result.content):
            return text
        return [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content]


#: ``BaseExceptionGroup`` (Python 3.11+; anyio's backport before).
_GROUPS: tuple[type, ...] = tuple(t for t in (getattr(builtins, "BaseExceptionGroup", None),) if t is not None)


def _why(e: BaseException) -> str:
    """One line naming an exception, the first of a group's."""
    while _GROUPS and isinstance(e, _GROUPS) and getattr(e, "exceptions", None):
        e = e.exceptions[0]  # type: ignore[attr-defined]
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# --------------------------------------------------------------------------------------------
# All upstreams, and their tools as the guest's


@dataclass
class Entry:
    """One upstream tool as offered: the guest's name, where it comes from, and what of
    its schema the door does not check."""

    name: str
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    unchecked: list[str]
    offered: Tool
    note: Optional[str] = None

    def summary(self) -> str:
        first = (self.description.strip().splitlines() or [""])[0]
        return f"{self.name}: {first}" if first else self.name


@dataclass
class Upstreams:
    """Every upstream of the ``mcpServers`` file, started together by `run` (a task each,
    each bounded by its start time), and their tools for the guest."""

    upstreams: list[Upstream]
    entries: list[Entry] = field(default_factory=list)

    @classmethod
    def from_file(cls, path: str, call_timeout_s: float, start_s: float) -> "Upstreams":
        return cls([Upstream(s, call_timeout_s, start_s) for s in read_servers(path)])

    async def start(self, tg: Any) -> None:
        """Starts each upstream in ``tg`` and waits until each has started or failed."""
        for u in self.upstreams:
            tg.start_soon(u.hold, name=f"upstream {u.name}")
        for u in self.upstreams:
            await u.ready.wait()
        self.entries = self._entries()

    def stop(self) -> None:
        for u in self.upstreams:
            u.stop()

    def failed(self) -> dict[str, str]:
        return {u.name: u.error or "" for u in self.upstreams if u.client is None}

    def tools(self) -> list[Tool]:
        return [e.offered for e in self.entries]

    def _entries(self) -> list[Entry]:
        taken: set[str] = set()
        out = []
        for u in self.upstreams:
            for listed in u.listed:
                out.append(_entry(u, listed, flat_name(u.name, listed.name, taken)))
        return out

    def find(self, name: str) -> Optional[Entry]:
        for e in self.entries:
            if e.name == name or f"{e.server}.{e.tool}" == name:
                return e
        return None

    def search(self, query: str, limit: int) -> list[Entry]:
        """The entries whose names and descriptions best match the words of ``query``."""
        words = [w for w in re.findall(r"[a-z0-9]+", query.lower()) if w]
        scored = []
        for i, e in enumerate(self.entries):
            hay_name = f"{e.server} {e.tool}".lower()
            hay = f"{hay_name} {e.description}".lower()
            score = sum(3 * hay_name.count(w) + hay.count(w) for w in words)
            if score or not words:
                scored.append((-score, i, e))
        return [e for _, _, e in sorted(scored)[:limit]]


def _entry(u: Upstream, listed: Any, name: str) -> Entry:
    schema = dict(listed.input_schema or {})
    if "type" not in schema and "properties" not in schema:
        schema["type"] = "object"
    unchecked = unchecked_keywords(schema)
    guest_schema, back = _renamed(schema)
    description = (listed.description or "").strip()
    origin = f"(Upstream MCP server {u.name!r}, tool {listed.name!r}.)"
    notes = [origin]
    if back:
        notes.append("Renamed parameters: " + ", ".join(f"{k} is {v!r}" for k, v in back.items()) + ".")
    if unchecked:
        notes.append(f"Not checked here, left to the upstream server: {', '.join(unchecked)}.")
    call = _caller(u, listed.name, back)

    def make(schema_: dict[str, Any], extra: list[str]) -> Tool:
        return tool(
            call, name=name, description="\n\n".join(p for p in [description, " ".join(notes + extra)] if p),
            input_schema=schema_, validates_input=True, timeout_s=u.call_timeout_s,
            read_only=bool(getattr(listed.annotations, "read_only_hint", False)) if listed.annotations else False,
        )

    note = None
    try:
        offered = make(guest_schema, [])
    except (TypeError, ValueError) as e:
        # A schema our door cannot even read: the arguments pass unchecked, by name.
        note = f"its input schema is not checked here ({_why(e)})"
        found = guest_schema.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = [r for r in guest_schema.get("required", []) if r in props] if isinstance(guest_schema.get("required"), list) else []
        loose = {"type": "object", "properties": {k: {} for k in props}, "required": required}
        offered = make(loose, [f"Its input schema is not checked here at all ({_why(e)})."])
    return Entry(name, u.name, listed.name, description, schema, unchecked, offered, note)


def _caller(u: Upstream, tool_name: str, back: dict[str, str]) -> Any:
    async def call(**args: Any) -> Any:
        return await u.call(tool_name, {back.get(k, k): v for k, v in args.items()})

    return call
