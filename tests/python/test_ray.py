"""wasi_python.ray on a local Ray cluster of 2 CPUs: the same results as local runs, tools on
the worker and tools that stay with the caller, gates and records across the boundary,
faults (an actor killed mid-map, a guest that crashes or exhausts its limits) and sessions
that move between actors. Ray is a pinned test dependency: these tests never skip.

One cluster and one pool of 2 actors for the module; the actors' compiled guest comes from
the usual cache (``WASI_PYTHON_CACHE`` is pinned to it before ``HOME`` moves to a test folder).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import lookup_region, run_python

import ray  # noqa: E402 - a pinned test dependency (tests/requirements.txt)
from wasi_python import MemoryFiles, Mount, run  # noqa: E402
from wasi_python.ray import ActorLost, SandboxPool, SessionLost, protect_local_runs, stay  # noqa: E402
from wasi_python.tools import ToolCall, ToolDenied, ToolError, tool  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    cache = os.environ.get("WASI_PYTHON_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wasi-python"
    )
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "HOME", "WASI_PYTHON_CACHE")}
    # A short folder: Ray's socket paths must fit in 107 bytes.
    top = tempfile.mkdtemp(prefix="wpray-")
    os.makedirs(f"{top}/home")
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HOME=f"{top}/home", WASI_PYTHON_CACHE=cache)
    # Ray's crash reporter would replace wasmtime's trap handlers in this process, where
    # the other tests' guests overflow their stacks on purpose.
    with protect_local_runs():
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=f"{top}/ray", log_to_driver=False)
    try:
        with SandboxPool(2) as p:
            yield p
    finally:
        with protect_local_runs():  # it leaves the default handlers
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(top, ignore_errors=True)


def same(a, b) -> None:
    """Two `Completed`s alike but for timings."""
    assert (a.exit_code, a.stdout, a.stderr, a.trapped, a.truncated, a.file_bytes_written) == (
        b.exit_code, b.stdout, b.stderr, b.trapped, b.truncated, b.file_bytes_written
    )
    assert (a.tools is None) == (b.tools is None) and (a.files is None) == (b.files is None)
    if a.tools is not None:
        assert (a.tools.frames, a.tools.unlisted) == (b.tools.frames, b.tools.unlisted)
        assert a.tools.outcomes == b.tools.outcomes
        assert [o.seq for o in a.tools.abandoned] == [o.seq for o in b.tools.abandoned]
    assert a.files == b.files


GUIDE = """
from host import tools
print(tools.lookup_region("EMEA")["manager"])
"""


def test_the_guides_examples_give_what_local_runs_give(pool) -> None:
    cases = [
        (["-c", GUIDE], {"tools": [lookup_region]}),
        (["-c", "from host import tools\ntools.lookup_region('XX')"], {"tools": [lookup_region]}),
        (["-c", "import numpy as np; print(np.arange(4).sum())"], {}),
        (["-c", "import sys; print(sys.stdin.read()[::-1]); sys.exit(3)"], {"stdin": b"abc"}),
        (["-c", "while True: pass"], {"deadline_s": 0.5}),
        (["-c", "print('x' * 100)"], {"output_bytes": 10}),
        (["-c", "import os; print(os.environ['K'])"], {"env": {"K": "v"}}),
    ]
    for argv, kw in cases:
        here = run(argv, **kw)
        there = pool.run(argv, **kw)
        same(there, here)
    # A mount: the file record, and a writable MemoryFiles changed as locally.
    code = "import pandas as pd\ndf = pd.read_csv('/data/s.csv')\ndf.groupby('r').sum().to_csv('/out/t.csv')"
    local_out, pool_out = MemoryFiles(), MemoryFiles()
    data = {"s.csv": b"r,a\nn,10\ns,32\n"}
    here = run(["-c", code], mounts=[Mount(MemoryFiles(data), "/data"), Mount(local_out, "/out", writable=True)])
    there = pool.run(["-c", code], mounts=[Mount(MemoryFiles(data), "/data"), Mount(pool_out, "/out", writable=True)])
    same(there, here)
    assert there.files.files_written == 1 and pool_out.files == local_out.files
    # run_async, and map in order.
    same(asyncio.run(pool.run_async(["-c", GUIDE], tools=[lookup_region])), run(["-c", GUIDE], tools=[lookup_region]))
    assert [d.stdout for d in pool.map([f"print({i} ** 2)" for i in range(12)])] == [f"{i ** 2}\n".encode() for i in range(12)]


def test_bad_arguments_raise_as_locally(pool) -> None:
    with pytest.raises(TypeError):
        pool.run(["-c", "1"], gate=None)  # gate= without tools=
    with pytest.raises(ValueError):
        pool.run(["-c", "1"], memory_bytes=1)
    with pytest.raises(TypeError):
        pool.map(["1"], nonsense=1)
    with pytest.raises(TypeError):
        pool.run(["-c", "1"], cancel=threading.Event())


def _db() -> sqlite3.Connection:
    # Tool calls run on a thread of their own, here as locally (the guide, "Bound a tool's time").
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.execute("create table orders (user text, total int)")
    conn.executemany("insert into orders values (?, ?)", [("ada", 10), ("ada", 32), ("bob", 5)])
    return conn


def test_a_tool_on_the_worker_and_one_that_stays_with_the_caller(pool) -> None:
    conn = _db()
    served_in: list[int] = []

    @tool(read_only=True)
    def order_total(user: str) -> int:
        """The total of a user's orders.

        Args:
            user: The user's name.
        """
        served_in.append(os.getpid())
        (total,) = conn.execute("select sum(total) from orders where user = ?", (user,)).fetchone()
        if total is None:
            raise ToolError(f"no orders for {user!r}")
        return total

    @tool
    def where() -> int:
        """The process this tool runs in."""
        return os.getpid()

    @tool
    def digit() -> int:
        """A digit of this process's id (so the answer has one length everywhere)."""
        return os.getpid() % 9 + 1

    code = """
from host import tools
print(tools.order_total("ada"), tools.digit() > 0)
try:
    tools.order_total("eve")
except Exception as e:
    print(type(e).__name__, e)
help(tools.order_total)
"""
    there = pool.run(["-c", code], tools=[stay(order_total), digit])
    here = run(["-c", code], tools=[order_total, digit])
    assert there.stdout.startswith(b"42 True\nToolError no orders for 'eve'\n")
    same(there, here)
    assert served_in == [os.getpid()] * 4  # every call of the staying tool ran here
    # The tool that pickles ran on the worker.
    worker = pool.run(["-c", "from host import tools\nprint(tools.where())"], tools=[where])
    assert int(worker.stdout) in {i["pid"] for i in pool.ready()}

    # An exception other than ToolError: the same outcome and fault in the record.
    @tool
    def broken() -> int:
        """Fails."""
        raise KeyError("secret/path")

    there = pool.run(["-c", "from host import tools\ntools.broken()"], tools=[stay(broken)])
    here = run(["-c", "from host import tools\ntools.broken()"], tools=[broken])
    same(there, here)
    assert there.tools.outcomes[-1].fault == "KeyError: 'secret/path'"


