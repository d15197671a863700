"""The artifacts under a running suite, as `cargo xtask dist` re-lays them from a shared tree
(xtask/src/dist.rs, `_run._compile_guest_package`): the re-lay waits while a test session holds
the package folder (conftest.py), and compiled guest files are put in place by replacing each
file, never by writing into one the package's artifacts share as a hard link. A guest package
that changed under a running suite gave its processes different preload image keys: a parent
and a child disagreed about which image file is the default preload's, and a snapshot saved
by one was refused by the other for another base image."""

from __future__ import annotations

import fcntl
import os

import pytest

from helpers import PYTHON_DIR, flocks
from wasi_python import _run


def test_a_re_lay_of_the_artifacts_waits_while_this_session_runs():
    package = PYTHON_DIR / "wasi_python"
    assert ("READ", os.stat(package).st_ino) in flocks(os.getpid())
    # What `cargo xtask dist` takes before it re-lays `_artifacts`: refused while the suite runs.
    fd = os.open(package, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_compiled_guest_files_replace_the_dists_and_never_write_into_them(tmp_path):
    compiled = tmp_path / "out"
    (compiled / "host").mkdir(parents=True)
    (compiled / "host.bundle").write_bytes(b"new bundle")
    (compiled / "host" / "tools.pyc").write_bytes(b"new pyc")
    dist = tmp_path / "dist" / "lib" / "wasi-python"
    (dist / "host").mkdir(parents=True)
    (dist / "host.bundle").write_bytes(b"old bundle")
    # The package's artifacts: hard links to the dist's files, as the re-lay makes them.
    laid = tmp_path / "laid"
    laid.mkdir()
    os.link(dist / "host.bundle", laid / "host.bundle")
    _run._replace_tree(compiled, dist)
    assert (dist / "host.bundle").read_bytes() == b"new bundle"
    assert (dist / "host" / "tools.pyc").read_bytes() == b"new pyc"
    assert (laid / "host.bundle").read_bytes() == b"old bundle", "written in place through the link"
    assert os.stat(dist / "host.bundle").st_mode & 0o777 == 0o644
    assert sorted(p.name for p in dist.rglob("*")) == ["host", "host.bundle", "tools.pyc"], "no temporary file left"
