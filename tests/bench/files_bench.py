"""Mount speed (issue 9): reading a 10 MB file and `os.stat` in the guest, from a
MemoryFiles mount, a Python provider and a grant of a host folder. Timed in the guest with
`time.perf_counter_ns` around the work alone; figures are reported, never asserted.

    .venv/bin/python tests/bench/files_bench.py
"""

from __future__ import annotations

import os
import statistics
import tempfile

from wasi_python import Grant, MemoryFiles, Mount, Stat, run

SIZE = 10 << 20
READ = """
import time, sys
out = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter_ns()
    with open(sys.argv[2], 'rb') as f:
        data = f.read()
    out.append(time.perf_counter_ns() - t)
    assert len(data) == %d
print(' '.join(map(str, out)))
""" % SIZE
STAT = """
import time, os, sys
p = sys.argv[2]
os.stat(p)
out = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter_ns()
    os.stat(p)
    out.append(time.perf_counter_ns() - t)
print(' '.join(map(str, out)))
"""


class PyFiles:
    """A plain Python provider over one file."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stat(self, path: str) -> Stat:
        return Stat("dir") if path == "/" else Stat("file", len(self.data))

    def list(self, path: str) -> list[tuple[str, str]]:
        return [("big", "file")]

    def read(self, path: str) -> bytes:
        return self.data


def ns(code: str, n: int, path: str, **kw: object) -> list[int]:
    r = run(["-c", code, str(n), path], memory_bytes=256 << 20, **kw)  # type: ignore[arg-type]
    if r.exit_code != 0:
        raise SystemExit(r.stderr.decode())
    return [int(x) for x in r.stdout.split()]


def main() -> None:
    data = os.urandom(SIZE)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "big"), "wb") as f:
            f.write(data)
        where = {
            "MemoryFiles mount": dict(mounts=[Mount(MemoryFiles({"big": data}), "/m")]),
            "Python provider mount": dict(mounts=[Mount(PyFiles(data), "/m")]),
            "grant of a host folder": dict(grants=[Grant(d, "/m")]),
        }
        print(f"{'where':<24} {'10 MB read, MB/s (median of 20)':>32} {'os.stat, µs (median of 2,000)':>30}")
        for name, kw in where.items():
            reads = ns(READ, 20, "/m/big", **kw)
            stats = ns(STAT, 2000, "/m/big", **kw)
            mbs = SIZE / (statistics.median(reads) / 1e9) / 1e6
            print(f"{name:<24} {mbs:>32.0f} {statistics.median(stats) / 1e3:>30.1f}")


if __name__ == "__main__":
    main()