def test_an_unpicklable_tool_is_refused_naming_it(pool) -> None:
    conn = _db()
    called: list[str] = []

    @tool
    def query_orders(sql: str) -> list:
        """Runs SQL."""
        called.append(sql)
        return conn.execute(sql).fetchall()

    with pytest.raises(TypeError) as refused:
        pool.run(["-c", "from host import tools\ntools.query_orders('select 1')"], tools=[lookup_region, query_orders])
    assert "query_orders" in str(refused.value)
    with pytest.raises(TypeError) as refused:
        pool.map(["print(1)"] * 3, tools=[query_orders])
    assert "query_orders" in str(refused.value)
    assert called == []


def test_a_gate_and_the_record_cross_the_boundary(pool) -> None:
    seen: list[ToolCall] = []
    lock = threading.Lock()  # unpicklable: this gate must stay

    def staying_gate(call: ToolCall):
        with lock:
            seen.append(call)
        if call.arguments.get("code") == "APAC":
            raise ToolDenied("APAC is closed")
        return call.arguments.get("code") != "LATAM"

    def worker_gate(call: ToolCall) -> bool:
        return call.arguments.get("code") != "LATAM"

    @tool(timeout_s=0.2)
    def slow(s: float) -> str:
        """Sleeps."""
        time.sleep(s)
        return "done"

    code = """
from host import tools
for code in ("EMEA", "LATAM", "APAC"):
    try:
        print(tools.lookup_region(code)["manager"])
    except Exception as e:
        print(type(e).__name__, e)
try:
    tools.slow(1.0)
except TimeoutError as e:
    print("timeout")
print(tools.slow(0.0))
"""
    here = run(["-c", code], tools=[lookup_region, slow], gate=staying_gate)
    seen.clear()
    there = pool.run(["-c", code], tools=[lookup_region, stay(slow)], gate=stay(staying_gate))
    same(there, here)
    assert [c.arguments for c in seen] == [{"code": "EMEA"}, {"code": "LATAM"}, {"code": "APAC"}, {"s": 1.0}, {"s": 0.0}]
    assert [o.outcome for o in there.tools.outcomes][1:] == ["ok", "denied", "denied", "timeout", "ok"]
    assert there.tools.outcomes[4].abandoned
    # A gate that pickles runs on the worker, with the same verdicts.
    there = pool.run(["-c", code], tools=[lookup_region, slow], gate=worker_gate)
    here = run(["-c", code], tools=[lookup_region, slow], gate=worker_gate)
    same(there, here)


