"""``wasi_python.Session``: one interpreter across turns; per-turn limits and tool budgets;
the ways a session ends; one thread at a time; tools, grants and async use."""

import asyncio
import re
import threading
import time

import pytest
from wasi_python import Completed, Grant, Session, SessionBusy, SessionEnded
from wasi_python.tools import ToolRecord, tool


@pytest.fixture
def session():
    s = Session(deadline_s=20)
    try:
        yield s
    finally:
        s.close()


# --- turns: state, echo, tracebacks ----------------------------------------------------------


def test_imports_and_variables_carry_over(session):
    assert session.run("import json\nx = 20").stdout == b""
    done = session.run("print(json.dumps({'x': x + 1}))")
    assert isinstance(done, Completed)
    assert done.ok
    assert done.stdout == b'{"x": 21}\n'


def test_a_final_expression_is_echoed_and_bound_to_underscore(session):
    assert session.run("1+1").stdout == b"2\n"
    assert session.run("None").stdout == b""
    assert session.run("'a' * 3").stdout == b"'aaa'\n"  # its repr, like the REPL
    assert session.run("_ * 2").stdout == b"'aaaaaa'\n"
    assert session.run("y = 5").stdout == b""  # a statement echoes nothing
    assert session.run("print('p')\ny").stdout == b"p\n5\n"  # only the last statement


def test_none_does_not_rebind_underscore(session):
    session.run("41 + 1")
    session.run("None")
    assert session.run("_").stdout == b"42\n"


def test_tracebacks_name_the_turn_and_the_callers_first_turn_is_turn_1(session):
    done = session.run("def f():\n    return 1 / 0")
    assert done.ok
    done = session.run("x = 1")
    done = session.run("f()")
    assert done.exit_code == 1
    assert done.trapped is None
    assert b'File "<turn 3>"' in done.stderr
    assert b'File "<turn 1>"' in done.stderr  # f was defined in the first turn
    assert b"ZeroDivisionError" in done.stderr
    # A failed turn does not end the session.
    assert session.ended is None
    assert session.run("x").stdout == b"1\n"


def test_a_one_expression_turn_echoes_and_reports_as_any_turn(session):
    # Expression turns are compiled by the guest package (one compile, in "eval" mode);
    # what they print, bind and report must be the reactor's.
    assert session.run("print('a')").stdout == b"a\n"  # None: not echoed
    assert session.run("[1, 2] + [3]").stdout == b"[1, 2, 3]\n"
    assert session.run("_").stdout == b"[1, 2, 3]\n"
    session.run("def g():\n    return 1 / 0")
    # The expression's path, a statement's (compiled from its source), the reactor's.
    for done in (session.run("g()"), session.run("y = g()"), session.run("y = 1; g()")):
        assert done.exit_code == 1
        assert b"_wasi_python_boot" not in done.stderr and b"<reactor>" not in done.stderr
        lines = done.stderr.decode().splitlines()
        assert lines[0] == "Traceback (most recent call last):" and lines[1].startswith('  File "<turn ')
        assert lines[-1] == "ZeroDivisionError: division by zero"
    # Text the reactor refuses is refused the same: leading space, a statement.
    assert b"IndentationError" in session.run(" 1 + 1").stderr
    assert session.run("pass").stdout == b""


