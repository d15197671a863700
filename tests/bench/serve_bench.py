"""Benchmark of ``wasi-python serve mcp`` over stdio (reported, never asserted): the
``run_python`` round trip for ``print(1)``, and for a code-mode program making 10 upstream
tool calls, beside the same 10 calls made one by one over MCP straight to the upstream.

    .venv/bin/python tests/bench/serve_bench.py           # about 20 s on an idle machine
    .venv/bin/python tests/bench/serve_bench.py --quick   # fewer repetitions

The client is the ``mcp`` SDK's own, in this process; the server and the upstream (the
fixture tests/python/fixtures/upstream_shop.py) are subprocesses. The one-by-one figure is
the protocol's cost alone: an agent pays a model turn per call on top of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mcp

REPO = Path(__file__).resolve().parents[2]
SHOP = REPO / "tests" / "python" / "fixtures" / "upstream_shop.py"
TEN = "from host import tools\nprint(sum(tools.shop__price(item='apple')['price'] for _ in range(10)))"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


async def timed(n: int, step) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await step()
        out.append(time.perf_counter() - t)
    return out


def row(label: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3  # noqa: E731
    return f"| {label} | {statistics.median(xs) * 1e3:.2f} | {p(0.1):.2f} | {p(0.9):.2f} | {len(xs)} |"


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        servers = Path(d) / "servers.json"
        servers.write_text(json.dumps({"mcpServers": {"shop": {"command": sys.executable, "args": [str(SHOP)]}}}))
        serve = mcp.StdioServerParameters(command=sys.executable, args=["-m", "wasi_python", "serve", "mcp", "--upstream", str(servers)], env=env())
        direct = mcp.StdioServerParameters(command=sys.executable, args=[str(SHOP)], env=env())
        async with mcp.Client(serve) as s, mcp.Client(direct) as up:
            await s.list_tools()
            await up.list_tools()

            async def print1():
                r = await s.call_tool("run_python", {"code": "print(1)"})
                assert not r.is_error and r.structured_content["stdout"] == "1\n", r

            async def ten_in_code():
                r = await s.call_tool("run_python", {"code": TEN})
                assert not r.is_error and r.structured_content["stdout"] == "15.0\n", r

            async def ten_one_by_one():
                for _ in range(10):
                    r = await up.call_tool("price", {"item": "apple"})
                    assert not r.is_error

            async def one_direct():
                assert not (await up.call_tool("price", {"item": "apple"})).is_error

            for step in (print1, ten_in_code, ten_one_by_one):  # warm-up
                await timed(5, step)
            rows = [
                row("run_python `print(1)`", await timed(n, print1)),
                row("run_python, a program making 10 upstream calls", await timed(n, ten_in_code)),
                row("the 10 calls one by one over MCP, straight to the upstream", await timed(n, ten_one_by_one)),
                row("one upstream call over MCP", await timed(n, one_direct)),
            ]
    print(f"serve mcp over stdio, {n} round trips each, ms (client in this process; {os.cpu_count()} CPUs)")
    print("| what | median | p10 | p90 | n |\n| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    a = argparse.ArgumentParser(description=__doc__)
    a.add_argument("--quick", action="store_true")
    ns = a.parse_args()
    asyncio.run(main(30 if ns.quick else 200))