def test_a_guest_that_crashes_or_exhausts_its_limits_leaves_its_actor_alive(pool) -> None:
    pids = {i["name"]: i["pid"] for i in pool.ready()}
    bad = [
        (["-c", "x = bytearray(200 << 20)"], {"memory_bytes": 64 << 20}),
        (["-c", "def f(): f()\nimport sys; sys.setrecursionlimit(10**9); f()"], {}),
        (["-c", "while True: pass"], {"deadline_s": 0.3}),
        (["-c", "while True: pass"], {"fuel": 1_000_000}),
        (["-c", "import os; os._exit(-1)"], {}),
    ]
    for argv, kw in bad:
        for d in pool.map([argv, argv], **kw):  # both actors
            assert not d.ok
    assert {i["name"]: i["pid"] for i in pool.ready()} == pids
    assert all(d.stdout == b"ok\n" for d in pool.map(["print('ok')"] * 4))


def test_an_actor_killed_mid_map_fails_only_its_runs(pool) -> None:
    victim, name = pool.actors[0], pool.actor_names[0]
    killer = threading.Timer(1.0, ray.kill, args=(victim,))
    killer.start()
    results = pool.map(["import time; time.sleep(0.25); print('ok')"] * 16)
    killer.join()
    lost = [r for r in results if isinstance(r, ActorLost)]
    done = [r for r in results if not isinstance(r, ActorLost)]
    assert lost and done
    assert all(r.actor == name and name in str(r) for r in lost)
    assert all(d.stdout == b"ok\n" for d in done)
    # The pool replaced it: later runs succeed, on both actors.
    assert pool.actor_names[0] != name
    assert all(d.stdout == b"ok\n" for d in pool.map(["print('ok')"] * 8))
    assert len({i["pid"] for i in pool.ready()}) == 2


def test_a_session_saved_on_one_actor_continues_on_another(pool) -> None:
    s = pool.session(actor=0, tools=[lookup_region])
    assert s.run("import pandas as pd\nx = 41\nfrom host import tools").ok
    saved = s.save()
    other = pool.session(snapshot=saved, actor=1, tools=[lookup_region])
    assert other.actor != s.actor
    assert other.run("print(x + 1, tools.lookup_region('EMEA')['manager'])").stdout == b"42 Ada\n"
    other.close()
    # move(): the same session, on the other actor.
    first = s.actor
    s.move()
    assert s.actor != first
    assert s.run("print(x + 1)").stdout == b"42\n"
    s.close()


def killed(actor) -> None:
    """Kills `actor` and returns once it is gone: `ray.kill` returns before, and a call
    made meanwhile may still reach it (then the next test's run met its death)."""
    ray.kill(actor)
    until = time.monotonic() + 60
    while time.monotonic() < until:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the actor outlived ray.kill")


def test_a_session_whose_actor_died_resumes_and_says_what_was_lost(pool) -> None:
    # Saved after each turn (the default): nothing completed is lost.
    s = pool.session()
    s.run("x = 40")
    s.run("x += 2")
    killed(pool.actors[pool.actor_names.index(s.actor)])
    with pytest.raises(SessionLost) as lost:
        s.run("print(x)")
    assert lost.value.lost_turns == () and lost.value.turn == 3
    assert s.run("print(x)").stdout == b"42\n"
    s.close()
    # Saved once, by hand: the turns after it are lost, and said so.
    s = pool.session(autosave=False)
    s.run("x = 1")
    s.save()
    s.run("x = 2")
    s.run("y = 3")
    name = s.actor
    killed(pool.actors[pool.actor_names.index(name)])
    with pytest.raises(SessionLost) as lost:
        s.run("print(x)")
    assert lost.value.actor == name and lost.value.lost_turns == (2, 3) and isinstance(lost.value, ActorLost)
    assert s.run("print(x)").stdout == b"1\n"
    s.close()


def test_local_runs_in_this_driver_still_trap(pool) -> None:
    overflow = ["-c", "def f(): f()\nimport sys; sys.setrecursionlimit(10**9); f()"]
    assert run(overflow).trapped == "stack overflow"
    assert pool.run(overflow).trapped == "stack overflow"


