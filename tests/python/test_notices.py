"""The runtime's notices (crates/runtime notice.rs, pybind notices.rs, ``_notices.py``):
each reaches Python as data (`wasi_python.notices()`) and through the ``logging`` logger
``wasi_python``, and a process that configured no logging still sees it on stderr.

Real notices, cheaply: a copy of the artifact set (links to its files) whose shipped
files list a damaged preload snapshot, and a cache folder holding only the compiled
guest (linked from the usual cache), in a child process that starts from nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

import wasi_python
from wasi_python import _wasi_python as _ext
from helpers import run_python

COMPILED_MAGIC = "wasi-python-compiled 1"


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def image_names() -> dict[str, str]:
    """The cache file names of the preload snapshots used here: ``json``'s (built once in
    the usual cache if it is not there) and the default preload's."""
    return {"json": wasi_python.prepare(["json"]).name, "default": wasi_python.prepare().name}


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    return image_names()


def fresh_artifacts(tmp_path: Path, damaged: str) -> dict[str, str]:
    """An artifact set like the package's whose shipped files list ``damaged`` (a cache
    file name) as a copy that does not decompress, and a cache folder with only the
    compiled guest: the environment of a child that uses them."""
    real = wasi_python.artifacts()
    art = tmp_path / "artifacts"
    art.mkdir()
    for entry in real.iterdir():
        if entry.name == "MANIFEST":
            shutil.copy2(entry, art / "MANIFEST")
        elif entry.name != "compiled":
            (art / entry.name).symlink_to(entry.resolve())
    (art / "compiled").mkdir()
    (art / "compiled" / "x.zst").write_bytes(b"not zstd at all")
    (art / "compiled" / "COMPILED").write_text(f"{COMPILED_MAGIC}\n{damaged} x.zst 65536\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    compiled = Path(_ext.precompile(str(real)))
    for f in (compiled, compiled.with_name(compiled.name + ".sum")):
        _link(f, cache / f.name)
    return {"WASI_PYTHON_ARTIFACTS": str(art), "WASI_PYTHON_CACHE": str(cache)}


CHILD = textwrap.dedent("""
    import json, logging, sys
    import wasi_python

    # No logging configured: the last-resort handler prints the notice on stderr.
    done = wasi_python.run(["-c", "import json; print(json.dumps(1))"], preload=["json"])
    assert done.stdout == b"1\\n", done

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []
        def emit(self, record):
            self.records.append(record)

    keep = Keep()
    logging.getLogger("wasi_python").addHandler(keep)
    done = wasi_python.run(["-c", "print(2)"])
    assert done.stdout == b"2\\n", done
    print(json.dumps({
        "notices": [list(n) for n in wasi_python.notices()],
        "logged": [[r.name, r.levelname, r.notice_kind, r.getMessage()] for r in keep.records],
    }))
""")


def test_notices_reach_logging_and_the_list_and_stderr_without_logging(tmp_path, images, monkeypatch) -> None:
    env = fresh_artifacts(tmp_path, images["json"])
    # The default preload's snapshot cannot be built there: its lock is a folder.
    (Path(env["WASI_PYTHON_CACHE"]) / images["default"]).with_suffix(".lock").mkdir()
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # for the child only: this process's runtimes are made
    child = run_python("-c", CHILD, timeout=600)
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    facts = json.loads(child.stdout.decode().splitlines()[-1])
    kinds = [kind for kind, _ in facts["notices"]]
    assert kinds == ["shipped_unusable", "preload_skipped"], facts
    (_, shipped), (_, skipped) = facts["notices"]
    assert "the shipped snapshot is damaged" in shipped
    # The first, before any logging was configured: on stderr, by Python's last resort.
    stderr = child.stderr.decode()
    assert shipped in stderr, stderr[-3000:]
    # The second through the handler the program set, as a warning of its kind, and so
    # not on stderr.
    assert facts["logged"] == [["wasi_python", "WARNING", "preload_skipped", skipped]], facts
    assert skipped not in stderr, stderr[-3000:]


def test_a_process_without_notices_lists_none() -> None:
    child = run_python("-c", "import wasi_python; wasi_python.run(['-c', 'pass']); print(wasi_python.notices())")
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    assert child.stdout.decode().split() == ["[]"]


def test_notices_of_this_process_are_logged_from_calls_that_left_the_gil(tmp_path, images, monkeypatch, caplog) -> None:
    # In this process, under the GIL canary: a notice is made on a thread that does not
    # hold the GIL (a run's, a session's opening) and takes it only to log.
    env = fresh_artifacts(tmp_path, images["json"])
    (Path(env["WASI_PYTHON_CACHE"]) / images["default"]).with_suffix(".lock").mkdir()
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # a new artifact folder: a runtime of its own, made now
    before = len(wasi_python.notices())
    with caplog.at_level("INFO", logger="wasi_python"):
        done = wasi_python.run(["-c", "import json; print(json.dumps(1))"], preload=["json"])
        assert done.stdout == b"1\n", done
        with wasi_python.Session() as s:
            assert s.run("1 + 1").stdout == b"2\n"
    mine = wasi_python.notices()[before:]
    assert [n.kind for n in mine] == ["shipped_unusable", "preload_skipped"], mine
    logged = [(r.name, r.levelname, r.notice_kind, r.getMessage()) for r in caplog.records if r.name == "wasi_python"]
    assert logged == [("wasi_python", "WARNING", n.kind, n.message) for n in mine], logged