# Turns the guest package compiles from their source (`_compiled_turn`) and turns it
# leaves to the reactor, among them its edges: a last statement that is an expression or
# a compound statement, cut points inside brackets, strings and continued lines, `;`,
# decorators, clauses at the first column, annotations, `__future__`, the soft keyword
# `match`, errors, warnings, exits and odd whitespace.
TURNS = [
    "x = 1", "y = x + 1\nz = y * 2", "z", "d = dict(a=1)", "dict(a=1)", "print('a')\nx",
    "for i in range(3): i", "for i in range(3):\n    i", "if x:\n    'yes'\nelse:\n    'no'",
    "try:\n    1/0\nexcept ZeroDivisionError:\n    'caught'", "@staticmethod\ndef f(): return 1", "f",
    "def g():\n    return 1/0\ng()", "a = [\n    1,\n    2,\n]", "a\n", "[x\nfor x in range(3)]",
    "x: int = 5\ny: str = 'a'", "__annotate__(1)", "v: int = 1\nw: int = 2\n__annotate__(1)",
    "x = 1; x", "1; 2", "s = '''\nabc\n'''", "s", "'''doc'''\nq = 1", "__doc__", "x = (1 +\n2)", "x",
    "x = 1 + \\\n2", "x", "t = 1\nt \\\n+ 1", "match = 3", "match", "match(1)", "1 +", "def h(:\n pass",
    "import os\nos.getcwd()", "print(1)\n# trailing comment\n", "x = 1\n\n\n", "  x",
    "class C:\n    pass\nC.__name__", "lambda: 1", "f = lambda a: a\nf(2)", "raise ValueError('v')",
    "y = undefined_name", "import sys\nsys.exit(3)", "x = 1\nraise KeyError(2)", "'a' 'b'", "(yield)",
    "return 5", "del x\nx", "nonlocal q", "global g1\ng1 = 1", "g1", "async def co(): pass", "await co()",
    "x = 1 is 1", "x = 1\ny = 2 is 2", "x = 'a'\n\x00", "x = 1\r\ny = 2\r\ny", "x\r\n",
    "def k():\n    return 2\n\n\nk()", "x = {\n 'a': 1\n}\nx['a']", "if x:\n    pass\nelif y:\n    pass",
    "y = 3\nif y:\n    y\n", "from __future__ import annotations\nv: int = 1", "x = [i for i in range(3)]\nx",
    "@property\n@staticmethod\ndef dd(): pass\ndd", "_", "x = 5\n_", "None", "x = None\nx",
    "import json as j; j.dumps(1)", "# only a comment", "", "\n\n", "x = 1\n# c\n  # c2\n",
    "class D:\n    x = 1\nD.x", "q = 1\n(q,\n 2)", "z = 1\n[\n z]\n", "while False:\n    pass\nelse:\n    'else'",
    "type T = int\nT", "x = 1\n\ty", "x = 1\n        ", "x = 1 \\", "match x:\n    case 1:\n        'one'",
    # A last expression whose repr raises: the traceback has no frame of the turn's own.
    "class R:\n    def __repr__(self):\n        raise KeyError('r')\nR()", "r = R()\nr", "dict(a=R())",
    "import sys\nsys.displayhook(5)",
]


def _turns_as_shown(reactor_only):
    shown = []
    with Session(deadline_s=20) as s:
        s.run("import _wasi_python_boot as b" + ("\nb._compiled_turn = lambda t, n: None" if reactor_only else ""))
        for text in [*TURNS, "sorted(k for k in globals() if not k.startswith('__'))"]:
            done = s.run(text)
            # Objects' addresses differ between the two sessions.
            shown.append((text, done.exit_code, re.sub(rb"0x[0-9a-f]+", b"0x", done.stdout), done.stderr))
    return shown


def test_turns_compiled_from_source_show_what_the_reactors_would():
    ours, reactors = _turns_as_shown(False), _turns_as_shown(True)
    assert [t for t, r in zip(ours, reactors) if t != r] == []


def test_statement_turns_are_compiled_without_the_reactor(session):
    session.run(
        "import _wasi_python_boot as b\nasked = []\nreactor = b._reactor_run_turn\n"
        "b._reactor_run_turn = lambda t, n: (asked.append(t), reactor(t, n))[1]"
    )
    for text in ("x = 1", "y = x + 1\nz = y * 2", "if x:\n    'yes'\nelse:\n    'no'", "d = dict(\n    a=1,\n)",
                 "dict(a=1)", "match x:\n    case _:\n        pass", "y\nx + 1"):
        assert session.run(text).ok
    assert session.run("print(asked)").stdout == b"[]\n"
    for text in ("x = 1; x", "1 +"):
        session.run(text)
    assert session.run("print(len(asked))").stdout == b"2\n"


