"""``run_async``: the same run, awaited. The guest runs on a worker thread of a small
pool, so the event loop stays free and guests run in parallel."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import asyncio

from . import _run
from . import _wasi_python as _ext
from ._cancel import CancelWatch, is_asyncio_event
from ._records import Completed
from ._types import Grant

__all__ = ["run_async", "set_async_workers"]

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_size = min(os.cpu_count() or 1, 8)
_pool_lock = threading.Lock()


def set_async_workers(n: int) -> None:
    """Sets how many guests ``run_async`` runs at once (default: the CPUs, at most 8).

    Runs already started keep their thread; later ones use the new pool.
    """
    global _pool, _pool_size
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_async_workers takes a positive int, not {n!r}")
    with _pool_lock:
        old, _pool, _pool_size = _pool, None, n
    if old is not None:
        old.shutdown(wait=False)


def executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=_pool_size, thread_name_prefix="wasi-python-guest")
        return _pool


async def run_async(
    argv: Sequence[str],
    *,
    stdin: bytes | str = b"",
    env: Optional[Mapping[str, str]] = None,
    grants: Iterable[Grant] = (),
    memory_bytes: int = _run.DEFAULTS["memory_bytes"],
    deadline_s: Optional[float] = _run.DEFAULTS["deadline_s"],
    output_bytes: int = _run.DEFAULTS["output_bytes"],
    fuel: Optional[int] = None,
    cancel: Any = None,
    tools: Optional[Iterable[Any]] = None,
    gate: Any = _run.UNSET,
    max_tool_calls: Any = _run.UNSET,
    max_tool_request_bytes: Any = _run.UNSET,
    host: Any = None,
    file_write_bytes: Optional[int] = _run.DEFAULTS["file_write_bytes"],
    max_open_files: int = _run.DEFAULTS["max_open_files"],
    workdir: Optional[str] = None,
    preload: Optional[Iterable[str]] = None,
    mounts: Iterable[Any] = (),
    max_file_calls: Optional[int] = _run.DEFAULTS["max_file_calls"],
    snapshot: Any = None,
) -> Completed:
    """``await run_async(argv, ...)``: like ``run``, with the same keywords and result.

    Cancelling the awaiting task stops the guest at once (it ends "cancelled"); a tool
    running then is cancelled at its next await (async) or abandoned (sync). Async tools
    and gates run on the event loop that awaits this call.
    """
    import asyncio  # loaded already: an event loop is awaiting this

    plan = _run.make_plan(
        argv, stdin, env, grants, memory_bytes, deadline_s, output_bytes, fuel, cancel,
        tools, gate, max_tool_calls, max_tool_request_bytes, host,
        file_write_bytes, max_open_files, workdir, preload, mounts, max_file_calls, snapshot,
    )
    loop = asyncio.get_running_loop()
    token = _ext.CancelToken()
    watch = _watch(cancel, token, loop)
    fut = loop.run_in_executor(executor(), _run.execute, plan, token, loop)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        token.cancel()
        # The guest stops at its next epoch check; wait for it so nothing runs on.
        try:
            await asyncio.shield(fut)
        except BaseException:  # noqa: BLE001 - we are re-raising the cancellation
            pass
        raise
    finally:
        if watch is not None:
            watch()


def _watch(cancel: Any, token: Any, loop: asyncio.AbstractEventLoop) -> Optional[Callable[[], None]]:
    """Forwards ``cancel=`` (an Event, asyncio.Event, or CancelToken) to the token."""
    if cancel is None:
        return None
    if isinstance(cancel, _ext.CancelToken):
        stop = threading.Event()

        def poll_token() -> None:
            while not stop.wait(0.005):
                if cancel.is_cancelled():
                    token.cancel()
                    return

        threading.Thread(target=poll_token, daemon=True).start()
        return stop.set
    if is_asyncio_event(cancel):
        async def wait_event() -> None:
            await cancel.wait()
            token.cancel()

        task = loop.create_task(wait_event())
        return task.cancel
    if cancel.is_set():
        token.cancel()
        return None
    w = CancelWatch(cancel, token)
    return w.stop
