"""The compiled-guest cache as processes share it (crates/runtime/src/cached.rs; the sweep's
own cases are its unit tests): a process holds each cache file it uses with a shared flock
until it exits, so another's sweep leaves the file; and a file whose identity changed since
it was checked is read whole again, so an edit in place is never served."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

from helpers import PYTHON_DIR, flocks

HOLDER = """
import sys, wasi_python
assert wasi_python.run(["-c", "print(1)"]).stdout == b"1\\n"
print("ran", flush=True)
sys.stdin.read()  # until the test closes it
"""


def _open_cache_files(pid: int) -> list[Path]:
    """The .cwasm and .img files process ``pid`` has open."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.suffix in (".cwasm", ".img"):
            found.append(target)
    return found


def test_a_process_holds_the_cache_files_it_uses_until_it_exits():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline() == b"ran\n"
        files = _open_cache_files(child.pid)
        assert {p.suffix for p in files} == {".cwasm", ".img"}, files
        held = flocks(child.pid)
        for p in files:
            assert ("READ", os.stat(p).st_ino) in held, f"{p} is open but not held: {held}"
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert child.returncode == 0
    assert flocks(child.pid) == set()


def test_a_cache_file_edited_in_place_after_its_check_is_not_served(tmp_path):
    from wasi_python import _wasi_python as ext

    body = bytes(range(256)) * 64
    path = tmp_path / "f.img"
    path.write_bytes(body)
    path.chmod(0o600)
    # The sidecar the runtime writes when it seals a file: length, CRC-32, origin.
    (tmp_path / "f.img.sum").write_text(f"{len(body)} {zlib.crc32(body):08x} built\n")
    assert ext.cache_origin(str(path)) == "built"
    assert ext.cache_origin(str(path)) == "built"  # vouched for now: not read whole
    # One byte changed in place, the length kept.
    _next_tick(path)
    with open(path, "r+b") as f:
        f.seek(1000)
        f.write(b"\xff")
    assert ext.cache_origin(str(path)) is None
    # The same bytes as sealed, renamed over it: read whole again, and whole.
    fresh = tmp_path / "fresh"
    fresh.write_bytes(body)
    fresh.chmod(0o600)
    os.replace(fresh, path)
    assert ext.cache_origin(str(path)) == "built"
    # Writable by others: never served.
    path.chmod(0o666)
    assert ext.cache_origin(str(path)) is None


def _next_tick(path: Path) -> None:
    """Waits until a write would give ``path`` another change time than its own (a file
    system with coarse timestamps gives every write in one clock tick the same)."""
    then = os.stat(path).st_ctime_ns
    probe = path.with_suffix(".probe")
    while True:
        probe.write_bytes(b"")
        if os.stat(probe).st_ctime_ns > then:
            probe.unlink()
            return
