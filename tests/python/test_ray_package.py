"""wasi_python.ray as a package, without a cluster: importing it without Ray says what to
install; its public names are wasi_python.ray's whichever module defines them; what it
pickles for a worker loads in a process that has imported nothing of it yet."""

from __future__ import annotations

import pickle

from helpers import run_python

from ray import cloudpickle  # noqa: E402 - a pinned test dependency (tests/requirements.txt)

import wasi_python.ray  # noqa: E402
from wasi_python.ray import ActorLost, SessionLost  # noqa: E402

PUBLIC = ["SandboxPool", "PoolSession", "stay", "Stay", "ActorLost", "SessionLost", "CompileNotice", "protect_local_runs"]


def test_without_ray_the_import_fails_naming_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "try:\n"
        "    import wasi_python.ray\n"
        "except ImportError as e:\n"
        "    print(type(e.__cause__).__name__)\n"
        "    print(e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('wasi_python.ray')))\n"
    )
    out = run_python("-c", code)
    assert out.returncode == 0, out.stderr
    cause, message, left = out.stdout.decode().splitlines()
    assert cause == "ModuleNotFoundError"
    assert "pip install 'wasi-python-sandbox[ray]'" in message
    assert left == "[]"  # nothing half-imported is left behind


def test_the_public_names_are_wasi_python_rays() -> None:
    assert wasi_python.ray.__all__ == PUBLIC
    for name in [*PUBLIC, "SandboxActor"]:
        obj = getattr(wasi_python.ray, name)
        assert obj.__module__ == "wasi_python.ray", name
        assert obj.__doc__, name


def test_errors_pickle_by_their_public_path() -> None:
    lost = SessionLost("gone", "w-1", (2, 3), 4, "w-2")
    data = pickle.dumps(lost)
    assert b"wasi_python.ray" in data and b"_errors" not in data
    back = pickle.loads(data)
    assert type(back) is SessionLost and isinstance(back, ActorLost)
    assert (str(back), back.actor, back.lost_turns, back.turn, back.resumed_on) == ("gone", "w-1", (2, 3), 4, "w-2")


def test_what_a_worker_receives_loads_in_a_fresh_process() -> None:
    # A staying tool's spec and a SandboxActor go to workers pickled by reference: a process
    # that has imported nothing of wasi_python.ray must find their modules.
    from wasi_python.ray import _stay  # the spec is the package's own, not public

    spec = _stay.StaySpec({"name": "lookup"}, 7, True)
    blob = cloudpickle.dumps([spec, wasi_python.ray.SandboxActor])
    code = (
        "import sys, pickle\n"
        "spec, actor = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(spec).__module__, spec.face['name'], spec.unit, spec.is_async, actor.__module__, actor.__name__)\n"
    )
    out = run_python("-c", code, input=blob)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split() == ["wasi_python.ray._stay", "lookup", "7", "True", "wasi_python.ray", "SandboxActor"]