def test_a_name_turn_shows_what_the_compiled_name_would(session):
    # A turn that is a name alone is looked up without compiling; what it shows, binds
    # and raises must be what evaluating the name shows, binds and raises.
    session.run("x = [1, 2]\nimport builtins\nbuiltins.shadowed = 'builtin'\nmatch = 'soft'")
    assert session.run("x").stdout == b"[1, 2]\n"
    assert session.run("x\n").stdout == b"[1, 2]\n"
    assert session.run("_").stdout == b"[1, 2]\n"  # displayhook bound it
    assert session.run("len").stdout == b"<built-in function len>\n"
    assert session.run("shadowed").stdout == b"'builtin'\n"
    assert session.run("match").stdout == b"'soft'\n"  # a soft keyword is a name
    session.run("len = 'mine'")
    assert session.run("len").stdout == b"'mine'\n"  # __main__ before builtins
    assert session.run("None").stdout == b""  # a keyword: the value None, not echoed
    assert session.run("__debug__").stdout == b"True\n"
    session.run("y = None")
    assert session.run("y").stdout == b""
    missing = session.run("nowhere")
    assert missing.exit_code == 1
    lines = missing.stderr.decode().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[1].startswith('  File "<turn ')
    assert lines[-1] == "NameError: name 'nowhere' is not defined"
    assert b"<reactor>" not in missing.stderr and b"_wasi_python_boot" not in missing.stderr
    session.run("class R:\n    def __repr__(self):\n        raise KeyError('repr')\nr = R()")
    bad = session.run("r")
    assert bad.exit_code == 1 and bad.stderr.decode().splitlines()[-1] == "KeyError: 'repr'"
    assert session.ended is None


def test_the_first_turns_traceback_is_turn_1():
    with Session() as s:
        done = s.run("raise ValueError('first')")
    assert done.exit_code == 1
    assert b'File "<turn 1>"' in done.stderr
    assert b"ValueError: first" in done.stderr


def test_turn_status_follows_sys_exit_and_the_session_lives_on(session):
    assert session.run("import sys; sys.exit(4)").exit_code == 4
    assert session.run("raise SystemExit").exit_code == 0
    assert session.run("1 +").exit_code == 1  # SyntaxError
    assert session.ended is None
    assert session.run("2 + 2").stdout == b"4\n"


# --- per-turn limits ----------------------------------------------------------------------


def test_each_turn_gets_its_own_deadline():
    with Session(deadline_s=0.6) as s:
        # Three turns of 0.3 s each: more than one deadline together, none alone.
        for _ in range(3):
            done = s.run("import time\nt = time.time()\nwhile time.time() - t < 0.3: pass")
            assert done.ok, done
        assert s.ended is None


def test_deadline_override_and_a_trapped_turn_ends_the_session(session):
    session.run("x = 1")
    t = time.monotonic()
    done = session.run("while True: pass", deadline_s=0.3)
    wall = time.monotonic() - t
    assert done.trapped == "deadline"
    assert done.exit_code is None
    assert 0.25 <= wall < 3
    assert session.ended == "deadline"
    with pytest.raises(SessionEnded) as e:
        session.run("x")
    assert e.value.reason == "deadline"


def test_each_turn_gets_its_own_output_cap():
    with Session(output_bytes=100) as s:
        for _ in range(3):
            done = s.run("print('x' * 79)")
            assert done.stdout == b"x" * 79 + b"\n"
            assert done.truncated == ()
        done = s.run("print('y' * 150)")
        assert done.stdout == b"y" * 100
        assert done.truncated == ("stdout",)
        # An override for one turn only.
        done = s.run("print('z' * 150)", output_bytes=1000)
        assert done.stdout == b"z" * 150 + b"\n"
        done = s.run("import sys\nsys.stderr.write('e' * 30)", output_bytes=10)
        assert done.stderr == b"e" * 10
        assert done.truncated == ("stderr",)
        assert s.run("print('w' * 99)").stdout == b"w" * 99 + b"\n"


