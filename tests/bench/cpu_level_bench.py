"""Portable (x86-64-v2) against host-tuned (native) compiled code, on the same runs: the
wheel ships portable code, so this says what that costs. Each level runs in its own
process (the level is chosen once per process, by ``WASI_PYTHON_CPU``), alternating, and
the table gives each workload's median wall time and the ratio portable / native.

    .venv/bin/python tests/bench/cpu_level_bench.py [--rounds N]

The first use of a level compiles it into the cache (minutes, once). Timed in the guest
with ``time.perf_counter_ns`` around the work alone, so the host's part is not in it;
"warm pass" is the whole run as the host sees it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

WORK = {
    "numpy": """
import numpy as np, time
a = np.random.default_rng(1).random((300, 300))
t = time.perf_counter_ns()
for _ in range(5): b = a @ a; s = np.sort(a, axis=None).sum() + np.fft.fft(a[0]).real.sum()
print((time.perf_counter_ns() - t) / 1e6)
""",
    "pandas groupby": """
import pandas as pd, numpy as np, time
rng = np.random.default_rng(1)
df = pd.DataFrame({"k": rng.integers(0, 100, 100_000), "v": rng.random(100_000)})
t = time.perf_counter_ns()
for _ in range(5): r = df.groupby("k").v.agg(["sum", "mean", "max"])
print((time.perf_counter_ns() - t) / 1e6)
""",
    "scikit-learn fit": """
import numpy as np, time
from sklearn.linear_model import LogisticRegression
rng = np.random.default_rng(1)
X = rng.random((2000, 20)); y = (X[:, 0] + X[:, 1] > 1).astype(int)
t = time.perf_counter_ns()
for _ in range(3): LogisticRegression(max_iter=200).fit(X, y)
print((time.perf_counter_ns() - t) / 1e6)
""",
    "pure Python": """
import time
t = time.perf_counter_ns()
d = {}
for i in range(200_000): d[str(i)] = i * 2
s = sum(len(k) for k in d)
print((time.perf_counter_ns() - t) / 1e6)
""",
}

CHILD = """
import json, sys, time
from wasi_python import run, _wasi_python as ext, artifacts
import wasi_python
work = json.loads(sys.argv[1]); rounds = int(sys.argv[2])
out = {"level": ext.cpu_level(str(artifacts()))}
run(["-c", "pass"])
for _ in range(3): run(["-c", "pass"])
ts = []
for _ in range(rounds * 10):
    t = time.perf_counter(); run(["-c", "pass"]); ts.append((time.perf_counter() - t) * 1e3)
out["warm pass"] = ts
for name, code in work.items():
    xs = []
    for _ in range(rounds):
        d = run(["-c", code], deadline_s=120)
        assert d.exit_code == 0, d.stderr
        xs.append(float(d.stdout))
    out[name] = xs
print(json.dumps(out))
"""


def measure(level: str, rounds: int) -> dict:
    env = dict(os.environ, WASI_PYTHON_CPU=level)
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(WORK), str(rounds)], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=2, help="alternating processes per level")
    a = ap.parse_args()
    got: dict[str, dict[str, list[float]]] = {"portable": {}, "native": {}}
    for _ in range(a.passes):
        for level in ("portable", "native"):
            r = measure(level, a.rounds)
            print(f"# {level}: compiled for {r.pop('level')}", file=sys.stderr)
            for k, v in r.items():
                got[level].setdefault(k, []).extend(v)
    print(f"| workload (ms, median) | x86-64-v2 | native | ratio |\n| --- | --- | --- | --- |")
    for k in got["native"]:
        p, n = statistics.median(got["portable"][k]), statistics.median(got["native"][k])
        print(f"| {k} | {p:.2f} | {n:.2f} | {p / n:.3f} |")


if __name__ == "__main__":
    main()
