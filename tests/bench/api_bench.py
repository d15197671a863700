"""Benchmarks of the Python API against the targets of the issues "Run a guest" and
"Offer tools", printed as a table with the upstream reference beside each target.

    .venv/bin/python tests/bench/api_bench.py            # 15-30 s on an idle machine
    .venv/bin/python tests/bench/api_bench.py --quick    # fewer repetitions, a smoke run

Uses the artifacts `wasi_python.artifacts()` finds ($WASI_PYTHON_ARTIFACTS, else the
package's own) and the compiled guest in the cache: `cargo xtask bench` provides both.
Timings are measured, never asserted; a program that fails in the guest aborts the bench.
What is timed in the guest is timed with `time.perf_counter_ns` around the work alone.
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from wasi_python import run
from wasi_python.tools import tool

MS = 1e-3
US = 1e-6


@dataclass
class Row:
    name: str
    unit: str  # "ms", "µs" or "MB"
    samples: list[float]  # in the unit
    target: str
    reference: str

    def cells(self) -> list[str]:
        s = sorted(self.samples)
        p90 = s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]
        fmt = (lambda v: f"{v:.0f}") if max(s) >= 100 else (lambda v: f"{v:.2f}") if max(s) < 10 else (lambda v: f"{v:.1f}")
        return [self.name, self.unit, fmt(statistics.median(s)), fmt(p90), fmt(s[0]), str(len(s)), self.target, self.reference]


def table(rows: list[Row]) -> str:
    head = ["measure", "unit", "median", "p90", "min", "n", "target", "reference"]
    body = [r.cells() for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def ok(done: Any) -> Any:
    if done.exit_code != 0 or done.trapped is not None:
        sys.exit(f"a bench program failed: exit {done.exit_code}, trapped {done.trapped}\n{done.stderr.decode(errors='replace')}")
    return done


def wall(fn: Callable[[], Any], n: int, unit: float) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) / unit)
    return out


def guest_ns(done: Any) -> list[int]:
    """The nanoseconds a guest program printed, one number a line."""
    return [int(x) for x in ok(done).stdout.split()]


# ------------------------------------------------------------------------ tools


@tool
def echo(s: str) -> str:
    """Answers with its argument."""
    return s


def many_tools(n: int) -> list[Any]:
    """`n` tools shaped like real ones: a docstring, two typed parameters, one default."""

    def make(i: int) -> Any:
        def lookup(item: str, qty: int = 1) -> float:
            """Look up the unit price of an item.

            Args:
                item: The item's name, such as "apple".
                qty: How many.
            """
            return float(i * qty)

        return tool(lookup, name=f"price_{i}")

    return [make(i) for i in range(n)]


ROUND_TRIP = """\
import sys, time
from host import tools
n, size = int(sys.argv[1]), int(sys.argv[2])
f, s, clock = tools.echo, 'x' * size, time.perf_counter_ns
assert f(s=s) == s
out = []
for _ in range(n):
    t = clock()
    f(s=s)
    out.append(clock() - t)