LOOP = "n = 0\nfor i in range(200_000): n += i"


def test_each_turn_gets_its_own_fuel():
    with Session(fuel=10**11) as s:
        first = s.run(LOOP)
        assert first.ok
        used = first.fuel_used
        assert used is not None and used > 0
        # Two turns, each under a cap that one fits and two together would not.
        cap = int(used * 1.6)
        for _ in range(2):
            done = s.run(LOOP, fuel=cap)
            assert done.ok, done
            assert done.fuel_used < cap
        # The session's default per-turn cap comes back after an override.
        assert s.run(LOOP).ok
        # A turn over its own cap runs out, and that ends the session.
        done = s.run(LOOP, fuel=used // 4)
        assert done.trapped == "out of fuel"
        assert s.ended == "out of fuel"
        with pytest.raises(SessionEnded) as e:
            s.run("1")
        assert e.value.reason == "out of fuel"


def test_fuel_per_turn_needs_a_metered_session(session):
    with pytest.raises(ValueError, match="fuel"):
        session.run("1", fuel=10**9)
    assert session.run("1").fuel_used is None
    assert session.run("1", fuel=None).ok  # None: no fuel, which is what it has


def test_a_turn_never_outlives_the_sessions_lifetime():
    with Session(lifetime_s=1.0, idle_s=None, deadline_s=30) as s:
        t = time.monotonic()
        done = s.run("while True: pass")
        wall = time.monotonic() - t
        # The turn is stopped by its clock; the session ends for its lifetime.
        assert done.trapped == "deadline"
        assert s.ended == "lifetime"
    assert wall < 4


# --- how a session ends -----------------------------------------------------------------


def test_session_ends_when_idle():
    s = Session(idle_s=0.3)
    try:
        assert s.run("x = 1").ok
        assert s.ended is None
        time.sleep(0.8)
        with pytest.raises(SessionEnded) as e:
            s.run("x")
        assert e.value.reason == "idle"
        assert s.ended == "idle"
    finally:
        s.close()


def test_turns_within_the_idle_time_keep_the_session_alive():
    with Session(idle_s=0.5) as s:
        for i in range(5):
            time.sleep(0.15)
            assert s.run(f"x = {i}").ok
        assert s.run("x").stdout == b"4\n"


def test_session_ends_when_its_lifetime_passes():
    s = Session(lifetime_s=0.5, idle_s=None)
    try:
        assert s.run("x = 1").ok
        time.sleep(0.9)
        with pytest.raises(SessionEnded) as e:
            s.run("x")
        assert e.value.reason == "lifetime"
        assert s.ended == "lifetime"
    finally:
        s.close()


@pytest.mark.parametrize(("code", "status"), [("exit()", 0), ("exit(3)", 3), ("quit(5)", 5), ("import os\nos._exit(7)", 7)])
def test_session_ends_when_the_guest_exits(code, status):
    with Session() as s:
        s.run("x = 1")
        done = s.run("print('bye', flush=True)\n" + code)
        assert done.exit_code == status
        assert done.trapped is None
        assert done.stdout == b"bye\n"
        assert s.ended == "exit"
        with pytest.raises(SessionEnded) as e:
            s.run("x")
        assert e.value.reason == "exit"


def test_close_ends_the_session(session):
    assert session.ended is None
    session.run("x = 1")
    session.close()
    assert session.ended == "closed"
    with pytest.raises(SessionEnded) as e:
        session.run("x")
    assert e.value.reason == "closed"
    assert isinstance(e.value, RuntimeError)
    assert str(e.value)
    session.close()  # idempotent
    assert session.ended == "closed"


def test_context_manager_closes():
    with Session() as s:
        assert s.run("1").ok
    assert s.ended == "closed"
    with pytest.raises(SessionEnded) as e:
        s.run("1")
    assert e.value.reason == "closed"


def test_closing_an_unused_session_works():
    s = Session()
    s.close()
    with pytest.raises(SessionEnded):
        s.run("1")


def test_closing_runs_the_guests_atexit_handlers(tmp_path):
    s = Session(grants=[Grant(tmp_path, "/out", writable=True)])
    try:
        done = s.run(
            "import atexit\n"
            "def bye():\n"
            "    with open('/out/bye.txt', 'w') as f:\n"
            "        f.write('goodbye')\n"
            "atexit.register(bye)"
        )
        assert done.ok, done.stderr
        assert not (tmp_path / "bye.txt").exists()
    finally:
        s.close()
    assert (tmp_path / "bye.txt").read_text() == "goodbye"


# --- one thread at a time ---------------------------------------------------------------


def _marker():
    """A tool the guest calls to say "my long turn has begun"."""
    began = threading.Event()

    @tool
    def mark() -> None:
        began.set()

    return mark, began


LONG_TURN = "tools.mark()\nimport time\nt = time.time()\nwhile time.time() - t < {s}: pass\nlong = 'finished'"


def test_a_concurrent_turn_is_refused_with_session_busy():
    mark, began = _marker()
    with Session(deadline_s=20, tools=[mark]) as s:
        s.run("from host import tools\nstate = ['kept']")
        result = {}

        def long_turn():
            result["done"] = s.run(LONG_TURN.format(s=1.0))

        worker = threading.Thread(target=long_turn)
        worker.start()
        try:
            assert began.wait(10), "the long turn never began"
            with pytest.raises(SessionBusy) as e:
                s.run("state.append('raced')")
            assert worker.is_alive()  # refused at once, not after waiting for the long turn
        finally:
            worker.join(10)
        assert isinstance(e.value, RuntimeError)
        assert str(e.value)
        assert result["done"].ok, result["done"]
        # Not corrupted: the session lives, with its state; the refused code never ran.
        assert s.ended is None
        assert s.run("long").stdout == b"'finished'\n"
        assert s.run("state").stdout == b"['kept']\n"


def test_a_concurrent_run_async_is_refused_with_session_busy(arun):
    mark, began = _marker()

    async def main(s):
        long = asyncio.create_task(s.run_async(LONG_TURN.format(s=0.8)))
        ok = await asyncio.get_running_loop().run_in_executor(None, began.wait, 10)
        assert ok, "the long turn never began"
        with pytest.raises(SessionBusy):
            await s.run_async("w = 1")
        with pytest.raises(SessionBusy):
            s.run("w = 2")
        return await long

    with Session(deadline_s=20, tools=[mark]) as s:
        s.run("from host import tools")
        done = arun(main(s))
        assert done.ok, done
        assert s.run("long").stdout == b"'finished'\n"
        assert s.run("'w' in globals()").stdout == b"False\n"


# --- async ------------------------------------------------------------------------------


def test_run_async_on_a_session(arun):
    async def main(s):
        a = await s.run_async("x = 5")
        b = await s.run_async("x * 2")
        c = await s.run_async("x * 3", output_bytes=1)
        return a, b, c

    with Session() as s:
        a, b, c = arun(main(s))
        assert a.ok and a.stdout == b""
        assert b.stdout == b"10\n"
        assert c.stdout == b"1"
        assert c.truncated == ("stdout",)
        assert s.run("x").stdout == b"5\n"  # sync and async turns share one interpreter


def test_run_async_keeps_the_loop_free(arun):
    async def main(s):
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.02)

        task = asyncio.create_task(ticker())
        done = await s.run_async("import time\nt = time.time()\nwhile time.time() - t < 0.5: pass")
        stop = True
        await task
        return done, ticks

    with Session() as s:
        done, ticks = arun(main(s))
    assert done.ok
    assert ticks >= 8


