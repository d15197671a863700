"""The launch policy's `idle_memory` (crates/runtime/src/idle_memory.rs): idle pool slots
keep at most that many bytes once idle, what is past it goes back to the system, and a bad
value is a typed error wherever it is given. The memory is read from the pool's own count
(`_wasi_python.idle_slot_bytes`) and the process's PSS, polled with a generous deadline,
never timed."""

import math
import subprocess
import sys

import pytest

import wasi_python
from wasi_python import _wasi_python as ext


@pytest.mark.parametrize("value", [-1, 2**64, 2**100])
def test_an_idle_memory_out_of_range_is_a_value_error(value):
    with pytest.raises(ValueError):
        wasi_python.set_launch_policy(idle_memory=value)


@pytest.mark.parametrize("value", [math.nan, math.inf, 1.5, True, "64", None])
def test_an_idle_memory_not_an_int_is_a_type_error(value):
    with pytest.raises(TypeError):
        wasi_python.set_launch_policy(idle_memory=value)


@pytest.mark.parametrize(
    ("value", "error"), [(-1, OverflowError), (2**64, OverflowError), (math.nan, TypeError), ("1", TypeError)]
)
def test_the_extension_refuses_what_the_package_would_with_a_typed_error(value, error):
    # Past the package's checks: a Python exception from the argument's conversion, no panic.
    with pytest.raises(error):
        ext.set_launch_policy(idle_memory=value)


def test_the_default_budget_is_64_mib_and_the_policy_says_it():
    assert wasi_python.launch_policy()["idle_memory"] == 64 << 20


# A child: its PSS before, after 4 sessions that wrote 300 MB each, and after they closed,
# once the pool's idle slots keep what the budget allows and the PSS is within the bound
# (the sessions' stores end after `close` returns), or a minute passed.
BURST = """
import sys, time
import wasi_python
from wasi_python import Session, run
from wasi_python import _wasi_python as ext

def pss():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith("Pss:"))

budget, bound = int(sys.argv[1]), int(sys.argv[2])
policy = wasi_python.set_launch_policy(idle_memory=budget, standby=False, primed=False)
assert policy["idle_memory"] == budget and wasi_python.launch_policy()["idle_memory"] == budget, policy
assert run(["-c", "print(1)"]).exit_code == 0
baseline = pss()
sessions = [Session(memory_bytes=1 << 30) for _ in range(4)]
for s in sessions:
    s.run("x = bytearray(b'\\x01') * (300 << 20)")
burst = pss()
for s in sessions:
    s.close()
deadline = time.monotonic() + 60
while (ext.idle_slot_bytes() > budget or pss() - baseline > bound) and time.monotonic() < deadline:
    time.sleep(0.05)
print(baseline, burst, pss(), ext.idle_slot_bytes())
"""


def test_a_budget_of_zero_gives_back_all_a_burst_left():
    # Generous: the process's own growth (threads, caches) stays well under one session.
    bound = 100 << 20
    baseline, burst, after, kept = _child_burst(0, bound)
    assert burst - baseline > 1000 << 20, "the sessions wrote their memory"
    assert kept == 0
    assert after - baseline <= bound, (baseline >> 20, after >> 20)


def test_the_default_budget_bounds_what_a_burst_leaves():
    # Without a bound, each of the 4 slots would keep 64 MiB.
    bound = (64 << 20) + (100 << 20)
    baseline, burst, after, kept = _child_burst(64 << 20, bound)
    assert burst - baseline > 1000 << 20
    assert kept <= 64 << 20
    assert after - baseline <= bound, (baseline >> 20, after >> 20)


def _child_burst(budget: int, bound: int) -> list[int]:
    proc = subprocess.run([sys.executable, "-c", BURST, str(budget), str(bound)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [int(x) for x in proc.stdout.split()]
