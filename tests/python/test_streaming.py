"""Streaming: `on_stdout`, `on_stderr`, `on_display` on `run`, `Session.run` and their async
forms, and `wasi_python.stream`: called as the guest writes, in its order across the three
streams, and what was streamed is in the `Completed` too. A callback that raises (a
KeyboardInterrupt or SystemExit subclass included) loses no output and is raised after the
run with its `Completed`; a slow one never holds the guest past its deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import wasi_python
from wasi_python import Completed, Display, Session, Stderr, Stdout, run, run_async

# A program that interleaves the three streams, each write flushed (as `host.display` does
# before it sends): o0 e0 d0 o1 e1 d1 ...
INTERLEAVED = """
import _host, json, sys
for i in range(5):
    print(f"o{i}", flush=True)
    print(f"e{i}", file=sys.stderr, flush=True)
    _host.call(b"\\0wasi-python display " + json.dumps({"data": {"text/plain": f"d{i}"}}).encode())
print("end")
"""
EXPECTED = [x for i in range(5) for x in (("out", f"o{i}\n"), ("err", f"e{i}\n"), ("display", f"d{i}"))] + [("out", "end\n")]


class Recorder:
    """The three callbacks, recording what they got in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.threads: set[int] = set()

    def out(self, b: bytes) -> None:
        self.threads.add(threading.get_ident())
        self.events.append(("out", b))

    def err(self, b: bytes) -> None:
        self.events.append(("err", b))

    def display(self, d: Display) -> None:
        self.events.append(("display", d))

    def kw(self) -> dict:
        return {"on_stdout": self.out, "on_stderr": self.err, "on_display": self.display}

    def readable(self) -> list[tuple[str, str]]:
        return [(k, v.data["text/plain"] if isinstance(v, Display) else v.decode()) for k, v in self.events]


def check_against(events: list[tuple[str, object]], done: Completed) -> None:
    """What was streamed is what the Completed holds."""
    assert b"".join(v for k, v in events if k == "out") == done.stdout
    assert b"".join(v for k, v in events if k == "err") == done.stderr
    assert tuple(v for k, v in events if k == "display") == done.displays


def test_run_streams_the_three_in_the_guest_s_order_on_the_calling_thread():
    rec = Recorder()
    done = run(["-c", INTERLEAVED], deadline_s=30, **rec.kw())
    assert done.ok, done.stderr
    assert rec.readable() == EXPECTED
    check_against(rec.events, done)
    assert rec.threads == {threading.get_ident()}
    assert done.truncated == ()


def test_a_session_turn_streams_and_each_turn_its_own():
    rec = Recorder()
    with Session(deadline_s=30) as s:
        done = s.run(INTERLEAVED, **rec.kw())
        assert done.ok, done.stderr
        assert rec.readable() == EXPECTED
        check_against(rec.events, done)
        # A turn without callbacks streams to nobody.
        assert s.run("print('quiet')").stdout == b"quiet\n"
        assert len(rec.events) == len(EXPECTED)
        later = s.run("print('again')", on_stdout=rec.out)
        assert rec.events[-1] == ("out", b"again\n") and later.stdout == b"again\n"


def test_only_what_the_caps_keep_is_streamed():
    got: list[bytes] = []
    done = run(["-c", "print('x' * 100)"], output_bytes=10, on_stdout=got.append)
    assert b"".join(got) == done.stdout == b"x" * 10
    assert done.truncated == ("stdout",)


def test_run_async_awaits_async_callbacks_in_order_before_it_returns():
    events: list[tuple[str, object]] = []

    async def out(b: bytes) -> None:
        await asyncio.sleep(0.01)
        events.append(("out", b))

    async def err(b: bytes) -> None:
        events.append(("err", b))

    def display(d: Display) -> None:  # a sync one, called on the loop
        events.append(("display", d))

    async def main() -> Completed:
        return await run_async(["-c", INTERLEAVED], deadline_s=30, on_stdout=out, on_stderr=err, on_display=display)

    done = asyncio.run(main())
    assert done.ok, done.stderr
    assert [(k, v.data["text/plain"] if isinstance(v, Display) else v.decode()) for k, v in events] == EXPECTED
    check_against(events, done)