def test_cancelling_a_session_turn_stops_it_and_ends_the_session(arun):
    async def main(s):
        task = asyncio.create_task(s.run_async("while True: pass", deadline_s=30))
        await asyncio.sleep(0.2)
        task.cancel()
        t = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t

    with Session() as s:
        elapsed = arun(main(s))
        assert elapsed < 1.0
        assert s.ended == "cancelled"
        with pytest.raises(SessionEnded) as e:
            s.run("1")
        assert e.value.reason == "cancelled"


def test_run_async_on_an_ended_session_raises_session_ended(arun):
    s = Session()
    s.close()
    with pytest.raises(SessionEnded) as e:
        arun(s.run_async("1"))
    assert e.value.reason == "closed"


# --- tools in sessions -------------------------------------------------------------------


def test_a_tool_in_two_turns_with_discovery_once():
    calls = []

    @tool
    def add(a: int, b: int) -> int:
        calls.append((a, b))
        return a + b

    with Session(tools=[add]) as s:
        first = s.run("from host import tools\ntools.add(1, 2)")
        assert first.stdout == b"3\n"
        assert isinstance(first.tools, ToolRecord)
        assert [(o.op, o.tool, o.outcome) for o in first.tools.outcomes] == [("list", None, "ok"), ("call", "add", "ok")]
        assert first.tools.frames == 2
        # `host.tools` is imported once per session: the next turn only calls.
        second = s.run("from host import tools\ntools.add(10, 20)")
        assert second.stdout == b"30\n"
        assert [(o.op, o.tool, o.outcome) for o in second.tools.outcomes] == [("call", "add", "ok")]
        assert second.tools.frames == 1
        # A turn with no call has an empty record, not the last turn's.
        third = s.run("x = 1")
        assert third.tools.frames == 0
        assert third.tools.outcomes == ()
    assert calls == [(1, 2), (10, 20)]


