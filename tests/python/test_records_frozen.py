"""The public records (`Completed`, `Display`, `Stdout`, `Stderr`, `ToolOutcome`,
`ToolRecord`, `FileFault`, `FileRecord`, `Grant`) are written-out classes (_frozen.py) so a
new process imports neither `dataclasses` nor `typing`: each behaves as the frozen slotted
dataclass it was (its twin, made by ``_frozen.dataclass_twin`` from the same fields), and a
new process's ``import wasi_python`` and plain run import none of the heavy modules."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import wasi_python
from wasi_python import Completed, Display, FileFault, FileRecord, Grant, Stderr, Stdout, run
from wasi_python._frozen import dataclass_twin
from wasi_python._records import ToolOutcome, ToolRecord
from helpers import PYTHON_DIR

OUTCOME = ToolOutcome(1, "call", "echo", "ok", None, 10, 12, None, False)
FAULT = FileFault("read", "/data/x", "OSError: boom")

# Each record with the arguments of two instances (the second differs), positional or by
# keyword as callers make them.
SAMPLES = [
    (Completed, (0, b"out", b"", None, (), None, 0.5), dict(exit_code=1, stdout=b"", stderr=b"e", trapped="deadline",
                                                          truncated=("stdout",), fuel_used=7, duration_s=1.0,
                                                          tools=ToolRecord(1, (OUTCOME,), 0, ()), file_bytes_written=3,
                                                          files=FileRecord(), displays=(Display({"text/plain": "x"}),),
                                                          bad_displays=2)),
    (Display, ({"text/plain": "hi"},), dict(data={"image/png": b"\x89PNG"}, metadata={"image/png": {"width": 3}})),
    (Stdout, (b"a",), dict(data=b"b")),
    (Stderr, (b"a",), dict(data=b"b")),
    (ToolOutcome, (1, "call", "echo", "ok", None, 10, 12, None, False), dict(seq=2, op="list", tool=None, outcome="ok",
                                                                           message=None, request_bytes=1, response_bytes=2,
                                                                           fault="E: x", abandoned=True, delivered=False)),
    (ToolRecord, (1, (OUTCOME,), 0, ()), dict(frames=2, outcomes=(), unlisted=1, abandoned=(OUTCOME,))),
    (FileFault, ("read", "/x", "E"), dict(method="write", path="/y", error="F")),
    (FileRecord, (), dict(calls={"read": 2}, total=2, faults=(FAULT,), faults_total=1, undelivered=("/a",), undelivered_total=1)),
    (Grant, ("/tmp", "/data"), dict(host_path=Path("/tmp"), guest_path="/w", writable=True)),
]
IDS = [s[0].__name__ for s in SAMPLES]


def both(cls, args, kwargs):
    """An instance of the record and of its twin dataclass, from the same arguments."""
    return cls(*args, **kwargs), dataclass_twin(cls)(*args, **kwargs)


@pytest.mark.parametrize("cls, args, kwargs", SAMPLES, ids=IDS)
def test_each_record_is_a_frozen_dataclass_to_dataclasses(cls, args, kwargs):
    twin = dataclass_twin(cls)
    for a, k in ((args, {}), ((), kwargs)):
        mine, theirs = both(cls, a, k)
        assert dataclasses.is_dataclass(cls) and dataclasses.is_dataclass(mine)
        assert [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only)
                for f in dataclasses.fields(mine)] == \
               [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only)
                for f in dataclasses.fields(theirs)]
        assert cls.__dataclass_params__.frozen and not cls.__dataclass_params__.order
        assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
        assert dataclasses.astuple(mine) == dataclasses.astuple(theirs)
        assert dataclasses.replace(mine) == mine and type(dataclasses.replace(mine)) is cls
    assert cls.__match_args__ == twin.__match_args__
    assert cls.__slots__ == twin.__slots__
    # The same parameters (a dataclass's __init__ is annotated `-> None` by the object, this
    # one by the text).
    assert [str(p) for p in inspect.signature(cls).parameters.values()] == [str(p) for p in inspect.signature(twin).parameters.values()]
    assert dataclasses.replace(cls(*args), **kwargs) == cls(**kwargs)


@pytest.mark.parametrize("cls, args, kwargs", SAMPLES, ids=IDS)
def test_each_record_compares_shows_and_hashes_as_its_dataclass(cls, args, kwargs):
    (a, ta), (b, tb) = both(cls, args, {}), both(cls, (), kwargs)
    assert repr(a) == repr(ta) and repr(b) == repr(tb)
    assert a == cls(*args) and b == cls(**kwargs) and a != b
    assert (a == ta) is False and a.__eq__(ta) is NotImplemented  # another class: never equal
    for mine, theirs in ((a, ta), (b, tb)):
        try:
            expected = hash(theirs)
        except TypeError:
            with pytest.raises(TypeError):
                hash(mine)
        else:
            assert hash(mine) == expected
    with pytest.raises(TypeError):
        __import__("weakref").ref(a)
    match b:
        case cls(first):
            assert first == getattr(b, cls.__match_args__[0])
        case _:
            pytest.fail("no match by position")


@pytest.mark.parametrize("cls, args, kwargs", SAMPLES, ids=IDS)
def test_each_record_refuses_changes_as_a_frozen_dataclass(cls, args, kwargs):
    mine, theirs = both(cls, args, {})
    for obj in (mine, theirs):
        for name in cls.__match_args__:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(obj, name, 1)
            with pytest.raises(dataclasses.FrozenInstanceError):
                delattr(obj, name)
    # Another name: the same error (a slotted frozen dataclass raised TypeError from its
    # own `super()` call there on Python 3.11, a bug; still refused either way).
    with pytest.raises(dataclasses.FrozenInstanceError):
        mine.other = 1
    assert mine == cls(*args)


@pytest.mark.parametrize("cls, args, kwargs", SAMPLES, ids=IDS)
def test_each_record_pickles_and_copies(cls, args, kwargs):
    for obj in (cls(*args), cls(**kwargs)):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(obj, protocol))
            assert type(back) is cls and back == obj
        assert copy.copy(obj) == obj and copy.deepcopy(obj) == obj
        # The state a dataclass pickles: its fields' values, in order.
        assert obj.__getstate__() == dataclass_twin(cls)(**{n: getattr(obj, n) for n in cls.__match_args__}).__getstate__()


@pytest.mark.parametrize("cls, args, kwargs", SAMPLES, ids=IDS)
def test_a_record_pickles_as_its_dataclass_did(cls, args, kwargs):
    # The same reduction (the class made bare, then its state set), so a pickle made by a
    # process of the package before the change, when these were dataclasses, loads here.
    mine, theirs = both(cls, (), kwargs)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        m, t = mine.__reduce_ex__(protocol), theirs.__reduce_ex__(protocol)
        assert (m[0], m[1][0], m[2], *m[3:]) == (t[0], cls, t[2], *t[3:]) and t[1] == (type(theirs),)


def test_factory_defaults_are_new_each_time_and_checks_still_run():
    assert Display({}).metadata == {} and Display({}).metadata is not Display({}).metadata
    assert FileRecord().calls == {} and FileRecord().calls is not FileRecord().calls
    with pytest.raises(TypeError):
        Grant("/tmp", "/data", writable="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        dataclasses.replace(Grant("/tmp", "/data"), guest_path=3)


def test_a_subclass_of_a_record_keeps_its_fields_and_takes_new_attributes():
    class Mine(Stdout):
        pass

    m = Mine(b"x")
    m.note = 1  # not a field: a plain subclass has a __dict__
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.data = b"y"
    assert [f.name for f in dataclasses.fields(Mine)] == ["data"] and m != Stdout(b"x")


def test_a_record_that_holds_itself_shows_dots():
    d = Display({})
    d.data["self"] = d
    assert repr(d) == "Display(data={'self': ...}, metadata={})"


@pytest.mark.parametrize("path", ["/a/b", "/a//b/", "a/./b", "//a/b", "///a", ".", "./", "a/../b", "/", "x"])
def test_the_artifacts_folder_is_named_as_pathlib_names_it(path):
    from wasi_python import _run

    assert _run._path_str(path) == str(Path(path))


HEAVY = ("typing", "dataclasses", "inspect", "pathlib", "contextlib", "re", "enum", "threading", "collections",
         "importlib", "asyncio", "concurrent.futures", "logging", "tempfile", "urllib.parse", "ast")


def test_a_new_process_imports_no_heavy_module_for_a_plain_run():
    # -S: no site (the dev venv's .pth files import some of these before any package).
    code = (
        f"import sys; sys.path.insert(0, {str(PYTHON_DIR)!r}); before = set(sys.modules)\n"
        "import wasi_python\n"
        "done = wasi_python.run(['-c', 'print(6 * 7)'])\n"
        "assert done.stdout == b'42\\n', done\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = set(p.stdout.split())
    assert "wasi_python._run" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    # The records still answer as dataclasses in that process: the first use imports them.
    assert "dataclasses" not in loaded and dataclasses.is_dataclass(wasi_python.Completed)
