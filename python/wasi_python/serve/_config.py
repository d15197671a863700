"""The settings of ``wasi-python serve mcp``: the library's defaults, then a config file,
then the command line, each over the last (`ServeConfig`, `add_arguments`, `config_from`)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

from .. import DEFAULTS, TOOL_DEFAULTS, Grant, Session

__all__ = ["ServeConfig", "ConfigError", "add_arguments", "config_from", "parse_http"]

_SESSION = inspect.signature(Session).parameters


class ConfigError(ValueError):
    """A setting that cannot be used, naming it."""


@dataclass(frozen=True)
class ServeConfig:
    """What ``serve mcp`` runs with. Each limit is a guest's (``run``'s keyword of the same
    name); ``deadline_s`` is also the most a call's ``timeout_s`` may ask for."""

    deadline_s: float = float(DEFAULTS["deadline_s"])
    memory_bytes: int = int(DEFAULTS["memory_bytes"])
    output_bytes: int = int(DEFAULTS["output_bytes"])
    #: None: the library's default preload (numpy, pandas, matplotlib); () for none.
    preload: Optional[tuple[str, ...]] = None
    #: Host folders the guest sees: (host, guest path, writable).
    mounts: tuple[Grant, ...] = ()
    max_sessions: int = 8
    session_idle_s: float = float(_SESSION["idle_s"].default)
    session_lifetime_s: float = float(_SESSION["lifetime_s"].default)
    #: The ``mcpServers`` JSON file of upstream MCP servers (code mode), or None.
    upstream: Optional[str] = None
    #: Each upstream tool call's bound, and each upstream's start (connect and list).
    upstream_timeout_s: float = 30.0
    upstream_start_s: float = 30.0
    max_tool_calls: int = int(TOOL_DEFAULTS["max_tool_calls"])
    #: None: stdio; else (host, port) for streamable HTTP.
    http: Optional[tuple[str, int]] = None
    #: The bearer token HTTP clients must send; required to listen off loopback.
    token: Optional[str] = field(default=None, repr=False)
    #: Hosts the guests may reach through the server's host (docs/network.md): names,
    #: wildcards, addresses; () for no network.
    network_allow: tuple[str, ...] = ()

    def network(self) -> Any:
        """The ``network=`` of every run and session: a ``Network`` of ``network_allow``, or None."""
        if not self.network_allow:
            return None
        from .._network import Network

        return Network(list(self.network_allow))

    def run_limits(self, timeout_s: Optional[float] = None) -> dict[str, Any]:
        """The keywords of one run or session turn."""
        deadline = self.deadline_s if timeout_s is None else min(float(timeout_s), self.deadline_s)
        return {"deadline_s": deadline, "memory_bytes": self.memory_bytes, "output_bytes": self.output_bytes}


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def parse_http(spec: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT`` or ``PORT`` (on 127.0.0.1)."""
    m = re.fullmatch(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})|(?P<alone>\d{1,5})", spec.strip())
    if not m:
        raise ConfigError(f"http: {spec!r} is not HOST:PORT")
    host = m["v6"] or m["host"] or "127.0.0.1"
    port = int(m["port"] or m["alone"])
    if not 0 <= port <= 65535:
        raise ConfigError(f"http: port {port} is out of range")
    return host, port


def _mount(spec: Any, writable: bool) -> Grant:
    if isinstance(spec, dict):
        try:
            return Grant(str(spec["host"]), str(spec["guest"]), bool(spec.get("writable", writable)))
        except KeyError as e:
            raise ConfigError(f"mounts: an entry needs 'host' and 'guest', not {sorted(spec)}") from None
    host, sep, guest = str(spec).rpartition(":")
    if not sep or not host or not guest.startswith("/"):
        raise ConfigError(f"mount: {spec!r} is not HOST_DIR:/GUEST_PATH")
    if not os.path.isdir(host):
        raise ConfigError(f"mount: {host!r} is not a folder")
    return Grant(host, guest, writable)


def help_text(text: str, default: Any) -> str:
    """An option's help, with the default in force."""
    return f"{text} (default: {default})"


def add_guest_arguments(p: argparse.ArgumentParser, d: ServeConfig) -> None:
    """The options every ``serve`` command shares: what each guest starts with, its output
    cap, and how long a session lives."""
    p.add_argument("--output-bytes", type=int, help=help_text("each run's cap on stdout and on stderr", d.output_bytes))
    p.add_argument("--preload", action="append", metavar="MODULE", help="a module imported before each run, repeatable (default: numpy, pandas, matplotlib.pyplot)")
    p.add_argument("--no-preload", action="store_true", help="start each run with nothing preloaded")
    p.add_argument("--mount", action="append", metavar="HOST:GUEST", help="a host folder every guest reads at GUEST, repeatable (default: none)")
    p.add_argument("--mount-rw", action="append", metavar="HOST:GUEST", help="a host folder every guest may also write, repeatable (default: none)")
    p.add_argument("--session-idle-s", type=float, help=help_text("a session that rests this long ends", d.session_idle_s))
    p.add_argument("--session-lifetime-s", type=float, help=help_text("a session ends this long after it started", d.session_lifetime_s))
    p.add_argument("--network-allow", action="append", metavar="HOST", help="a host the guests may reach over HTTP(S) through this server (a name, '*.example.com', or an address to reach a private one), repeatable (default: no network; docs/network.md)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``serve mcp``; every default shown is the one in force. A value given
    here beats the config file's."""
    d = ServeConfig()
    p.add_argument("--config", metavar="FILE", help="a JSON (or, on Python 3.11+, TOML) file of these settings by their long names with underscores, such as {\"deadline_s\": 30, \"mounts\": [{\"host\": \"./data\", \"guest\": \"/data\"}]}")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults to 127.0.0.1)")
    p.add_argument("--token", metavar="TOKEN", help="require 'Authorization: Bearer TOKEN' on HTTP; needed to listen on any address but loopback (also $WASI_PYTHON_MCP_TOKEN)")
    p.add_argument("--deadline-s", type=float, help=help_text("each run's wall-clock deadline, and the most a call's timeout_s may ask", d.deadline_s))
    p.add_argument("--memory-bytes", type=int, help=help_text("each guest's memory cap", d.memory_bytes))
    add_guest_arguments(p, d)
    p.add_argument("--max-sessions", type=int, help=help_text("named sessions alive at once", d.max_sessions))
    p.add_argument("--upstream", metavar="SERVERS_JSON", help="an mcpServers file of MCP servers whose tools the guest calls (code mode; default: none)")
    p.add_argument("--upstream-timeout-s", type=float, help=help_text("each upstream tool call's bound", d.upstream_timeout_s))
    p.add_argument("--upstream-start-s", type=float, help=help_text("each upstream's bound to start and list its tools", d.upstream_start_s))
    p.add_argument("--max-tool-calls", type=int, help=help_text("tool calls (frames) a run may make", d.max_tool_calls))


def read_file(path: str) -> dict[str, Any]:
    """A JSON or TOML file of settings."""
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".toml"):
        import tomllib  # Python 3.11+

        data: Any = tomllib.loads(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold an object of settings")
    return data


_NAMES = {f.name for f in fields(ServeConfig)}


def positive(name: str, value: Any, kind: type, zero: bool = False) -> Any:
    """`value` as a positive `kind` (or zero, if `zero`); ConfigError naming `name` if not."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: {value!r} is not a {kind.__name__}")
    try:
        v = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a {kind.__name__}") from None
    if kind is int and v != value:
        raise ConfigError(f"{name}: {value!r} is not a whole number")
    if v < 0 or (v == 0 and not zero):
        raise ConfigError(f"{name}: must be {'zero or more' if zero else 'positive'}, not {value!r}")
    return v


def given_settings(ns: argparse.Namespace, known: set[str]) -> dict[str, Any]:
    """The settings by name of a parsed command line over its config file's (which may name
    only ``known`` ones), not yet checked: each option given beats the file, ``--mount`` and
    ``--mount-rw`` add to its mounts, ``--no-preload`` empties its preload. Shared by
    ``serve mcp`` and ``serve http``."""
    given: dict[str, Any] = read_file(ns.config) if ns.config else {}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"config: unknown settings {unknown}; known: {sorted(known)}")
    for name in known - {"mounts", "preload"}:
        v = getattr(ns, name, None)
        if v is not None:
            given[name] = v
    if ns.no_preload:
        given["preload"] = ()
    elif ns.preload:
        given["preload"] = ns.preload
    mounts = list(given.get("mounts", ()))
    mounts += [m for m in ns.mount or ()] + [{"rw": m} for m in ns.mount_rw or ()]
    given["mounts"] = mounts
    return given


def config_from(ns: argparse.Namespace) -> ServeConfig:
    """The settings of a parsed command line, over its config file's, over the defaults."""
    return checked(given_settings(ns, _NAMES))


