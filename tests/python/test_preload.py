"""preload=: runs and sessions that start with modules imported, from a cached snapshot.

A run from a snapshot must be indistinguishable from one that imported the modules
itself, except in time (issue 10).
"""

import asyncio
import json
import time

import pytest

import wasi_python
from wasi_python import Grant, PreloadError, Session, run, run_async
from wasi_python import _wasi_python as _ext
from wasi_python.tools import tool

from helpers import run_python


def test_the_default_set_is_numpy_pandas_and_pyplot():
    d = wasi_python.default_preload()
    assert {"numpy", "pandas", "matplotlib.pyplot"} <= set(d)


def test_by_default_numpy_and_pandas_are_already_imported():
    r = run(["-c", "import sys; print(sorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules))"])
    assert r.stdout == b"['matplotlib.pyplot', 'numpy', 'pandas']\n", r.stderr


def test_an_empty_preload_starts_from_the_plain_bootstrap():
    r = run(["-c", "import sys; print('numpy' in sys.modules)"], preload=())
    assert r.stdout == b"False\n"


def test_an_explicit_set_is_exactly_what_is_preloaded():
    r = run(["-c", "import sys; print('numpy' in sys.modules, 'pandas' in sys.modules)"], preload=("numpy",))
    assert r.stdout == b"True False\n", r.stderr


def test_data_code_works_from_the_snapshot():
    code = "import pandas as pd, numpy as np; df = pd.DataFrame({'a': [1, 2], 'b': np.arange(2)}); print(df.sum().to_dict())"
    r = run(["-c", code])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == b"{'a': 3, 'b': 1}\n"


def test_a_plot_saves_to_png_with_the_agg_backend():
    code = (
        "import matplotlib; import matplotlib.pyplot as plt; plt.plot([1, 2, 3]); "
        "plt.savefig('/tmp/p.png'); print(matplotlib.get_backend(), open('/tmp/p.png', 'rb').read()[:4])"
    )
    r = run(["-c", code])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == b"Agg b'\\x89PNG'\n"


PROBE = r"""
import json, os, random, sys, time
import numpy as np
random.seed(7)
print(json.dumps({
    "seeded": random.random(),
    "rng": int(np.random.default_rng().integers(10**9)),
    "np_global": float(np.random.random()),
    "environ": dict(os.environ),
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "clock": abs(time.time() - float(os.environ["NOW"])) < 60,
    "modules": sorted(sys.modules),
    "path": sys.path,
}))
"""


def _probe(**kw):
    r = run(["-c", PROBE, "arg1"], env={"NOW": str(time.time()), "X": "y"}, **kw)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    out["environ"].pop("NOW")
    return out


def test_a_snapshot_run_matches_a_run_that_imported_the_modules():
    fresh = _probe(preload=())
    a = _probe(preload=("numpy",))
    b = _probe(preload=("numpy",))
    for key in ("seeded", "environ", "argv", "cwd", "clock", "modules", "path"):
        assert a[key] == fresh[key], key
    assert a["clock"] is True
    # Unseeded generators differ run to run, as without a snapshot.
    assert a["rng"] != b["rng"]
    assert a["np_global"] != b["np_global"]
    assert a["np_global"] != fresh["np_global"]


def test_a_module_that_does_not_import_is_named():
    with pytest.raises(PreloadError) as e:
        run(["-c", "pass"], preload=("numpy", "surely_not_a_module"))
    assert e.value.module == "surely_not_a_module"
    assert "ModuleNotFoundError" in str(e.value)
    # And the same error when asked again, the names in another order.
    with pytest.raises(PreloadError):
        run(["-c", "pass"], preload=("surely_not_a_module", "numpy"))


@pytest.mark.parametrize(
    "bad, kind",
    [("numpy", TypeError), ([1], TypeError), (["os; import sys"], ValueError), ([""], ValueError), (3, TypeError)],
)
def test_bad_preload_arguments_name_the_parameter(bad, kind):
    with pytest.raises(kind, match="preload"):
        run(["-c", "pass"], preload=bad)


def test_a_memory_limit_below_the_snapshot_is_a_clear_error():
    with pytest.raises(ValueError, match="memory_bytes"):
        run(["-c", "pass"], preload=("pandas",), memory_bytes=48 << 20)
    # Not asked for: the default set is skipped, and the run goes on without it.
    r = run(["-c", "import sys; print('pandas' in sys.modules)"], memory_bytes=48 << 20)
    assert r.stdout == b"False\n"