def test_a_driver_that_ran_a_guest_before_ray_init_still_traps_after_the_pool_starts(pool) -> None:
    # Issue 37 (9), in its order: wasi_python.ray imported, a local run (wasmtime installs
    # its trap handlers), ray.init() (Ray's crash reporter over them), SandboxPool(), then a
    # local guest that overflows its stack. In a child process, so that a SIGILL ends it
    # and not pytest; it joins this module's cluster instead of starting one.
    address = ray.get_runtime_context().gcs_address
    code = f"""
import ray, wasi_python.ray
from wasi_python import run
assert run(["-c", "pass"]).exit_code == 0
ray.init(address={address!r}, log_to_driver=False)
pool = wasi_python.ray.SandboxPool(1, warm=False, actor_options={{"num_cpus": 0}})
print(run(["-c", "def f(): f()\\nimport sys; sys.setrecursionlimit(10**9); f()"]).trapped)
pool.close()
"""
    child = run_python("-c", code, timeout=300)
    assert (child.returncode, child.stdout.splitlines()[-1:]) == (0, [b"stack overflow"]), child.stderr.decode()[-3000:]


def test_importing_the_package_does_not_import_ray() -> None:
    out = run_python("-c", "import sys, wasi_python, wasi_python.tools; print('ray' in sys.modules)")
    assert out.stdout.strip() == b"False", out.stderr


def test_a_compile_notice_is_warned_once_for_the_pool(pool) -> None:
    from wasi_python.ray import CompileNotice

    notice = "wasi_python: no compiled copy for this machine is shipped or cached: compiling the guest now"
    facts = [{"name": f"w{i}", "node": "n" * 20, "notices": [notice]} for i in range(3)]
    with pytest.warns(CompileNotice) as warned:
        for f in facts:
            pool._took(f)
    assert len(warned) == 1 and notice in str(warned[0].message)
    assert [a for a, n in pool.notices if n == notice] == ["w0", "w1", "w2"]
    # The pool's own actors loaded what the cache holds: nothing compiled.
    assert all(not i["notices"] and i["warm_ok"] for i in pool.ready())


def test_a_workers_notice_reaches_the_pool_as_data(pool, tmp_path) -> None:
    # A worker whose cache cannot hold the default preload's snapshot (its lock is a
    # folder): its runtime's notice, read by the actor as data, is warned by the pool.
    from test_notices import fresh_artifacts, image_names

    from wasi_python.ray import CompileNotice

    names = image_names()
    env = fresh_artifacts(tmp_path, names["json"])
    (Path(env["WASI_PYTHON_CACHE"]) / names["default"]).with_suffix(".lock").mkdir()
    options = {"num_cpus": 0, "runtime_env": {"env_vars": env}}
    with SandboxPool(1, warm=False, actor_options=options) as odd:
        with pytest.warns(CompileNotice) as warned:
            (info,) = odd.ready(timeout_s=300)
    assert info["warm_ok"], info
    assert [n for n in info["notices"] if "runs start without the default preload" in n] == info["notices"] != []
    assert len(warned) == 1 and info["notices"][0] in str(warned[0].message)


def test_an_async_tool_that_stays_is_cancelled_when_its_call_times_out(pool) -> None:
    cancelled = threading.Event()

    @tool(timeout_s=0.2)
    async def wait_long() -> str:
        """Waits a second."""
        try:
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    code = "from host import tools\ntry:\n    tools.wait_long()\nexcept TimeoutError:\n    print('timeout')"
    here = run(["-c", code], tools=[wait_long])
    assert cancelled.wait(2.0)
    cancelled.clear()
    there = pool.run(["-c", code], tools=[stay(wait_long)])
    same(there, here)
    assert there.stdout == b"timeout\n"
    assert cancelled.wait(2.0)  # here, in the caller's process, at its await


def test_autosave_sends_only_what_changed_and_resumes_from_it(pool) -> None:
    s = pool.session(actor=0)
    assert s.run("import pandas as pd\ndf = pd.DataFrame({'x': range(10_000)})").ok
    assert isinstance(s.saved, bytes)  # the first save is whole
    full = len(s.saved)
    assert s.run("y = 1").ok and s.run("y += 1").ok
    chain = s.saved
    assert isinstance(chain, tuple) and len(chain) == 3 and chain[0] == bytes(chain[0])
    assert all(len(d) * 2 < full for d in chain[1:]), [len(d) for d in chain]
    # The chain continues the session elsewhere, as a full save does.
    other = pool.session(snapshot=chain, actor=1)
    assert other.run("print(y, len(df))").stdout == b"2 10000\n"
    other.close()
    assert isinstance(s.save(), bytes) and isinstance(s.saved, bytes)
    s.close()
