"""The guide, section "Know what run refuses": each refused before any work."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from wasi_python import ArtifactsMissing, artifacts, run
from wasi_python.tools import tool

ran: list = []


@tool
def ping() -> str:
    """Ping."""
    ran.append("ping")
    return "pong"


def raw_host(request: bytes) -> bytes:
    ran.append("host")
    return b"{}"


@pytest.fixture(autouse=True)
def _nothing_ran():
    ran.clear()
    yield
    assert ran == [], "a refused run did some work"


# `no_artifacts` (conftest.py) points the artifacts at an empty folder: a refusal
# "before any work" comes first.


PROGRAM = ["-c", "from host import tools\ntools.ping()"]


def _refused(excinfo) -> None:
    assert not isinstance(excinfo.value, ArtifactsMissing)


def test_host_together_with_tools(no_artifacts):
    with pytest.raises((TypeError, ValueError)) as e:
        run(PROGRAM, tools=[ping], host=raw_host)
    _refused(e)


@pytest.mark.parametrize(
    "kw",
    [{"gate": lambda call: True}, {"max_tool_calls": 5}, {"max_tool_request_bytes": 1000}],
    ids=["gate", "max_tool_calls", "max_tool_request_bytes"],
)
def test_door_options_without_tools(no_artifacts, kw):
    with pytest.raises((TypeError, ValueError)) as e:
        run(["-c", "print(1)"], **kw)
    _refused(e)


@pytest.mark.parametrize(
    "kw",
    [{"gate": lambda call: True}, {"max_tool_calls": 5}, {"max_tool_request_bytes": 1000}],
    ids=["gate", "max_tool_calls", "max_tool_request_bytes"],
)
def test_door_options_with_host_but_without_tools(no_artifacts, kw):
    with pytest.raises((TypeError, ValueError)) as e:
        run(["-c", "print(1)"], host=raw_host, **kw)
    _refused(e)


def test_two_tools_with_one_name(no_artifacts):
    def other() -> str:
        """Another."""
        ran.append("other")
        return "x"

    with pytest.raises((TypeError, ValueError)) as e:
        run(PROGRAM, tools=[ping, tool(other, name="ping")])
    _refused(e)


def test_the_same_function_twice(no_artifacts):
    def twice() -> None:
        """Twice."""

    with pytest.raises((TypeError, ValueError)) as e:
        run(PROGRAM, tools=[twice, twice])
    _refused(e)


async def agen_tool():
    """Yields."""
    ran.append("agen")
    yield 1


async def agen_gate(call):
    ran.append("agen gate")
    yield True


def test_an_async_generator_function_as_a_tool(no_artifacts):
    with pytest.raises((TypeError, ValueError)) as e:
        run(PROGRAM, tools=[ping, agen_tool])
    _refused(e)


def test_an_async_generator_function_as_a_gate(no_artifacts):
    with pytest.raises((TypeError, ValueError)) as e:
        run(PROGRAM, tools=[ping], gate=agen_gate)
    _refused(e)


def test_an_async_def_as_host(no_artifacts):
    async def host(request: bytes) -> bytes:
        ran.append("async host")
        return b"{}"

    with pytest.raises((TypeError, ValueError)) as e:
        run(["-c", "print(1)"], host=host)
    _refused(e)


# --- an artifact set from before the tool protocol ---------------------------------------


def _link_tree(src: Path, dst: Path) -> None:
    """A cheap copy of the artifact set: hard links (or symlinks) for files, real folders."""
    dst.mkdir()
    for entry in src.iterdir():
        target = dst / entry.name
        if entry.name == "MANIFEST":
            continue
        if entry.is_dir():
            os.symlink(entry.resolve(), target, target_is_directory=True)
        else:
            try:
                os.link(entry, target)
            except OSError:
                os.symlink(entry.resolve(), target)


@pytest.fixture
def old_artifacts(monkeypatch, tmp_path):
    src = artifacts()
    # A fresh path each time: the runtime caches runtimes per folder path.
    dst = tmp_path / f"old-set-{uuid.uuid4().hex}"
    _link_tree(src, dst)
    manifest = (src / "MANIFEST").read_text()
    lines = [line for line in manifest.splitlines() if not line.startswith("protocol")]
    assert len(lines) < len(manifest.splitlines()), "the current set names its protocol"
    (dst / "MANIFEST").write_text("\n".join(lines) + "\n")
    sums = dst / "SHA256SUMS"
    if sums.exists():  # the old set's MANIFEST hash no longer matches; drop that line
        sums.unlink()
        kept = [line for line in (src / "SHA256SUMS").read_text().splitlines() if not line.endswith("MANIFEST")]
        sums.write_text("\n".join(kept) + "\n")
    monkeypatch.setenv("WASI_PYTHON_ARTIFACTS", str(dst))
    yield dst
    shutil.rmtree(dst, ignore_errors=True)


def test_an_artifact_set_from_before_the_tool_protocol(old_artifacts):
    assert artifacts() == old_artifacts  # otherwise a sound set
    with pytest.raises(ArtifactsMissing):
        run(PROGRAM, tools=[ping])


def test_an_artifact_set_from_before_the_tool_protocol_refuses_gate_and_limits_too(old_artifacts):
    with pytest.raises(ArtifactsMissing):
        run(PROGRAM, tools=[ping], gate=lambda call: True, max_tool_calls=5)