print('\\n'.join(map(str, out)))
"""

DISCOVERY = """\
import time
t = time.perf_counter_ns()
from host import tools
t = time.perf_counter_ns() - t
assert len(tools.__all__) == int(__import__('sys').argv[1]), tools.__all__
print(t)
"""


# --------------------------------------------------------------- preloaded runs

PANDAS = "import pandas as pd; pd.DataFrame({'a': [1, 2]}).sum()"
PRELOADED = [
    ("import numpy; np.arange(10).sum()", "import numpy as np; np.arange(10).sum()", "≤ 15", "163"),
    ("import pandas; DataFrame sum", PANDAS, "≤ 25", "1000"),
    ("matplotlib line plot saved as png", "import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.savefig('/tmp/p.png')", "≤ 150", "2000"),
]

# --------------------------------------------------------------- fresh processes

FIRST_RUN = """\
import time
t0 = time.perf_counter()
from wasi_python import run
t1 = time.perf_counter()
done = run(['-c', 'pass'])
t2 = time.perf_counter()
assert done.exit_code == 0, done
print(t1 - t0, t2 - t1)
"""

PEAK_RSS = """\
import resource, sys
from wasi_python import run
code = sys.argv[1] if len(sys.argv) > 1 else 'pass'
for i in range(200):
    done = run(['-c', code])
    assert done.exit_code == 0, done
    if i == 0:
        first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(first, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def fresh(code: str, env: dict[str, str], *args: str) -> tuple[float, list[float]]:
    """Runs `code` in a new interpreter; returns its wall time and the numbers it printed."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, env=env)
    took = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"a fresh-process bench failed:\n{p.stderr}")
    return took, [float(x) for x in p.stdout.split()]


def fresh_env(pycache: str) -> dict[str, str]:
    """The environment of the fresh processes: bytecode cached in `pycache`, as an installed
    package has it (never written into the source tree), even where PYTHONDONTWRITEBYTECODE
    is set."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


# ------------------------------------------------------------------- dispatcher


def dispatcher_share(calls: int) -> tuple[float, float]:
    """Mean µs per call spent in the package's dispatcher (gate, tool, contextvars) and in
    the tool itself, measured on the host while the guest loops: where a round trip goes."""
    from wasi_python import _door

    spent = {"invoke": 0.0, "tool": 0.0, "n": 0}
    original = _door.Dispatcher.invoke

    def timed_invoke(self: Any, *a: Any) -> Any:
        t = time.perf_counter()
        try:
            return original(self, *a)
        finally:
            spent["invoke"] += time.perf_counter() - t
            spent["n"] += 1

    def timed_echo(s: str) -> str:
        t = time.perf_counter()
        try:
            return s
        finally:
            spent["tool"] += time.perf_counter() - t

    _door.Dispatcher.invoke = timed_invoke  # type: ignore[method-assign]
    try:
        ok(run(["-c", ROUND_TRIP, str(calls), "10"], tools=[tool(timed_echo, name="echo")], max_tool_calls=None, max_tool_request_bytes=None, deadline_s=600))
    finally:
        _door.Dispatcher.invoke = original  # type: ignore[method-assign]
    return spent["invoke"] / spent["n"] / US, spent["tool"] / spent["n"] / US


# ------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run; the figures are rougher)")
    args = ap.parse_args()
    k = 0.2 if args.quick else 1.0
    n = lambda full: max(3, round(full * k))

    print(f"python {sys.version.split()[0]}, load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min) on {os.cpu_count()} cores", flush=True)
    rows: list[Row] = []

    # Fresh processes first, before this process has warmed anything but the page cache.
    with tempfile.TemporaryDirectory(prefix="wasi-python-bench-pycache-") as pycache:
        env = fresh_env(pycache)
        fresh(FIRST_RUN, env)  # untimed: writes the bytecode cache
        bare = [fresh("pass", env)[0] for _ in range(n(10))]
        firsts = [fresh(FIRST_RUN, env) for _ in range(n(10))]
        rss = [fresh(PEAK_RSS, env)[1] for _ in range(n(3) if not args.quick else 1)]
        rss_pandas = [fresh(PEAK_RSS, env, PANDAS)[1] for _ in range(n(2) if not args.quick else 1)]
    rows.append(Row("fresh process: python -c pass (the interpreter alone)", "ms", [w / MS for w in bare], "-", "-"))
    rows.append(Row("fresh process: import + run(['-c','pass']), end to end", "ms", [w / MS for w, _ in firsts], "≤ 200", "1500"))
    rows.append(Row("  inside it: import wasi_python", "ms", [a / MS for _, (a, _) in firsts], "-", "-"))
    rows.append(Row("  inside it: first run() to its result", "ms", [b / MS for _, (_, b) in firsts], "-", "-"))
    rows.append(Row("  inside it: import + first run", "ms", [(a + b) / MS for _, (a, b) in firsts], "≤ 200", "1500"))
    rows.append(Row("peak RSS after 1 run (ru_maxrss)", "MB", [a / 1024 for a, _ in rss], "-", "-"))
    rows.append(Row("peak RSS after 200 runs (ru_maxrss)", "MB", [b / 1024 for _, b in rss], "≤ 80", "-"))
    rows.append(Row("peak RSS after 200 pandas runs (ru_maxrss)", "MB", [b / 1024 for _, b in rss_pandas], "≤ 400", "-"))
    print("fresh processes done", flush=True)

    ok(run(["-c", "pass"]))  # load the guest into this process
    rows.append(Row("warm run(['-c','pass'])", "ms", wall(lambda: ok(run(["-c", "pass"])), n(200), MS), "≤ 3", "28-48"))
    # Where a warm run goes: the guest's clock starts when the runtime begins setting up the
    # run (argv, preopens, store, instance), so the program's first reading is the set-up.
    # The guest's monotonic clock starts at 1 h (crates/runtime/src/host.rs, GUEST_CLOCK_START).
    split = [(d.duration_s / MS, (int(d.stdout) - 3_600 * 10**9) / 1e6) for d in (ok(run(["-c", "import time; print(time.perf_counter_ns())"])) for _ in range(n(100)))]
    rows.append(Row("  warm run split: set-up until the program starts", "ms", [b for _, b in split], "-", "-"))
    rows.append(Row("  warm run split: the runtime's whole run (duration_s)", "ms", [a for a, _ in split], "-", "-"))
    print("warm runs done", flush=True)

    # Issue "numpy and pandas ready in milliseconds": fresh runs from the default preload
    # (numpy, pandas, pyplot); the reference column is the figure before snapshots.
    from wasi_python import Session, run_async
    import asyncio

    for label, code, target, before in PRELOADED:
        ok(run(["-c", code]))
        rows.append(Row(f"fresh run: {label}", "ms", wall(lambda: ok(run(["-c", code])), n(30 if "png" not in label else 10), MS), target, before))
    sk = ("numpy", "pandas", "sklearn.cluster")
    ok(run(["-c", "import sklearn.cluster"], preload=sk))
    rows.append(Row("fresh run: import sklearn.cluster (preload=... + sklearn.cluster)", "ms",
                    wall(lambda: ok(run(["-c", "import sklearn.cluster"], preload=sk)), n(30), MS), "≤ 50", "3600"))
    rows.append(Row("run(['-c','pass'], preload=()) (no snapshot)", "ms", wall(lambda: ok(run(["-c", "pass"], preload=())), n(100), MS), "-", "1.2-1.7"))

    opened: list[Session] = []

    def session_first_turn() -> None:
        opened.append(Session())
        ok(opened[-1].run(PANDAS))

    def close_last() -> None:
        opened.pop().close()

    session_first_turn()
    close_last()
    firsts = []
    closes = []
    for _ in range(n(30)):
        firsts.extend(wall(session_first_turn, 1, MS))
        closes.extend(wall(close_last, 1, MS))
    rows.append(Row("Session() + first turn with pandas", "ms", firsts, "≤ 25", "-"))
    rows.append(Row("  then Session.close()", "ms", closes, "-", "-"))

    async def concurrent_pandas(k: int) -> float:
        t = time.perf_counter()
        await asyncio.gather(*(run_async(["-c", PANDAS]) for _ in range(k)))
        return k / (time.perf_counter() - t)

    rows.append(Row("16 concurrent run_async of the pandas program", "runs/s", [asyncio.run(concurrent_pandas(16)) for _ in range(n(5))], "report", "~2"))
    print("preloaded runs done", flush=True)

    one_call = lambda: ok(run(["-c", "from host import tools\ntools.echo(s='hi')"], tools=[echo]))
    one_call()
    rows.append(Row("run with one tool call, end to end", "ms", wall(one_call, n(100), MS), "≤ 5", "74-114"))

    for size, label in ((10, "10 B"), (1 << 10, "1 KiB"), (64 << 10, "64 KiB")):
        ns = guest_ns(run(["-c", ROUND_TRIP, str(n(2000 if size < 65536 else 500)), str(size)], tools=[echo], max_tool_calls=None, max_tool_request_bytes=None, deadline_s=600))
        target, ref = ("≤ 50", "540-1070") if size == 10 else ("-", "-")
        rows.append(Row(f"tool round trip, {label} str echoed, in guest", "µs", [x / 1e3 for x in ns], target, ref))
    print("tool calls done", flush=True)

    tools50 = many_tools(50)
    rows.append(Row("from host import tools, 1 tool, in guest", "ms",
                    [x / 1e6 for _ in range(n(40)) for x in guest_ns(run(["-c", DISCOVERY, "1"], tools=[echo]))], "-", "-"))
    rows.append(Row("from host import tools, 50 tools, in guest", "ms",
                    [x / 1e6 for _ in range(n(40)) for x in guest_ns(run(["-c", DISCOVERY, "50"], tools=tools50))], "≤ 3", "48"))

    # Issue "run_async, Session and cancellation".
    with Session() as sess:
        sess.run("x = 1")
        rows.append(Row("Session turn 'x' (echo), warm", "ms", wall(lambda: sess.run("x"), n(300), MS), "≤ 0.2", "1.1"))

    async def concurrent(k: int) -> float:
        t = time.perf_counter()
        await asyncio.gather(*(run_async(["-c", "pass"]) for _ in range(k)))
        return k / (time.perf_counter() - t)

    rates = [asyncio.run(concurrent(16)) for _ in range(n(10))]
    rows.append(Row("16 concurrent run_async(['-c','pass'])", "runs/s", rates, "≥ 400", "16.6"))

    # Two CPU-bound guests at once against one alone, and the same for two native Python
    # processes, each ratio the median of a few alternating rounds (the machine is noisy).
    cpu = "x = 0\nfor i in range(3_000_000): x += i"

    async def two() -> float:
        t = time.perf_counter()
        await asyncio.gather(run_async(["-c", cpu]), run_async(["-c", cpu]))
        return time.perf_counter() - t

    def timed(fn: Callable[[], Any]) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def native(k: int) -> None:
        ps = [subprocess.Popen([sys.executable, "-c", cpu]) for _ in range(k)]
        for p_ in ps:
            p_.wait()

    guest_ratios, native_ratios = [], []
    for _ in range(n(5)):
        guest_ratios.append(asyncio.run(two()) / timed(lambda: ok(run(["-c", cpu]))))
        native_ratios.append(timed(lambda: native(2)) / timed(lambda: native(1)))
    rows.append(Row("2 CPU-bound guests in parallel / 1 alone (1.0 = perfect)", "ratio", guest_ratios,
                    f"native: {statistics.median(native_ratios):.2f}", "-"))
    rows.append(Row("2 CPU-bound native pythons in parallel / 1 alone", "ratio", native_ratios, "-", "-"))

    invoke_us, tool_us = dispatcher_share(n(2000))

    print()
    print(table(rows))
    print()
    print(f"where a 10 B round trip goes (host side, mean per call): {invoke_us:.1f} µs in the package's Dispatcher.invoke "
          f"(of which {tool_us:.1f} µs in the tool itself); the rest is the guest's encode/decode, the door, "
          f"the frame checks and the tool thread (see the criterion bench tool_round_trip for the Rust-only figure).")


if __name__ == "__main__":
    main()