def test_the_tool_budget_is_per_turn():
    @tool
    def ping() -> str:
        return "pong"

    spend = (
        "from host import tools, ToolBudgetExceeded\n"
        "got = []\n"
        "for _ in range(4):\n"
        "    try:\n"
        "        got.append(tools.ping())\n"
        "    except ToolBudgetExceeded:\n"
        "        got.append('over')\n"
        "print(got)"
    )
    with Session(tools=[ping], max_tool_calls=3) as s:
        # Turn 1: the list and two calls use the three frames.
        first = s.run(spend)
        assert first.ok, first.stderr
        assert first.stdout == b"['pong', 'pong', 'over', 'over']\n"
        assert [o.outcome for o in first.tools.outcomes] == ["ok", "ok", "ok", "budget_exceeded", "budget_exceeded"]
        # Turn 2: a fresh budget of three frames, all calls (discovery is cached).
        second = s.run(spend)
        assert second.ok, second.stderr
        assert second.stdout == b"['pong', 'pong', 'pong', 'over']\n"
        # No list frame: discovery is cached. The refused frame is refused unread.
        assert [o.op for o in second.tools.outcomes][:3] == ["call"] * 3
        assert "list" not in [o.op for o in second.tools.outcomes]
        assert [o.outcome for o in second.tools.outcomes] == ["ok", "ok", "ok", "budget_exceeded"]
        assert s.ended is None  # the guest runs on


def test_a_trapped_turn_still_returns_its_tool_record():
    @tool
    def ping() -> str:
        return "pong"

    with Session(tools=[ping]) as s:
        done = s.run("from host import tools\ntools.ping()\nwhile True: pass", deadline_s=0.3)
    assert done.trapped == "deadline"
    assert [o.op for o in done.tools.outcomes] == ["list", "call"]


def test_a_gate_in_a_session_sees_every_call():
    seen = []

    @tool
    def secret(name: str) -> str:
        return "s3cr3t"

    def gate(call):
        seen.append((call.tool, call.arguments))
        return call.arguments["name"] != "root"

    with Session(tools=[secret], gate=gate) as s:
        ok = s.run("from host import tools\ntools.secret('alice')")
        refused = s.run("from host import tools, ToolDenied\ntry:\n    tools.secret('root')\nexcept ToolDenied:\n    print('denied')")
    assert ok.stdout == b"'s3cr3t'\n"
    assert refused.stdout == b"denied\n"
    assert refused.tools.outcomes[-1].outcome == "denied"
    assert seen == [("secret", {"name": "alice"}), ("secret", {"name": "root"})]