def test_fuel_metered_runs_start_from_the_snapshot():
    r = run(["-c", "import sys; print('numpy' in sys.modules)"], preload=("numpy",), fuel=10**10)
    assert r.stdout == b"True\n", r.stderr
    assert r.fuel_used is not None and r.fuel_used > 0


def test_a_session_starts_with_the_modules_and_keeps_state():
    with Session(preload=("numpy",), env={"WHO": "me"}) as s:
        assert s.run("import sys, os; 'numpy' in sys.modules, os.environ['WHO']").stdout == b"(True, 'me')\n"
        s.run("import numpy as np; a = np.arange(4)")
        assert s.run("int(a.sum())").stdout == b"6\n"


def test_run_async_preloads_too():
    async def main():
        return await asyncio.gather(*(run_async(["-c", "import sys; print('pandas' in sys.modules)"]) for _ in range(4)))

    for r in asyncio.run(main()):
        assert r.stdout == b"True\n", r.stderr


def test_prepare_builds_the_snapshot_into_the_cache():
    p = wasi_python.prepare(("numpy",))
    assert p.is_file() and p.stat().st_size % 65536 == 0
    assert wasi_python.prepare(["numpy", "numpy"]) == p


def test_a_second_process_finds_the_default_snapshot_and_builds_nothing():
    image = wasi_python.prepare()
    before = {p.name for p in image.parent.glob("*.img")}
    code = "import sys, wasi_python; r = wasi_python.run(['-c', 'import sys; print(\"pandas\" in sys.modules)']); sys.stdout.buffer.write(r.stdout)"
    p = run_python("-c", code, timeout=300)
    assert p.stdout == b"True\n", p.stderr
    assert {p.name for p in image.parent.glob("*.img")} == before
    assert wasi_python.prepare(tuple(reversed(wasi_python.default_preload()))) == image


def test_sessions_from_one_snapshot_draw_different_random_numbers():
    outs = []
    for _ in range(2):
        # pandas imports numpy.random, so its global generator is in the snapshot.
        with Session(preload=("numpy", "pandas")) as s:
            outs.append(s.run("import random, sys, numpy as np; (random.random(), float(np.random.random()))").stdout)
    assert outs[0] != outs[1]
    a, b = (eval(o) for o in outs)
    assert a[0] != b[0] and a[1] != b[1]


# The generators' state as a run finds it: which of them guest boot writes through
# views of their memory (`_rng_views`), `random`'s position and cached Gaussian,
# numpy's position, cached Gaussian flag and value, and the first words of each state.
GENERATORS = (
    "import _wasi_python_boot as b, random, numpy as np; r = random.getstate(); "
    "s = np.random.get_state(); w = tuple(v is not None for v in b._rng_views or (None, None)); "
    "print((w, r[1][624], r[2], s[2], s[3], s[4], r[1][:3], tuple(s[1][:3].tolist())))"
)


@pytest.mark.parametrize(
    ("preload", "written"),
    # numpy imports numpy.random (and that `random`) only when a program asks.
    [(("numpy.random",), (True, True)), (("random",), (False, False)), (("numpy",), (False, False))],
)
def test_each_fresh_run_finds_both_generators_freshly_and_differently_set(preload, written):
    # From an image with numpy, the states of the generators it holds are written whole
    # with new entropy through views of their memory (guest boot's `_reseed`); others
    # are seeded, or, imported by the program, seed themselves.
    seen = []
    for fuel in (None, None, 10**10):  # the metered run never takes a guest on standby
        r = run(["-c", GENERATORS], preload=preload, fuel=fuel)
        assert r.ok, r.stderr
        seen.append(eval(r.stdout))
    for views, index, gauss_next, pos, has_gauss, gauss, _, _ in seen:
        assert views == written
        assert (index, gauss_next, has_gauss, gauss) == (624, None, 0, 0.0)
        assert pos == 624 or not written[1]  # numpy's own seeding leaves 623
    assert len({s[6] for s in seen}) == 3 and len({s[7] for s in seen}) == 3


@tool
def echo(s: str) -> str:
    """Says `s` back."""
    return s


