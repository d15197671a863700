"""``wasi-python run -- ARGS...`` (or ``python -m wasi_python run -- ARGS...``):
runs the guest once and prints the result as one JSON object. ``wasi-python serve mcp``:
the sandbox as an MCP server; ``wasi-python serve http``: an HTTP service that speaks
SandboxFusion's ``/run_code`` and our own API (both the ``serve`` extra; ``--help`` shows
their options)."""

from __future__ import annotations

import argparse
import json
import sys

from . import Grant, run


def _grant(spec: str, writable: bool) -> Grant:
    host, sep, guest = spec.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{spec!r}: a grant is HOST_DIR:GUEST_PATH")
    return Grant(host, guest, writable)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wasi-python", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the guest once; ARGS is CPython's command line")
    r.add_argument("--deadline-s", type=float, default=60.0)
    r.add_argument("--memory-bytes", type=int, default=1 << 30)
    r.add_argument("--output-bytes", type=int, default=16 << 20)
    r.add_argument("--fuel", type=int, default=None)
    r.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--grant", action="append", default=[], metavar="HOST:GUEST", help="read-only")
    r.add_argument("--grant-rw", action="append", default=[], metavar="HOST:GUEST", help="writable")
    r.add_argument("--stdin", action="store_true", help="pass this process's stdin to the guest")
    r.add_argument("args", nargs=argparse.REMAINDER)
    s = sub.add_parser("serve", help="serve the sandbox to agents")
    servers = s.add_subparsers(dest="server", required=True)
    m = servers.add_parser(
        "mcp", help="an MCP server with a run_python tool (stdio, or streamable HTTP with --http)",
        description="Serve the sandbox over the Model Context Protocol: a run_python tool, named sessions, "
        "and code mode over upstream MCP servers. Settings: the library's defaults, then --config, then these options.",
    )
    from .serve import add_arguments

    add_arguments(m)
    h = servers.add_parser(
        "http", help="an HTTP service: SandboxFusion's /run_code, /v1/run, /v1/batch, /v1/sessions, /metrics",
        description="Serve the sandbox over HTTP: SandboxFusion's POST /run_code (so RL and evaluation stacks switch "
        "by changing a URL), our own /v1/run, /v1/batch and /v1/sessions, /healthz and Prometheus /metrics. "
        "Settings: the library's defaults, then --config, then these options.",
    )
    from .serve._http_config import add_arguments as add_http_arguments

    add_http_arguments(h)
    ns = p.parse_args(argv)
    if ns.command == "serve" and ns.server == "http":
        from .serve._http import main as http_main

        return http_main(ns)
    if ns.command == "serve":
        from .serve import main as serve_main

        return serve_main(ns)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    env = dict(e.split("=", 1) for e in ns.env)
    grants = [_grant(g, False) for g in ns.grant] + [_grant(g, True) for g in ns.grant_rw]
    done = run(
        args,
        stdin=sys.stdin.buffer.read() if ns.stdin else b"",
        env=env,
        grants=grants,
        deadline_s=ns.deadline_s,
        memory_bytes=ns.memory_bytes,
        output_bytes=ns.output_bytes,
        fuel=ns.fuel,
    )
    out = {
        "exit_code": done.exit_code,
        "stdout": done.stdout.decode("utf-8", "replace"),
        "stderr": done.stderr.decode("utf-8", "replace"),
        "trapped": done.trapped,
        "truncated": list(done.truncated),
        "fuel_used": done.fuel_used,
        "duration_s": round(done.duration_s, 6),
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