def test_a_session_without_tools_has_no_record_and_no_tools(session):
    done = session.run("from host import tools")
    assert done.tools is None
    assert done.exit_code == 1
    assert b"ImportError" in done.stderr or b"ModuleNotFoundError" in done.stderr


# --- grants and env --------------------------------------------------------------------


def test_grants_and_env_in_a_session(tmp_path):
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "in.txt").write_text("input")
    with Session(grants=[Grant(ro, "/in"), Grant(rw, "/out", writable=True)], env={"WHO": "me"}) as s:
        assert s.run("open('/in/in.txt').read()").stdout == b"'input'\n"
        assert s.run("import os\nos.environ['WHO']").stdout == b"'me'\n"
        assert s.run("f = open('/out/log.txt', 'w')\nf.write('one ')\nf.flush()").ok
        assert (rw / "log.txt").read_text() == "one "
        assert s.run("f.write('two')\nf.close()").ok  # an open file carries over
        assert (rw / "log.txt").read_text() == "one two"
        done = s.run("open('/in/new.txt', 'w')")
        assert done.exit_code == 1  # the read-only grant refuses a write
        assert not (ro / "new.txt").exists()
        assert s.ended is None


# --- bad arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "exc", "name"),
    [
        (dict(idle_s=0), ValueError, "idle_s"),
        (dict(idle_s="1"), TypeError, "idle_s"),
        (dict(lifetime_s=-1.0), ValueError, "lifetime_s"),
        (dict(lifetime_s=float("inf")), ValueError, "lifetime_s"),
        (dict(shutdown_s=0), ValueError, "shutdown_s"),
        (dict(deadline_s=float("nan")), ValueError, "deadline_s"),
        (dict(memory_bytes=1024), ValueError, "memory_bytes"),
        (dict(memory_bytes=1.5), TypeError, "memory_bytes"),
        (dict(output_bytes=-1), ValueError, "output_bytes"),
        (dict(fuel=0), ValueError, "fuel"),
        (dict(fuel=True), TypeError, "fuel"),
        (dict(env={"A": 1}), TypeError, "env"),
        (dict(env=["A=1"]), TypeError, "env"),
        (dict(grants="/tmp"), TypeError, "grants"),
        (dict(gate=lambda c: True), TypeError, "gate"),
        (dict(max_tool_calls=5), TypeError, "max_tool_calls"),
    ],
)
def test_session_refuses_bad_arguments(kw, exc, name):
    with pytest.raises(exc, match=name):
        Session(**kw)


def test_session_takes_keywords_only():
    with pytest.raises(TypeError):
        Session(30)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("code", "kw", "exc", "name"),
    [
        (b"1", {}, TypeError, "code"),
        (None, {}, TypeError, "code"),
        ("1", dict(deadline_s=0), ValueError, "deadline_s"),
        ("1", dict(deadline_s="1"), TypeError, "deadline_s"),
        ("1", dict(output_bytes=-5), ValueError, "output_bytes"),
        ("1", dict(output_bytes=2.0), TypeError, "output_bytes"),
        ("1", dict(cancel=object()), TypeError, "cancel"),
    ],
)
def test_run_refuses_bad_arguments_and_the_session_lives_on(session, code, kw, exc, name):
    with pytest.raises(exc, match=name):
        session.run(code, **kw)
    assert session.ended is None
    assert session.run("6 * 7").stdout == b"42\n"


def test_run_async_refuses_bad_arguments(session, arun):
    with pytest.raises(TypeError, match="code"):
        arun(session.run_async(b"1"))
    with pytest.raises(ValueError, match="deadline_s"):
        arun(session.run_async("1", deadline_s=-1))
    assert session.run("1").ok