def test_the_generators_states_come_from_the_host_s_entropy_frame_in_one_call():
    # os.urandom takes one WASI call per 256 bytes; the host answers the entropy frame
    # (control.rs) in any guest, with or without tools, with 4,992 new bytes each time.
    code = (
        "import _host, os, _wasi_python_boot as b\n"
        "frames = [_host.call(b'\\0wasi-python entropy') for _ in range(3)]\n"
        "os.urandom = None  # so the boot module's fallback would fail\n"
        "print(sorted({len(f) for f in frames}), len(set(frames)), len(b._entropy()))"
    )
    for kw in ({}, {"tools": [echo]}):
        r = run(["-c", code], preload=("numpy.random",), **kw)
        assert r.stdout == b"[4992] 3 4992\n", r.stderr


def test_a_session_s_turn_leaves_the_generators_to_seeding():
    # A turn may replace a generator or leave a cached Gaussian behind, which writing
    # the state would keep: a session's snapshot reseeds them by seeding.
    with Session(preload=("numpy",)) as s:
        r = s.run("import _wasi_python_boot as b; print(b._rng_views is None)")
    assert r.stdout == b"True\n", r.stderr


def test_a_session_from_the_image_finds_no_trace_of_the_build_s_warm_up_run():
    # The build runs an empty `-c` program twice (guest boot's `_warm_run`), then puts
    # back `sys.argv`, `__main__` and the sources registered for tracebacks.
    with Session() as s:
        r = s.run("import sys, linecache; print(sys.argv, [k for k in linecache._interactive_cache if k[0] == '<string>'])")
    assert r.stdout == b"[''] []\n", r.stderr


# --- compiled programs kept per image (crates/runtime/src/compiled.rs) ---------------------

FAILING = "def f():\n    raise ValueError('boom {n}')\nf()"


@pytest.mark.parametrize("through", ["standby", "go"])
def test_a_program_run_again_loads_its_code_compiled_once_and_behaves_the_same(through, tmp_path):
    # A run with a grant never takes a guest on standby: it asks for its spec itself.
    kw = {"grants": [Grant(tmp_path, "/data")]} if through == "go" else {}
    program = FAILING.format(n=f"{through} {time.monotonic_ns()}")
    kept = []
    outs = []
    for _ in range(4):
        r = run(["-c", program, "arg"], **kw)
        outs.append((r.exit_code, r.stdout, r.stderr))
        kept.append(_ext.compiled_programs())
    # Asked for at its second run, kept from then on, and found at the third and fourth.
    assert kept[1] == kept[0] + 1 and kept[3] == kept[1], kept
    assert outs[0][0] == 1 and b"raise ValueError('boom" in outs[0][2], outs[0]
    assert outs.count(outs[0]) == 4, outs


def test_a_program_that_warns_or_fails_to_compile_is_not_kept_and_says_so_each_run():
    before = _ext.compiled_programs()
    for program, said in ((f"x = '\\d'  # {time.monotonic_ns()}", b"SyntaxWarning"), ("def (", b"SyntaxError")):
        outs = [run(["-c", program]) for _ in range(3)]
        assert all(said in r.stderr for r in outs), [r.stderr for r in outs]
    assert _ext.compiled_programs() == before


def test_a_metered_run_neither_keeps_nor_finds_compiled_code():
    program = f"print(sum(range(10))) # {time.monotonic_ns()}"
    before = _ext.compiled_programs()
    fuel = [run(["-c", program], fuel=10**9).fuel_used for _ in range(3)]
    assert fuel[0] == fuel[1] == fuel[2]
    assert _ext.compiled_programs() == before
    for _ in range(3):
        run(["-c", program])  # kept now
    assert run(["-c", program], fuel=10**9).fuel_used == fuel[0]


def test_a_program_cannot_plant_code_for_a_later_run():
    # The host takes the code only as the run's first frame after its spec, which the
    # guest's runner sends before the program starts; the program's own offer, sent
    # first in every run, goes through the door like any other frame.
    program = (
        "import _host, marshal\n"
        "planted = marshal.dumps(compile('print(\"planted\")', '<string>', 'exec'))\n"
        "try:\n"
        "    _host.call(b'\\0wasi-python compiled ' + planted)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n"
        f"print('mine') # {time.monotonic_ns()}"
    )
    outs = [run(["-c", program]).stdout for _ in range(4)]
    assert outs.count(outs[0]) == 4 and outs[0].endswith(b"mine\n") and b"planted" not in outs[0], outs
