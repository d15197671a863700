"""Tool calls in parallel from an asyncio program (docs/protocol.md, "Calls in parallel").

A tool called in a coroutine on a running asyncio loop (host.tools decides) comes here:
its call is sent as a `start` frame, which the host answers at once while the tool runs
on a thread of its own, and the caller gets a coroutine that awaits a future of the loop. The loop's selector is
wrapped (once per loop) so that, while calls are in flight, the loop's wait for I/O and
timers is also a `wait` frame for their answers:

- with other work ready (asyncio's select timeout 0) it only asks (`timeout_ms` 0);
- with nothing ready it blocks in the host until an answer comes, bounded by the loop's
  next timer (asyncio's timeout), or by nothing when the loop has no timer;
- with no call in flight it is the loop's own selector.

So no loop spins waiting for the host. The guest has no threads, sockets or signal
handlers, so a file descriptor the loop watches never becomes ready later: the selector
is asked once without waiting before a wait that blocks.

The host runs at most `max_in_flight` calls (its list answer says how many); past that,
calls queue here and start as answers come in. A call whose future is cancelled runs on
in the host; its answer is dropped when it comes. A host that cannot start calls (one
that did not say `max_in_flight`) gets each call synchronously, its future done at once.
"""

from collections import deque as _deque

import _host as _door

import host as _pkg
from host import tools as _tools

# The calls started in the host: {id: (future, tool)}, in start order.
_inflight = {}
# Calls not yet started (the host's cap was reached): (future, tool, body).
_queued = _deque()
# The most ids one wait frame names (the protocol's MAX_WAIT_IDS).
_MAX_WAIT_IDS = 64


def call(loop, tool, args, kwargs):
    """Starts `tool` with these arguments, and gives the coroutine that awaits its answer:
    the call's result, or the exception it raised (argument errors included). A coroutine,
    as an `async def` tool would give: `await`, `asyncio.gather`, `create_task` and task
    groups take it; the call runs whether or not it is awaited."""
    return _awaiting(tool)(_started(loop, tool, args, kwargs))


# {tool name: the coroutine function that awaits its calls, named as the tool}.
_awaiters = {}


async def _await(future):
    return await future


def _awaiting(tool):
    """The coroutine function that awaits a call of `tool`, named as it (so a coroutine
    never awaited is named in Python's warning)."""
    f = _awaiters.get(tool.name)
    if f is None:
        code = _await.__code__.replace(co_name=tool.name, co_qualname=tool.name)
        f = _awaiters[tool.name] = type(_await)(code, globals(), tool.name)
    return f


def _started(loop, tool, args, kwargs):
    """Starts the call: a future of `loop` with its outcome."""
    future = loop.create_future()
    if not _tools._max_in_flight or not _drive(loop):
        # The host runs one call at a time (or the loop is not a selector loop): now.
        try:
            future.set_result(_tools._call(tool, args, kwargs))
        except Exception as e:  # noqa: BLE001 - raised where the call is awaited
            future.set_exception(e)
        return future
    try:
        body = _tools._body(tool, args, kwargs)
    except Exception as e:  # noqa: BLE001 - raised where the call is awaited
        future.set_exception(e)
        return future
    if len(_inflight) >= _tools._max_in_flight:
        _queued.append((future, tool, body))
    else:
        _start(future, tool, body)
    return future


def _drive(loop):
    """Puts the host's answers in `loop`'s wait (once per loop). False for a loop that
    waits in no selector: calls then run synchronously."""
    selector = getattr(loop, "_selector", None)
    if selector is None:
        return False
    if type(selector) is not _Selector:
        loop._selector = _Selector(selector)
    return True


def _settle(future, value=None, error=None):
    """Gives `future` its outcome, unless it is done (cancelled) or its loop closed."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except RuntimeError:  # its loop is closed: nobody awaits it
        pass


def _start(future, tool, body):
    """Sends the `start` frame; the future settles now on a refusal, else when a wait
    brings the answer."""
    rid = _pkg._last_id + 1
    _pkg._last_id = rid
    frame = b'{"v":1,"id":%d,"op":"start","tool":"%s","args":%s}' % (
        rid,
        tool.ascii_name,
        body,
    )
    try:
        raw = _door.call(frame)
    except ConnectionRefusedError:
        _settle(future, error=_pkg.ToolProtocolError("no host is bound to the door"))
        return
    except OSError as e:
        _settle(future, error=_pkg.ToolProtocolError(f"the door failed: {e}"))
        return
    if raw == b'{"v":1,"id":%d,"ok":true,"started":true}' % rid:
        _inflight[rid] = (future, tool)
        return
    try:
        answer = _tools._read(raw, rid, tool.prefix)
        if answer["ok"] is False:
            raise _tools._failure(answer)
        if answer.get("started") is not True:
            raise _pkg.ToolProtocolError(tool.prefix + "the host did not start the call")
    except _pkg.ToolError as e:
        _settle(future, error=e)
        return
    _inflight[rid] = (future, tool)


def _collect(timeout):
    """One `wait` frame for the calls in flight, blocking up to `timeout` seconds (None:
    until an answer comes); settles the futures answered, then starts queued calls."""
    ids = list(_inflight)[:_MAX_WAIT_IDS]
    rid = _pkg._last_id + 1
    _pkg._last_id = rid
    listed = b",".join(b"%d" % i for i in ids)
    if timeout is None:
        frame = b'{"v":1,"id":%d,"op":"wait","ids":[%s]}' % (rid, listed)
    else:
        ms = max(0, int(timeout * 1000 + 0.999))
        frame = b'{"v":1,"id":%d,"op":"wait","ids":[%s],"timeout_ms":%d}' % (rid, listed, ms)
    try:
        raw = _door.call(frame)
        answer = _tools._read(raw, rid, "")
        answers = answer.get("answers")
        if answer["ok"] is False:
            raise _tools._failure(answer)
        if type(answers) is not list:
            raise _pkg.ToolProtocolError("the host's answer to a wait has no answers")
    except (OSError, _pkg.ToolError) as e:
        # The answers it held are lost: the calls waited for fail with why.
        if isinstance(e, OSError):
            e = _pkg.ToolProtocolError(f"the door failed: {e}")
        for i in ids:
            future, _ = _inflight.pop(i)
            _settle(future, error=e)
        _refill()
        return
    for one in answers:
        i = one.get("id") if type(one) is dict else None
        entry = _inflight.pop(i, None) if type(i) is int else None
        if entry is None:
            continue
        future, tool = entry
        try:
            _settle(future, _tools._result(_tools._checked(one, i, tool.prefix), raw, tool.prefix))
        except _pkg.ToolError as e:
            _settle(future, error=e)
    _refill()


def _refill():
    """Starts queued calls while the host has room."""
    while _queued and len(_inflight) < _tools._max_in_flight:
        future, tool, body = _queued.popleft()
        if not future.done():
            _start(future, tool, body)


class _Selector:
    """A loop's selector that also waits for the host's answers while calls are in
    flight (this module's docstring). Everything else is the wrapped selector's."""

    def __init__(self, selector):
        self._selector = selector

    def select(self, timeout=None):
        if not _inflight:
            if _queued:
                _refill()
            if not _inflight:
                return self._selector.select(timeout)
        events = self._selector.select(0) if self._selector.get_map() else []
        _collect(0 if events else timeout)
        return events

    def __getattr__(self, name):
        return getattr(self._selector, name)
