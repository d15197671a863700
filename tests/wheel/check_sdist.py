"""The package installed from the sdist, tried as a user of a platform without wheels
would (run by `cargo xtask sdist --check` in a new venv, outside the clone, with an empty
cache): the README's first example, as written there, then a pandas program. Nothing is
shipped compiled, so the first run compiles the guest for this machine, and must say so
first, with the wait it expects; later runs take it from the cache."""

import logging
import os
import re
import sys
import time
from pathlib import Path

started = time.perf_counter()


class Kept(logging.Handler):
    """Keeps the notices logged: a user's logging sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def readme_example(readme: Path) -> str:
    """The first ```python block of the README: the user's first example."""
    found = re.search(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert found, "the README has no python example"
    return found.group(1)


def main() -> None:
    import contextlib
    import io

    kept = Kept()
    logging.getLogger("wasi_python").addHandler(kept)
    code = readme_example(Path(sys.argv[1]))
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
    compiling = [n for n in wasi_python.notices() if n.kind == "compiling"]
    assert compiling, f"the guest was compiled without a notice: {wasi_python.notices()}"
    assert re.search(r"about \d+ (s|min) on \d+ cores", compiling[0].message), compiling[0].message  # says the wait
    assert any(getattr(r, "notice_kind", None) == "compiling" for r in kept.records), "not logged"

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
    origins = {p.name: ext.cache_origin(str(p)) for p in files}
    assert "compiled" in origins.values(), f"the guest was not compiled here: {origins}"
    print(f"sdist check: the first run (the README's example; the guest compiled, the default "
          f"snapshot built) {first:.0f} s; the notice: {compiling[0].message!r}; "
          f"a pandas run then {pandas_s * 1000:.0f} ms; cache: {origins}")


main()