def test_run_async_streams_a_run_with_tools_too():
    from wasi_python.tools import tool

    @tool
    def ping() -> str:
        """Answers pong."""
        return "pong"

    got: list[bytes] = []

    async def main() -> Completed:
        return await run_async(["-c", "from host import tools\nprint(tools.ping(), flush=True)\nprint('b')"], tools=[ping], deadline_s=30, on_stdout=got.append)

    done = asyncio.run(main())
    assert done.ok, done.stderr
    assert b"".join(got) == done.stdout == b"pong\nb\n"


def test_session_run_async_streams():
    rec = Recorder()

    async def main() -> Completed:
        with Session(deadline_s=30) as s:
            return await s.run_async(INTERLEAVED, **rec.kw())

    done = asyncio.run(main())
    assert rec.readable() == EXPECTED
    check_against(rec.events, done)


def test_the_iterator_yields_events_then_the_completed():
    async def main() -> list:
        return [ev async for ev in wasi_python.stream(["-c", INTERLEAVED], deadline_s=30)]

    got = asyncio.run(main())
    done = got[-1]
    assert isinstance(done, Completed) and done.ok
    events = got[:-1]
    assert all(isinstance(e, (Stdout, Stderr, Display)) for e in events)
    kinds = {Stdout: "out", Stderr: "err", Display: "display"}
    pairs = [(kinds[type(e)], e if isinstance(e, Display) else e.data) for e in events]
    check_against(pairs, done)
    assert [(k, v.data["text/plain"] if isinstance(v, Display) else v.decode()) for k, v in pairs] == EXPECTED


def test_the_iterator_refuses_callbacks():
    async def main() -> None:
        async for _ in wasi_python.stream(["-c", "pass"], on_stdout=print):
            pass

    with pytest.raises(TypeError, match="on_stdout"):
        asyncio.run(main())


def test_leaving_the_iterator_early_cancels_the_run():
    # Without the cancel, aclose() would wait out the guest's 20 s sleep.
    async def main() -> None:
        gen = wasi_python.stream(["-c", "print('first', flush=True)\nimport time\ntime.sleep(20)"], deadline_s=30)
        async for ev in gen:
            assert ev == Stdout(b"first\n")
            break
        await gen.aclose()

    asyncio.run(main())


class Boom(Exception):
    pass


def test_a_callback_that_raises_is_raised_after_the_run_with_all_its_output():
    calls: list[bytes] = []

    def out(b: bytes) -> None:
        calls.append(b)
        raise Boom("from the callback")

    code = "import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\nprint('c')"
    with pytest.raises(Boom) as info:
        run(["-c", code], deadline_s=30, on_stdout=out, on_stderr=calls.append)
    done = info.value.completed
    # The run went on to its end; nothing was lost; no callback after the one that raised.
    assert done.ok and done.stdout == b"a\nc\n" and done.stderr == b"b\n"
    assert calls == [b"a\n"]


class Interrupt(KeyboardInterrupt):
    pass


class Exit(SystemExit):
    pass


@pytest.mark.parametrize("kind", [Interrupt, Exit, KeyboardInterrupt])
def test_a_callback_raising_a_base_exception_cancels_the_run_and_is_raised_with_it(kind):
    def out(b: bytes) -> None:
        raise kind()

    # Without the cancel the guest would sleep on to its 30 s deadline.
    code = "print('a', flush=True)\nimport time\ntime.sleep(25)\nprint('never')"
    with pytest.raises(kind) as info:
        run(["-c", code], deadline_s=30, on_stdout=out)
    done = info.value.completed
    assert done.trapped == "cancelled"
    assert done.stdout == b"a\n"