def checked(given: dict[str, Any]) -> ServeConfig:
    """A `ServeConfig` of settings by name, each checked."""
    c = ServeConfig()
    out: dict[str, Any] = {}
    for name in ("deadline_s", "session_idle_s", "session_lifetime_s", "upstream_timeout_s", "upstream_start_s"):
        if name in given:
            out[name] = positive(name, given[name], float)
    for name in ("memory_bytes", "output_bytes", "max_sessions", "max_tool_calls"):
        if name in given:
            out[name] = positive(name, given[name], int)
    if given.get("preload") is not None:
        pre = given["preload"]
        if isinstance(pre, str) or not all(isinstance(m, str) for m in pre):
            raise ConfigError("preload: a list of module names")
        out["preload"] = tuple(pre)
    mounts = []
    for m in given.get("mounts", ()):
        if isinstance(m, dict) and set(m) == {"rw"}:
            mounts.append(_mount(m["rw"], True))
        else:
            mounts.append(_mount(m, False))
    out["mounts"] = tuple(mounts)
    if given.get("upstream") is not None:
        if not os.path.isfile(str(given["upstream"])):
            raise ConfigError(f"upstream: {given['upstream']!r} is not a file")
        out["upstream"] = str(given["upstream"])
    http = given.get("http")
    if http is not None:
        out["http"] = parse_http(http) if isinstance(http, str) else (str(http[0]), int(http[1]))
    token = given.get("token") or os.environ.get("WASI_PYTHON_MCP_TOKEN") or None
    out["token"] = token
    if given.get("network_allow"):
        allow = given["network_allow"]
        if isinstance(allow, str) or not all(isinstance(h, str) for h in allow):
            raise ConfigError("network_allow: a list of host names")
        from .._network import Network

        try:
            out["network_allow"] = Network(list(allow)).hosts
        except (TypeError, ValueError) as e:
            raise ConfigError(f"network_allow: {e}") from None
    cfg = replace(c, **out)
    if cfg.http is not None and cfg.http[0] not in _LOOPBACK and not cfg.token:
        raise ConfigError(f"http: listening on {cfg.http[0]} needs --token: anyone who reaches the port could run code")
    return cfg
