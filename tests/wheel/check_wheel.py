"""The installed wheels, tried as a new user would (run by `cargo xtask wheel --check` in
a new venv, outside the clone, with an empty cache): the README's first example, as
written there, then a pandas program; every compiled file must have been unpacked from
the wheel, none compiled or built here."""

import contextlib
import io
import os
import re
import sys
import time
from pathlib import Path

started = time.perf_counter()


def readme_example(readme: Path) -> str:
    """The first ```python block of the README: the user's first example."""
    text = readme.read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found, "the README has no python example"
    return found.group(1)


def main() -> None:
    code = readme_example(Path(sys.argv[1]))
    # Each `print(...)  # expected` line of the example says what it prints.
    expected = [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.*)$", code, re.M)]
    assert expected, "the README's example prints nothing to check"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    first = time.perf_counter() - started
    got = out.getvalue().splitlines()
    assert got == expected, f"the README's example printed {got}, the README says {expected}"

    import wasi_python
    from wasi_python import _wasi_python as ext

    assert "site-packages" in wasi_python.__file__, f"not the installed package: {wasi_python.__file__}"
    t = time.perf_counter()
    done = wasi_python.run(["-c", """
import pandas as pd
df = pd.DataFrame({"region": ["north", "south", "north"], "amount": [10, 32, 5]})
print(df.groupby("region").amount.sum().to_dict())
"""])
    pandas_s = time.perf_counter() - t
    assert done.exit_code == 0, done.stderr
    assert done.stdout == b"{'north': 15, 'south': 32}\n", done.stdout

    cache = Path(os.environ["WASI_PYTHON_CACHE"])
    files = sorted(p for p in cache.iterdir() if p.suffix in (".cwasm", ".img"))
    assert any(p.suffix == ".cwasm" for p in files) and any(p.suffix == ".img" for p in files), files
    origins = {p.name: ext.cache_origin(str(p)) for p in files}
    assert set(origins.values()) == {"unpacked"}, f"compiled or built here, not unpacked: {origins}"
    # A new process now finds everything cached: what each CLI call or worker start pays.
    later = new_process_ms("import wasi_python; wasi_python.run(['-c', 'print(1)'])")
    bare = new_process_ms("pass")
    print(f"wheel check: import and first run (the README's example) {first:.2f} s; "
          f"first pandas run {pandas_s * 1000:.0f} ms; a new process's import and first run "
          f"{later - bare:.0f} ms net of Python's start ({bare:.0f} ms); cache: {', '.join(origins)}")


def new_process_ms(code: str, times: int = 10) -> float:
    """The median wall time of `times` new processes of this Python running ``code``
    (started through ``$WASI_PYTHON_CHECK_LAUNCHER`` if set: the aarch64 check's qemu-user,
    since this machine's kernel cannot run an aarch64 binary by itself)."""
    import shlex
    import statistics
    import subprocess

    launcher = shlex.split(os.environ.get("WASI_PYTHON_CHECK_LAUNCHER", ""))
    took = []
    for _ in range(times):
        t = time.perf_counter()
        subprocess.run([*launcher, sys.executable, "-c", code], check=True)
        took.append((time.perf_counter() - t) * 1000)
    return statistics.median(took)


main()
