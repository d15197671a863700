"""The launch policy (`wasi_python.set_launch_policy`): set before the first run, kept by
the runtime, and the path a run took read from the launcher's counts, not from timing."""

import subprocess
import sys
import textwrap

import pytest

import wasi_python


def _child(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_policy_of_fresh_runs_only_makes_no_guest_ahead():
    out = _child(
        """
        import time
        import wasi_python
        from wasi_python import _wasi_python as ext
        policy = wasi_python.set_launch_policy(standby=False, primed=False)
        assert policy["standby"] is False and policy["primed"] is False, policy
        for _ in range(6):
            assert wasi_python.run(["-c", "print(1)"]).stdout == b"1\\n"
            time.sleep(0.05)
        for _ in range(20):  # back to back
            wasi_python.run(["-c", "pass"])
        time.sleep(0.2)
        print(ext.guests_on_standby(), ext.standby_runs(), ext.primed_runs())
        """
    )
    assert out.split() == ["0", "0", "0"]


def test_a_policy_of_standby_alone_serves_spaced_runs_by_guests_on_standby():
    out = _child(
        """
        import time
        import wasi_python
        from wasi_python import _wasi_python as ext
        wasi_python.set_launch_policy(standby=True, primed=False)
        wasi_python.run(["-c", "pass"])
        wasi_python.run(["-c", "pass"])  # guests on standby are made from the second run on
        served = 0
        for _ in range(5):
            deadline = time.monotonic() + 30
            while ext.guests_on_standby() == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            before = ext.standby_runs()
            assert wasi_python.run(["-c", "import sys; print(sys.argv)", "a"]).stdout == b"['-c', 'a']\\n"
            served += ext.standby_runs() - before
        print(served, ext.primed_runs())
        """
    )
    assert out.split() == ["5", "0"], out


def test_a_process_s_first_run_leaves_no_guest_on_standby_and_its_second_does():
    # A process that makes one run and exits (a CLI call, a worker's one task) spends no
    # CPU on a guest it would never use, and its exit waits for none being made (issue 43);
    # from its second run on, runs find one waiting (the default policy).
    out = _child(
        """
        import time
        import wasi_python
        from wasi_python import _wasi_python as ext
        def waiting_after(s):
            deadline = time.monotonic() + s
            while not ext.guests_on_standby() and time.monotonic() < deadline:
                time.sleep(0.005)
            return ext.guests_on_standby()
        assert wasi_python.launch_policy()["standby"] is True
        wasi_python.run(["-c", "pass"])
        first = waiting_after(1.0)
        wasi_python.run(["-c", "pass"])
        second = waiting_after(30)
        before = ext.standby_runs()
        wasi_python.run(["-c", "pass"])
        print(first, second, ext.standby_runs() - before)
        """
    )
    assert out.split() == ["0", "1", "1"], out


def test_standby_after_one_makes_a_guest_ahead_from_the_first_run():
    # The embedder that knows more runs follow (a server) asks for the guest ahead at once.
    out = _child(
        """
        import time
        import wasi_python
        from wasi_python import _wasi_python as ext
        assert wasi_python.set_launch_policy(standby_after=1)["standby_after"] == 1
        wasi_python.run(["-c", "pass"])
        deadline = time.monotonic() + 30
        while not ext.guests_on_standby() and time.monotonic() < deadline:
            time.sleep(0.005)
        print(ext.guests_on_standby())
        """
    )
    assert out.split() == ["1"], out


def test_the_policy_is_set_before_the_first_run_and_then_kept():
    out = _child(
        """
        import wasi_python
        wasi_python.set_launch_policy(idle_threads=2, warm_every_s=0)
        wasi_python.run(["-c", "pass"])
        try:
            wasi_python.set_launch_policy(standby=False)
        except RuntimeError:
            print("refused")
        p = wasi_python.launch_policy()
        print(p["idle_threads"], p["warm_every_s"], p["standby"])
        """
    )
    assert out.split() == ["refused", "2", "None", "True"]


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"standby": 1}, TypeError),
        ({"primed": "yes"}, TypeError),
        ({"idle_threads": 2**64}, ValueError),
        ({"idle_threads": -1}, ValueError),
        ({"idle_threads": 1.5}, TypeError),
        ({"standby_after": 2**64}, ValueError),
        ({"standby_after": True}, TypeError),
        ({"standby_idle_s": float("nan")}, ValueError),
        ({"primed_for_s": float("inf")}, ValueError),
        ({"thread_idle_s": -1}, ValueError),
        ({"warm_every_s": "0.1"}, TypeError),
        ({"no_such_knob": True}, TypeError),
    ],
)
def test_bad_policy_values_are_refused_by_name_and_change_nothing(kw, error):
    wasi_python.run(["-c", "pass"])  # a runtime exists: still the value's error first
    before = wasi_python.launch_policy()
    with pytest.raises(error):
        wasi_python.set_launch_policy(**kw)
    assert wasi_python.launch_policy() == before
