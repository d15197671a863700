"""``wasi-python serve mcp``: the sandbox as an MCP server (``run_python``, named sessions,
code mode over upstream MCP servers), and adapters for the frameworks that already do code
mode (`wasi_python.serve.fastmcp`). Needs the ``serve`` extra (the official ``mcp`` SDK);
see docs/serve.md."""

from __future__ import annotations

import argparse
import logging
import sys

from ._config import ConfigError, ServeConfig, add_arguments, config_from

__all__ = ["ServeConfig", "ConfigError", "add_arguments", "config_from", "main", "serve"]


def serve(cfg: ServeConfig) -> None:
    """Runs the MCP server with ``cfg`` (blocking) until its client leaves or a signal."""
    import anyio

    from ._server import serve as serve_async

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("wasi-python serve mcp: %(message)s"))
    log = logging.getLogger("wasi_python.serve")
    if not log.handlers:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    anyio.run(serve_async, cfg)


def main(ns: argparse.Namespace) -> int:
    """``serve mcp`` of a parsed command line (``wasi_python.__main__``)."""
    try:
        cfg = config_from(ns)
    except (ConfigError, OSError, ValueError) as e:
        print(f"wasi-python serve mcp: {e}", file=sys.stderr)
        return 2
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("wasi-python serve mcp needs the official MCP SDK: pip install 'wasi-python-sandbox[serve]'", file=sys.stderr)
        return 2
    try:
        serve(cfg)
    except KeyboardInterrupt:
        pass
    return 0