def test_an_async_callback_that_raises_is_raised_after_run_async():
    async def out(b: bytes) -> None:
        raise Boom()

    async def main() -> None:
        await run_async(["-c", "print('a', flush=True)\nprint('b')"], deadline_s=30, on_stdout=out)

    with pytest.raises(Boom) as info:
        asyncio.run(main())
    assert info.value.completed.stdout == b"a\nb\n"


def test_a_callback_that_blocks_past_the_deadline_does_not_hold_the_guest():
    # The first callback blocks longer than the run's deadline; the guest writes 8 MiB,
    # which fills the bounded queue, waits out its stall, and ends on its own.
    blocked: list[bool] = []

    def out(b: bytes) -> None:
        if not blocked:
            blocked.append(True)
            time.sleep(5)  # the GIL released; longer than the 4 s deadline

    code = "import sys\nfor i in range(128):\n    sys.stdout.write('x' * 65536)\n    sys.stdout.flush()\nprint('done')"
    done = run(["-c", code], deadline_s=4, output_bytes=16 << 20, on_stdout=out)
    assert done.trapped is None and done.exit_code == 0
    assert done.stdout == b"x" * (8 << 20) + b"done\n"
    assert "stream" in done.truncated


def test_a_slow_async_consumer_of_the_iterator_does_not_hold_the_guest():
    async def main() -> Completed:
        last = None
        async for ev in wasi_python.stream(["-c", "import sys\nfor i in range(64):\n    print('x' * 65536, flush=True)"], deadline_s=4):
            if isinstance(ev, Completed):
                last = ev
            elif last is None:
                await asyncio.sleep(5)
                last = False
        return last

    done = asyncio.run(main())
    assert done.trapped is None and done.exit_code == 0
    assert done.stdout == (b"x" * 65536 + b"\n") * 64


@pytest.mark.parametrize("bad", [1, "print"])
def test_callbacks_are_checked_before_any_work(bad):
    with pytest.raises(TypeError, match="on_stdout"):
        run(["-c", "pass"], on_stdout=bad)


def test_async_callbacks_need_the_async_forms():
    async def out(b: bytes) -> None:
        pass

    with pytest.raises(TypeError, match="run_async"):
        run(["-c", "pass"], on_stdout=out)
    with Session() as s, pytest.raises(TypeError, match="run_async"):
        s.run("pass", on_display=out)


def test_a_run_that_fails_before_its_guest_starts_raises_as_without_callbacks():
    with pytest.raises(wasi_python.PreloadError):
        run(["-c", "pass"], preload=["no_such_module_here"], on_stdout=print)


def test_the_extension_treats_an_interrupt_out_of_on_event_as_ctrl_c():
    # The package's wrapper catches what callbacks raise; a KeyboardInterrupt its own code
    # got from a signal handler reaches the extension, which cancels the run and raises it.
    from wasi_python import _run
    from wasi_python import _wasi_python as _ext

    def on_event(kind: int, payload: bytes) -> None:
        raise KeyboardInterrupt

    code = "print('a', flush=True)\nimport time\ntime.sleep(25)"
    options = _run.ext_options(_run.check_settings(deadline_s=30))
    token = _ext.CancelToken()
    with pytest.raises(KeyboardInterrupt):
        _ext.run(_run.plain_where(), ["-c", code], b"", options, token, _ext.EventStream(), on_event)
    assert token.is_cancelled()


def test_the_extension_reports_an_exception_out_of_on_event_and_goes_on(monkeypatch):
    import sys

    from wasi_python import _run
    from wasi_python import _wasi_python as _ext

    def on_event(kind: int, payload: bytes) -> None:
        raise ValueError("not the run's")

    reported: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))
    options = _run.ext_options(_run.check_settings(deadline_s=30))
    out = _ext.run(_run.plain_where(), ["-c", "print('a', flush=True)\nprint('b')"], b"", options, None, _ext.EventStream(), on_event)
    assert out.stdout == b"a\nb\n"
    assert reported and set(reported) == {ValueError}
