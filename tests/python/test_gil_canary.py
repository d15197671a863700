"""The GIL canary (gil_canary.py) sees a thread that keeps the GIL, and names the test."""

import ctypes

import pytest


def _hold_the_gil(seconds: float) -> None:
    # A PyDLL call keeps the GIL for its whole length, as an extension that waits
    # without releasing it would.
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


@pytest.mark.starves_gil
def test_the_canary_sees_a_call_that_keeps_the_gil_and_dumps_its_stack(gil_canary):
    log_at = gil_canary.log_size()
    _hold_the_gil(2.6)
    starved = gil_canary.starved_since(0.0)
    assert starved is not None and starved > 2.0
    dump = gil_canary.log_tail(log_at)
    assert "_hold_the_gil" in dump and "test_the_canary_sees" in dump, dump


def test_a_test_that_waits_with_the_gil_released_is_not_flagged(gil_canary):
    import time

    since = time.monotonic()
    time.sleep(0.5)
    assert gil_canary.starved_since(since) is None
